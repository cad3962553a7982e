"""onnxruntime's quantized ops (frontends/onnx/ops/contrib_quant.py, contrib_qmatmul.py) and the integer
matmul/conv paths, one node each, odd shapes, optional inputs absent and present: compiled vs the numpy
interpreter vs onnxruntime. Integer outputs must equal onnxruntime's except where its kernel is fixed-point
(QLinearAdd/QLinearMul on AVX2+: `steps=1`, at most one quantization step); float outputs within 1e-4."""
from __future__ import annotations

import numpy as np
import pytest

from frontends import OnnxImportError, from_onnx
from harness import node_model, three_way

F32, I32, U8, I8 = np.float32, np.int32, np.uint8, np.int8


def q(rng, dtype, *shape):
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, shape).astype(dtype)


def params(name, dtype, scale, zp):
    return [(f"{name}_s", np.float32(scale)), (f"{name}_z", dtype(zp))]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_binary_broadcast(op, dtype):
    rng = np.random.default_rng(0)
    zp = 120 if dtype == U8 else -5
    inputs = [("a", dtype, [2, 3, 7]), *params("a", dtype, 0.05, zp), ("b", dtype, [7]),
              *params("b", dtype, 0.03, zp + 3), *params("c", dtype, 0.07 if op == "QLinearAdd" else 0.2, zp - 2)]
    three_way(node_model(op, inputs, outputs=[("y", dtype)]), {"a": q(rng, dtype, 2, 3, 7), "b": q(rng, dtype, 7)},
              steps=1)


@pytest.mark.parametrize("op, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.2})])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_activations(op, attrs, dtype):
    rng = np.random.default_rng(2)
    zp = 128 if dtype == U8 else 0
    inputs = [("x", dtype, [3, 11]), *params("x", dtype, 0.04, zp), *params("y", dtype, 1 / 255 if op ==
                                                                                  "QLinearSigmoid" else 0.03, zp // 2)]
    three_way(node_model(op, inputs, outputs=[("y", dtype)], attrs=attrs), {"x": q(rng, dtype, 3, 11)})


@pytest.mark.parametrize("opset, axis", [(13, -1), (13, 1), (12, 1)])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_softmax(opset, axis, dtype):
    rng = np.random.default_rng(3)
    inputs = [("x", dtype, [2, 5, 6]), *params("x", dtype, 0.1, 3), *params("y", dtype, 1 / 256,
                                                                           0 if dtype == U8 else -128)]
    three_way(node_model("QLinearSoftmax", inputs, outputs=[("y", dtype)], attrs={"opset": opset, "axis": axis}),
              {"x": q(rng, dtype, 2, 5, 6)})


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(channels_last):
    rng = np.random.default_rng(4)
    shape = [2, 5, 7, 3] if channels_last else [2, 3, 5, 7]
    inputs = [("x", U8, shape), *params("x", U8, 0.05, 100), *params("y", U8, 0.02, 90)]
    three_way(node_model("QLinearGlobalAveragePool", inputs, outputs=[("y", U8)],
                         attrs={"channels_last": channels_last}), {"x": q(rng, U8, *shape)})


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
                                   dict(kernel_shape=[2, 3], count_include_pad=1, pads=[1, 0, 1, 1], ceil_mode=1,
                                        strides=[2, 2]),
                                   dict(kernel_shape=[3, 3], channels_last=1)])
def test_qlinear_average_pool(attrs):
    rng = np.random.default_rng(5)
    shape = [1, 7, 9, 4] if attrs.get("channels_last") else [1, 4, 7, 9]
    inputs = [("x", I8, shape), *params("x", I8, 0.05, 3), *params("y", I8, 0.04, -2)]
    three_way(node_model("QLinearAveragePool", inputs, outputs=[("y", I8)], attrs=attrs), {"x": q(rng, I8, *shape)})


def test_qlinear_concat_requantizes_only_differing_inputs():
    rng = np.random.default_rng(6)
    inputs = [*params("y", U8, 0.05, 128), ("a", U8, [1, 2, 3]), *params("a", U8, 0.05, 128),
              ("b", U8, [1, 4, 3]), *params("b", U8, 0.11, 100)]
    three_way(node_model("QLinearConcat", inputs, outputs=[("y", U8)], attrs={"axis": 1}),
              {"a": q(rng, U8, 1, 2, 3), "b": q(rng, U8, 1, 4, 3)})


def test_qlinear_where():
    rng = np.random.default_rng(7)
    inputs = [("c", np.bool_, [3, 4]), ("x", U8, [3, 4]), *params("x", U8, 0.1, 120), ("y", U8, [4]),
              *params("y", U8, 0.05, 130), *params("z", U8, 0.08, 125)]
    three_way(node_model("QLinearWhere", inputs, outputs=[("z", U8)]),
              {"c": rng.random((3, 4)) < 0.5, "x": q(rng, U8, 3, 4), "y": q(rng, U8, 4)})


@pytest.mark.parametrize("domain, attrs, per_channel, bias", [
    ("", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True, True),
    ("", dict(kernel_shape=[3, 2], strides=[2, 1], group=2), False, False),
    ("com.microsoft", dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], channels_last=1), True, True),
])
def test_qlinear_conv(domain, attrs, per_channel, bias):
    rng = np.random.default_rng(8)
    cin, cout, groups = 4, 6, attrs.get("group", 1)
    kh, kw = attrs["kernel_shape"]
    shape = [1, 7, 9, cin] if attrs.get("channels_last") else [1, cin, 7, 9]
    w_scale = (rng.random(cout) * 0.02 + 0.01).astype(F32) if per_channel else np.float32(0.02)
    inputs = [("x", U8, shape), *params("x", U8, 0.03, 110), ("w", q(rng, I8, cout, cin // groups, kh, kw)),
              ("w_s", w_scale), ("w_z", np.zeros(cout, I8) if per_channel else I8(0)), *params("y", U8, 0.4, 100),
              ("b", rng.integers(-500, 500, cout).astype(I32)) if bias else None]
    while inputs[-1] is None:
        inputs.pop()
    three_way(node_model("QLinearConv", inputs, outputs=[("y", U8)], attrs=attrs, domain=domain),
              {"x": q(rng, U8, *shape)})


def test_nhwc_max_pool():
    rng = np.random.default_rng(9)
    model = node_model("NhwcMaxPool", [("x", I8, [1, 7, 6, 5])], outputs=[("y", I8)],
                       attrs=dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0]))
    three_way(model, {"x": q(rng, I8, 1, 7, 6, 5)})


# ---- integer matrix products ----

def test_integer_matmul_and_conv_with_constant_weights_stay_exact():
    """MatMulInteger with a constant 2-D weight under a 3-D input (once refused by nn.matmul_pack) and a 3x3
    ConvInteger wide enough for Winograd (which would go through fractions): int32 results equal onnxruntime's."""
    rng = np.random.default_rng(10)
    model = node_model("MatMulInteger", [("a", U8, [2, 5, 24]), ("b", q(rng, I8, 24, 40)), ("az", U8(130))],
                       outputs=[("y", I32)], domain="")
    three_way(model, {"a": q(rng, U8, 2, 5, 24)})
    model = node_model("ConvInteger", [("x", U8, [1, 32, 12, 12]), ("w", q(rng, I8, 32, 32, 3, 3)), ("xz", U8(128))],
                       outputs=[("y", I32)], attrs=dict(pads=[1, 1, 1, 1]), domain="")
    three_way(model, {"x": q(rng, U8, 1, 32, 12, 12)})


@pytest.mark.parametrize("quantized_out, trans_b, with_c", [(False, 1, True), (True, 0, False), (True, 1, True)])
def test_qgemm(quantized_out, trans_b, with_c):
    rng = np.random.default_rng(11)
    m, k, n = 3, 10, 7
    b_shape = (n, k) if trans_b else (k, n)
    inputs = [("a", U8, [m, k]), *params("a", U8, 0.02, 120), ("b", q(rng, I8, *b_shape)),
              ("b_s", (rng.random(n) * 0.01 + 0.005).astype(F32)), ("b_z", np.zeros(n, I8)),
              ("c", rng.integers(-300, 300, n).astype(I32)) if with_c else None]
    if quantized_out:
        inputs += params("y", U8, 0.05, 128)
    model = node_model("QGemm", inputs, outputs=[("y", U8 if quantized_out else F32)],
                       attrs={"transB": trans_b, "alpha": 0.75})
    three_way(model, {"a": q(rng, U8, m, k)})


def test_dynamic_quantize_matmul_and_matmul_integer_to_float():
    rng = np.random.default_rng(12)
    w = q(rng, I8, 9, 6)
    model = node_model("DynamicQuantizeMatMul", [("a", F32, [2, 4, 9]), ("b", w), ("b_s", np.float32(0.01)), None,
                                                 ("bias", rng.standard_normal(6).astype(F32))])
    three_way(model, {"a": rng.standard_normal((2, 4, 9)).astype(F32)})
    model = node_model("MatMulIntegerToFloat", [("a", U8, [4, 9]), ("b", w), ("a_s", np.float32(0.02)),
                                                ("b_s", (rng.random(6) * 0.02).astype(F32)), ("a_z", U8(100)),
                                                ("b_z", np.zeros(6, I8))])
    three_way(model, {"a": q(rng, U8, 4, 9)})


@pytest.mark.parametrize("bits, k, with_zp, with_bias", [(4, 40, True, True), (8, 32, False, False),
                                                         (4, 16, False, True)])
def test_matmul_nbits(bits, k, with_zp, with_bias):
    rng = np.random.default_rng(13)
    n, block = 5, 16
    blocks = -(-k // block)
    per_byte = 8 // bits
    packed = rng.integers(0, 256, (n, blocks, block // per_byte)).astype(U8)
    inputs = [("a", F32, [3, k]), ("b", packed), ("s", (rng.random((n, blocks)) * 0.1).astype(F32)),
              ("zp", rng.integers(0, 256, (n, -(-blocks // per_byte))).astype(U8)) if with_zp else None, None,
              ("bias", rng.standard_normal(n).astype(F32)) if with_bias else None]
    while inputs[-1] is None:
        inputs.pop()
    model = node_model("MatMulNBits", inputs, attrs=dict(K=k, N=n, bits=bits, block_size=block))
    three_way(model, {"a": rng.standard_normal((3, k)).astype(F32)})


def test_qattention():
    rng = np.random.default_rng(14)
    b, s, h, heads = 2, 4, 8, 2
    inputs = [("x", U8, [b, s, h]), ("w", q(rng, I8, h, 3 * h)), ("bias", rng.standard_normal(3 * h).astype(F32)),
              ("xs", np.float32(0.05)), ("ws", np.float32(0.02)), ("m", I32, [b]), ("xz", U8(128))]
    model = node_model("QAttention", inputs, attrs={"num_heads": heads})
    three_way(model, {"x": q(rng, U8, b, s, h), "m": np.array([3, 4], I32)})


# ---- refusals ----

@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("QLinearAdd", [("a", U8, [3]), ("as", np.ones(3, F32)), None, ("b", U8, [3]), ("bs", F32(1)), None,
                    ("cs", F32(1))], {}, r"A's scale must be one float32 value \(per-tensor quantization\)"),
    ("QLinearAdd", [("a", F32, [3]), ("as", F32(1)), None, ("b", F32, [3]), ("bs", F32(1)), None, ("cs", F32(1))],
     {}, "input A must be int8 or uint8, got float32"),
    ("MatMulNBits", [("a", F32, [2, 16]), ("b", np.zeros((4, 1, 6), U8)), ("s", np.ones((4, 1), F32))],
     dict(K=16, N=4, bits=3, block_size=16), "bits must be 2, 4 or 8, got 3"),
    ("QLinearConv", [("x", U8, [1, 2, 5]), *params("x", U8, 1, 0), ("w", np.zeros((2, 2, 3), I8)),
                     *params("w", I8, 1, 0), *params("y", U8, 1, 0)], {}, "only 2-D QLinearConv"),
])
def test_bad_quantized_nodes_are_refused_by_name(op, inputs, attrs, message):
    with pytest.raises(OnnxImportError, match=rf"node '{op}_node' \({op}\): .*{message}"):
        from_onnx(node_model(op, inputs, outputs=[("y", U8)], attrs=attrs))

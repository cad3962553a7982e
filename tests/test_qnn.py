"""Integer products of quantized models (relayish/ops/qnn.py, frontends/onnx/ops/integer.py): ConvInteger and
MatMulInteger over every mix of uint8 / int8 operands, zero points absent, per tensor, per output channel and per
row, odd shapes, groups, strides, padding and dilation; compiled vs the numpy interpreter vs onnxruntime (onnx's
reference where onnxruntime has no kernel for the types). int32 results must be equal: the products are exact.
The import's form (uint8 data x int8 weights, only the zero-point terms that are not zero) is checked too."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import compiler.codegen.intdot as intdot
from relayish_tools.bench.native import NativeKernels
from compiler.codegen import emit_assembly, emit_llvm_ir, vector_width
from compiler.default_schedule import default_schedule
from compiler.lower import lower
from compiler.task import build_task
from frontends import from_onnx
from harness import assert_close, case_id, node_model, random_feeds, run_ort_or_none, run_reference, three_way
from relayish.expr import Attrs, Call, Constant, Function, TensorType, Var, call, post_order
from relayish.interp import evaluate
from compiler.passes import PassContext, run_pipeline

I32, U8, I8 = np.int32, np.uint8, np.int8
NAMES = {U8: "u8", I8: "s8"}


def q(rng, dtype, *shape):
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, shape).astype(dtype)


def ort_or_onnx(model, feeds):
    """onnxruntime, or onnx's reference for the type mixes onnxruntime has no kernel for."""
    out = run_ort_or_none(model, feeds)
    return out if out is not None else run_reference(model, feeds)


def conv_id(case):
    x, w, xz, wz, attrs, xs, ws = case
    return case_id((f"{NAMES[x]}x{NAMES[w]}", f"xz={xz}", f"wz={wz}", attrs, xs, ws))


def matmul_id(case):
    a, sa, b, sb, const, az, bz = case
    return case_id((f"{NAMES[a]}x{NAMES[b]}", sa, sb, "const" if const else "input", f"az={az}", f"bz={bz}"))


def calls(model) -> list[str]:
    return [n.op for n in post_order(from_onnx(model).main.body) if isinstance(n, Call)]


# ---- ConvInteger ----

CONV_CASES = [
    # (x dtype, w dtype, x zero point, w zero point: None, "scalar" or "channel", attrs, x shape, w shape)
    (U8, I8, 131, None, dict(pads=[1, 1, 1, 1]), (1, 16, 9, 11), (24, 16, 3, 3)),
    (U8, I8, 7, "scalar", dict(strides=[2, 2], pads=[1, 0, 2, 1]), (2, 5, 10, 9), (6, 5, 3, 3)),
    (U8, U8, 200, "channel", dict(pads=[2, 2, 2, 2], dilations=[2, 1]), (1, 8, 8, 7), (12, 8, 3, 2)),
    (I8, I8, -3, "channel", dict(group=2, pads=[1, 1, 1, 1]), (1, 12, 6, 7), (10, 6, 3, 3)),
    (I8, U8, None, "scalar", dict(), (1, 3, 5, 5), (4, 3, 1, 1)),
    (U8, I8, None, None, dict(group=3, strides=[1, 2]), (1, 9, 7, 8), (9, 3, 2, 3)),
]


def _zero_point(rng, kind, dtype, channels):
    if kind is None:
        return None
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, () if kind == "scalar" else (channels,)).astype(dtype)


@pytest.mark.parametrize("case", CONV_CASES, ids=conv_id)
def test_conv_integer_three_way(case):
    x_dtype, w_dtype, x_zp, w_zp, attrs, x_shape, w_shape = case
    rng = np.random.default_rng(1)
    inputs = [("x", x_dtype, list(x_shape)), ("w", q(rng, w_dtype, *w_shape)),
              ("xz", x_dtype(x_zp)) if x_zp is not None else None]
    wz = _zero_point(rng, w_zp, w_dtype, w_shape[0])
    if wz is not None:
        inputs = (inputs if inputs[-1] is not None else inputs[:-1] + [None]) + [("wz", wz)]
    while inputs[-1] is None:
        inputs.pop()
    model = node_model("ConvInteger", inputs, outputs=[("y", I32)], attrs=attrs, domain="")
    three_way(model, {"x": q(rng, x_dtype, *x_shape)}, reference=ort_or_onnx)


def test_conv_integer_with_a_run_time_weight():
    rng = np.random.default_rng(2)
    model = node_model("ConvInteger", [("x", U8, [1, 4, 6, 6]), ("w", I8, [5, 4, 3, 3]), ("xz", U8(9)),
                                       ("wz", I8(-2))], outputs=[("y", I32)], attrs=dict(pads=[1, 1, 1, 1]),
                       domain="")
    three_way(model, {"x": q(rng, U8, 1, 4, 6, 6), "w": q(rng, I8, 5, 4, 3, 3)}, reference=run_reference)


def test_symmetric_int8_weights_import_as_one_uint8_product():
    """quantize_dynamic's form (uint8 data, int8 weights of zero point 0): one qnn.conv2d on the uint8 input, and
    only the data zero point's term after it (folded: both are constants here). int8 data goes in as it is: the
    packed kernel reads it as x + 128 (its top bit flipped as it loads) and 128 x the weight sums come off after."""
    w = np.ones((4, 3, 3, 3), I8)
    model = node_model("ConvInteger", [("x", U8, [1, 3, 5, 5]), ("w", w), ("xz", U8(3)), ("wz", I8(0))],
                       outputs=[("y", I32)], domain="")
    assert calls(model) == ["qnn.conv2d", "subtract"]  # minus the constant zx * (sum of each channel's weights)
    model = node_model("ConvInteger", [("x", I8, [1, 3, 5, 5]), ("w", w)], outputs=[("y", I32)], domain="")
    assert calls(model) == ["qnn.conv2d"]
    assert kernels(model)[1] == ("qnn.conv2d_nchwc", "subtract")


# ---- MatMulInteger ----

MATMUL_CASES = [
    # (a dtype, a shape, b dtype, b shape, b constant, a zero point: None/"scalar"/"row", b zero point)
    (U8, (2, 5, 24), I8, (24, 40), True, "scalar", None),
    (U8, (7, 13), U8, (13, 9), True, "row", "column"),
    (I8, (3, 4, 10), I8, (10, 6), True, "scalar", "scalar"),
    (I8, (11,), U8, (11, 5), True, None, "column"),
    (U8, (2, 3, 8), I8, (2, 8, 5), False, "scalar", "scalar"),
    (U8, (4, 9), U8, (9,), True, "row", "scalar"),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=matmul_id)
def test_matmul_integer_three_way(case):
    a_dtype, a_shape, b_dtype, b_shape, b_const, a_zp, b_zp = case
    rng = np.random.default_rng(3)
    b = q(rng, b_dtype, *b_shape)
    rows, cols = (a_shape[-2] if len(a_shape) > 1 else 1), (b_shape[-1] if len(b_shape) > 1 else 1)
    az = None if a_zp is None else _zero_point(rng, "scalar" if a_zp == "scalar" else "channel", a_dtype, rows)
    bz = None if b_zp is None else _zero_point(rng, "scalar" if b_zp == "scalar" else "channel", b_dtype, cols)
    inputs = [("a", a_dtype, list(a_shape)), ("b", b) if b_const else ("b", b_dtype, list(b_shape)),
              ("az", az) if az is not None else None, ("bz", bz) if bz is not None else None]
    while inputs[-1] is None:
        inputs.pop()
    feeds = {"a": q(rng, a_dtype, *a_shape)}
    if not b_const:
        feeds["b"] = b
    def per_row(model, feeds):  # neither onnxruntime nor onnx's reference takes a per-row zero point (the spec does)
        a = feeds["a"].astype(np.int64) - az.astype(np.int64)[:, None]
        return [(a @ (b.astype(np.int64) - (0 if bz is None else bz.astype(np.int64)))).astype(I32)]
    three_way(node_model("MatMulInteger", inputs, outputs=[("y", I32)], domain=""), feeds,
              reference=per_row if a_zp == "row" else ort_or_onnx)


# ---- the int8 kernels: packed layouts, vpdpbusd and its fallback ----

def test_constant_int8_weights_take_the_packed_int8_ops():
    """ConvInteger / MatMulInteger with constant weights run as qnn.conv2d_nchwc / qnn.matmul_pack (RGB input
    channels padded to a word), their zero-point terms fused after them; a depthwise one as
    qnn.depthwise_conv2d_nchwc (lanes on channels), one whose channels fit no block of 4 keeps the generic qnn.conv2d."""
    rng = np.random.default_rng(4)
    conv = node_model("ConvInteger", [("x", U8, [1, 3, 9, 9]), ("w", q(rng, I8, 16, 3, 3, 3)), ("xz", U8, [])],
                      outputs=[("y", I32)], attrs=dict(pads=[1, 1, 1, 1]), domain="")
    depthwise = node_model("ConvInteger", [("x", U8, [1, 8, 9, 9]), ("w", q(rng, I8, 8, 1, 3, 3))],
                           outputs=[("y", I32)], attrs=dict(group=8), domain="")
    odd_depthwise = node_model("ConvInteger", [("x", U8, [1, 6, 9, 9]), ("w", q(rng, I8, 6, 1, 3, 3))],
                               outputs=[("y", I32)], attrs=dict(group=6), domain="")
    matmul = node_model("MatMulInteger", [("a", U8, [2, 5, 13]), ("b", q(rng, I8, 13, 21)), ("az", U8, [])],
                        outputs=[("y", I32)], domain="")
    assert fused_ops(conv) >= {"qnn.conv2d_nchwc", "nn.pad_channels"} and "qnn.conv2d" not in fused_ops(conv)
    assert "qnn.depthwise_conv2d_nchwc" in fused_ops(depthwise) and "qnn.conv2d" not in fused_ops(depthwise)
    assert "qnn.conv2d" in fused_ops(odd_depthwise) and "qnn.depthwise_conv2d_nchwc" not in fused_ops(odd_depthwise)
    assert "qnn.matmul_pack" in fused_ops(matmul)
    three_way(conv, {"x": q(rng, U8, 1, 3, 9, 9), "xz": np.array(201, U8)})
    three_way(depthwise, {"x": q(rng, U8, 1, 8, 9, 9)})
    three_way(odd_depthwise, {"x": q(rng, U8, 1, 6, 9, 9)})
    three_way(matmul, {"a": q(rng, U8, 2, 5, 13), "az": np.array(3, U8)})


ROW_CASES = [  # (x dtype, x zero point, attrs, x shape, w shape): fewer than 4 input channels, 2+ columns
    (U8, 131, dict(strides=[2, 2], pads=[3, 3, 3, 3]), (1, 3, 23, 21), (16, 3, 7, 7)),  # ResNet-18's conv1
    (U8, 7, dict(pads=[1, 2, 0, 1]), (2, 1, 9, 11), (8, 1, 3, 3)),
    (I8, -5, dict(strides=[1, 3], dilations=[2, 1], pads=[2, 0, 1, 2]), (1, 2, 12, 17), (24, 2, 3, 5)),
    (I8, None, dict(strides=[2, 1]), (1, 3, 10, 9), (4, 3, 2, 5)),
]


@pytest.mark.parametrize("case", ROW_CASES, ids=lambda c: case_id((NAMES[c[0]], f"xz={c[1]}", c[2], c[3], c[4])))
def test_few_input_channels_run_over_nhwc_rows(case):
    """1-3 input channels, a kernel 2+ columns wide: qnn.conv2d_rows reads each kernel row's columns x channels
    as one run of bytes of the NHWC row (layout.int8_conv_rows); strides, a row dilation, asymmetric pads, int8
    and uint8 data three ways."""
    x_dtype, x_zp, attrs, x_shape, w_shape = case
    rng = np.random.default_rng(5)
    inputs = [("x", x_dtype, list(x_shape)), ("w", q(rng, I8, *w_shape))]
    if x_zp is not None:
        inputs.append(("xz", x_dtype(x_zp)))
    model = node_model("ConvInteger", inputs, outputs=[("y", I32)], attrs=attrs, domain="")
    ops = fused_ops(model)
    assert "qnn.conv2d_rows" in ops and not {"qnn.conv2d", "qnn.conv2d_nchwc"} & ops
    three_way(model, {"x": q(rng, x_dtype, *x_shape)}, reference=ort_or_onnx)


DEPTHWISE_CASES = [  # (x dtype, x zero point, attrs, x shape (channels = groups), kernel)
    (U8, 131, dict(pads=[1, 1, 1, 1]), (1, 32, 9, 11), 3),
    (U8, 7, dict(strides=[2, 2], pads=[1, 0, 2, 1]), (2, 24, 13, 10), 3),
    (I8, -3, dict(pads=[2, 2, 2, 2], dilations=[2, 1]), (1, 20, 8, 7), 5),
    (I8, None, dict(strides=[1, 2]), (1, 12, 7, 8), 3),
    (U8, 255, dict(pads=[3, 3, 3, 3]), (1, 48, 5, 6), 7),
]


@pytest.mark.parametrize("case", DEPTHWISE_CASES,
                         ids=lambda c: case_id((NAMES[c[0]], f"xz={c[1]}", c[2], c[3], f"k{c[4]}")))
def test_depthwise_conv_integer_runs_blocked_three_way(case):
    """Depthwise ConvInteger (MobileNetV2's 3x3, strided, padded with the zero point, dilated, int8 data read as it
    is) in qnn.depthwise_conv2d_nchwc, equal to onnxruntime's (onnx's reference for int8 data) and the
    interpreter's int32 results."""
    x_dtype, x_zp, attrs, x_shape, k = case
    rng = np.random.default_rng(5)
    c = x_shape[1]
    inputs = [("x", x_dtype, list(x_shape)), ("w", q(rng, I8, c, 1, k, k))]
    inputs += [("xz", x_dtype(x_zp))] if x_zp is not None else []
    model = node_model("ConvInteger", inputs, outputs=[("y", I32)], attrs=dict(attrs, group=c), domain="")
    assert "qnn.depthwise_conv2d_nchwc" in fused_ops(model)
    three_way(model, {"x": q(rng, x_dtype, *x_shape)}, reference=ort_or_onnx)


def kernels(model) -> list[tuple[str, ...]]:
    """The ops of each kernel of the model after the compiler's passes."""
    fused = run_pipeline(from_onnx(model), PassContext(vector_width=vector_width()))
    return [tuple(n.op for n in post_order(f.op.body) if isinstance(n, Call))
            for f in post_order(fused.main.body) if isinstance(f, Call) and not isinstance(f.op, str)]


def fused_ops(model) -> set[str]:
    return {op for kernel in kernels(model) for op in kernel}


def conv_kernel_task(ic, oc, size, kernel, stride, pad, ib, ob, groups=1, dtype="uint8"):
    """qnn.conv2d_nchwc minus the zero point's term, cast to float and scaled (a dynamic model's epilogue)."""
    x = Var("x", TensorType((1, ic // ib, *size, ib), dtype))
    w = Var("w", TensorType((oc // ob, ic // groups // ib, kernel, kernel, ib // 4, ob), "int32"))
    zp = Var("zp", TensorType((), dtype))
    corr = Var("corr", TensorType((1, oc // ob, 1, 1, ob), "int32"))
    acc = call("qnn.conv2d_nchwc", x, w, zp, strides=(stride, stride), padding=(pad,) * 4, groups=groups)
    y = call("multiply", call("cast", call("subtract", acc, corr), dtype="float32"), Var("s", TensorType(())))
    return build_task(Function((x, w, zp, corr, y.args[1]), y, Attrs(Primitive=1)))


def rows_kernel_task(channels, oc, height, width, kh, words, stride, dtype="uint8"):
    """qnn.conv2d_rows (a kernel row's columns x channels as `words` words of the NHWC row) through the same
    float epilogue; the rows hold the last column's last word."""
    row = (width - 1) * stride * channels + 4 * words + 3
    x = Var("x", TensorType((1, height, row), dtype))
    w = Var("w", TensorType((oc // 16, 1, kh, 1, words, 16), "int32"))
    acc = call("qnn.conv2d_rows", x, w, strides=(stride, stride), channels=channels, width=width)
    y = call("multiply", call("cast", acc, dtype="float32"), Var("s", TensorType(())))
    return build_task(Function((x, w, y.args[1]), y, Attrs(Primitive=1)))


def matmul_kernel_task(rows, k, n, nb, dtype="uint8"):
    x = Var("x", TensorType(rows + (k,), dtype))
    w = Var("w", TensorType((-(-n // nb), -(-k // 4), nb), "int32"))
    acc = call("qnn.matmul_pack", x, w, **({"units": n} if n % nb else {}))
    return build_task(Function((x, w), call("nn.relu", acc), Attrs(Primitive=1)))


KERNELS = {
    "conv3x3_pad1": lambda: conv_kernel_task(32, 48, (7, 9), 3, 1, 1, 16, 16),
    "conv3x3_s2_blocks8x4": lambda: conv_kernel_task(24, 12, (11, 10), 3, 2, 1, 8, 4),
    "conv1x1": lambda: conv_kernel_task(64, 32, (5, 13), 1, 1, 0, 16, 16),
    "conv_grouped": lambda: conv_kernel_task(16, 16, (6, 6), 3, 1, 1, 8, 8, groups=2),
    "conv3x3_int8_data": lambda: conv_kernel_task(16, 32, (6, 7), 3, 1, 1, 16, 16, dtype="int8"),
    "matmul_int8_data": lambda: matmul_kernel_task((9,), 20, 40, 16, dtype="int8"),
    "conv7x7_s2_rgb_padded": lambda: conv_kernel_task(4, 16, (19, 21), 7, 2, 3, 4, 16),
    "matmul_tiles": lambda: matmul_kernel_task((2, 7), 13, 21, 16),
    "matmul_gpt": lambda: matmul_kernel_task((1, 16), 64, 96, 32),
    "dense_batch1": lambda: matmul_kernel_task((1,), 100, 1000, 8),
    "rows7x7_s2_rgb": lambda: rows_kernel_task(3, 32, 21, 9, 7, 6, 2),
    "rows3x3_gray_int8": lambda: rows_kernel_task(1, 16, 7, 13, 3, 1, 1, dtype="int8"),
}


def kernel_inputs(task, rng):
    out = []
    for p in task.func.params:
        shape, dtype = tuple(p.type.shape), p.type.dtype
        if dtype == "float32":
            out.append(np.asarray(rng.random(shape) * 0.01 + 0.001, np.float32))
        else:
            info = np.iinfo(dtype)
            out.append(rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype))
    return out


@pytest.mark.parametrize("vnni", [True, False], ids=["vnni", "fallback"])
@pytest.mark.parametrize("case", list(KERNELS))
def test_int8_kernels_match_the_reference_exactly(case, vnni, monkeypatch):
    """Default schedules of the packed int8 ops, compiled with vpdpbusd and with the widening fallback: the int32
    sums (through an exact float epilogue: values below 2^24 times a power-of-two-free scale, compared bitwise with
    the interpreter's) equal the numpy reference; the VNNI build has vpdpbusd in its inner loop and the fallback
    none."""
    if vnni and not intdot.host_vnni_lanes():
        pytest.skip("the host has no AVX-512 VNNI or AVX-VNNI: vpdpbusd cannot run here (the fallback is tested)")
    monkeypatch.setattr(intdot, "USE_VNNI", vnni)
    task = KERNELS[case]()
    func = lower(default_schedule(task.initial_state(), vector_width()).apply(task.initial_state()), "k")
    inputs = kernel_inputs(task, np.random.default_rng(len(case)))
    lib = NativeKernels([func])
    lib.set_threads(2)
    args = lib.arguments("k", inputs)
    lib.caller("k", args)()
    lib.idle()
    ref = evaluate(task.func, inputs)[0]
    np.testing.assert_array_equal(args[len(inputs)], ref)
    assert ("vpdpbusd" in emit_assembly([func])) == vnni
    if vnni:  # a data word is one 4-byte load, not four byte loads combined (LLVM's SLP vectorizer made those
        # gathers of addresses: a 32 -> 16 channel 1x1 convolution at 82 GOP/s)
        assert re.search(r"load i32, i32\* .*align 1\b", emit_llvm_ir([func], optimized=False))


# ---- models quantized by onnxruntime's quantize_dynamic ----
# A dynamically quantized model's output is not a continuous function of its float values: each
# DynamicQuantizeLinear rounds x / scale, and a value that differs in its last bit (a batch norm folded into the
# convolution's epilogue, a multiply-add contracted into an FMA) can land one quantization step away, which then
# moves every output it feeds. onnxruntime itself does this: ResNet-18's logits moved by 8.3e-3 of their largest
# magnitude when its input moved by one ulp (np.nextafter; onnxruntime 1.x, seed 1). Deep models are therefore held
# to DYNAMIC_RTOL of onnxruntime's output and the same top-1 class; the small ones (few flips) to the project's
# 1e-4; and every integer op exactly, one node at a time, above.
DYNAMIC_RTOL = 2e-2


@pytest.fixture(scope="module")
def quantize_dynamic():
    pytest.importorskip("onnxruntime.quantization")
    from onnxruntime.quantization import quantize_dynamic as quantize
    return quantize


def _quantized(quantize, model_or_path, tmp_path, name):
    import onnx
    src = tmp_path / f"{name}.onnx"
    if isinstance(model_or_path, onnx.ModelProto):
        onnx.save(model_or_path, src)
    else:
        src = model_or_path
    out = tmp_path / f"{name}_qd.onnx"
    quantize(str(src), str(out))
    return onnx.load(str(out))


def _int_feeds(model, seed):
    rng = np.random.default_rng(seed)
    return {i.name: rng.integers(0, 40, [d.dim_value for d in i.type.tensor_type.shape.dim])
            for i in model.graph.input if i.type.tensor_type.elem_type == 7}


@pytest.mark.parametrize("name", ["mobilenet_v2", "gpt"])
def test_small_dynamically_quantized_models_match_onnxruntime(name, quantize_dynamic, tmp_path):
    """MobileNetV2 (depthwise ConvInteger: the generic kernel; 1x1: packed) and a GPT decoder (MatMulInteger)."""
    from models.gpt import make_gpt
    from models.mobilenet_v2 import make_mobilenet_v2
    model = make_mobilenet_v2(image_size=64, num_classes=100) if name == "mobilenet_v2" else \
        make_gpt(seq_len=16, layers=1, vocab_size=40)
    quantized = _quantized(quantize_dynamic, model, tmp_path, name)
    ops = {n.op_type for n in quantized.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops and ("ConvInteger" in ops or name == "gpt")
    three_way(quantized, random_feeds(quantized, 0, ints=_int_feeds(quantized, 0)))


def test_dynamically_quantized_resnet18_matches_onnxruntime(resnet18_path, quantize_dynamic, tmp_path):
    """Every ConvInteger and the classifier's MatMulInteger run as packed int8 kernels, each with its epilogue
    (zero point, scales, batch norm, residual, ReLU) and no layout transform between them; the logits are within
    DYNAMIC_RTOL of onnxruntime's (and of the interpreter's), the same class on top."""
    quantized = _quantized(quantize_dynamic, resnet18_path, tmp_path, "resnet18")
    ops = fused_ops(quantized)
    assert ops >= {"qnn.conv2d_nchwc", "qnn.matmul_pack"} and not ops & {"qnn.conv2d", "qnn.matmul"}
    assert ("layout_transform",) not in kernels(quantized)  # blocked from the first convolution to the classifier
    feeds = random_feeds(quantized, 1)
    close = functools.partial(assert_close, rtol=DYNAMIC_RTOL)
    ours, interp, ref, _ = three_way(quantized, feeds, close=close)
    assert ours[0].argmax() == ref[0].argmax() == interp[0].argmax()


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("special", [None, np.nan, np.inf], ids=["finite", "nan", "inf"])
def test_whole_tensor_range_runs_as_parallel_rows(op, special):
    """DynamicQuantizeLinear's max / min of a whole activation: rows of the leading axes in vector partials, then
    the rows (not one scalar loop); equal to numpy's, NaN and infinities included."""
    shape = (1, 4, 28, 28, 16)
    x = Var("x", TensorType(shape))
    task = build_task(Function((x,), call(op, x, axes=None, keepdims=False), Attrs(Primitive=1)))
    names = [s.op.name for s in task.initial_state().stages if s.op.name != "x"]
    assert f"{op}_rows_lanes" in names and f"{op}_rows" in names, names  # (rows.row_chunks may add groups first)
    func = lower(default_schedule(task.initial_state()).apply(task.initial_state()), "k")
    xv = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    if special is not None:
        xv[0, 2, 27, 3, 9] = special if op == "max" else -special
    lib = NativeKernels([func])
    args = lib.arguments("k", [xv])
    lib.caller("k", args)()
    np.testing.assert_array_equal(args[1], getattr(np, op)(xv))


def test_int8_tasks_are_in_the_tuners_search_space(quantize_dynamic, tmp_path):
    """Every task of a dynamically quantized MobileNetV2 (packed int8 convolutions, the generic depthwise one,
    whole-tensor max / min, its scalar kernels) has its default schedule in Ansor's space (tests/
    test_search_space.py's check): int8 tasks are tasks like any other."""
    from test_search_space import check_model
    from models.mobilenet_v2 import make_mobilenet_v2
    check_model(_quantized(quantize_dynamic, make_mobilenet_v2(image_size=32, num_classes=10), tmp_path, "mbv2"))


def test_static_int8_tasks_are_in_the_tuners_search_space(quantize_dynamic):
    """The same for a static QDQ MobileNetV2: its blocked depthwise kernels, and epilogues that read a value twice
    (QuantizeLinear's NaN guard where(x == x, x, 0)) fused into the convolution's register tile, as the default
    schedule does."""
    from test_search_space import check_model
    from models import make_quantized
    check_model(make_quantized(base="mobilenet_v2", per_channel=True, width_mult=0.5, image_size=32))


def test_an_epilogue_that_reads_its_value_twice_stays_in_the_register_tile():
    """QuantizeLinear's NaN guard where(y == y, y, 0) reads y twice: the convolution's register tile still writes
    the requantized bytes itself (no int32 buffer of the whole result and second pass over it), and the result is
    the reference's."""
    x = Var("x", TensorType((1, 2, 6, 7, 16), "uint8"))
    w = Var("w", TensorType((2, 2, 1, 1, 4, 16), "int32"))
    acc = call("qnn.conv2d_nchwc", x, w, Constant(np.array(0, np.uint8)))
    y = call("multiply", call("cast", acc, dtype="float32"), Constant(np.array(0.01, np.float32)))
    y = call("where", call("equal", y, y), y, Constant(np.array(0.0, np.float32)))
    q = call("cast", call("clip", call("round", y), a_min=0.0, a_max=255.0), dtype="uint8")
    task = build_task(Function((x, w), q, Attrs(Primitive=1)))
    schedule = default_schedule(task.initial_state(), vector_width())
    assert not any(type(s).__name__ == "CacheWrite" for s in schedule.steps)
    func = lower(schedule.apply(task.initial_state()), "k")
    assert str(func).count("parallel") == 1
    inputs = kernel_inputs(task, np.random.default_rng(0))
    lib = NativeKernels([func])
    args = lib.arguments("k", inputs)
    lib.caller("k", args)()
    np.testing.assert_array_equal(args[2], evaluate(task.func, inputs)[0])

"""Static QDQ models (quantize_static's QuantFormat.QDQ): frontends/onnx/qdq.py fuses each DequantizeLinear ->
Conv/MatMul/Gemm -> QuantizeLinear group into the integer op it stands for, as onnxruntime's optimizer does.

Numerics: a fused group is exact in int32 and requantized once, so it equals onnxruntime's fused kernel
(ORT_ENABLE_ALL; QLinearMatMul within a step: it requantizes in float64 as onnx's reference, onnxruntime in
float32) and lies within one quantization step of its unfused QDQ form (ORT_DISABLE_ALL, float products rounded at a
tie); compiled and interpreted are equal. Over a whole ResNet-18 the steps accumulate: its logits are
within 2 steps of the logits' quantization of onnxruntime's, optimized or not (which differ by as much from each
other), with the same top-1."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from frontends.onnx.qdq import fuse_qdq
from harness import compiled_and_interpreted, run_ort, steps_apart
from test_qnn import kernels

U8, I8, I32, F32 = np.uint8, np.int8, np.int32, np.float32


def qdq_model(op="Conv", x_dtype=U8, bias="quantized", relu=False, q_after=True, per_channel=True, rng=None):
    """x (float) -> Q -> DQ -> op(., DQ(w int8)[, bias]) [-> Relu] [-> Q -> DQ] -> y."""
    rng = rng or np.random.default_rng(0)
    xs, xz = F32(0.03), x_dtype(128 if x_dtype == U8 else 3)
    if op == "Conv":
        w = rng.integers(-127, 128, (8, 4, 3, 3)).astype(I8)
        x_shape, y_shape, attrs, channels = (1, 4, 9, 10), (1, 8, 9, 10), dict(pads=[1, 1, 1, 1]), 8
    else:
        w = rng.integers(-127, 128, (6, 12) if op == "Gemm" else (12, 6)).astype(I8)
        x_shape, y_shape, channels = (5, 12), (5, 6), 6
        attrs = dict(transB=1) if op == "Gemm" else {}
    ws = (rng.random(channels).astype(F32) * F32(0.01) + F32(0.005)) if per_channel else F32(0.01)
    inits = {"xs": xs, "xz": xz, "w8": w, "ws": ws, "wz": np.zeros(channels if per_channel else (), I8),
             "ys": F32(0.08), "yz": x_dtype(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w8", "ws", "wz"], ["w"], axis=0 if op != "MatMul" else 1)]
    args = ["xd", "w"]
    if bias == "quantized":
        inits["b32"], inits["bs"] = rng.integers(-3000, 3000, channels).astype(I32), (xs * ws).astype(F32)
        nodes.append(helper.make_node("DequantizeLinear", ["b32", "bs"], ["b"], axis=0))
        args.append("b")
    elif bias == "float":
        inits["b"] = rng.standard_normal(channels).astype(F32)
        args.append("b")
    nodes.append(helper.make_node(op, args, ["c"], **attrs))
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        last = "r"
    if q_after:
        nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TP.FLOAT, y_shape)],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def op_types(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("op, fused", [("Conv", "QLinearConv"), ("Gemm", "QGemm"), ("MatMul", "QLinearMatMul")])
def test_qdq_groups_fuse_into_their_integer_op(op, fused):
    types = op_types(fuse_qdq(qdq_model(op, bias="quantized" if op != "MatMul" else None)))
    assert types == ["QuantizeLinear", fused, "DequantizeLinear"], types


@pytest.mark.parametrize("op, fused", [("Gemm", "QGemm"), ("MatMul", "MatMulIntegerToFloat")])
def test_a_product_without_quantize_after_it_fuses_to_a_float_output(op, fused):
    types = op_types(fuse_qdq(qdq_model(op, bias="quantized" if op != "MatMul" else None, q_after=False)))
    assert types == ["QuantizeLinear", fused, "Identity"], types


@pytest.mark.parametrize("case", [dict(bias="float"), dict(relu=True), dict(q_after=False)],
                         ids=["float_bias", "relu_between", "no_quantize_after"])
def test_groups_that_are_not_integer_convolutions_stay_float(case):
    """A float bias (not x_scale * w_scale quantized), an op between the Conv and its QuantizeLinear, a Conv whose
    result is read in float: the group means float arithmetic and is imported as written."""
    model = qdq_model("Conv", **case)
    assert op_types(fuse_qdq(model)) == op_types(model)


@pytest.mark.parametrize("op", ["Conv", "Gemm", "MatMul"])
@pytest.mark.parametrize("x_dtype", [U8, I8], ids=["u8", "s8"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_fused_groups_match_onnxruntime(op, x_dtype, per_channel):
    """Equal to the interpreter and to onnxruntime's fused kernel (MatMul: within a step, QLinearMatMul requantizes
    in float64 as onnx's reference does, onnxruntime's kernel in float32); within a step of its unfused QDQ
    form."""
    model = qdq_model(op, x_dtype, bias="quantized" if op != "MatMul" else None, per_channel=per_channel)
    x = np.random.default_rng(1).standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type
                                                 .shape.dim]).astype(F32) * F32(2)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    fused, = run_ort(model, {"x": x}, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    unfused, = run_ort(model, {"x": x})
    np.testing.assert_array_equal(ours, interp)
    steps = [steps_apart(np.round(ours / F32(0.08)), np.round(ref / F32(0.08))) for ref in (fused, unfused)]
    assert steps[0] <= (1 if op == "MatMul" else 0) and steps[1] <= 1, steps


def max_pool_model(same=True, dtype=U8):
    """x -> Q -> DQ -> MaxPool -> Q -> DQ, the two quantizations alike (or not)."""
    inits = {"s": F32(0.05), "z": dtype(7), "s2": F32(0.05 if same else 0.06), "z2": dtype(7)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("MaxPool", ["xd"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["p", "s2", "z2"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_pool", [helper.make_tensor_value_info("x", TP.FLOAT, (1, 16, 9, 9))],
                              [helper.make_tensor_value_info("y", TP.FLOAT, (1, 16, 5, 5))],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dtype", [U8, I8], ids=["u8", "s8"])
def test_a_max_pool_between_equal_quantizations_runs_on_the_quantized_tensor(dtype):
    """Exact: max commutes with the (monotone) dequantization and q(dq(v)) = v; unequal parameters stay float."""
    model = max_pool_model(dtype=dtype)
    assert op_types(fuse_qdq(model)) == ["QuantizeLinear", "MaxPool", "DequantizeLinear"]
    assert op_types(fuse_qdq(max_pool_model(same=False))) == op_types(max_pool_model(same=False))
    x = np.random.default_rng(2).standard_normal((1, 16, 9, 9)).astype(F32) * F32(3)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    ref, = run_ort(model, {"x": x})
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(interp, ref)
    assert "nn.max_pool2d" in {op for k in kernels(model) for op in k}


@pytest.fixture(scope="module")
def resnet18_qdq(tmp_path_factory, resnet18_folded_path):
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"input": np.random.default_rng(s).standard_normal((1, 3, 224, 224)).astype(F32)}
                               for s in range(4)])

        def get_next(self):
            return next(self.feeds, None)
    path = tmp_path_factory.mktemp("qdq") / "resnet18_qdq.onnx"
    quantization.quantize_static(str(resnet18_folded_path), str(path), Reader(),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True)
    return path


def test_static_qdq_resnet18_runs_in_int8(resnet18_qdq):
    """Every convolution and the classifier are packed int8 kernels (conv1's 3 channels over NHWC rows,
    qnn.conv2d_rows), their requantization (and each residual add, requantized) in the epilogue; no float
    convolution and no layout transform between them."""
    import onnx
    model = onnx.load(str(resnet18_qdq))
    ks = kernels(model)
    ops = {op for k in ks for op in k}
    assert sum("qnn.conv2d_nchwc" in k for k in ks) == 19 and sum("qnn.conv2d_rows" in k for k in ks) == 1
    assert "qnn.matmul_pack" in ops
    assert not ops & {"nn.conv2d", "nn.conv2d_nchwc", "nn.conv2d_winograd_nchwc", "nn.dense", "nn.dense_pack",
                      "qnn.conv2d", "qnn.matmul"}
    assert ("layout_transform",) not in ks
    x = np.random.default_rng(5).standard_normal((1, 3, 224, 224)).astype(F32)
    (ours,), (interp,) = compiled_and_interpreted(model, {"input": x})
    np.testing.assert_array_equal(ours, interp)
    scale = float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "logits_scale"))
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        ref, = run_ort(str(resnet18_qdq), {"input": x}, level)
        assert np.max(np.abs(ours - ref)) <= 2 * scale * (1 + 1e-5) and ours.argmax() == ref.argmax(), level


def test_a_model_with_int8_and_float_sections(tmp_path):
    """quantize_static told to leave one convolution (and the SiLU after it) float: the quantized convolutions run
    as packed int8 kernels, the float one as a float kernel, with the quantize / dequantize between the sections;
    the output within one quantization step of onnxruntime's (and of the interpreter's)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    import onnx
    rng = np.random.default_rng(7)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(F32), name)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c2"], ["s2"], name="sigmoid2"),
             helper.make_node("Mul", ["c2", "s2"], ["m2"], name="silu2"),
             helper.make_node("Conv", ["m2", "w3"], ["c3"], name="conv3"),
             helper.make_node("Relu", ["c3"], ["y"], name="relu3")]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [1, 16, 12, 12])],
                              [weight("w1", 16, 8, 3, 3), weight("w2", 16, 16, 3, 3), weight("w3", 16, 16, 1, 1)])
    src, path = tmp_path / "mixed.onnx", tmp_path / "mixed_int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(src))

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal((1, 8, 12, 12)).astype(F32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)
    quantization.quantize_static(str(src), str(path), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=True, nodes_to_exclude=["conv2", "sigmoid2", "silu2"])
    model = onnx.load(str(path))
    ks = kernels(model)
    ops = {op for k in ks for op in k}
    assert sum("qnn.conv2d_nchwc" in k for k in ks) == 2  # conv1 and conv3 in int8
    assert ops & {"nn.conv2d_nchwc", "nn.conv2d_winograd_nchwc", "nn.conv2d"}  # conv2 in float
    x = rng.standard_normal((1, 8, 12, 12)).astype(F32)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    ref, = run_ort(str(path), {"x": x})
    last = next(n for n in model.graph.node if "y" in n.output)  # the output's DequantizeLinear: its step
    step = float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == last.input[1]))
    assert last.op_type == "DequantizeLinear"
    assert np.max(np.abs(ours - ref)) <= step * (1 + 1e-5) and np.max(np.abs(ours - interp)) <= step * (1 + 1e-5)

"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the quantization ops (QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear) and the losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss),
one node per model: per-tensor, per-axis and blocked scales, saturation at the integer range edges, ties rounding
to even; losses with each reduction, weights, ignore_index and N-D inputs. Run-time labels out of range are
refused by the runtime with a clear error (the ignore_index is allowed), types relayish lacks refused by name.

A case: (op type, graph inputs {name: array}, initializers {name: array or None (an omitted input)}, attributes,
opset, number of outputs): harness.typed_model's arguments, initializers before attributes. Node inputs are the
graph inputs then the initializers, in order.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import from_onnx
from harness import case_id, f32, run_ort, three_way, typed_model, with_output_shapes

R = np.random.default_rng(11)
TP = onnx.TensorProto


def ticks(shape, limit, step):
    """Multiples of step in [-limit, limit] * step: with a power-of-two scale of 2 * step, every odd multiple is a
    tie (k + 0.5), and the extremes are far beyond the integer ranges (saturation)."""
    values = R.integers(-limit, limit + 1, shape).astype(np.float32) * np.float32(step)
    flat = values.reshape(-1)
    flat[:4] = np.float32([limit * step, -limit * step, 0.5 * 2 * step, -0.5 * 2 * step])
    return values


QUANT_CASES = [
    # per tensor, uint8 (the default), ties (k + 0.5 after the division by 0.5) and saturation at 0 and 255
    ("QuantizeLinear", {"x": ticks((3, 5), 1200, 0.25)}, {"s": np.float32(0.5), "zp": np.uint8(128)}, {}, 13, 1),
    ("QuantizeLinear", {"x": ticks((3, 5), 1200, 0.25)}, {"s": np.float32(0.5)}, {}, 10, 1),
    # per axis, int8, negative axis
    ("QuantizeLinear", {"x": ticks((2, 3, 4), 600, 0.5)}, {"s": f32(1.0, 0.5, 2.0), "zp": np.int8([-3, 0, 5])},
     {"axis": -2}, 13, 1),
    # int16 and uint16 zero points, at the 16-bit edges
    ("QuantizeLinear", {"x": ticks((4, 6), 80000, 0.5)}, {"s": np.float32(1.0), "zp": np.int16(-7)}, {}, 21, 1),
    ("QuantizeLinear", {"x": ticks((4, 6), 80000, 0.5)}, {"s": f32(1.0, 2.0, 1.0, 4.0),
                                                          "zp": np.uint16([0, 1, 30000, 65535])}, {"axis": 0}, 21, 1),
    # output_dtype without a zero point
    ("QuantizeLinear", {"x": ticks((3, 4), 600, 0.5)}, {"s": np.float32(1.0)}, {"output_dtype": TP.INT8}, 21, 1),
    # blocked: 6 columns in blocks of 4 (the last block short), int8
    ("QuantizeLinear", {"x": ticks((2, 6), 600, 0.5)}, {"s": f32([1.0, 2.0], [0.5, 4.0]),
                                                        "zp": np.int8([[1, -2], [0, 3]])},
     {"axis": 1, "block_size": 4}, 21, 1),
    # float16 input and scale (the division rounded to float16, as the reference)
    ("QuantizeLinear", {"x": ticks((3, 4), 600, 0.5).astype(np.float16)}, {"s": np.float16(0.5),
                                                                            "zp": np.uint8(10)}, {}, 19, 1),
    # a scale given at run time
    ("QuantizeLinear", {"x": ticks((3, 4), 600, 0.5), "s": np.float32(0.5)}, {"zp": np.int8(2)}, {}, 13, 1),
    ("DequantizeLinear", {"x": R.integers(-128, 128, (3, 5)).astype(np.int8)}, {"s": np.float32(0.1),
                                                                               "zp": np.int8(-128)}, {}, 13, 1),
    ("DequantizeLinear", {"x": R.integers(0, 256, (3, 5)).astype(np.uint8)}, {"s": np.float32(0.1)}, {}, 10, 1),
    ("DequantizeLinear", {"x": R.integers(0, 256, (2, 3, 4)).astype(np.uint8)},
     {"s": f32(0.1, 0.2, 0.3), "zp": np.uint8([0, 128, 255])}, {"axis": 1}, 13, 1),
    ("DequantizeLinear", {"x": R.integers(0, 65536, (2, 6)).astype(np.uint16)},
     {"s": f32([0.1, 0.2], [0.3, 0.4]), "zp": np.uint16([[0, 65535], [30000, 1]])}, {"axis": 1, "block_size": 4},
     21, 1),
    ("DequantizeLinear", {"x": R.integers(-32768, 32768, (3, 4)).astype(np.int16)},
     {"s": np.float32(0.01), "zp": np.int16(-32768)}, {}, 21, 1),
    ("DequantizeLinear", {"x": R.integers(-2**31, 2**31, (3, 4)).astype(np.int32)}, {"s": np.float32(1e-3)}, {}, 13,
     1),
    ("DequantizeLinear", {"x": R.integers(-128, 128, (3, 4)).astype(np.int8)},
     {"s": np.float32(0.125), "zp": np.int8(3)}, {"output_dtype": TP.FLOAT16}, 23, 1),
    ("DequantizeLinear", {"x": R.integers(-128, 128, (3, 4)).astype(np.int8)},
     {"s": np.float16(0.125), "zp": np.int8(3)}, {}, 19, 1),
    ("DynamicQuantizeLinear", {"x": R.standard_normal((3, 7)).astype(np.float32)}, {}, {}, 11, 3),
    ("DynamicQuantizeLinear", {"x": np.abs(R.standard_normal((3, 7))).astype(np.float32)}, {}, {}, 11, 3),
    ("DynamicQuantizeLinear", {"x": -np.abs(R.standard_normal((3, 7))).astype(np.float32)}, {}, {}, 11, 3),
]


def labels(shape, classes, ignore=None, dtype=np.int64):
    t = R.integers(0, classes, shape).astype(dtype)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    return t


def scores(*shape):
    return R.standard_normal(shape).astype(np.float32)


W5 = f32(0.5, 1.0, 2.0, 0.25, 1.5)
LOSS_CASES = [
    ("NegativeLogLikelihoodLoss", {"x": scores(4, 5), "t": labels((4,), 5)}, {}, {"reduction": "none"}, 13, 1),
    ("NegativeLogLikelihoodLoss", {"x": scores(4, 5), "t": labels((4,), 5)}, {}, {"reduction": "sum"}, 13, 1),
    ("NegativeLogLikelihoodLoss", {"x": scores(4, 5), "t": labels((4,), 5)}, {}, {}, 13, 1),  # mean
    ("NegativeLogLikelihoodLoss", {"x": scores(4, 5), "t": labels((4,), 5, dtype=np.int32)}, {"w": W5},
     {"reduction": "mean"}, 13, 1),
    ("NegativeLogLikelihoodLoss", {"x": scores(3, 5, 2), "t": labels((3, 2), 5, ignore=1)}, {"w": W5},
     {"reduction": "mean", "ignore_index": 1}, 22, 1),
    ("NegativeLogLikelihoodLoss", {"x": scores(2, 5, 3, 4), "t": labels((2, 3, 4), 5, ignore=-1)}, {},
     {"reduction": "none", "ignore_index": -1}, 13, 1),
    ("NegativeLogLikelihoodLoss", {"x": scores(2, 5, 3, 4), "t": labels((2, 3, 4), 5, ignore=10)}, {"w": W5},
     {"reduction": "sum", "ignore_index": 10}, 13, 1),
    ("SoftmaxCrossEntropyLoss", {"x": scores(4, 5), "t": labels((4,), 5)}, {}, {"reduction": "none"}, 13, 2),
    ("SoftmaxCrossEntropyLoss", {"x": scores(4, 5), "t": labels((4,), 5)}, {"w": W5}, {"reduction": "sum"}, 13, 1),
    ("SoftmaxCrossEntropyLoss", {"x": scores(2, 5, 3, 4), "t": labels((2, 3, 4), 5, ignore=-5)}, {"w": W5},
     {"ignore_index": -5}, 13, 2),  # mean
    ("SoftmaxCrossEntropyLoss", {"x": scores(2, 5, 3, 4), "t": labels((2, 3, 4), 5, ignore=0, dtype=np.int32)}, {},
     {"reduction": "mean", "ignore_index": 0}, 12, 1),
]


def case_model(case):
    op, inputs, consts, attrs, opset, n_outputs = case
    return typed_model(op, inputs, attrs, opset, consts, n_outputs)


def check_case(case):
    """harness.three_way of a case, fed its inputs' values; returns the compiled outputs."""
    return three_way(case_model(case), {n: np.asarray(v) for n, v in case[1].items()}).compiled


@pytest.mark.parametrize("case", QUANT_CASES, ids=case_id)
def test_quantization_three_way(case):
    check_case(case)


@pytest.mark.parametrize("case", LOSS_CASES, ids=case_id)
def test_loss_three_way(case):
    check_case(case)


def test_quantize_rounds_ties_to_even_and_saturates():
    x = f32(0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, -129.5, 1e9, -1e9)
    case = ("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "zp": np.int8(0)}, {}, 13, 1)
    y, = check_case(case)
    np.testing.assert_array_equal(y, np.int8([0, 2, 2, 0, -2, -2, 126, 127, -128, -128, 127, -128]))
    case = ("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "zp": np.uint8(128)}, {}, 13, 1)
    y, = check_case(case)
    np.testing.assert_array_equal(y, np.uint8([128, 130, 130, 128, 126, 126, 254, 255, 0, 0, 255, 0]))


def _loss_session(ignore_index=None):
    attrs = {"reduction": "none"} if ignore_index is None else {"reduction": "none", "ignore_index": ignore_index}
    model = typed_model("SoftmaxCrossEntropyLoss", {"x": scores(2, 3), "t": labels((2,), 3)}, attrs, 13, {}, 1)
    return compile_model(model)


@pytest.mark.parametrize("bad", [3, -4, 100])
def test_loss_label_out_of_range_is_a_clear_error(bad):
    sess = _loss_session()
    with pytest.raises(ValueError, match=rf"input 't' holds {bad} at \(1,\), outside \[-3, 3\)"):
        sess.run(None, {"x": scores(2, 3), "t": np.array([0, bad], np.int64)})


def test_loss_label_equal_to_ignore_index_outside_the_classes_is_allowed():
    sess = _loss_session(ignore_index=-7)
    x = scores(2, 3)
    loss, = sess.run(None, {"x": x, "t": np.array([1, -7], np.int64)})
    assert loss[1] == 0 and np.isclose(loss[0], -np.log(np.exp(x[0, 1]) / np.exp(x[0]).sum()), rtol=1e-5)
    with pytest.raises(ValueError, match="or equal the ignored index -7"):
        sess.run(None, {"x": x, "t": np.array([1, 5], np.int64)})


def test_constant_label_out_of_range_is_refused_at_import():
    model = typed_model("NegativeLogLikelihoodLoss", {"x": scores(2, 3)}, {"reduction": "sum"}, 13,
                        {"t": np.array([0, 3], np.int64)}, 1)
    with pytest.raises(Exception, match="target holds 3, out of range for 3 classes"):
        from_onnx(model)


@pytest.mark.parametrize("zp,name", [(np.zeros(1, ml_dtypes.float8_e4m3fn), "(?i)float8_?e4m3fn"),
                                     (np.zeros(1, ml_dtypes.int4), "(?i)int4")])
def test_quantized_types_relayish_lacks_are_refused_by_name(zp, name):
    model = typed_model("QuantizeLinear", {"x": scores(2, 3)}, {}, 21, {"s": np.float32(1.0), "zp": zp}, 1)
    with pytest.raises(Exception, match=name):
        from_onnx(model)
    model = typed_model("QuantizeLinear", {"x": scores(2, 3)},
                        {"output_dtype": helper.np_dtype_to_tensor_dtype(zp.dtype)}, 21, {"s": np.float32(1.0)}, 1)
    with pytest.raises(Exception, match=name):
        from_onnx(model)


def test_blocked_scale_of_the_wrong_shape_is_refused():
    model = typed_model("DequantizeLinear", {"x": R.integers(0, 9, (2, 6)).astype(np.uint8)},
                        {"axis": 1, "block_size": 4}, 21, {"s": np.ones((2, 3), np.float32)}, 1)
    with pytest.raises(Exception, match=r"expected \(2, 2\)"):
        from_onnx(model)


def test_quantize_nan_and_infinities_saturate_as_in_onnxruntime():
    x = f32(np.nan, np.inf, -np.inf, 1.5, 3e9, -3e9)
    y, = check_case(("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "zp": np.int8(3)}, {}, 13, 1))
    np.testing.assert_array_equal(y, np.int8([-128, 127, -128, 5, 127, -128]))


@pytest.mark.parametrize("extra,ok", [({}, True), ({"index_ignored": -100}, True), ({"index_ignored": 1.0}, False),
                                      ({"index_ignored": True}, False), ({"index_ignored": 7, "no_bounds": 1}, False)])
def test_metadata_index_ignored_is_validated(extra, ok):
    from runtime.metadata import MetadataError, validate_metadata
    entry = {"name": "t", "shape": [4], "dtype": "int64", "index_bounds": [-5, 5], **extra}
    if entry.pop("no_bounds", None):
        del entry["index_bounds"]
    meta = {"format_version": 1, "inputs": [entry], "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}],
            "workspace_bytes": 0, "params_bytes": 0, "kernels": [], "target": {"triple": "x", "cpu": "y",
                                                                               "features": ""}}
    if ok:
        validate_metadata(meta)
    else:
        with pytest.raises(MetadataError, match="index_ignored"):
            validate_metadata(meta)


def test_ignored_index_holds_only_if_every_gather_masks_it():
    from compiler.index_bounds import input_index_bounds, input_index_ignored
    t = helper.make_tensor_value_info("t", TP.INT64, [2])
    x = helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])
    loss = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["l"], reduction="none", ignore_index=-1)
    gather = helper.make_node("Gather", ["table", "t"], ["g"])
    table = numpy_helper.from_array(np.arange(4, dtype=np.float32), "table")
    outs = [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("l", "g")]
    masked = with_output_shapes(helper.make_model(helper.make_graph([loss], "g", [x, t], outs[:1]),
                                                  opset_imports=[helper.make_opsetid("", 13)]))
    both = with_output_shapes(helper.make_model(helper.make_graph([loss, gather], "g", [x, t], outs, [table]),
                                                opset_imports=[helper.make_opsetid("", 13)]))
    assert input_index_ignored(from_onnx(masked)) == {"t": -1}
    assert input_index_bounds(from_onnx(masked)) == {"t": (-3, 3)}
    assert input_index_ignored(from_onnx(both)) == {}  # Gather would read a -1 as the last row: no exception
    assert input_index_bounds(from_onnx(both)) == {"t": (-3, 3)}


def test_a_qdq_convolution_matches_onnxruntime_with_its_weights_dequantized_at_compile_time():
    # the QDQ form quantization tools export: activations quantized and dequantized around a float Conv whose
    # int8 weights are dequantized per output channel; the weight's DequantizeLinear folds away at compile time
    w8 = R.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    w_scale = (R.random(8).astype(np.float32) + 0.5) * np.float32(0.01)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w8", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["xd", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("w8", w8), ("ws", w_scale), ("wz", np.zeros(8, np.int8)),
        ("b", R.standard_normal(8).astype(np.float32)), ("ys", np.float32(0.05)), ("yz", np.uint8(0))]]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TP.FLOAT, (1, 4, 10, 10))],
                              [helper.make_tensor_value_info("y", TP.FLOAT, (1, 8, 10, 10))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = R.standard_normal((1, 4, 10, 10)).astype(np.float32)
    module = compile_model(model)
    ours, = module.run(None, {"x": x})
    ref, = run_ort(model, {"x": x})
    # a value on a rounding tie of the output quantizer may land one step apart (float32 vs float64 arithmetic)
    assert np.mean(np.abs(ours - ref) > 1e-6) < 0.01 and np.max(np.abs(ours - ref)) <= 0.05 + 1e-6
    conv, = [k["ops"] for k in module.kernels if any(op.startswith("nn.conv2d") for op in k["ops"])]
    # no weight dequantization left at run time (what follows the convolution: the output's quantize-dequantize)
    assert not {"cast", "subtract", "multiply"} & set(conv[:conv.index("nn.conv2d_nchwc") + 1]), conv

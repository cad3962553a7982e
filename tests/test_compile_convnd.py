"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the convolution and pooling windows
of every spatial rank: 1-D Conv / MaxPool / AveragePool (2-D ops of height 1), 3-D ones (relayish/ops/convnd.py),
global pools of 1-D and 3-D inputs; strides, pads, dilations, groups, auto_pad, ceil_mode, count_include_pad;
MaxPool of integer tensors (through the 3-D op); ConvTranspose; Lp pools and norms, instance / group / mean-variance
normalization, MaxUnpool with constant and run-time indices.
Bad nodes give clear errors.

A case: the arguments of harness.typed_model: (op type, graph inputs {name: (shape, dtype)}, attributes, opset,
initializers {name: array}).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import assert_exactly, case_id, feeds_for, three_way, typed_model, with_output_shapes

F = "float32"


def w(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CONV_1D = [
    ("Conv", {"x": ((2, 3, 11), F)}, {}, 11, {"w": w(4, 3, 3)}),
    ("Conv", {"x": ((1, 4, 12), F)}, {"strides": [2], "pads": [2, 1], "dilations": [2], "group": 2}, 11,
     {"w": w(6, 2, 3), "b": w(6)}),
    ("Conv", {"x": ((1, 3, 10), F)}, {"auto_pad": "SAME_UPPER", "strides": [3]}, 22, {"w": w(2, 3, 4)}),
    ("Conv", {"x": ((1, 3, 10), F)}, {"auto_pad": "SAME_LOWER", "group": 3, "kernel_shape": [4]}, 11,
     {"w": w(3, 1, 4)}),
]

CONV_RUN_TIME_WEIGHTS = [
    ("Conv", {"x": ((1, 4, 9), F), "w": ((6, 2, 3), F)}, {"group": 2, "pads": [1, 2], "strides": [2]}, 11, {}),
    ("Conv", {"x": ((1, 2, 4, 5, 4), F), "w": ((3, 2, 2, 2, 3), F), "b": ((3,), F)}, {"dilations": [1, 2, 1]}, 11,
     {}),
]

CONV_3D = [
    ("Conv", {"x": ((1, 2, 5, 6, 7), F)}, {}, 11, {"w": w(3, 2, 3, 2, 3)}),
    ("Conv", {"x": ((2, 4, 6, 5, 7), F)}, {"strides": [2, 1, 2], "pads": [1, 0, 2, 0, 1, 1],
                                          "dilations": [1, 2, 1], "group": 2}, 11,
     {"w": w(6, 2, 3, 2, 2), "b": w(6)}),
    ("Conv", {"x": ((1, 3, 5, 5, 6), F)}, {"auto_pad": "SAME_UPPER", "strides": [2, 2, 3]}, 11,
     {"w": w(2, 3, 2, 3, 2)}),
    ("Conv", {"x": ((1, 3, 4, 5, 6), F)}, {"auto_pad": "SAME_LOWER", "group": 3}, 22, {"w": w(3, 1, 2, 2, 2)}),
    ("Conv", {"x": ((1, 2, 4, 5, 6), F)}, {"auto_pad": "VALID"}, 11, {"w": w(4, 2, 1, 1, 1)}),
]

POOLS = [
    ("MaxPool", {"x": ((2, 3, 11), F)}, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, 12, {}),
    ("MaxPool", {"x": ((1, 2, 10), F)}, {"kernel_shape": [3], "dilations": [2], "ceil_mode": 1, "strides": [2]},
     12, {}),
    ("AveragePool", {"x": ((1, 2, 11), F)}, {"kernel_shape": [4], "strides": [3], "pads": [2, 1],
                                             "count_include_pad": 1}, 19, {}),
    ("AveragePool", {"x": ((1, 2, 10), F)}, {"kernel_shape": [3], "auto_pad": "SAME_UPPER", "strides": [2]},
     11, {}),
    ("MaxPool", {"x": ((1, 2, 6, 7, 8), F)}, {"kernel_shape": [2, 3, 2]}, 12, {}),
    ("MaxPool", {"x": ((1, 2, 7, 7, 8), F)}, {"kernel_shape": [3, 2, 3], "strides": [2, 2, 3],
                                              "pads": [1, 0, 1, 1, 1, 2], "dilations": [1, 2, 1],
                                              "ceil_mode": 1}, 12, {}),
    ("MaxPool", {"x": ((1, 1, 5, 6, 7), F)}, {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_LOWER",
                                              "strides": [2, 2, 2]}, 12, {}),
    ("AveragePool", {"x": ((1, 2, 6, 7, 8), F)}, {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2]}, 19, {}),
    ("AveragePool", {"x": ((2, 2, 7, 6, 8), F)}, {"kernel_shape": [3, 3, 2], "strides": [2, 2, 3],
                                                  "pads": [1, 1, 0, 1, 2, 1], "ceil_mode": 1}, 19, {}),
    ("AveragePool", {"x": ((1, 2, 7, 6, 8), F)}, {"kernel_shape": [3, 3, 2], "strides": [2, 1, 3],
                                                  "pads": [1, 1, 0, 1, 2, 1], "dilations": [2, 1, 2],
                                                  "count_include_pad": 1, "ceil_mode": 1}, 19, {}),
    ("AveragePool", {"x": ((1, 2, 5, 6, 7), F)}, {"kernel_shape": [2, 3, 3], "auto_pad": "SAME_UPPER",
                                                  "strides": [2, 2, 2]}, 11, {}),
    ("MaxPool", {"x": ((1, 2, 7, 8), "uint8")}, {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]},
     12, {}),
    ("MaxPool", {"x": ((1, 2, 9), "int8")}, {"kernel_shape": [3], "dilations": [2], "ceil_mode": 1, "strides": [2]},
     12, {}),
    ("MaxPool", {"x": ((1, 2, 5, 6, 7), "int8")}, {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_UPPER",
                                                   "strides": [2, 2, 2]}, 12, {}),
    ("GlobalAveragePool", {"x": ((2, 3, 9), F)}, {}, 11, {}),
    ("GlobalMaxPool", {"x": ((2, 3, 9), F)}, {}, 11, {}),
    ("GlobalAveragePool", {"x": ((2, 3, 4, 5, 6), F)}, {}, 22, {}),
    ("GlobalMaxPool", {"x": ((2, 3, 4, 5, 6), F)}, {}, 22, {}),
]

CONV_TRANSPOSE = [
    ("ConvTranspose", {"x": ((1, 2, 4, 5), F)}, {}, 11, {"w": w(2, 3, 3, 3)}),
    ("ConvTranspose", {"x": ((2, 4, 4, 3), F)}, {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [2, 1],
                                                "group": 2, "output_padding": [1, 2]}, 11,
     {"w": w(4, 3, 3, 2), "b": w(6)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, 11,
     {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, 11,
     {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 3], "output_shape": [6, 10]}, 11,
     {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 3], "output_shape": [6, 10],
                                                "auto_pad": "SAME_UPPER"}, 11, {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [3, 2], "output_shape": [10, 8]}, 11,
     {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 2], "auto_pad": "VALID"}, 22, {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 3, 7), F)}, {"strides": [3], "pads": [1, 2], "dilations": [2], "group": 3}, 11,
     {"w": w(3, 2, 3), "b": w(6)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4, 3), F)}, {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]}, 11,
     {"w": w(2, 3, 3, 2, 2)}),
    ("ConvTranspose", {"x": ((1, 2, 5, 5), F)}, {"strides": [3, 3], "pads": [2, 3, 2, 1]}, 11,
     {"w": w(2, 2, 2, 2)}),  # pads beyond (k - 1) * dilation: the 2-D convolution's input is cropped in front
    ("ConvTranspose", {"x": ((1, 4, 3, 4), F), "w": ((4, 3, 3, 2), F)}, {"strides": [2, 3], "group": 2,
                                                                      "pads": [1, 0, 0, 1]}, 11, {}),  # the direct op
    ("ConvTranspose", {"x": ((1, 2, 6), F), "w": ((2, 3, 3), F)}, {"strides": [2], "output_shape": [14]}, 11, {}),
    ("ConvTranspose", {"x": ((1, 24, 5, 7), F)}, {"strides": [2, 2]}, 11, {"w": w(24, 1, 2, 2), "b": w(1)}),
    ("ConvTranspose", {"x": ((2, 3, 4, 5), F)}, {"strides": [3, 2]}, 11, {"w": w(3, 5, 3, 2)}),  # patches: 1x1
]

LP_AND_NORMS = [
    ("LpPool", {"x": ((1, 3, 7, 8), F)}, {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}, 11, {}),
    ("LpPool", {"x": ((1, 2, 9), F)}, {"kernel_shape": [3], "p": 1, "strides": [2]}, 18, {}),
    ("LpPool", {"x": ((1, 2, 7, 8), F)}, {"kernel_shape": [3, 3], "p": 3, "dilations": [2, 1], "ceil_mode": 1,
                                         "strides": [2, 2]}, 18, {}),
    ("LpPool", {"x": ((1, 2, 6, 7), F)}, {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, 18, {}),
    ("LpPool", {"x": ((1, 2, 4, 5, 6), F)}, {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2]}, 18, {}),
    ("GlobalLpPool", {"x": ((2, 3, 4, 5), F)}, {}, 11, {}),
    ("GlobalLpPool", {"x": ((2, 3, 7), F)}, {"p": 1}, 11, {}),
    ("GlobalLpPool", {"x": ((1, 2, 3, 4, 2), F)}, {"p": 3}, 18, {}),
    ("LpNormalization", {"x": ((3, 4, 5), F)}, {"axis": 1}, 11, {}),
    ("LpNormalization", {"x": ((3, 4, 5), F)}, {"axis": -1, "p": 1}, 11, {}),
    ("InstanceNormalization", {"x": ((2, 3, 4, 5), F)}, {"epsilon": 1e-3}, 11, {"s": w(3), "b": w(3, seed=2)}),
    ("InstanceNormalization", {"x": ((2, 3, 7), F)}, {}, 22, {"s": w(3), "b": w(3, seed=2)}),
    ("InstanceNormalization", {"x": ((1, 2, 3, 4, 2), F)}, {}, 11, {"s": w(2), "b": w(2, seed=2)}),
    ("GroupNormalization", {"x": ((2, 6, 3, 4), F)}, {"num_groups": 2, "epsilon": 1e-2}, 21,
     {"s": w(6), "b": w(6, seed=2)}),
    ("GroupNormalization", {"x": ((1, 4, 5), F)}, {"num_groups": 4}, 21, {"s": w(4), "b": w(4, seed=2)}),
    ("MeanVarianceNormalization", {"x": ((2, 3, 4, 5), F)}, {}, 13, {}),
    ("MeanVarianceNormalization", {"x": ((2, 3, 4, 5), F)}, {"axes": [1, -1]}, 9, {}),
]

CASES = CONV_1D + CONV_RUN_TIME_WEIGHTS + CONV_3D + POOLS + CONV_TRANSPOSE + LP_AND_NORMS


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    three_way(typed_model(*case), feeds_for(case[1], np.random.default_rng(0), ints=None))


@pytest.mark.parametrize("op, shape, attrs", [
    ("MaxPool", (1, 5, 1, 1), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", (1, 5, 1, 1), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", (1, 3, 3, 7), {"kernel_shape": [4, 3], "strides": [2, 2], "pads": [0, 1, 0, 0]}),
    ("MaxPool", (1, 4, 5), {"kernel_shape": [6], "strides": [3]}),
], ids=str)
def test_a_window_past_its_padded_input_is_clipped_as_onnxruntime_does(op, shape, attrs):
    # onnxruntime and onnx's shape inference give one output per such axis (onnx's reference, none)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    result = three_way(typed_model(op, {"x": (shape, F)}, attrs, 11, {}), {"x": x})
    assert all(d >= 1 for d in result.compiled[0].shape[2:])


@pytest.mark.parametrize("op,inputs,attrs,consts,message", [
    ("Conv", {"x": ((1, 2, 3, 4, 5, 6), F)}, {}, {"w": w(1, 2, 1, 1, 1, 1)}, "takes a 3-D .* or 5-D"),
    ("Conv", {"x": ((1, 2, 8), F)}, {}, {"w": w(1, 2, 3, 3)}, "does not match a 1-D convolution"),
    ("Conv", {"x": ((1, 2, 8), F)}, {"pads": [1, 1, 1]}, {"w": w(1, 2, 3)}, "pads must have 2 values"),
    ("Conv", {"x": ((1, 2, 4, 4, 4), F)}, {"pads": [1, 1, 1, 1]}, {"w": w(1, 2, 3, 3, 3)},
     "pads must have 6 values"),
    ("Conv", {"x": ((1, 2, 4, 4, 4), F)}, {"strides": [1, 1]}, {"w": w(1, 2, 3, 3, 3)}, "must have 3 values"),
    ("Conv", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [3, 3, 2]}, {"w": w(1, 2, 3, 3, 3)},
     "does not match the weight shape"),
    ("Conv", {"x": ((1, 4, 4, 4, 4), F)}, {"group": 3}, {"w": w(3, 1, 1, 1, 1)}, "groups=3 must divide"),
    ("MaxPool", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [2, 2]}, {}, r"does not have 3 values"),
    ("MaxPool", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [2, 2, 2], "pads": [2, 0, 0, 0, 0, 0]}, {},
     "must be smaller than pool_size"),
    ("AveragePool", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [2, 2, 6]}, {},
     "padded input width 4 is smaller than the dilated pool width 6"),
    ("AveragePool", {"x": ((1, 2, 4), F)}, {"kernel_shape": [2], "strides": [1, 1]}, {},
     "a 1-D window takes 1 value per attribute"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"pads": [1, 1]}, {"w": w(2, 2, 3, 3)}, "must be 4 values >= 0"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"pads": [3, 3, 3, 3]}, {"w": w(2, 2, 3, 3)}, "leave no output"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"strides": [3, 3], "auto_pad": "SAME_UPPER"},
     {"w": w(2, 2, 1, 1)}, "a kernel shorter than the stride"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"group": 3}, {"w": w(2, 2, 3, 3)}, "groups=3 must divide"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"strides": [1]}, {"w": w(2, 2, 3, 3)}, "must have 2 values"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {}, {"w": w(2, 2, 3, 3), "b": w(3)}, "does not match 2 output"),
])
def test_bad_nodes_are_refused_clearly(op, inputs, attrs, consts, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, attrs, 12 if op == "MaxPool" else 11, consts))


@pytest.mark.parametrize("op,inputs,attrs,consts,opset,message", [
    ("LpPool", {"x": ((1, 2, 4, 4), F)}, {"kernel_shape": [2, 2], "p": 0}, {}, 18, "p must be positive"),
    ("LpPool", {"x": ((1, 2, 4, 4), F)}, {"kernel_shape": [2]}, {}, 18, "does not have 2 values"),
    ("LpNormalization", {"x": ((2, 3), F)}, {"p": 3}, {}, 11, "p must be 1 or 2"),
    ("LpNormalization", {"x": ((2, 3), F)}, {"axis": 2}, {}, 11, "axis 2 out of range"),
    ("InstanceNormalization", {"x": ((1, 3, 4), F)}, {}, {"s": w(2), "b": w(3)}, 11, "needs scale and B of shape"),
    ("GroupNormalization", {"x": ((1, 6, 4), F)}, {"num_groups": 4}, {"s": w(6), "b": w(6)}, 21,
     "num_groups=4 must divide the 6 channels"),
    ("GroupNormalization", {"x": ((1, 6, 4), F)}, {"num_groups": 3}, {"s": w(3), "b": w(3)}, 21,
     r"scale and bias must have shape \(6,\)"),
    ("MaxUnpool", {"x": ((1, 1, 2, 2), F)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
     {"i": np.zeros((1, 1, 2, 2), np.int64), "s": np.array([1, 1, 5, 5], np.int64)}, 11,
     r"output_shape \(1, 1, 5, 5\) other than the default \(1, 1, 4, 4\)"),
    ("MaxUnpool", {"x": ((1, 1, 2, 2), F)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
     {"i": np.array([[[[0, 1], [2, 16]]]], np.int64)}, 11, "index 16 out of range|indices hold 16"),
    ("MaxUnpool", {"x": ((1, 1, 2, 2), F)}, {"kernel_shape": [2, 2]}, {"i": np.zeros((1, 1, 2, 3), np.int64)}, 11,
     "indices shape"),
])
def test_bad_lp_norm_unpool_nodes_are_refused_clearly(op, inputs, attrs, consts, opset, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, attrs, opset, consts))


def unpool_model(indices_at_run_time: bool):
    inputs = {"x": ((1, 2, 2, 3), F)}
    consts = {}
    idx = np.array([[[[0, 3, 5], [14, 12, 16]], [[24, 26, 29], [38, 34, 35]]]], np.int64)  # flat into (1, 2, 4, 5)
    if indices_at_run_time:
        inputs["i"] = ((1, 2, 2, 3), "int64")
    else:
        consts["i"] = idx
    return typed_model("MaxUnpool", inputs, {"kernel_shape": [2, 3], "strides": [2, 1]}, 11, consts), idx


@pytest.mark.parametrize("at_run_time", [False, True])
def test_max_unpool_three_way(at_run_time):
    model, idx = unpool_model(at_run_time)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 2, 3)).astype(np.float32)}
    if at_run_time:
        feeds["i"] = idx
    ours, = three_way(model, feeds, close=assert_exactly).compiled
    assert ours.shape == (1, 2, 4, 5)


def test_max_unpool_run_time_indices_out_of_range_are_refused():
    model, idx = unpool_model(True)
    sess = compile_model(model)
    idx = idx.copy()
    idx[0, 1, 1, 2] = 40
    with pytest.raises(ValueError, match="40"):
        sess.run(None, {"x": np.zeros((1, 2, 2, 3), np.float32), "i": idx})


@pytest.mark.parametrize("shape,attrs,dtype", [
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}, F),
    ((2, 3, 6, 5), {"kernel_shape": [2, 3], "strides": [2, 1], "storage_order": 1, "ceil_mode": 1}, F),
    ((1, 2, 11), {"kernel_shape": [3], "strides": [2], "dilations": [2], "pads": [2, 1]}, F),
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2], "auto_pad": "SAME_UPPER"}, F),
    ((1, 2, 5, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}, "int8"),
], ids=str)
def test_max_pool_indices_three_way(shape, attrs, dtype):
    node = onnx.helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = onnx.helper.make_graph(
        [node], "t", [onnx.helper.make_tensor_value_info("x", elem, shape)],
        [onnx.helper.make_tensor_value_info("y", elem, None),
         onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, None)])
    model = with_output_shapes(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 12)]))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype) if dtype == F else rng.integers(-128, 128, shape).astype(dtype)
    if dtype != F:
        x.flat[::3] = x.flat[0]  # ties: the first largest element wins
    three_way(model, {"x": x}, close=assert_exactly)


def test_max_pool_3d_column_major_indices_are_refused():
    node = onnx.helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2], storage_order=1)
    graph = onnx.helper.make_graph([node], "t", [onnx.helper.make_tensor_value_info("x", 1, (1, 1, 4, 4, 4))],
                                   [onnx.helper.make_tensor_value_info("y", 1, None),
                                    onnx.helper.make_tensor_value_info("i", 7, None)])
    with pytest.raises(OnnxImportError, match="storage_order=1 .* of a 3-D MaxPool is not supported"):
        from_onnx(with_output_shapes(onnx.helper.make_model(graph,
                                                            opset_imports=[onnx.helper.make_opsetid("", 12)])))


# ---- the new stages under random schedules: every sketch and annotation the tuner may try computes the same

@pytest.mark.parametrize("op,shapes,dtype,attrs", [
    ("nn.conv3d", [(1, 4, 4, 5, 6), (4, 2, 2, 3, 2)], F, {"padding": (1, 0, 1, 0, 1, 1), "groups": 2}),
    ("nn.max_pool3d", [(1, 2, 5, 6, 7)], F, {"pool_size": (2, 3, 2), "strides": (2, 2, 2), "ceil_mode": True}),
    ("nn.avg_pool3d", [(1, 2, 5, 6, 7)], F, {"pool_size": (2, 3, 2), "padding": (1, 1, 0, 1, 1, 1),
                                            "ceil_mode": True}),
    ("nn.conv_transpose", [(1, 4, 3, 4), (4, 3, 3, 3)], F, {"strides": (2, 2), "dilation": (1, 2),
                                                           "pad_begin": (1, 0), "output_size": (6, 9),
                                                           "groups": 2}),
    ("nn.max_pool3d_argmax", [(1, 2, 1, 6, 7)], "int64", {"pool_size": (1, 3, 2), "strides": (1, 2, 2),
                                                         "padding": (0, 1, 0, 0, 1, 1), "storage_order": 1}),
], ids=str)
def test_random_schedules_keep_results(op, shapes, dtype, attrs):
    import random

    from compiler.lower import lower
    from compiler.task import Task
    from loop_eval import run_primfunc
    from relayish import TensorType, Var, call, get_op, te
    from relayish.interp import evaluate_one
    from tuning.annotate import concretize, random_programs
    from tuning.sketch import generate_sketches

    dtypes = [dtype] + [F] * (len(shapes) - 1)
    node = call(op, *[Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(zip(shapes, dtypes))], **attrs)
    placeholders = [te.placeholder(s, d, name=f"x{k}") for k, (s, d) in enumerate(zip(shapes, dtypes))]
    out = get_op(op).compute(placeholders, node.attrs, node.type)
    task = Task("test", op, None, placeholders, [out], 1.0)
    rng = np.random.default_rng(4)
    data = [(rng.integers(-2, 3, s) if d == "int64" else rng.standard_normal(s)).astype(d)
            for s, d in zip(shapes, dtypes)]
    want = evaluate_one(node, data)
    sketches, init = generate_sketches(task), task.initial_state()
    for prog, _ in random_programs(sketches, init, 6, random.Random(0)):
        func = lower(concretize(sketches[prog.sketch_id], prog, init).apply(init))
        n_in = len(data)
        bufs = [a.copy() for a in data] + [np.zeros(want.shape, want.dtype)] + \
            [np.zeros(int(np.prod(p.shape)), p.dtype) for p in func.params[n_in + 1:]]
        run_primfunc(func, bufs)
        np.testing.assert_allclose(bufs[n_in], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel, strides, pixel_shuffle", [((2, 2), (2, 2), True), ((3, 2), (3, 2), True),
                                                            ((3, 3), (2, 2), False)])
def test_a_transposed_convolution_of_whole_patches_is_a_1x1_convolution(kernel, strides, pixel_shuffle):
    """kernel == stride: each input pixel writes its own patch, a 1x1 convolution to O*k*k channels and a
    depth-to-space, with no zero-inserted input (frontends/onnx/ops/conv.py _patches_to_pixels)."""
    inputs = {"x": ((1, 4, 5, 6), F)}
    model = typed_model("ConvTranspose", inputs, {"strides": list(strides)}, 11, {"w": w(4, 3, *kernel)})
    text = str(from_onnx(model).main)
    assert ("= transpose(" in text and "= pad(" not in text and "4, 1, 1)" in text) == pixel_shuffle
    three_way(model, feeds_for(inputs, np.random.default_rng(0), ints=None))

"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the ops transformers need, one node
per model, over broadcasts, negative axes, integer and boolean tensors and the opset forms of each op.

A case: (op type, graph inputs {name: (shape, dtype)}, attributes, opset, initializers {name: array}), the
arguments of harness.typed_model but the output count. Node inputs are the graph inputs then the initializers, in
order (a None initializer is an omitted input).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from compiler import compile_model
from harness import case_id, feeds_for, i64, three_way, typed_model

F, I64, B = "float32", "int64", "bool"
R = np.random.default_rng(7)

CASES = [
    ("LayerNormalization", {"x": ((2, 5, 8), F)}, {"axis": -1, "epsilon": 1e-5}, 17,
     {"s": R.standard_normal(8).astype(np.float32), "b": R.standard_normal(8).astype(np.float32)}),
    ("LayerNormalization", {"x": ((2, 5, 8), F)}, {"axis": 1}, 17, {"s": R.standard_normal((5, 8)).astype(np.float32)}),
    ("LayerNormalization", {"x": ((2, 5, 8), F)}, {"axis": -2}, 17,
     {"s": R.standard_normal((1, 8)).astype(np.float32), "b": np.float32([0.5])}),
    ("Gelu", {"x": ((3, 7), F)}, {}, 20, {}),
    ("Gelu", {"x": ((3, 7), F)}, {"approximate": "tanh"}, 20, {}),
    ("Erf", {"x": ((3, 7), F)}, {}, 13, {}),
    ("Abs", {"x": ((3, 7), F)}, {}, 13, {}),
    ("Abs", {"x": ((3, 7), I64)}, {}, 13, {}),
    ("Reciprocal", {"x": ((3, 7), F)}, {}, 13, {}),
    ("Pow", {"a": ((2, 3, 4), F), "b": ((4,), F)}, {}, 15, {}),
    ("Softmax", {"x": ((2, 3, 5), F)}, {"axis": 1}, 13, {}),
    ("Softmax", {"x": ((2, 3, 5), F)}, {"axis": -3}, 13, {}),
    ("MatMul", {"a": ((2, 1, 3, 4), F), "b": ((3, 4, 5), F)}, {}, 13, {}),
    ("MatMul", {"a": ((4,), F), "b": ((2, 4, 3), F)}, {}, 13, {}),
    ("Transpose", {"x": ((2, 3, 4, 5), F)}, {"perm": [2, 0, 3, 1]}, 13, {}),
    ("Slice", {"x": ((6, 7, 8), F)}, {}, 13, {"st": i64(-1, 1), "en": i64(-2**63, 7), "ax": i64(-3, 2),
                                             "sp": i64(-2, 3)}),
    ("Slice", {"x": ((6, 7), F)}, {"starts": [1], "ends": [100], "axes": [1]}, 9, {}),
    ("Split", {"x": ((2, 9), F)}, {"axis": -1}, 13, {"split": i64(2, 3, 4)}),
    ("Split", {"x": ((2, 9), F)}, {"axis": 1, "num_outputs": 2}, 18, {}),
    ("Split", {"x": ((6, 2), F)}, {"axis": 0, "split": [1, 5]}, 11, {}),
    ("Gather", {"x": ((5, 6), F), "i": ((2, 3), I64)}, {"axis": 0}, 13, {}),
    ("Gather", {"x": ((5, 6), F), "i": ((4,), I64)}, {"axis": -1}, 13, {}),
    ("Where", {"c": ((3, 1), B), "a": ((1, 4), F), "b": ((3, 4), F)}, {}, 16, {}),
    ("Where", {"c": ((3, 4), B), "a": ((3, 4), I64), "b": ((4,), I64)}, {}, 16, {}),
    ("Equal", {"a": ((3, 4), I64), "b": ((4,), I64)}, {}, 13, {}),
    ("Less", {"a": ((3, 4), F), "b": ((3, 1), F)}, {}, 13, {}),
    ("Greater", {"a": ((3, 4), I64), "b": ((1,), I64)}, {}, 13, {}),
    ("Not", {"a": ((3, 4), B)}, {}, 13, {}),
    ("And", {"a": ((3, 4), B), "b": ((4,), B)}, {}, 13, {}),
    ("Or", {"a": ((3, 4), B), "b": ((3, 1), B)}, {}, 13, {}),
    ("Expand", {"x": ((3, 1), F)}, {}, 13, {"shape": i64(2, 1, 4)}),
    ("Expand", {"x": ((3, 1), I64)}, {}, 13, {"shape": i64(3, 5)}),
    ("Mod", {"a": ((3, 4), I64), "b": ((4,), I64)}, {"fmod": 0}, 13, {}),
    ("Mod", {"a": ((3, 4), I64), "b": ((4,), I64)}, {"fmod": 1}, 13, {}),
    ("Mod", {"a": ((3, 4), F), "b": ((4,), F)}, {"fmod": 1}, 13, {}),
    ("Cast", {"x": ((3, 4), I64)}, {"to": onnx.TensorProto.FLOAT}, 13, {}),
    ("Cast", {"x": ((3, 4), F)}, {"to": onnx.TensorProto.INT64}, 13, {}),
    ("Cast", {"x": ((3, 4), F)}, {"to": onnx.TensorProto.BOOL}, 13, {}),
    ("Cast", {"x": ((3, 4), B)}, {"to": onnx.TensorProto.FLOAT}, 13, {}),
    ("Unsqueeze", {"x": ((3, 4), I64)}, {}, 13, {"axes": i64(-1, 0)}),
    ("Squeeze", {"x": ((3, 1, 4, 1), F)}, {"axes": [-1]}, 11, {}),
    ("Concat", {"a": ((2, 3), I64), "b": ((2, 1), I64)}, {"axis": -1}, 13, {}),
    ("Trilu", {"x": ((2, 4, 5), F)}, {"upper": 0}, 14, {"k": np.array(1, np.int64)}),
    ("Trilu", {"x": ((4, 5), I64)}, {"upper": 1}, 14, {"k": np.array(-1, np.int64)}),
    ("ReduceMean", {"x": ((2, 3, 4), F)}, {"axes": [-1, 0], "keepdims": 0}, 13, {}),
    ("ReduceMean", {"x": ((2, 3, 4), F)}, {}, 18, {"axes": i64(1)}),
    ("ReduceSum", {"x": ((2, 3, 4), F)}, {"keepdims": 1}, 13, {"axes": i64(-2)}),
    ("ReduceSum", {"x": ((2, 3, 4), I64)}, {"keepdims": 0}, 13, {}),
    ("ReduceMax", {"x": ((2, 3, 4), F)}, {"axes": [1, 2]}, 13, {}),
    ("ReduceMax", {"x": ((2, 3, 4), I64)}, {"keepdims": 0}, 18, {"axes": i64(0)}),
]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    op, inputs, attrs, opset, consts = case
    n_outputs = 3 if op == "Split" else 1
    if op == "Split" and ("num_outputs" in attrs):
        n_outputs = attrs["num_outputs"]
    elif op == "Split" and "split" in attrs:
        n_outputs = len(attrs["split"])
    model = typed_model(op, inputs, attrs, opset, consts, n_outputs)
    feeds = feeds_for(inputs, np.random.default_rng(0), ints=(-5, 5))  # indices in range of a 5-row table
    if op == "Pow":  # a real result
        feeds["a"] = np.abs(feeds["a"]) + np.float32(0.1)
    if op == "Mod":  # no division by zero
        feeds["b"] = np.where(feeds["b"] == 0, 3, feeds["b"]).astype(feeds["b"].dtype)
    three_way(model, feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_div_and_mod_never_trap(dtype):
    # Div truncates toward zero (ONNX), Mod takes the divisor's sign; a run-time divisor of 0 gives 0 and
    # INT_MIN / -1 wraps, instead of the SIGFPE that x86's idiv raises (onnxruntime itself dies on the latter)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Mod", ["a", "b"], ["m"])],
                              "div", [helper.make_tensor_value_info(n, elem, [8]) for n in "ab"],
                              [helper.make_tensor_value_info(n, elem, [8]) for n in "qm"])
    sess = compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    low = np.iinfo(dtype).min
    a = np.array([7, -7, 7, -7, 5, low, 3, -9], dtype)
    b = np.array([2, 2, -2, -2, 0, -1, 0, 4], dtype)
    q, m = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(q, np.array([3, -3, -3, 3, 0, low, 0, -2], dtype))
    np.testing.assert_array_equal(m, np.array([1, 1, -1, -1, 0, 0, 0, 3], dtype))

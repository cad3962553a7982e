"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the reductions and scans beyond
Sum/Mean/Max/Min: ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, ReduceProd, ArgMax, ArgMin,
LogSoftmax, Hardmax, CumSum, CumProd; over negative axes, keepdims 0/1, the attribute and input forms of axes,
several dtypes, ties and NaNs.

A case: (op type, graph inputs {name: (shape, dtype)}, attributes, opset, initializers {name: array}), the
arguments of harness.typed_model.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import from_onnx
from frontends.onnx import OnnxImportError
from harness import assert_close, case_id, feeds_for, i64, run_ort_or_none, three_way, typed_model
from relayish.interp import evaluate

F, D, H, I32, I64 = "float32", "float64", "float16", "int32", "int64"


REDUCE_CASES = [
    (op, {"x": ((2, 3, 4), dt)}, attrs, opset, consts)
    for op, dtypes in (("ReduceL1", (F, D, I64)), ("ReduceL2", (F, D)), ("ReduceSumSquare", (F, I32)),
                       ("ReduceLogSum", (F,)), ("ReduceLogSumExp", (F, D)), ("ReduceProd", (F, I64)))
    for dt in dtypes
    for attrs, opset, consts in (
        ({"axes": [-1, 0], "keepdims": 0}, 13, {}),
        ({"axes": [1]}, 11, {}),
        ({"keepdims": 0}, 13, {}),  # every axis
        ({"keepdims": 1}, 18, {"axes": i64(-2)}),
        ({"keepdims": 0}, 18, {"axes": i64(2, 0)}),
        ({}, 18, {}),  # no axes input: every axis
    )
] + [
    ("ReduceL1", {"x": ((2, 3, 4), F)}, {"noop_with_empty_axes": 1}, 18, {"axes": i64()}),
    ("ReduceSumSquare", {"x": ((5, 4), F)}, {"noop_with_empty_axes": 1}, 18, {}),
    ("ReduceL2", {"x": ((5, 4), F)}, {"noop_with_empty_axes": 1}, 18, {}),
    ("ReduceLogSum", {"x": ((5, 4), F)}, {"noop_with_empty_axes": 1}, 18, {}),
    ("ReduceLogSumExp", {"x": ((5, 4), F)}, {"noop_with_empty_axes": 1}, 18, {}),
    ("ReduceProd", {"x": ((5, 4), F)}, {"noop_with_empty_axes": 1}, 18, {}),
    ("ReduceL2", {"x": ((3, 40), F)}, {"axes": [-1]}, 13, {}),
    ("ReduceLogSumExp", {"x": ((3, 40), H)}, {"axes": [-1]}, 13, {}),
    ("ReduceProd", {"x": ((3, 4, 5), I32)}, {"axes": [0, 2], "keepdims": 0}, 13, {}),
    ("ReduceProd", {"x": ((3, 8), H)}, {"axes": [1]}, 13, {}),
    ("ReduceSumSquare", {"x": ((3, 40), H)}, {"axes": [0]}, 13, {}),
    ("ReduceLogSum", {"x": ((3, 40), H)}, {"axes": [0]}, 13, {}),
    ("ReduceL2", {"x": ((3, 40), I64)}, {"axes": [1]}, 13, {}),  # sqrt in float64, truncated
    ("ReduceSumSquare", {"x": ((3, 40), "uint32")}, {"axes": [1]}, 13, {}),
]


def reduction_feeds(op, inputs, rng):
    """Random feeds: positive floats for a real log and products neither vanishing nor exploding; small ints."""
    positive = op in ("ReduceLogSum", "ReduceProd")
    return feeds_for(inputs, rng, ints=(-3 if op == "ReduceProd" else -5, 4),
                     floats=(lambda x: np.abs(x) * 0.5 + 0.75) if positive else None)


def assert_close_16(ours, ref, what):
    """float16 results within 2**-9 of the largest (2 to 4 ulp of it): the compositions round to 16 bits between
    their ops, where onnxruntime's fused kernels may not; other floats within the project tolerance."""
    if ref.dtype != np.float16:
        return assert_close(ours, ref, what)
    scale = float(np.max(np.abs(ref.astype(np.float64))))
    err = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64))))
    assert err <= 2.0 ** -9 * scale, f"{what}: error {err:.3g} > 2**-9 of {scale:.3g}"


def check(model, feeds):
    """harness.three_way, float16 within assert_close_16; where onnxruntime has no kernel (Hardmax of float64),
    compiled vs interpreted only."""
    return three_way(model, feeds, close=assert_close_16, reference=run_ort_or_none)


@pytest.mark.parametrize("case", REDUCE_CASES, ids=case_id)
def test_reductions_three_way(case):
    op, inputs, attrs, opset, consts = case
    model = typed_model(op, inputs, attrs, opset, consts, 1)
    check(model, reduction_feeds(op, inputs, np.random.default_rng(0)))


SPLIT_CASES = [  # a trailing run of reduced axes and others: rows first, then the rest (reduce._rows_then_rest)
    ("ReduceMax", (1, 96, 12, 40), [1, 3], 1),
    ("ReduceMean", (2, 48, 5, 37), [1, 3], 0),
    ("ReduceSum", (3, 20, 6, 33), [0, 2, 3], 1),
    ("ReduceMin", (4, 7, 130), [0, 2], 0),
]


@pytest.mark.parametrize("op, shape, axes, keepdims", SPLIT_CASES, ids=[f"{c[0]}-{c[2]}" for c in SPLIT_CASES])
def test_reductions_over_rows_and_other_axes_three_way(op, shape, axes, keepdims):
    from compiler.passes import PassContext, run_pipeline
    from compiler.task import extract_tasks
    model = typed_model(op, {"x": (shape, F)}, {"axes": axes, "keepdims": keepdims}, 11, {}, 1)
    check(model, reduction_feeds(op, {"x": (shape, F)}, np.random.default_rng(1)))
    stages = [st.op.name for t in extract_tasks(run_pipeline(from_onnx(model), PassContext()))
              for st in t.initial_state().stages]
    assert any(name.endswith("_rows_lanes") for name in stages) and any("_rest" in n for n in stages), stages


@pytest.mark.parametrize("shape", [(1, 797, 6, 6), (2, 64, 40, 40)], ids=str)
def test_whole_tensor_max_three_way(shape):
    # short rows (797 of 36) reduce as one row; long ones (128 of 1,600) as rows in parallel, then the rows
    model = typed_model("ReduceMax", {"x": (shape, F)}, {"keepdims": 0}, 13, {}, 1)
    check(model, reduction_feeds("ReduceMax", {"x": (shape, F)}, np.random.default_rng(2)))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceProd", "ReduceL2", "ReduceLogSumExp"])
def test_reducing_a_scalar_is_the_scalar_every_run(op):
    # a reduction over no axes once kept no reduction loop, so its accumulator was never reset between runs
    model = typed_model(op, {"x": ((), F)}, {"keepdims": 0}, 13, {}, 1)
    session = compile_model(model)
    for value in (1.5, 2.5, 4.0):
        x = np.array(value, np.float32)
        y, = session.run(None, {"x": x})
        assert y.shape == () and float(y) == pytest.approx(value, rel=1e-6)
    check(model, {"x": np.array(0.75, np.float32)})


def test_log_sum_exp_does_not_overflow_and_keeps_infinities():
    model = typed_model("ReduceLogSumExp", {"x": ((4, 3), F)}, {"axes": [1], "keepdims": 0}, 13, {}, 1)
    x = np.array([[100, 100, 90], [-np.inf, -np.inf, -np.inf], [np.inf, 1, -np.inf], [1000, -1000, 3]], np.float32)
    y, = compile_model(model).run(None, {"x": x})
    np.testing.assert_allclose(y, [100 + np.log(2 + np.exp(-10)), -np.inf, np.inf, 1000], rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceLogSumExp"])
def test_log_reductions_refuse_integers(op):
    model = typed_model(op, {"x": ((2, 3), I64)}, {"axes": [1]}, 13, {}, 1)
    with pytest.raises(OnnxImportError, match=f"{op} of int64 tensors is not supported"):
        from_onnx(model)


def test_reduce_axes_must_be_constant():
    x = helper.make_tensor_value_info("x", 1, [2, 3])
    axes = helper.make_tensor_value_info("axes", 7, [1])
    graph = helper.make_graph([helper.make_node("ReduceL2", ["x", "axes"], ["y"])], "g", [x, axes],
                              [helper.make_tensor_value_info("y", 1, [1, 3])])
    with pytest.raises(OnnxImportError, match="input 'axes' must be a constant"):
        from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


# ---- ArgMax, ArgMin: ints in [-5, 4) over short axes tie often, which select_last_index tells apart

ARG_CASES = [
    (op, {"x": ((3, 4, 5), dt)}, attrs, opset, {})
    for op in ("ArgMax", "ArgMin")
    for dt in (F, I32, I64)
    for attrs, opset in (
        ({"axis": 1}, 11),
        ({"axis": -1, "keepdims": 0}, 11),
        ({}, 13),  # axis 0, keepdims
        ({"axis": -2, "keepdims": 0, "select_last_index": 1}, 13),
        ({"axis": 2, "select_last_index": 1}, 12),
        ({"axis": 0, "keepdims": 0, "select_last_index": 0}, 13),
    )
] + [
    ("ArgMax", {"x": ((6, 40), D)}, {"axis": 1, "select_last_index": 1}, 13, {}),
    ("ArgMin", {"x": ((40, 6), H)}, {"axis": 0, "keepdims": 0}, 13, {}),
    ("ArgMax", {"x": ((7,), F)}, {"axis": 0, "keepdims": 0}, 13, {}),  # a 0-d result
    ("ArgMax", {"x": ((3, 40), "uint8")}, {"axis": 1}, 13, {}),
    ("ArgMin", {"x": ((3, 40), "int8")}, {"axis": 1, "select_last_index": 1}, 13, {}),
]


@pytest.mark.parametrize("case", ARG_CASES, ids=case_id)
def test_arg_reductions_three_way(case):
    op, inputs, attrs, opset, consts = case
    model = typed_model(op, inputs, attrs, opset, consts, 1)
    feeds = reduction_feeds(op, inputs, np.random.default_rng(1))
    if inputs["x"][1] == F:  # float ties too
        feeds["x"] = np.round(feeds["x"]).astype(np.float32)
    check(model, feeds)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_take_nan_as_the_extreme_as_numpy(op, last):
    """numpy (the onnx reference): a NaN is the maximum and the minimum, the first (or, with select_last_index,
    the last) one wins. onnxruntime differs (it skips NaNs unless one comes first), so numpy is the truth here."""
    model = typed_model(op, {"x": ((3, 5), F)}, {"axis": 1, "keepdims": 0, "select_last_index": last}, 13, {}, 1)
    x = np.array([[1, np.nan, 7, np.nan, 2], [np.nan, 1, 2, 3, 4], [5, 5, -1, -1, 0]], np.float32)
    y, = compile_model(model).run(None, {"x": x})
    flip = x[:, ::-1]
    fn = np.argmax if op == "ArgMax" else np.argmin
    want = 4 - fn(flip, axis=1) if last else fn(x, axis=1)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(evaluate(from_onnx(model), {"x": x})[0], want)


# ---- CumSum, CumProd

SCAN_CASES = [
    (op, {"x": ((3, 4, 5), dt)}, attrs, opset, {"axis": np.array(axis, adt)})
    for op, opset, dtypes in (("CumSum", 14, (F, D, I32, I64)), ("CumProd", 26, (F, I64)))
    for dt in dtypes
    for attrs, axis, adt in (
        ({}, 0, np.int64),
        ({"exclusive": 1}, -1, np.int32),
        ({"reverse": 1}, 1, np.int64),
        ({"exclusive": 1, "reverse": 1}, -2, np.int64),
        ({}, [2], np.int64),  # a 1-element 1-D axis
    )
] + [
    ("CumSum", {"x": ((7, 33), F)}, {"reverse": 1}, 11, {"axis": np.array(1, np.int64)}),
    # long axes (relayish.ops.reduce.BLOCKED_SCAN_MIN): in blocks
    ("CumSum", {"x": ((4, 200), F)}, {"reverse": 1, "exclusive": 1}, 14, {"axis": np.array(-1, np.int64)}),
    ("CumSum", {"x": ((130, 3), I64)}, {}, 14, {"axis": np.array(0, np.int64)}),
    ("CumSum", {"x": ((2, 64, 3), D)}, {"exclusive": 1}, 14, {"axis": np.array(1, np.int32)}),
    ("CumProd", {"x": ((2, 81), F)}, {"reverse": 1}, 26, {"axis": np.array(1, np.int64)}),
    ("CumProd", {"x": ((70, 2), I32)}, {"exclusive": 1}, 26, {"axis": np.array(0, np.int64)}),
    ("CumSum", {"x": ((3, 40), H)}, {}, 14, {"axis": np.array(1, np.int64)}),
    ("CumProd", {"x": ((3, 10), H)}, {"reverse": 1}, 26, {"axis": np.array(1, np.int64)}),
]


@pytest.mark.parametrize("case", SCAN_CASES, ids=case_id)
def test_scans_three_way(case):
    op, inputs, attrs, opset, consts = case
    model = typed_model(op, inputs, attrs, opset, consts, 1)
    feeds = reduction_feeds("ReduceProd" if op == "CumProd" else op, inputs, np.random.default_rng(2))
    check(model, feeds)


def test_scan_axis_must_be_one_constant_value():
    model = typed_model("CumSum", {"x": ((3, 4), F)}, {}, 14, {"axis": np.array([0, 1], np.int64)}, 1)
    with pytest.raises(OnnxImportError, match="input 'axis' must hold one value"):
        from_onnx(model)


# ---- LogSoftmax and Hardmax: opsets before 13 coerce x to 2-D at axis (over the whole tail), 13 one axis

SOFTMAX_CASES = [
    (op, {"x": ((2, 3, 4), F)}, attrs, opset, {})
    for op in ("LogSoftmax", "Hardmax")
    for attrs, opset in (({}, 11), ({"axis": 0}, 11), ({"axis": -2}, 11), ({}, 13), ({"axis": 0}, 13),
                         ({"axis": -2}, 13), ({"axis": 1}, 7))
] + [
    ("LogSoftmax", {"x": ((3, 48), F)}, {"axis": -1}, 13, {}),  # the row form
    ("LogSoftmax", {"x": ((4, 32), D)}, {"axis": 1}, 11, {}),
    ("Hardmax", {"x": ((4, 32), D)}, {"axis": -1}, 13, {}),
    ("Hardmax", {"x": ((4, 6), H)}, {"axis": 0}, 13, {}),
    ("LogSoftmax", {"x": ((3, 40), H)}, {}, 13, {}),
    ("LogSoftmax", {"x": ((3, 5, 7), H)}, {"axis": 1}, 13, {}),
]


@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=case_id)
def test_softmax_relatives_three_way(case):
    op, inputs, attrs, opset, consts = case
    model = typed_model(op, inputs, attrs, opset, consts, 1)
    feeds = reduction_feeds(op, inputs, np.random.default_rng(3))
    if op == "Hardmax":  # ties: the first maximum wins
        feeds["x"] = np.round(feeds["x"]).astype(feeds["x"].dtype)
    check(model, feeds)


# ---- the new stages under random schedules: every sketch and annotation the tuner may try computes the same

@pytest.mark.parametrize("op,shape,dtype,attrs", [
    ("prod", (4, 64), F, {"axes": (1,), "keepdims": False}),  # a long reduction: the rfactor sketch
    ("argmax", (6, 40), F, {"axis": 1, "keepdims": False, "select_last_index": True}),
    ("argmin", (5, 7), I64, {"axis": 0, "keepdims": True, "select_last_index": False}),
    ("cumsum", (3, 24), F, {"axis": 1, "exclusive": True, "reverse": True}),
    ("cumprod", (2, 70), F, {"axis": 1, "exclusive": False, "reverse": True}),  # in blocks
    ("nn.log_softmax", (4, 32), F, {"axis": -1}),  # the row form
    ("nn.log_softmax", (4, 5, 6), F, {"axis": 1}),
])
def test_random_schedules_keep_results(op, shape, dtype, attrs):
    import random

    from compiler.lower import lower
    from compiler.task import Task
    from loop_eval import run_primfunc
    from relayish import TensorType, Var, call, get_op, te
    from relayish.interp import evaluate_one
    from tuning.annotate import concretize, random_programs
    from tuning.sketch import generate_sketches

    node = call(op, Var("x", TensorType(shape, dtype)), **attrs)
    x = te.placeholder(shape, dtype, name="x")
    out = get_op(op).compute([x], node.attrs, node.type)
    task = Task("test", op, None, [x], [out], 1.0)
    rng = np.random.default_rng(4)
    data = (rng.integers(-2, 3, shape) if dtype == I64 else rng.standard_normal(shape) * 0.5 + 1).astype(dtype)
    if op == "argmax":
        data = np.round(data * 2).astype(dtype)  # ties
    want = evaluate_one(node, [data])
    sketches, init = generate_sketches(task), task.initial_state()
    for prog, _ in random_programs(sketches, init, 6, random.Random(0)):
        func = lower(concretize(sketches[prog.sketch_id], prog, init).apply(init))
        bufs = [data.copy(), np.zeros(want.shape, want.dtype)] + \
            [np.zeros(int(np.prod(p.shape)), p.dtype) for p in func.params[2:]]
        run_primfunc(func, bufs)
        np.testing.assert_allclose(bufs[1], want, rtol=1e-5, atol=1e-6)


# ---- bad nodes: an import error that names the node and what is wrong

@pytest.mark.parametrize("op,inputs,attrs,opset,consts,message", [
    ("ArgMax", {"x": ((2, 3), F)}, {"axis": 2}, 13, {}, r"axis 2 out of range for a 2-D input"),
    ("ArgMin", {"x": ((2, 3), F)}, {"axis": -3}, 13, {}, r"axis -3 out of range for a 2-D input"),
    ("CumSum", {"x": ((2, 3), F)}, {}, 14, {"axis": np.array(2, np.int64)}, r"axis 2 out of range"),
    ("CumSum", {"x": ((2, 3), F)}, {}, 14, {"axis": np.array(0.0, np.float32)}, r"input 'axis' must be int32 or int64"),
    ("ReduceL1", {"x": ((2, 3), F)}, {"axes": [0, -2]}, 13, {}, r"repeated axes"),
    ("ReduceProd", {"x": ((2, 3), F)}, {"keepdims": 0}, 18, {"axes": i64(3)}, r"axis 3 out of range"),
    ("LogSoftmax", {"x": ((2, 3), F)}, {"axis": 2}, 13, {}, r"axis 2 out of range for a 2-D input"),
    ("Hardmax", {"x": ((2, 3), F)}, {"axis": -3}, 11, {}, r"axis -3 out of range for a 2-D input"),
])
def test_bad_nodes_are_refused_by_name(op, inputs, attrs, opset, consts, message):
    node = helper.make_node(op, list(inputs) + list(consts), ["y"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "bad", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s)
                        for n, (s, d) in inputs.items()],
        [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.graph.output[0].type.tensor_type.shape.SetInParent()  # the checker wants a shape; any will do
    with pytest.raises(OnnxImportError, match=message) as error:
        from_onnx(model)
    assert "the_node" in str(error.value)


# ---- onnx's own cases of these ops, their run-time axes made initializers: the conformance suite refuses them
# (shapes are static), this checks the numbers behind the refusal against onnx's expected outputs

_CASE_NAMES = ("test_reduce_l1_", "test_reduce_l2_", "test_reduce_sum_square_", "test_reduce_log_sum",
               "test_reduce_prod_", "test_cumsum_", "test_cumprod_")


@pytest.fixture(scope="module")
def onnx_cases():
    from relayish_tools.conformance import load_cases
    return {c.name: c for c in load_cases() if c.name.startswith(_CASE_NAMES)}


def test_onnx_cases_with_constant_axes_match_their_expected_outputs(onnx_cases):
    from relayish_tools.conformance.engines import as_value, compare, graph_feeds
    checked, problems = 0, []
    for name, case in sorted(onnx_cases.items()):
        for inputs, expected in case.data_sets:
            model = type(case.model)()
            model.CopyFrom(case.model)
            feeds = graph_feeds(model, inputs)
            if any(np.asarray(v).size == 0 for v in feeds.values()):
                continue  # an empty axes input or an empty tensor: zero-size tensors are refused
            for input_name in list(feeds)[1:]:  # axes / axis, given as the graph's run-time input
                model.graph.initializer.append(numpy_helper.from_array(np.asarray(feeds.pop(input_name)), input_name))
            session = compile_model(model, input_shapes={k: np.shape(v) for k, v in feeds.items()}, num_threads=1)
            problem = compare([as_value(v) for v in expected], session.run(None, feeds), case.rtol, case.atol)
            checked += 1
            if problem:
                problems.append(f"{name}: {problem}")
    assert not problems, "\n".join(problems)
    assert checked >= 80  # onnx 1.23: 80 data sets (single-node and expanded)

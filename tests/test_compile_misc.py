"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the ops of frontends/onnx/ops/
selection.py, linalg.py and control.py, of the integer ops of quantization.py and of two of movement.py:
TopK (largest / smallest, ties, NaN, negative axes), Einsum, If, Loop, the data-dependent shapes (NonZero, Compress,
Unique) folded at import, ReverseSequence, Det, CenterCropPad, MatMulInteger, QLinearMatMul; and the clear errors
of the nodes they refuse.

A case: the arguments of harness.typed_model: (op type, graph inputs {name: (shape, dtype) or an array fed as it
is}, attributes, opset, initializers {name: array, or None for an omitted input}, output count). Node inputs are the
graph inputs then the initializers, in order.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import case_id, feeds_for, i64, run_ort, three_way, typed_model, with_output_shapes
from relayish.interp import evaluate

F, F64, I64, I32, U8, I8 = "float32", "float64", "int64", "int32", "uint8", "int8"

TIES = np.array([[3, 1, 3, 2, 1], [0, 0, 0, 0, 0], [5, -1, 5, 7, 7]], np.float32)

TOPKS = [
    ("TopK", {"x": ((3, 6), F)}, {}, 11, {"k": i64(3)}, 2),
    ("TopK", {"x": ((3, 6), F)}, {"largest": 0}, 11, {"k": i64(2)}, 2),
    ("TopK", {"x": ((2, 5, 3), F)}, {"axis": -2}, 11, {"k": i64(5)}, 2),
    ("TopK", {"x": ((2, 5, 3), F)}, {"axis": 0, "largest": 0}, 11, {"k": i64(1)}, 2),
    ("TopK", {"x": ((4, 7), I64)}, {"axis": 1}, 11, {"k": i64(4)}, 2),
    ("TopK", {"x": ((4, 7), I32)}, {"largest": 0}, 11, {"k": i64(7)}, 2),
    ("TopK", {"x": TIES}, {}, 11, {"k": i64(4)}, 2),
    ("TopK", {"x": TIES}, {"largest": 0}, 11, {"k": i64(4)}, 2),
    ("TopK", {"x": ((3, 4), F)}, {"axis": 1}, 10, {"k": i64(2)}, 2),
    ("TopK", {"x": ((3, 4), F)}, {"k": 2, "axis": 0}, 9, {}, 2),
]


@pytest.mark.parametrize("case", TOPKS, ids=case_id)
def test_three_way(case):
    model = typed_model(*case)
    three_way(model, feeds_for(case[1], np.random.default_rng(0)))


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_nan_ordering_follows_the_reference(largest):
    # the reference's lexsort puts NaN above every number (first when largest, last when smallest)
    x = np.array([[1.0, np.nan, -np.inf, np.nan, 2.0, np.inf]], np.float32)
    model = typed_model("TopK", {"x": x}, {"largest": largest}, 11, {"k": i64(6)}, 2)
    from onnx.reference import ReferenceEvaluator
    want_v, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    for values, indices in (compile_model(model).run(None, {"x": x}), evaluate(from_onnx(model), {"x": x})):
        np.testing.assert_array_equal(np.asarray(indices), want_i)
        np.testing.assert_array_equal(np.asarray(values), want_v)


@pytest.mark.parametrize("op,inputs,consts,attrs,message", [
    ("TopK", {"x": ((3, 4), F)}, {"k": i64(5)}, {}, r"k = 5 must be in \[0, 4\]"),
    ("TopK", {"x": ((3, 4), F)}, {"k": i64(2)}, {"axis": 2}, "axis 2 out of range"),
    ("TopK", {"x": ((3, 4), F), "k": ((1,), I64)}, {}, {}, "input 'K' must be a constant"),
    ("TopK", {"x": ((2, 10000), F)}, {"k": i64(2)}, {}, "needs 200000000 pairwise comparisons"),
])
def test_bad_nodes_are_refused_clearly(op, inputs, consts, attrs, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, attrs, 18, consts, 2))


EINSUMS = [  # (equation, input shapes, dtype)
    ("ij,jk->ik", [(3, 4), (4, 5)], F),
    ("ij,jk", [(3, 4), (4, 5)], F),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], F),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 3, 4, 2)], F),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], F),
    ("ii->i", [(4, 4)], F),
    ("ii", [(4, 4)], F),
    ("bii->bi", [(2, 3, 3)], F64),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)], F),
    ("ij->", [(3, 4)], F),
    ("ij->ji", [(3, 4)], F),
    ("i,i", [(5,), (5,)], F),
    ("i,j->ij", [(3,), (4,)], F),
    ("ij,ij->ij", [(3, 4), (3, 4)], I64),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], F),
    ("abc,cd->", [(2, 3, 4), (4, 5)], F),
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)], I32),
    ("...i,...i->...", [(2, 3, 4), (1, 3, 4)], F),
    ("ba,ca->bc", [(3, 4), (5, 4)], F),
    ("i...->...", [(3, 2, 4)], F),
    ("Ab,bC->AC", [(2, 3), (3, 4)], F),
    (" ij , jk -> ki ", [(3, 4), (4, 5)], F),
]


@pytest.mark.parametrize("equation,shapes,dtype", EINSUMS, ids=lambda v: str(v))
def test_einsum_three_way(equation, shapes, dtype):
    inputs = {f"x{i}": (s, dtype) for i, s in enumerate(shapes)}
    model = typed_model("Einsum", inputs, {"equation": equation}, 12, {})
    feeds = feeds_for(inputs, np.random.default_rng(0))
    three_way(model, feeds)
    want = np.einsum(equation.replace(" ", ""), *feeds.values())
    got, = compile_model(model).run(None, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("equation,shapes", [("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
                                             ("...i,...i->...", [(2, 3, 4), (4,)])])
def test_einsum_ellipses_of_different_ranks_broadcast_as_numpy(equation, shapes):
    # onnx's shape inference (and onnxruntime) refuse these; numpy right-aligns the ellipsis dims, and so do we
    inputs = {f"x{i}": (s, F) for i, s in enumerate(shapes)}
    model = typed_model("Einsum", inputs, {"equation": equation}, 12, {})
    feeds = feeds_for(inputs, np.random.default_rng(0))
    want = np.einsum(equation, *feeds.values())
    for got in (compile_model(model).run(None, feeds)[0], evaluate(from_onnx(model), feeds)[0]):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_einsum_matmul_runs_on_matmul():
    model = typed_model("Einsum", {"a": ((2, 3, 4), F), "b": ((2, 4, 5), F)}, {"equation": "bij,bjk->bik"}, 12, {})
    text = str(from_onnx(model))
    assert "nn.matmul" in text and "sum(" not in text, text


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk->ik", [(3, 4)], "has 2 input terms but the node has 1"),
    ("ijk->ik", [(3, 4)], "has 3 labels but input 0 has rank 2"),
    ("ij->ix", [(3, 4)], "output label 'x' is in no input"),
    ("ii->i", [(3, 4)], "label 'i' has sizes 3 and 4"),
    ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' has sizes 4 and 5"),
])
def test_einsum_bad_equations_are_refused(equation, shapes, message):
    inputs = {f"x{i}": (s, F) for i, s in enumerate(shapes)}
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model("Einsum", inputs, {"equation": equation}, 12, {}))


# ---- If, Loop ----

def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def _if_model(cond_initializer=None):
    """y = If(cond) then x + w (w from the outer scope) else x * 2 (a branch initializer); z = y - 1."""
    then = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [_vi("t", F, (2, 3))])
    two = numpy_helper.from_array(np.float32(2.0), "two")
    other = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["e"])], "else", [], [_vi("e", F, (2, 3))],
                              [two])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Sub", ["y", "one"], ["z"])]
    inits = [numpy_helper.from_array(np.ones((2, 3), np.float32), "w"), numpy_helper.from_array(np.float32(1), "one")]
    inputs = [_vi("x", F, (2, 3))]
    if cond_initializer is None:
        inputs.append(_vi("c", "bool", ()))
    else:
        inits.append(numpy_helper.from_array(np.array(cond_initializer), "c"))
    graph = helper.make_graph(nodes, "g", inputs, [_vi("z", F, (2, 3))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition_inlines_the_taken_branch(cond):
    model = _if_model(cond)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    three_way(model, feeds)
    assert "multiply" in str(from_onnx(model)) if not cond else "add" in str(from_onnx(model))


def test_if_with_a_run_time_condition_compiles_per_value():
    model = _if_model()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(OnnxImportError, match="input 'cond' must be a constant") as e:
        from_onnx(model)
    assert e.value.needs_values == ("c",)
    sess = compile_model(model)
    for c in (True, False, True):
        feeds = {"x": x, "c": np.array(c)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)


def _loop_model(trip, cond, body_cond="lt", scan=True, carried_init=None):
    """Loop carrying s (s = s + x * i), scanning s each iteration; the body's cond is i < 2 ("lt") or true."""
    body_nodes = [helper.make_node("Cast", ["i"], ["fi"], to=onnx.TensorProto.FLOAT),
                  helper.make_node("Mul", ["x", "fi"], ["xi"]),
                  helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
                  helper.make_node("Identity", ["s_out"], ["scan"])]
    if body_cond == "lt":
        body_nodes.append(helper.make_node("Less", ["i", "two"], ["c_out"]))
    else:
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    outs = [_vi("c_out", "bool", ()), _vi("s_out", F, (3,))] + ([_vi("scan", F, (3,))] if scan else [])
    body = helper.make_graph(body_nodes, "body", [_vi("i", I64, ()), _vi("c_in", "bool", ()), _vi("s_in", F, (3,))],
                             outs, [numpy_helper.from_array(np.int64(2), "two")])
    inits = [numpy_helper.from_array(np.zeros(3, np.float32), "s0")]
    names = ["", "", "s0"]
    if trip is not None:
        inits.append(numpy_helper.from_array(np.int64(trip), "M"))
        names[0] = "M"
    if cond is not None:
        inits.append(numpy_helper.from_array(np.array(cond), "c"))
        names[1] = "c"
    node = helper.make_node("Loop", names, ["s"] + (["ys"] if scan else []), body=body)
    graph = helper.make_graph([node], "g", [_vi("x", F, (3,))],
                              [_vi("s", F, (3,))] + ([_vi("ys", F, ("n", 3))] if scan else []), inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("trip,cond,body_cond", [(5, True, "lt"), (5, None, "lt"), (None, True, "lt"),
                                                 (4, True, "same"), (1, True, "lt"),
                                                 (200, True, "same")])
def test_loop_with_known_trip_count_and_condition_is_unrolled(trip, cond, body_cond):
    model = _loop_model(trip, cond, body_cond)
    three_way(model, {"x": np.arange(3, dtype=np.float32) + 1})


def test_loop_refusals_are_clear():
    with pytest.raises(OnnxImportError, match="trip count 5000 is above the 200"):
        from_onnx(_loop_model(5000, True, "same"))
    with pytest.raises(OnnxImportError, match="more than the 200 iterations"):
        from_onnx(_loop_model(None, True, "same"))
    with pytest.raises(OnnxImportError, match="scan output 0 of a loop that runs no iteration"):
        from_onnx(_loop_model(0, True))
    with pytest.raises(OnnxImportError, match="neither a trip count nor a condition"):
        from_onnx(_loop_model(None, None))


def test_subgraph_with_an_unsupported_op_is_refused_naming_it():
    then = helper.make_graph([helper.make_node("SequenceEmpty", [], ["t"])], "then", [], [_vi("t", F, (1,))])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)
    graph = helper.make_graph([node], "g", [], [_vi("y", F, (1,))], [numpy_helper.from_array(np.array(True), "c")])
    with pytest.raises(OnnxImportError, match="subgraph then_branch: node .* unsupported op type SequenceEmpty"):
        from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


# ---- NonZero, Compress, Unique ----

DATA = np.array([[1, 0, 3], [0, 0, 2], [1, 0, 3]], np.float32)

FOLDED = [
    ("NonZero", {}, 13, {"d": DATA}, 1),
    ("NonZero", {}, 9, {"d": np.array([True, False, True])}, 1),
    ("Unique", {}, 11, {"d": np.array([2, 1, 1, 3, 4, 3], np.int64)}, 4),
    ("Unique", {"sorted": 0}, 11, {"d": np.array([2, 1, 1, 3, 4, 3], np.int64)}, 4),
    ("Unique", {"axis": 0}, 11, {"d": DATA}, 4),
    ("Unique", {"axis": -1, "sorted": 1}, 11, {"d": DATA}, 4),
    ("Unique", {}, 11, {"d": DATA}, 4),
]


@pytest.mark.parametrize("op,attrs,opset,consts,outputs", FOLDED, ids=lambda v: str(v)[:30])
def test_constant_data_is_folded(op, attrs, opset, consts, outputs):
    model = typed_model(op, {}, attrs, opset, consts, outputs)
    ours = from_onnx(model)
    refs = run_ort(model, {})
    got = evaluate(ours, {})
    for g, r in zip(got, refs):
        np.testing.assert_array_equal(np.asarray(g), r)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_with_a_constant_condition_is_a_take(axis):
    cond = np.array([True, False, True])
    attrs = {} if axis is None else {"axis": axis}
    model = typed_model("Compress", {"x": ((3, 4), F)}, attrs, 11, {"c": cond})
    feeds = feeds_for({"x": ((3, 4), F)}, np.random.default_rng(0))
    three_way(model, feeds)
    assert "take" in str(from_onnx(model))


@pytest.mark.parametrize("op,inputs,consts,message", [
    ("NonZero", {"x": ((3,), F)}, {}, "the output shape of NonZero depends on the values of input 'X'"),
    ("Unique", {"x": ((3,), F)}, {}, "the output shape of Unique depends on the values of input 'X'"),
    ("Compress", {"x": ((3,), F), "c": ((3,), "bool")}, {},
     "the output shape of Compress depends on the values of input 'condition'"),
    ("Compress", {"x": ((3,), F)}, {"c": np.array([True] * 4)}, "more than the 3 of axis 0"),
])
def test_data_dependent_shapes_are_refused_clearly(op, inputs, consts, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, {}, 13, consts))


def test_run_time_data_compiles_per_value():
    model = typed_model("NonZero", {"x": ((2, 3), F)}, {}, 13, {})
    sess = compile_model(model)
    for x in (DATA[:2], DATA[1:]):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.array(np.nonzero(x)))


# ---- ReverseSequence, CenterCropPad, Det ----

MOVES = [
    ("ReverseSequence", {"x": ((4, 3), F)}, {}, 10, {"l": i64(4, 1, 2)}),
    ("ReverseSequence", {"x": ((3, 5, 2), F)}, {"batch_axis": 0, "time_axis": 1}, 10, {"l": i64(5, 0, 3)}),
    ("ReverseSequence", {"x": ((4, 2, 2), I64), "l": i64(3, 4)}, {}, 10, {}),
    ("ReverseSequence", {"x": ((2, 4), I32), "l": i64(1, 4)}, {"batch_axis": 0, "time_axis": 1}, 10, {}),
    ("CenterCropPad", {"x": ((5, 7, 3), F)}, {}, 18, {"s": i64(3, 9, 3)}),
    ("CenterCropPad", {"x": ((5, 7, 3), F)}, {"axes": [0, -2]}, 18, {"s": i64(8, 4)}),
    ("CenterCropPad", {"x": ((4, 6), I64)}, {"axes": [1]}, 18, {"s": i64(3)}),
]


@pytest.mark.parametrize("case", MOVES, ids=case_id)
def test_movement_three_way(case):
    model = typed_model(*case)
    three_way(model, feeds_for(case[1], np.random.default_rng(0)))


def test_reverse_sequence_run_time_lengths_out_of_range_are_clamped():
    # onnxruntime refuses them; we clamp to [0, max_time]: never a read outside the input
    model = typed_model("ReverseSequence", {"x": ((4, 3), F), "l": ((3,), I64)}, {}, 10, {})
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    lens = i64(99, -5, 2)
    got, = compile_model(model).run(None, {"x": x, "l": lens})
    want = x.copy()
    want[:, 0] = x[::-1, 0]
    want[:2, 2] = x[1::-1, 2]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,dtype", [((2, 2), F), ((3, 3), F), ((2, 4, 4), F), ((5, 5), F64), ((1, 1), F),
                                         ((2, 2, 4, 4), F64)])
def test_det_matches_numpy(shape, dtype):
    model = typed_model("Det", {"x": (shape, dtype)}, {}, 11, {})
    feeds = feeds_for({"x": (shape, dtype)}, np.random.default_rng(1))
    if dtype == F:  # onnxruntime has no float64 Det
        three_way(model, feeds)
    want = np.linalg.det(feeds["x"])
    np.testing.assert_allclose(compile_model(model).run(None, feeds)[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(evaluate(from_onnx(model), feeds)[0], want, rtol=1e-4, atol=1e-5)


def test_det_of_singular_and_pivoting_matrices():
    x = np.array([[[1, 2, 3], [2, 4, 6], [1, 0, 1]],   # singular
                  [[0, 1, 0], [0, 0, 1], [1, 0, 0]],   # needs row swaps
                  [[0, 0, 0], [1, 2, 3], [4, 5, 6]]], np.float32)
    model = typed_model("Det", {"x": ((3, 3, 3), F)}, {}, 11, {})
    np.testing.assert_allclose(compile_model(model).run(None, {"x": x})[0], np.linalg.det(x), atol=1e-5)


@pytest.mark.parametrize("op,inputs,consts,attrs,message", [
    ("Det", {"x": ((3, 4), F)}, {}, {}, r"must be \[..., n, n\]"),
    ("Det", {"x": ((40, 40), F)}, {}, {}, "above the 32"),
    ("ReverseSequence", {"x": ((4, 3), F)}, {"l": i64(5, 1, 1)}, {}, r"must be in \[0, 4\]"),
    ("ReverseSequence", {"x": ((4, 3), F)}, {"l": i64(1, 1)}, {}, r"of shape \(3,\)"),
    ("CenterCropPad", {"x": ((4, 3), F)}, {"s": i64(1)}, {}, "1 values for 2 axes"),
])
def test_more_bad_nodes_are_refused_clearly(op, inputs, consts, attrs, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, attrs, 18, consts))


# ---- MatMulInteger, QLinearMatMul ----

def u8(*v):
    return np.array(v, np.uint8)


def s8(*v):
    return np.array(v, np.int8)


INTEGER_MATMULS = [
    ("MatMulInteger", {"a": ((3, 4), U8), "b": ((4, 5), U8)}, {}, 10, {}),
    ("MatMulInteger", {"a": ((3, 4), U8), "b": ((4, 5), U8)}, {}, 10, {"az": np.uint8(12), "bz": np.uint8(3)}),
    ("MatMulInteger", {"a": ((3, 4), I8), "b": ((4, 5), I8)}, {}, 10, {"az": s8(-2), "bz": s8(0, 1, 2, 3, 4)}),
    ("MatMulInteger", {"a": ((2, 3, 4), U8), "b": ((4, 5), U8)}, {}, 10, {"az": u8(7)}),
    ("MatMulInteger", {"a": ((4,), I8), "b": ((2, 4, 3), I8)}, {}, 10, {}),
]


@pytest.mark.parametrize("case", INTEGER_MATMULS, ids=case_id)
def test_matmul_integer_three_way(case):
    model = typed_model(*case)
    feeds = feeds_for(case[1], np.random.default_rng(0))
    for name, spec in case[1].items():
        lo, hi = (0, 256) if spec[1] == U8 else (-128, 128)
        feeds[name] = np.random.default_rng(1).integers(lo, hi, spec[0]).astype(spec[1])
    three_way(model, feeds)


def test_matmul_integer_per_row_zero_point_of_a():
    # the spec allows a per-row zero point of A (onnxruntime does not)
    model = typed_model("MatMulInteger", {"a": ((3, 4), I8), "b": ((4, 2), I8)}, {}, 10, {"az": s8(1, -2, 3)})
    rng = np.random.default_rng(3)
    a, b = rng.integers(-128, 128, (3, 4)).astype(np.int8), rng.integers(-128, 128, (4, 2)).astype(np.int8)
    want = (a.astype(np.int32) - np.array([[1], [-2], [3]])) @ b.astype(np.int32)
    np.testing.assert_array_equal(compile_model(model).run(None, {"a": a, "b": b})[0], want)


@pytest.mark.parametrize("shape_a,shape_b,dtype", [((3, 4), (4, 5), U8), ((2, 3, 4), (2, 4, 5), I8),
                                                   ((3, 4), (4, 2), I8)])
def test_qlinear_matmul_requantizes_as_the_reference(shape_a, shape_b, dtype):
    rng = np.random.default_rng(2)
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    zp = (lambda v: np.array(v, dtype))
    consts = {"as": np.float32(0.02), "az": zp(3), "bs": np.float32(0.03), "bz": zp(5 if dtype == U8 else -5),
              "ys": np.float32(0.05), "yz": zp(100 if dtype == U8 else -10)}
    inputs = {"a": (shape_a, dtype), "b": (shape_b, dtype)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y0"])
    graph = helper.make_graph([node], "t", [_vi(n, s[1], s[0]) for n, s in inputs.items()],
                              [helper.make_tensor_value_info("y0", onnx.TensorProto.UNDEFINED, None)],
                              [numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    feeds = {n: rng.integers(lo, hi, s[0]).astype(s[1]) for n, s in inputs.items()}
    from onnx.reference import ReferenceEvaluator
    want, = ReferenceEvaluator(model).run(None, feeds)
    got, = compile_model(model).run(None, feeds)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(evaluate(from_onnx(model), feeds)[0], want)
    ort, = run_ort(model, feeds)  # onnxruntime requantizes in float32: at most one step apart at ties
    assert np.abs(got.astype(int) - ort.astype(int)).max() <= 1


@pytest.mark.parametrize("op,inputs,consts,message", [
    ("MatMulInteger", {"a": ((3, 4), F), "b": ((4, 5), U8)}, {}, "input A must be int8 or uint8"),
    ("MatMulInteger", {"a": ((3, 4), U8), "b": ((4, 5), U8)}, {"az": u8(1, 2)}, "must be one value or 1-D of the 3"),
    ("MatMulInteger", {"a": ((3, 4), U8), "b": ((4, 5), U8)}, {"az": s8(1)}, "must be uint8, got int8"),
])
def test_integer_matmul_bad_nodes_are_refused(op, inputs, consts, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, {}, 10, consts))


CONV_INTEGERS = [
    ("ConvInteger", {"x": ((1, 2, 5, 5), U8), "w": ((3, 2, 3, 3), U8)}, {}, 10, {"xz": np.uint8(7)}),
    ("ConvInteger", {"x": ((1, 2, 5, 5), U8), "w": ((3, 2, 3, 3), U8)}, {"pads": [1, 1, 1, 1]}, 10,
     {"xz": np.uint8(100), "wz": np.uint8(3)}),
    ("ConvInteger", {"x": ((2, 4, 6, 6), I8), "w": ((4, 2, 2, 2), I8)}, {"group": 2, "strides": [2, 2]}, 10, {}),
]


@pytest.mark.parametrize("case", CONV_INTEGERS, ids=case_id)
def test_conv_integer_three_way(case):
    model = typed_model(*case)
    rng = np.random.default_rng(4)
    feeds = {n: rng.integers(*((0, 256) if s[1] == U8 else (-128, 128)), s[0]).astype(s[1])
             for n, s in case[1].items()}
    three_way(model, feeds)


def test_conv_integer_per_channel_weight_zero_point():
    # the spec allows one w zero point per output channel (onnxruntime does not): checked against numpy
    model = typed_model("ConvInteger", {"x": ((1, 1, 3, 3), U8), "w": ((2, 1, 2, 2), U8)}, {}, 10,
                       {"xz": None, "wz": u8(1, 2)})
    x = np.arange(9, dtype=np.uint8).reshape(1, 1, 3, 3)
    w = np.arange(8, dtype=np.uint8).reshape(2, 1, 2, 2)
    ws = w.astype(np.int32) - np.array([1, 2]).reshape(2, 1, 1, 1)
    want = np.zeros((1, 2, 2, 2), np.int32)
    for o in range(2):
        for i in range(2):
            for j in range(2):
                want[0, o, i, j] = (x[0, 0, i:i + 2, j:j + 2].astype(np.int32) * ws[o, 0]).sum()
    np.testing.assert_array_equal(compile_model(model).run(None, {"x": x, "w": w})[0], want)

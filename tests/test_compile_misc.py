"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the ops of frontends/onnx_ops_misc.py:
TopK (largest / smallest, ties, NaN, negative axes), Einsum, If, Loop, the data-dependent shapes (NonZero, Compress,
Unique) folded at import, ReverseSequence, Det, CenterCropPad, MatMulInteger, QLinearMatMul; and the clear errors
of the nodes they refuse.

A case: (op type, graph inputs {name: (shape, dtype) or an array fed as it is}, attributes, opset, initializers
{name: array}, output count). Node inputs are the graph inputs then the initializers, in order.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from relayish.interp import evaluate
from test_frontend import assert_close, run_ort, with_output_shapes

F, F64, I64, I32, U8, I8 = "float32", "float64", "int64", "int32", "uint8", "int8"


def i64(*values):
    return np.array(values, np.int64)


def make_model(op, inputs, attrs, opset, consts, outputs=1):
    def info(name, spec):
        shape, dtype = spec if isinstance(spec, tuple) else (spec.shape, spec.dtype)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
    names = list(inputs) + [n if np.asarray(v).size or n == "empty" else "" for n, v in consts.items()]
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "t", [info(n, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if np.asarray(v).size or n == "empty"])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def feeds_of(inputs, rng):
    feeds = {}
    for name, spec in inputs.items():
        if not isinstance(spec, tuple):
            feeds[name] = np.asarray(spec)
        elif spec[1] in (F, F64):
            feeds[name] = rng.standard_normal(spec[0]).astype(spec[1])
        elif spec[1] == "bool":
            feeds[name] = rng.integers(0, 2, spec[0]).astype(bool)
        else:
            feeds[name] = rng.integers(-9 if spec[1] not in (U8,) else 0, 10, spec[0]).astype(spec[1])
    return feeds


def check_three_way(model, feeds):
    interp = evaluate(from_onnx(model), feeds)
    for out, value in zip(model.graph.output, interp):  # where onnx's shape inference does not say
        if not out.type.tensor_type.elem_type:
            out.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
    refs = run_ort(model, feeds)
    ours = compile_model(model).run(None, feeds)
    for o, i, r in zip(ours, interp, refs):
        assert o.dtype == r.dtype, f"dtype {o.dtype} != onnxruntime's {r.dtype}"
        assert o.shape == r.shape, f"shape {o.shape} != onnxruntime's {r.shape}"
        if r.dtype.kind == "f":
            assert_close(o, r, "vs onnxruntime")
            assert_close(o, np.asarray(i), "vs interpreter")
        else:
            np.testing.assert_array_equal(o, r, err_msg="vs onnxruntime")
            np.testing.assert_array_equal(o, i, err_msg="vs interpreter")


def case_id(case):
    op, inputs, attrs, opset, consts = case[:5]
    dtypes = "-".join(v[1] if isinstance(v, tuple) else str(np.asarray(v).dtype) for v in inputs.values())
    return f"{op}-v{opset}-{dtypes}-" + "-".join(f"{k}={v}" for k, v in attrs.items()) + \
        "-" + "-".join(f"{k}={np.asarray(v).tolist()}" for k, v in consts.items())


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
    model = make_model(*case)
    check_three_way(model, feeds_of(case[1], np.random.default_rng(0)))


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_nan_ordering_follows_the_reference(largest):
    # the reference's lexsort puts NaN above every number (first when largest, last when smallest)
    x = np.array([[1.0, np.nan, -np.inf, np.nan, 2.0, np.inf]], np.float32)
    model = make_model("TopK", {"x": x}, {"largest": largest}, 11, {"k": i64(6)}, 2)
    from onnx.reference import ReferenceEvaluator
    want_v, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    for values, indices in (compile_model(model).run(None, {"x": x}), evaluate(from_onnx(model), {"x": x})):
        np.testing.assert_array_equal(np.asarray(indices), want_i)
        np.testing.assert_array_equal(np.asarray(values), want_v)


@pytest.mark.parametrize("op,inputs,consts,attrs,message", [
    ("TopK", {"x": ((3, 4), F)}, {"k": i64(5)}, {}, r"k = 5 must be in \[0, 4\]"),
    ("TopK", {"x": ((3, 4), F)}, {"k": i64(2)}, {"axis": 2}, "axis 2 out of range"),
    ("TopK", {"x": ((3, 4), F), "k": ((1,), I64)}, {}, {}, "input 'K' must be a constant"),
])
def test_bad_nodes_are_refused_clearly(op, inputs, consts, attrs, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(make_model(op, inputs, attrs, 18, consts, 2))


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
    model = make_model("Einsum", inputs, {"equation": equation}, 12, {})
    feeds = feeds_of(inputs, np.random.default_rng(0))
    check_three_way(model, feeds)
    want = np.einsum(equation.replace(" ", ""), *feeds.values())
    got, = compile_model(model).run(None, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("equation,shapes", [("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
                                             ("...i,...i->...", [(2, 3, 4), (4,)])])
def test_einsum_ellipses_of_different_ranks_broadcast_as_numpy(equation, shapes):
    # onnx's shape inference (and onnxruntime) refuse these; numpy right-aligns the ellipsis dims, and so do we
    inputs = {f"x{i}": (s, F) for i, s in enumerate(shapes)}
    model = make_model("Einsum", inputs, {"equation": equation}, 12, {})
    feeds = feeds_of(inputs, np.random.default_rng(0))
    want = np.einsum(equation, *feeds.values())
    for got in (compile_model(model).run(None, feeds)[0], evaluate(from_onnx(model), feeds)[0]):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_einsum_matmul_runs_on_matmul():
    model = make_model("Einsum", {"a": ((2, 3, 4), F), "b": ((2, 4, 5), F)}, {"equation": "bij,bjk->bik"}, 12, {})
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
        from_onnx(make_model("Einsum", inputs, {"equation": equation}, 12, {}))

"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the data-movement ops: Pad in every
mode with negative pads and axes, GatherElements, GatherND, ScatterElements / Scatter and ScatterND with every
reduction and duplicate indices, OneHot, DepthToSpace, SpaceToDepth, Tile, EyeLike; int and float tensors.
Indices given at run time that are out of range are refused with a clear error before native code runs.

A case: (op type, graph inputs {name: (shape, dtype) or an array fed as it is}, attributes, opset, initializers
{name: array}). Node inputs are the graph inputs then the initializers, in order.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from relayish.interp import evaluate
from test_frontend import assert_three_way, run_ort, with_output_shapes

F, I64, I32 = "float32", "int64", "int32"


def _array(values, dtype):
    return np.array(values[0] if len(values) == 1 and isinstance(values[0], list) else values, dtype)


def i64(*values):
    return _array(values, np.int64)


def f32(*values):
    return _array(values, np.float32)


PADS = [
    ("Pad", {"x": ((3, 4), F)}, {}, 11, {"pads": i64(1, 2, 0, 1), "v": np.float32(1.5)}),
    ("Pad", {"x": ((3, 4), F)}, {"mode": "constant"}, 13, {"pads": i64(-1, 2, 1, -2)}),
    ("Pad", {"x": ((2, 4, 5), F)}, {"mode": "reflect"}, 13, {"pads": i64(0, 2, 3, 1, 3, 4)}),
    ("Pad", {"x": ((4, 5), F)}, {"mode": "reflect"}, 13, {"pads": i64(-1, 2, 1, -1)}),
    ("Pad", {"x": ((3, 4), I64)}, {"mode": "edge"}, 13, {"pads": i64(2, 0, 3, 5)}),
    ("Pad", {"x": ((3, 4), F)}, {"mode": "edge"}, 13, {"pads": i64(-2, 1, 1, -1)}),
    ("Pad", {"x": ((3, 4), F)}, {"mode": "wrap"}, 19, {"pads": i64(2, 3, 1, 6)}),
    ("Pad", {"x": ((3, 5), I32)}, {"mode": "wrap"}, 19, {"pads": i64(-1, 2, 2, -1)}),
    ("Pad", {"x": ((2, 3, 4), F)}, {}, 18, {"pads": i64(1, 2), "v": np.float32(-3.0), "axes": i64(-1)}),
    ("Pad", {"x": ((2, 3, 4), I32)}, {"mode": "reflect"}, 18, {"pads": i64(1, 0, 1, 2), "v": np.array([], np.int32),
                                                               "aes": i64(-3, 1)}),
    ("Pad", {"x": ((3, 4), I64)}, {}, 11, {"pads": i64(1, 1, 1, 1), "v": np.int64(7)}),
    ("Pad", {"x": ((3, 4), F), "v": np.float32(2.5)}, {"_order": ["x", "pads", "v"]}, 13, {"pads": i64(1, -1, 0, 2)}),
    ("Pad", {"x": ((3, 4), I64), "v": i64(-7)}, {"_order": ["x", "pads", "v", "axes"]}, 18,
     {"pads": i64(2, 1), "axes": i64(-2)}),
    ("Pad", {"x": ((3, 4), F), "v": np.float32(2.5)}, {"mode": "edge", "_order": ["x", "pads", "v"]}, 13,
     {"pads": i64(1, 1, 0, 2)}),
    ("Pad", {"x": ((1, 2, 3, 3), F)}, {"mode": "reflect", "pads": [0, 0, 1, 2, 0, 0, 2, 1]}, 10, {}),
    ("Pad", {"x": ((3, 3), F)}, {"pads": [1, 0, 0, 1], "value": 2.0}, 7, {}),
]

GATHERS = [
    ("GatherElements", {"x": ((3, 4), F), "i": i64([1, 0, 2, -1], [-3, 2, 0, 1])}, {"axis": 0}, 13, {}),
    ("GatherElements", {"x": ((3, 4), I64), "i": np.array([[3, -4], [0, 1]], np.int32)}, {"axis": -1}, 13, {}),
    ("GatherElements", {"x": ((2, 3, 4), F), "i": i64([[[2, 0, 1, 1]], [[0, 0, 2, -1]]])}, {"axis": 1}, 11, {}),
    ("GatherElements", {"x": ((3, 4), F)}, {"axis": 1}, 13, {"i": i64([0, 3], [-1, 2])}),
    ("GatherND", {"x": ((3, 4), F), "i": i64([[2], [0], [-1]])}, {}, 13, {}),
    ("GatherND", {"x": ((3, 4), I64), "i": i64([[2, 1], [0, -1]])}, {}, 13, {}),
    ("GatherND", {"x": ((2, 3, 4), F), "i": i64([[[1], [0]], [[2], [-1]]])}, {"batch_dims": 1}, 13, {}),
    ("GatherND", {"x": ((2, 3, 4), F), "i": i64([1, 3], [-3, 0])}, {"batch_dims": 1}, 12, {}),
]

SCATTERS = [
    ("ScatterElements", {"x": ((3, 4), F), "i": i64([1, 0, 2, -1], [-3, 2, 0, 1]), "u": ((2, 4), F)},
     {"axis": 0}, 11, {}),
    ("ScatterElements", {"x": ((3, 4), F), "i": i64([1, 1, 3], [0, 0, 0]), "u": ((2, 3), F)},
     {"axis": 1, "reduction": "add"}, 16, {}),
    ("ScatterElements", {"x": ((3, 4), F), "i": i64([1, -3], [2, 1]), "u": ((2, 2), F)},
     {"axis": -1, "reduction": "mul"}, 16, {}),
    ("ScatterElements", {"x": ((3, 4), I64), "i": i64([1, 1], [2, 1], [0, 0]), "u": ((3, 2), I64)},
     {"axis": 0, "reduction": "max"}, 18, {}),
    ("ScatterElements", {"x": ((3, 4), F), "i": i64([1, 1], [2, 1], [0, 0]), "u": ((3, 2), F)},
     {"axis": 0, "reduction": "min"}, 18, {}),
    ("ScatterElements", {"x": ((2, 3, 4), F), "i": np.array([[[2, 0, 1]], [[0, -1, 2]]], np.int32),
                         "u": ((2, 1, 3), F)}, {"axis": 1}, 13, {}),
    ("Scatter", {"x": ((3, 4), F), "i": i64([1, 0, 2, -1], [-3, 2, 0, 1]), "u": ((2, 4), F)}, {"axis": 0}, 10, {}),
    ("ScatterND", {"x": ((4, 3), F), "i": i64([2], [0]), "u": ((2, 3), F)}, {}, 11, {}),
    ("ScatterND", {"x": ((4, 3), F), "i": i64([2], [0], [2]), "u": ((3, 3), F)}, {"reduction": "add"}, 16, {}),
    ("ScatterND", {"x": ((4, 3), F), "i": i64([2], [-4], [2]), "u": ((3, 3), F)}, {"reduction": "mul"}, 16, {}),
    ("ScatterND", {"x": ((2, 3, 4), I64), "i": i64([1, 2], [0, -1], [1, 2]), "u": ((3, 4), I64)},
     {"reduction": "max"}, 18, {}),
    ("ScatterND", {"x": ((2, 3, 4), F), "i": i64([[1, 2, 3], [0, 0, 0]], [[1, 2, 3], [1, 0, -1]]),
                   "u": ((2, 2), F)}, {"reduction": "min"}, 18, {}),
    ("ScatterND", {"x": ((2, 3), I32), "i": i64([1, 2], [0, -1]), "u": ((2,), I32)}, {}, 18, {}),
]

OTHERS = [
    ("OneHot", {"i": i64([0, 2, -1], [5, -6, 1]), "v": f32(-1.0, 4.0)}, {"_order": "idv"}, 11, {"d": np.float32(5)}),
    ("OneHot", {"i": np.array([3, 0, -2], np.int32), "v": f32(0.0, 1.0)}, {"axis": 0, "_order": "idv"}, 11,
     {"d": np.int32(4)}),
    ("OneHot", {"i": i64([3, 0, -2], [-5, 1, 4]), "v": i64(0, 1)}, {"axis": 1, "_order": "idv"}, 11, {"d": i64(4)}),
    ("OneHot", {"i": i64([0, 2], [1, 1])}, {"axis": -2}, 11, {"d": np.float32(3), "v": np.array([2, 9], np.int32)}),
    ("OneHot", {"i": f32(1.0, 2.7, -1.0)}, {}, 11, {"d": np.float32(3), "v": f32(0.0, 1.0)}),
    ("DepthToSpace", {"x": ((1, 8, 2, 3), F)}, {"blocksize": 2}, 13, {}),
    ("DepthToSpace", {"x": ((2, 8, 2, 3), F)}, {"blocksize": 2, "mode": "CRD"}, 13, {}),
    ("DepthToSpace", {"x": ((1, 9, 2, 2), F)}, {"blocksize": 3, "mode": "DCR"}, 11, {}),
    ("SpaceToDepth", {"x": ((2, 3, 4, 6), F)}, {"blocksize": 2}, 13, {}),
    ("SpaceToDepth", {"x": ((1, 2, 6, 3), F)}, {"blocksize": 3}, 13, {}),
    ("Tile", {"x": ((2, 3), F)}, {}, 13, {"r": i64(2, 3)}),
    ("Tile", {"x": ((2, 1, 3), I64)}, {}, 13, {"r": i64(1, 4, 2)}),
    ("EyeLike", {"x": ((3, 5), F)}, {"k": 1}, 13, {}),
    ("EyeLike", {"x": ((4, 3), F)}, {"k": -2, "dtype": onnx.TensorProto.INT64}, 13, {}),
]

CASES = PADS + GATHERS + SCATTERS + OTHERS


def case_id(case):
    op, inputs, attrs, opset, consts = case
    dtypes = "-".join(v[1] if isinstance(v, tuple) else str(np.asarray(v).dtype) for v in inputs.values())
    return f"{op}-v{opset}-{dtypes}-" + "-".join(f"{k}={v}" for k, v in attrs.items()) + \
        "-" + "-".join(f"{k}={np.asarray(v).tolist()}" for k, v in consts.items())


def make_model(op, inputs, attrs, opset, consts):
    def info(name, spec):
        shape, dtype = spec if isinstance(spec, tuple) else (spec.shape, spec.dtype)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
    names = list(inputs) + [n if np.asarray(v).size else "" for n, v in consts.items()]
    attrs = dict(attrs)
    if "_order" in attrs:  # node inputs in another order than graph inputs then initializers
        names = list(attrs.pop("_order"))
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "t", [info(n, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if np.asarray(v).size])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def feeds_of(inputs, rng):
    feeds = {}
    for name, spec in inputs.items():
        if not isinstance(spec, tuple):
            feeds[name] = np.asarray(spec)
        elif spec[1] == F:
            feeds[name] = rng.standard_normal(spec[0]).astype(np.float32)
        else:
            feeds[name] = rng.integers(-9, 10, spec[0]).astype(spec[1])
    return feeds


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    model = make_model(*case)
    feeds = feeds_of(case[1], np.random.default_rng(0))
    interp, = evaluate(from_onnx(model), feeds)
    out = model.graph.output[0].type.tensor_type
    if not out.elem_type:  # onnx's shape inference does not say (OneHot with a constant depth)
        out.elem_type = helper.np_dtype_to_tensor_dtype(interp.dtype)
    ref, = run_ort(model, feeds)
    ours, = compile_model(model).run(None, feeds)
    assert_three_way(ours, ref, interp)


def test_reflect_pad_wider_than_the_input_repeats_the_mirror_images():
    # onnxruntime refuses pads >= the extent in reflect mode; numpy's (and ours) keep reflecting
    model = make_model("Pad", {"x": ((2, 3), F)}, {"mode": "reflect"}, 13, {"pads": i64(0, 5, 1, 7)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = np.pad(x, [(0, 1), (5, 7)], mode="reflect")
    np.testing.assert_array_equal(compile_model(model).run(None, {"x": x})[0], want)
    np.testing.assert_array_equal(evaluate(from_onnx(model), {"x": x})[0], want)


@pytest.mark.parametrize("case", [
    ("GatherElements", {"x": ((3, 4), F), "i": ((2, 4), I64)}, {"axis": 0}, 13, {}),
    ("GatherND", {"x": ((3, 4), F), "i": ((2, 2), I64)}, {}, 13, {}),
    ("ScatterElements", {"x": ((3, 4), F), "i": ((2, 4), I64), "u": ((2, 4), F)}, {"axis": 0}, 13, {}),
    ("ScatterND", {"x": ((3, 4), F), "i": ((2, 1), I64), "u": ((2, 4), F)}, {}, 13, {}),
], ids=lambda c: c[0])
@pytest.mark.parametrize("bad", [3, -4])
def test_run_time_indices_out_of_range_are_refused(case, bad):
    sess = compile_model(make_model(*case))
    feeds = feeds_of(case[1], np.random.default_rng(0))
    feeds["i"] = np.zeros_like(feeds["i"])
    feeds["i"][1, 0] = bad
    with pytest.raises(ValueError, match=rf"input 'i' holds {bad} at \(1, 0\), outside \[-3, 3\)"):
        sess.run(None, feeds)


@pytest.mark.parametrize("op,inputs,consts,attrs,message", [
    ("GatherElements", {"x": ((3, 4), F)}, {"i": i64([0, 3])}, {"axis": 0}, "indices hold 3 at"),
    ("ScatterND", {"x": ((3, 4), F), "u": ((1,), F)}, {"i": i64([0, 4])}, {"_order": "xiu"}, "indices hold 4 at"),
    ("Pad", {"x": ((3, 4), F)}, {"pads": i64(0, -4, 0, 2)}, {"mode": "edge"}, "crop axis 1 of .* to nothing, "
     "which edge mode cannot pad from"),
    ("Pad", {"x": ((3, 1), F)}, {"pads": i64(0, 1, 0, 1)}, {"mode": "reflect"}, "reflect mode needs at least 2"),
    ("Tile", {"x": ((3, 4), F)}, {"r": i64(2)}, {}, "one value per dim"),
    ("DepthToSpace", {"x": ((1, 6, 2, 2), F)}, {}, {"blocksize": 2}, "not a multiple of blocksize"),
    ("ScatterElements", {"x": ((100, 4), F), "i": ((100, 4), I64), "u": ((100, 4), F)}, {},
     {"reduction": "mul"}, "reduction mul with 100 update positions"),
])
def test_bad_nodes_are_refused_clearly(op, inputs, consts, attrs, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(make_model(op, inputs, attrs, 18 if op != "Pad" else 13, consts))


def test_run_time_pads_are_refused():
    model = make_model("Pad", {"x": ((3, 4), F), "pads": ((4,), I64)}, {}, 13, {})
    with pytest.raises(OnnxImportError, match="input 'pads' must be a constant"):
        from_onnx(model)


def test_scatter_duplicates_without_reduction_keep_the_last_update():
    model = make_model("ScatterElements", {"x": ((1, 4), F), "i": i64([[1, 1, 1]]), "u": f32([[1, 2, 3]])},
                       {"axis": 1}, 13, {})
    feeds = {"x": np.zeros((1, 4), np.float32), "i": i64([[1, 1, 1]]), "u": f32([[1, 2, 3]])}
    np.testing.assert_array_equal(compile_model(model).run(None, feeds)[0], f32([[0, 3, 0, 0]]))


def test_index_tuples_are_bounded_per_data_dim():
    # GatherND indices (..., 2) into dims of 2 and 3: one range per position of the last axis, so 2 is a valid
    # second coordinate and an invalid first one
    sess = compile_model(make_model("GatherND", {"x": ((2, 3, 4), F), "i": ((2, 2), I64)}, {}, 13, {}))
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": i64([1, 2], [-2, -3])})[0], x[[1, -2], [2, -3]])
    with pytest.raises(ValueError, match=r"input 'i' holds 2 at \(1, 0\), outside \[-2, 2\)"):
        sess.run(None, {"x": x, "i": i64([1, 2], [2, 0])})


@pytest.mark.parametrize("bounds,ok", [([[-2, 2], [-3, 3]], True), ([[-2, 2]], False), ([[-2, 2], [0, 3]], True),
                                       ([[-2, 2], [1, 3]], False), ([], False)])
def test_metadata_index_bounds_per_position_of_the_last_axis(bounds, ok):
    from runtime.metadata import MetadataError, validate_metadata
    meta = {"format_version": 1, "inputs": [{"name": "ids", "shape": [4, 2], "dtype": "int64",
                                             "index_bounds": bounds}],
            "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}], "workspace_bytes": 0, "params_bytes": 0,
            "kernels": [], "target": {"triple": "x", "cpu": "y", "features": ""}}
    if ok:
        validate_metadata(meta)
    else:
        with pytest.raises(MetadataError, match="index_bounds"):
            validate_metadata(meta)

"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the data-movement ops: Pad in every
mode with negative pads and axes, GatherElements, GatherND, ScatterElements / Scatter and ScatterND with every
reduction and duplicate indices, OneHot, DepthToSpace, SpaceToDepth, Tile, EyeLike; int and float tensors.
Indices given at run time that are out of range are refused with a clear error before native code runs.

A case: the arguments of harness.typed_model: (op type, graph inputs {name: (shape, dtype) or an array fed as it
is}, attributes, opset, initializers {name: array, or None for an omitted input}). Node inputs are the graph inputs
then the initializers, in order.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import case_id, f32, feeds_for, i64, three_way, typed_model
from relayish.interp import evaluate

F, I64, I32 = "float32", "int64", "int32"


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
    ("Pad", {"x": ((2, 3, 4), I32)}, {"mode": "reflect"}, 18, {"pads": i64(1, 0, 1, 2), "v": None,
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


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    three_way(typed_model(*case), feeds_for(case[1], np.random.default_rng(0)))


def test_reflect_pad_wider_than_the_input_repeats_the_mirror_images():
    # onnxruntime refuses pads >= the extent in reflect mode; numpy's (and ours) keep reflecting
    model = typed_model("Pad", {"x": ((2, 3), F)}, {"mode": "reflect"}, 13, {"pads": i64(0, 5, 1, 7)})
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
    sess = compile_model(typed_model(*case))
    feeds = feeds_for(case[1], np.random.default_rng(0))
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
        from_onnx(typed_model(op, inputs, attrs, 18 if op != "Pad" else 13, consts))


def test_run_time_pads_are_refused():
    model = typed_model("Pad", {"x": ((3, 4), F), "pads": ((4,), I64)}, {}, 13, {})
    with pytest.raises(OnnxImportError, match="input 'pads' must be a constant"):
        from_onnx(model)


def test_scatter_duplicates_without_reduction_keep_the_last_update():
    model = typed_model("ScatterElements", {"x": ((1, 4), F), "i": i64([[1, 1, 1]]), "u": f32([[1, 2, 3]])},
                       {"axis": 1}, 13, {})
    feeds = {"x": np.zeros((1, 4), np.float32), "i": i64([[1, 1, 1]]), "u": f32([[1, 2, 3]])}
    np.testing.assert_array_equal(compile_model(model).run(None, feeds)[0], f32([[0, 3, 0, 0]]))


def test_index_tuples_are_bounded_per_data_dim():
    # GatherND indices (..., 2) into dims of 2 and 3: one range per position of the last axis, so 2 is a valid
    # second coordinate and an invalid first one
    sess = compile_model(typed_model("GatherND", {"x": ((2, 3, 4), F), "i": ((2, 2), I64)}, {}, 13, {}))
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

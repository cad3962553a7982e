"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of Resize (opsets 10 to 19) and
Upsample (7, 9): nearest (every nearest_mode), linear and cubic, every coordinate transformation, scales or sizes,
axes, keep_aspect_ratio_policy, antialias, tf_crop_and_resize with roi and extrapolation_value; float and int data.
Bad nodes are refused with a clear error.

A case: the arguments of harness.typed_model: (op type, graph inputs, attributes, opset, initializers); a None
initializer is an omitted input ("").
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import assert_close, case_id, f32, feeds_for, i64, run_ort, three_way, typed_model
from relayish.interp import evaluate

F = "float32"
NONE = None  # an omitted optional input (roi, scales)


def scales(*values):
    return {"roi": NONE, "scales": f32(*values)}


def sizes(*values, roi=NONE):
    return {"roi": roi, "scales": NONE, "sizes": i64(*values)}


CASES = [
    # detection / segmentation exports: 2x nearest (FPN, YOLO), bilinear half_pixel / align_corners
    ("Resize", {"x": ((1, 8, 10, 12), F)}, {"mode": "nearest"}, 19, scales(1, 1, 2, 2)),
    ("Resize", {"x": ((1, 4, 5, 6), F)}, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                          "nearest_mode": "floor"}, 11,
     {"roi": f32(0, 0, 0, 0, 1, 1, 1, 1), "scales": f32(1, 1, 2, 2)}),  # roi and scales are required in 11
    ("Resize", {"x": ((1, 3, 6, 7), F)}, {"mode": "linear"}, 13, scales(1, 1, 2, 2)),
    ("Resize", {"x": ((2, 3, 5, 4), F)}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     13, sizes(2, 3, 9, 11)),
    ("Resize", {"x": ((1, 2, 9, 7), F)}, {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
     13, sizes(1, 2, 4, 1)),
    ("Resize", {"x": ((1, 2, 8, 8), F)}, {"mode": "linear"}, 13, scales(1, 1, 0.5, 0.5)),
    ("Resize", {"x": ((2, 7, 9), F)}, {"mode": "linear"}, 13, scales(1, 1.5, 0.5)),  # any rank: 3-D, 5-D
    ("Resize", {"x": ((1, 2, 3, 4, 5), F)}, {"mode": "linear"}, 13, scales(1, 1, 2, 1.5, 0.6)),
    # nearest modes at ties and non-integer ratios
    ("Resize", {"x": ((1, 1, 5, 4), F)}, {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
                                          "coordinate_transformation_mode": "asymmetric"}, 13, sizes(1, 1, 8, 10)),
    ("Resize", {"x": ((1, 1, 5, 4), F)}, {"mode": "nearest", "nearest_mode": "ceil"}, 13, sizes(1, 1, 3, 7)),
    ("Resize", {"x": ((1, 1, 7, 4), F)}, {"mode": "nearest", "nearest_mode": "floor",
                                          "coordinate_transformation_mode": "align_corners"}, 13, sizes(1, 1, 3, 9)),
    ("Resize", {"x": ((1, 1, 6, 6), F)}, {"mode": "nearest"}, 13, scales(1, 1, 0.6, 1.7)),
    ("Resize", {"x": ((1, 1, 5, 4), F)}, {"mode": "nearest", "coordinate_transformation_mode":
                                          "tf_half_pixel_for_nn"}, 11,
     {"roi": f32(0, 0, 0, 0, 1, 1, 1, 1), "scales": f32(1, 1, 1.6, 0.75)}),
    # cubic
    ("Resize", {"x": ((1, 2, 5, 6), F)}, {"mode": "cubic"}, 13, scales(1, 1, 1.5, 2.0)),
    ("Resize", {"x": ((1, 1, 6, 6), F)}, {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, 13,
     scales(1, 1, 0.8, 1.4)),
    # pytorch_half_pixel maps an output of one element to 0 (the spec's text and onnxruntime; the onnx reference
    # implementation uses -0.5, which only cubic and antialias filters can tell apart)
    ("Resize", {"x": ((1, 1, 5, 6), F)}, {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
     13, sizes(1, 1, 1, 4)),
    ("Resize", {"x": ((1, 1, 4, 5), F)}, {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, 13,
     sizes(1, 1, 7, 3)),
    # opset 18 / 19: axes, keep_aspect_ratio_policy, antialias, half_pixel_symmetric
    ("Resize", {"x": ((1, 3, 4, 6), F)}, {"mode": "nearest", "axes": [-1, 2]}, 18, scales(1.5, 2)),
    ("Resize", {"x": ((1, 3, 4, 6), F)}, {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy":
                                          "not_larger"}, 18, sizes(7, 7)),
    ("Resize", {"x": ((1, 3, 4, 6), F)}, {"mode": "nearest", "axes": [3, 2], "keep_aspect_ratio_policy":
                                          "not_smaller"}, 18, sizes(3, 3)),
    ("Resize", {"x": ((1, 2, 12, 10), F)}, {"mode": "linear", "antialias": 1}, 18, scales(1, 1, 0.5, 0.4)),
    ("Resize", {"x": ((1, 1, 9, 9), F)}, {"mode": "cubic", "antialias": 1}, 18, sizes(1, 1, 4, 5)),
    ("Resize", {"x": ((1, 2, 5, 6), F)}, {"mode": "linear", "coordinate_transformation_mode":
                                          "half_pixel_symmetric"}, 19, scales(1, 1, 1.7, 0.7)),
    # tf_crop_and_resize
    ("Resize", {"x": ((1, 1, 6, 6), F)}, {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                                          "extrapolation_value": 3.5}, 13,
     sizes(1, 1, 4, 5, roi=f32(0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4))),
    ("Resize", {"x": ((1, 1, 6, 6), F)}, {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize",
                                          "axes": [3, 2]}, 18, sizes(3, 4, roi=f32(0.2, 0.1, 0.9, 0.8))),
    # int data (nearest)
    ("Resize", {"x": ((1, 2, 3, 4), "uint8")}, {"mode": "nearest"}, 13, scales(1, 1, 2, 3)),
    ("Resize", {"x": ((1, 2, 3, 4), "int32")}, {"mode": "nearest", "coordinate_transformation_mode":
                                                "asymmetric"}, 13, sizes(1, 2, 5, 2)),
    ("Resize", {"x": np.array([[1, -2, 5], [3, 4, -7]], np.int8)}, {"mode": "nearest", "extrapolation_value": -5.0,
                                                                  "coordinate_transformation_mode":
                                                                  "tf_crop_and_resize"}, 13,
     sizes(3, 4, roi=f32(-0.5, 0, 1, 1.5))),
    # Resize-10 and Upsample: y / scale
    ("Resize", {"x": ((1, 2, 3, 4), F)}, {"mode": "nearest"}, 10, {"scales": f32(1, 1, 2, 2.5)}),
    ("Resize", {"x": ((1, 2, 3, 4), F)}, {"mode": "linear"}, 10, {"scales": f32(1, 1, 2, 1.5)}),
    ("Resize", {"x": ((1, 2, 7, 9), F)}, {"mode": "linear"}, 10, {"scales": f32(1, 1, 0.6, 0.5)}),
    ("Resize", {"x": ((1, 1, 7, 9), F)}, {"mode": "nearest"}, 10, {"scales": f32(1, 1, 0.6, 0.4)}),
    ("Upsample", {"x": ((1, 2, 3, 4), F)}, {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]}, 7, {}),
    ("Upsample", {"x": ((1, 2, 3, 4), F)}, {"mode": "linear"}, 9, {"scales": f32(1, 1, 2, 2)}),
]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    three_way(typed_model(*case), feeds_for(case[1], np.random.default_rng(0)))


@pytest.mark.parametrize("x", [np.array([[2 ** 62 + 1, -2 ** 60 - 3], [5, 7]], np.int64),
                               np.array([[True, False], [False, True]])], ids=["int64", "bool"])
def test_nearest_gathers_exactly_in_the_data_dtype(x):
    """onnxruntime has no int64 or bool Resize: compiled vs the interpreter and a direct gather."""
    model = typed_model("Resize", {"x": x}, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, 13,
                       scales(2, 1.5))
    want = x[[0, 0, 1, 1]][:, [0, 1, 1]]  # y / 1.5 = 0, 0.67, 1.33 rounds to 0, 1, 1
    np.testing.assert_array_equal(compile_model(model).run(None, {"x": x})[0], want)
    np.testing.assert_array_equal(evaluate(from_onnx(model), {"x": x})[0], want)


def test_nearest_2x_reads_with_integer_arithmetic():
    """Integer up/down sampling in nearest mode is a floor division of the output index, with no float math."""
    from relayish import Var, call, get_op, te
    from relayish.types import TensorType
    node = call("resize", Var("x", TensorType((1, 2, 3, 4))), sizes=(1, 2, 6, 8), scales=(1, 1, 2, 2))
    x = te.placeholder((1, 2, 3, 4), name="x")
    out = get_op("resize").compute([x], node.attrs, node.type)
    assert "float64" not in repr(out.op.body) and "//" in str(out.op.body)


@pytest.mark.parametrize("attrs,opset,consts,message", [
    ({"mode": "nearest"}, 13, {"roi": NONE, "scales": f32(1, 1, 2, 2), "sizes": i64(1, 1, 4, 4)},
     "exactly one of 'scales' and 'sizes'"),
    ({"mode": "area"}, 13, scales(1, 1, 2, 2), "mode must be 'nearest', 'linear' or 'cubic'"),
    ({"mode": "linear"}, 13, scales(1, 2), "one value per resized axis"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, 13, sizes(1, 1, 3, 3),
     "needs the input 'roi'"),
    ({"mode": "linear", "axes": [2, -2]}, 18, scales(2, 2), "repeated axes"),
    ({"mode": "nearest"}, 10, {"scales": f32(1, 1, 2, 0.5)}, "both upsampling and downsampling"),
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, 13, scales(1, 1, 2, 2),
     "'tf_half_pixel_for_nn' does not exist in Resize-13"),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, 18, scales(1, 1, 2, 2),
     "'half_pixel_symmetric' does not exist in Resize-18"),
    ({"mode": "linear", "coordinate_transformation_mode": "corners"}, 19, scales(1, 1, 2, 2),
     "coordinate_transformation_mode must be one of"),
    ({"mode": "nearest", "nearest_mode": "round"}, 19, scales(1, 1, 2, 2), "nearest_mode must be one of"),
    ({"mode": "cubic", "antialias": 1}, 18, scales(1, 1, 0.25, 0.2), "taps per output element"),
])
def test_bad_nodes_are_refused_clearly(attrs, opset, consts, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model("Resize", {"x": ((1, 1, 4, 5), F)}, attrs, opset, consts))


def test_run_time_sizes_are_refused_at_import():
    model = typed_model("Resize", {"x": ((1, 1, 4, 5), F), "sizes": ((4,), "int64")},
                       {"_order": ["x", "", "", "sizes"]}, 13, {})
    with pytest.raises(OnnxImportError, match="input 'sizes' must be a constant"):
        from_onnx(model)


def test_fpn_upsample_concat_conv_and_bilinear_add_fuse_and_match():
    """The detection / segmentation patterns: nearest 2x -> Concat -> Conv, and bilinear 2x + skip -> Relu."""
    import onnx
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 6, 3, 3)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Resize", ["a", "", "s"], ["up"], mode="nearest"),
             helper.make_node("Concat", ["up", "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["y", "", "s"], ["yy"], mode="linear"),
             helper.make_node("Add", ["yy", "c"], ["sum"]),
             helper.make_node("Relu", ["sum"], ["out"])]
    info = lambda n, s: helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)
    graph = helper.make_graph(nodes, "fpn", [info("a", (1, 3, 5, 6)), info("b", (1, 3, 10, 12)),
                                             info("c", (1, 4, 20, 24))], [info("out", (1, 4, 20, 24))],
                              [numpy_helper.from_array(f32(1, 1, 2, 2), "s"), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {n: rng.standard_normal(s).astype(np.float32)
             for n, s in (("a", (1, 3, 5, 6)), ("b", (1, 3, 10, 12)), ("c", (1, 4, 20, 24)))}
    ref, = run_ort(model, feeds)
    assert_close(compile_model(model).run(None, feeds)[0], ref, "vs onnxruntime")
    assert_close(evaluate(from_onnx(model), feeds)[0], ref, "interpreter vs onnxruntime")

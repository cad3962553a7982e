"""Shape arithmetic over dims known only at run time (frontends/onnx/shape_values.py): what exporters write to size
tensors by the input's length (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, a position table sliced to the
length, ConstantOfShape of (n, n) for a causal mask, Expand to a computed shape, torch's Where(Equal(shape, -1))
guard) is evaluated at import into dim expressions, and one generic module runs every length. Each model here
is compiled once with its length free and checked at lengths it was never compiled for against onnxruntime and
the interpreter (at that length); what the arithmetic cannot do is refused naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import CompileOptions, compile_model
from compiler.generic import GenericUnsupported, compile_generic
from compiler.generic_module import SizesOutsideGeneric
from frontends import OnnxImportError, from_onnx
from harness import assert_three_way, python_planned, run_ort
from relayish import te
from relayish.dims import TYPICAL_SIZE, canonical, exact_quotient, lower_bound, sign, typical
from relayish.interp import evaluate

RNG = np.random.default_rng(11)
LENGTHS = (1, 6, 13)  # none of them the hint size the kernels are scheduled for
TABLE = 16  # rows of the position table


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes, inits, outputs, inputs=None):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, "T", 8))]
    graph = helper.make_graph(nodes, "shapes", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def export_style_model():
    """x (1, T, 8): its length read with Shape -> Gather; heads by a Reshape to Concat(1, T, 2, 4); a position
    table (16, 8) sliced to T rows and added; a causal (T, T) mask from ConstantOfShape(Concat(T, T)) -> Trilu;
    attention-like scores masked and summed; a bias expanded to (1, T, 8) through torch's Where(Equal(s, -1), 1,
    s) guard; T // 2 (an integer Div) and T * 8 (a Mul) checked by a Reshape of x to (1, T * 8 // 8 ... )."""
    n = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["t"], axis=0),  # scalar T
        helper.make_node("Unsqueeze", ["t", "zero1"], ["t1"]),  # [T]
        helper.make_node("Concat", ["one1", "t1", "two1", "four1"], ["heads"], axis=0),
        helper.make_node("Reshape", ["x", "heads"], ["xh"]),  # (1, T, 2, 4)
        helper.make_node("Transpose", ["xh"], ["q"], perm=[0, 2, 1, 3]),  # (1, 2, T, 4)
        helper.make_node("Transpose", ["xh"], ["k"], perm=[0, 2, 3, 1]),  # (1, 2, 4, T)
        helper.make_node("MatMul", ["q", "k"], ["scores"]),  # (1, 2, T, T)
        helper.make_node("Concat", ["t1", "t1"], ["tt"], axis=0),
        helper.make_node("ConstantOfShape", ["tt"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                                                       [1.0])),
        helper.make_node("Trilu", ["ones"], ["causal"], upper=0),
        helper.make_node("Mul", ["scores", "causal"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axes3"], ["ctx"], keepdims=0),  # (1, 2, T)
        helper.make_node("Slice", ["table", "zero1", "t1", "zero1"], ["pos"]),  # (T, 8)
        helper.make_node("Add", ["x", "pos"], ["xp"]),
        helper.make_node("Concat", ["one1", "t1", "eight1"], ["target"], axis=0),
        helper.make_node("Equal", ["target", "minus1"], ["is_free"]),
        helper.make_node("Where", ["is_free", "one1", "target"], ["guarded"]),
        helper.make_node("Expand", ["bias", "guarded"], ["b"]),  # (1, T, 8)
        helper.make_node("Add", ["xp", "b"], ["y"]),
        helper.make_node("Div", ["t1", "two1"], ["half"]),  # T // 2, taken as floor of a non-negative T
        helper.make_node("Mul", ["half", "zero1"], ["none"]),  # 0 * (T // 2) = 0: a static value again
        helper.make_node("Add", ["none", "eight1"], ["eight_again"]),
        helper.make_node("Concat", ["one1", "minus1", "eight_again"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["y", "flat_shape"], ["out"]),  # (1, T, 8) through a -1
    ]
    inits = [_const("one", np.int64(1)), _const("zero1", np.array([0], np.int64)),
             _const("one1", np.array([1], np.int64)), _const("two1", np.array([2], np.int64)),
             _const("four1", np.array([4], np.int64)), _const("eight1", np.array([8], np.int64)),
             _const("minus1", np.array([-1], np.int64)), _const("axes3", np.array([3], np.int64)),
             _const("table", RNG.standard_normal((TABLE, 8)).astype(np.float32)),
             _const("bias", RNG.standard_normal((8,)).astype(np.float32))]
    return _model(nodes, inits, [n("out", TensorProto.FLOAT, None), n("ctx", TensorProto.FLOAT, None)])


def _generic(model, ranges=None):
    return compile_generic(model, {"x": (1, "T", 8)}, CompileOptions(), [o.name for o in model.graph.output],
                           ranges or {"T": (1, None)})


def _interpreted(model, feed):
    return evaluate(from_onnx(model, input_shapes={k: v.shape for k, v in feed.items()}), feed)


def test_export_style_shape_arithmetic_runs_every_length_on_one_module():
    model = export_style_model()
    module = _generic(model)
    for length in LENGTHS:
        feed = {"x": RNG.standard_normal((1, length, 8)).astype(np.float32)}
        ours, ref, interp = module.run(None, feed), run_ort(model, feed), _interpreted(model, feed)
        assert ours[0].shape == (1, length, 8) and ours[1].shape == (1, 2, length)
        for k in range(2):
            assert_three_way(ours[k], ref[k], np.asarray(interp[k]), f"T={length} output {k}")


def test_torch_style_positions_from_a_range_of_the_length():
    """torch's `arange(x.shape[1])` exported: Range(0, T, 1) -> Unsqueeze -> Gather of a position table. The range
    is a kernel (arange) of T elements; its last position must be inside the table, checked per call."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Range", ["zero", "t", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "zero1"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["p"], axis=0),
             helper.make_node("Add", ["x", "p"], ["y"])]
    inits = [_const("zero", np.int64(0)), _const("one", np.int64(1)), _const("zero1", np.array([0], np.int64)),
             _const("table", RNG.standard_normal((TABLE, 8)).astype(np.float32))]
    model = _model(nodes, inits, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    module = _generic(model)
    for length in LENGTHS + (TABLE,):
        feed = {"x": RNG.standard_normal((1, length, 8)).astype(np.float32)}
        assert_three_way(module.run(None, feed)[0], run_ort(model, feed)[0],
                         np.asarray(_interpreted(model, feed)[0]), f"T={length}")
    with pytest.raises(SizesOutsideGeneric, match="range of positions .* must be inside axis 0 of size 16"):
        module.run(None, {"x": np.zeros((1, TABLE + 1, 8), np.float32)})


def test_a_slice_past_its_table_leaves_the_generic_module_and_the_session_compiles_it():
    """The position table has 16 rows: at T > 16 onnxruntime clips the slice (and the Add fails there); the
    generic module's check of the slice end refuses T = 17 before any kernel runs, naming the assumption."""
    module = _generic(export_style_model())
    with pytest.raises(SizesOutsideGeneric, match="slice end .* must be inside the axis"):
        module.run(None, {"x": np.zeros((1, TABLE + 1, 8), np.float32)})
    assert module.run(None, {"x": np.zeros((1, TABLE, 8), np.float32)})[0].shape == (1, TABLE, 8)


def test_the_session_serves_lengths_past_the_checks_by_a_compile():
    """Only the position slice, output as it is: at T = 20 onnxruntime gives the table's 16 rows, and so does the
    session, by a module compiled for T = 20 (the generic tier serves T <= 16)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "one1", "two1"], ["t1"]),
             helper.make_node("Slice", ["table", "zero1", "t1", "zero1"], ["y"])]
    inits = [_const("zero1", np.array([0], np.int64)), _const("one1", np.array([1], np.int64)),
             _const("two1", np.array([2], np.int64)),
             _const("table", RNG.standard_normal((TABLE, 8)).astype(np.float32))]
    model = _model(nodes, inits, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = compile_model(model, input_shapes={"x": (1, None, 8)}, cache=False, specialize="never")
    assert sess.generic_tier["kind"] == "run-time extents"
    for length in (3, 20, 9):
        feed = {"x": np.zeros((1, length, 8), np.float32)}
        ours, = sess.run(None, feed)
        np.testing.assert_array_equal(ours, run_ort(model, feed)[0], err_msg=f"T={length}")
    assert [s["symbols"] for s in sess.specializations()] == [{"T": 20}]


def test_an_index_input_is_checked_per_call_on_the_generic_module():
    """Token ids gather an embedding table of 10 rows: the generic module checks their values at every call (a
    static module checks them at its boundary, runtime/feeds.py), so an id of 10 is an error, not a clamped read."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"])]
    model = _model(nodes, [_const("table", RNG.standard_normal((10, 4)).astype(np.float32))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("ids", TensorProto.INT64, (1, "T"))])
    module = compile_generic(model, {"ids": (1, "T")}, CompileOptions(), ["y"], {"T": (1, None)})
    ids = np.array([[1, 9, -10, 3]], np.int64)
    np.testing.assert_array_equal(module.run(None, {"ids": ids})[0], run_ort(model, {"ids": ids})[0])
    with pytest.raises(ValueError, match="input 'ids' holds 10 at .* a table of 10 entries"):
        module.run(None, {"ids": np.array([[0, 10]], np.int64)})


def _length_used(*nodes, inits=()):
    """x (1, T, 8) and its length t1 = [T] (Shape -> Slice), then `nodes`; output y."""
    head = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "one1", "two1"], ["t1"])]
    base = [_const("one1", np.array([1], np.int64)), _const("two1", np.array([2], np.int64))]
    return _model(head + list(nodes), base + list(inits), [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                         None)])


@pytest.mark.parametrize("nodes, inits, message", [
    ([helper.make_node("Cast", ["t1"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "f"], ["y"])],
     [], r"\(Mul\).*cast to float32 .*float arithmetic over run-time dims is not supported"),
    ([helper.make_node("Cast", ["t1"], ["f"], to=TensorProto.FLOAT16), helper.make_node("Mul", ["x", "f"], ["y"])],
     [], r"\(Cast\).*cast to a non-integer type: used as data"),
    ([helper.make_node("Less", ["t1", "five"], ["c"]), helper.make_node("Where", ["c", "x", "x"], ["y"])],
     [_const("five", np.array([5], np.int64))], r"Less.*cannot decide T < 5 before run time"),
    ([helper.make_node("Concat", ["one1", "t1", "t1"], ["shape"], axis=0),
      helper.make_node("Reshape", ["x", "shape"], ["y"])],
     [], r"Reshape.*cannot reshape \(1, T, 8\) \(\(T \* 8\) elements\) to \(1, T, T\)"),
    ([helper.make_node("Concat", ["one1", "minus1", "three1"], ["shape"], axis=0),
      helper.make_node("Reshape", ["x", "shape"], ["y"])],
     [_const("minus1", np.array([-1], np.int64)), _const("three1", np.array([3], np.int64))],
     r"Reshape.*the -1 does not divide out exactly"),
    ([helper.make_node("Mod", ["t1", "t1"], ["m"]), helper.make_node("Reshape", ["x", "m"], ["y"])],
     [], r"Mod.*cannot take T modulo T before run time"),
], ids=["float_arithmetic", "used_as_data", "undecidable_comparison", "reshape_of_other_products",
        "inexact_minus_one", "modulo_by_a_size"])
def test_what_the_arithmetic_cannot_do_is_refused_naming_the_node(nodes, inits, message):
    model = _length_used(*nodes, inits=inits)
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(model, input_shapes={"x": (1, te.size_var("T"), 8)})
    with pytest.raises(GenericUnsupported, match="does not import over free dims"):
        _generic(model)


def test_a_reshape_that_merges_or_splits_a_run_time_dim_with_static_ones():
    """(1, T, 8) -> (1, 2T, 4) -> (1, T, 2, 4): each run-time dim grouped with static neighbours into products
    that are equal expressions (relayish/ops/transform.py _merged_groups), as a depth-to-space does."""
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "s2"], ["y"])]
    model = _model(nodes, [_const("s1", np.array([1, -1, 4], np.int64)), _const("s2", np.array([1, -1, 2, 4],
                                                                                                np.int64))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    module = _generic(model)
    for length in LENGTHS:
        feed = {"x": RNG.standard_normal((1, length, 8)).astype(np.float32)}
        np.testing.assert_array_equal(module.run(None, feed)[0], run_ort(model, feed)[0], err_msg=f"T={length}")


def test_a_reshape_that_moves_a_run_time_dim_reads_by_row_major_position():
    """(1, T, 8) -> (1, 4, 2T): no group maps T through or merges it with neighbours, but the products are equal
    expressions (8T): the whole shape is one group, each element read back by its row-major position."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    model = _model(nodes, [_const("s", np.array([1, 4, -1], np.int64))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    module = _generic(model)
    for length in LENGTHS:
        feed = {"x": RNG.standard_normal((1, length, 8)).astype(np.float32)}
        np.testing.assert_array_equal(module.run(None, feed)[0], run_ort(model, feed)[0], err_msg=f"T={length}")


def test_a_static_import_folds_the_same_arithmetic_to_constants():
    """With every dim bound, Shape gives a Constant and nothing here is used: the static path is unchanged."""
    model = export_style_model()
    mod = from_onnx(model, input_shapes={"x": (1, 6, 8)})
    assert "dim_checks" not in mod.attrs
    assert [t.shape for t in mod.main.ret_type.fields] == [(1, 6, 8), (1, 2, 6)]


def test_dim_facts_hold_for_every_size_at_least_one():
    t, u = te.size_var("t"), te.size_var("u")
    assert [sign(t), sign(t + 1), sign(-t - 2), sign(t - 1), sign(t - u), sign(canonical(t - t))] == \
        [1, 1, -1, None, None, 0]
    assert [lower_bound(t), lower_bound(2 * t * u + 3), lower_bound(t - 1), lower_bound(t // 2)] == [1, 5, 0, None]
    assert exact_quotient(t * 768, 12) == canonical(t * 64)
    assert exact_quotient(t * u * 6, u * 3) == canonical(t * 2)
    assert exact_quotient(canonical(t * 4 + 8), 4) == canonical(t + 2)
    assert [exact_quotient(t * 5, 3), exact_quotient(t + 1, t), exact_quotient(t * 6, t + 1)] == [None] * 3


def pyramid_model():
    """A feature pyramid in miniature, as text detectors build it: a stride-2 convolution of x (1, 4, H, W),
    upsampled back by a nearest Resize of scale 2 (paddle's asymmetric / floor), added to x and concatenated with
    it. 2 * ((H - 1) // 2 + 1) rows meet H rows: equal for even H, the only sizes onnxruntime runs."""
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Resize", ["a", "", "scales"], ["up"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Add", ["x", "up"], ["y"]),
             helper.make_node("Concat", ["x", "up"], ["z"], axis=1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, "H", "W"))]
    return _model(nodes, [_const("w", w), _const("scales", np.array([1, 1, 2, 2], np.float32))],
                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")], inputs)


def test_a_feature_pyramid_upsampled_by_a_whole_scale_runs_every_even_size():
    model = pyramid_model()
    module = compile_generic(model, {"x": (1, 4, "H", "W")}, CompileOptions(), ["y", "z"],
                             {"H": (1, None), "W": (1, None)})
    for h, w in ((8, 12), (14, 6), (2, 30)):
        feed = {"x": RNG.standard_normal((1, 4, h, w)).astype(np.float32)}
        ours, ref, interp = module.run(None, feed), run_ort(model, feed), _interpreted(model, feed)
        for k in range(2):
            assert_three_way(ours[k], ref[k], np.asarray(interp[k]), f"{h}x{w} output {k}")
    with pytest.raises(SizesOutsideGeneric, match="dim 2 of size .* must equal"):
        module.run(None, {"x": np.zeros((1, 4, 9, 8), np.float32)})


def test_a_resize_over_a_run_time_dim_other_than_nearest_by_a_whole_scale_is_refused():
    model = pyramid_model()
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "Resize" and attr.name == "mode":
                attr.s = b"linear"
    with pytest.raises(OnnxImportError, match="can only be resized by nearest with a whole scale"):
        from_onnx(model, input_shapes={"x": (1, 4, te.size_var("H"), te.size_var("W"))})


def test_strided_slices_of_run_time_dims_as_yolox_focus_takes_them():
    """x[..., ::2, ::2] and x[..., 1::2, 1::2] concatenated (YOLOX's Focus) over free H and W, odd sizes too."""
    big = np.iinfo(np.int64).max
    nodes = [helper.make_node("Slice", ["x", "zeros", "ends", "axes", "twos"], ["a"]),
             helper.make_node("Slice", ["x", "ones", "ends", "axes", "twos"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    inits = [_const("zeros", np.array([0, 0], np.int64)), _const("ones", np.array([1, 1], np.int64)),
             _const("ends", np.array([big, big], np.int64)), _const("axes", np.array([2, 3], np.int64)),
             _const("twos", np.array([2, 2], np.int64))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, "H", "W"))]
    model = _model(nodes, inits, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inputs)
    module = compile_generic(model, {"x": (1, 2, "H", "W")}, CompileOptions(), ["y"],
                             {"H": (1, None), "W": (1, None)})
    for h, w in ((8, 6), (7, 5), (4, 9)):
        feed = {"x": RNG.standard_normal((1, 2, h, w)).astype(np.float32)}
        if h % 2 or w % 2:  # the two halves differ in size: onnxruntime refuses the Concat, and so does the module
            with pytest.raises(SizesOutsideGeneric, match="must equal"):
                module.run(None, feed)
            continue
        np.testing.assert_array_equal(module.run(None, feed)[0], run_ort(model, feed)[0], err_msg=f"{h}x{w}")


def test_means_over_large_run_time_maps_round_as_a_static_compile_does():
    """A global average pool and a ReduceMean over H and W of a 480 x 480 map: one running float32 sum of 230,400
    values is off by ~3e-5 (PP-OCRv6's detector drifted to 6e-4 at 960 x 960); summed row by row, then the rows,
    the error stays near float32's own, as the static compile's split sums keep it."""
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1)]  # (opset 17: an attribute)
    model = _model(nodes, [],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("g", "m")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, "H", "W"))])
    module = compile_generic(model, {"x": (1, 16, "H", "W")}, CompileOptions(), ["g", "m"],
                             {"H": (1, None), "W": (1, None)})
    x = (RNG.random((1, 16, 480, 480)) + 1).astype(np.float32)
    want = x.astype(np.float64).mean((2, 3), keepdims=True)
    for got in module.run(None, {"x": x}):
        assert float(np.max(np.abs(got - want) / want)) < 2e-6


def test_a_global_max_pool_over_a_run_time_length():
    """bytecnn_conv2d's GlobalMaxPool over (1, C, 1, L): a max over H and W when L is known only at run time."""
    nodes = [helper.make_node("GlobalMaxPool", ["x"], ["y"])]
    model = _model(nodes, [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 1, "L"))])
    module = compile_generic(model, {"x": (1, 8, 1, "L")}, CompileOptions(), ["y"], {"L": (1, None)})
    for length in (1, 7, 300):
        feed = {"x": RNG.standard_normal((1, 8, 1, length)).astype(np.float32)}
        np.testing.assert_array_equal(module.run(None, feed)[0], run_ort(model, feed)[0], err_msg=f"L={length}")


def test_slice_bounds_may_be_int32_as_onnx_allows():
    """Slice's starts and ends are int32 or int64 (its Tind): both import, with static dims and over a free one."""
    nodes = [helper.make_node("Slice", ["x", "s", "e", "axes"], ["y"])]
    inits = [_const("s", np.array([1], np.int32)), _const("e", np.array([7], np.int32)),
             _const("axes", np.array([2], np.int32))]
    model = _model(nodes, inits, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    assert from_onnx(model, input_shapes={"x": (1, 5, 8)}).main.ret_type.shape == (1, 5, 6)
    module = _generic(model)
    for length in LENGTHS:
        feed = {"x": RNG.standard_normal((1, length, 8)).astype(np.float32)}
        np.testing.assert_array_equal(module.run(None, feed)[0], run_ort(model, feed)[0], err_msg=f"T={length}")


def test_yolov8_anchor_grids_from_dims_cast_to_float():
    """YOLOv8's head (NudeNet's export): H and W of a feature map cast to float, Range(0.0, W, 1.0) + 0.5 the
    anchor centres, added to the map: the float range over a run-time limit is an arange of W elements."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "two"], ["h"], axis=0),
             helper.make_node("Gather", ["s", "three"], ["w"], axis=0),
             helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Range", ["zero", "hf", "one"], ["gy"]),
             helper.make_node("Range", ["zero", "wf", "one"], ["gx"]),
             helper.make_node("Add", ["gy", "half"], ["cy"]), helper.make_node("Add", ["gx", "half"], ["cx"]),
             helper.make_node("Unsqueeze", ["cy", "one_axis"], ["cy2"]),  # (H, 1)
             helper.make_node("Add", ["x", "cy2"], ["a"]), helper.make_node("Add", ["a", "cx"], ["y"])]
    inits = [_const("two", np.int64(2)), _const("three", np.int64(3)), _const("zero", np.float32(0.0)),
             _const("one", np.float32(1.0)), _const("half", np.float32(0.5)),
             _const("one_axis", np.array([1], np.int64))]
    model = _model(nodes, inits, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, "H", "W"))])
    module = compile_generic(model, {"x": (1, 2, "H", "W")}, CompileOptions(), ["y"],
                             {"H": (1, None), "W": (1, None)})
    for h, w in ((1, 5), (7, 3), (20, 33)):
        feed = {"x": RNG.standard_normal((1, 2, h, w)).astype(np.float32)}
        assert_three_way(module.run(None, feed)[0], run_ort(model, feed)[0],
                         np.asarray(_interpreted(model, feed)[0]), f"H={h} W={w}")


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap", "constant"])
def test_a_pad_over_a_run_time_axis(mode):
    """Silero VAD's STFT pads its audio by reflection: over a run-time length, one mirror image (a pad shorter
    than the axis, checked per call), and the other modes alike."""
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)]
    model = _model(nodes, [_const("pads", np.array([0, 3, 0, 2], np.int64))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, "T"))])
    module = compile_generic(model, {"x": (2, "T")}, CompileOptions(), ["y"], {"T": (1, None)})
    for length in (4, 9, 40):
        feed = {"x": RNG.standard_normal((2, length)).astype(np.float32)}
        assert_three_way(module.run(None, feed)[0], run_ort(model, feed)[0],
                         np.asarray(_interpreted(model, feed)[0]), f"T={length}")
    if mode in ("reflect", "wrap"):
        with pytest.raises(SizesOutsideGeneric, match=f"a {mode} pad of 3 over axis 1 needs"):
            module.run(None, {"x": np.zeros((2, 2), np.float32)})


def _conv_relu(name, x, y, w):
    return [helper.make_node("Conv", [x, w], [f"{name}c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"{name}c"], [y])]


def _pooled_convs():
    """(model, its generic module): two 16 -> 16 3x3 convolutions over a free H x W, the second over the first's
    map pooled by 2."""
    nodes = _conv_relu("a", "x", "r1", "w1") + [helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2],
                                                                 strides=[2, 2])] + _conv_relu("b", "p", "y", "w2")
    weights = [_const(n, (RNG.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32)) for n in ("w1", "w2")]
    model = _model(nodes, weights, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, "H", "W"))])
    return model, compile_generic(model, {"x": (1, 16, "H", "W")}, CompileOptions(), ["y"],
                                  {"H": (1, None), "W": (1, None)})


def test_winograd_convolutions_over_run_time_sizes_share_one_kernel_over_their_own_dims():
    """Two 16 -> 16 3x3 convolutions (Winograd F(4x4, 3x3) over run-time sizes), the second over the first's map
    pooled by 2: one kernel serves both, over its own dims (d0, d1: H and W at one call, (H - 2) // 2 + 1 and
    (W - 2) // 2 + 1 at the other, evaluated per call); sizes that are no multiple of the tile, and maps smaller
    than one chunk of tiles, three ways."""
    model, module = _pooled_convs()
    convs = [s for s in module._steps if "winograd" in s.kernel]
    assert len(convs) == 2 and convs[0].kernel == convs[1].kernel, [s.kernel for s in module._steps]
    assert [te.expr_str(e) for e in convs[0].sizes] != [te.expr_str(e) for e in convs[1].sizes]
    for h, w in ((2, 3), (6, 9), (13, 40), (32, 32)):
        feed = {"x": RNG.standard_normal((1, 16, h, w)).astype(np.float32)}
        assert_three_way(module.run(None, feed)[0], run_ort(model, feed)[0],
                         np.asarray(_interpreted(model, feed)[0]), f"H={h} W={w}")


def test_a_convolution_over_run_time_sizes_takes_the_winograd_tile_its_size_calls_for_at_each_call():
    """A 3x3 convolution over a run-time size has a kernel per Winograd tile (F(4x4), F(2x2)); each call runs the
    one the static rule picks for its output (the largest tile that leaves 32 tiles; F(2x2) below that): the
    second convolution, over the first's map pooled by 2, takes F(2x2) where its map is small and F(4x4) where it
    is not, three ways at each size."""
    model, module = _pooled_convs()
    for (h, w), want in {(13, 40): [4, 2], (32, 32): [4, 2], (64, 64): [4, 4], (8, 8): [2, 2]}.items():
        tiles = [t for _, t in module.kernels_for({"x": (1, 16, h, w)}) if t is not None]
        assert tiles == want, (h, w, tiles)
        feed = {"x": RNG.standard_normal((1, 16, h, w)).astype(np.float32)}
        assert_three_way(module.run(None, feed)[0], run_ort(model, feed)[0],
                         np.asarray(_interpreted(model, feed)[0]), f"H={h} W={w}")


def test_the_generated_plan_is_the_python_one():
    """The generic module's plan made by generated code (compiler/generic_runner.py) against the one made in Python
    and numpy, field by field, where the convolutions' Winograd tiles (and so their scratch buffers) differ from
    size to size; and the outputs of the generated calls against the step-by-step ones, bit for bit."""
    _, module = _pooled_convs()
    for h, w in ((2, 3), (8, 8), (13, 40), (64, 64), (33, 7)):
        values = module._values({"x": (1, 16, h, w)})
        module._plans.clear()
        generated = module._plan(values)
        with python_planned(module):
            python = module._plan(values)
            feed = {"x": RNG.standard_normal((1, 16, h, w)).astype(np.float32)}
            slow = module.run(None, feed)[0]
        assert generated.state is not None and python.state is None
        assert (generated.offsets, generated.size, generated.choice, generated.shapes) == \
            (python.offsets, python.size, python.choice, python.shapes), (h, w)
        np.testing.assert_array_equal(generated.sizes, python.sizes)
        module._plans.clear()
        np.testing.assert_array_equal(module.run(None, feed)[0], slow)


def test_generated_integer_arithmetic_is_pythons():
    """Floor division and modulo of either sign, min, max, nested: the generated code's values against
    compiler.arith.evaluate's at every value of two variables in [-9, 9]; a division by zero and a 64-bit
    overflow are reported, not computed."""
    from compiler.arith import evaluate as int_value
    from compiler.generic_runner import native_evaluator
    a, b = te.size_var("a"), te.size_var("b")
    exprs = [a // 3, a % 3, a // -4, a % -4, (a - 7) // 2 + 1, te.min_(a, b) * 2 - te.max_(a, 5), (a * b) // 5 % 7,
             a // b, a % b]
    f = native_evaluator(exprs, [a, b])
    assert native_evaluator([a * b], [a, b])(2**40, 2**40) is None  # 2^80 overflows: reported, not wrapped
    assert native_evaluator([a + b], [a, b])(2**62, 2**62) is None
    for x in range(-9, 10):
        for y in range(-9, 10):
            if y == 0:
                assert f(x, y) is None
                continue
            assert f(x, y) == tuple(int_value(e, {a: x, b: y}) for e in exprs), (x, y)


def test_a_typical_dim_is_its_expression_at_the_typical_size():
    h = te.size_var("h")
    assert typical(7) == 7 and typical(h) == TYPICAL_SIZE
    assert typical(canonical((h + 31) // 32)) == (TYPICAL_SIZE + 31) // 32
    assert typical(canonical(h - TYPICAL_SIZE)) == 1  # at least 1


def test_a_squeeze_of_a_run_time_axis_serves_the_sizes_that_make_it_1():
    """CRNN squeezes the height its convolutions pool to 1 (heights 32-47): over a free height the squeeze holds
    where the axis is 1, checked per call; other heights leave the generic module (onnxruntime refuses them)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[4, 1], strides=[4, 1]),
             helper.make_node("Squeeze", ["p", "axes"], ["y"])]
    model = _model(nodes, [_const("axes", np.array([2], np.int64))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, "H", 5))])
    module = compile_generic(model, {"x": (1, 2, "H", 5)}, CompileOptions(), ["y"], {"H": (1, None)})
    for h in (4, 6, 7):
        feed = {"x": RNG.standard_normal((1, 2, h, 5)).astype(np.float32)}
        assert_three_way(module.run(None, feed)[0], run_ort(model, feed)[0],
                         np.asarray(_interpreted(model, feed)[0]), f"H={h}")
    with pytest.raises(SizesOutsideGeneric, match="squeezed axis 2 of size .* must be 1"):
        module.run(None, {"x": np.zeros((1, 2, 8, 5), np.float32)})


def test_a_new_size_reuses_the_workspace_of_a_larger_one():
    """Workspaces are kept across calls whatever their sizes: a call at a new, smaller size takes the one a larger
    size left (its pages already touched), and gives the same results as a module that never ran the larger; a
    larger one grows it."""
    model = export_style_model()
    module, fresh = _generic(model), _generic(model)
    module.run(None, {"x": RNG.standard_normal((1, 13, 8)).astype(np.float32)})
    kept = list(module._spaces)
    assert len(kept) == 1
    feed = {"x": RNG.standard_normal((1, 6, 8)).astype(np.float32)}
    for a, b in zip(module.run(None, feed), fresh.run(None, feed)):
        np.testing.assert_array_equal(a, b)
    assert len(module._spaces) == 1 and module._spaces[0] is kept[0]
    # a larger size grows the kept workspace in place (the pages touched before stay), same results
    size = kept[0].size
    feed = {"x": RNG.standard_normal((1, 15, 8)).astype(np.float32)}
    for a, b in zip(module.run(None, feed), fresh.run(None, feed)):
        np.testing.assert_array_equal(a, b)
    assert len(module._spaces) == 1 and module._spaces[0] is kept[0] and kept[0].size > size

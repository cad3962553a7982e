"""Outputs sized by data: NonZero and Compress of values computed at run time are data-sized ops
(relayish/ops/data_sized.py) that the generic tier runs at any count, the model compiled once, not per value
(compiler/generic_module.py binds the count when its kernel has run). Three ways: compiled, the numpy interpreter
(the same import), onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.dynamic import ShapeSpecializedSession
from compiler.specialize import ValueSpecializedSession
from frontends import from_onnx
from harness import assert_three_way, python_planned, run_ort
from relayish.interp import evaluate

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "data_sized", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _interpreted(model, feed, values=()):
    """The numpy interpreter's outputs, the inputs named in `values` given to the import as constants."""
    mod = from_onnx(model, input_shapes={k: v.shape for k, v in feed.items() if k not in values}, data_sized=True,
                    input_values={k: feed[k] for k in values})
    return evaluate(mod, {k: v for k, v in feed.items() if k not in values})


def _check(model, session, feed, what, values=()):
    ours, ref, interp = session.run(None, feed), run_ort(model, feed), _interpreted(model, feed, values)
    interp = interp if isinstance(interp, (list, tuple)) else [interp]
    for k, (o, r, i) in enumerate(zip(ours, ref, interp)):
        assert o.shape == r.shape, (what, k, o.shape, r.shape)
        assert o.dtype == r.dtype, (what, k, o.dtype, r.dtype)
        assert_three_way(o, r, np.asarray(i), f"{what} output {k}")


def gather_positive_model(shape=(3, 5)):
    """The coordinates of x's positive elements and their values: NonZero -> Transpose -> GatherND, as a detector
    picks its boxes above a threshold."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["idx"]),
             helper.make_node("Transpose", ["idx"], ["idx_t"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx_t"], ["values"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("idx", TensorProto.INT64, None),
                   helper.make_tensor_value_info("values", TensorProto.FLOAT, None)],
                  [numpy_helper.from_array(np.zeros((), np.float32), "zero")])


def test_nonzero_of_a_computed_mask_runs_every_count_on_one_compile():
    model = gather_positive_model()
    session = compile_model(model, cache=False)
    assert isinstance(session, ShapeSpecializedSession)
    assert session.generic_tier["data_sized"] == ["nonzero0"]
    for what, x in {"some": RNG.standard_normal((3, 5)), "none": -np.ones((3, 5)), "all": np.ones((3, 5)),
                    "one": np.where(np.arange(15).reshape(3, 5) == 7, 1.0, -1.0)}.items():
        _check(model, session, {"x": x.astype(np.float32)}, what)
    session.run(None, {"x": np.ones((3, 5), np.float32)})  # a recurring shape: still the one generic module
    assert session.specializations() == []


def test_nonzero_over_a_free_length_and_of_ints():
    nodes = [helper.make_node("NonZero", ["tokens"], ["idx"])]
    model = _model(nodes, [helper.make_tensor_value_info("tokens", TensorProto.INT64, (2, "L"))],
                   [helper.make_tensor_value_info("idx", TensorProto.INT64, None)])
    session = compile_model(model, input_shapes={"tokens": (2, None)}, cache=False)
    for length in (1, 6, 33):
        tokens = RNG.integers(0, 3, (2, length)).astype(np.int64)
        _check(model, session, {"tokens": tokens}, f"L={length}")


def test_compress_by_a_computed_condition_selects_rows():
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["score"], keepdims=0),
             helper.make_node("Greater", ["score", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["rows"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (6, 4))],
                   [helper.make_tensor_value_info("rows", TensorProto.FLOAT, None)],
                   [numpy_helper.from_array(np.array([1], np.int64), "axes"),
                    numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    session = compile_model(model, cache=False)
    for seed in range(3):
        _check(model, session, {"x": np.random.default_rng(seed).standard_normal((6, 4)).astype(np.float32)},
               f"seed {seed}")
    _check(model, session, {"x": -np.ones((6, 4), np.float32)}, "no row kept")


def test_a_data_sized_op_outside_the_generic_tier_is_refused_naming_it():
    with pytest.raises(Exception, match="NonZero"):
        from_onnx(gather_positive_model())


def test_compress_without_an_axis_and_nonzero_of_a_scalar():
    nodes = [helper.make_node("Greater", ["x", "zero"], ["keep"]),
             helper.make_node("Reshape", ["keep", "flat"], ["keep_flat"]),
             helper.make_node("Compress", ["x", "keep_flat"], ["picked"]),
             helper.make_node("ReduceMax", ["x"], ["top"], keepdims=0),
             helper.make_node("NonZero", ["top"], ["where_top"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 2))],
                   [helper.make_tensor_value_info("picked", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("where_top", TensorProto.INT64, None)],
                   [numpy_helper.from_array(np.zeros((), np.float32), "zero"),
                    numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    session = compile_model(model, cache=False)
    assert session.generic_tier["data_sized"] == ["nonzero0", "nonzero1"]
    for what, x in {"mixed": RNG.standard_normal((2, 3, 2)), "zeros": np.zeros((2, 3, 2))}.items():
        _check(model, session, {"x": x.astype(np.float32)}, what)


def test_an_exported_data_sized_session_loads_with_its_model(tmp_path):
    from compiler import load_session
    model = gather_positive_model()
    session = compile_model(model, cache=False)
    folder = session.export(str(tmp_path / "sized"))
    loaded = load_session(folder, model=model)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    _check(model, loaded, {"x": x}, "loaded")
    with pytest.raises(ValueError, match="no model"):
        load_session(folder).run(None, {"x": x})


def test_topk_with_a_k_given_at_run_time_runs_every_k_on_one_compile():
    nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, largest=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 10)),
                           helper.make_tensor_value_info("k", TensorProto.INT64, (1,))],
                   [helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("indices", TensorProto.INT64, None)])
    session = compile_model(model, cache=False)
    assert session.generic_tier["data_sized"] == ["topk0"]
    x = np.round(RNG.standard_normal((3, 10)), 1).astype(np.float32)  # ties: the lower index first
    for k in (1, 4, 10, 0):
        _check(model, session, {"x": x, "k": np.array([k], np.int64)}, f"k={k}")
    with pytest.raises(RuntimeError, match=r"topk0 would be 11, outside \[0, 10\]"):
        session.run(None, {"x": x, "k": np.array([11], np.int64)})


def detector_head_model(center_point_box=0, batch="B", boxes=24):
    """A detector's end as exports write it: boxes and per-class logits from one tensor [B, N, 4 + 3], the scores
    a sigmoid of the logits moved to [B, 3, N], NonMaxSuppression with constant thresholds, and the kept boxes'
    scores gathered by the selected (batch, class, box) rows. N: `boxes` (a name: free, as an image size makes
    it)."""
    nodes = [helper.make_node("Slice", ["x", "s0", "s4", "s2"], ["boxes"]),
             helper.make_node("Slice", ["x", "s4", "s7", "s2"], ["logits"]),
             helper.make_node("Transpose", ["logits"], ["logits_t"], perm=[0, 2, 1]),
             helper.make_node("Sigmoid", ["logits_t"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"], ["selected"],
                              center_point_box=center_point_box),
             helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"])]
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("s0", 0), ("s4", 4), ("s7", 7),
                                                                              ("s2", 2), ("limit", 5))]
    inits += [numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
              numpy_helper.from_array(np.array([0.3], np.float32), "floor")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, boxes, 7))],
                  [helper.make_tensor_value_info("selected", TensorProto.INT64, None),
                   helper.make_tensor_value_info("kept_scores", TensorProto.FLOAT, None)], inits)


def _detections(batch, center_point_box=0, logit_shift=0.0, n=24):
    """[batch, n, 7]: boxes in three clusters (many overlap), then three classes' logits with ties."""
    centers = RNG.uniform(0, 20, (batch, 3, 2))[:, RNG.integers(0, 3, n)]
    size = RNG.uniform(1, 6, (batch, n, 2))
    boxes = np.concatenate([centers, size], 2) if center_point_box else \
        np.concatenate([centers - size / 2, centers + size / 2], 2)
    logits = RNG.integers(-4, 5, (batch, n, 3)) / 2 + logit_shift
    return np.concatenate([boxes, logits], 2).astype(np.float32)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression_of_computed_scores_runs_every_count_on_one_compile(center_point_box):
    model = detector_head_model(center_point_box)
    session = compile_model(model, input_shapes={"x": (None, 24, 7)}, cache=False)
    assert isinstance(session, ShapeSpecializedSession) and session.generic_tier["data_sized"] == ["nms0"]
    for what, x in {"batch 1": _detections(1, center_point_box), "batch 3": _detections(3, center_point_box),
                    "none above the floor": _detections(2, center_point_box, logit_shift=-9.0),
                    "all above the floor": _detections(2, center_point_box, logit_shift=9.0)}.items():
        _check(model, session, {"x": x}, what)


def test_non_max_suppression_over_a_free_box_count():
    """N known only at run time (a detector over images of any size): the kernel's scratch and the rows' bound
    follow it."""
    model = detector_head_model(batch=1, boxes="N")
    session = compile_model(model, input_shapes={"x": (1, None, 7)}, cache=False)
    assert session.generic_tier["data_sized"] == ["nms0"] and session.generic_tier["symbols"] == ["N"]
    for n in (1, 5, 60, 17):
        _check(model, session, {"x": _detections(1, n=n)}, f"N={n}")


def test_non_max_suppression_of_a_static_model_is_one_generic_compile():
    """A model of static shapes whose only value-dependent shape is NMS's: one generic-tier session, not one
    compile per input value; a threshold given at run time compiles per value."""
    model = detector_head_model(batch=2)
    session = compile_model(model, cache=False)
    assert session.generic_tier["data_sized"] == ["nms0"]
    for seed in range(3):
        _check(model, session, {"x": _detections(2)}, f"draw {seed}")
    assert session.specializations() == []
    iou = next(i for i in model.graph.initializer if i.name == "iou")
    model.graph.initializer.remove(iou)
    model.graph.input.append(helper.make_tensor_value_info("iou", TensorProto.FLOAT, (1,)))
    session = compile_model(model, cache=False)
    assert isinstance(session, ValueSpecializedSession) and session.value_inputs == ("iou",)
    for iou in (0.2, 0.6):
        _check(model, session, {"x": _detections(2), "iou": np.array([iou], np.float32)}, f"iou {iou}", values=("iou",))


def labels_model(sorted_=1):
    """The distinct labels a classifier predicts over a sequence, as a tagger's post-processing: ArgMax over the
    classes, then Unique (sorted or in order of first occurrence) with every output."""
    nodes = [helper.make_node("ArgMax", ["logits"], ["labels"], axis=2, keepdims=0),
             helper.make_node("Unique", ["labels"], ["y", "first", "inverse", "counts"], sorted=sorted_)]
    return _model(nodes, [helper.make_tensor_value_info("logits", TensorProto.FLOAT, (2, "T", 5))],
                  [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ("y", "first", "inverse",
                                                                                       "counts")])


@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_of_computed_labels_runs_every_count_on_one_compile(sorted_):
    model = labels_model(sorted_)
    session = compile_model(model, input_shapes={"logits": (2, None, 5)}, cache=False)
    assert session.generic_tier["data_sized"] == ["unique0"]
    for length in (1, 7, 40):
        _check(model, session, {"logits": RNG.standard_normal((2, length, 5)).astype(np.float32)}, f"T={length}")
    one_label = np.zeros((2, 9, 5), np.float32)
    one_label[..., 3] = 1
    _check(model, session, {"logits": one_label}, "one label")


def test_unique_along_an_axis_of_a_run_time_value_compiles_per_value():
    nodes = [helper.make_node("Unique", ["x"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT64, (4, 2))],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    session = compile_model(model, cache=False)
    assert isinstance(session, ValueSpecializedSession)
    x = np.array([[1, 2], [0, 5], [1, 2], [0, 4]], np.int64)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_non_max_suppression_whose_boxes_and_scores_disagree_on_the_box_count_is_refused():
    """Boxes and scores with box counts of their own free dims: they must agree, checked per call (the kernel
    reads the boxes by the scores' count), a disagreeing call refused with the dims named, not read past."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"])]
    model = _model(nodes, [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, (1, "N", 4)),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, (1, 2, "M"))],
                   [helper.make_tensor_value_info("selected", TensorProto.INT64, None)])
    session = compile_model(model, input_shapes={"boxes": (1, None, 4), "scores": (1, 2, None)}, cache=False)
    feed = {"boxes": _detections(1, n=6)[..., :4], "scores": RNG.random((1, 2, 6)).astype(np.float32)}
    np.testing.assert_array_equal(session.run(None, feed)[0], run_ort(model, feed)[0])
    with pytest.raises(Exception, match="disagree on the box count|must equal"):
        session.run(None, {"boxes": feed["boxes"][:, :3], "scores": RNG.random((1, 2, 40)).astype(np.float32)})


@pytest.mark.parametrize("case", ["nonzero", "topk", "nms", "unique"])
def test_data_sized_dims_run_in_generated_code_as_step_by_step(case):
    """The generated run (compiler/generic_runner.py) binds each data-sized dim from its count between two kernels,
    as the step-by-step loop does: the same results, bit for bit, cut to the call's count from room made for the
    largest; a count out of range is refused with the same error (the call is run again in Python to name it)."""
    if case == "nonzero":
        model, shapes = gather_positive_model(), None
        feeds = [{"x": RNG.standard_normal((3, 5)).astype(np.float32)}, {"x": -np.ones((3, 5), np.float32)}]
    elif case == "topk":
        nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)]
        model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 10)),
                               helper.make_tensor_value_info("k", TensorProto.INT64, (1,))],
                       [helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
                        helper.make_tensor_value_info("indices", TensorProto.INT64, None)])
        shapes, x = None, RNG.standard_normal((3, 10)).astype(np.float32)
        feeds = [{"x": x, "k": np.array([k], np.int64)} for k in (3, 0, 10)]
    elif case == "nms":
        model, shapes = detector_head_model(), {"x": (None, 24, 7)}
        feeds = [{"x": _detections(b)} for b in (1, 3)]
    else:
        model, shapes = labels_model(), {"logits": (2, None, 5)}
        feeds = [{"logits": RNG.standard_normal((2, t, 5)).astype(np.float32)} for t in (7, 1)]
    session = compile_model(model, input_shapes=shapes, cache=False)
    module = session._extents
    assert module._runner is not None and module._data
    for feed in feeds:
        fast = session.run(None, feed)
        assert module._plan(module.bind(feed)).state is not None
        with python_planned(module):
            slow = session.run(None, feed)
        for a, b in zip(fast, slow):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    if case == "topk":
        with pytest.raises(RuntimeError, match=r"topk0 would be 11, outside \[0, 10\]"):
            session.run(None, {"x": x, "k": np.array([11], np.int64)})


def test_data_sized_calls_from_several_threads_get_their_own_counts():
    """Concurrent calls of one data-sized session, each with its own count of kept boxes (and batch): every
    call's results are those it gets alone (the plan is shared and read only; each call binds its counts in its
    own size arguments and workspace)."""
    from concurrent.futures import ThreadPoolExecutor
    model = detector_head_model()
    session = compile_model(model, input_shapes={"x": (None, 24, 7)}, cache=False)
    feeds = [{"x": _detections(1 + k % 3, logit_shift=(k % 4 - 2) * 1.5)} for k in range(12)]
    alone = [session.run(None, f) for f in feeds]
    assert len({a[0].shape for a in alone}) > 3  # counts differ from call to call
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            together = list(pool.map(lambda f: session.run(None, f), feeds))
            for got, want in zip(together, alone):
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w)

"""compile_model with dims left free (compiler/dynamic.py): a ShapeSpecializedSession, checked three ways on shapes
it was not compiled for ahead of time, and its checks of the inputs; its generic tiers (a free batch item by item
on the batch-1 module, compiler/batch_split.py; any free dim on kernels with run-time extents, compiler/generic.py),
the modules compiled per shape (on first sight, or in the background for shapes that recur)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import CompileOptions, compile_model
from compiler.dynamic import ShapeSpecializedSession
from harness import assert_three_way, python_planned, run_ort
from test_concurrency import run_threads
from relayish.interp import evaluate
from frontends import from_onnx

RNG = np.random.default_rng(7)


def line_model(width="W"):
    """A text-line recognizer in miniature: conv + relu over (1, 3, 8, W), the mean over the height, a per-column
    classifier: (1, W, 5). `width` is the declared dim: a name, or None for an unnamed dim."""
    w = numpy_helper.from_array(RNG.standard_normal((6, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.standard_normal((6, 5)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMean", ["r"], ["m"], axes=[2], keepdims=0),
             helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "line", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, width))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, width, 5))], [w, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ceil_pool_model():
    """A 1x1 max pool of stride 2 in ceil mode over (1, 3, 8, W): (1, 3, 4, ceil(W / 2)). Its last window may be
    dropped depending on W, which kernels with run-time extents do not support yet, so the session has no generic
    tier and compiles per shape."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1)]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, "W"))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3, 4, "V"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def pair_model():
    """y = a + b with a and b both (N, 4): one symbol in two inputs."""
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "pair",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ("N", 4)) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("N", 4))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def interpreted(model, feeds):
    shapes = {k: v.shape for k, v in feeds.items()}
    return evaluate(from_onnx(model, input_shapes=shapes), feeds)


@pytest.mark.parametrize("width", ["W", None], ids=["named", "unnamed"])
def test_free_width_runs_shapes_never_compiled_for_three_ways(width):
    """The generic tier: kernels with run-time extents serve every width from its first call, no compile; a width
    that recurs gets its own module in the background."""
    model = line_model(width)
    sess = compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False)
    assert isinstance(sess, ShapeSpecializedSession)
    symbol = "W" if width else "x.3"
    assert sess.get_inputs()[0].shape == [1, 3, 8, symbol] and list(sess.free_dims) == [symbol]
    assert sess.generic_tier["kind"] == "run-time extents" and sess.generic_tier["symbols"] == [symbol]
    for w in (17, 40, 5, 1):
        feed = {"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)}
        ours, = sess.run(None, feed)
        assert ours.shape == (1, w, 5)
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"W={w}")
    assert sess.specializations() == []  # every width ran at once, on the generic tier
    feed = {"x": RNG.standard_normal((1, 3, 8, 17)).astype(np.float32)}
    generic, = sess.run(None, feed)  # W=17 a second time: its module is compiled in the background
    assert sess.wait_for_specializations(timeout=120)
    assert [s["symbols"] for s in sess.specializations()] == [{symbol: 17}]
    np.testing.assert_allclose(sess.run(None, feed)[0], generic, rtol=1e-5, atol=1e-5)


def test_a_call_on_another_tier_idles_the_previous_ones_thread_pool():
    """Each library has its own thread pool, whose workers spin a moment after a run: a call that runs on another
    module than the call before idles the previous one's first (a specialization after the generic tier, and
    back), not on the same one."""
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False)
    idled = []
    feed = {"x": RNG.standard_normal((1, 3, 8, 9)).astype(np.float32)}
    sess.run(None, feed)
    generic = sess._extents
    generic.idle = lambda: idled.append("generic")
    sess.run(None, feed)  # (the second call of W=9: its module is compiled in the background)
    assert sess.wait_for_specializations(timeout=120) and idled == []
    special = sess.specialization({"x": (1, 3, 8, 9)})
    special.idle = lambda: idled.append("special")
    sess.run(None, feed)  # on the specialization: the generic tier's pool idled
    sess.run(None, feed)
    assert idled == ["generic"]
    sess.run(None, {"x": RNG.standard_normal((1, 3, 8, 4)).astype(np.float32)})  # a new width: generic again
    assert idled == ["generic", "special"]


@pytest.mark.parametrize("width", ["W", None], ids=["named", "unnamed"])
def test_eager_compiles_each_new_width_on_first_sight(width):
    model = line_model(width)
    sess = compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="eager")
    symbol = "W" if width else "x.3"
    assert sess.generic_tier is None
    for w in (17, 40, 5, 17):
        feed = {"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)}
        ours, = sess.run(None, feed)
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"W={w}")
    kept = sess.specializations()
    assert [s["symbols"] for s in kept] == [{symbol: 40}, {symbol: 5}, {symbol: 17}]  # 17 used last
    assert [s["runs"] for s in kept] == [1, 1, 2] and all(s["compile_s"] > 0 for s in kept)


@pytest.mark.parametrize("specialize", ["eager", "auto"])
def test_one_symbol_in_two_inputs_must_agree(specialize):
    sess = compile_model(pair_model(), input_shapes={"a": (None, 4)}, cache=False, specialize=specialize)
    a, b = np.ones((3, 4), np.float32), np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"input 'b' has shape \(2, 4\): dim 0 \('N'\) is 2, but input 'a' has "
                                         r"'N' = 3"):
        sess.run(None, {"a": a, "b": b})
    y, = sess.run(None, {"a": a, "b": 2 * a})
    np.testing.assert_array_equal(y, 3 * a)
    # eager: compiled for N = 3 on that call; auto: run on the generic tier (the batch-1 module) with no compile
    assert [s["symbols"] for s in sess.specializations()] == [{"N": 3 if specialize == "eager" else 1}]


def test_inputs_outside_the_declared_dims_get_clear_errors():
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, (4, 64))}, cache=False)
    with pytest.raises(ValueError, match=r"dim 3 \('W'\) is 65, outside its range"):
        sess.run(None, {"x": np.zeros((1, 3, 8, 65), np.float32)})
    with pytest.raises(ValueError, match=r"has shape \(1, 3, 9, 10\), expected \(1, 3, 8, W in \[4, 64\]\): dim 2 "
                                         r"must be 8"):
        sess.run(None, {"x": np.zeros((1, 3, 9, 10), np.float32)})
    with pytest.raises(ValueError, match="missing input 'x'"):
        sess.run(None, {})
    assert sess.specializations() == []  # nothing was compiled for a refused shape


@pytest.mark.parametrize("shape, message", [
    ((1, 3, None, None), r"input_shapes\['x'\] dim 2 is left free, but the model fixes it to 8"),
    ((1, 3, 8, (9, 4)), r"a range is \(lo, hi\) with 0 <= lo <= hi"),
    ((1, 3, 8, "W"), r"dims must be non-negative ints \(or None, -1, \(lo, hi\) for a dim left free\)"),
    ((1, 3, 8, (4, 2.5)), r"a range is \(lo, hi\) with 0 <= lo <= hi"),
    ((1, None), r"has rank 2, but the model's input 'x' has rank 4"),
])
def test_bad_free_dims_are_refused_at_compile_time(shape, message):
    with pytest.raises(ValueError, match=message):
        compile_model(line_model(), input_shapes={"x": shape}, cache=False)


def test_kept_modules_are_bounded_and_the_api_points_to_one_shape():
    options = CompileOptions(input_shapes={"a": (-1, 4)}, cache=False, max_specializations=2, specialize="eager")
    sess = compile_model(pair_model(), options=options)
    for n in (1, 2, 3):
        x = np.full((n, 4), n, np.float32)
        sess.run(None, {"a": x, "b": x})
    assert [s["symbols"]["N"] for s in sess.specializations()] == [2, 3]
    with pytest.raises(AttributeError, match=r"sess.specialization\(\{input name: shape, \.\.\.\}\).benchmark"):
        sess.benchmark
    module = sess.specialization({"a": (5, 4), "b": (5, 4)})
    assert module.input_shapes == {"a": (5, 4), "b": (5, 4)}


def test_concurrent_runs_of_new_shapes_compile_once_and_agree():
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="eager")
    feeds = [{"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)} for w in (9, 9, 12, 12, 9, 12)]
    results, errors = [None] * len(feeds), []

    def work(i):
        try:
            results[i] = sess.run(None, feeds[i])[0]
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(s["symbols"]["W"] for s in sess.specializations()) == [9, 12]
    assert sum(s["runs"] for s in sess.specializations()) == len(feeds)
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got, sess.run(None, feed)[0])


def test_concurrent_runs_on_the_generic_tier_agree_with_one_at_a_time():
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="never")
    feeds = [{"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)} for w in (9, 30, 12, 9, 64, 12, 3, 30)]
    results = [None] * len(feeds)

    def work(i):
        results[i] = sess.run(None, feeds[i])[0]
    run_threads(work, len(feeds))
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got, sess.run(None, feed)[0])
    assert sess.specializations() == []


def test_relayish_run_compiles_a_model_with_free_dims_at_the_inputs_files_shapes(tmp_path, capsys):
    import onnx

    from relayish_tools.cli import main as cli_main
    path, model = tmp_path / "line.onnx", line_model()
    onnx.save(model, str(path))
    for w in (23, 40):
        x = RNG.standard_normal((1, 3, 8, w)).astype(np.float32)
        np.savez(tmp_path / "in.npz", x=x)
        assert cli_main(["run", str(path), "-i", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]) == 0
        with np.load(tmp_path / "out.npz") as out:
            np.testing.assert_allclose(out["y"], np.asarray(interpreted(model, {"x": x})[0]), rtol=1e-4,
                                       atol=1e-4)
    assert "unbound dim" not in capsys.readouterr().err  # no dim was bound to 1


# ---------------------------------------------------------------------------------------------- a free batch

def batch_cnn(reduce_batch=False):
    """conv + relu + global pool + a classifier over (N, 3, 9, 9) with N free: (N, 7); reduce_batch: the logits
    minus their mean over the batch (items no longer computed apart)."""
    w = numpy_helper.from_array(RNG.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.standard_normal((8, 7)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y" if not reduce_batch else "l"])]
    if reduce_batch:
        nodes += [helper.make_node("ReduceMean", ["l"], ["m"], axes=[0], keepdims=1),
                  helper.make_node("Sub", ["l", "m"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 3, 9, 9))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("N", 7))], [w, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_free_batch_runs_sizes_never_seen_on_the_generic_tier_with_no_compile():
    model = batch_cnn()
    sess = compile_model(model, input_shapes={"x": (None, 3, 9, 9)}, cache=False)
    assert sess.generic_tier["batch"] == "N"
    for n in (3, 1, 5, 0):
        feed = {"x": RNG.standard_normal((n, 3, 9, 9)).astype(np.float32)}
        ours, = sess.run(None, feed)
        assert ours.shape == (n, 7)
        if n:
            assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"N={n}")
    assert [s["symbols"] for s in sess.specializations()] == [{"N": 1}]  # seen once each: nothing compiled


def test_a_recurring_batch_is_compiled_in_the_background_and_swapped_in_under_concurrent_runs():
    """Six threads run batch 4 while its module compiles in the background (it is asked for from the second
    call on): every result agrees with onnxruntime, whichever tier served it, and the module ends up kept."""
    model = batch_cnn()
    sess = compile_model(model, input_shapes={"x": (None, 3, 9, 9)}, cache=False)
    feed = {"x": RNG.standard_normal((4, 3, 9, 9)).astype(np.float32)}
    want = run_ort(model, feed)[0]
    results = []

    def work(_):
        for _ in range(15):
            results.append(sess.run(None, feed)[0])

    run_threads(work, 6)  # re-raises a thread's failure
    assert len(results) == 90
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert sess.wait_for_specializations(timeout=120)
    kept = {tuple(s["symbols"].items()): s for s in sess.specializations()}
    assert kept[(("N", 4),)]["background"] is True
    runs_before = kept[(("N", 4),)]["runs"]
    np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-4, atol=1e-4)
    assert {tuple(s["symbols"].items()): s["runs"] for s in sess.specializations()}[(("N", 4),)] == runs_before + 1


def test_a_model_that_mixes_its_batch_items_runs_any_batch_on_kernels_with_run_time_extents():
    """Its items are not computed apart (a mean over the batch), so item by item is wrong; the kernels with run-time
    extents take the batch as it comes."""
    model = batch_cnn(reduce_batch=True)
    sess = compile_model(model, input_shapes={"x": (None, 3, 9, 9)}, cache=False)
    assert sess.generic_tier["kind"] == "run-time extents"
    for n in (3, 1, 6):
        feed = {"x": RNG.standard_normal((n, 3, 9, 9)).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, feed)[0], run_ort(model, feed)[0], rtol=1e-4, atol=1e-4)
    assert sess.specializations() == []  # no compile on first sight


def test_a_model_with_no_generic_tier_compiles_each_shape_and_says_why():
    model = ceil_pool_model()
    sess = compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False)
    assert "ceil mode over a dim known only at run time" in sess.generic_tier["none"]
    feed = {"x": RNG.standard_normal((1, 3, 8, 7)).astype(np.float32)}
    np.testing.assert_allclose(sess.run(None, feed)[0], run_ort(model, feed)[0], rtol=1e-6)
    assert [s["symbols"] for s in sess.specializations()] == [{"W": 7}]  # compiled on first sight
    with pytest.raises(ValueError, match=r"specialize='never' needs a generic tier.*ceil mode"):
        compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="never")
    with pytest.raises(ValueError, match=r"specialize must be one of \['auto', 'eager', 'never'\]"):
        compile_model(model, input_shapes={"x": (None, 3, 9, 9)}, cache=False, specialize="lazy")


@pytest.mark.parametrize("nodes, separable", [
    ([("Transpose", ["x"], ["t"], dict(perm=[1, 0, 2])), ("Relu", ["t"], ["u"], {}),
      ("Transpose", ["u"], ["y"], dict(perm=[1, 0, 2]))], True),  # the batch moves to axis 1 and back
    ([("Softmax", ["x"], ["y"], dict(axis=0))], False),
    ([("Softmax", ["x"], ["y"], dict(axis=2))], True),
    ([("Reshape", ["x", "s"], ["y"], {})], True),  # (N, 5, 6) -> (N * 5, 6): the items' rows one after another
    ([("Reshape", ["x", "s"], ["r"], {}), ("Softmax", ["r"], ["m"], dict(axis=1)),  # merged into rows and back
      ("Reshape", ["m", "back"], ["y"], {})], True),
    ([("Transpose", ["x"], ["t"], dict(perm=[1, 0, 2])), ("Reshape", ["t", "heads"], ["h"], {}),  # (5, N x 2, 3)
      ("Softmax", ["h"], ["m"], dict(axis=2)), ("Reshape", ["m", "unheads"], ["u"], {}),  # as attention heads
      ("Transpose", ["u"], ["y"], dict(perm=[1, 0, 2]))], True),
    ([("Reshape", ["x", "quads"], ["y"], {})], False),  # (N x 30 / 4, 4): the batch split across rows
    ([("Transpose", ["x"], ["t"], dict(perm=[1, 0, 2])), ("Reshape", ["t", "s"], ["y"], {})], False),  # (5 x N, 6):
    # item b's rows are b, N + b, ...: the batch inside the axis, not its outer factor
    ([("Slice", ["x", "one", "four", "two"], ["y"], {})], True),  # columns 1-3 of every item
    ([("Slice", ["x", "zero", "one", "zero"], ["y"], {})], False),  # the first item only
    ([("Concat", ["x", "x"], ["y"], dict(axis=0))], False),
    ([("Concat", ["x", "x"], ["y"], dict(axis=1))], True),
])
def test_which_graphs_keep_their_batch_items_apart(nodes, separable):
    from compiler.batch_split import NotSeparable, batch_axis_of_outputs
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("s", [-1, 6]), ("back", [-1, 5, 6]), ("heads", [5, -1, 3]), ("unheads", [5, -1, 6]),
               ("quads", [-1, 4]), ("zero", [0]), ("one", [1]), ("two", [2]), ("four", [4]))]
    graph = helper.make_graph([helper.make_node(op, i, o, **a) for op, i, o, a in nodes], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 5, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = from_onnx(model, input_shapes={"x": (2, 5, 6)})
    if separable:
        assert batch_axis_of_outputs(mod) == (0,)
    else:
        with pytest.raises(NotSeparable):
            batch_axis_of_outputs(mod)


def test_an_exported_session_loads_with_its_tiers_and_compiles_nothing(tmp_path):
    from compiler import load_session
    model = batch_cnn()
    sess = compile_model(model, input_shapes={"x": (None, 3, 9, 9)}, cache=False)
    x4 = RNG.standard_normal((4, 3, 9, 9)).astype(np.float32)
    for _ in range(2):
        sess.run(None, {"x": x4})
    assert sess.wait_for_specializations(timeout=120)
    folder = sess.export(str(tmp_path / "sess"))
    loaded = load_session(folder)
    assert loaded.generic_tier == sess.generic_tier and loaded.get_inputs()[0].shape == ["N", 3, 9, 9]
    assert sorted(s["symbols"]["N"] for s in loaded.specializations()) == [1, 4]
    np.testing.assert_array_equal(loaded.run(None, {"x": x4})[0], sess.run(None, {"x": x4})[0])  # the same module
    x6 = RNG.standard_normal((6, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(loaded.run(None, {"x": x6})[0], run_ort(model, {"x": x6})[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="holds no exported session"):
        load_session(str(tmp_path / "nowhere"))


def test_a_loaded_session_without_a_generic_tier_compiles_only_with_its_model(tmp_path):
    from compiler import load_session
    model = ceil_pool_model()
    sess = compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False)
    x = {w: {"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)} for w in (10, 14)}
    sess.run(None, x[10])
    folder = sess.export(str(tmp_path / "line"))
    loaded = load_session(folder)
    np.testing.assert_array_equal(loaded.run(None, x[10])[0], sess.run(None, x[10])[0])
    with pytest.raises(ValueError, match=r"loaded \(load_session\) with no module for them and no model"):
        loaded.run(None, x[14])
    with_model = load_session(folder, model=model)
    np.testing.assert_allclose(with_model.run(None, x[14])[0], run_ort(model, x[14])[0], rtol=1e-4, atol=1e-4)


def test_a_loaded_session_rebuilds_its_run_time_extents_tier_from_its_model(tmp_path):
    from compiler import load_session
    model = line_model()
    sess = compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False)
    folder = sess.export(str(tmp_path / "line"))
    feed = {"x": RNG.standard_normal((1, 3, 8, 23)).astype(np.float32)}
    with_model = load_session(folder, model=model)
    assert with_model.generic_tier["kind"] == "run-time extents"
    np.testing.assert_array_equal(with_model.run(None, feed)[0], sess.run(None, feed)[0])
    assert with_model.specializations() == []
    without = load_session(folder)
    assert "loaded without its model" in without.generic_tier["none"]
    with pytest.raises(ValueError, match=r"loaded \(load_session\) with no module for them and no model"):
        without.run(None, feed)


def test_a_recurrent_model_with_a_free_batch_runs_on_the_generic_tier():
    """(N, 6, 4) -> time-major -> LSTM -> (6, N, 5): the batch moves to axis 1 through the input projection's
    rows (T x N) and the cells' state; the output keeps it on axis 1, where the items are joined."""
    consts = [numpy_helper.from_array((RNG.standard_normal(shape) * 0.5).astype(np.float32), name)
              for name, shape in (("W", (1, 20, 4)), ("R", (1, 20, 5)), ("B", (1, 40)))]
    consts.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("LSTM", ["t", "W", "R", "B"], ["Y"], hidden_size=5),
             helper.make_node("Squeeze", ["Y", "one"], ["y"])]
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 6, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (6, "N", 5))], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = compile_model(model, input_shapes={"x": (None, 6, 4)}, cache=False)
    assert sess.generic_tier["batch"] == "N"
    for n in (3, 2):
        feed = {"x": RNG.standard_normal((n, 6, 4)).astype(np.float32)}
        ours, = sess.run(None, feed)
        assert ours.shape == (6, n, 5)
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"N={n}")
    assert [s["symbols"] for s in sess.specializations()] == [{"N": 1}]


def test_a_transformer_with_a_symbolic_batch_runs_on_the_generic_tier():
    """The suite's GPT built with batch "N" (its reshapes copy the batch: 0): attention's heads, the causal
    mask and the vocabulary projection keep the items apart, so new batch sizes run at once."""
    from models.gpt import make_gpt
    model = make_gpt(batch="N", layers=1)
    sess = compile_model(model, input_shapes={"input_ids": (None, 64)}, cache=False)
    assert sess.generic_tier["batch"] == "N"
    feed = {"input_ids": RNG.integers(0, 1000, (3, 64)).astype(np.int64)}
    ours, = sess.run(None, feed)
    np.testing.assert_allclose(ours, run_ort(model, feed)[0], rtol=1e-4, atol=1e-4)
    assert [s["symbols"] for s in sess.specializations()] == [{"N": 1}]


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_a_transformer_with_a_free_sequence_length_runs_every_length(name):
    """The suite's BERT and GPT slice their position ids (and GPT sizes its causal mask) to the input's length,
    as exports with dynamic axes do: with the length free, lengths never compiled for (odd, shorter and longer)
    match onnxruntime and the interpreter, each on a module of its own."""
    from models.bert import make_bert
    from models.gpt import make_gpt
    small = dict(layers=1, d_model=32, heads=2, vocab_size=50)
    model = make_bert(batch="N", seq_len="T", ffn=64, **small) if name == "bert" else \
        make_gpt(batch="N", seq_len="T", **small)
    names = [v.name for v in model.graph.input]
    sess = compile_model(model, input_shapes={n: (1, None) for n in names}, cache=False, specialize="eager")
    for length in (5, 16, 37):
        feed = {n: RNG.integers(0, 2 if n == "attention_mask" else 50, (1, length)).astype(np.int64) for n in names}
        ours, = sess.run(None, feed)
        assert ours.shape[:2] == (1, length)
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"T={length}")
    assert sorted(s["symbols"]["T"] for s in sess.specializations()) == [5, 16, 37]


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_a_transformer_with_a_free_sequence_length_runs_every_length_on_one_generic_module(name):
    """The same models with no specialization: their shape arithmetic (the length read with Shape, the position
    table sliced to it, GPT's causal mask of ConstantOfShape(length, length)) is evaluated at import over the
    length (frontends/onnx/shape_values.py), so one module with run-time extents serves every length."""
    from models.bert import make_bert
    from models.gpt import make_gpt
    small = dict(layers=1, d_model=32, heads=2, vocab_size=50)
    model = make_bert(batch="N", seq_len="T", ffn=64, **small) if name == "bert" else \
        make_gpt(batch="N", seq_len="T", **small)
    names = [v.name for v in model.graph.input]
    sess = compile_model(model, input_shapes={n: (1, None) for n in names}, cache=False, specialize="never")
    assert sess.generic_tier["kind"] == "run-time extents"
    for length in (5, 16, 37):
        feed = {n: RNG.integers(0, 2 if n == "attention_mask" else 50, (1, length)).astype(np.int64) for n in names}
        ours, = sess.run(None, feed)
        assert ours.shape[:2] == (1, length)
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"T={length}")
    assert sess.specializations() == []


def test_the_generic_tiers_module_is_kept_beside_max_specializations():
    """With room for one specialization, the batch-1 module stays besides it (it is the generic tier), and a size
    compiled in the background is kept, not dropped for the generic tier's sake."""
    sess = compile_model(batch_cnn(), options=CompileOptions(input_shapes={"x": (None, 3, 9, 9)}, cache=False,
                                                             max_specializations=1))
    for n in (4, 4, 6, 6):
        sess.run(None, {"x": RNG.standard_normal((n, 3, 9, 9)).astype(np.float32)})
        assert sess.wait_for_specializations(timeout=120)
    assert [s["symbols"]["N"] for s in sess.specializations()] == [1, 6]


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_a_statically_quantized_model_runs_any_batch_on_the_generic_tier(op):
    """Static QDQ quantizes with constant scales: its integer convolutions and matmuls keep the items apart, so a
    free batch runs item by item on the batch-1 module, giving what a module compiled for that batch gives."""
    from relayish_tools.bench.free_dims import with_free_axes
    from test_qdq import qdq_model
    model = with_free_axes(qdq_model(op, bias="quantized" if op == "Conv" else None),
                           {"symbol": "N", "axes": [("x", 0)]})
    rest = (4, 9, 10) if op == "Conv" else (12,)
    sess = compile_model(model, input_shapes={"x": (None,) + rest}, cache=False, specialize="never")
    assert sess.generic_tier["batch"] == "N"
    feed = {"x": RNG.standard_normal((3,) + rest).astype(np.float32)}
    ours, = sess.run(None, feed)
    static, = compile_model(model, input_shapes={"x": (3,) + rest}, cache=False).run(None, feed)
    np.testing.assert_array_equal(ours, static)
    np.testing.assert_allclose(ours, run_ort(model, feed)[0], atol=0.08 + 1e-6)  # one step of y's scale at most


@pytest.mark.parametrize("axis", [2, 3])
def test_a_statically_quantized_convolution_runs_free_spatial_dims_on_kernels_with_run_time_extents(axis):
    """An integer convolution of 3 input channels (an RGB stem: the static compile reads its rows as runs of
    bytes, sized by the width) over a free height or width: one generic module, bit-identical at each size to
    the module compiled for it."""
    from relayish_tools.bench.free_dims import with_free_axes
    from test_qdq import qdq_model
    model = qdq_model("Conv")
    for init in model.graph.initializer:  # 3 input channels instead of 4, a 3x7 kernel (as 7x7 stems are wide)
        if init.name == "w8":
            w = RNG.integers(-127, 128, (8, 3, 3, 7)).astype(np.int8)
            init.CopyFrom(numpy_helper.from_array(w, "w8"))
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.attribute[0].CopyFrom(helper.make_attribute("pads", [1, 3, 1, 3]))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    model = with_free_axes(model, {"symbol": "S", "axes": [("x", axis)]})
    free = tuple(None if a == axis else d for a, d in enumerate((1, 3, 9, 10)))
    sess = compile_model(model, input_shapes={"x": free}, cache=False, specialize="never")
    assert sess.generic_tier["kind"] == "run-time extents"
    for size in (5, 13):
        shape = tuple(size if d is None else d for d in free)
        feed = {"x": RNG.standard_normal(shape).astype(np.float32)}
        ours, = sess.run(None, feed)
        static, = compile_model(model, input_shapes={"x": shape}, cache=False).run(None, feed)
        np.testing.assert_array_equal(ours, static, err_msg=f"size {size}")
        np.testing.assert_allclose(ours, run_ort(model, feed)[0], atol=0.08 + 1e-6)
    assert sess.specializations() == []


def test_a_batch_flattened_into_the_next_dim_runs_on_the_generic_tier():
    """Detector exports often reshape [N, anchors, 6] to [1, N x anchors, 6] (a 1 baked in): the items stay apart,
    item i's rows following item i - 1's, so the generic tier joins the items' outputs along that axis; batch 0
    gives no rows."""
    shape = numpy_helper.from_array(np.array([1, -1, 4], np.int64), "shape")
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "flat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, None, 4))], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = compile_model(model, input_shapes={"x": (None, 3, 4)}, cache=False, specialize="never")
    assert sess.generic_tier["batch"] == "N"
    for n in (3, 1, 0):
        feed = {"x": RNG.standard_normal((n, 3, 4)).astype(np.float32)}
        ours, = sess.run(None, feed)
        assert ours.shape == (1, 3 * n, 4)
        np.testing.assert_allclose(ours, run_ort(model, feed)[0], rtol=1e-5, atol=1e-6)


def test_a_reshape_that_spreads_the_items_over_other_dims_runs_on_kernels_with_run_time_extents():
    """[N, 6, 4] -> Reshape [1, 6, -1] (batch 1 baked, as in a YOLOX export's head): at batch 2 the items fill the
    channel axis three rows each and the last axis doubles, so batch-1 outputs cannot be joined into it; the
    kernels with run-time extents read it back by its row-major position (divisors 24, 4: static)."""
    shape = numpy_helper.from_array(np.array([1, 6, -1], np.int64), "shape")
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 6, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 6, None))], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = compile_model(model, input_shapes={"x": (None, 6, 4)}, cache=False)
    assert sess.generic_tier["kind"] == "run-time extents", sess.generic_tier
    for n in (2, 5, 1):
        feed = {"x": RNG.standard_normal((n, 6, 4)).astype(np.float32)}
        ours, = sess.run(None, feed)
        assert ours.shape == (1, 6, 4 * n)
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"N={n}")
    assert sess.specializations() == []


def test_sizes_that_shrink_a_window_below_its_input_leave_the_generic_tier():
    """A 2x2 / 2 max pool of a map 1 high: onnxruntime clips the window to the input (one output row), the shape
    rule over a size variable gives 0 rows. The generic tier refuses such sizes and the session compiles them,
    as PP-OCR's direction classifier at heights 8-32 needs (its last pool sees a map 1 high)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, "H", 8))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3, 1, 1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = compile_model(model, input_shapes={"x": (1, 3, None, 8)}, cache=False)
    assert sess.generic_tier["kind"] == "run-time extents"
    for h in (6, 1, 5):
        feed = {"x": RNG.standard_normal((1, 3, h, 8)).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, feed)[0], run_ort(model, feed)[0], rtol=1e-6, err_msg=f"H={h}")
    assert [s["symbols"] for s in sess.specializations()] == [{"H": 1}]  # compiled for H=1 only


@pytest.mark.parametrize("tier", ["batch", "run-time extents"])
def test_run_generic_serves_a_specialized_shape_on_the_generic_tier_with_the_same_results(tier):
    """sess.run_generic runs a call on the generic tier even where a module for the shape is kept (bench.dynamic
    times the tiers with it), gives the specialized tier's results, and does not count toward specializing."""
    model = batch_cnn(reduce_batch=tier != "batch")
    sess = compile_model(model, input_shapes={"x": (None, 3, 9, 9)}, cache=False)
    assert sess.generic_tier.get("kind", "batch") == tier
    feed = {"x": RNG.standard_normal((3, 3, 9, 9)).astype(np.float32)}
    sess.specialization({"x": (3, 3, 9, 9)})  # compiled and kept: run serves the shape with it
    specialized = sess.run(None, feed)[0]
    runs = {tuple(s["symbols"].items()): s["runs"] for s in sess.specializations()}
    generic = sess.run_generic(None, feed)[0]
    np.testing.assert_allclose(generic, specialized, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(generic, run_ort(model, feed)[0], rtol=1e-4, atol=1e-4)
    assert {tuple(s["symbols"].items()): s["runs"] for s in sess.specializations()} == runs
    with pytest.raises(TypeError, match="input_feed must be a dict"):
        sess.run_generic(None, [feed["x"]])


def test_run_generic_without_a_generic_tier_says_so():
    sess = compile_model(ceil_pool_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False)
    with pytest.raises(ValueError, match="this session has no generic tier: none .*ceil mode"):
        sess.run_generic(None, {"x": np.zeros((1, 3, 8, 7), np.float32)})


def fixed_size_cnn(head: str):
    """A CNN exported at one input size, its height left free: two stride-2 max pools, then a head that only
    works at the sizes giving the exported map: "dense" (Flatten -> Gemm of a fixed weight, as AlexNet and VGG),
    "flatten" (Reshape to (-1, features), as ZFNet), "shuffle" (a channel shuffle reshaping to the fixed map, as
    ShuffleNet), "concat" (beside a branch of fixed size, as ShuffleNet's shortcut after the shuffle)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p1"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("MaxPool", ["p1"], ["p"], kernel_shape=[3, 3], strides=[2, 2])]  # 19 -> 9 -> 4
    inits = []
    if head in ("dense", "flatten"):
        w = RNG.standard_normal((4 * 4 * 4, 5)).astype(np.float32)
        inits += [numpy_helper.from_array(w, "w")]
        if head == "dense":
            nodes += [helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "w"], ["y"])]
        else:
            inits += [numpy_helper.from_array(np.array([-1, 64], np.int64), "s")]
            nodes += [helper.make_node("Reshape", ["p", "s"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])]
    elif head == "shuffle":
        inits += [numpy_helper.from_array(np.array([1, 2, 2, 4, 4], np.int64), "s"),
                  numpy_helper.from_array(np.array([1, 4, 4, 4], np.int64), "back")]
        nodes += [helper.make_node("Reshape", ["p", "s"], ["r"]),
                  helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
                  helper.make_node("Reshape", ["t", "back"], ["y"])]
    else:
        inits += [numpy_helper.from_array(RNG.standard_normal((1, 3, 4, 4)).astype(np.float32), "side")]
        nodes += [helper.make_node("Concat", ["p", "side"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "fixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, "H", 19))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("head", ["dense", "flatten", "shuffle", "concat"])
def test_a_model_of_one_exported_size_runs_its_free_size_on_one_generic_module(head):
    """Heights 19 and 20 give the exported 4x4 map: served by one module with run-time extents, its assumption
    (the map is 4) checked per call; height 23 gives 5x4, which onnxruntime refuses and so does the session."""
    model = fixed_size_cnn(head)
    sess = compile_model(model, input_shapes={"x": (1, 4, None, 19)}, cache=False)
    assert sess.generic_tier["kind"] == "run-time extents"
    for h in (19, 20):
        feed = {"x": RNG.standard_normal((1, 4, h, 19)).astype(np.float32)}
        ours = sess.run(None, feed)[0]
        assert_three_way(ours, run_ort(model, feed)[0], np.asarray(interpreted(model, feed)[0]), f"H={h}")
    assert sess.specializations() == []  # nothing compiled for a size
    with pytest.raises(Exception, match=r"(?i)reshape|features|concatenate|dim"):
        sess.run(None, {"x": np.zeros((1, 4, 23, 19), np.float32)})


def test_sizes_no_memory_holds_are_refused_not_wrapped():
    """A size whose buffers would overflow 64 bits (or a loop's int32 extent) is refused with an error that says
    so, where wrapped arithmetic would have planned a small workspace for kernels that write far past it."""
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="never")
    module = sess._extents
    (var,) = module._vars.values()
    for size in (2**40, 2**62):
        with pytest.raises(ValueError, match="overflow"):
            module._plan({var: size})


def test_the_generic_tier_reads_any_array_layout_a_caller_passes():
    """Inputs read in place where they are C-contiguous and element-aligned; a Fortran-ordered array, a strided
    view and an array whose elements are misaligned give the results of a plain array."""
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="never")
    x = RNG.standard_normal((1, 3, 8, 21)).astype(np.float32)
    want = sess.run(None, {"x": x})[0]
    raw = np.zeros(x.nbytes + 2, np.uint8)[1:-1]  # 1 byte off: no float32 there is 4-byte aligned
    misaligned = raw.view(np.float32).reshape(x.shape)
    misaligned[...] = x
    wider = np.zeros((1, 3, 8, 42), np.float32)
    wider[..., ::2] = x
    for feed in (np.asfortranarray(x), wider[..., ::2], misaligned):
        np.testing.assert_array_equal(sess.run(None, {"x": feed})[0], want)


def test_the_generic_modules_generated_calls_give_the_step_by_step_results():
    """A generic module with no scan and no data-sized dim is planned and called by generated code
    (compiler/generic_runner.py); it gives what planning in Python and calling step by step (_run_steps) gives, at
    new sizes and at sizes planned before, an output returned fresh each call."""
    sess = compile_model(line_model(), input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="never")
    module = sess._extents
    for w in (5, 17, 5, 64):
        feed = {"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)}
        fast = module.run(None, feed)[0]
        assert module._plan(module.bind(feed)).state is not None  # planned by the generated code
        with python_planned(module):
            slow = module.run(None, feed)[0]
        np.testing.assert_array_equal(fast, slow)
        assert fast is not module.run(None, feed)[0]  # a new array per call


def test_concurrent_calls_at_new_sizes_each_get_the_plan_of_their_own_sizes():
    """Plans made at once by calls of different new sizes: each call's plan is of its own sizes (the sizes' array
    handed to the generated plan function was a temporary whose memory another thread's allocation could take
    before the plan read it, and a plan made for other sizes was kept under these: outputs of another width). A
    race: without the fix this failed 2 runs of 3, and the stress of fresh sessions' first calls 15 of 47."""
    model = line_model()
    sess = compile_model(model, input_shapes={"x": (1, 3, 8, None)}, cache=False, specialize="never")
    widths = list(range(2, 200))
    feeds = [{"x": RNG.standard_normal((1, 3, 8, w)).astype(np.float32)} for w in widths]
    results = [None] * len(feeds)

    def work(i):
        for k in range(i, len(feeds), 8):
            results[k] = sess.run(None, feeds[k])[0]
    run_threads(work, 8)
    for w, feed, got in zip(widths, feeds, results):
        want = run_ort(model, feed)[0]
        assert got.shape == want.shape == (1, w, 5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

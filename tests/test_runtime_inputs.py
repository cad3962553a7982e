"""Whatever a caller feeds to `run`: the result of onnxruntime (when the input is usable as is) or a ValueError that
names the input, what was expected and what was given; never a crash, never a silent cast. Also: a symbolic input
dim left unbound at compile time is a warning naming it, or an error with strict=True."""
from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from test_concurrency import small_model

X_SHAPE, B_SHAPE = (1, 8, 16, 16), (1, 10)


@pytest.fixture(scope="module")
def model():
    return small_model()


@pytest.fixture(scope="module")
def sess(model):
    return compile_model(model)


@pytest.fixture(scope="module")
def ort_sess(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def base_feed(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(X_SHAPE).astype(np.float32), "b": rng.standard_normal(B_SHAPE).astype(np.float32)}


def assert_close(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-30)


def unaligned(a, by=4):
    """a's values at an address `by` bytes past a 64-byte boundary (4: element-aligned, read in place; 2: not even
    element-aligned, copied first)."""
    raw = np.empty(a.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + by
    out = np.ndarray(a.shape, a.dtype, buffer=raw, offset=start)
    out[...] = a
    return out


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def strided_view(a):
    """A non-contiguous view with a's values: every other element of a twice-as-wide array."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


# Layout-only differences: the same values, so the same outputs as onnxruntime's on the plain arrays.
SAME_VALUES = {
    "fortran order": np.asfortranarray,
    "non-contiguous view": strided_view,
    "transposed view": lambda a: np.ascontiguousarray(a.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0),
    "read-only": read_only,
    "unaligned": unaligned,
    "element-misaligned": lambda a: unaligned(a, by=2),
    "big-endian": lambda a: a.astype(a.dtype.newbyteorder(">")),
}


@pytest.mark.parametrize("case", list(SAME_VALUES))
def test_layouts_give_onnxruntime_results(sess, ort_sess, case):
    feed = base_feed(1)
    x = SAME_VALUES[case](feed["x"])
    assert np.array_equal(x, feed["x"])
    before = x.copy()
    got = sess.run(None, {"x": x, "b": feed["b"]})
    want = ort_sess.run(None, feed)  # onnxruntime misreads big-endian arrays: it is given the plain ones
    for g, w in zip(got, want):
        assert_close(g, w)
    np.testing.assert_array_equal(x, before)  # inputs are only read


def test_a_reused_staging_buffer_takes_each_calls_values(sess, ort_sess):
    """An input whose elements are misaligned is copied into the same aligned buffer of the call's slot every time:
    each call sees its own values, and the outputs of an earlier call are not changed by a later one."""
    feeds = [base_feed(seed) for seed in (1, 2)]
    got = [sess.run(None, {"x": unaligned(f["x"], by=2), "b": f["b"]}) for f in feeds]
    for g, f in zip(got, feeds):
        for a, w in zip(g, ort_sess.run(None, f)):
            assert_close(a, w)


def test_an_element_aligned_input_is_read_in_place_and_a_misaligned_one_copied():
    """Kernels assume only element alignment: an array 4 bytes past a cache line is handed over as it is (a copy
    of a large input cost more than the model's kernels), one 2 bytes off is staged into an aligned buffer."""
    from runtime.module import Module
    from runtime.workspaces import Slot
    x = base_feed(4)["x"]
    in_place, misaligned = unaligned(x), unaligned(x, by=2)
    slot = Slot(64, 2, 1)
    Module._bind_inputs([in_place, misaligned], slot)
    assert slot.in_ptrs[0] == in_place.ctypes.data and slot.staged[0] is None
    assert slot.in_ptrs[1] != misaligned.ctypes.data and slot.in_ptrs[1] % 64 == 0
    np.testing.assert_array_equal(slot.staged[1][0], x)


def _x_feed(x):
    return {"x": x, "b": base_feed()["b"]}


BAD_X = {
    "wrong shape": (np.zeros((1, 8, 16, 15), np.float32), r"'x' has shape \(1, 8, 16, 15\), expected \(1, 8, 16, 16\)"),
    "wrong rank": (np.zeros((8, 16, 16), np.float32),
                   r"'x' has rank 3 \(shape \(8, 16, 16\)\), expected rank 4 \(shape \(1, 8, 16, 16\)\)"),
    "0-d array": (np.array(1.0, np.float32), r"'x' has rank 0 \(shape \(\)\), expected rank 4"),
    "float64": (np.zeros(X_SHAPE, np.float64), r"'x' has dtype float64, expected float32 \(no implicit casting"),
    "int32": (np.zeros(X_SHAPE, np.int32), r"'x' has dtype int32, expected float32"),
    "float16": (np.zeros(X_SHAPE, np.float16), r"'x' has dtype float16, expected float32"),
    "None": (None, r"'x' must be a numpy.ndarray of shape \(1, 8, 16, 16\) and dtype float32, got NoneType"),
    "numpy scalar": (np.float32(1.0), r"'x' has rank 0 \(shape \(\)\), expected rank 4"),
    "ragged list": ([[0.0, 1.0], [2.0]], r"'x' must be .* got a list that is not a rectangular nesting of numbers"),
    "list of strings": (["a"], r"'x' must be .* got a list that is not a rectangular nesting of numbers"),
    "short list": (np.zeros(X_SHAPE[1:], np.float32).tolist(), r"'x' has rank 3 \(shape \(8, 16, 16\)\)"),
    "masked array": (np.ma.masked_array(np.zeros(X_SHAPE, np.float32)), r"'x' must be .* got a masked array"),
    "object array": (np.empty(X_SHAPE, object), r"'x' has dtype object, expected float32"),
}


@pytest.mark.parametrize("case", list(BAD_X))
def test_bad_inputs_are_clear_errors(sess, ort_sess, case):
    x, message = BAD_X[case]
    with pytest.raises(ValueError, match=message):
        sess.run(None, _x_feed(x))


def test_onnxruntime_also_rejects_them_but_masked_arrays_and_numpy_scalars(ort_sess):
    """Where we refuse an input that onnxruntime runs, it would be a silent conversion: a masked array (its mask
    ignored). onnxruntime refuses every numpy scalar; we take one as the 0-d array it is (refused here for its
    rank)."""
    for case, (x, _) in BAD_X.items():
        try:
            ort_sess.run(None, _x_feed(x))
            accepted = True
        except Exception:  # noqa: BLE001 - onnxruntime raises several types
            accepted = False
        assert accepted == (case == "masked array"), case


def test_a_list_of_numbers_runs_as_onnxruntime_runs_it(sess, ort_sess):
    """A nested list of Python floats is converted to the input's dtype, as onnxruntime converts it."""
    feed = base_feed(3)
    as_lists = {"x": feed["x"].tolist(), "b": feed["b"].tolist()}
    for got, want in zip(sess.run(None, as_lists), ort_sess.run(None, as_lists)):
        assert_close(got, want)
    for got, want in zip(sess.run(None, as_lists), sess.run(None, feed)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("feed, message", [
    ({"x": np.zeros(X_SHAPE, np.float32)}, r"missing input\(s\) 'b' \(the model's inputs are 'x', 'b'\)"),
    ({**base_feed(), "z": np.zeros(1, np.float32)}, r"unknown input\(s\) 'z'"),
    ({"z": np.zeros(1, np.float32)}, r"unknown input\(s\) 'z'; missing input\(s\) 'x', 'b'"),
    ({}, r"missing input\(s\) 'x', 'b'"),
    ([np.zeros(X_SHAPE, np.float32), np.zeros(B_SHAPE, np.float32)], "input_feed must be a dict .* got list"),
    (None, "input_feed must be a dict .* got NoneType"),
])
def test_missing_extra_and_malformed_feeds(sess, feed, message):
    with pytest.raises(ValueError, match=message):
        sess.run(None, feed)


# ---- output names ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("names", [None, [], (), ["pooled", "logits"], ["logits"], ["pooled", "pooled"]])
def test_output_names_as_onnxruntime(sess, ort_sess, names):
    feed = base_feed(2)
    want = ort_sess.run(names, feed)
    got = sess.run(names, feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w)
    if names and len(names) == 2 and names[0] == names[1]:
        assert not np.shares_memory(got[0], got[1])  # two arrays, as onnxruntime returns


@pytest.mark.parametrize("names, message", [
    (["nope"], r"unknown output\(s\) 'nope' \(the model's outputs are 'logits', 'pooled'\)"),
    ("logits", "output_names must be a list of output names or None"),
    ([1], "output_names must be a list of output names or None"),
])
def test_bad_output_names(sess, names, message):
    with pytest.raises(ValueError, match=message):
        sess.run(names, base_feed())


# ---- shapes fixed at compile time ------------------------------------------------------------------------------
def symbolic_model():
    """small_model() with its batch dim symbolic ("N") in both inputs and an unnamed unknown dim in b."""
    model = small_model()
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.input[1].type.tensor_type.shape.dim[1].Clear()
    return model


def test_an_unbound_symbolic_dim_warns_naming_input_and_dim():
    with pytest.warns(UserWarning) as record:
        from_onnx(symbolic_model())
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert "input 'x' has unbound dim 0 ('N'), compiled as 1 (shape (1, 8, 16, 16)); bind it with " \
           "input_shapes={'x': (...)}" in messages[0]
    assert "input 'b' has unbound dim 0 ('N'), dim 1 (unknown), compiled as 1 (shape (1, 1))" in messages[1]


def test_bound_dims_do_not_warn_and_strict_refuses_unbound_ones():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = from_onnx(symbolic_model(), input_shapes={"x": (2, 8, 16, 16), "b": (2, 10)})
    assert [p.type.shape for p in module.main.params] == [(2, 8, 16, 16), (2, 10)]
    with pytest.raises(OnnxImportError, match=r"input 'b' has unbound dim 1 \(unknown\).*\(strict=True\)"):
        compile_model(symbolic_model(), input_shapes={"x": (2, 8, 16, 16)}, strict=True)


# ---- numpy scalars, Python numbers and lists -------------------------------------------------------------------
@pytest.fixture(scope="module")
def scalar_sess():
    """y = a + float(k): a float32 0-d input and an int64 (2,) one."""
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), helper.make_node("Add", ["a", "kf"], ["y"])],
        "scalars", [helper.make_tensor_value_info("a", TensorProto.FLOAT, []),
                    helper.make_tensor_value_info("k", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("a", [np.float32(0.5), np.array(0.5, np.float32), 0.5], ids=["numpy", "0-d", "python"])
@pytest.mark.parametrize("k", [np.array([1, 2]), [1, 2], [1.0, 2.0], [True, False]], ids=["array", "ints", "floats",
                                                                                          "bools"])
def test_scalars_and_lists_are_fed_as_arrays_of_the_inputs_dtype(scalar_sess, a, k):
    y, = scalar_sess.run(None, {"a": a, "k": k})
    np.testing.assert_array_equal(y, np.float32(0.5) + np.asarray(k, np.float32))


@pytest.mark.parametrize("a, k, message", [
    (np.float64(0.5), [1, 2], r"'a' has dtype float64, expected float32 \(no implicit casting"),
    (np.array(0.5), [1, 2], r"'a' has dtype float64, expected float32"),
    (0.5, [1.5, 2], r"'k' is a list holding a fraction, which int64 cannot represent"),
    (0.5, [2 ** 63, 2], r"'k' is a list holding a value outside \[-9223372036854775808, 9223372036854775807\]"),
    (0.5, [1, 2, 3], r"'k' has shape \(3,\), expected \(2,\)"),
    ("0.5", [1, 2], r"'a' must be a numpy.ndarray of shape \(\) and dtype float32, got str"),
])
def test_scalars_and_lists_that_do_not_fit_are_clear_errors(scalar_sess, a, k, message):
    with pytest.raises(ValueError, match=message):
        scalar_sess.run(None, {"a": a, "k": k})


def test_unnamed_dims_bind_through_input_shapes_like_named_ones():
    """paddle2onnx and tf2onnx write an unknown dim as dim_value -1 or dim_param '?', others leave the dim empty:
    input_shapes binds each on its own (two '?' need not agree), and the session reports them as onnxruntime does."""
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "unnamed",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, "?", "h", "?", None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, "?", "h", "?", None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = compile_model(model, input_shapes={"x": (2, 3, 4, 5, 6)})
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    ort_sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape == ort_sess.get_inputs()[0].shape == [None, "?", "h", "?", None]
    with pytest.warns(UserWarning, match=r"dim 0 \(unknown\), dim 1 \(unknown\), dim 2 \('h'\), dim 3 \(unknown\), "
                                         r"dim 4 \(unknown\), compiled as 1"):
        from_onnx(model)

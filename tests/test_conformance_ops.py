"""Numerics of the ops added for onnx's conformance cases (issue 29, item 6), each three ways: compiled vs the
numpy interpreter vs onnxruntime where it runs the op, else (or also) vs onnx's reference (`onnx.reference`):
BitCast (every same-width dtype pair, special values), Mod on floats (fmod=0 and 1, signed zeros, infinite and
zero divisors), Dropout (training with a seed: the reference's mask exactly, ratio at run time or constant;
inference: a mask of ones), BatchNormalization's training mode, Not at opset 1, LinearAttention (the four update
rules, GQA, past state, float16), TensorScatter (linear and circular), TfIdfVectorizer (modes, weights, skips),
DeformConv (pads, strides, dilations, groups, offset groups, mask, bias). The ops of other domains:
tests/test_conformance_domains.py.
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import (bits, compiled_and_interpreted, edge_values, elem, run_ort, run_ort_or_none, run_reference,
                     with_output_shapes)
from relayish.types import numpy_dtype

OUT = helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)  # typed by shape inference


def node_model(op: str, inputs: dict, opset: int, outputs=("y",), domain="", **attrs):
    """One node `op` over graph inputs {name: (dtype, shape)}."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), list(outputs), domain=domain, **attrs)], op,
        [helper.make_tensor_value_info(n, elem(d), s) for n, (d, s) in inputs.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return with_output_shapes(helper.make_model(graph, opset_imports=opsets))


# ---------------------------------------------------------------------------------------------- BitCast

WIDTHS = {1: ["int8", "uint8", "bool"], 2: ["int16", "uint16", "float16", "bfloat16"],
          4: ["int32", "uint32", "float32"], 8: ["int64", "uint64", "float64"]}
BITCAST_PAIRS = [(a, b) for group in WIDTHS.values() for a, b in itertools.permutations(group, 2)]


def bit_patterns(dtype: str, n: int = 40) -> np.ndarray:
    """n values of dtype whose bits cover the special cases: signed zeros, infinities, quiet NaNs, subnormals,
    the integer extremes (read as floats: NaN patterns, negative zero...)."""
    if dtype == "bool":
        return np.arange(n) % 3 == 1
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        info = ml_dtypes.finfo(numpy_dtype(dtype))
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, float(info.smallest_subnormal),
                            -float(info.smallest_subnormal), float(info.max), float(info.min), 1.0, -2.5])
        rng = np.random.default_rng(3)
        return np.concatenate([special, rng.standard_normal(n - len(special)) * 1e3]).astype(numpy_dtype(dtype))
    return np.resize(edge_values(dtype), n)


@pytest.mark.parametrize("src,dst", BITCAST_PAIRS, ids=[f"{a}-{b}" for a, b in BITCAST_PAIRS])
def test_bitcast_reads_the_same_bits(src, dst):
    x = bit_patterns(src).reshape(2, 20)
    model = node_model("BitCast", {"x": (src, x.shape)}, 26, to=elem(dst))
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    expected = x.view(numpy_dtype(dst)) if dst != "bool" else x.view(np.uint8) != 0
    assert ours.dtype == numpy_dtype(dst) and ours.shape == x.shape
    np.testing.assert_array_equal(bits(ours) if dst != "bool" else ours, bits(expected) if dst != "bool" else expected)
    np.testing.assert_array_equal(bits(interp) if dst != "bool" else interp,
                                  bits(expected) if dst != "bool" else expected)
    if "bfloat16" not in (src, dst) and "bool" not in (src, dst):  # what onnxruntime's Python API can feed/fetch
        ref, = run_ort_or_none(model, {"x": x}) or [None]
        if ref is not None:
            np.testing.assert_array_equal(bits(ours), bits(ref))


def test_bitcast_refuses_other_widths():
    model = node_model("BitCast", {"x": ("float32", (3,))}, 26, to=elem("int64"))
    with pytest.raises(OnnxImportError, match=r"BitCast\).*bitcast: float32 and int64 differ in width"):
        from_onnx(onnx.shape_inference.infer_shapes(model))


# ---------------------------------------------------------------------------------------------- Mod on floats

def mod_operands(dtype: str):
    """Dividends and divisors with the edge cases of a floor remainder: signed zeros, infinite and zero divisors,
    NaN, mixed signs, quotients of many digits."""
    a = [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, np.inf, -np.inf, 1.0, 1.0, np.nan, 1.0, -4.3, 7.2, 5.0, 4.3,
         2000.5, -123.25]
    b = [-2.0, 2.0, 2.0, -2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 2.0, 0.0, -0.0, 2.0, np.nan, 2.1, -3.4, 8.0,
         -2.1, 3.0, 0.75]
    rng = np.random.default_rng(5)
    a += list(rng.standard_normal(17) * 10)
    b += list(rng.standard_normal(17) * 3)
    return np.array(a, numpy_dtype(dtype)), np.array(b, numpy_dtype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod_matches_numpy_and_onnxruntime(dtype, fmod):
    a, b = mod_operands(dtype)
    model = node_model("Mod", {"a": (dtype, a.shape), "b": (dtype, b.shape)}, 28 if fmod == 0 else 13, fmod=fmod)
    (ours,), (interp,) = compiled_and_interpreted(model, {"a": a, "b": b})
    with np.errstate(all="ignore"):
        expected = (np.fmod if fmod else np.mod)(a, b)
    refs = [("numpy", expected), ("interpreter", interp)]
    ref, = run_ort_or_none(model, {"a": a, "b": b}) or [None]
    if ref is not None:
        refs.append(("onnxruntime", ref))
    for name, want in refs:
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(want), err_msg=f"NaN pattern vs {name}")
        np.testing.assert_allclose(ours, want, rtol=2e-3 if dtype == "float16" else 1e-6, atol=0,
                                   err_msg=f"vs {name}")
    if fmod == 0:  # a zero remainder takes the divisor's sign, as numpy's
        zero = expected == 0
        np.testing.assert_array_equal(np.signbit(ours[zero]), np.signbit(expected[zero]))


def test_float_mod_with_fmod_0_needs_opset_28():
    model = node_model("Mod", {"a": ("float32", (3,)), "b": ("float32", (3,))}, 13)
    with pytest.raises(OnnxImportError, match="fmod=0 on float inputs is defined by ONNX from opset 28 only"):
        from_onnx(model)


# ---------------------------------------------------------------------------------------------- Dropout

def dropout_model(x_dtype="float32", shape=(3, 4, 5), ratio_dtype="float32", seed=0, constant_ratio=None,
                  opset=22):
    """Dropout(x, ratio, training_mode) with both outputs; ratio a graph input, or an initializer of the value
    constant_ratio."""
    inputs = {"x": (x_dtype, shape), "t": ("bool", ())}
    names = ["x", "r", "t"]
    inits = []
    if constant_ratio is None:
        inputs["r"] = (ratio_dtype, ())
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(constant_ratio, numpy_dtype(ratio_dtype)), "r"))
    attrs = {} if seed is None else {"seed": seed}
    graph = helper.make_graph([helper.make_node("Dropout", names, ["y", "mask"], **attrs)], "dropout",
                              [helper.make_tensor_value_info(n, elem(d), s) for n, (d, s) in inputs.items()],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                               for o in ("y", "mask")], inits)
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def adversarial_ratio(seed: int, shape, dtype) -> float:
    """A ratio equal to a draw of the reference's as rounded to `dtype` where that rounding went up: a comparison
    in dtype of the rounded draws would keep that element, the reference's float64 comparison drops it."""
    draws = np.random.RandomState(seed).uniform(0.0, 1.0, shape)
    rounded = draws.astype(dtype)
    up = np.flatnonzero(rounded.astype(np.float64) > draws)
    return rounded.reshape(-1)[up[0]]


@pytest.mark.parametrize("dtype,ratio_dtype", [("float32", "float32"), ("float64", "float64"),
                                               ("float16", "float16"), ("float64", "float32")])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.75, "adversarial", 1.0])
def test_training_dropout_draws_the_references_mask(dtype, ratio_dtype, ratio):
    shape = (4, 33)
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    x[0, :3] = [np.inf, -np.inf, np.nan]  # dropped: 0 * x is NaN, as the reference's
    if ratio == "adversarial":
        if ratio_dtype == "float64":
            pytest.skip("the draws are float64: none rounds")
        ratio = adversarial_ratio(5, shape, numpy_dtype(ratio_dtype))
    r = np.array(ratio, numpy_dtype(ratio_dtype))
    for model, feeds in ((dropout_model(dtype, shape, ratio_dtype, seed=5), {"x": x, "r": r, "t": np.array(True)}),
                         (dropout_model(dtype, shape, ratio_dtype, seed=5, constant_ratio=r),
                          {"x": x, "t": np.array(True)})):
        (y, mask), interp = compiled_and_interpreted(model, feeds)
        want_y, want_mask = run_reference(model, feeds)
        np.testing.assert_array_equal(mask, want_mask)
        np.testing.assert_array_equal(interp[1], want_mask)
        assert y.dtype == want_y.dtype
        np.testing.assert_allclose(y, want_y, rtol=1e-3 if dtype == "float16" else 1e-6)
        np.testing.assert_allclose(interp[0], want_y, rtol=1e-3 if dtype == "float16" else 1e-6)
        assert 0 < mask.sum() < mask.size or ratio in (0.0, 1.0)


def test_dropout_in_inference_is_identity_with_a_mask_of_ones():
    x = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float32)
    feeds = {"x": x, "r": np.array(0.5, np.float32), "t": np.array(False)}
    for model in (dropout_model(seed=None), dropout_model(seed=3)):
        (y, mask), interp = compiled_and_interpreted(model, feeds)
        for want in (run_ort(model, feeds), interp):
            np.testing.assert_array_equal(y, want[0])
            np.testing.assert_array_equal(mask, want[1])
        assert mask.dtype == np.bool_ and mask.all()


def test_dropout_before_opset_12_refuses_its_mask():
    model = node_model("Dropout", {"x": ("float32", (2, 3))}, 10, outputs=("y", "mask"), ratio=0.25)
    with pytest.raises(OnnxImportError, match=r"output 1 \('mask'\) is used, but only the first 1 output"):
        from_onnx(model)


def test_training_dropout_without_a_seed_is_refused():
    feeds = {"x": np.ones((3, 4, 5), np.float32), "r": np.array(0.5, np.float32), "t": np.array(True)}
    with pytest.raises(OnnxImportError, match=r"\(Dropout\): training_mode=True without a seed is not supported"):
        compile_model(dropout_model(seed=None)).run(None, feeds)


# ---------------------------------------------------------------------------------------------- BatchNormalization

@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 5, 7)])
def test_batch_norm_training_outputs_batch_normalized_and_running_statistics(shape):
    c = shape[1]
    rng = np.random.default_rng(4)
    inputs = {"x": ("float32", shape), "s": ("float32", (c,)), "b": ("float32", (c,)), "m": ("float32", (c,)),
              "v": ("float32", (c,))}
    model = node_model("BatchNormalization", inputs, 15, outputs=("y", "rm", "rv"), training_mode=1, momentum=0.8,
                       epsilon=1e-3)
    feeds = {n: (rng.standard_normal(s) * 2 + 1).astype(np.float32) for n, (_, s) in inputs.items()}
    feeds["v"] = np.abs(feeds["v"])
    ours, interp = compiled_and_interpreted(model, feeds)
    for got, inter, want in zip(ours, interp, run_reference(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(inter, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- opsets below 7

def test_not_at_opset_1():
    """Not has one schema version (1), reviewed: a model of opset 1 imports it."""
    x = np.random.default_rng(6).integers(0, 2, (3, 4, 5)).astype(bool)
    model = node_model("Not", {"x": ("bool", x.shape)}, 1)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    np.testing.assert_array_equal(ours, ~x)
    np.testing.assert_array_equal(interp, ~x)
    np.testing.assert_array_equal(ours, run_ort(model, {"x": x})[0])


# ---------------------------------------------------------------------------------------------- LinearAttention

def linear_attention_case(rule, b=2, t=5, hq=4, hkv=2, dk=3, dv=4, past=False, decay_per_key=True,
                          beta_heads=None, dtype="float32", scale=None):
    inputs = {"query": (dtype, (b, t, hq * dk)), "key": (dtype, (b, t, hkv * dk)), "value": (dtype, (b, t, hkv * dv))}
    names = ["query", "key", "value", "past_state" if past else ""]
    if past:
        inputs["past_state"] = (dtype, (b, hkv, dk, dv))
    if rule in ("gated", "gated_delta"):
        inputs["decay"] = (dtype, (b, t, hkv * dk if decay_per_key else hkv))
    names.append("decay" if "decay" in inputs else "")
    if rule in ("delta", "gated_delta"):
        inputs["beta"] = (dtype, (b, t, beta_heads or hkv))
    names.append("beta" if "beta" in inputs else "")
    while names[-1] == "":
        names.pop()
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule}
    if scale is not None:
        attrs["scale"] = scale
    graph = helper.make_graph([helper.make_node("LinearAttention", names, ["out", "state"], **attrs)], "la",
                              [helper.make_tensor_value_info(n, elem(d), s) for n, (d, s) in inputs.items()],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                               for o in ("out", "state")])
    model = with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)]))
    rng = np.random.default_rng(8)
    feeds = {n: rng.standard_normal(s).astype(d) * 0.5 for n, (d, s) in inputs.items()}
    if "decay" in feeds:
        feeds["decay"] = -np.abs(feeds["decay"])  # log-space decay: factors in (0, 1]
    if "beta" in feeds:
        feeds["beta"] = 1 / (1 + np.exp(-feeds["beta"]))  # update rates in (0, 1)
    return model, feeds


@pytest.mark.parametrize("case", [
    dict(rule="linear"), dict(rule="gated"), dict(rule="gated", decay_per_key=False), dict(rule="delta"),
    dict(rule="gated_delta"), dict(rule="gated_delta", beta_heads=1, past=True), dict(rule="gated_delta", hkv=1),
    dict(rule="gated_delta", hkv=4, t=1, past=True, scale=0.3), dict(rule="delta", dtype="float16", past=True)],
    ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_linear_attention_three_ways(case):
    model, feeds = linear_attention_case(**case)
    ours, interp = compiled_and_interpreted(model, feeds)
    ref = run_ort(model, feeds)
    evaluator = run_reference(model, feeds)
    tol = 3e-3 if case.get("dtype") == "float16" else 1e-5
    for got, inter, want, want_ref in zip(ours, interp, ref, evaluator):
        assert got.dtype == want.dtype and got.shape == want.shape
        scale = float(np.max(np.abs(want_ref.astype(np.float64))))
        for other, name in ((want, "onnxruntime"), (inter, "interpreter"), (want_ref, "onnx reference")):
            err = float(np.max(np.abs(got.astype(np.float64) - other.astype(np.float64)))) / scale
            assert err <= tol, f"vs {name}: relative error {err:.3g}"


def test_linear_attention_refuses_a_missing_decay():
    model, _ = linear_attention_case("delta")
    model.graph.node[0].attribute[-1].s = b"gated_delta"
    with pytest.raises(OnnxImportError, match=r"\(LinearAttention\): update_rule 'gated_delta' needs input decay"):
        from_onnx(model)


# ---------------------------------------------------------------------------------------------- TensorScatter

@pytest.mark.parametrize("mode,axis,shape,steps,indices", [
    ("linear", -2, (2, 3, 6, 4), 2, [0, 4]), ("linear", 1, (3, 6, 4), 3, [3, 0, 1]),
    ("circular", -2, (2, 3, 6, 4), 4, [5, 2]), ("circular", 2, (2, 3, 6, 4), 6, [1, 0]),
    ("linear", -2, (2, 5, 3), 2, None)])
def test_tensor_scatter_three_ways(mode, axis, shape, steps, indices):
    ushape = tuple(steps if d == axis % len(shape) else s for d, s in enumerate(shape))
    inputs = {"past": ("float32", shape), "update": ("float32", ushape)}
    if indices is not None:
        inputs["w"] = ("int64", (shape[0],))
    model = node_model("TensorScatter", inputs, 24, mode=mode, axis=axis)
    rng = np.random.default_rng(9)
    feeds = {"past": rng.standard_normal(shape).astype(np.float32),
             "update": rng.standard_normal(ushape).astype(np.float32)}
    if indices is not None:
        feeds["w"] = np.array(indices, np.int64)
    (ours,), (interp,) = compiled_and_interpreted(model, feeds)
    want = run_reference(model, feeds)[0]
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(interp, want)
    np.testing.assert_array_equal(ours, run_ort(model, feeds)[0])


# ---------------------------------------------------------------------------------------------- TfIdfVectorizer

POOL = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 3, 7, 2, 5, 6, 7], ngram_counts=[0, 4, 12])  # 4 uni, 4 bi,
# 2 tri


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("IDF", "w"), ("TFIDF", None),
                                          ("TFIDF", "w")])
@pytest.mark.parametrize("lengths,skip", [((1, 1), 0), ((2, 2), 0), ((1, 3), 2), ((2, 3), 5)])
@pytest.mark.parametrize("shape,dtype", [((2, 14), "int32"), ((17,), "int64")])
def test_tfidf_vectorizer_three_ways(mode, weights, lengths, skip, shape, dtype):
    # TF, TFIDF: two n-grams counted in output 1; IDF: a permutation (onnxruntime's IDF keeps one of the weights
    # of n-grams that share an output, the schema adds them)
    indexes = [0, 1, 2, 3, 4, 5, 6, 7, 1, 8] if mode != "IDF" else [3, 1, 2, 0, 4, 5, 6, 9, 7, 8]
    attrs = dict(POOL, mode=mode, min_gram_length=lengths[0], max_gram_length=lengths[1], max_skip_count=skip,
                 ngram_indexes=indexes)
    if weights:  # one per pool n-gram (onnxruntime's rule); applied per output position, as both engines do
        attrs["weights"] = [0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 1.0, 2.5, 4.0, 9.0]
    model = node_model("TfIdfVectorizer", {"x": (dtype, shape)}, 9, **attrs)
    x = np.random.default_rng(10).integers(2, 9, shape).astype(dtype)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    want = run_ort(model, {"x": x})[0]
    assert ours.dtype == np.float32 and ours.shape == want.shape
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(interp, want)
    if weights is None and mode == "TF":  # onnx's reference fails on IDF and TFIDF without weights (len(None))
        np.testing.assert_array_equal(ours, run_reference(model, {"x": x})[0])  # and reads weights per output
    assert ours.any()


def test_tfidf_vectorizer_refuses_string_pools():
    model = node_model("TfIdfVectorizer", {"x": ("int64", (4,))}, 9, mode="TF", min_gram_length=1,
                       max_gram_length=1, max_skip_count=0, ngram_counts=[0], ngram_indexes=[0],
                       pool_strings=["a"])
    with pytest.raises(OnnxImportError, match="only integer pools"):
        from_onnx(model)


# ---------------------------------------------------------------------------------------------- DeformConv

@pytest.mark.parametrize("case", [
    dict(), dict(pads=[1, 2, 0, 1], strides=[2, 1]), dict(dilations=[2, 1], mask=True, bias=True),
    dict(group=2, offset_group=2, mask=True), dict(offset_group=3, channels=6, kernel=(3, 2), bias=True)],
    ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_deform_conv_three_ways(case):
    case = dict(case)
    n, c, h, w = 2, case.pop("channels", 4), 6, 7
    kh, kw = case.pop("kernel", (2, 3))
    group, offset_group = case.get("group", 1), case.get("offset_group", 1)
    pads, strides, dil = case.get("pads", [0, 0, 0, 0]), case.get("strides", [1, 1]), case.get("dilations", [1, 1])
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32),
             "w": rng.standard_normal((4, c // group, kh, kw)).astype(np.float32),
             "offset": (rng.standard_normal((n, offset_group * kh * kw * 2, oh, ow)) * 2).astype(np.float32)}
    names = ["x", "w", "offset"]
    if case.pop("bias", False):
        feeds["b"] = rng.standard_normal(4).astype(np.float32)
    names.append("b" if "b" in feeds else "")
    if case.pop("mask", False):
        feeds["mask"] = rng.random((n, offset_group * kh * kw, oh, ow)).astype(np.float32)
        names.append("mask")
    graph = helper.make_graph([helper.make_node("DeformConv", names, ["y"], kernel_shape=[kh, kw], **case)], "dc",
                              [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape)
                               for k, v in feeds.items()], [OUT])
    model = with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))
    (ours,), (interp,) = compiled_and_interpreted(model, feeds)
    want = run_ort(model, feeds)[0]
    assert ours.shape == want.shape == (n, 4, oh, ow)
    for other in (want, interp, run_reference(model, feeds)[0]):
        np.testing.assert_allclose(ours, other, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))


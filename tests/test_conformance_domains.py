"""Numerics of the ops of ONNX's other domains added for onnx's conformance cases (issue 29, item 6), as
tests/test_conformance_ops.py checks the default domain's: Binarizer, ArrayFeatureExtractor, TreeEnsemble
(ai.onnx.ml) three ways, FlexAttention (ai.onnx.preview, score_mod / prob_mod graphs) and the optimizers Momentum,
Adagrad, Adam (ai.onnx.preview.training) against onnx's reference (onnxruntime has no kernel for them); the review
table of their versions and the domain version checks.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import compiled_and_interpreted, elem, run_ort, run_reference, with_output_shapes
from relayish.types import numpy_dtype

def domain_model(op, inputs: dict, domain: str, version: int, outputs=("y",), opset=26, **attrs):
    """One node `op` of `domain` over graph inputs {name: (dtype, shape)}; opset None: no ai.onnx import."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), list(outputs), domain=domain, **attrs)], op,
        [helper.make_tensor_value_info(n, elem(d), s) for n, (d, s) in inputs.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs])
    imports = ([helper.make_opsetid("", opset)] if opset else []) + [helper.make_opsetid(domain, version)]
    return with_output_shapes(helper.make_model(graph, opset_imports=imports))


def test_every_version_of_the_other_domains_ops_is_reviewed():
    from frontends.onnx import supported_ops
    from frontends.onnx.versions.domains import MAX_VERSIONS, REVIEWED, schema_version
    for domain, newest in MAX_VERSIONS.items():
        # the installed onnx's newest versions of ai.onnx.ml and ai.onnx.preview.training (its VERSION_TABLE)
        newest_in_onnx = {"ai.onnx.ml": helper.VERSION_TABLE[-1][3],
                          "ai.onnx.preview.training": helper.VERSION_TABLE[-1][4]}
        assert newest == newest_in_onnx.get(domain, newest), f"{domain}: onnx has version {newest_in_onnx[domain]}"
        for op in supported_ops(domain):
            found = {schema_version(domain, op, v) for v in range(1, newest + 1)} - {None}
            assert tuple(sorted(found)) == REVIEWED[domain][op], f"{domain} {op}: review versions {sorted(found)}"
        assert sorted(REVIEWED[domain]) == supported_ops(domain)


def test_other_domain_ops_name_their_domain_version_problems():
    x = {"x": ("float32", (3, 4))}
    with pytest.raises(OnnxImportError, match=r"Binarizer \(ai.onnx.ml v6\).*ai.onnx.ml opset 6 is not supported"):
        from_onnx(domain_model("Binarizer", x, "ai.onnx.ml", 6))


@pytest.mark.parametrize("dtype,threshold", [("float32", 0.25), ("float64", -1.0), ("int64", 1.5),
                                             ("int32", 0.0)])
def test_binarizer_three_ways(dtype, threshold):
    x = (np.random.default_rng(12).standard_normal((3, 4, 5)) * 3).astype(dtype)
    if dtype.startswith("float"):
        x.flat[:3] = [np.nan, threshold, np.inf]
    model = domain_model("Binarizer", {"x": (dtype, x.shape)}, "ai.onnx.ml", 1, threshold=threshold)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    want = run_reference(model, {"x": x})[0]
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(interp, want)
    if dtype == "float32":  # onnxruntime's Binarizer takes float only, and refuses NaN
        finite = np.nan_to_num(x)
        np.testing.assert_array_equal(compile_model(model).run(None, {"x": finite})[0],
                                      run_ort(model, {"x": finite})[0])


@pytest.mark.parametrize("shape,indices", [((3, 4), [2, 0]), ((2, 3, 5), [[4, -1, 0]]), ((6,), [5, 1, 1])])
def test_array_feature_extractor_three_ways(shape, indices):
    x = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
    i = np.array(indices, np.int64)
    model = domain_model("ArrayFeatureExtractor", {"x": ("float32", shape), "i": ("int64", i.shape)}, "ai.onnx.ml", 1)
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x, "i": i})
    want = run_reference(model, {"x": x, "i": i})[0]
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(interp, want)
    if (i >= 0).all():  # onnxruntime refuses negative indices
        np.testing.assert_array_equal(ours, run_ort(model, {"x": x, "i": i})[0])


def tree_ensemble_attrs(aggregate, dtype):
    """Two trees over 3 features: tree 0 = nodes 0-2 (LEQ, MEMBER, GT with NaN going true), tree 1 = node 3 (NEQ)
    and node 4 (LT); 7 leaves over 2 targets."""
    np_dtype = numpy_dtype(dtype)
    t = lambda values, name: onnx.numpy_helper.from_array(np.asarray(values, np_dtype), name)  # noqa: E731
    return dict(
        nodes_featureids=[0, 1, 2, 2, 0], nodes_modes=onnx.numpy_helper.from_array(np.uint8([0, 6, 3, 5, 1]),
                                                                                   "nodes_modes"),
        nodes_splits=t([0.5, 0.0, -0.25, 1.0, 0.0], "nodes_splits"),
        membership_values=t([1.0, 2.0, np.nan], "membership_values"),
        nodes_missing_value_tracks_true=[0, 0, 1, 0, 0],
        nodes_truenodeids=[1, 0, 2, 4, 5], nodes_trueleafs=[0, 1, 1, 0, 1],
        nodes_falsenodeids=[2, 1, 3, 6, 4], nodes_falseleafs=[0, 1, 1, 1, 1],
        leaf_targetids=[0, 1, 0, 1, 0, 1, 0], leaf_weights=t([1.5, -2.0, 3.25, 0.5, 7.0, -1.0, 2.0], "leaf_weights"),
        tree_roots=[0, 3], n_targets=2, aggregate_function=aggregate, post_transform=0)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tree_ensemble_three_ways(aggregate, dtype):
    rng = np.random.default_rng(14)
    x = rng.integers(-2, 3, (40, 3)).astype(dtype) * 0.5
    x[:5, 2] = np.nan
    model = domain_model("TreeEnsemble", {"x": (dtype, x.shape)}, "ai.onnx.ml", 5,
                         **tree_ensemble_attrs(aggregate, dtype))
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    want = run_ort(model, {"x": x})[0]
    assert ours.dtype == want.dtype and ours.shape == (40, 2)
    np.testing.assert_allclose(ours, want, rtol=1e-6)
    np.testing.assert_allclose(interp, want, rtol=1e-6)
    theirs = run_reference(model, {"x": x})[0]  # where a leaf names the target (else: its start value, not 0)
    named = np.abs(theirs) < np.finfo(theirs.dtype).max
    np.testing.assert_allclose(ours[named], theirs[named], rtol=1e-6)
    assert aggregate in (0, 1) or not named.all()


# ---------------------------------------------------------------------------------------------- FlexAttention

def flex_model(shapes, dtype="float32", score_mod=None, prob_mod=None, **attrs):
    graphs = {}
    for name, nodes in (("score_mod", score_mod), ("prob_mod", prob_mod)):
        if nodes is not None:
            graphs[name] = helper.make_graph(nodes, name, [helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT,
                                                                                         None)],
                                             [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)])
    return domain_model("FlexAttention", {n: (dtype, s) for n, s in zip("qkv", shapes)}, "ai.onnx.preview", 1,
                        **attrs, **graphs)


def _flex_cases():
    causal = [helper.make_node("Constant", [], ["neg"], value_float=-np.inf),
              helper.make_node("Constant", [], ["tri"], value=onnx.numpy_helper.from_array(
                  np.tril(np.ones((5, 7), bool), 2), "tri")),
              helper.make_node("Where", ["tri", "s", "neg"], ["out"])]
    cap = [helper.make_node("Constant", [], ["c"], value_float=3.0), helper.make_node("Div", ["s", "c"], ["d"]),
           helper.make_node("Tanh", ["d"], ["t"]), helper.make_node("Mul", ["t", "c"], ["out"])]
    square = [helper.make_node("Mul", ["s", "s"], ["out"])]
    base = ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6))
    return [dict(shapes=base), dict(shapes=((2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 3)), scale=0.2),
            dict(shapes=base, score_mod=causal), dict(shapes=base, score_mod=cap, prob_mod=square),
            dict(shapes=base, dtype="float64"), dict(shapes=base, dtype="float16"),
            dict(shapes=base, softmax_precision=onnx.TensorProto.DOUBLE)]


@pytest.mark.parametrize("case", _flex_cases(), ids=["plain", "gqa-scale", "causal", "softcap-square", "double",
                                                     "half", "double-softmax"])
def test_flex_attention_against_onnx_reference(case):
    case = dict(case)
    dtype = case.pop("dtype", "float32")
    model = flex_model(case.pop("shapes"), dtype, **case)
    rng = np.random.default_rng(15)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(dtype)
             for i in model.graph.input}
    (ours,), (interp,) = compiled_and_interpreted(model, feeds)
    want = run_reference(model, feeds)[0]
    assert ours.dtype == want.dtype and ours.shape == want.shape
    tol = 2e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(ours, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(interp, want, rtol=tol, atol=tol)


def test_conformance_cases_of_other_domain_ops_pass():
    """tests/test_conformance.py runs the cases of the default domain's ops; these are the other domains'."""
    from relayish_tools.conformance import load_cases, run_cases, select
    from relayish_tools.conformance.engines import run_relayish
    from frontends.onnx import supported_ops
    from frontends.onnx.versions.domains import OTHER_DOMAINS
    ops = set(supported_ops()).union(*(supported_ops(d) for d in OTHER_DOMAINS))
    other = set().union(*(supported_ops(d) for d in OTHER_DOMAINS))
    cases = [c for c in select(load_cases(), ops) if any(n.domain in OTHER_DOMAINS for n in c.model.graph.node)]
    assert len(cases) >= 15 and {n.op_type for c in cases for n in c.model.graph.node} >= other
    failed = [f"{r.name}: {r.status}: {r.message}" for r in run_cases(cases, run_relayish, workers=2, timeout=120)
              if r.status != "pass"]
    assert not failed, "\n".join(failed)


# ---------------------------------------------------------------------------------------------- optimizers

@pytest.mark.parametrize("op,attrs", [
    ("Momentum", dict(alpha=0.9, beta=0.3, mode="standard", norm_coefficient=0.01)),
    ("Momentum", dict(alpha=0.8, beta=0.5, mode="nesterov", norm_coefficient=0.0)),
    ("Adagrad", dict(decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)),
    ("Adam", dict(alpha=0.9, beta=0.99, epsilon=1e-3, norm_coefficient=0.01, norm_coefficient_post=0.05))],
    ids=["momentum", "nesterov", "adagrad", "adam"])
@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_optimizer_step_against_onnx_reference(op, attrs, step, dtype):
    shapes = [(3,), (2, 4)]  # two tensors: X1, X2, G1, G2, then each state kind
    kinds = ["X", "G"] + {"Momentum": ["V"], "Adagrad": ["H"], "Adam": ["V", "H"]}[op]
    inputs = {"R": (dtype, ()), "T": ("int64", ())}
    inputs.update({f"{k}{i}": (dtype, s) for k in kinds for i, s in enumerate(shapes)})
    outputs = [f"{k}{i}_new" for k in ["X"] + kinds[2:] for i in range(len(shapes))]
    model = domain_model(op, inputs, "ai.onnx.preview.training", 1, outputs=outputs, opset=None, **attrs)
    rng = np.random.default_rng(16)
    feeds = {n: rng.standard_normal(s).astype(d) for n, (d, s) in inputs.items()}
    feeds.update(R=np.array(0.1, dtype), T=np.array(step, np.int64))
    for k in ("H0", "H1"):
        if k in feeds:
            feeds[k] = np.abs(feeds[k])
    ours, interp = compiled_and_interpreted(model, feeds)
    for got, inter, want, name in zip(ours, interp, run_reference(model, feeds), outputs):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(inter, want, rtol=1e-5, atol=1e-6, err_msg=name)

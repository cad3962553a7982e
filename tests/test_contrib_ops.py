"""onnxruntime's float contrib ops (frontends/onnx/ops/contrib.py, contrib_attention.py), one node each,
with odd shapes and optional inputs absent and present: compiled vs the numpy interpreter vs onnxruntime (within
1e-4 relative). The ops onnxruntime has no CPU kernel for (BiasAdd, BiasSplitGelu, BiasSoftmax) against their
formula in numpy. Bad attributes and inputs: a clear error naming the node."""
from __future__ import annotations

import math

import numpy as np
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import node_model, relative_error, three_way
from relayish.interp import evaluate

F32, I32 = np.float32, np.int32


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def test_gelu_family():
    rng = np.random.default_rng(0)
    x, bias = rand(rng, 2, 3, 7, scale=2.0), rand(rng, 7)
    three_way(node_model("Gelu", [("x", F32, [2, 3, 7])]), {"x": x})
    three_way(node_model("BiasGelu", [("x", F32, [2, 3, 7]), ("b", bias)]), {"x": x})
    three_way(node_model("FastGelu", [("x", F32, [2, 3, 7])]), {"x": x})
    three_way(node_model("FastGelu", [("x", F32, [2, 3, 7]), ("b", F32, [7])]), {"x": x, "b": bias})
    three_way(node_model("QuickGelu", [("x", F32, [5, 3])], attrs={"alpha": 1.3}), {"x": x[0, :, :5].T.copy()})


def _numpy_gelu(v):
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


def test_ops_without_cpu_kernels_against_their_formula():
    """BiasAdd, BiasSplitGelu, BiasSoftmax: onnxruntime has CUDA kernels only; their documented formulas."""
    rng = np.random.default_rng(1)
    x, bias, skip = rand(rng, 2, 3, 6), rand(rng, 6), rand(rng, 2, 3, 6)
    cases = [
        (node_model("BiasAdd", [("x", F32, [2, 3, 6]), ("b", bias), ("s", F32, [2, 3, 6])]), {"x": x, "s": skip},
         x + bias + skip),
        (node_model("BiasSplitGelu", [("x", F32, [2, 3, 6]), ("b", bias)]), {"x": x},
         (x + bias)[..., :3] * _numpy_gelu((x + bias)[..., 3:])),
    ]
    scores, mask = rand(rng, 2, 3, 4, 5), rand(rng, 2, 1, 1, 5)
    e = np.exp(scores + mask - (scores + mask).max(-1, keepdims=True))
    cases.append((node_model("BiasSoftmax", [("x", F32, [2, 3, 4, 5]), ("m", F32, [2, 1, 1, 5])],
                             attrs={"axis": 3, "is_inner_broadcast": 0}), {"x": scores, "m": mask},
                  e / e.sum(-1, keepdims=True)))
    for model, feeds, expected in cases:
        ours = compile_model(model).run(None, feeds)[0]
        interp = evaluate(from_onnx(model), feeds)
        assert relative_error(ours, expected) <= 1e-5 and relative_error(interp, expected) <= 1e-5


@pytest.mark.parametrize("shapes, attrs", [
    (([3, 5], [5, 4]), {"alpha": 0.5}),
    (([2, 5, 3], [2, 5, 4]), {"transA": 1}),
    (([2, 3, 5], [4, 5]), {"transB": 1, "alpha": 2.0}),
    (([3, 2, 5], [2, 5, 4]), {"transBatchA": 1}),  # A [3, 2, 5] read as [2, 3, 5]
    (([3, 2, 5], [4, 2, 5]), {"transBatchA": 1, "transBatchB": 1, "transB": 1}),
    (([5], [2, 5, 3]), {}),
])
def test_fused_matmul(shapes, attrs):
    rng = np.random.default_rng(2)
    model = node_model("FusedMatMul", [("a", F32, shapes[0]), ("b", F32, shapes[1])], attrs=attrs)
    three_way(model, {"a": rand(rng, *shapes[0]), "b": rand(rng, *shapes[1])})


def test_transpose_matmul():
    rng = np.random.default_rng(3)
    model = node_model("TransposeMatMul", [("a", F32, [4, 3]), ("b", F32, [5, 4])], attrs={"transA": 1, "transB": 1})
    three_way(model, {"a": rand(rng, 4, 3), "b": rand(rng, 5, 4)})


@pytest.mark.parametrize("skip_shape, optional", [([2, 3, 6], ("beta", "bias")), ([3, 6], ()), ([1, 3, 6], ("bias",))])
def test_skip_layer_norm_all_outputs(skip_shape, optional):
    rng = np.random.default_rng(4)
    inputs = [("x", F32, [2, 3, 6]), ("s", F32, skip_shape), ("g", rand(rng, 6) + 1),
              ("beta", rand(rng, 6)) if "beta" in optional else None, ("bias", rand(rng, 6)) if "bias" in optional
              else None]
    while inputs[-1] is None:
        inputs.pop()
    model = node_model("SkipLayerNormalization", inputs, outputs=["y", "mean", "inv", "sum"], attrs={"epsilon": 1e-5})
    three_way(model, {"x": rand(rng, 2, 3, 6), "s": rand(rng, *skip_shape)})


def test_skip_simplified_layer_norm():
    rng = np.random.default_rng(5)
    model = node_model("SkipSimplifiedLayerNormalization", [("x", F32, [3, 8]), ("s", F32, [3, 8]),
                                                            ("g", rand(rng, 8) + 1), ("b", rand(rng, 8))],
                       outputs=["y", "", "", "sum"], attrs={"epsilon": 1e-6})
    three_way(model, {"x": rand(rng, 3, 8), "s": rand(rng, 3, 8)})


def test_onnxruntime_ai_onnx_norms_below_opset_17():
    """LayerNormalization at opset 13 and SimplifiedLayerNormalization: onnxruntime's own ai.onnx definitions."""
    rng = np.random.default_rng(6)
    x = rand(rng, 2, 3, 8)
    three_way(node_model("LayerNormalization", [("x", F32, [2, 3, 8]), ("g", rand(rng, 8)), ("b", rand(rng, 8))],
                         domain="", opset=13, attrs={"epsilon": 1e-5}), {"x": x})
    three_way(node_model("SimplifiedLayerNormalization", [("x", F32, [2, 3, 8]), ("g", rand(rng, 8))], domain="",
                         opset=17, attrs={"epsilon": 1e-6}), {"x": x})


@pytest.mark.parametrize("with_segments, with_mask, position_ids", [(True, True, None), (False, False, None),
                                                                    (True, True, "batch")])
def test_embed_layer_norm(with_segments, with_mask, position_ids):
    rng = np.random.default_rng(7)
    b, s, h = 2, 5, 8
    inputs = [("ids", I32, [b, s]), ("seg", I32, [b, s]) if with_segments else None, ("w", rand(rng, 11, h)),
              ("p", rand(rng, 7, h)), ("se", rand(rng, 2, h)) if with_segments else None, ("g", rand(rng, h) + 1),
              ("beta", rand(rng, h)), ("m", I32, [b, s]) if with_mask else None,
              ("pos", I32, [b, s]) if position_ids else None]
    while inputs[-1] is None:
        inputs.pop()
    feeds = {"ids": rng.integers(0, 11, (b, s)).astype(I32), "seg": rng.integers(0, 2, (b, s)).astype(I32),
             "m": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], I32),
             "pos": rng.integers(0, 7, (b, s)).astype(I32)}
    feeds = {k: v for k, v in feeds.items() if k in {i[0] for i in inputs if i and len(i) == 3}}
    model = node_model("EmbedLayerNormalization", inputs, outputs=["y", ("mask_index", I32), "sum"],
                       attrs={"epsilon": 1e-5})
    three_way(model, feeds)


# ---- Attention, MultiHeadAttention ----

def _attention_model(batch, seq, hidden, heads, mask_shape=None, past=None, bias=True, attention_bias=False,
                     sizes=None, **attrs):
    rng = np.random.default_rng(8)
    total = sum(sizes) if sizes else 3 * hidden
    inputs = [("x", F32, [batch, seq, hidden]), ("w", rand(rng, hidden, total, scale=0.3)),
              ("b", rand(rng, total)) if bias else None, ("mask", I32, mask_shape) if mask_shape else None,
              ("past", F32, past) if past else None,
              ("ab", F32, [batch, heads, seq, seq + (past[3] if past else 0)]) if attention_bias else None]
    while inputs[-1] is None:
        inputs.pop()
    if sizes:
        attrs["qkv_hidden_sizes"] = list(sizes)
    outputs = ["y"] if sizes else ["y", "present"]
    return node_model("Attention", inputs, outputs=outputs, attrs=dict(num_heads=heads, **attrs))


@pytest.mark.parametrize("case", ["lengths_causal", "ends_starts", "raw_2d", "raw_3d", "past_causal", "sizes_bias"])
def test_attention_masks_past_and_options(case):
    rng = np.random.default_rng(9)
    b, s, h, n = 2, 5, 12, 3
    x = rand(rng, b, s, h)
    feeds = {"x": x}
    if case == "lengths_causal":
        model, feeds["mask"] = _attention_model(b, s, h, n, [b], unidirectional=1), np.array([3, 5], I32)
    elif case == "ends_starts":
        model, feeds["mask"] = _attention_model(b, s, h, n, [2 * b], mask_filter_value=-1e4), np.array([4, 5, 1, 0],
                                                                                                       I32)
    elif case == "raw_2d":
        model = _attention_model(b, s, h, n, [b, s], bias=False, scale=0.3)
        feeds["mask"] = np.array([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0]], I32)  # a fully masked row: uniform weights
    elif case == "raw_3d":
        model = _attention_model(b, s, h, n, [b, s, s])
        feeds["mask"] = (rng.random((b, s, s)) < 0.7).astype(I32)
    elif case == "past_causal":
        model = _attention_model(b, s, h, n, [b, s + 2], past=[2, b, n, 2, h // n], unidirectional=1)
        feeds["mask"], feeds["past"] = np.ones((b, s + 2), I32), rand(rng, 2, b, n, 2, h // n)
    else:
        model = _attention_model(b, s, h, n, None, sizes=(6, 6, 9), attention_bias=True)
        feeds["ab"] = rand(rng, b, n, s, s)
    three_way(model, feeds)


@pytest.mark.parametrize("case", ["plain", "bias_mask", "past", "bnsh_kv", "lengths_causal"])
def test_multi_head_attention(case):
    rng = np.random.default_rng(10)
    b, s, kv, h, n = 2, 4, 6, 8, 2
    inputs = [("q", F32, [b, s, h]), ("k", F32, [b, kv, h]), ("v", F32, [b, kv, h])]
    feeds = {"q": rand(rng, b, s, h), "k": rand(rng, b, kv, h), "v": rand(rng, b, kv, h)}
    attrs, outputs = {"num_heads": n}, ["y"]
    if case == "bias_mask":
        inputs += [("bias", rand(rng, 3 * h)), ("m", I32, [b, kv])]
        feeds["m"] = np.array([[1] * kv, [1, 1, 0, 1, 0, 0]], I32)
    elif case == "past":
        inputs += [None, None, None, ("pk", F32, [b, n, 3, h // n]), ("pv", F32, [b, n, 3, h // n])]
        feeds.update(pk=rand(rng, b, n, 3, h // n), pv=rand(rng, b, n, 3, h // n))
        outputs += ["pk_out", "pv_out"]
    elif case == "bnsh_kv":
        inputs[1:] = [("k", F32, [b, n, kv, h // n]), ("v", F32, [b, n, kv, h // n])]
        feeds.update(k=rand(rng, b, n, kv, h // n), v=rand(rng, b, n, kv, h // n))
    else:
        inputs = [("q", F32, [b, s, h]), ("k", F32, [b, s, h]), ("v", F32, [b, s, h]), None, ("m", I32, [b])]
        feeds.update(k=rand(rng, b, s, h), v=rand(rng, b, s, h), m=np.array([2, 4], I32))
        attrs.update(unidirectional=1, scale=0.25)
    three_way(node_model("MultiHeadAttention", inputs, outputs=outputs, attrs=attrs), feeds)


# ---- FusedConv, FusedGemm ----

@pytest.mark.parametrize("activation, params, with_z", [("Relu", None, False), ("Clip", [0.0, 0.5], True),
                                                         ("LeakyRelu", [0.2], False), ("Sigmoid", None, True)])
def test_fused_conv(activation, params, with_z):
    rng = np.random.default_rng(11)
    attrs = dict(activation=activation, kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[1, 2], group=1)
    if params:
        attrs["activation_params"] = params
    inputs = [("x", F32, [1, 3, 7, 9]), ("w", rand(rng, 5, 3, 3, 3, scale=0.3)), ("b", rand(rng, 5))]
    feeds = {"x": rand(rng, 1, 3, 7, 9)}
    if with_z:
        inputs.append(("z", F32, [1, 5, 7, 5]))
        feeds["z"] = rand(rng, 1, 5, 7, 5)
    three_way(node_model("FusedConv", inputs, attrs=attrs), feeds)


def test_fused_gemm():
    rng = np.random.default_rng(12)
    model = node_model("FusedGemm", [("a", F32, [3, 5]), ("b", rand(rng, 4, 5)), ("c", rand(rng, 4))],
                       attrs=dict(transB=1, alpha=0.5, beta=2.0, activation="LeakyRelu", activation_alpha=0.1))
    three_way(model, {"a": rand(rng, 3, 5)})


# ---- refusals ----

@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("Attention", [("x", F32, [1, 4, 10]), ("w", np.zeros((10, 30), F32))], {"num_heads": 3},
     r"qkv_hidden_sizes \(10, 10, 10\) must be 3 positive multiples of num_heads 3"),
    ("Attention", [("x", F32, [1, 4, 12]), ("w", np.zeros((12, 36), F32))], {"num_heads": 3, "do_rotary": 1},
     "do_rotary=1 is not supported"),
    ("Attention", [("x", F32, [1, 4, 12]), ("w", np.zeros((12, 36), F32)), None, ("m", I32, [1, 1, 4, 4])],
     {"num_heads": 3}, r"mask_index of shape \(1, 1, 4, 4\) is not supported"),
    ("Attention", [("x", F32, [1, 4, 12]), ("w", np.zeros((12, 36), F32)), None, ("m", I32, [1, 4, 4])],
     {"num_heads": 3, "unidirectional": 1}, "a 3-D mask together with unidirectional=1 is not supported"),
    ("MultiHeadAttention", [("q", F32, [1, 4, 12])], {"num_heads": 3}, "packed QKV"),
    ("FusedConv", [("x", F32, [1, 2, 4, 4]), ("w", np.zeros((2, 2, 1, 1), F32))], {"activation": "Swish"},
     "activation 'Swish' is not supported"),
    ("FusedMatMul", [("a", F32, [2, 3]), ("b", F32, [3, 2])], {"transA": 2}, "attribute transA must be 0 or 1"),
    ("SkipLayerNormalization", [("x", F32, [2, 3, 4]), ("s", F32, [2, 3, 4]), ("g", np.ones(5, F32))], {},
     r"input gamma must be 1-D of 4 elements"),
])
def test_bad_nodes_are_refused_by_name(op, inputs, attrs, message):
    with pytest.raises(OnnxImportError, match=rf"node '{op}_node' \({op}\): .*{message}"):
        from_onnx(node_model(op, inputs, attrs=attrs))

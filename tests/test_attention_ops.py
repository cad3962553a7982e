"""Attention, RMSNormalization, RotaryEmbedding, Swish and SwiGLU (frontends/onnx/ops/attention.py) in the forms
onnx's conformance cases miss: combinations (3-D GQA with a past cache, a short float mask and is_causal;
a sliding window over a per-batch external cache; interleaved partial rotary on 3-D input with run-time
position ids), negative axes, broadcast scales; and bad nodes refused with a clear error naming the problem.

Three ways: compiled vs the numpy interpreter vs onnx's reference implementation (onnxruntime lacks these opsets).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from relayish.interp import evaluate
from test_frontend import assert_close, with_output_shapes

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def make_model(op, inputs, outputs, attrs, opset):
    """One node; inputs: [(name, elem type, shape) or None for an omitted one]; outputs: names ('' omitted)."""
    given = [i for i in inputs if i is not None]
    node = helper.make_node(op, [i[0] if i else "" for i in inputs], list(outputs), **attrs)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info(*i) for i in given],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def feeds_of(model, rng, ints=None):
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        elem = vi.type.tensor_type.elem_type
        if elem == F:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        elif elem == B:
            feeds[vi.name] = rng.random(shape) < 0.7
        else:
            feeds[vi.name] = np.asarray(ints[vi.name], np.int64)
    return feeds


def three_way(model, feeds):
    refs = ReferenceEvaluator(model).run(None, feeds)
    interp = evaluate(from_onnx(model), feeds)
    interp = list(interp) if isinstance(interp, (list, tuple)) else [interp]
    ours = compile_model(model).run(None, feeds)
    for k, (a, b, c) in enumerate(zip(ours, interp, refs)):
        assert a.shape == c.shape and a.dtype == c.dtype, f"output {k}: {a.shape} {a.dtype} vs {c.shape} {c.dtype}"
        assert np.array_equal(np.isfinite(a), np.isfinite(c)), f"output {k}: non-finite positions differ"
        finite = np.isfinite(c)
        assert_close(a[finite], c[finite], f"output {k} vs the onnx reference")
        assert_close(a[finite], b[finite], f"output {k} vs the interpreter")


def test_attention_3d_gqa_with_past_short_float_mask_and_causal():
    # 4 query heads over 2 kv heads, 3 new tokens after 2 cached ones; the mask covers 4 of the 5 keys
    model = make_model("Attention", [("q", F, [2, 3, 16]), ("k", F, [2, 3, 8]), ("v", F, [2, 3, 12]),
                                     ("mask", F, [3, 4]), ("pk", F, [2, 2, 2, 4]), ("pv", F, [2, 2, 2, 6])],
                       ["y", "present_k", "present_v", "qk"],
                       dict(q_num_heads=4, kv_num_heads=2, is_causal=1, qk_matmul_output_mode=2, scale=0.3), 23)
    three_way(model, feeds_of(model, np.random.default_rng(0)))


@pytest.mark.parametrize("mode", [0, 1, 3])
def test_attention_4d_window_over_external_cache_with_softcap(mode):
    model = make_model("Attention", [("q", F, [2, 2, 3, 4]), ("k", F, [2, 1, 6, 4]), ("v", F, [2, 1, 6, 5]),
                                     ("mask", B, [2, 1, 3, 6]), None, None, ("n", I64, [2])],
                       ["y", "", "", "qk"],
                       dict(left_window_size=2, right_window_size=1, is_causal=1, softcap=2.0,
                            qk_matmul_output_mode=mode), 25)
    # batch 1: 2 valid keys for 3 queries, a negative offset: its first query row attends nothing (zeros)
    three_way(model, feeds_of(model, np.random.default_rng(1), ints={"n": [5, 2]}))


def test_attention_softmax_precision_double():
    model = make_model("Attention", [("q", F, [1, 2, 3, 4]), ("k", F, [1, 2, 5, 4]), ("v", F, [1, 2, 5, 4])],
                       ["y", "", "", "qk"], dict(softmax_precision=TensorProto.DOUBLE, qk_matmul_output_mode=3), 24)
    three_way(model, feeds_of(model, np.random.default_rng(2)))


@pytest.mark.parametrize("inputs, attrs, message", [
    ([("q", F, [1, 3, 8]), ("k", F, [1, 3, 8]), ("v", F, [1, 3, 8])], {}, "needs the attributes q_num_heads"),
    ([("q", F, [1, 3, 8]), ("k", F, [1, 3, 8]), ("v", F, [1, 3, 8])], dict(q_num_heads=3, kv_num_heads=2),
     "not a multiple of 3 heads"),
    ([("q", F, [1, 3, 2, 4]), ("k", F, [1, 2, 2, 4]), ("v", F, [1, 2, 2, 4])], {}, "multiple of K's"),
    ([("q", F, [1, 2, 2, 4]), ("k", F, [1, 2, 2, 4]), ("v", F, [1, 2, 2, 4]), None, ("pk", F, [1, 2, 1, 4])], {},
     "past_key and past_value must be given together"),
    ([("q", F, [1, 2, 2, 4]), ("k", F, [1, 2, 2, 4]), ("v", F, [1, 2, 2, 4])], dict(qk_matmul_output_mode=4),
     "qk_matmul_output_mode must be"),
    ([("q", F, [1, 2, 2, 4]), ("k", F, [1, 2, 2, 4]), ("v", F, [1, 2, 2, 4]), ("m", F, [2, 3])], {},
     "does not fit a key sequence of 2"),
    ([("q", F, [1, 2, 2, 4]), ("k", F, [1, 2, 2, 4]), ("v", F, [1, 2, 2, 4])], dict(softmax_precision=7),
     "softmax_precision=7"),
])
def test_attention_bad_nodes_are_refused_with_a_clear_error(inputs, attrs, message):
    model = make_model("Attention", inputs, ["y"], attrs, 23)
    with pytest.raises(OnnxImportError, match=message) as info:
        from_onnx(model)
    assert "(Attention)" in str(info.value)


@pytest.mark.parametrize("shape, scale_shape, axis", [((2, 3, 8), (8,), -1), ((2, 3, 4, 5), (1, 5), -2),
                                                      ((4, 6), (4, 6), 0)])
def test_rms_normalization(shape, scale_shape, axis):
    model = make_model("RMSNormalization", [("x", F, list(shape)), ("s", F, list(scale_shape))], ["y"],
                       dict(axis=axis, epsilon=1e-3), 23)
    three_way(model, feeds_of(model, np.random.default_rng(3)))


def test_rms_normalization_refuses_a_scale_that_does_not_broadcast():
    model = make_model("RMSNormalization", [("x", F, [2, 3, 8]), ("s", F, [3])], ["y"], {}, 23)
    with pytest.raises(OnnxImportError, match="does not broadcast to the normalized shape"):
        from_onnx(model)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_3d_partial_with_runtime_position_ids(interleaved):
    model = make_model("RotaryEmbedding", [("x", F, [2, 3, 24]), ("cos", F, [10, 2]), ("sin", F, [10, 2]),
                                           ("pos", I64, [2, 3])], ["y"],
                       dict(num_heads=3, rotary_embedding_dim=4, interleaved=interleaved), 23)
    three_way(model, feeds_of(model, np.random.default_rng(4), ints={"pos": [[0, 1, 2], [7, 3, 9]]}))


def test_rotary_refuses_an_odd_rotary_dim():
    model = make_model("RotaryEmbedding", [("x", F, [1, 2, 3, 8]), ("cos", F, [1, 3, 2]), ("sin", F, [1, 3, 2])],
                       ["y"], dict(rotary_embedding_dim=5), 23)
    with pytest.raises(OnnxImportError, match="rotary_embedding_dim=5 must be even"):
        from_onnx(model)


def test_swish_and_swiglu_with_alpha():
    three_way(m := make_model("Swish", [("x", F, [3, 7])], ["y"], dict(alpha=0.7), 24),
              feeds_of(m, np.random.default_rng(5)))
    three_way(m := make_model("SwiGLU", [("a", F, [3, 7]), ("b", F, [3, 7])], ["y"], dict(alpha=1.5), 28),
              feeds_of(m, np.random.default_rng(6)))
    with pytest.raises(OnnxImportError, match="one shape and float dtype"):
        from_onnx(make_model("SwiGLU", [("a", F, [3, 7]), ("b", F, [1, 7])], ["y"], {}, 28))


@pytest.mark.parametrize("activation, with_state", [("none", True), ("silu", False)])
def test_causal_conv_with_state(activation, with_state):
    inputs = [("x", F, [2, 3, 5]), ("w", F, [3, 1, 3]), ("b", F, [3])] + ([("s", F, [2, 3, 2])] if with_state else [])
    model = make_model("CausalConvWithState", inputs, ["y", "state"], dict(activation=activation), 27)
    three_way(model, feeds_of(model, np.random.default_rng(7)))

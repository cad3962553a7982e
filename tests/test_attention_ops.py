"""Attention, RMSNormalization, RotaryEmbedding, Swish and SwiGLU (frontends/onnx/ops/attention.py) in the forms
onnx's conformance cases miss: combinations (3-D GQA with a past cache, a short float mask and is_causal;
a sliding window over a per-batch external cache; interleaved partial rotary on 3-D input with run-time
position ids), negative axes, broadcast scales; and bad nodes refused with a clear error naming the problem.

Three ways: compiled vs the numpy interpreter vs onnx's reference implementation (onnxruntime lacks these opsets).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from frontends import OnnxImportError, from_onnx
from harness import assert_close_where_finite, node_model, random_feeds, run_reference, three_way

F, I64, B = np.float32, np.int64, np.bool_


def check(model, seed, ints=None):
    """harness.three_way on random feeds (integer inputs: the values ints[name]) against onnx's reference,
    non-finite values where it has them."""
    three_way(model, random_feeds(model, seed, ints=ints), close=assert_close_where_finite, reference=run_reference)


def test_attention_3d_gqa_with_past_short_float_mask_and_causal():
    # 4 query heads over 2 kv heads, 3 new tokens after 2 cached ones; the mask covers 4 of the 5 keys
    model = node_model("Attention", [("q", F, [2, 3, 16]), ("k", F, [2, 3, 8]), ("v", F, [2, 3, 12]),
                                     ("mask", F, [3, 4]), ("pk", F, [2, 2, 2, 4]), ("pv", F, [2, 2, 2, 6])],
                       ["y", "present_k", "present_v", "qk"],
                       dict(q_num_heads=4, kv_num_heads=2, is_causal=1, qk_matmul_output_mode=2, scale=0.3),
                       domain="", opset=23)
    check(model, 0)


@pytest.mark.parametrize("mode", [0, 1, 3])
def test_attention_4d_window_over_external_cache_with_softcap(mode):
    model = node_model("Attention", [("q", F, [2, 2, 3, 4]), ("k", F, [2, 1, 6, 4]), ("v", F, [2, 1, 6, 5]),
                                     ("mask", B, [2, 1, 3, 6]), None, None, ("n", I64, [2])],
                       ["y", "", "", "qk"],
                       dict(left_window_size=2, right_window_size=1, is_causal=1, softcap=2.0,
                            qk_matmul_output_mode=mode), domain="", opset=25)
    # batch 1: 2 valid keys for 3 queries, a negative offset: its first query row attends nothing (zeros)
    check(model, 1, ints={"n": [5, 2]})


def test_attention_softmax_precision_double():
    model = node_model("Attention", [("q", F, [1, 2, 3, 4]), ("k", F, [1, 2, 5, 4]), ("v", F, [1, 2, 5, 4])],
                       ["y", "", "", "qk"], dict(softmax_precision=TensorProto.DOUBLE, qk_matmul_output_mode=3),
                       domain="", opset=24)
    check(model, 2)


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
    model = node_model("Attention", inputs, ["y"], attrs, domain="", opset=23)
    with pytest.raises(OnnxImportError, match=message) as info:
        from_onnx(model)
    assert "(Attention)" in str(info.value)


@pytest.mark.parametrize("shape, scale_shape, axis", [((2, 3, 8), (8,), -1), ((2, 3, 4, 5), (1, 5), -2),
                                                      ((4, 6), (4, 6), 0)])
def test_rms_normalization(shape, scale_shape, axis):
    model = node_model("RMSNormalization", [("x", F, list(shape)), ("s", F, list(scale_shape))], ["y"],
                       dict(axis=axis, epsilon=1e-3), domain="", opset=23)
    check(model, 3)


def test_rms_normalization_refuses_a_scale_that_does_not_broadcast():
    model = node_model("RMSNormalization", [("x", F, [2, 3, 8]), ("s", F, [3])], ["y"], {}, domain="", opset=23)
    with pytest.raises(OnnxImportError, match="does not broadcast to the normalized shape"):
        from_onnx(model)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_3d_partial_with_runtime_position_ids(interleaved):
    model = node_model("RotaryEmbedding", [("x", F, [2, 3, 24]), ("cos", F, [10, 2]), ("sin", F, [10, 2]),
                                           ("pos", I64, [2, 3])], ["y"],
                       dict(num_heads=3, rotary_embedding_dim=4, interleaved=interleaved), domain="", opset=23)
    check(model, 4, ints={"pos": [[0, 1, 2], [7, 3, 9]]})


def test_rotary_refuses_an_odd_rotary_dim():
    model = node_model("RotaryEmbedding", [("x", F, [1, 2, 3, 8]), ("cos", F, [1, 3, 2]), ("sin", F, [1, 3, 2])],
                       ["y"], dict(rotary_embedding_dim=5), domain="", opset=23)
    with pytest.raises(OnnxImportError, match="rotary_embedding_dim=5 must be even"):
        from_onnx(model)


def test_swish_and_swiglu_with_alpha():
    check(node_model("Swish", [("x", F, [3, 7])], ["y"], dict(alpha=0.7), domain="", opset=24), 5)
    check(node_model("SwiGLU", [("a", F, [3, 7]), ("b", F, [3, 7])], ["y"], dict(alpha=1.5), domain="", opset=28), 6)
    with pytest.raises(OnnxImportError, match="one shape and float dtype"):
        from_onnx(node_model("SwiGLU", [("a", F, [3, 7]), ("b", F, [1, 7])], ["y"], {}, domain="", opset=28))


@pytest.mark.parametrize("activation, with_state", [("none", True), ("silu", False)])
def test_causal_conv_with_state(activation, with_state):
    inputs = [("x", F, [2, 3, 5]), ("w", F, [3, 1, 3]), ("b", F, [3])] + ([("s", F, [2, 3, 2])] if with_state else [])
    model = node_model("CausalConvWithState", inputs, ["y", "state"], dict(activation=activation), domain="", opset=27)
    check(model, 7)

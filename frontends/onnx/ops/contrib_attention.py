"""Converters of onnxruntime's contrib attention ops (domain com.microsoft): Attention (the fused QKV projection
its transformer optimizer writes for BERT and GPT-2 style models) and MultiHeadAttention (Q, K, V projected
apart), as batch matmuls, an additive mask and a softmax.

onnxruntime's CPU kernels mask additively: a masked key adds `mask_filter_value` (default -10000, not -inf) to the
scores, and `unidirectional` adds it again above the causal diagonal (shifted by the past length). A row whose
keys are all masked thus gets uniform weights, as onnxruntime's does. The mask forms (its AttentionMaskType): 1-D
(batch) key lengths (keys at or after the length are masked), 1-D (2 * batch) ends then starts (left padding too),
2-D (batch, total) and 3-D (batch, sequence, total) raw masks (0 = masked), 2-D (batch or 1, 1) a dummy (no mask).
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, const

from ..builders import binary, flag, fold, reshape, shape_of, transpose
from ..registry import converter
from ..values import ConversionError
from ..versions.contrib import CONTRIB
from .nn import matmul
from .contrib import same_dtype

MASK_FILTER_VALUE = -10000.0


def _heads(x: Expr, heads: int, what: str) -> Expr:
    """(B, S, heads * h) -> (B, heads, S, h)."""
    b, s, hidden = shape_of(x)
    if hidden % heads:
        raise ConversionError(f"{what}: hidden size {hidden} is not a multiple of num_heads {heads}")
    return transpose(reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _merge_heads(x: Expr) -> Expr:
    """(B, N, S, h) -> (B, S, N * h)."""
    b, n, s, h = shape_of(x)
    return reshape(transpose(x, (0, 2, 1, 3)), (b, s, n * h))


def _concat_past(past: Expr | None, x: Expr, what: str) -> Expr:
    if past is None:
        return x
    b, n, _, h = shape_of(x)
    if len(shape_of(past)) != 4 or shape_of(past)[:2] != (b, n) or shape_of(past)[3] != h:
        raise ConversionError(f"{what} must be (batch {b}, heads {n}, past length, head size {h}), got shape "
                              f"{shape_of(past)}")
    return fold("concatenate", past, x, axis=2)


def _positions(n: int) -> Constant:
    return Constant(np.arange(n, dtype=np.int32))


def _mask_bias(mask: Expr | None, batch: int, q_len: int, total: int, past: int, causal: bool, fill: float,
               dtype: str, what: str) -> Expr | None:
    """The additive mask of the scores, broadcastable to (B, 1, S, T), or None (see the module docstring)."""
    fill_c, zero = const(fill, dtype), const(0.0, dtype)
    bias = None
    if mask is not None:
        shape = shape_of(mask)
        if mask.type.dtype != "int32":
            raise ConversionError(f"{what} must be int32, got {mask.type.dtype}")
        keys = reshape(_positions(total), (1, total))
        if shape == (batch,) or shape == (2 * batch,):  # key lengths (right padding), then starts (left padding)
            ends = reshape(fold("strided_slice", mask, begin=(0,), end=(batch,), strides=(1,), axes=(0,)),
                            (batch, 1))
            masked = fold("greater_equal", keys, ends)
            if shape == (2 * batch,) and batch:
                starts = reshape(fold("strided_slice", mask, begin=(batch,), end=(2 * batch,), strides=(1,),
                                       axes=(0,)), (batch, 1))
                masked = fold("logical_or", masked, fold("less", keys, starts))
            bias = reshape(fold("where", masked, fill_c, zero), (batch, 1, 1, total))
        elif len(shape) == 2 and shape[1] == 1 and total != 1 and shape[0] in (1, batch):
            bias = None  # onnxruntime's dummy mask: no effect
        elif shape == (batch, total):
            bias = reshape(fold("where", fold("greater", mask, const(0, "int32")), zero, fill_c),
                            (batch, 1, 1, total))
        elif shape == (batch, q_len, total):
            if causal:  # onnxruntime 1.32 then applies the causal mask alone: refused rather than guessed
                raise ConversionError(f"{what}: a 3-D mask together with unidirectional=1 is not supported")
            bias = reshape(fold("where", fold("greater", mask, const(0, "int32")), zero, fill_c),
                            (batch, 1, q_len, total))
        else:
            raise ConversionError(f"{what} of shape {shape} is not supported: expected ({batch},), "
                                  f"({2 * batch},), ({batch}, {total}) or ({batch}, {q_len}, {total}) (batch, "
                                  f"sequence {q_len}, total sequence {total})")
    if causal:
        rows = reshape(_positions(q_len), (q_len, 1))
        future = fold("greater", reshape(_positions(total), (1, total)), binary("add", rows, const(past, "int32")))
        upper = reshape(fold("where", future, fill_c, zero), (1, 1, q_len, total))
        bias = upper if bias is None else binary("add", bias, upper)
    return bias


def _attention_bias(bias: Expr | None, batch: int, heads: int, q_len: int, total: int, dtype: str) -> Expr | None:
    if bias is None:
        return None
    shape = shape_of(bias)
    if len(shape) != 4 or shape[0] not in (1, batch) or shape[1] not in (1, heads) or shape[2:] != (q_len, total):
        raise ConversionError(f"attention_bias must be (batch {batch} or 1, heads {heads} or 1, {q_len}, {total}), "
                              f"got shape {shape}")
    if bias.type.dtype != dtype:
        raise ConversionError(f"attention_bias must be {dtype}, got {bias.type.dtype}")
    return bias


def _attend(q: Expr, k: Expr, v: Expr, scale: float | None, biases: list[Expr | None]) -> Expr:
    """softmax(q k^T * scale + biases) v over (B, N, S, h) operands -> (B, N, S, hv)."""
    head = shape_of(q)[-1]
    scale = 1.0 / math.sqrt(head) if scale is None else float(scale)
    dtype = q.type.dtype
    scores = binary("multiply", matmul(q, transpose(k, (0, 1, 3, 2))), const(scale, dtype))
    for b in biases:
        if b is not None:
            scores = binary("add", scores, b)
    return matmul(fold("nn.softmax", scores, axis=-1), v)


def _columns(x: Expr, begin: int, end: int) -> Expr:
    return fold("strided_slice", x, begin=(begin,), end=(end,), strides=(1,), axes=(len(shape_of(x)) - 1,))


@converter("Attention", domain=CONTRIB)
def attention(x, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None, *,
              num_heads, qkv_hidden_sizes=None, unidirectional=0, scale=None, mask_filter_value=MASK_FILTER_VALUE,
              do_rotary=0, past_present_share_buffer=0, rotary_embedding_dim=0):
    """Outputs (output, present): Q, K, V = x @ weights (+ bias) split by qkv_hidden_sizes; K and V follow the past
    state (2, B, N, P, h); present = (2, B, N, P + S, h)."""
    if do_rotary:
        raise ConversionError("do_rotary=1 is not supported")
    if past_present_share_buffer or past_sequence_length is not None:
        raise ConversionError("past_present_share_buffer (and past_sequence_length) is not supported")
    same_dtype({"input": x, "weights": weights, "bias": bias, "past": past})
    if len(shape_of(x)) != 3 or len(shape_of(weights)) != 2 or shape_of(weights)[0] != shape_of(x)[2]:
        raise ConversionError(f"input must be 3-D (B, S, D) and weights 2-D (D, hidden), got {shape_of(x)} and "
                              f"{shape_of(weights)}")
    total_hidden = shape_of(weights)[1]
    sizes = tuple(qkv_hidden_sizes) if qkv_hidden_sizes is not None else (total_hidden // 3,) * 3
    if len(sizes) != 3 or sum(sizes) != total_hidden or sizes[0] != sizes[1] or min(sizes) <= 0 or \
            any(s % num_heads for s in sizes) or num_heads <= 0:
        raise ConversionError(f"qkv_hidden_sizes {sizes} must be 3 positive multiples of num_heads {num_heads}, "
                              f"Q's equal to K's, summing to the weights' {total_hidden} columns")
    if bias is not None and shape_of(bias) != (total_hidden,):
        raise ConversionError(f"bias must be 1-D of {total_hidden} elements, got {shape_of(bias)}")
    bounds = (0, sizes[0], sizes[0] + sizes[1], total_hidden)
    parts = []
    for i in range(3):
        y = matmul(x, _columns(weights, bounds[i], bounds[i + 1]))
        if bias is not None:
            y = binary("add", y, _columns(bias, bounds[i], bounds[i + 1]))
        parts.append(y)
    return attention_of_projections(parts, mask_index, past, attention_bias, num_heads=num_heads,
                                    unidirectional=unidirectional, scale=scale, mask_filter_value=mask_filter_value)


def attention_of_projections(parts, mask_index, past, attention_bias, *, num_heads, unidirectional, scale,
                             mask_filter_value):
    """Attention's outputs (output, present) from its projections [Q, K, V] (B, S, hidden each); shared with
    QAttention (contrib_qmatmul.py)."""
    q, k, v = (_heads(y, num_heads, "Attention") for y in parts)
    batch, seq = shape_of(parts[0])[:2]
    dtype = parts[0].type.dtype
    past_len = 0
    if past is not None:
        if shape_of(parts[1])[2] != shape_of(parts[2])[2]:
            raise ConversionError("with a past state Q, K and V must have one hidden size")
        if len(shape_of(past)) != 5 or shape_of(past)[0] != 2:
            raise ConversionError(f"past must be (2, B, N, P, h), got shape {shape_of(past)}")
        past_len = shape_of(past)[3]
        k = _concat_past(reshape(_index0(past, 0), shape_of(past)[1:]), k, "past")
        v = _concat_past(reshape(_index0(past, 1), shape_of(past)[1:]), v, "past")
    total = past_len + seq
    masks = [_mask_bias(mask_index, batch, seq, total, past_len, flag(unidirectional, "unidirectional"),
                        float(mask_filter_value), dtype, "mask_index"),
             _attention_bias(attention_bias, batch, num_heads, seq, total, dtype)]
    context = _merge_heads(_attend(q, k, v, scale, masks))
    if shape_of(k) != shape_of(v):  # present stacks K and V: only when their head sizes agree (it is then unused)
        return context
    return context, fold("concatenate", reshape(k, (1,) + shape_of(k)), reshape(v, (1,) + shape_of(v)), axis=0)


def _index0(x: Expr, i: int) -> Expr:
    return fold("strided_slice", x, begin=(i,), end=(i + 1,), strides=(1,), axes=(0,))


def _mha_kv(x: Expr, bias_part: Expr | None, batch: int, heads: int, what: str) -> Expr:
    """A key or value input: (B, L, D) projected (+ its part of the bias) and split into heads, or (B, N, L, h)
    already in heads (no bias: onnxruntime's cross-attention cache form)."""
    shape = shape_of(x)
    if len(shape) == 3 and shape[0] == batch:
        return _heads(x if bias_part is None else binary("add", x, bias_part), heads, what)
    if len(shape) == 4 and shape[:2] == (batch, heads):
        return x
    raise ConversionError(f"{what} of shape {shape} is not supported: expected ({batch}, L, D) or ({batch}, "
                          f"{heads}, L, h) (packed QKV/KV forms are not supported)")


@converter("MultiHeadAttention", domain=CONTRIB)
def multi_head_attention(query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
                         past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None, *,
                         num_heads, unidirectional=0, scale=None, mask_filter_value=MASK_FILTER_VALUE):
    """Outputs (output, present_key, present_value): Q from query (+ bias), K and V from key and value (+ bias),
    after past_key/past_value (B, N, P, h); present = the K and V attended."""
    if past_sequence_length is not None or cache_indirection is not None:
        raise ConversionError("past_sequence_length and cache_indirection (buffer sharing, beam search) are not "
                              "supported")
    if key is None or value is None:
        raise ConversionError("packed QKV (no key and value inputs) is not supported: give query, key and value")
    if (past_key is None) != (past_value is None):
        raise ConversionError("past_key and past_value must be given together")
    dtype = same_dtype({"query": query, "key": key, "value": value, "bias": bias, "past_key": past_key,
                         "past_value": past_value})
    if len(shape_of(query)) != 3:
        raise ConversionError(f"query must be 3-D (B, S, D), got shape {shape_of(query)} (packed QKV is not "
                              f"supported)")
    batch, seq, hidden = shape_of(query)
    if num_heads <= 0 or hidden % num_heads:
        raise ConversionError(f"query's hidden size {hidden} is not a multiple of num_heads {num_heads}")
    bq = bk = bv = None
    if bias is not None:
        v_hidden = shape_of(value)[-1] * (num_heads if len(shape_of(value)) == 4 else 1)
        if shape_of(bias) != (2 * hidden + v_hidden,):
            raise ConversionError(f"bias must be 1-D of {2 * hidden + v_hidden} elements (Q, K, V hidden sizes), "
                                  f"got {shape_of(bias)}")
        bq, bk, bv = (_columns(bias, a, b) for a, b in ((0, hidden), (hidden, 2 * hidden),
                                                          (2 * hidden, 2 * hidden + v_hidden)))
    q = _heads(query if bq is None else binary("add", query, bq), num_heads, "query")
    k = _mha_kv(key, bk, batch, num_heads, "key")
    v = _mha_kv(value, bv, batch, num_heads, "value")
    if shape_of(k)[3] != shape_of(q)[3] or shape_of(k)[2] != shape_of(v)[2]:
        raise ConversionError(f"key {shape_of(key)} and value {shape_of(value)} do not fit query {shape_of(query)}")
    past_len = 0 if past_key is None else shape_of(past_key)[2]
    k = _concat_past(past_key, k, "past_key")
    v = _concat_past(past_value, v, "past_value")
    total = shape_of(k)[2]
    masks = [_mask_bias(key_padding_mask, batch, seq, total, past_len, flag(unidirectional, "unidirectional"),
                        float(mask_filter_value), dtype, "key_padding_mask"),
             _attention_bias(attention_bias, batch, num_heads, seq, total, dtype)]
    return _merge_heads(_attend(q, k, v, scale, masks)), k, v

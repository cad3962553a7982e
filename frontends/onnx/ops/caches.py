"""Converters of the ops that carry state between decoding steps of a language model: LinearAttention (27: a
recurrent state of key-value outer products) and TensorScatter (24: writing a step's keys or values into a KV cache).

Compositions of existing relayish ops, following onnx's reference implementations (onnx/reference/ops/
op_linear_attention.py, op_tensor_scatter.py), which generated the conformance cases.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Expr, const

from ..builders import astype, fold, normalize_axis, reshape, shape_of, transpose
from ..registry import converter
from ..values import ConversionError
from .attention import grouped_matmul, to_heads

MAX_STEPS = 1024  # time steps LinearAttention is unrolled to (each adds a few ops to the graph)
_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


# ---- LinearAttention ----

def _per_step(x: Expr, heads: int, width: int, what: str) -> Expr:
    """decay or beta, [B, T, heads * width] -> [B, heads, T, width] in float32."""
    b, t, last = shape_of(x)
    if last != heads * width:
        raise ConversionError(f"input {what}: last dim {last} must be {heads * width}")
    return astype(transpose(reshape(x, (b, t, heads, width)), (0, 2, 1, 3)), "float32")


def _step(x: Expr, i: int) -> Expr:
    """x [B, H, T, D] at time step i: [B, H, 1, D]."""
    return fold("strided_slice", x, begin=(i,), end=(i + 1,), strides=(1,), axes=(2,))


def _mul(a: Expr, b: Expr) -> Expr:
    return fold("multiply", a, b)


@converter("LinearAttention", since=27)
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, kv_num_heads, q_num_heads,
                     chunk_size=64, scale=0.0, update_rule="gated_delta"):
    """The recurrence of the schema, unrolled over the (static) time steps, in float32 as the reference computes:
    S_t = exp(g_t) * S_{t-1} (gated) ; v_t <- beta_t * (v_t - S^T k_t) (delta) ; S_t += k_t (x) v_t ;
    o_t = scale * q_t^T S_t, query head h reading the state of kv head h // (q_num_heads / kv_num_heads).
    chunk_size is a tuning hint without effect on the result."""
    if update_rule not in _RULES:
        raise ConversionError(f"update_rule must be one of {sorted(_RULES)}, got {update_rule!r}")
    gated, delta = _RULES[update_rule]
    for given, needed, what in ((decay, gated, "decay"), (beta, delta, "beta")):
        if (given is not None) != needed:
            raise ConversionError(f"update_rule {update_rule!r} {'needs' if needed else 'takes no'} input {what}")
    if q_num_heads <= 0 or kv_num_heads <= 0 or q_num_heads % kv_num_heads:
        raise ConversionError(f"q_num_heads ({q_num_heads}) must be a positive multiple of kv_num_heads "
                              f"({kv_num_heads})")
    if any(len(shape_of(x)) != 3 for x in (query, key, value)):
        raise ConversionError(f"query, key and value must be 3-D [batch, steps, heads * size], got "
                              f"{shape_of(query)}, {shape_of(key)}, {shape_of(value)}")
    q, k, v = (astype(to_heads(x, h, what), "float32") for x, h, what in
               ((query, q_num_heads, "query"), (key, kv_num_heads, "key"), (value, kv_num_heads, "value")))
    b, _, steps, d_k = shape_of(q)
    d_v = shape_of(v)[3]
    if shape_of(k) != (b, kv_num_heads, steps, d_k) or shape_of(v)[:3] != (b, kv_num_heads, steps):
        raise ConversionError(f"query {shape_of(query)}, key {shape_of(key)} and value {shape_of(value)} do not agree "
                              f"in batch, steps and key size")
    if steps > MAX_STEPS:
        raise ConversionError(f"{steps} time steps: LinearAttention is unrolled to at most {MAX_STEPS}")
    state_shape = (b, kv_num_heads, d_k, d_v)
    if past_state is None:
        state_dtype, state = query.type.dtype, fold("broadcast_to", const(0.0, "float32"), shape=state_shape)
    elif shape_of(past_state) != state_shape:
        raise ConversionError(f"past_state has shape {shape_of(past_state)}, expected {state_shape}")
    else:
        state_dtype, state = past_state.type.dtype, astype(past_state, "float32")
    if gated:  # per kv head, or per key dim: a factor on the state's rows
        last = shape_of(decay)[-1] if len(shape_of(decay)) == 3 else 0
        width = last // kv_num_heads if last in (kv_num_heads, kv_num_heads * d_k) else 0
        if not width:
            raise ConversionError(f"decay must be [batch, steps, {kv_num_heads}] or [batch, steps, "
                                  f"{kv_num_heads * d_k}], got {shape_of(decay)}")
        factors = transpose(fold("exp", _per_step(decay, kv_num_heads, width, "decay")), (0, 1, 3, 2))
    if delta:
        heads = shape_of(beta)[2] if len(shape_of(beta)) == 3 else 0
        if heads not in (1, kv_num_heads):
            raise ConversionError(f"beta must be [batch, steps, {kv_num_heads}] or [batch, steps, 1], got "
                                  f"{shape_of(beta)}")
        rates = _per_step(beta, heads, 1, "beta")
    k_cols = transpose(k, (0, 1, 3, 2))  # [B, H, d_k, T]: k_t as a column
    scale = float(scale) if scale else 1.0 / math.sqrt(d_k)
    outputs = []
    for i in range(steps):
        k_t, v_t = _step(k, i), _step(v, i)
        if gated:
            state = _mul(state, fold("strided_slice", factors, begin=(i,), end=(i + 1,), strides=(1,), axes=(3,)))
        if delta:  # v_t <- beta_t * (v_t - S^T k_t)
            v_t = _mul(_step(rates, i), fold("subtract", v_t, fold("nn.matmul", k_t, state)))
        k_col = fold("strided_slice", k_cols, begin=(i,), end=(i + 1,), strides=(1,), axes=(3,))
        state = fold("add", state, _mul(k_col, v_t))
        outputs.append(grouped_matmul(_step(q, i), state))
    out = _mul(fold("concatenate", *outputs, axis=2) if len(outputs) > 1 else outputs[0], const(scale, "float32"))
    out = reshape(transpose(out, (0, 2, 1, 3)), (b, steps, q_num_heads * d_v))
    return astype(out, query.type.dtype), astype(state, state_dtype)


# ---- TensorScatter ----

@converter("TensorScatter", since=24)
def tensor_scatter(past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """present[..., c, ...] = update[..., c - w[b], ...] where 0 <= c - w[b] < sequence_length (c - w[b] taken
    modulo max_sequence_length in circular mode), else past[..., c, ...]: a gather of the update at each cache
    position, batch b's write index w[b] (0 if write_indices is omitted). A write the reference would make
    outside the cache (linear mode, w + sequence_length > max_sequence_length) is not made."""
    if mode not in ("linear", "circular"):
        raise ConversionError(f"mode must be 'linear' or 'circular', got {mode!r}")
    shape, ushape = shape_of(past_cache), shape_of(update)
    axis = normalize_axis(axis, len(shape))
    if axis == 0:
        raise ConversionError("axis must not be the batch axis 0")
    if len(ushape) != len(shape) or any(u != s for d, (u, s) in enumerate(zip(ushape, shape)) if d != axis) or \
            ushape[axis] > shape[axis] or update.type.dtype != past_cache.type.dtype:
        raise ConversionError(f"update {ushape} ({update.type.dtype}) does not fit past_cache {shape} "
                              f"({past_cache.type.dtype}) on axis {axis}")
    batch, length, steps = shape[0], shape[axis], ushape[axis]
    if write_indices is None:
        write_indices = const([0] * batch, "int64")
    if shape_of(write_indices) != (batch,) or write_indices.type.dtype != "int64":
        raise ConversionError(f"write_indices must be int64 of shape ({batch},), got {write_indices.type.dtype} "
                              f"{shape_of(write_indices)}")
    rank = len(shape)
    position = const(np.arange(length).reshape([length if d == axis else 1 for d in range(rank)]), "int64")
    offset = fold("subtract", position, reshape(write_indices, (batch,) + (1,) * (rank - 1)))
    if mode == "circular":
        offset = fold("mod", offset, const(length, "int64"), fmod=0)
    written = fold("logical_and", fold("greater_equal", offset, const(0, "int64")),
                   fold("less", offset, const(steps, "int64")))
    index = fold("broadcast_to", fold("where", written, offset, const(0, "int64")), shape=shape)
    return fold("where", written, fold("gather_elements", update, index, axis=axis), past_cache)

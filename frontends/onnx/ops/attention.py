"""Converters of the transformer ops of recent opsets: Attention (23-25), RMSNormalization, RotaryEmbedding (23),
Swish (24), SwiGLU (28), CausalConvWithState (27) and FlexAttention (ai.onnx.preview 1: subgraphs that modify the
scores and the probabilities, inlined), each a composition of existing relayish ops (batch matmul, softmax,
reductions, elementwise math, reshape/transpose/slice/concatenate).

Conventions: frontends/onnx/registry.py. The numerics follow onnx's reference implementations
(onnx/reference/ops/op_attention.py etc.), which generated the conformance cases; where the reference and the
schema's prose differ, a comment says which one is followed.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from relayish import Constant, Expr, const
from relayish.types import DTYPES, is_float, numpy_dtype

from ..builders import astype, binary, fold, normalize_axis, reshape, shape_of, slice_last_axis, transpose
from ..registry import converter
from ..values import ConversionError

NEG_INF = -math.inf


def float_dtype(attr: int, name: str) -> str:
    """An ONNX element-type attribute (stash_type, softmax_precision) -> a relayish float dtype."""
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(attr)).name
    except (KeyError, ValueError, TypeError) as e:
        raise ConversionError(f"attribute {name}={attr} is not an ONNX element type") from e
    if dtype not in DTYPES or not is_float(dtype):
        raise ConversionError(f"attribute {name}={attr} ({dtype}) is not a supported float type")
    return dtype


# ---- Attention: shapes ----

def to_heads(x: Expr, heads: int | None, what: str) -> Expr:
    """A 3-D [batch, seq, heads * head_size] input -> 4-D [batch, heads, seq, head_size]."""
    b, s, hidden = shape_of(x)
    if heads is None:
        raise ConversionError(f"a 3-D input {what} needs the attributes q_num_heads and kv_num_heads")
    if heads <= 0 or hidden % heads:
        raise ConversionError(f"input {what}: hidden size {hidden} is not a multiple of {heads} heads")
    return transpose(reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _heads_4d(q, k, v, q_num_heads, kv_num_heads):
    """Q, K, V as [batch, heads, seq, head_size], checked: same rank (3 or 4), same float dtype, K and V with the
    same heads, Q's heads a multiple of theirs (GQA/MQA)."""
    ranks = {len(shape_of(t)) for t in (q, k, v)}
    if len(ranks) != 1 or ranks.pop() not in (3, 4):
        raise ConversionError(f"Q, K and V must all be 3-D or all 4-D, got shapes {shape_of(q)}, {shape_of(k)}, "
                              f"{shape_of(v)}")
    dtypes = {t.type.dtype for t in (q, k, v)}
    if len(dtypes) != 1 or not is_float(q.type.dtype):
        raise ConversionError(f"Q, K and V must have one float dtype, got {sorted(dtypes)}")
    if len(shape_of(q)) == 3:
        q, k, v = to_heads(q, q_num_heads, "Q"), to_heads(k, kv_num_heads, "K"), to_heads(v, kv_num_heads, "V")
    for name, heads, t in (("q_num_heads", q_num_heads, q), ("kv_num_heads", kv_num_heads, k)):
        if heads is not None and heads != shape_of(t)[1]:
            raise ConversionError(f"{name}={heads} does not match the input's {shape_of(t)[1]} heads")
    (bq, hq, _, dq), (bk, hk, sk, dk), (bv, hv, sv, _) = shape_of(q), shape_of(k), shape_of(v)
    if not bq == bk == bv or dq != dk or hk != hv or sk != sv or hq % hk:
        raise ConversionError(f"incompatible Q {shape_of(q)}, K {shape_of(k)}, V {shape_of(v)} (as [batch, heads, "
                              f"seq, head_size]): batch, K/V heads and sequence, Q/K head size must agree and "
                              f"Q's heads be a multiple of K's")
    return q, k, v


def _with_past(x: Expr, past: Expr | None, what: str) -> Expr:
    """present = concat(past, x) on the sequence axis."""
    if past is None:
        return x
    ps, xs = shape_of(past), shape_of(x)
    if len(ps) != 4 or ps[:2] != xs[:2] or ps[3] != xs[3] or past.type.dtype != x.type.dtype:
        raise ConversionError(f"past_{what} {ps} ({past.type.dtype}) does not match the {what} {xs} "
                              f"({x.type.dtype}) as [batch, heads, past_seq, head_size]")
    return fold("concatenate", past, x, axis=2)


def grouped_matmul(a: Expr, b: Expr) -> Expr:
    """a [B, Hq, M, K] @ b [B, Hkv, K, N] -> [B, Hq, M, N], query head h using key head h // (Hq / Hkv) (the
    reference's interleaved repeat): a is viewed as [B, Hkv, (Hq / Hkv) * M, K], so K/V are never repeated."""
    bsz, hq, m, _ = shape_of(a)
    hkv, n = shape_of(b)[1], shape_of(b)[3]
    grouped = reshape(a, (bsz, hkv, hq // hkv * m, shape_of(a)[3]))
    return reshape(fold("nn.matmul", grouped, b), (bsz, hq, m, n))


# ---- Attention: the additive bias ----

def _bias_of_allowed(allowed: Expr, dtype: str) -> Expr:
    """A boolean 'may attend' tensor -> the additive bias 0 / -inf (a select, never 0 * inf)."""
    return fold("where", allowed, const(0.0, dtype), const(NEG_INF, dtype))


def _add(a: Expr | None, b: Expr | None) -> Expr | None:
    return b if a is None else a if b is None else binary("add", a, b)


def _mask_bias(mask: Expr, kv_len: int, dtype: str) -> Expr:
    """attn_mask (bool: True attends; float: added to the scores) -> an additive bias whose last axis is kv_len;
    a shorter mask is padded with 'does not attend' (as the reference)."""
    shape = shape_of(mask)
    if not 1 <= len(shape) <= 4 or shape[-1] > kv_len:
        raise ConversionError(f"attn_mask of shape {shape} does not fit a key sequence of {kv_len}")
    if mask.type.dtype == "bool":
        mask = _bias_of_allowed(mask, dtype)
    elif mask.type.dtype != dtype:
        raise ConversionError(f"a float attn_mask must have Q's dtype {dtype}, got {mask.type.dtype}")
    if shape[-1] < kv_len:
        pad = fold("broadcast_to", const(NEG_INF, dtype), shape=shape[:-1] + (kv_len - shape[-1],))
        mask = fold("concatenate", mask, pad, axis=len(shape) - 1)
    return mask


def _frontier_bias(q_len, kv_len, offset, lower, upper, dtype) -> Expr:
    """0 where offset + lower <= j - i <= offset + upper (a bound None: unbounded), else -inf, for query i and
    key j. offset is an int (one frontier: [q, kv]) or an int [batch] expression (one per batch:
    [batch, 1, q, kv])."""
    j_minus_i = np.arange(kv_len)[None, :] - np.arange(q_len)[:, None]
    if isinstance(offset, int):
        off, rel = const(offset, "int64"), Constant(j_minus_i.astype(np.int64))
    else:
        off = reshape(offset, (shape_of(offset)[0], 1, 1, 1))
        rel = Constant(j_minus_i.astype(offset.data.dtype if isinstance(offset, Constant) else
                                        np.dtype(offset.type.dtype)).reshape(1, 1, q_len, kv_len))
    allowed = None
    for bound, op in ((lower, "greater_equal"), (upper, "less_equal")):
        if bound is not None:
            term = fold(op, rel, binary("add", off, const(bound, off.type.dtype)))
            allowed = term if allowed is None else fold("logical_and", allowed, term)
    return _bias_of_allowed(allowed, dtype)


def _padding_bias(nonpad: Expr, batch: int, kv_len: int, dtype: str) -> Expr:
    """Keys j >= nonpad_kv_seqlen[b] are padding: -inf in [batch, 1, 1, kv]."""
    if shape_of(nonpad) != (batch,) or nonpad.type.dtype not in ("int32", "int64"):
        raise ConversionError(f"nonpad_kv_seqlen must be an int [batch={batch}] tensor, got {shape_of(nonpad)} "
                              f"{nonpad.type.dtype}")
    keys = Constant(np.arange(kv_len, dtype=nonpad.type.dtype).reshape(1, kv_len))
    allowed = fold("less", keys, reshape(nonpad, (batch, 1)))
    return reshape(_bias_of_allowed(allowed, dtype), (batch, 1, 1, kv_len))


def _attention_bias(q, k, attn_mask, nonpad, causal, window, past_len):
    """The sum of every masking term (attn_mask, causal and window frontiers, key padding), or None if there is
    none. The frontier's offset (keys before the query block) is past_len, or nonpad - q_len per batch."""
    (batch, _, q_len, _), kv_len, dtype = shape_of(q), shape_of(k)[2], q.type.dtype
    bias = None if attn_mask is None else _mask_bias(attn_mask, kv_len, dtype)
    left, right = window
    lower = -left if left >= 0 else None
    uppers = [u for u in (0 if causal else None, right if right >= 0 else None) if u is not None]
    if lower is not None or uppers:
        offset = past_len if nonpad is None else binary("subtract", nonpad, const(q_len, nonpad.type.dtype))
        bias = _add(bias, _frontier_bias(q_len, kv_len, offset, lower, min(uppers) if uppers else None, dtype))
    if nonpad is not None:
        bias = _add(bias, _padding_bias(nonpad, batch, kv_len, dtype))
    return bias


def _zero_masked_rows(probs: Expr, bias: Expr | None) -> Expr:
    """Rows whose bias is -inf everywhere attend nothing: their probabilities are 0, not softmax's NaN (decided
    on the bias, as the reference, not on the scores)."""
    if bias is None:
        return probs
    last = len(shape_of(bias)) - 1
    masked = fold("equal", fold("max", bias, axes=(last,), keepdims=True), const(NEG_INF, bias.type.dtype))
    if isinstance(masked, Constant) and not masked.data.any():
        return probs
    return fold("where", masked, const(0.0, probs.type.dtype), probs)


# ---- Attention ----

def _attention(q, k, v, attn_mask, past_key, past_value, nonpad, *, is_causal, kv_num_heads, q_num_heads,
               qk_matmul_output_mode, scale, softcap, softmax_precision, window=(-1, -1)):
    """Outputs (Y, present_key, present_value, qk_matmul_output) as onnx's reference computes them."""
    if (past_key is None) != (past_value is None):
        raise ConversionError("past_key and past_value must be given together")
    if nonpad is not None and past_key is not None:
        raise ConversionError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if qk_matmul_output_mode not in (0, 1, 2, 3):
        raise ConversionError(f"qk_matmul_output_mode must be 0, 1, 2 or 3, got {qk_matmul_output_mode}")
    if is_causal not in (0, 1):
        raise ConversionError(f"attribute is_causal must be 0 or 1, got {is_causal}")
    if any(w < -1 for w in window):
        raise ConversionError(f"left_window_size/right_window_size must be -1 or >= 0, got {window}")
    three_d = len(shape_of(q)) == 3
    q, k, v = _heads_4d(q, k, v, q_num_heads, kv_num_heads)
    dtype = q.type.dtype
    if dtype == "bfloat16":
        raise ConversionError("Attention on bfloat16 is not supported: relayish attends in float32 and rounds the "
                              "output once, which differs from ONNX's reference (every step rounded to bfloat16) by "
                              "one unit in the last place; cast Q, K and V to float32 or float16")
    past_len = 0 if past_key is None else shape_of(past_key)[2]
    present_key, present_value = _with_past(k, past_key, "key"), _with_past(v, past_value, "value")
    if attn_mask is not None and attn_mask.type.dtype not in ("bool", dtype):
        raise ConversionError(f"a float attn_mask must have Q's dtype {dtype}, got {attn_mask.type.dtype}")
    # 16-bit inputs are attended in float32 and Y rounded once (as onnxruntime does): rounding every intermediate
    # as the reference does would double the error, and the reference's own rounding cannot be matched bit for bit
    compute = "float32" if dtype in ("float16", "bfloat16") else dtype
    q, keys, values = astype(q, compute), astype(present_key, compute), astype(present_value, compute)
    if attn_mask is not None and attn_mask.type.dtype != "bool":
        attn_mask = astype(attn_mask, compute)
    root = const(math.sqrt(1.0 / math.sqrt(shape_of(q)[3]) if scale is None else scale), compute)
    key_t = transpose(binary("multiply", keys, root), (0, 1, 3, 2))
    scores = grouped_matmul(binary("multiply", q, root), key_t)
    if softcap > 0:  # before the mask, so that -inf stays -inf
        cap = const(softcap, compute)
        scores = binary("multiply", fold("tanh", binary("divide", scores, cap)), cap)
    bias = _attention_bias(q, keys, attn_mask, nonpad, is_causal, window, past_len)
    biased = _add(scores, bias)
    # mode 0 is "the output of qk matmul" in the schema; the reference returns it after softcap, as mode 1
    qk_out = biased if qk_matmul_output_mode == 2 else scores
    precision = compute if softmax_precision is None else float_dtype(softmax_precision, "softmax_precision")
    probs = _zero_masked_rows(fold("nn.softmax", astype(biased, precision), axis=3), bias)
    if qk_matmul_output_mode == 3:
        qk_out = probs
    y = astype(grouped_matmul(astype(probs, compute), values), dtype)
    if three_d:
        b, h, s, d = shape_of(y)
        y = reshape(transpose(y, (0, 2, 1, 3)), (b, s, h * d))
    return y, present_key, present_value, astype(qk_out, dtype)


@converter("Attention", since=23)
def attention_v23(q, k, v, attn_mask=None, past_key=None, past_value=None, *, is_causal=0, kv_num_heads=None,
                  q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None):
    return _attention(q, k, v, attn_mask, past_key, past_value, None, is_causal=is_causal,
                      kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                      qk_matmul_output_mode=qk_matmul_output_mode, scale=scale, softcap=softcap,
                      softmax_precision=softmax_precision)


@converter("Attention", since=24)
def attention_v24(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, is_causal=0,
                  kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
                  softmax_precision=None):
    return _attention(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, is_causal=is_causal,
                      kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                      qk_matmul_output_mode=qk_matmul_output_mode, scale=scale, softcap=softcap,
                      softmax_precision=softmax_precision)


@converter("Attention", since=25)
def attention_v25(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, is_causal=0,
                  kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
                  softmax_precision=None, left_window_size=-1, right_window_size=-1):
    if len(shape_of(q)) == 4 and (q_num_heads is not None or kv_num_heads is not None):
        raise ConversionError("q_num_heads and kv_num_heads must not be given for 4-D inputs (Attention-25)")
    return _attention(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, is_causal=is_causal,
                      kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                      qk_matmul_output_mode=qk_matmul_output_mode, scale=scale, softcap=softcap,
                      softmax_precision=softmax_precision, window=(left_window_size, right_window_size))


# ---- normalization and activations ----

def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """numpy broadcasting of shape to target leaves target unchanged."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape[::-1], target[::-1]))


@converter("RMSNormalization", since=23)
def rms_norm(x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """x / sqrt(mean(x^2 over the axes from `axis` on) + epsilon) * scale, computed in stash_type (float32 by
    default) and cast back to x's dtype."""
    if not is_float(x.type.dtype) or scale.type.dtype != x.type.dtype:
        raise ConversionError(f"X and scale must have one float dtype, got {x.type.dtype} and {scale.type.dtype}")
    ndim = len(shape_of(x))
    axis = normalize_axis(axis, ndim)
    normalized = shape_of(x)[axis:]
    if not _broadcasts_to(shape_of(scale), normalized):
        raise ConversionError(f"scale of shape {shape_of(scale)} does not broadcast to the normalized shape "
                              f"{normalized} (X {shape_of(x)}, axis {axis})")
    stash = float_dtype(stash_type, "stash_type")
    xs = astype(x, stash)
    mean_square = fold("mean", binary("multiply", xs, xs), axes=tuple(range(axis, ndim)), keepdims=True)
    inv_rms = fold("reciprocal", fold("sqrt", binary("add", mean_square, const(epsilon, stash))))
    return astype(binary("multiply", binary("multiply", xs, inv_rms), astype(scale, stash)), x.type.dtype)


def _swish(x: Expr, alpha: float) -> Expr:
    scaled = x if alpha == 1.0 else binary("multiply", x, const(alpha, x.type.dtype))
    return binary("multiply", x, fold("sigmoid", scaled))


@converter("Swish", since=24)
def swish(x, *, alpha=1.0):
    """x * sigmoid(alpha * x)."""
    if not is_float(x.type.dtype):
        raise ConversionError(f"Swish needs a float input, got {x.type.dtype}")
    return _swish(x, float(alpha))


@converter("SwiGLU", since=28)
def swiglu(a, b, *, alpha=1.0):
    """Swish(A, alpha) * B, A and B of one shape and dtype (no broadcasting, as the schema says)."""
    if shape_of(a) != shape_of(b) or a.type.dtype != b.type.dtype or not is_float(a.type.dtype):
        raise ConversionError(f"A and B must have one shape and float dtype, got {shape_of(a)} {a.type.dtype} and "
                              f"{shape_of(b)} {b.type.dtype}")
    return binary("multiply", _swish(a, float(alpha)), b)


# ---- RotaryEmbedding ----

def _rotary_cache(cache: Expr, position_ids: Expr | None, batch: int, seq: int, half: int, what: str) -> Expr:
    """cos_cache/sin_cache as [batch, seq, half]: gathered at position_ids, or given so."""
    if position_ids is not None:
        if len(shape_of(cache)) != 2 or shape_of(position_ids) != (batch, seq):
            raise ConversionError(f"with position_ids {shape_of(position_ids)}, {what} must be 2-D "
                                  f"[max_position, {half}] and position_ids [batch={batch}, seq={seq}], got "
                                  f"{shape_of(cache)}")
        cache = fold("take", cache, position_ids, axis=0)
    if shape_of(cache) != (batch, seq, half):
        raise ConversionError(f"{what} must be [batch={batch}, seq={seq}, rotary_embedding_dim / 2={half}], got "
                              f"{shape_of(cache)}")
    return cache


@converter("RotaryEmbedding", since=23)
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=None,
                     rotary_embedding_dim=0):
    """Rotates the first rotary_embedding_dim features of each head: pairs (x1, x2) = halves (or, interleaved,
    even/odd features) -> (cos x1 - sin x2, sin x1 + cos x2); the other features pass through. X is
    [batch, heads, seq, head_size] or [batch, seq, heads * head_size] (num_heads given); it is worked on in its
    own layout, the caches broadcast over the heads."""
    shape, dtype = shape_of(x), x.type.dtype
    if len(shape) == 4:
        batch, _, seq, head = shape
        xh = x
    elif len(shape) == 3:
        if not num_heads or shape[2] % num_heads:
            raise ConversionError(f"a 3-D X {shape} needs num_heads dividing its hidden size, got {num_heads}")
        batch, seq, head = shape[0], shape[1], shape[2] // num_heads
        xh = reshape(x, (batch, seq, num_heads, head))
    else:
        raise ConversionError(f"X must be 3-D or 4-D, got shape {shape}")
    rot = rotary_embedding_dim or head
    if rot > head or rot % 2:
        raise ConversionError(f"rotary_embedding_dim={rot} must be even and at most the head size {head}")
    half = rot // 2
    cache_shape = (batch, 1, seq, half) if len(shape) == 4 else (batch, seq, 1, half)
    cos, sin = (reshape(astype(_rotary_cache(c, position_ids, batch, seq, half, name), dtype), cache_shape)
                for c, name in ((cos_cache, "cos_cache"), (sin_cache, "sin_cache")))
    if interleaved:
        x1, x2 = slice_last_axis(xh, 0, rot, 2), slice_last_axis(xh, 1, rot, 2)
    else:
        x1, x2 = slice_last_axis(xh, 0, half), slice_last_axis(xh, half, rot)
    real = binary("subtract", binary("multiply", cos, x1), binary("multiply", sin, x2))
    imag = binary("add", binary("multiply", sin, x1), binary("multiply", cos, x2))
    nd = len(shape_of(xh))
    if interleaved:
        pairs = fold("concatenate", reshape(real, shape_of(real) + (1,)), reshape(imag, shape_of(imag) + (1,)),
                     axis=nd)
        rotated = reshape(pairs, shape_of(real)[:-1] + (rot,))
    else:
        rotated = fold("concatenate", real, imag, axis=nd - 1)
    if rot < head:
        rotated = fold("concatenate", rotated, slice_last_axis(xh, rot, head), axis=nd - 1)
    return reshape(rotated, shape)


# ---- CausalConvWithState ----

@converter("CausalConvWithState", since=27)
def causal_conv_with_state(x, weight, bias=None, past_state=None, *, activation="none"):
    """A causal depthwise 1-D convolution over [batch, channels, time]: the k - 1 previous positions (past_state,
    or zeros) are prepended; outputs (the convolution, optionally SiLU'd; present_state = the last k - 1
    positions). Built as a depthwise conv2d over a height of 1."""
    if activation not in ("none", "silu", "swish"):
        raise ConversionError(f"activation must be 'none', 'silu' or 'swish', got {activation!r}")
    if len(shape_of(x)) != 3 or len(shape_of(weight)) != 3:
        raise ConversionError(f"input and weight must be 3-D, got {shape_of(x)} and {shape_of(weight)}")
    (batch, channels, length), k, dtype = shape_of(x), shape_of(weight)[2], x.type.dtype
    if shape_of(weight)[:2] != (channels, 1) or weight.type.dtype != dtype:
        raise ConversionError(f"weight must be [channels={channels}, 1, k] of {dtype}, got {shape_of(weight)} "
                              f"{weight.type.dtype}")
    if past_state is None:
        past_state = fold("broadcast_to", const(0.0, dtype), shape=(batch, channels, k - 1)) if k > 1 else None
    elif shape_of(past_state) != (batch, channels, k - 1) or past_state.type.dtype != dtype:
        raise ConversionError(f"past_state must be [batch={batch}, channels={channels}, k - 1={k - 1}] of {dtype}, "
                              f"got {shape_of(past_state)} {past_state.type.dtype}")
    padded = x if past_state is None else fold("concatenate", past_state, x, axis=2)
    # 16-bit inputs: the convolution and its bias in float32, rounded once (as the reference)
    compute = "float32" if dtype in ("float16", "bfloat16") else dtype
    y = fold("nn.conv2d", astype(reshape(padded, (batch, channels, 1, length + k - 1)), compute),
             astype(reshape(weight, (channels, 1, 1, k)), compute), groups=channels)
    y = reshape(y, (batch, channels, length))
    if bias is not None:
        if shape_of(bias) != (channels,) or bias.type.dtype != dtype:
            raise ConversionError(f"bias must be [channels={channels}] of {dtype}, got {shape_of(bias)}")
        y = binary("add", y, astype(reshape(bias, (channels, 1)), compute))
    y = astype(y, dtype)
    if activation != "none":  # 16-bit outputs: the SiLU in float32 from the rounded convolution (as the reference)
        y = astype(_swish(astype(y, "float32" if dtype in ("float16", "bfloat16") else dtype), 1.0), dtype)
    if k == 1:
        return (y,)  # present_state would be empty: zero-size tensors are not supported (refused if used)
    return y, slice_last_axis(padded, length, length + k - 1)


# ---- FlexAttention (ai.onnx.preview 1) ----

# Scaled dot-product attention with user subgraphs that modify the scores (score_mod) and the probabilities
# (prob_mod), inlined in the node's scope. As onnx's reference (onnx/reference/ops/aionnx_preview/
# op_flex_attention.py), which generated the conformance cases: Q and K are each scaled by sqrt(scale) in the
# inputs' dtype before their product, the scores are then cast to the softmax precision (float32, float64 for
# float64 inputs, or softmax_precision), modified, softmaxed, modified, multiplied by V in that precision and cast
# back to V's dtype.

def _modified(scope, graph, value: Expr, what: str) -> Expr:
    """value through the one-input, one-output subgraph `graph` (converted in the node's scope)."""
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise ConversionError(f"{what} must have one input and one output, got {len(graph.input)} and "
                              f"{len(graph.output)}")
    out, = scope.convert(graph, [value], what)
    if shape_of(out) != shape_of(value) or out.type.dtype != value.type.dtype:
        raise ConversionError(f"{what} must keep the shape {shape_of(value)} and dtype {value.type.dtype} of its "
                              f"input, got {shape_of(out)} {out.type.dtype}")
    return out


@converter("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(q, k, v, *, scale=None, score_mod=None, prob_mod=None, softmax_precision=None, _scope=None):
    shapes = [shape_of(t) for t in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise ConversionError(f"Q, K and V must be 4-D [batch, heads, seq, size], got {shapes}")
    (b, hq, _, e), (bk, hkv, s, ek), (bv, hv, sv, _) = shapes
    if bk != b or bv != b or hv != hkv or sv != s or ek != e or hkv < 1 or hq % hkv:
        raise ConversionError(f"Q {shapes[0]}, K {shapes[1]} and V {shapes[2]} do not agree (batch, K/V heads and "
                              f"length, head size; Q's heads a multiple of K's)")
    dtype = q.type.dtype
    if k.type.dtype != dtype or v.type.dtype != dtype or dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise ConversionError(f"Q, K and V must have one float dtype, got {q.type.dtype}, {k.type.dtype}, "
                              f"{v.type.dtype}")
    compute = float_dtype(softmax_precision, "softmax_precision") if softmax_precision is not None else \
        ("float64" if dtype == "float64" else "float32")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    root = Constant(np.asarray(np.sqrt(np.float32(scale)), numpy_dtype(dtype)))
    scores = grouped_matmul(fold("multiply", q, root), transpose(fold("multiply", k, root), (0, 1, 3, 2)))
    scores = astype(scores, compute)
    if score_mod is not None:
        scores = _modified(_scope, score_mod, scores, "score_mod")
    probs = fold("nn.softmax", scores, axis=3)
    if prob_mod is not None:
        probs = _modified(_scope, prob_mod, probs, "prob_mod")
    return astype(grouped_matmul(probs, astype(v, compute)), dtype)

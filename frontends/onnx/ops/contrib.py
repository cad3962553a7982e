"""Converters of onnxruntime's contrib ops (domain com.microsoft) that its transformer optimizer
(onnxruntime.transformers.optimizer) and its graph optimizer (a session's optimized_model_filepath) write into
float models: the GELU family (Gelu, BiasGelu, FastGelu, QuickGelu, BiasSplitGelu), FusedMatMul/TransposeMatMul,
BiasAdd, BiasSoftmax, the fused normalizations (SkipLayerNormalization, SkipSimplifiedLayerNormalization,
EmbedLayerNormalization, and the ai.onnx-domain LayerNormalization/SimplifiedLayerNormalization that onnxruntime
defines below opset 17), Attention and MultiHeadAttention, FusedConv and FusedGemm. Each is a composition of
existing relayish ops. The quantized contrib ops: contrib_quant.py.

Conventions: frontends/onnx/registry.py (`@converter(..., domain=CONTRIB)`); the schemas reviewed against each
converter: frontends/onnx/versions/contrib.py. The numerics follow onnxruntime's CPU kernels (its contrib op docs
and sources); where a kernel differs from the schema's prose, a comment says which one is followed.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, const
from relayish.types import is_float

from ..builders import astype, binary, flag, fold, normalize_axis, reshape, shape_of, slice_last_axis, transpose
from ..registry import converter
from ..values import ConversionError
from ..versions.contrib import CONTRIB, ORT_ONNX_DOMAIN
from .nn import gemm
from .conv import conv as onnx_conv

FLOATS = ("float32", "float64", "float16", "bfloat16")


def _float_input(x: Expr, name: str) -> None:
    if x.type.dtype not in FLOATS:
        raise ConversionError(f"input {name} must be a float tensor, got {x.type.dtype}")


def same_dtype(named: dict[str, Expr | None]) -> str:
    given = {n: v for n, v in named.items() if v is not None}
    dtypes = {v.type.dtype for v in given.values()}
    if len(dtypes) != 1:
        raise ConversionError("inputs " + ", ".join(given) + " must have one float dtype, got "
                              + ", ".join(f"{n}: {v.type.dtype}" for n, v in given.items()))
    dtype = dtypes.pop()
    if dtype not in FLOATS:
        raise ConversionError(f"inputs must be float tensors, got {dtype}")
    return dtype


def _vector(v: Expr, size: int, name: str) -> None:
    if shape_of(v) != (size,):
        raise ConversionError(f"input {name} must be 1-D of {size} elements, got shape {shape_of(v)}")


# ---- the GELU family ----

def _gelu_erf(x: Expr) -> Expr:
    return fold("nn.gelu", x, approximate="none")


def _gelu_tanh(x: Expr) -> Expr:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): FastGelu's 0.797885 x + 0.035677 x^3, the same polynomial."""
    return fold("nn.gelu", x, approximate="tanh")


def _add_bias(x: Expr, bias: Expr | None, name: str = "bias") -> Expr:
    """x + bias over the last axis (a 1-D bias of x's last dim, as onnxruntime's kernels require)."""
    if bias is None:
        return x
    same_dtype({"X": x, name: bias})
    _vector(bias, shape_of(x)[-1], name)
    return binary("add", x, bias)


@converter("Gelu", domain=CONTRIB)
def gelu(x):
    _float_input(x, "X")
    return _gelu_erf(x)


@converter("BiasGelu", domain=CONTRIB)
def bias_gelu(a, b):
    return _gelu_erf(_add_bias(a, b, "B"))


@converter("FastGelu", domain=CONTRIB)
def fast_gelu(x, bias=None):
    _float_input(x, "X")
    return _gelu_tanh(_add_bias(x, bias))


@converter("QuickGelu", domain=CONTRIB)
def quick_gelu(x, *, alpha=1.702):
    """x * sigmoid(alpha * x)."""
    _float_input(x, "X")
    return binary("multiply", x, fold("sigmoid", binary("multiply", x, const(alpha, x.type.dtype))))


@converter("BiasSplitGelu", domain=CONTRIB)
def bias_split_gelu(x, bias):
    """(x + bias) split in halves [left, right] on the last axis -> left * gelu(right) (exact erf GELU)."""
    if len(shape_of(x)) != 3 or shape_of(x)[-1] % 2:
        raise ConversionError(f"input X must be 3-D (N, S, D) with an even D, got shape {shape_of(x)}")
    y = _add_bias(x, bias)
    half = shape_of(x)[-1] // 2
    return binary("multiply", slice_last_axis(y, 0, half), _gelu_erf(slice_last_axis(y, half, 2 * half)))


@converter("BiasAdd", domain=CONTRIB)
def bias_add(x, bias, skip):
    """x + bias + skip, with x and skip (N, S, C) and bias (C)."""
    if len(shape_of(x)) != 3 or shape_of(skip) != shape_of(x):
        raise ConversionError(f"inputs X and skip must be 3-D (N, S, C) of one shape, got {shape_of(x)} and "
                              f"{shape_of(skip)}")
    same_dtype({"X": x, "bias": bias, "skip": skip})
    return binary("add", _add_bias(x, bias), skip)


@converter("BiasSoftmax", domain=CONTRIB)
def bias_softmax(data, bias, *, is_inner_broadcast, axis=1):
    """softmax(data + bias) over the axes from `axis` on (flattened). The bias broadcasts over data's leading
    dims (is_inner_broadcast=0) or over the dims between its batch and `axis` (1): right-aligned numpy broadcasting
    covers the first; the second is aligned at the batch dims."""
    same_dtype({"data": data, "bias": bias})
    shape, bshape = shape_of(data), shape_of(bias)
    axis = normalize_axis(axis, len(shape))
    if flag(is_inner_broadcast, "is_inner_broadcast") and len(bshape) < len(shape):
        lead = len(shape) - len(bshape)  # bias [B, 1..., inner] -> broadcast as [B, 1 x lead, inner]
        bias = reshape(bias, bshape[:1] + (1,) * lead + bshape[1:])
    x = binary("add", data, bias)
    if axis == len(shape) - 1:
        return fold("nn.softmax", x, axis=-1)
    flat = reshape(x, shape[:axis] + (math.prod(shape[axis:]),))
    return reshape(fold("nn.softmax", flat, axis=-1), shape)


# ---- FusedMatMul, TransposeMatMul ----

def _matmul_operand(x: Expr, trans: bool, trans_batch: bool) -> Expr:
    """x as FusedMatMul reads it: transBatch moves dim 0 behind the batch dims (before the last one), trans swaps
    the last two (a 1-D operand is never transposed)."""
    rank = len(shape_of(x))
    if rank == 1:
        return x
    if trans_batch and rank > 2:
        perm = list(range(1, rank - 1)) + [0, rank - 1]
    else:
        perm = list(range(rank))
    if trans:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(x, perm)


def _fused_matmul(a, b, alpha, trans_a, trans_b, trans_batch_a, trans_batch_b):
    from .nn import matmul  # numpy matmul semantics (1-D operands, broadcast batch dims)
    same_dtype({"A": a, "B": b})
    y = matmul(_matmul_operand(a, flag(trans_a, "transA"), flag(trans_batch_a, "transBatchA")),
               _matmul_operand(b, flag(trans_b, "transB"), flag(trans_batch_b, "transBatchB")))
    return y if alpha == 1.0 else binary("multiply", y, const(alpha, y.type.dtype))


@converter("FusedMatMul", domain=CONTRIB)
def fused_matmul(a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):  # noqa: N803
    return _fused_matmul(a, b, alpha, transA, transB, transBatchA, transBatchB)


@converter("TransposeMatMul", domain=CONTRIB)
def transpose_matmul(a, b, *, alpha=1.0, transA=0, transB=0):  # noqa: N803
    return _fused_matmul(a, b, alpha, transA, transB, 0, 0)


# ---- normalizations ----

def _layer_norm_outputs(x: Expr, gamma: Expr, beta: Expr | None, epsilon: float, simplified: bool):
    """(y, mean, inv_std_var) over the last axis, in float32 for the statistics (onnxruntime's U type); the
    statistics keep the normalized axis as 1 (its kernels' shapes). simplified: RMS normalization, whose mean
    output onnxruntime leaves unwritten (zeros here)."""
    dtype, ndim = x.type.dtype, len(shape_of(x))
    hidden = shape_of(x)[-1]
    _vector(gamma, hidden, "gamma")
    if beta is not None:
        _vector(beta, hidden, "beta")
    xs = astype(x, "float32")
    if simplified:  # root mean square: no centering, no beta
        mean = None
        square = fold("mean", binary("multiply", xs, xs), axes=(ndim - 1,), keepdims=True)
        inv = fold("reciprocal", fold("sqrt", binary("add", square, const(epsilon, "float32"))))
        y = binary("multiply", astype(binary("multiply", xs, inv), dtype), gamma)
        return y, Constant(np.zeros(shape_of(x)[:-1] + (1,), np.float32)), inv
    bias = beta if beta is not None else Constant(np.zeros((hidden,), dtype=gamma.data.dtype if isinstance(
        gamma, Constant) else gamma.type.dtype))
    y = fold("nn.layer_norm", x, gamma, bias, axis=ndim - 1, epsilon=float(epsilon))
    mean = fold("mean", xs, axes=(ndim - 1,), keepdims=True)
    diff = binary("subtract", xs, mean)
    var = fold("mean", binary("multiply", diff, diff), axes=(ndim - 1,), keepdims=True)
    inv = fold("reciprocal", fold("sqrt", binary("add", var, const(epsilon, "float32"))))
    return y, mean, inv


def _skip_sum(x, skip, bias):
    """input + skip (+ bias): skip of x's shape, or broadcast from (1, S, D) or (S, D), as onnxruntime allows."""
    shape = shape_of(x)
    if len(shape) not in (2, 3):
        raise ConversionError(f"input must be 2-D or 3-D, got shape {shape}")
    if shape_of(skip) != shape and shape_of(skip) not in ((1,) + shape[1:], shape[1:]):
        raise ConversionError(f"input skip of shape {shape_of(skip)} must be {shape}, {(1,) + shape[1:]} or "
                              f"{shape[1:]}")
    total = binary("add", x, skip)
    return total if bias is None else _add_bias(total, bias)


@converter("SkipLayerNormalization", domain=CONTRIB)
def skip_layer_norm(x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """Outputs (output, mean, inv_std_var, input_skip_bias_sum): layer_norm(input + skip + bias)."""
    same_dtype({"input": x, "skip": skip, "gamma": gamma, "beta": beta, "bias": bias})
    total = _skip_sum(x, skip, bias)
    y, mean, inv = _layer_norm_outputs(total, gamma, beta, epsilon, simplified=False)
    return y, mean, inv, total


@converter("SkipSimplifiedLayerNormalization", domain=CONTRIB)
def skip_simplified_layer_norm(x, skip, gamma, bias=None, *, epsilon=1e-12):
    """Outputs (output, mean, inv_std_var, input_skip_bias_sum): RMS normalization of input + skip + bias (the
    mean output is not computed by onnxruntime's kernel: it is used by no fusion; zeros here)."""
    same_dtype({"input": x, "skip": skip, "gamma": gamma, "bias": bias})
    total = _skip_sum(x, skip, bias)
    y, mean, inv = _layer_norm_outputs(total, gamma, None, epsilon, simplified=True)
    return y, mean, inv, total


def _last_axis_norm(x, scale, bias, axis, epsilon, simplified):
    shape = shape_of(x)
    axis = normalize_axis(axis, len(shape))
    if axis != len(shape) - 1 and shape_of(scale) != shape[axis:]:
        raise ConversionError(f"normalizing over axes {axis}.. of shape {shape} needs a scale of shape "
                              f"{shape[axis:]}, got {shape_of(scale)}")
    flat = reshape(x, shape[:axis] + (math.prod(shape[axis:]),))
    hidden = shape_of(flat)[-1]
    y, mean, inv = _layer_norm_outputs(flat, reshape(scale, (hidden,)),
                                       None if bias is None else reshape(bias, (hidden,)), epsilon, simplified)
    stats = shape[:axis] + (1,) * (len(shape) - axis)
    return reshape(y, shape), reshape(mean, stats), reshape(inv, stats)


@converter("LayerNormalization", domain=ORT_ONNX_DOMAIN)
def ort_layer_norm(x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """onnxruntime's own ai.onnx LayerNormalization, which it runs at opsets before 17 (its transformer optimizer
    writes it into opset-11..16 models): the same op as ONNX's LayerNormalization-17."""
    same_dtype({"X": x, "scale": scale, "B": bias})
    return _last_axis_norm(x, scale, bias, axis, epsilon, simplified=False)


@converter("SimplifiedLayerNormalization", domain=ORT_ONNX_DOMAIN)
def simplified_layer_norm(x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """onnxruntime's ai.onnx RMS normalization: x / sqrt(mean(x^2) + epsilon) * scale (outputs Y, inv_std_var)."""
    same_dtype({"X": x, "scale": scale})
    y, _, inv = _last_axis_norm(x, scale, None, axis, epsilon, simplified=True)
    return y, inv


def _ids(ids: Expr, rows: int, what: str) -> Expr:
    """int32 ids into a table of `rows` rows, as take indices (checked at run time by the runtime's index
    bounds, at import when constant)."""
    if ids.type.dtype != "int32" or len(shape_of(ids)) != 2:
        raise ConversionError(f"input {what} must be 2-D int32, got {ids.type.dtype} of shape {shape_of(ids)}")
    if isinstance(ids, Constant) and ((ids.data < 0) | (ids.data >= rows)).any():
        raise ConversionError(f"input {what} holds ids outside [0, {rows})")
    return ids


@converter("EmbedLayerNormalization", domain=CONTRIB)
def embed_layer_norm(input_ids, segment_ids=None, word_embedding=None, position_embedding=None,
                     segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *, epsilon=1e-12,
                     mask_index_type=1):
    """Outputs (output, mask_index, embedding_sum): layer_norm(word[input_ids] + position[position_ids or
    0..S-1] + segment[segment_ids]); mask_index = the count of nonzero mask values per row (0s when no mask);
    embedding_sum = the sum before normalization."""
    if any(v is None for v in (word_embedding, position_embedding, gamma, beta)):
        raise ConversionError("inputs word_embedding, position_embedding, gamma and beta are required")
    same_dtype({"word_embedding": word_embedding, "position_embedding": position_embedding,
                         "segment_embedding": segment_embedding, "gamma": gamma, "beta": beta})
    batch, seq = shape_of(_ids(input_ids, shape_of(word_embedding)[0], "input_ids"))
    hidden = shape_of(word_embedding)[1]
    for name, table in (("position_embedding", position_embedding), ("segment_embedding", segment_embedding)):
        if table is not None and (len(shape_of(table)) != 2 or shape_of(table)[1] != hidden):
            raise ConversionError(f"input {name} must be 2-D (rows, {hidden}), got shape {shape_of(table)}")
    if (segment_ids is None) != (segment_embedding is None):
        raise ConversionError("inputs segment_ids and segment_embedding must be given together")
    total = fold("take", word_embedding, input_ids, axis=0)
    if position_ids is None:
        if seq > shape_of(position_embedding)[0]:
            raise ConversionError(f"sequence length {seq} exceeds the {shape_of(position_embedding)[0]} positions")
        positions = reshape(_slice_rows(position_embedding, seq), (1, seq, hidden))
    else:
        if shape_of(position_ids) not in ((batch, seq), (1, seq)):
            raise ConversionError(f"input position_ids must be ({batch}, {seq}) or (1, {seq}), got "
                                  f"{shape_of(position_ids)}")
        positions = fold("take", position_embedding, _ids(position_ids, shape_of(position_embedding)[0],
                                                          "position_ids"), axis=0)
    total = binary("add", total, positions)
    if segment_ids is not None:
        if shape_of(segment_ids) != (batch, seq):
            raise ConversionError(f"input segment_ids must be ({batch}, {seq}), got {shape_of(segment_ids)}")
        total = binary("add", total, fold("take", segment_embedding, _ids(segment_ids, shape_of(
            segment_embedding)[0], "segment_ids"), axis=0))
    y, _, _ = _layer_norm_outputs(total, gamma, beta, epsilon, simplified=False)
    if mask is None:
        mask_index = Constant(np.zeros((batch,), np.int32))
    else:
        if mask.type.dtype != "int32" or shape_of(mask) != (batch, seq):
            raise ConversionError(f"input mask must be int32 ({batch}, {seq}), got {mask.type.dtype} "
                                  f"{shape_of(mask)}")
        ones = astype(fold("equal", mask, const(1, "int32")), "int32")  # onnxruntime counts the 1s
        mask_index = fold("sum", ones, axes=(1,), keepdims=False)
    return y, mask_index, total


def _slice_rows(table: Expr, rows: int) -> Expr:
    return fold("strided_slice", table, begin=(0,), end=(rows,), strides=(1,), axes=(0,))


# ---- FusedConv, FusedGemm ----

def _activation(x: Expr, name: str, params) -> Expr:
    """onnxruntime's fused activations (MLAS_ACTIVATION): Relu, Tanh, Sigmoid, LeakyRelu (alpha), Clip (min, max),
    HardSigmoid (alpha, beta)."""
    params = tuple(params or ())
    need = {"": 0, "Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}
    if name not in need:
        raise ConversionError(f"activation {name!r} is not supported (supported: Relu, Tanh, Sigmoid, LeakyRelu, "
                              f"Clip, HardSigmoid)")
    if len(params) < need[name]:
        raise ConversionError(f"activation {name} needs {need[name]} activation_params, got {list(params)}")
    if name == "Relu":
        return fold("nn.relu", x)
    if name in ("Tanh", "Sigmoid"):
        return fold(name.lower(), x)
    if name == "LeakyRelu":
        return fold("nn.leaky_relu", x, alpha=float(params[0]))
    if name == "Clip":
        return fold("clip", x, a_min=float(params[0]), a_max=float(params[1]))
    if name == "HardSigmoid":
        return fold("hard_sigmoid", x, alpha=float(params[0]), beta=float(params[1]))
    return x


@converter("FusedConv", domain=CONTRIB)
def fused_conv(x, w, b=None, z=None, *, activation="", activation_params=None, auto_pad="NOTSET", dilations=None,
               group=1, kernel_shape=None, pads=None, strides=None):
    """activation(Conv(x, w, b) + z): the sum input Z is added before the activation (onnxruntime's kernel)."""
    same_dtype({"X": x, "W": w, "B": b, "Z": z})
    y = onnx_conv(x, w, b, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                  pads=pads, strides=strides)
    if z is not None:
        if shape_of(z) != shape_of(y):
            raise ConversionError(f"input Z of shape {shape_of(z)} must have the output's shape {shape_of(y)}")
        y = binary("add", y, z)
    return _activation(y, activation, activation_params)


@converter("FusedGemm", domain=CONTRIB)
def fused_gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation="",  # noqa: N803
               activation_alpha=None, activation_beta=None, activation_gamma=None):
    """activation(Gemm(...)): activation_alpha/beta are the LeakyRelu alpha, the Clip bounds or the HardSigmoid
    coefficients."""
    if not all(is_float(t.type.dtype) for t in (a, b)):
        raise ConversionError(f"inputs A and B must be float tensors, got {a.type.dtype} and {b.type.dtype}")
    y = gemm(a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)
    alpha_ = activation_alpha
    params = {"LeakyRelu": (0.01 if alpha_ is None else alpha_,),
              "Clip": (activation_alpha, activation_beta),
              "HardSigmoid": (0.2 if alpha_ is None else alpha_, 0.5 if activation_beta is None else activation_beta)}
    got = params.get(activation, ())
    if activation == "Clip" and None in got:
        raise ConversionError("activation Clip needs activation_alpha (min) and activation_beta (max)")
    return _activation(y, activation, got)

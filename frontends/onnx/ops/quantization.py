"""Converters of the linear quantization ops (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear) and of the
losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), each a composition of existing relayish ops.

Conventions as in frontends/onnx_ops.py. The numerics follow onnx's reference implementations
(onnx/reference/ops/op_quantize_linear.py etc.), which generated the conformance cases:
- quantize: x / scale in the inputs' (numpy-promoted) float type, rounded half to even, plus the zero point,
  saturated to the output type's integer range (always: `saturate` only concerns float8 outputs);
- dequantize: (x - zero_point) in float32 times the scale, rounded once to the output type.
Quantized types that are not relayish dtypes (float8*, float4e2m1, int4/uint4, int2/uint2...) are refused by name.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, const
from relayish.types import DTYPES

from ..builders import astype, binary, elem_type_name, fold, normalize_axis, reshape, shape_of
from ..registry import converter
from ..values import ConversionError

# quantized integer types relayish has, and their ranges (ONNX's _QUANT_INTEGER_RANGES)
QUANT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}
DEQUANT_INPUTS = ("int8", "uint8", "int16", "uint16", "int32")
SCALE_DTYPES = ("float32", "float16", "bfloat16")


def _dtype_of(x: Expr) -> str:
    """x's element type name; a Constant may hold a type relayish has no dtype for (float8 initializers)."""
    return np.dtype(x.data.dtype).name if isinstance(x, Constant) else x.type.dtype


def _refuse_unsupported(dtype: str, what: str) -> None:
    if dtype not in DTYPES:
        raise ConversionError(f"{what} has type {dtype}, which relayish does not support (float8, float4, int4 and "
                              f"int2 types are not)")


# ---- scales and zero points: per tensor, per axis, blocked ----

def _quant_param(p: Expr, x: Expr, axis: int, block_size: int, what: str) -> Expr:
    """A scale or zero point made broadcastable to x (onnx's reshape_input): one element -> a scalar; 1-D of
    x.shape[axis] elements -> per axis; with block_size > 0, x's shape but ceil(x.shape[axis] / block_size) on
    axis -> each element repeated over its block."""
    shape, pshape = shape_of(x), shape_of(p)
    if int(np.prod(pshape)) == 1:
        return reshape(p, ())
    if block_size < 0:
        raise ConversionError(f"block_size must be >= 0, got {block_size}")
    if not block_size:
        if len(pshape) != 1 or len(shape) == 0:
            raise ConversionError(f"{what} of shape {pshape} must be a scalar or 1-D (per-axis quantization) "
                                  f"without block_size")
        axis = normalize_axis(axis, len(shape))
        if pshape[0] != shape[axis]:
            raise ConversionError(f"{what} has {pshape[0]} elements but axis {axis} of the input {shape} has "
                                  f"{shape[axis]}")
        return reshape(p, tuple(pshape[0] if d == axis else 1 for d in range(len(shape))))
    axis = normalize_axis(axis, len(shape))
    blocks = -(-shape[axis] // block_size)
    expected = shape[:axis] + (blocks,) + shape[axis + 1:]
    if pshape != expected:
        raise ConversionError(f"{what} of shape {pshape} does not fit blocked quantization of the input {shape} "
                              f"on axis {axis} with block_size {block_size} (expected {expected})")
    index = Constant(np.arange(shape[axis], dtype=np.int64) // block_size)
    return fold("take", p, index, axis=axis)


# ---- QuantizeLinear ----

def quantize_linear(x, scale, zero_point, *, axis=1, block_size=0, output_dtype=0, precision=0):
    x_dtype, s_dtype = _dtype_of(x), _dtype_of(scale)
    for what, dtype in (("input x", x_dtype), ("input y_scale", s_dtype)):
        _refuse_unsupported(dtype, what)
        if dtype not in SCALE_DTYPES + ("int32",):
            raise ConversionError(f"{what} must be float32, float16, bfloat16 or int32, got {dtype}")
    out = elem_type_name(output_dtype, "attribute output_dtype") if output_dtype else None
    if zero_point is not None:
        zp_dtype = _dtype_of(zero_point)
        if out is not None and out != zp_dtype:
            raise ConversionError(f"output_dtype {out} differs from the zero point's type {zp_dtype}")
        out = zp_dtype
    out = out or "uint8"
    _refuse_unsupported(out, "the quantized output" if zero_point is None else "input y_zero_point")
    if out not in QUANT_RANGES:
        raise ConversionError(f"the quantized output type must be one of {', '.join(QUANT_RANGES)}, got {out}")
    # the division in numpy's promotion of the two types (int32 inputs: float64), or in `precision`
    if precision:
        compute = elem_type_name(precision, "attribute precision")
        _refuse_unsupported(compute, "attribute precision")
        if compute not in SCALE_DTYPES:
            raise ConversionError(f"attribute precision must be float32, float16 or bfloat16, got {compute}")
    else:
        compute = "float64" if "int32" in (x_dtype, s_dtype) else \
            "float32" if x_dtype != s_dtype else x_dtype
    s = _quant_param(scale, x, axis, block_size, "y_scale")
    rounded = fold("round", binary("divide", astype(x, compute), astype(s, compute)))
    # rounded is an integer; adding the zero point in float32 is exact below 2^24, and beyond that it saturates
    acc = "float64" if compute == "float64" else "float32"
    q = astype(rounded, acc)
    if zero_point is not None:
        q = binary("add", q, astype(_quant_param(zero_point, x, axis, block_size, "y_zero_point"), acc))
    lo, hi = QUANT_RANGES[out]
    # NaN quantizes to the range's low end (onnxruntime's result; a float NaN cast to an integer is undefined)
    q = fold("where", fold("equal", q, q), q, const(float(lo), acc))
    return astype(fold("clip", q, a_min=float(lo), a_max=float(hi)), out)


@converter("QuantizeLinear", since=10)
def quantize_v10(x, y_scale, y_zero_point=None):
    if len(shape_of(y_scale)) > 1 or int(np.prod(shape_of(y_scale))) != 1:
        raise ConversionError(f"y_scale must be a scalar at opsets before 13, got shape {shape_of(y_scale)}")
    return quantize_linear(x, y_scale, y_zero_point)


@converter("QuantizeLinear", since=13)
def quantize_v13(x, y_scale, y_zero_point=None, *, axis=1):
    return quantize_linear(x, y_scale, y_zero_point, axis=axis)


@converter("QuantizeLinear", since=19)
def quantize_v19(x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    return quantize_linear(x, y_scale, y_zero_point, axis=axis)  # saturate concerns float8 outputs only (refused)


@converter("QuantizeLinear", since=21)
def quantize_v21(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, saturate=1):
    return quantize_linear(x, y_scale, y_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)


@converter("QuantizeLinear", since=23)
def quantize_v23(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, precision=0, saturate=1):
    return quantize_linear(x, y_scale, y_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype,
                     precision=precision)


# ---- DequantizeLinear ----

def dequantize_linear(x, scale, zero_point, *, axis=1, block_size=0, output_dtype=0):
    x_dtype, s_dtype = _dtype_of(x), _dtype_of(scale)
    _refuse_unsupported(x_dtype, "input x")
    _refuse_unsupported(s_dtype, "input x_scale")
    if x_dtype not in DEQUANT_INPUTS:
        raise ConversionError(f"input x must be one of {', '.join(DEQUANT_INPUTS)}, got {x_dtype}")
    if s_dtype not in SCALE_DTYPES:
        raise ConversionError(f"input x_scale must be one of {', '.join(SCALE_DTYPES)}, got {s_dtype}")
    out = elem_type_name(output_dtype, "attribute output_dtype") if output_dtype else s_dtype
    if out not in SCALE_DTYPES:
        raise ConversionError(f"output_dtype must be one of {', '.join(SCALE_DTYPES)}, got {out}")
    # (x - zero_point) in float32, as the reference; an int32 zero point promotes the difference to float64
    compute = "float64" if zero_point is not None and x_dtype == "int32" else "float32"
    dx = astype(astype(x, "float32"), compute)
    if zero_point is not None:
        if _dtype_of(zero_point) != x_dtype:
            raise ConversionError(f"input x_zero_point must have x's type {x_dtype}, got {_dtype_of(zero_point)}")
        dx = binary("subtract", dx, astype(_quant_param(zero_point, x, axis, block_size, "x_zero_point"), compute))
    s = astype(_quant_param(scale, x, axis, block_size, "x_scale"), compute)
    return astype(binary("multiply", dx, s), out)


@converter("DequantizeLinear", since=10)
def dequantize_v10(x, x_scale, x_zero_point=None):
    if len(shape_of(x_scale)) > 1 or int(np.prod(shape_of(x_scale))) != 1:
        raise ConversionError(f"x_scale must be a scalar at opsets before 13, got shape {shape_of(x_scale)}")
    return dequantize_linear(x, x_scale, x_zero_point)


@converter("DequantizeLinear", since=13)
def dequantize_v13(x, x_scale, x_zero_point=None, *, axis=1):
    return dequantize_linear(x, x_scale, x_zero_point, axis=axis)


@converter("DequantizeLinear", since=21)
def dequantize_v21(x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    return dequantize_linear(x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@converter("DequantizeLinear", since=23)
def dequantize_v23(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    return dequantize_linear(x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)


# ---- DynamicQuantizeLinear ----

@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize(x):
    """Outputs (y uint8, y_scale float32 scalar, y_zero_point uint8 scalar) over the range [min(x, 0), max(x, 0)]
    (a range of 0: scale 1), as the reference: the zero point is clipped to [0, 255] before it is rounded."""
    if x.type.dtype != "float32":
        raise ConversionError(f"input x must be float32, got {x.type.dtype}")
    zero = const(0.0, "float32")
    hi = binary("maximum", zero, fold("max", x, axes=None, keepdims=False))
    lo = binary("minimum", zero, fold("min", x, axes=None, keepdims=False))
    span = binary("subtract", hi, lo)
    span = fold("where", fold("equal", span, zero), const(1.0, "float32"), span)
    scale = binary("divide", span, const(255.0, "float32"))
    zp = fold("round", fold("clip", binary("subtract", zero, binary("divide", lo, scale)), a_min=0.0, a_max=255.0))
    y = binary("add", fold("round", binary("divide", x, scale)), zp)
    return astype(fold("clip", y, a_min=0.0, a_max=255.0), "uint8"), scale, astype(zp, "uint8")


# ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ----

def _check_labels(x: Expr, target: Expr, weight: Expr | None, ignore_index: int | None, reduction: str) -> None:
    shape = shape_of(x)
    if len(shape) < 2 or x.type.dtype not in ("float32", "float64", "float16"):
        raise ConversionError(f"the input must be a float32, float64 or float16 [N, C, d1...] tensor, got {shape} "
                              f"{x.type.dtype}")
    if reduction not in ("none", "sum", "mean"):
        raise ConversionError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    if target.type.dtype not in ("int32", "int64") or shape_of(target) != shape[:1] + shape[2:]:
        raise ConversionError(f"the target must be an int32 or int64 [N, d1...] = {shape[:1] + shape[2:]} tensor, "
                              f"got {shape_of(target)} {target.type.dtype}")
    if weight is not None and (shape_of(weight) != (shape[1],) or weight.type.dtype != x.type.dtype):
        raise ConversionError(f"the weight must be a [C={shape[1]}] tensor of {x.type.dtype}, got {shape_of(weight)} "
                              f"{weight.type.dtype}")
    if isinstance(target, Constant):  # run-time targets are checked by the runtime (compiler/index_bounds.py)
        labels, c = target.data, shape[1]
        bad = ((labels < -c) | (labels >= c)) & (labels != ignore_index if ignore_index is not None else True)
        if bad.any():
            raise ConversionError(f"target holds {int(labels[bad].flat[0])}, out of range for {c} classes "
                                  f"(ignore_index {ignore_index})")


def _nll(log_prob: Expr, target: Expr, weight: Expr | None, ignore_index: int | None, reduction: str) -> Expr:
    """The loss of log-probabilities [N, C, d1...] at the target classes [N, d1...], as onnx's reference: loss =
    -log_prob[n, target, d...] * weight[target] (0 where target == ignore_index), then summed, or divided by the
    sum of those weights (mean). The class of each label is `take`n from [0, C) (a negative label counts from the
    end, as onnxruntime's GatherElements): a label given at run time is checked against C by the runtime, with
    ignore_index allowed (compiler/index_bounds.py); the class axis is then picked by a one-hot select, so no label
    value can make native code read outside the input."""
    shape, dtype, tdtype = shape_of(log_prob), log_prob.type.dtype, target.type.dtype
    n, c, rest = shape[0], shape[1], shape[2:]
    ignored = None if ignore_index is None else fold("equal", target, const(ignore_index, tdtype))
    safe = target if ignored is None else fold("where", ignored, const(0, tdtype), target)
    classes = Constant(np.arange(c, dtype=tdtype))
    label_class = fold("take", classes, safe, axis=0)
    onehot = fold("equal", reshape(label_class, (n, 1) + rest), reshape(classes, (1, c) + (1,) * len(rest)))
    picked = fold("sum", fold("where", onehot, log_prob, const(0.0, dtype)), axes=(1,), keepdims=False)
    loss = fold("negative", picked)
    gathered = None if weight is None else fold("take", weight, safe, axis=0)
    if ignored is not None:
        gathered = fold("where", ignored, const(0.0, dtype), const(1.0, dtype) if gathered is None else gathered)
    if gathered is not None:
        loss = binary("multiply", gathered, loss)
    if reduction == "none":
        return loss
    total = fold("sum", loss, axes=None, keepdims=False)
    if reduction == "sum":
        return total
    if gathered is None:
        return binary("divide", total, const(float(np.prod(shape_of(target))), dtype))
    return binary("divide", total, fold("sum", gathered, axes=None, keepdims=False))


@converter("NegativeLogLikelihoodLoss", since=12)
def nll_loss(x, target, weight=None, *, ignore_index=None, reduction="mean"):
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    _check_labels(x, target, weight, ignore_index, reduction)
    return _nll(x, target, weight, ignore_index, reduction)


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    """Outputs (loss, log_prob): log_prob = log(softmax(scores) over the class axis 1), as onnx's reference (a log
    of the softmax, not a fused log-softmax); the loss is NegativeLogLikelihoodLoss of it."""
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    _check_labels(scores, labels, weights, ignore_index, reduction)
    log_prob = fold("log", fold("nn.softmax", scores, axis=1))
    return _nll(log_prob, labels, weights, ignore_index, reduction), log_prob

"""Converters of the linear quantization ops (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear) and of the
integer ops (MatMulInteger, QLinearMatMul, ConvInteger), each a composition of existing relayish ops. QLinearConv,
which shares its code with onnxruntime's com.microsoft form, is in contrib_quant.py.

Conventions: frontends/onnx/registry.py. The numerics follow onnx's reference implementations
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

from ..builders import astype, binary, elem_type_name, fold, normalize_axis, reshape, shape_of, window_attrs
from ..registry import converter
from ..values import ConversionError
from .integer import integer_conv, integer_matmul

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


# ---- MatMulInteger, QLinearMatMul, ConvInteger ----

QUANT_TYPES = ("int8", "uint8")


def _per_row_or_column(p: Expr, x: Expr, rows: bool, what: str) -> Expr:
    """A zero point or scale of a matmul operand made broadcastable to it: one value -> a scalar; 1-D of the
    operand's row count (a, per row: [M, 1]) or column count (b, per column: [N])."""
    shape, pshape = shape_of(x), shape_of(p)
    if int(np.prod(pshape)) == 1:
        return reshape(p, ())
    extent = shape[-2] if rows and len(shape) > 1 else shape[-1]
    if len(pshape) != 1 or pshape[0] != extent:
        raise ConversionError(f"{what} of shape {pshape} must be one value or 1-D of the {extent} "
                              f"{'rows' if rows else 'columns'} of the operand {shape}")
    return reshape(p, (extent, 1)) if rows and len(shape) > 1 else p


def _zero_point_of(x: Expr, zero_point: Expr | None, rows: bool, name: str) -> Expr | None:
    """A matmul operand's zero point, checked, broadcastable to the product (integer.py)."""
    if x.type.dtype not in QUANT_TYPES:
        raise ConversionError(f"input {name} must be int8 or uint8, got {x.type.dtype}")
    if zero_point is None:
        return None
    if zero_point.type.dtype != x.type.dtype:
        raise ConversionError(f"the zero point of {name} must be {x.type.dtype}, got {zero_point.type.dtype}")
    return _per_row_or_column(zero_point, x, rows, f"{name}'s zero point")


@converter("MatMulInteger", since=10)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    """(A - a_zero_point) @ (B - b_zero_point) in int32 (exact: int8 products summed in int32, as the reference;
    integer.py)."""
    return integer_matmul(a, _zero_point_of(a, a_zero_point, True, "A"), b,
                          _zero_point_of(b, b_zero_point, False, "B"))


@converter("QLinearMatMul", since=10)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """The integer matmul, requantized as the reference: C * (a_scale * b_scale / y_scale) in float64 (numpy's
    promotion of int32 and the scales), plus the output zero point, rounded half to even and saturated to the
    output type."""
    scales = {s.type.dtype for s in (a_scale, b_scale, y_scale)}
    if len(scales) != 1 or not scales <= {"float32", "float16", "bfloat16"}:
        raise ConversionError(f"the scales must be float32, float16 or bfloat16, all of one type, got "
                              f"{sorted(scales)}")
    if y_zero_point.type.dtype not in QUANT_TYPES:
        raise ConversionError(f"y_zero_point must be int8 or uint8, got {y_zero_point.type.dtype}")
    c = integer_matmul(a, _zero_point_of(a, a_zero_point, True, "a"), b, _zero_point_of(b, b_zero_point, False, "b"))
    sa = _per_row_or_column(a_scale, a, True, "a_scale")
    sb = _per_row_or_column(b_scale, b, False, "b_scale")
    if int(np.prod(shape_of(y_scale))) != 1:
        raise ConversionError(f"y_scale must hold one value, got shape {shape_of(y_scale)}")
    scale = binary("divide", binary("multiply", sa, sb), reshape(y_scale, ()))
    d = binary("multiply", astype(c, "float64"), astype(scale, "float64"))
    d = binary("add", d, astype(reshape(y_zero_point, ()) if int(np.prod(shape_of(y_zero_point))) == 1 else
                                _per_row_or_column(y_zero_point, b, False, "y_zero_point"), "float64"))
    out = y_zero_point.type.dtype
    lo, hi = (0.0, 255.0) if out == "uint8" else (-128.0, 127.0)
    return astype(fold("clip", fold("round", d), a_min=lo, a_max=hi), out)


@converter("ConvInteger", since=10)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """Conv of (x - x_zero_point) and (w - w_zero_point) in int32 (padding adds zeros after the shift, i.e. the
    zero point, as the reference). w_zero_point is one value or one per output channel."""
    for name, v in (("x", x), ("w", w)):
        if v.type.dtype not in QUANT_TYPES:
            raise ConversionError(f"input {name} must be int8 or uint8, got {v.type.dtype}")
    if len(shape_of(x)) != 4 or len(shape_of(w)) != 4:
        raise ConversionError(f"only 2-D ConvInteger (4-D x and w) is supported, got shapes {shape_of(x)} and "
                              f"{shape_of(w)}")
    kernel = shape_of(w)[2:]
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {shape_of(w)}")
    if x_zero_point is not None:
        if x_zero_point.type.dtype != x.type.dtype or int(np.prod(shape_of(x_zero_point))) != 1:
            raise ConversionError(f"x_zero_point must be one {x.type.dtype} value, got {x_zero_point.type.dtype} "
                                  f"of shape {shape_of(x_zero_point)}")
        x_zero_point = reshape(x_zero_point, ())
    if w_zero_point is not None:
        channels = shape_of(w)[0]
        if w_zero_point.type.dtype != w.type.dtype or int(np.prod(shape_of(w_zero_point))) not in (1, channels):
            raise ConversionError(f"w_zero_point must be one {w.type.dtype} value or one per output channel "
                                  f"({channels}), got {w_zero_point.type.dtype} of shape {shape_of(w_zero_point)}")
        w_zero_point = reshape(w_zero_point, () if int(np.prod(shape_of(w_zero_point))) == 1 else (channels,))
    _, c, _, _ = shape_of(x)
    if group < 1 or c % group or shape_of(w)[0] % group or shape_of(w)[1] * group != c:
        raise ConversionError(f"group={group} does not fit input channels {c} and weight {shape_of(w)}")
    return integer_conv(x, w, x_zero_point, w_zero_point, group,
                        window_attrs(x, kernel, strides, dilations, auto_pad, pads))

"""Converters of the quantized (QOperator) ops that onnxruntime's static quantizer
(onnxruntime.quantization.quantize_static, QuantFormat.QOperator) and its graph optimizer (QDQ groups fused at the
extended level) write: QLinearConv (ai.onnx and com.microsoft), QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearWhere,
NhwcMaxPool and com.microsoft's QuantizeLinear/DequantizeLinear. The matmul-like ones (QGemm, MatMulNBits,
DynamicQuantizeMatMul, ...): contrib_qmatmul.py.

Numerics as onnxruntime's CPU kernels: dequantize is scale * (x - zero_point) in float32 (the difference exact in
int32); quantize is x / scale rounded half to even, plus the zero point, saturated to the 8-bit range (MLAS's
QuantizeLinear); integer accumulations (QLinearConv, QLinearGlobalAveragePool) are exact in int32 and requantized
as round(float32(acc) * multiplier) + zero point with the multiplier computed in float32 (MLAS's
RequantizeOutput). Element-wise ops that onnxruntime evaluates through a 256-entry lookup table (QLinearSigmoid,
QLinearLeakyRelu, the requantized inputs of QLinearConcat/QLinearWhere) compute the same formula per element.
Where onnxruntime uses fixed-point arithmetic instead (QLinearAdd/QLinearMul on AVX2 and later, QLinearSoftmax's
exp table) the results differ from it by at most one quantization step in rare elements, as its own kernels do
across instruction sets: tests/test_contrib_quant.py bounds it.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, const
from relayish.ops.nn import pool_out_size

from ..builders import astype, binary, flag, fold, normalize_axis, reshape, shape_of, transpose, window_attrs
from ..registry import converter
from ..values import ConversionError
from ..versions.contrib import CONTRIB
from .conv import avg_pool as onnx_avg_pool, max_pool as onnx_max_pool
from .quantization import conv_integer
from .quantization import dequantize_linear, quantize_linear

Q8 = {"uint8": (0, 255), "int8": (-128, 127)}


# ---- quantization parameters and the three conversions ----

def q8(x: Expr, what: str) -> str:
    if x.type.dtype not in Q8:
        raise ConversionError(f"input {what} must be int8 or uint8, got {x.type.dtype}")
    return x.type.dtype


def scalar(p: Expr, what: str, dtype: str = "float32") -> Expr:
    """A per-tensor scale or zero point: one element of `dtype`, as a 0-d tensor."""
    if p.type.dtype != dtype or math.prod(shape_of(p)) != 1:
        raise ConversionError(f"{what} must be one {dtype} value (per-tensor quantization), got {p.type.dtype} of "
                              f"shape {shape_of(p)}")
    return reshape(p, ())


def zero_point(zp: Expr | None, dtype: str, what: str) -> Expr:
    """A per-tensor zero point of the quantized type `dtype` (an omitted one is 0)."""
    return const(0, dtype) if zp is None else scalar(zp, what, dtype)


def dequantize(x: Expr, scale: Expr, zp: Expr | None) -> Expr:
    """scale * (x - zero_point) in float32; scale and zp broadcastable to x."""
    diff = astype(x, "int32")
    if zp is not None:
        diff = binary("subtract", diff, astype(zp, "int32"))
    return binary("multiply", astype(diff, "float32"), scale)


def quantize(y: Expr, scale: Expr, zp: Expr, dtype: str) -> Expr:
    """round_half_even(y / scale) + zp, saturated to dtype's range (MLAS's QuantizeLinear)."""
    return _saturate(binary("divide", y, scale), zp, dtype)


def requantize(acc: Expr, multiplier: Expr, zp: Expr, dtype: str) -> Expr:
    """An int32 accumulation -> round_half_even(float32(acc) * multiplier) + zp, saturated (RequantizeOutput)."""
    return _saturate(binary("multiply", astype(acc, "float32"), multiplier), zp, dtype)


def _saturate(scaled: Expr, zp: Expr, dtype: str) -> Expr:
    lo, hi = Q8[dtype]
    q = fold("round", scaled)
    if not (isinstance(zp, Constant) and not np.any(zp.data)):  # a zero point of 0 adds nothing the clip and the
        q = binary("add", q, astype(zp, "float32"))            # cast keep (only -0.0 becomes 0.0): one op less
    return astype(fold("clip", q, a_min=float(lo), a_max=float(hi)), dtype)


def _operand(x, scale, zp, what):
    """(dtype, scale, zero point) of a per-tensor quantized operand, checked."""
    dtype = q8(x, what)
    return dtype, scalar(scale, f"{what}'s scale"), zero_point(zp, dtype, f"{what}'s zero point")


# ---- element-wise ----

def _binary_q(fn, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp):
    if b is None or b_scale is None or c_scale is None:
        raise ConversionError("inputs B, B_scale and C_scale are required (only the zero points are optional)")
    ta, sa, za = _operand(a, a_scale, a_zp, "A")
    tb, sb, zb = _operand(b, b_scale, b_zp, "B")
    if ta != tb:
        raise ConversionError(f"inputs A and B must have one type, got {ta} and {tb}")
    sc, zc = scalar(c_scale, "C_scale"), zero_point(c_zp, ta, "C_zero_point")
    return quantize(fn(dequantize(a, sa, za), dequantize(b, sb, zb)), sc, zc, ta)


@converter("QLinearAdd", domain=CONTRIB)
def qlinear_add(a, a_scale, a_zero_point=None, b=None, b_scale=None, b_zero_point=None, c_scale=None,
                c_zero_point=None):
    return _binary_q(lambda x, y: binary("add", x, y), a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                     c_scale, c_zero_point)


@converter("QLinearMul", domain=CONTRIB)
def qlinear_mul(a, a_scale, a_zero_point=None, b=None, b_scale=None, b_zero_point=None, c_scale=None,
                c_zero_point=None):
    return _binary_q(lambda x, y: binary("multiply", x, y), a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                     c_scale, c_zero_point)


def _unary_q(fn, x, x_scale, x_zp, y_scale, y_zp):
    dtype, sx, zx = _operand(x, x_scale, x_zp, "X")
    return quantize(fn(dequantize(x, sx, zx)), scalar(y_scale, "Y_scale"), zero_point(y_zp, dtype, "Y_zero_point"),
                    dtype)


@converter("QLinearSigmoid", domain=CONTRIB)
def qlinear_sigmoid(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    return _unary_q(lambda v: fold("sigmoid", v), x, x_scale, x_zero_point, y_scale, y_zero_point)


@converter("QLinearLeakyRelu", domain=CONTRIB)
def qlinear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, alpha=0.01):
    return _unary_q(lambda v: fold("nn.leaky_relu", v, alpha=float(alpha)), x, x_scale, x_zero_point, y_scale,
                    y_zero_point)


FLT_MAX = float(np.finfo(np.float32).max)


@converter("QLinearSoftmax", domain=CONTRIB)
def qlinear_softmax(x, x_scale, x_zero_point, y_scale, y_zero_point, *, opset, axis=-1):
    """onnxruntime's kernel, over `axis` (opset >= 13) or the tail flattened from `axis` (Softmax before 13): e_i =
    float32(exp((x_i - max(x) + shift) * x_scale)) with shift = max(0, ln(FLT_MAX / D) - 5) / x_scale (its lookup
    table, scaled so that the float32 sum of the D values cannot overflow; x_zero_point cancels), then y_i =
    round(e_i * floor(1 / y_scale) / sum(e)) + y_zero_point, saturated (onnxruntime wraps int8 results past 127
    around: a row whose one element takes all the probability gives -128 there, 127 here)."""
    dtype, sx, _ = _operand(x, x_scale, x_zero_point, "X")
    sy, zy = scalar(y_scale, "y_scale"), zero_point(y_zero_point, dtype, "y_zero_point")
    shape = shape_of(x)
    ax = normalize_axis(axis if axis != -1 or opset >= 13 else 1, len(shape)) if shape else 0
    rows = x if opset >= 13 or ax == len(shape) - 1 else reshape(x, shape[:ax] + (math.prod(shape[ax:]),))
    ax = ax if rows is x else len(shape_of(rows)) - 1
    d = shape_of(rows)[ax]
    xi = astype(rows, "int32")
    offset = astype(binary("subtract", xi, fold("max", xi, axes=(ax,), keepdims=True)), "float64")
    sx64 = astype(sx, "float64")
    shift = const(max(0.0, math.log(FLT_MAX / d) - 5.0), "float64")
    e = astype(fold("exp", binary("add", binary("multiply", offset, sx64), shift)), "float32")
    total = fold("sum", e, axes=(ax,), keepdims=True)
    levels = fold("floor", fold("reciprocal", sy))
    y = _saturate(binary("divide", binary("multiply", e, levels), total), zy, dtype)
    return y if rows is x else reshape(y, shape)


@converter("QLinearWhere", domain=CONTRIB)
def qlinear_where(condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale, z_zero_point):
    """where(condition, X, Y), each of X and Y requantized to Z's parameters."""
    if condition.type.dtype != "bool":
        raise ConversionError(f"input condition must be bool, got {condition.type.dtype}")
    tx, sx, zx = _operand(x, x_scale, x_zero_point, "X")
    ty, sy, zy = _operand(y, y_scale, y_zero_point, "Y")
    if tx != ty:
        raise ConversionError(f"inputs X and Y must have one type, got {tx} and {ty}")
    sz, zz = scalar(z_scale, "z_scale"), zero_point(z_zero_point, tx, "z_zero_point")
    return fold("where", condition, quantize(dequantize(x, sx, zx), sz, zz, tx),
                quantize(dequantize(y, sy, zy), sz, zz, tx))


@converter("QLinearConcat", domain=CONTRIB)
def qlinear_concat(y_scale, y_zero_point, *inputs, axis):
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor; each X requantized to Y's
    parameters (copied as is where they are Y's), then concatenated."""
    if not inputs or len(inputs) % 3:
        raise ConversionError(f"after Y_scale and Y_zero_point the inputs must be (tensor, scale, zero point) "
                              f"triples, got {len(inputs)} more inputs")
    dtype = q8(y_zero_point, "Y_zero_point")
    sy, zy = scalar(y_scale, "Y_scale"), zero_point(y_zero_point, dtype, "Y_zero_point")
    parts = []
    for i in range(0, len(inputs), 3):
        x, sx, zx = inputs[i], scalar(inputs[i + 1], f"the scale of input {i // 3}"), inputs[i + 2]
        if q8(x, f"{i // 3} of the concatenation") != dtype:
            raise ConversionError(f"input {i // 3} is {x.type.dtype}, Y is {dtype}")
        zx = zero_point(zx, dtype, f"the zero point of input {i // 3}")
        same = all(isinstance(v, Constant) for v in (sx, zx, sy, zy)) and \
            float(sx.data) == float(sy.data) and int(zx.data) == int(zy.data)
        parts.append(x if same else quantize(dequantize(x, sx, zx), sy, zy, dtype))
    rank = len(shape_of(parts[0]))
    return fold("concatenate", *parts, axis=normalize_axis(axis, rank))


# ---- pooling ----

def _nchw(x: Expr, channels_last: int) -> Expr:
    rank = len(shape_of(x))
    return transpose(x, (0, rank - 1) + tuple(range(1, rank - 1))) if flag(channels_last, "channels_last") else x


def _from_nchw(y: Expr, channels_last: int) -> Expr:
    rank = len(shape_of(y))
    return transpose(y, (0,) + tuple(range(2, rank)) + (1,)) if channels_last else y


@converter("QLinearGlobalAveragePool", domain=CONTRIB)
def qlinear_global_avg_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last=0):
    """The int32 sum over the spatial axes minus count * zero point, requantized by x_scale / (y_scale * count)."""
    dtype, sx, zx = _operand(x, x_scale, x_zero_point, "X")
    sy, zy = scalar(y_scale, "y_scale"), zero_point(y_zero_point, dtype, "y_zero_point")
    xc = _nchw(x, channels_last)
    if len(shape_of(xc)) < 3:
        raise ConversionError(f"input X must be at least 3-D, got shape {shape_of(x)}")
    axes = tuple(range(2, len(shape_of(xc))))
    count = math.prod(shape_of(xc)[2:])
    total = fold("sum", astype(xc, "int32"), axes=axes, keepdims=True)
    acc = binary("subtract", total, binary("multiply", astype(zx, "int32"), const(count, "int32")))
    multiplier = binary("divide", sx, binary("multiply", sy, const(float(count), "float32")))
    return _from_nchw(requantize(acc, multiplier, zy, dtype), channels_last)


@converter("QLinearAveragePool", domain=CONTRIB)
def qlinear_avg_pool(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, kernel_shape, auto_pad="NOTSET",
                     ceil_mode=0, channels_last=0, count_include_pad=0, pads=None, strides=None):
    """AveragePool of the dequantized input, quantized as round(y / y_scale + y_zero_point) (onnxruntime's kernel).
    With count_include_pad its kernel divides every window by the whole kernel size, also the windows that
    ceil_mode lets run past the padding: the input is zero-padded up to the last window's end, then pooled
    unpadded."""
    dtype, sx, zx = _operand(x, x_scale, x_zero_point, "X")
    xf = dequantize(_nchw(x, channels_last), sx, zx)
    if flag(count_include_pad, "count_include_pad") and len(shape_of(xf)) == 4:
        window = window_attrs(xf, kernel_shape, strides, None, auto_pad, pads)
        sizes = shape_of(xf)[2:]
        rank = len(sizes)
        begin, end = tuple(window["padding"][:rank]), list(window["padding"][rank:])
        for i, (size, k, st) in enumerate(zip(sizes, kernel_shape, window["strides"])):
            out = pool_out_size(size, k, st, 1, begin[i], end[i], bool(ceil_mode))
            end[i] = max(end[i], (out - 1) * st + k - size - begin[i])
        xf = fold("pad", xf, pads=(0, 0, *begin, 0, 0, *end))
        pooled = onnx_avg_pool(xf, kernel_shape=kernel_shape, strides=window["strides"])
    else:
        pooled = onnx_avg_pool(xf, kernel_shape=kernel_shape, auto_pad=auto_pad, ceil_mode=ceil_mode,
                               count_include_pad=count_include_pad, pads=pads, strides=strides)
    zy = zero_point(y_zero_point, dtype, "y_zero_point")
    lo, hi = Q8[dtype]
    y = fold("round", binary("add", binary("divide", pooled, scalar(y_scale, "y_scale")), astype(zy, "float32")))
    return _from_nchw(astype(fold("clip", y, a_min=float(lo), a_max=float(hi)), dtype), channels_last)


@converter("NhwcMaxPool", domain=CONTRIB)
def nhwc_max_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, strides=None):
    """MaxPool of an int8/uint8 NHWC tensor."""
    q8(x, "x")
    y = onnx_max_pool(_nchw(x, 1), kernel_shape=kernel_shape, auto_pad=auto_pad, ceil_mode=ceil_mode,
                      dilations=dilations, pads=pads, strides=strides)
    return _from_nchw(y[0] if isinstance(y, tuple) else y, 1)


# ---- QLinearConv ----

def _qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b, window, channels_last):
    """Conv of (x - x_zero_point) and (w - w_zero_point) in int32, plus the int32 bias, requantized per output
    channel by x_scale * w_scale / y_scale."""
    _, sx, zx = _operand(x, x_scale, x_zero_point, "x")
    q8(w, "w")
    if len(shape_of(w)) != 4:
        raise ConversionError(f"only 2-D QLinearConv (a 4-D weight) is supported, got weight shape {shape_of(w)}")
    out_type = q8(y_zero_point, "y_zero_point")
    channels = shape_of(w)[0]
    if w_scale.type.dtype != "float32" or math.prod(shape_of(w_scale)) not in (1, channels):
        raise ConversionError(f"w_scale must be one float32 value or one per output channel ({channels}), got "
                              f"{w_scale.type.dtype} of shape {shape_of(w_scale)}")
    xc = _nchw(x, channels_last)
    acc = conv_integer(xc, w, reshape(zx, (1,)), w_zero_point, **window)
    if b is not None:
        if b.type.dtype != "int32" or shape_of(b) != (channels,):
            raise ConversionError(f"input B must be int32 of shape ({channels},), got {b.type.dtype} {shape_of(b)}")
        acc = binary("add", acc, reshape(b, (channels, 1, 1)))
    ws = reshape(w_scale, () if math.prod(shape_of(w_scale)) == 1 else (channels, 1, 1))
    multiplier = binary("divide", binary("multiply", sx, ws), scalar(y_scale, "y_scale"))
    return _from_nchw(requantize(acc, multiplier, zero_point(y_zero_point, out_type, "y_zero_point"), out_type),
                      channels_last)


@converter("QLinearConv", since=10)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    return _qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b,
                         dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                              pads=pads, strides=strides), 0)


@converter("QLinearConv", domain=CONTRIB)
def qlinear_conv_contrib(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None, *,
                         auto_pad="NOTSET", channels_last=0, dilations=None, group=1, kernel_shape=None, pads=None,
                         strides=None):
    """onnxruntime's QLinearConv: ai.onnx's, with an NHWC form (channels_last; the weight stays OIHW)."""
    return _qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b,
                         dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                              pads=pads, strides=strides), channels_last)


# ---- com.microsoft QuantizeLinear / DequantizeLinear (ai.onnx's opset-13 forms) ----

@converter("QuantizeLinear", domain=CONTRIB)
def quantize_linear_contrib(x, y_scale, y_zero_point=None, *, axis=1):
    return quantize_linear(x, y_scale, y_zero_point, axis=axis)


@converter("DequantizeLinear", domain=CONTRIB)
def dequantize_linear_contrib(x, x_scale, x_zero_point=None, *, axis=1):
    return dequantize_linear(x, x_scale, x_zero_point, axis=axis)


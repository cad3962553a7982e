"""The integer products of quantized ops, built in one place for every converter that has one (ConvInteger,
QLinearConv, MatMulInteger, QLinearMatMul; onnxruntime's MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm):
the raw 8-bit product (relayish/ops/qnn.py: qnn.conv2d, qnn.matmul) and the zero-point terms subtracted from it
in int32, which fusion puts in the product's epilogue:

    sum_k (a - za)(b - zb) = sum_k a b  -  za sum_k b  -  zb sum_k a  +  K za zb

Exact, as onnxruntime's int32 accumulation (and wrapping as it does, mod 2^32). Weights are brought to the form
of VNNI's vpdpbusd, uint8 data times int8 weights, where that is free: a constant uint8 weight becomes int8 at
import (b - 128) with zb - 128 (int8 data is flipped to uint8 inside the packed kernels, compiler/passes/
layout.py). A term that is known to be zero is not built: with symmetric int8 weights (zb = 0,
onnxruntime's quantizers' default) only `za sum_k b` remains, a run-time scalar times a constant per output
channel. A convolution's padded taps read za (relayish's qnn.conv2d pads with its third input), so that
a - za is 0 there, as ConvInteger pads the shifted input with zeros; `sum_k a` of a convolution (only when
zb != 0) is the window sum of the padded data, a qnn.conv2d with weights of ones per group.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, call, const

from ..builders import astype, binary, fold, reshape, shape_of
from ..values import ConversionError

QUANT_TYPES = ("int8", "uint8")


def _known_zero(p: Expr | None) -> bool:
    return p is None or (isinstance(p, Constant) and not np.any(p.data))


def _int32(p: Expr, shift: int) -> Expr:
    """p (an 8-bit zero point) in int32, plus shift."""
    p32 = astype(p, "int32")
    return binary("add", p32, const(shift, "int32")) if shift else p32


def data_operand(x: Expr, zp: Expr | None) -> Expr | None:
    """x's zero point in int32, or None for 0. zp: None or broadcastable to the product (0-d, or per row)."""
    return None if _known_zero(zp) else astype(zp, "int32")


def weight_operand(w: Expr, zp: Expr | None) -> tuple[Expr, Expr | None]:
    """(w, its zero point in int32 or None for 0): a constant uint8 weight as int8 (w - 128) with zp - 128."""
    if isinstance(w, Constant) and w.type.dtype == "uint8":
        shifted = Constant((w.data.astype(np.int16) - 128).astype(np.int8))
        zp32 = const(-128, "int32") if zp is None else _int32(zp, -128)
        return shifted, None if _known_zero(zp32) else zp32
    return w, None if _known_zero(zp) else astype(zp, "int32")


def _sum(x: Expr, axes: tuple, keepdims: bool = True) -> Expr:
    return fold("sum", astype(x, "int32"), axes=axes, keepdims=keepdims)


def integer_matmul(a: Expr, a_zp: Expr | None, b: Expr, b_zp: Expr | None) -> Expr:
    """(a - a_zp) @ (b - b_zp) in int32, numpy matmul semantics (1-D operands promoted, then squeezed). a_zp: None,
    0-d or per row of a ([M, 1]); b_zp: None, 0-d or per column of b ([N])."""
    for name, v in (("A", a), ("B", b)):
        if v.type.dtype not in QUANT_TYPES:
            raise ConversionError(f"input {name} must be int8 or uint8, got {v.type.dtype}")
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        raise ConversionError(f"the operands must be at least 1-D, got shapes {sa} and {sb}")
    a2 = reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape(b, sb + (1,)) if len(sb) == 1 else b
    za = data_operand(a2, a_zp)
    b2, zb = weight_operand(b2, b_zp)
    y = call("qnn.matmul", a2, b2)
    k = shape_of(a2)[-1]
    if za is not None:  # za * sum_k b: [.., 1, N], a constant for a constant b
        y = binary("subtract", y, binary("multiply", za, _sum(b2, (len(shape_of(b2)) - 2,))))
    if zb is not None:  # zb * sum_k a: [.., M, 1]
        y = binary("subtract", y, binary("multiply", zb, _sum(a2, (len(shape_of(a2)) - 1,))))
        if za is not None:
            y = binary("add", y, binary("multiply", binary("multiply", za, zb), const(k, "int32")))
    out = shape_of(y)
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return reshape(y, out)


def integer_conv(x: Expr, w: Expr, x_zp: Expr | None, w_zp: Expr | None, groups: int, window: dict) -> Expr:
    """conv(x - x_zp, w - w_zp) in int32, NCHW / OIHW, the shifted input padded with zeros. x_zp: None or 0-d;
    w_zp: None, 0-d or one per output channel ([O]). window: strides, padding, dilation (builders.window_attrs)."""
    o, cg, kh, kw = shape_of(w)
    zx = data_operand(x, x_zp)
    w, zw = weight_operand(w, w_zp)
    pad = const(0, x.type.dtype) if x_zp is None else x_zp
    y = call("qnn.conv2d", x, w, pad, groups=groups, **window)
    if zw is not None and len(shape_of(zw)) == 1:
        zw = reshape(zw, (o, 1, 1))
    if zx is not None:  # zx * sum of each output channel's weights
        y = binary("subtract", y, binary("multiply", zx, reshape(_sum(w, (1, 2, 3), False), (o, 1, 1))))
    if zw is not None:  # zw * the window sums of x, per group
        ones = Constant(np.ones((groups, cg, kh, kw), np.int8))
        sums = call("qnn.conv2d", x, ones, pad, groups=groups, **window)
        if groups > 1:
            sums = fold("take", sums, Constant(np.arange(o, dtype=np.int64) // (o // groups)), axis=1)
        y = binary("subtract", y, binary("multiply", zw, sums))
        if zx is not None:
            y = binary("add", y, binary("multiply", binary("multiply", zx, zw), const(cg * kh * kw, "int32")))
    return y

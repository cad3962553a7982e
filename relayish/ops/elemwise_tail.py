"""The long tail of elementwise ops, second part: trigonometry (float inputs; the intrinsics compute in double and
round once), NaN / infinity tests (bool results), and bitwise operations and shifts on integers of any width and
signedness (they wrap as the bits do; a shift by an amount outside [0, bits) is defined as ONNX BitShift-28
defines it: every bit leaves, giving 0, or for a right shift of a negative value its sign fill -1), and bitcast
(a value's bits read as another dtype of its width)."""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..op import OpError, Pattern, REQUIRED, register_op
from ..types import DTYPES, TensorType, numpy_dtype
from .common import expect_float
from .math import _broadcast_op

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _elementwise(name, ref, scalar, check, out_dtype=None, attrs=None, doc=""):
    """Register a unary elementwise op: check(name, input type) raises OpError on a dtype it refuses; the output
    has the input's shape and out_dtype (None: the input's dtype)."""
    def infer(arg_types, attrs):
        check(name, arg_types[0])
        return TensorType(arg_types[0].shape, out_dtype or arg_types[0].dtype)

    def compute(inputs, attrs, out_type):
        x, = inputs
        return te.compute(x.shape, lambda *i: scalar(x[i], attrs), name=name, tag="elemwise", dtype=out_type.dtype)

    register_op(name, inputs=1, pattern=Pattern.ELEMWISE, op_class="elementwise", infer=infer, ref=ref,
                compute=compute, attrs=attrs, doc=doc)


def _expect_int(op: str, t: TensorType, what: str = "input"):
    if t.dtype not in INT_DTYPES:
        raise OpError(f"{op}: {what} must be an integer tensor ({', '.join(INT_DTYPES)}), got {t.dtype}")


def _f64(fn):
    """A float64 reference returned in the input's dtype (the compiled code rounds once, from double). NaN
    results (of infinities, of asin / acos outside [-1, 1]) are the answer, not an error: no warning."""
    def ref(x):
        with np.errstate(invalid="ignore"):
            return fn(x.astype(np.float64)).astype(x.dtype)
    return ref


# ---------------------------------------------------------------------------------------------- trigonometry

for _name, _np, _te, _doc in (("sin", np.sin, te.sin, "sine"), ("cos", np.cos, te.cos, "cosine"),
                              ("tan", np.tan, te.tan, "tangent"),
                              ("asin", np.arcsin, te.asin, "arcsine (NaN outside [-1, 1])"),
                              ("acos", np.arccos, te.acos, "arccosine (NaN outside [-1, 1])"),
                              ("atan", np.arctan, te.atan, "arctangent")):
    _elementwise(_name, _f64(_np), lambda v, a, fn=_te: fn(v), expect_float, doc=_doc)


# ---------------------------------------------------------------------------------------------- NaN and infinity

def _isinf_ref(x, detect_negative, detect_positive):
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


def _isinf_scalar(v, attrs):
    inf = te.const(math.inf, v.dtype)
    if attrs.detect_negative and attrs.detect_positive:
        return te.eq(te.fabs(v), inf)
    if attrs.detect_positive:
        return te.eq(v, inf)
    if attrs.detect_negative:
        return te.eq(v, -inf)
    return te.all_of(te.eq(v, inf), te.eq(v, -inf))  # never: detects nothing (still reads x, as every stage does)


_elementwise("isnan", np.isnan, lambda v, a: te.ne(v, v), expect_float, out_dtype="bool",
             doc="x is NaN (bool)")
_elementwise("isinf", _isinf_ref, _isinf_scalar, expect_float, out_dtype="bool",
             attrs={"detect_negative": 1, "detect_positive": 1},
             doc="x is -inf (if detect_negative) or +inf (if detect_positive) (bool)")


# ---------------------------------------------------------------------------------------------- bitwise

_elementwise("bitwise_not", np.invert, lambda v, a: te.bitwise_xor(v, te.const(-1, v.dtype)), _expect_int,
             doc="~x (integers)")
_broadcast_op("bitwise_and", np.bitwise_and, lambda x, y, a: te.bitwise_and(x, y), dtypes=INT_DTYPES,
              doc="a & b (integers)")
_broadcast_op("bitwise_or", np.bitwise_or, lambda x, y, a: te.bitwise_or(x, y), dtypes=INT_DTYPES,
              doc="a | b (integers)")
_broadcast_op("bitwise_xor", np.bitwise_xor, lambda x, y, a: te.bitwise_xor(x, y), dtypes=INT_DTYPES,
              doc="a ^ b (integers)")


def _check_direction(direction):
    if direction not in ("LEFT", "RIGHT"):
        raise OpError(f"bit_shift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")


def _shift_ref(x, y, direction):
    """x shifted by y: bits that leave are dropped; an amount outside [0, bits) gives 0, or -1 for a right shift
    of a negative x (an arithmetic shift fills with the sign)."""
    _check_direction(direction)
    x, y = np.broadcast_arrays(x, y)
    bits = x.dtype.itemsize * 8
    inside = (y >= 0) & (y < bits)
    amount = np.where(inside, y, 0).astype(x.dtype)
    if direction == "LEFT":  # on the unsigned view: a signed left shift wraps as the bits do
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        shifted = np.left_shift(x.view(unsigned), amount.view(unsigned)).view(x.dtype)
        return np.where(inside, shifted, 0).astype(x.dtype)
    fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else 0
    return np.where(inside, np.right_shift(x, amount), fill).astype(x.dtype)


def _shift_scalar(x, y, attrs):
    _check_direction(attrs.direction)
    return te.shift_left(x, y) if attrs.direction == "LEFT" else te.shift_right(x, y)


_broadcast_op("bit_shift", _shift_ref, _shift_scalar, dtypes=INT_DTYPES, attrs={"direction": REQUIRED},
              doc="x << y (direction LEFT) or x >> y (RIGHT: arithmetic on signed dtypes); an amount outside "
                  "[0, bits) shifts every bit out")


# ---------------------------------------------------------------------------------------------- bit patterns

def _bitcast_infer(arg_types, attrs):
    src, dst = arg_types[0].dtype, attrs.dtype
    if dst not in DTYPES:
        raise OpError(f"bitcast: dtype must be one of {', '.join(DTYPES)}, got {dst!r}")
    if numpy_dtype(src).itemsize != numpy_dtype(dst).itemsize:
        raise OpError(f"bitcast: {src} and {dst} differ in width ({numpy_dtype(src).itemsize * 8} and "
                      f"{numpy_dtype(dst).itemsize * 8} bits)")
    return TensorType(arg_types[0].shape, dst)


def _bitcast_ref(x, dtype):
    out = np.ascontiguousarray(x).view(numpy_dtype(dtype))
    return out != 0 if dtype == "bool" else out  # a nonzero byte read as bool is true (and stored as 1)


register_op("bitcast", inputs=1, pattern=Pattern.ELEMWISE, op_class="elementwise", infer=_bitcast_infer,
            ref=_bitcast_ref, attrs={"dtype": REQUIRED},
            compute=lambda inputs, attrs, out: te.compute(
                out.shape, lambda *i: te.bitcast(out.dtype, inputs[0][i]), name="bitcast", tag="elemwise",
                dtype=out.dtype),
            doc="the bits of x read as dtype, of the same width (little endian): no value conversion")

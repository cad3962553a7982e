"""Elementwise math that transformers need: abs, log, reciprocal, erf, power, mod, comparisons (bool results) and
logical ops on bool tensors."""
from __future__ import annotations

import numpy as np

from .. import te
from ..intrinsics import get_intrinsic
from ..types import TensorType, is_float
from ..op import OpError, Pattern, register_op
from .common import broadcast_index, broadcast_shape, same_dtype
from .elemwise import _unary

_unary("abs", np.abs, lambda v, a: te.fabs(v) if is_float(v.dtype) else te.max_(v, -v), doc="|x|")
_unary("log", np.log, lambda v, a: te.log(v), doc="natural logarithm")
_unary("reciprocal", lambda x: (np.float32(1) / x).astype(x.dtype), lambda v, a: te.const(1.0, v.dtype) / v,
       doc="1 / x")
_unary("erf", lambda x: get_intrinsic("erf").numpy(x).astype(x.dtype), lambda v, a: te.erf(v),
       doc="the error function")


def _broadcast_op(name, ref, scalar, out_dtype=None, dtypes=None, attrs=None, doc=""):
    """Register a binary op broadcast as in numpy: scalar(a, b, attrs) on the two elements. out_dtype None: the
    inputs' dtype; dtypes: the input dtypes allowed (None: any)."""
    def infer(arg_types, attrs):
        a, b = arg_types
        dtype = same_dtype(name, arg_types)
        if dtypes is not None and dtype not in dtypes:
            raise OpError(f"{name}: inputs must be {' or '.join(dtypes)}, got {dtype}")
        return TensorType(broadcast_shape(name, a.shape, b.shape), out_dtype or dtype)

    def compute(inputs, attrs, out_type):
        a, b = inputs
        nd = len(out_type.shape)
        return te.compute(out_type.shape,
                          lambda *i: scalar(broadcast_index(a, i, nd), broadcast_index(b, i, nd), attrs),
                          name=name, tag="broadcast", dtype=out_type.dtype)

    register_op(name, inputs=2, pattern=Pattern.BROADCAST, op_class="elementwise", infer=infer, ref=ref,
                compute=compute, attrs=attrs, doc=doc)


def _power_scalar(x, y, attrs):
    """Integers: powf of the values as floats, rounded to the nearest integer (exact while it fits 24 bits)."""
    if is_float(x.dtype):
        return te.power(x, y)
    value = te.power(te.cast("float32", x), te.cast("float32", y))
    return te.cast(x.dtype, te.floor(value + 0.5))


def _power_ref(a, b):
    if is_float(a.dtype):
        return np.power(a, b)
    return np.floor(np.power(a.astype(np.float64), b.astype(np.float64)) + 0.5).astype(a.dtype)


_broadcast_op("power", _power_ref, _power_scalar, dtypes=("float32", "float64", "int32", "int64"),
              doc="a ** b (integers: computed in float32, rounded)")


def _mod_ref(a, b, fmod):
    if fmod:
        return np.fmod(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mod(a, b)


def _trunc_rem(x, y):
    """C's fmod(x, y) on floats: x - y * trunc(x / y) (one FMA), and x itself for a finite x and an infinite y
    (where y * trunc(x / y) is inf * 0)."""
    q = x / y
    r = x - y * te.select(q < 0.0, te.ceil(q), te.floor(q))
    inf = te.const(float("inf"), x.dtype)
    return te.select(te.all_of(te.eq(te.fabs(y), inf), te.ne(te.fabs(x), inf)), x, r)


def _mod_scalar(x, y, attrs):
    """fmod=0: the sign of the divisor (Python %); fmod=1: the sign of the dividend (C fmod)."""
    if is_float(x.dtype):
        r = _trunc_rem(x, y)
        if attrs.fmod:
            return r
        # numpy's floor mod: a remainder of the dividend's sign moves by one divisor (so -3 mod inf is inf), and a
        # zero remainder takes the divisor's sign; NaN (x infinite, y zero or NaN operands) stays NaN
        zero = te.const(0.0, x.dtype)
        moved = te.select(te.all_of(te.ne(r, zero), te.ne(r < 0.0, y < 0.0)), r + y, r)
        return te.select(te.eq(r, zero), te.select(y < 0.0, te.const(-0.0, x.dtype), zero), moved)
    if not attrs.fmod:
        return x % y
    r = x % y  # floor mod: C's remainder is r - y when r != 0 and x, y have different signs
    return te.select(te.all_of(te.ne(r, te.const(0, x.dtype)), te.ne(x < 0, y < 0)), r - y, r)


_broadcast_op("mod", _mod_ref, _mod_scalar, attrs={"fmod": 0},
              doc="remainder: fmod=0 takes the divisor's sign (as numpy.mod), fmod=1 the dividend's (as numpy.fmod)")

# ---------------------------------------------------------------------------------------------- comparisons

_broadcast_op("equal", np.equal, lambda x, y, a: te.eq(x, y), out_dtype="bool", doc="a == b")
_broadcast_op("less", np.less, lambda x, y, a: x < y, out_dtype="bool", doc="a < b")
_broadcast_op("greater", np.greater, lambda x, y, a: x > y, out_dtype="bool", doc="a > b")
_broadcast_op("less_equal", np.less_equal, lambda x, y, a: x <= y, out_dtype="bool", doc="a <= b")
_broadcast_op("greater_equal", np.greater_equal, lambda x, y, a: x >= y, out_dtype="bool", doc="a >= b")
_broadcast_op("logical_and", np.logical_and, lambda x, y, a: te.all_of(x, y), dtypes=("bool",), doc="a and b")
_broadcast_op("logical_or", np.logical_or, lambda x, y, a: te.any_of(x, y), dtypes=("bool",), doc="a or b")
_broadcast_op("logical_xor", np.logical_xor, lambda x, y, a: te.ne(x, y), dtypes=("bool",), doc="a xor b")


def _not_infer(arg_types, attrs):
    if arg_types[0].dtype != "bool":
        raise OpError(f"logical_not: input must be bool, got {arg_types[0].dtype}")
    return arg_types[0]


register_op("logical_not", inputs=1, pattern=Pattern.ELEMWISE, op_class="elementwise", infer=_not_infer,
            ref=np.logical_not, compute=lambda inputs, attrs, out: te.compute(
                out.shape, lambda *i: te.logical_not(inputs[0][i]), name="logical_not", tag="elemwise"),
            doc="not x (bool)")

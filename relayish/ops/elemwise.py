"""Elementwise and broadcast arithmetic."""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType, is_float
from ..op import Pattern, register_op
from .common import broadcast_index, broadcast_shape, same_dtype


def _unary_infer(arg_types, attrs):
    return arg_types[0]


def _unary(name, ref, scalar, attrs=None, doc=""):
    """Register an elementwise op given its numpy reference and its scalar te expression scalar(x, attrs)."""
    def compute(inputs, attrs, out_type):
        x, = inputs
        return te.compute(x.shape, lambda *i: scalar(x[i], attrs), name=name.replace("nn.", ""), tag="elemwise")

    register_op(name, inputs=1, pattern=Pattern.ELEMWISE, op_class="elementwise", infer=_unary_infer, ref=ref,
                compute=compute, attrs=attrs, doc=doc)


def _f32(x):
    return np.asarray(x, dtype=np.float32)


_unary("nn.relu", lambda x: np.maximum(x, 0).astype(x.dtype), lambda v, a: te.max_(v, te.const(0, v.dtype)),
       doc="max(x, 0)")
_unary("nn.leaky_relu", lambda x, alpha: np.where(x >= 0, x, x * np.float32(alpha)).astype(x.dtype),
       lambda v, a: te.select(v >= 0.0, v, v * float(a.alpha)), attrs={"alpha": 0.01}, doc="x if x >= 0 else alpha x")
def _int_bounds(dtype, a_min: float, a_max: float) -> tuple[int, int]:
    """Float clip bounds as the integers of `dtype` that they admit (an infinite bound: the dtype's limit)."""
    info = np.iinfo(dtype)
    lo = info.min if a_min < info.min else int(np.ceil(a_min))
    hi = info.max if a_max > info.max else int(np.floor(a_max))
    return lo, hi


def _clip_ref(x, a_min, a_max):
    if is_float(x.dtype):
        return np.clip(x, np.float32(a_min), np.float32(a_max)).astype(x.dtype)
    return np.clip(x, *_int_bounds(x.dtype, a_min, a_max)).astype(x.dtype)


def _clip_scalar(v, a):
    if is_float(v.dtype):
        return te.min_(te.max_(v, float(a.a_min)), float(a.a_max))
    lo, hi = _int_bounds(v.dtype, a.a_min, a.a_max)
    return te.min_(te.max_(v, te.const(lo, v.dtype)), te.const(hi, v.dtype))


_unary("clip", _clip_ref, _clip_scalar,
       attrs={"a_min": float("-inf"), "a_max": float("inf")}, doc="min(max(x, a_min), a_max)")
_unary("sigmoid", lambda x: _f32(1.0 / (1.0 + np.exp(-x.astype(np.float64)))), lambda v, a: te.sigmoid(v),
       doc="1 / (1 + exp(-x))")
_unary("hard_sigmoid",
       lambda x, alpha, beta: np.clip(x * np.float32(alpha) + np.float32(beta), 0, 1).astype(x.dtype),
       lambda v, a: te.max_(te.min_(v * float(a.alpha) + float(a.beta), 1.0), 0.0),
       attrs={"alpha": 0.2, "beta": 0.5}, doc="max(0, min(1, alpha x + beta))")
_unary("tanh", lambda x: np.tanh(x), lambda v, a: te.tanh(v), doc="tanh(x)")
_unary("exp", lambda x: np.exp(x), lambda v, a: te.exp(v), doc="e^x")
_unary("sqrt", lambda x: np.sqrt(x), lambda v, a: te.sqrt(v), doc="square root")
_unary("negative", lambda x: -x, lambda v, a: -v, doc="-x")
_unary("copy", lambda x: x.copy(), lambda v, a: v, doc="x (dropped by the identity pass)")


def _binary(name, ref, scalar):
    def infer(arg_types, attrs):
        a, b = arg_types
        return TensorType(broadcast_shape(name, a.shape, b.shape), same_dtype(name, arg_types))

    def compute(inputs, attrs, out_type):
        a, b = inputs
        nd = len(out_type.shape)
        return te.compute(out_type.shape,
                          lambda *i: scalar(broadcast_index(a, i, nd), broadcast_index(b, i, nd)),
                          name=name, tag="broadcast")

    register_op(name, inputs=2, pattern=Pattern.BROADCAST, op_class="elementwise", infer=infer, ref=ref,
                compute=compute, doc="a, b broadcast as in numpy")


_binary("add", np.add, lambda x, y: x + y)
_binary("subtract", np.subtract, lambda x, y: x - y)
_binary("multiply", np.multiply, lambda x, y: x * y)
def _divide_ref(a, b):
    """ONNX Div: true division on floats; on integers the quotient truncated toward zero (C, not Python's floor),
    and 0 where the divisor is 0 (undefined in ONNX; numpy's answer, and compiled code's: it never traps)."""
    if is_float(a.dtype):
        return np.divide(a, b)
    with np.errstate(divide="ignore"):
        q = np.floor_divide(a, b)
    return q + ((q * b != a) & ((a < 0) != (b < 0)) & (b != 0)).astype(q.dtype)


def _divide(x, y):
    if is_float(x.dtype):
        return x / y
    q = x // y  # floor (codegen: 0 for a zero divisor); one up where the exact quotient was negative
    inexact = te.all_of(te.ne(q * y, x), te.ne(x < 0, y < 0), te.ne(y, te.const(0, y.dtype)))
    return q + te.select(inexact, te.const(1, x.dtype), te.const(0, x.dtype))


_binary("divide", _divide_ref, _divide)
_binary("maximum", np.maximum, te.max_)
_binary("minimum", np.minimum, te.min_)

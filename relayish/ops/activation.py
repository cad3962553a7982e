"""The long tail of elementwise activations and rounding: each op is a numpy reference (computed in float64,
returned in the input's float32) and a scalar te expression built from the intrinsics that exist (exp, log, sqrt,
tanh, fabs, floor, ceil, roundeven): no new codegen. Formulas are chosen to stay accurate where the naive one is not
(softplus never overflows, asinh is odd by construction, round ties to even by roundeven)."""
from __future__ import annotations

import numpy as np

from .. import te
from .elemwise import _binary, _unary


def _f64(fn):
    """A float64 reference returned in the input's dtype."""
    return lambda x, **attrs: fn(x.astype(np.float64), **attrs).astype(x.dtype)


def _softplus(v):
    """log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): the exponent is never positive, so nothing overflows."""
    return te.max_(v, 0.0) + te.log(te.exp(-te.fabs(v)) + 1.0)


def _round_half_even(v):
    """The nearest integer, ties to even: llvm.roundeven, one instruction (vrndscaleps) where floor is one. It is in
    every requantization epilogue of an int8 model; written with floor it took ten vector operations there."""
    return te.intrin("roundeven", v)


def _expm1_below_zero(v, alpha):
    """alpha (e^x - 1) for x < 0, x otherwise (ELU)."""
    return te.select(v < 0.0, (te.exp(v) - 1.0) * alpha, v)


_unary("floor", _f64(np.floor), lambda v, a: te.floor(v), doc="largest integer <= x")
_unary("ceil", _f64(np.ceil), lambda v, a: te.ceil(v), doc="smallest integer >= x")
_unary("round", _f64(np.round), lambda v, a: _round_half_even(v), doc="nearest integer, ties to even")
_unary("sign", _f64(np.sign), lambda v, a: te.select(v > 0.0, 1.0, te.select(v < 0.0, -1.0, v)),
       doc="1, -1 or 0 (NaN stays NaN)")
_unary("nn.elu", _f64(lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x)),
       lambda v, a: _expm1_below_zero(v, float(a.alpha)), attrs={"alpha": 1.0}, doc="x if x >= 0 else alpha (e^x - 1)")
_unary("nn.selu", _f64(lambda x, alpha, gamma: gamma * np.where(x <= 0, alpha * np.expm1(x), x)),
       lambda v, a: _expm1_below_zero(v, float(a.alpha)) * float(a.gamma),
       attrs={"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}, doc="gamma * elu(x, alpha)")
_unary("nn.celu", _f64(lambda x, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))),
       lambda v, a: te.max_(v, 0.0) + te.min_((te.exp(v / float(a.alpha)) - 1.0) * float(a.alpha), 0.0),
       attrs={"alpha": 1.0}, doc="max(0, x) + min(0, alpha (e^(x / alpha) - 1))")
_unary("nn.softplus", _f64(lambda x: np.logaddexp(0, x)), lambda v, a: _softplus(v), doc="log(1 + e^x)")
_unary("nn.softsign", _f64(lambda x: x / (1 + np.abs(x))), lambda v, a: v / (te.fabs(v) + 1.0), doc="x / (1 + |x|)")
_unary("nn.hard_swish", _f64(lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
       lambda v, a: v * te.max_(te.min_(v * (1 / 6) + 0.5, 1.0), 0.0), doc="x max(0, min(1, x / 6 + 1 / 2))")
_unary("nn.mish", _f64(lambda x: x * np.tanh(np.logaddexp(0, x))), lambda v, a: v * te.tanh(_softplus(v)),
       doc="x tanh(softplus(x))")
_unary("nn.thresholded_relu", _f64(lambda x, alpha: np.where(x > alpha, x, 0)),
       lambda v, a: te.select(v > float(a.alpha), v, 0.0), attrs={"alpha": 1.0}, doc="x if x > alpha else 0")
_unary("nn.shrink", _f64(lambda x, lambd, bias: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))),
       lambda v, a: te.select(v < -float(a.lambd), v + float(a.bias),
                              te.select(v > float(a.lambd), v - float(a.bias), 0.0)),
       attrs={"lambd": 0.5, "bias": 0.0}, doc="x + bias if x < -lambd, x - bias if x > lambd, else 0")
_unary("sinh", _f64(np.sinh), lambda v, a: (te.exp(v) - te.exp(-v)) * 0.5, doc="(e^x - e^-x) / 2")
_unary("cosh", _f64(np.cosh), lambda v, a: (te.exp(v) + te.exp(-v)) * 0.5, doc="(e^x + e^-x) / 2")
_unary("asinh", _f64(np.arcsinh),
       lambda v, a: te.select(v < 0.0, -1.0, 1.0) * te.log(te.fabs(v) + te.sqrt(v * v + 1.0)),
       doc="sign(x) log(|x| + sqrt(x^2 + 1))")
_unary("acosh", _f64(np.arccosh), lambda v, a: te.log(v + te.sqrt(v * v - 1.0)), doc="log(x + sqrt(x^2 - 1))")
_unary("atanh", _f64(np.arctanh), lambda v, a: te.log((v + 1.0) / (1.0 - v)) * 0.5,
       doc="log((1 + x) / (1 - x)) / 2")
_binary("nn.prelu", lambda x, slope: np.where(x < 0, x * slope, x).astype(x.dtype),
        lambda x, slope: te.select(x < 0.0, x * slope, x))

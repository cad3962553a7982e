"""Converters of the elementwise ONNX ops: arithmetic (Add, Sub, Mul, Div, Sum, Max, Min, Mean, Pow, Mod), math
(Exp, Log, Sqrt, Erf, Abs, Reciprocal, Neg, rounding, trigonometric and hyperbolic functions), activations (Relu,
LeakyRelu, Sigmoid, HardSigmoid, Tanh, Clip, Gelu, Elu, Selu, Celu, ThresholdedRelu, Shrink, PRelu, Softplus,
Softsign, HardSwish, Mish), comparisons and logic (bool results, Where), IsNaN / IsInf, bitwise ops, Cast, CastLike
and BitCast: mostly one line of relayish per op (relayish/ops/elemwise.py, activation.py and elemwise_tail.py hold
the ops). Conventions: frontends/onnx/registry.py.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from relayish import Constant, Expr, call
from relayish.types import DTYPES, is_float, numpy_dtype

from ..builders import binary, fold, is_const, scalar_like
from ..registry import converter
from ..values import ConversionError, scalar_input


# ---- arithmetic and activations ----

@converter("Relu")
def relu(x):
    return call("nn.relu", x)


@converter("LeakyRelu")
def leaky_relu(x, *, alpha=0.01):
    return call("nn.leaky_relu", x, alpha=alpha)


@converter("Sigmoid")
def sigmoid(x):
    return call("sigmoid", x)


@converter("HardSigmoid", since=6)
def hard_sigmoid(x, *, alpha=0.2, beta=0.5):
    return call("hard_sigmoid", x, alpha=alpha, beta=beta)


@converter("Tanh")
def tanh(x):
    return call("tanh", x)


@converter("Exp")
def exp(x):
    return call("exp", x)


@converter("Sqrt")
def sqrt(x):
    return call("sqrt", x)


@converter("Neg")
def neg(x):
    return call("negative", x)


@converter("Clip")
def clip_v1(x, *, min=-math.inf, max=math.inf):  # noqa: A002  (ONNX's attribute names)
    return call("clip", x, a_min=float(min), a_max=float(max))


@converter("Clip", since=11)
def clip_v11(x, min=None, max=None):  # noqa: A002
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and bound.type.dtype != x.type.dtype:
            raise ConversionError(f"input {name!r} is {bound.type.dtype}, but input 'input' is {x.type.dtype}")
    lo = -math.inf if min is None else scalar_input(min, "min")
    hi = math.inf if max is None else scalar_input(max, "max")
    return call("clip", x, a_min=lo, a_max=hi)


@converter("Add")
def add(a, b):
    return binary("add", a, b)


@converter("Sub")
def sub(a, b):
    return binary("subtract", a, b)


@converter("Mul")
def mul(a, b):
    return binary("multiply", a, b)


@converter("Div")
def div(a, b):
    return binary("divide", a, b)


def _chain(op: str, inputs) -> Expr:
    out = inputs[0]
    for x in inputs[1:]:
        out = binary(op, out, x)
    return out


@converter("Sum")
def sum_(*inputs):
    return _chain("add", inputs)


@converter("Max")
def max_(*inputs):
    return _chain("maximum", inputs)


@converter("Min")
def min_(*inputs):
    return _chain("minimum", inputs)


@converter("Mean")
def mean(*inputs):
    total = _chain("add", inputs)
    return binary("divide", total, scalar_like(len(inputs), total))


# ---- math ----

@converter("Erf", since=9)
def erf(x):
    return fold("erf", x)


@converter("Abs")
def abs_(x):
    return fold("abs", x)


@converter("Log")
def log(x):
    return fold("log", x)


@converter("Reciprocal")
def reciprocal(x):
    return fold("reciprocal", x)


@converter("Pow")
def pow_(x, y):
    """The exponent may have another dtype than the base (ONNX's T1, T2): it is converted to the base's."""
    if y.type.dtype != x.type.dtype:
        y = fold("cast", y, dtype=x.type.dtype)
    return fold("power", x, y)


@converter("Mod", since=10)
def mod(a, b, *, fmod=0):
    if not fmod and is_float(a.type.dtype):
        raise ConversionError("fmod=0 on float inputs is defined by ONNX from opset 28 only (before, float inputs "
                              "need fmod=1)")
    return fold("mod", a, b, fmod=int(fmod))


@converter("Mod", since=28)
def mod_v28(a, b, *, fmod=0):
    """fmod=0 on floats: numpy.mod's floor remainder (the divisor's sign)."""
    return fold("mod", a, b, fmod=int(fmod))


@converter("Gelu", since=20)
def gelu(x, *, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ConversionError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return fold("nn.gelu", x, approximate=approximate)


# ---- comparisons and logic (bool results) ----

def _compare(op):
    return lambda a, b: fold(op, a, b)


for _onnx, _op in (("Equal", "equal"), ("Less", "less"), ("Greater", "greater"), ("LessOrEqual", "less_equal"),
                   ("GreaterOrEqual", "greater_equal"), ("And", "logical_and"), ("Or", "logical_or"),
                   ("Xor", "logical_xor")):
    converter(_onnx, since=12 if "OrEqual" in _onnx else 7)(_compare(_op))


@converter("Not")
def not_(x):
    return fold("logical_not", x)


@converter("Where", since=9)
def where(condition, x, y):
    return fold("where", condition, x, y)


# ---- casts ----

@converter("Cast")
def cast(x, *, to, saturate=1):
    """saturate only concerns float8 targets, which are refused (as are float4, int4 and int2)."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(to)).name
    if dtype not in DTYPES:
        raise ConversionError(f"casting to {dtype} is not supported (float8, float4, int4 and int2 types are not; "
                              f"supported: {', '.join(DTYPES)})")
    if is_const(x):
        return Constant(x.data.astype(numpy_dtype(dtype)))
    return x if dtype == x.type.dtype else call("cast", x, dtype=dtype)


@converter("CastLike", since=15)
def cast_like(x, target_type, *, saturate=1):
    """Cast to target_type's element type (its values are not read)."""
    dtype = np.dtype(numpy_dtype(target_type.type.dtype)).name
    return cast(x, to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), saturate=saturate)


# ---- the long tail of activations, rounding and hyperbolic functions, PRelu ----

def _simple(op_type: str, op: str, since: int):
    """Register op_type (an attribute-less unary ONNX op) as the relayish op."""
    converter(op_type, since=since)(lambda x: call(op, x))


for _onnx, _op, _since in (("Floor", "floor", 6), ("Ceil", "ceil", 6), ("Round", "round", 11), ("Sign", "sign", 9),
                           ("Softplus", "nn.softplus", 1), ("Softsign", "nn.softsign", 1),
                           ("HardSwish", "nn.hard_swish", 14), ("Mish", "nn.mish", 18), ("Sinh", "sinh", 9),
                           ("Cosh", "cosh", 9), ("Asinh", "asinh", 9), ("Acosh", "acosh", 9), ("Atanh", "atanh", 9)):
    _simple(_onnx, _op, _since)


@converter("Elu", since=6)
def elu(x, *, alpha=1.0):
    return call("nn.elu", x, alpha=alpha)


@converter("Selu", since=6)
def selu(x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return call("nn.selu", x, alpha=alpha, gamma=gamma)


@converter("Celu", since=12)
def celu(x, *, alpha=1.0):
    if alpha == 0:
        raise ConversionError("alpha must not be 0 (Celu divides by it)")
    return call("nn.celu", x, alpha=alpha)


@converter("ThresholdedRelu", since=10)
def thresholded_relu(x, *, alpha=1.0):
    return call("nn.thresholded_relu", x, alpha=alpha)


@converter("Shrink", since=9)
def shrink(x, *, bias=0.0, lambd=0.5):
    return call("nn.shrink", x, lambd=lambd, bias=bias)


@converter("PRelu", since=7)
def prelu(x, slope):
    """slope broadcasts to x (ONNX's unidirectional broadcasting): the output has x's shape."""
    y = call("nn.prelu", x, slope)
    if y.type.shape != x.type.shape:
        raise ConversionError(f"slope of shape {slope.type.shape} does not broadcast to X's shape {x.type.shape}")
    return y


# ---- elementwise long tail (conf-elemwise): trigonometry, NaN / infinity tests, bitwise ops (relayish/ops/
# elemwise_tail.py). Constant inputs are evaluated at import with the op's reference (`fold`).

for _onnx, _op in (("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "asin"), ("Acos", "acos"),
                   ("Atan", "atan")):
    _simple(_onnx, _op, 7)


@converter("IsNaN", since=9)
def isnan(x):
    return fold("isnan", x)


@converter("IsInf", since=10)
def isinf(x, *, detect_negative=1, detect_positive=1):
    return fold("isinf", x, detect_negative=int(bool(detect_negative)), detect_positive=int(bool(detect_positive)))


@converter("BitShift", since=11)
def bit_shift(x, y, *, direction):
    if direction not in ("LEFT", "RIGHT"):
        raise ConversionError(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return fold("bit_shift", x, y, direction=direction)


@converter("BitwiseNot", since=18)
def bitwise_not(x):
    return fold("bitwise_not", x)


for _onnx, _op in (("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"), ("BitwiseXor", "bitwise_xor")):
    converter(_onnx, since=18)(lambda a, b, op=_op: fold(op, a, b))


def onnx_dtype_name(elem_type: int) -> str:
    """The numpy name of an ONNX element type ('float32', 'float8_e4m3fn', ...)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        raise ConversionError(f"unknown ONNX element type {elem_type}") from None


@converter("BitCast", since=26)
def bit_cast(x, *, to):
    dtype = onnx_dtype_name(to)
    if dtype not in DTYPES:
        raise ConversionError(f"BitCast to {dtype} is not supported (supported: {', '.join(DTYPES)})")
    return fold("bitcast", x, dtype=dtype)

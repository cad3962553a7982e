"""Converters of the long tail of elementwise ONNX ops (activations, rounding, hyperbolic and trigonometric
functions, PRelu, IsNaN / IsInf, bitwise ops, BitCast): one line of relayish per op, ONNX attributes with their ONNX defaults
(relayish/ops/activation.py and elemwise_tail.py hold the ops).
Their reviewed schema versions are in frontends/onnx_versions.py."""
from __future__ import annotations

import numpy as np
from onnx import helper

from relayish import call
from relayish.types import DTYPES

from ..builders import fold
from ..registry import converter
from ..values import ConversionError


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

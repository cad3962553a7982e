"""Recognize the decompositions exporters emit and replace them by the ops they spell out:

    # (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)          -> layer_norm(x, 1, 0)
    # layer_norm(x, 1, b0) * gamma   (gamma constant)             -> layer_norm(x, gamma, b0 * gamma)
    # layer_norm(x, g, b) + beta     (beta constant)              -> layer_norm(x, g, b + beta)
    # x * (erf(x / sqrt 2) + 1) * 0.5   (any order of the factors) -> gelu(x)
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))            -> gelu(x, approximate="tanh")
    # x ** 2, x ** 3                                               -> x * x, x * x * x

The mean is over trailing axes with keepdims (what LayerNormalization normalizes). Constants are compared with a
relative tolerance of 1e-6 (exporters write sqrt(2) and sqrt(2/pi) in float32). One kernel instead of a chain of
reductions and elementwise ops: layer_norm reads its row twice instead of the graph's six passes.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Call, Constant, IRModule, call

from .rewrite import rewrite


def _scalar(node) -> float | None:
    if isinstance(node, Constant) and node.data.size == 1 and node.data.dtype.kind == "f":
        return float(node.data.reshape(()))
    return None


def _is(node, value: float) -> bool:
    got = _scalar(node)
    return got is not None and math.isclose(got, value, rel_tol=1e-6)


def _op(node, name) -> bool:
    return isinstance(node, Call) and node.op == name


def _other(node: Call, pred):
    """For a commutative binary call: (the argument satisfying pred, the other one), or None."""
    a, b = node.args
    if pred(a):
        return a, b
    if pred(b):
        return b, a
    return None


# ---------------------------------------------------------------------------------------------- layer norm

def _trailing_mean_of(node, x) -> tuple | None:
    """node = mean(x, trailing axes, keepdims): the axes; else None."""
    if not _op(node, "mean") or node.args[0] != x or not node.attrs.keepdims:
        return None
    axes, ndim = tuple(node.attrs.axes), len(x.type.shape)
    return axes if axes and axes == tuple(range(axes[0], ndim)) else None


def _square_of(node):
    if _op(node, "power") and _is(node.args[1], 2.0):
        return node.args[0]
    if _op(node, "multiply") and node.args[0] == node.args[1]:
        return node.args[0]
    return None


def _normalize(node: Call):
    # (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) -> layer_norm(x, 1, 0)
    diff, std = node.args
    if not (_op(diff, "subtract") and _op(std, "sqrt") and _op(std.args[0], "add")):
        return None
    x, mean = diff.args
    axes = _trailing_mean_of(mean, x)
    found = _other(std.args[0], lambda a: _scalar(a) is not None)
    if axes is None or found is None or x.type.dtype != "float32":
        return None
    eps, var = found
    if not _op(var, "mean") or _square_of(var.args[0]) != diff or _trailing_mean_of(var, var.args[0]) != axes:
        return None
    inner = x.type.shape[axes[0]:]
    ones, zeros = (Constant(np.full(inner, v, np.float32)) for v in (1.0, 0.0))
    return call("nn.layer_norm", x, ones, zeros, axis=axes[0], epsilon=_scalar(eps))


def _affine_const(ln: Call, c) -> np.ndarray | None:
    """c's value broadcast to the normalized shape of layer_norm ln, if c is a constant that broadcasts there
    without growing the output."""
    if not isinstance(c, Constant) or c.type.dtype != "float32":
        return None
    inner = ln.type.shape[ln.attrs.axis:]
    try:
        if np.broadcast_shapes(c.type.shape, inner) != inner or c.data.ndim > len(inner):
            return None
    except ValueError:
        return None
    return np.broadcast_to(c.data, inner)


def _scale(node: Call):
    # layer_norm(x, 1, b) * gamma -> layer_norm(x, gamma, b * gamma)
    found = _other(node, lambda a: _op(a, "nn.layer_norm"))
    if found is None:
        return None
    ln, c = found
    gamma = _affine_const(ln, c)
    if gamma is None or not (isinstance(ln.args[1], Constant) and np.all(ln.args[1].data == 1)):
        return None
    if not isinstance(ln.args[2], Constant):
        return None
    return ln.replace(args=(ln.args[0], Constant(np.ascontiguousarray(gamma, np.float32)),
                            Constant((ln.args[2].data * gamma).astype(np.float32))))


def _shift(node: Call):
    # layer_norm(x, g, b) + beta -> layer_norm(x, g, b + beta)
    found = _other(node, lambda a: _op(a, "nn.layer_norm"))
    if found is None:
        return None
    ln, c = found
    beta = _affine_const(ln, c)
    if beta is None or not isinstance(ln.args[2], Constant):
        return None
    return ln.replace(args=(ln.args[0], ln.args[1], Constant((ln.args[2].data + beta).astype(np.float32))))


# ---------------------------------------------------------------------------------------------- gelu

def _factors(node) -> list:
    """The leaves of a tree of multiply calls."""
    if _op(node, "multiply"):
        return _factors(node.args[0]) + _factors(node.args[1])
    return [node]


def _split_product(node) -> tuple[float, list]:
    """(product of the scalar constant factors, the other factors)."""
    scale, rest = 1.0, []
    for f in _factors(node):
        s = _scalar(f)
        if s is None:
            rest.append(f)
        else:
            scale *= s
    return scale, rest


def _one_plus(node, inner_op):
    """node = 1 + inner_op(z) (either order): z; else None."""
    if not _op(node, "add"):
        return None
    found = _other(node, lambda a: _is(a, 1.0))
    return found[1].args[0] if found and _op(found[1], inner_op) else None


def _is_scaled(z, x, factor) -> bool:
    """z = x * factor (any order of constant factors) or x / (1 / factor)."""
    if _op(z, "divide"):
        return z.args[0] == x and _is(z.args[1], 1.0 / factor)
    scale, rest = _split_product(z)
    return rest == [x] and math.isclose(scale, factor, rel_tol=1e-6)


def _is_tanh_argument(w, x) -> bool:
    """w = sqrt(2/pi) * (x + 0.044715 * x^3)."""
    scale, rest = _split_product(w)
    if len(rest) != 1 or not math.isclose(scale, math.sqrt(2.0 / math.pi), rel_tol=1e-6) or not _op(rest[0], "add"):
        return False
    found = _other(rest[0], lambda a: a == x)
    if found is None:
        return False
    c, cube = _split_product(found[1])
    cubed = cube == [x, x, x] or (len(cube) == 1 and _op(cube[0], "power") and cube[0].args[0] == x and
                                   _is(cube[0].args[1], 3.0))
    return cubed and math.isclose(c, 0.044715, rel_tol=1e-6)


def _gelu(node: Call):
    # 0.5 * x * (1 + erf(x / sqrt 2)) -> gelu(x);  0.5 * x * (1 + tanh(...)) -> gelu(x, "tanh")
    scale, rest = _split_product(node)
    if len(rest) != 2 or not math.isclose(scale, 0.5, rel_tol=1e-6):
        return None
    for x, other in (rest, rest[::-1]):
        if x.type != node.type or x.type.dtype != "float32":
            continue
        z = _one_plus(other, "erf")
        if z is not None and _is_scaled(z, x, 1.0 / math.sqrt(2.0)):
            return call("nn.gelu", x, approximate="none")
        w = _one_plus(other, "tanh")
        if w is not None and _is_tanh_argument(w, x):
            return call("nn.gelu", x, approximate="tanh")
    return None


def _small_power(node: Call):
    # x ** 2 -> x * x, x ** 3 -> x * x * x
    x, e = node.args
    if _is(e, 2.0) and e.type.size == 1 and x.type == node.type:
        return call("multiply", x, x)
    if _is(e, 3.0) and e.type.size == 1 and x.type == node.type:
        return call("multiply", call("multiply", x, x), x)
    return None


def _by_op(op, fn):
    return fn.__name__, lambda node: fn(node) if node.op == op else None


RULES = [_by_op("divide", _normalize), _by_op("multiply", _scale), _by_op("add", _shift),
         _by_op("multiply", _gelu)]


def recognize_patterns(mod: IRModule) -> IRModule:
    """layer_norm and gelu from their decompositions, then small integer powers as products."""
    mod = rewrite(mod, RULES)
    return rewrite(mod, [_by_op("power", _small_power)])

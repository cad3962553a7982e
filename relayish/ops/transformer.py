"""Transformer building blocks: layer normalization and GELU (both approximations).

The frontend emits them for ONNX LayerNormalization (opset 17) and Gelu (opset 20); the graph rewrites of
compiler/passes/patterns.py recognize the decompositions older exporters emit and replace them by these ops.
"""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..types import TensorType
from ..op import OpError, Pattern, register_op
from .common import broadcast_index, expect_float, normalize_axis, same_dtype
from .elemwise import _unary
from .rows import ROW_TAG, row_lanes, row_reduce

# ---------------------------------------------------------------------------------------------- layer_norm


def _ln_normalize(attrs, arg_types):
    attrs = dict(attrs)
    attrs["axis"] = normalize_axis("nn.layer_norm", attrs["axis"], arg_types[0].ndim)
    return attrs


def _ln_infer(arg_types, attrs):
    x, gamma, beta = arg_types
    expect_float("nn.layer_norm", x)
    same_dtype("nn.layer_norm", arg_types)
    normalized = x.shape[attrs.axis:]
    for what, t in (("scale", gamma), ("bias", beta)):
        if t.ndim > len(normalized) or np.broadcast_shapes(t.shape, normalized) != normalized:
            raise OpError(f"nn.layer_norm: {what} of shape {t.shape} does not broadcast to the normalized shape "
                          f"{normalized} (x {x.shape}, axis {attrs.axis})")
    return x


def layer_norm_stats(x, axis, epsilon):
    """(mean, 1 / sqrt(variance + epsilon)) over the axes from `axis` on, kept as extent-1 dims (float64)."""
    axes = tuple(range(axis, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return mean, 1.0 / np.sqrt(var + epsilon)


def _ln_ref(x, gamma, beta, axis, epsilon):
    mean, inv_std = layer_norm_stats(x, axis, epsilon)
    return ((x - mean) * inv_std * gamma + beta).astype(x.dtype)


def _ln_compute(inputs, attrs, out_type):
    """Two passes over each row: the mean, then the mean of squared deviations (as numpy: no cancellation
    E[x^2] - E[x]^2 would have); then the affine output."""
    x, gamma, beta = inputs
    ax, nd = attrs.axis, x.ndim
    outer, inner = x.shape[:ax], x.shape[ax:]
    count = int(np.prod(inner, dtype=np.int64))
    if ax == nd - 1 and nd >= 2 and row_lanes(count, x.dtype):
        return _ln_rows(x, gamma, beta, attrs.epsilon)
    r1 = [te.reduce_axis(n, f"k{d}") for d, n in enumerate(inner)]
    r2 = [te.reduce_axis(n, f"k{d}") for d, n in enumerate(inner)]
    total = te.compute(outer, lambda *i: te.sum(x[tuple(i) + tuple(r.var for r in r1)], r1), name="ln_sum",
                       tag="layer_norm")
    mean = lambda i: total[tuple(i[:ax])] * (1.0 / count)  # noqa: E731

    def squares(*i):
        d = x[tuple(i) + tuple(r.var for r in r2)] - mean(i)
        return te.sum(d * d, r2)
    var = te.compute(outer, squares, name="ln_var", tag="layer_norm")

    def body(*i):
        inv_std = 1.0 / te.sqrt(var[tuple(i[:ax])] * (1.0 / count) + float(attrs.epsilon))
        normalized = (x[i] - mean(i)) * inv_std
        return normalized * broadcast_index(gamma, i, nd) + broadcast_index(beta, i, nd)
    return te.compute(x.shape, body, name="layer_norm", tag="layer_norm")


def _ln_rows(x, gamma, beta, epsilon):
    """The same over the last axis only, in the row form (relayish/ops/rows.py): two-stage reductions, the
    reciprocal standard deviation once per row."""
    outer, count, nd = x.shape[:-1], x.shape[-1], x.ndim
    total = row_reduce(outer, count, lambda i, l: x[tuple(i) + (l,)], "sum", "ln_sum", x.dtype)
    mean = lambda i: total[tuple(i)] * (1.0 / count)  # noqa: E731

    def square(i, l):
        d = x[tuple(i) + (l,)] - mean(i)
        return d * d
    var = row_reduce(outer, count, square, "sum", "ln_var", x.dtype)
    inv_std = te.compute(outer, lambda *i: 1.0 / te.sqrt(var[i] * (1.0 / count) + float(epsilon)),
                         name="ln_inv_std", tag=ROW_TAG)

    def body(*i):
        normalized = (x[i] - mean(i[:-1])) * inv_std[i[:-1]]
        return normalized * broadcast_index(gamma, i, nd) + broadcast_index(beta, i, nd)
    return te.compute(x.shape, body, name="layer_norm", tag=ROW_TAG)


register_op("nn.layer_norm", inputs=3, pattern=Pattern.OPAQUE, op_class="normalization", infer=_ln_infer,
            ref=_ln_ref, compute=_ln_compute, normalize=_ln_normalize, attrs={"axis": -1, "epsilon": 1e-5},
            flops=lambda arg_types, attrs, out: 8.0 * out.size,
            doc="(x - mean) / sqrt(var + epsilon) * scale + bias, statistics over the axes from `axis` on")

# ---------------------------------------------------------------------------------------------- gelu

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_ref(x, approximate):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(x64 / math.sqrt(2.0)))
    return y.astype(x.dtype)


def _gelu_scalar(v, attrs):
    if attrs.approximate == "tanh":
        return v * 0.5 * (1.0 + te.tanh((v + 0.044715 * v * v * v) * _SQRT_2_OVER_PI))
    return v * 0.5 * (1.0 + te.erf(v * (1.0 / math.sqrt(2.0))))


_unary("nn.gelu", _gelu_ref, _gelu_scalar, attrs={"approximate": "none"},
       doc="x * Phi(x) (approximate='none': with erf; 'tanh': GPT-2's tanh form)")

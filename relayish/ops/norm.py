"""Normalization ops: softmax, log-softmax, LRN, batch norm (over NCHW activations; references follow ONNX).
Compute definitions read every tensor in bounds even under a select (see relayish/ops/common.py).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType
from ..op import REQUIRED, OpError, Pattern, register_op
from .common import expect_float, expect_ndim, normalize_axis, pad_stage, same_dtype
from .rows import ROW_TAG, row_lanes, row_reduce


# ---------------------------------------------------------------------------------------------- softmax


def _axis_normalize(op):
    def normalize(attrs, arg_types):
        attrs = dict(attrs)
        attrs["axis"] = normalize_axis(op, attrs["axis"], arg_types[0].ndim)
        return attrs
    return normalize


def _softmax_infer(arg_types, attrs):
    x, = arg_types
    expect_float("nn.softmax", x)
    return x


def _softmax_ref(x, axis):
    with np.errstate(invalid="ignore"):  # a row of -inf gives NaN, as in onnxruntime
        e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _softmax_compute(inputs, attrs, out_type):
    """max over the axis, exp(x - max), sum of that, divide: the reduced stages drop the axis. Over the last
    axis of a length that has row_lanes: the row form (two-stage reductions, exp computed once into its own
    stage, one reciprocal per row), which compiler/row_schedule.py runs row by row."""
    x, = inputs
    ax = attrs.axis
    if ax == x.ndim - 1 and row_lanes(x.shape[-1], x.dtype):
        return _softmax_rows(x)
    reduced = x.shape[:ax] + x.shape[ax + 1:]
    full, dropped = _axis_indexers(ax)

    k1, k2 = te.reduce_axis(x.shape[ax], "k"), te.reduce_axis(x.shape[ax], "k")
    xmax = te.compute(reduced, lambda *i: te.max_reduce(x[full(i, k1.var)], k1), name="softmax_max",
                      tag="softmax")
    ex = te.compute(x.shape, lambda *i: te.exp(x[i] - xmax[dropped(i)]), name="softmax_exp", tag="softmax")
    total = te.compute(reduced, lambda *i: te.sum(ex[full(i, k2.var)], k2), name="softmax_sum", tag="softmax")
    return te.compute(x.shape, lambda *i: ex[i] / total[dropped(i)], name="softmax", tag="softmax")


def _axis_indexers(ax: int):
    """(full, dropped): full(i, k) is the index of x for index i of x without axis `ax` and position k along it;
    dropped(i) is index i of x without axis `ax`."""
    def full(i, k):
        return tuple(i[:ax]) + (k,) + tuple(i[ax:])

    def dropped(i):
        return tuple(i[:ax]) + tuple(i[ax + 1:])
    return full, dropped


def _softmax_rows(x: te.Tensor) -> te.Tensor:
    outer, length = x.shape[:-1], x.shape[-1]
    xmax = row_reduce(outer, length, lambda i, l: x[tuple(i) + (l,)], "max", "softmax_max", x.dtype)
    ex = te.compute(x.shape, lambda *i: te.exp(x[i] - xmax[i[:-1]]), name="softmax_exp", tag=ROW_TAG)
    total = row_reduce(outer, length, lambda i, l: ex[tuple(i) + (l,)], "sum", "softmax_sum", x.dtype)
    inv = te.compute(outer, lambda *i: 1.0 / total[i], name="softmax_inv", tag=ROW_TAG)
    return te.compute(x.shape, lambda *i: ex[i] * inv[i[:-1]], name="softmax", tag=ROW_TAG)


register_op("nn.softmax", inputs=1, pattern=Pattern.OPAQUE, op_class="normalization", infer=_softmax_infer,
            ref=_softmax_ref, compute=_softmax_compute, attrs={"axis": -1}, normalize=_axis_normalize("nn.softmax"),
            flops=lambda arg_types, attrs, out: 4.0 * out.size,
            doc="softmax along one axis (ONNX Softmax since opset 13; the frontend reshapes for older opsets).")

# ---------------------------------------------------------------------------------------------- log_softmax


def _log_softmax_infer(arg_types, attrs):
    x, = arg_types
    expect_float("nn.log_softmax", x)
    return x


def _log_softmax_ref(x, axis):
    with np.errstate(invalid="ignore", divide="ignore"):  # a row of -inf gives NaN, as in onnxruntime
        shifted = x - x.max(axis=axis, keepdims=True)
        return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype)


def _log_softmax_compute(inputs, attrs, out_type):
    """x - (max + log(sum(exp(x - max)))) along the axis: softmax's stages (the row form over the last axis)
    with the log-normalizer once per row in place of the reciprocal; exp is only summed, never stored."""
    x, = inputs
    ax = attrs.axis
    if ax == x.ndim - 1 and row_lanes(x.shape[-1], x.dtype):
        outer, length = x.shape[:-1], x.shape[-1]
        xmax = row_reduce(outer, length, lambda i, l: x[tuple(i) + (l,)], "max", "log_softmax_max", x.dtype)
        total = row_reduce(outer, length, lambda i, l: te.exp(x[tuple(i) + (l,)] - xmax[i]), "sum",
                           "log_softmax_sum", x.dtype)
        norm = te.compute(outer, lambda *i: xmax[i] + te.log(total[i]), name="log_softmax_norm", tag=ROW_TAG)
        return te.compute(x.shape, lambda *i: x[i] - norm[i[:-1]], name="log_softmax", tag=ROW_TAG)
    reduced = x.shape[:ax] + x.shape[ax + 1:]
    full, dropped = _axis_indexers(ax)

    k1, k2 = te.reduce_axis(x.shape[ax], "k"), te.reduce_axis(x.shape[ax], "k")
    xmax = te.compute(reduced, lambda *i: te.max_reduce(x[full(i, k1.var)], k1), name="log_softmax_max",
                      tag="softmax")
    total = te.compute(reduced, lambda *i: te.sum(te.exp(x[full(i, k2.var)] - xmax[i]), k2),
                       name="log_softmax_sum", tag="softmax")
    norm = te.compute(reduced, lambda *i: xmax[i] + te.log(total[i]), name="log_softmax_norm", tag="softmax")
    return te.compute(x.shape, lambda *i: x[i] - norm[dropped(i)], name="log_softmax", tag="softmax")


register_op("nn.log_softmax", inputs=1, pattern=Pattern.OPAQUE, op_class="normalization", infer=_log_softmax_infer,
            ref=_log_softmax_ref, compute=_log_softmax_compute, attrs={"axis": -1},
            normalize=_axis_normalize("nn.log_softmax"), flops=lambda arg_types, attrs, out: 4.0 * out.size,
            doc="log of softmax along one axis (ONNX LogSoftmax since opset 13; the frontend reshapes for older "
                "opsets).")

# ---------------------------------------------------------------------------------------------- lrn


def _lrn_normalize(attrs, arg_types):
    attrs = dict(attrs)
    attrs["size"] = int(attrs["size"])
    if attrs["size"] < 1:
        raise OpError(f"nn.lrn: size must be >= 1, got {attrs['size']}")
    for name in ("alpha", "beta", "bias"):
        attrs[name] = float(attrs[name])
    return attrs


def _lrn_infer(arg_types, attrs):
    x, = arg_types
    expect_ndim("nn.lrn", x, 4, "data")
    expect_float("nn.lrn", x, "data")
    return x


def _lrn_window(size: int) -> tuple[int, int]:
    """ONNX: channels c - floor((size-1)/2) .. c + ceil((size-1)/2) are summed."""
    return (size - 1) // 2, size // 2


def _lrn_ref(x, size, alpha, beta, bias):
    before, after = _lrn_window(size)
    c = x.shape[1]
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (before, after), (0, 0), (0, 0)))
    total = sum(sq[:, r:r + c] for r in range(size))
    return (x / (bias + alpha / size * total) ** beta).astype(x.dtype)


def _lrn_compute(inputs, attrs, out_type):
    x, = inputs
    n, c, h, w = x.shape
    before, after = _lrn_window(attrs.size)
    data = x
    if before or after:
        data = pad_stage(x, {1: before}, (n, c + before + after, h, w), 0.0, name="lrn_pad")
    r = te.reduce_axis(attrs.size, "r")
    sqsum = te.compute(x.shape, lambda i, j, k, l: te.sum(data[i, j + r.var, k, l] * data[i, j + r.var, k, l], r),
                       name="lrn_sqr_sum", tag="lrn")
    scale = attrs.alpha / attrs.size
    return te.compute(x.shape, lambda *i: x[i] / te.power(attrs.bias + sqsum[i] * scale, attrs.beta), name="lrn",
                      tag="lrn")


register_op("nn.lrn", inputs=1, pattern=Pattern.OPAQUE, op_class="normalization", infer=_lrn_infer, ref=_lrn_ref,
            compute=_lrn_compute, normalize=_lrn_normalize, attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
            flops=lambda arg_types, attrs, out: (2.0 * attrs.size + 4.0) * out.size,
            doc="ONNX LRN across channels: x / (bias + alpha/size * sum of squares)^beta.")

# ---------------------------------------------------------------------------------------------- batch_norm

_BN_PARAMS = ("gamma", "beta", "mean", "var")


def _bn_infer(arg_types, attrs):
    op = "nn.batch_norm"
    x = arg_types[0]
    expect_float(op, x, "data")
    channels = x.shape[attrs.axis]
    for name, t in zip(_BN_PARAMS, arg_types[1:]):
        if t.shape != (channels,):
            raise OpError(f"{op}: {name} must have shape ({channels},) (channels of data {x.shape} on axis "
                          f"{attrs.axis}), got {t.shape}")
    return TensorType(x.shape, same_dtype(op, arg_types))


def _bn_ref(x, gamma, beta, mean, var, axis, epsilon):
    shape = (-1,) + (1,) * (x.ndim - axis - 1)
    p = [a.reshape(shape) for a in (gamma, beta, mean, var)]
    return ((x - p[2]) / np.sqrt(p[3] + np.float32(epsilon)) * p[0] + p[1]).astype(x.dtype)


def _bn_compute(inputs, attrs, out_type):
    x, gamma, beta, mean, var = inputs
    ax, eps = attrs.axis, float(attrs.epsilon)

    def body(*i):
        c = i[ax]
        return (x[i] - mean[c]) / te.sqrt(var[c] + eps) * gamma[c] + beta[c]
    return te.compute(x.shape, body, name="batch_norm", tag="broadcast")


register_op("nn.batch_norm", inputs=5, pattern=Pattern.BROADCAST, op_class="normalization", infer=_bn_infer,
            ref=_bn_ref, compute=_bn_compute, attrs={"axis": 1, "epsilon": 1e-5}, normalize=_axis_normalize("nn.batch_norm"),
            flops=lambda arg_types, attrs, out: 4.0 * out.size,
            doc="Inference batch norm: (x - mean) / sqrt(var + eps) * gamma + beta, params on `axis`.")

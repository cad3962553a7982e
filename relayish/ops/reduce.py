"""Reductions over any set of axes: sum, mean, max, min (ONNX ReduceSum/ReduceMean/ReduceMax/ReduceMin)."""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType, is_float
from ..op import OpError, Pattern, register_op
from .common import normalize_axis


def _normalize(op):
    def normalize(attrs, arg_types):
        attrs = dict(attrs)
        ndim = arg_types[0].ndim
        axes = range(ndim) if attrs["axes"] is None else attrs["axes"]
        axes = tuple(sorted(normalize_axis(op, a, ndim) for a in axes))
        if len(set(axes)) != len(axes):
            raise OpError(f"{op}: repeated axes {attrs['axes']}")
        attrs["axes"], attrs["keepdims"] = axes, bool(attrs["keepdims"])
        return attrs
    return normalize


def reduced_shape(shape, axes, keepdims) -> tuple:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _infer(op):
    def infer(arg_types, attrs):
        x, = arg_types
        if op in ("mean",) and not is_float(x.dtype):
            raise OpError(f"{op}: input must be a float tensor, got {x.dtype}")
        if any(x.shape[a] == 0 for a in attrs.axes) and op in ("max", "min"):
            raise OpError(f"{op}: reducing an empty axis of {x.shape}")
        return TensorType(reduced_shape(x.shape, attrs.axes, attrs.keepdims), x.dtype)
    return infer


def _ref(fn):
    def ref(x, axes, keepdims):
        return np.asarray(fn(x, axis=tuple(axes), keepdims=keepdims), dtype=x.dtype)
    return ref


def reduce_compute(x: te.Tensor, axes, keepdims, combiner, name, scale=None) -> te.Tensor:
    """combiner over `axes` of x (one reduce axis per reduced dim); scale multiplies the result (for mean)."""
    raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
    out_shape = reduced_shape(x.shape, axes, keepdims)
    kept = [d for d in range(x.ndim) if d not in axes]

    def index(i):
        out = []
        pos = iter(i if not keepdims else [i[d] for d in kept])
        for d in range(x.ndim):
            out.append(raxes[d].var if d in raxes else next(pos))
        return tuple(out)

    reducer = {"sum": te.sum, "max": te.max_reduce, "min": te.min_reduce}[combiner]
    total = te.compute(out_shape, lambda *i: reducer(x[index(i)], list(raxes.values())), name=name, tag="reduce")
    if scale is None:
        return total
    return te.compute(out_shape, lambda *i: total[i] * te.const(scale, x.dtype), name=name + "_scale",
                      tag="elemwise")


def _register(op, fn, combiner, doc):
    def compute(inputs, attrs, out_type):
        x, = inputs
        count = int(np.prod([x.shape[a] for a in attrs.axes], dtype=np.int64))
        scale = 1.0 / count if op == "mean" else None
        return reduce_compute(x, attrs.axes, attrs.keepdims, combiner, op, scale)

    register_op(op, inputs=1, pattern=Pattern.COMM_REDUCE, op_class="normalization", infer=_infer(op), ref=_ref(fn),
                compute=compute, normalize=_normalize(op), attrs={"axes": None, "keepdims": True},
                flops=lambda arg_types, attrs, out: float(arg_types[0].size), doc=doc)


_register("sum", np.sum, "sum", "sum over axes (None: all)")
_register("mean", np.mean, "sum", "mean over axes (None: all)")
_register("max", np.max, "max", "maximum over axes (None: all)")
_register("min", np.min, "min", "minimum over axes (None: all)")

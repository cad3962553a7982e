"""Ops whose output size depends on their input's values: the indices of the nonzero elements, and the first k
elements along an axis for a k computed at run time (TopK's).

    count = sum(cast(x != 0, "int64"))                 # a reduction: int64 []
    y     = nonzero(x, count, count_dim=n)             # int64 [rank, n], n the size variable count's value is

The output's data-sized dim is a size variable of its own (`count_dim`), given a value per call by the value of
the op's second input, which the graph computes before it: the generic module (compiler/generic_module.py) reads
that value before it runs the kernel and plans what follows with it, its buffers placed for the largest value
(the element count of x). The kernel (compiler/sequential.py) walks x in order, so the indices come in
row-major order as onnx's NonZero gives them. Only the frontend's imports for the generic tier make these ops
(frontends/onnx/ops/selection.py); a static compile folds NonZero of a constant at import.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..op import REQUIRED, OpError, Pattern, register_op
from ..types import TensorType


def _nonzero_infer(arg_types, attrs):
    x, count = arg_types
    if count.shape != () or count.dtype != "int64":
        raise OpError(f"nonzero: the count must be an int64 scalar, got {count.dtype}{list(count.shape)}")
    n = attrs.count_dim
    if not isinstance(n, te.Var):
        raise OpError(f"nonzero: count_dim must be a size variable (the count's value at run time), got {n!r}")
    return TensorType((max(1, x.ndim), n), "int64")


def _nonzero_ref(x, count, count_dim):
    value = np.atleast_1d(x)
    out = np.array(np.nonzero(value), np.int64).reshape(value.ndim, -1)
    if out.shape[1] != int(count):
        raise OpError(f"nonzero: {out.shape[1]} nonzero elements, but the count says {int(count)}")
    return out


# no compute: its kernel is written as loop IR (compiler/sequential.py)
register_op("nonzero", inputs=2, pattern=Pattern.OPAQUE, op_class="layout", infer=_nonzero_infer, ref=_nonzero_ref,
            attrs={"count_dim": REQUIRED},
            doc="the indices of x's nonzero elements, int64 [rank, n] in row-major order (a scalar as 1-D), given "
                "their count (int64 []) and the size variable n that stands for its value")


def _slice_infer(arg_types, attrs):
    x, k = arg_types
    if k.dtype != "int64" or k.size != 1:
        raise OpError(f"slice_to_count: the count must be one int64, got {k.dtype}{list(k.shape)}")
    if not 0 <= attrs.axis < x.ndim:
        raise OpError(f"slice_to_count: axis {attrs.axis} out of range for a rank-{x.ndim} input")
    n = attrs.count_dim
    if not isinstance(n, te.Var):
        raise OpError(f"slice_to_count: count_dim must be a size variable (the count's value at run time), got {n!r}")
    return TensorType(x.shape[:attrs.axis] + (n,) + x.shape[attrs.axis + 1:], x.dtype)


def _slice_ref(x, k, axis, count_dim):
    count = int(np.asarray(k).reshape(-1)[0])
    if not 0 <= count <= x.shape[axis]:
        raise OpError(f"slice_to_count: a count of {count} for an axis of {x.shape[axis]}")
    return np.take(x, np.arange(count), axis=axis)


register_op("slice_to_count", inputs=2, pattern=Pattern.OPAQUE, op_class="layout", infer=_slice_infer,
            ref=_slice_ref, attrs={"axis": REQUIRED, "count_dim": REQUIRED},
            doc="the first k elements of x along axis, k the value of the int64 count computed at run time (TopK's "
                "k), the size variable count_dim standing for it")

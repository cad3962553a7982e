"""Helpers shared by op declarations: shape rules and compute building blocks.

Invariant of every compute definition: each tensor read is in bounds for every index of its stage, even in the
arm of a select that is not taken (such reads are clamped), so that codegen may evaluate both arms of a select
(e.g. as a vector blend) and a read never faults.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType, is_float, is_static_dim
from ..op import OpError, stage_tag


PAD_TAG = stage_tag("pad", is_padding=True)  # every padding stage (see StageTag)


def broadcast_shape(op: str, *shapes) -> tuple:
    """numpy's broadcast of the shapes. A dim known only at run time (an expression of size variables) broadcasts
    with 1 and with the same expression; against any other dim it cannot be decided here and is an OpError."""
    shown = ' and '.join(show_shape(s) for s in shapes)
    if all(is_static_dim(d) for s in shapes for d in s):
        try:
            return tuple(int(d) for d in np.broadcast_shapes(*shapes))
        except ValueError:
            raise OpError(f"{op}: shapes {shown} do not broadcast") from None
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        dims = [s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0]
        real = [d for d in dims if not (is_static_dim(d) and d == 1)]
        if real and not all(same_dim(real[0], d) for d in real):
            raise OpError(f"{op}: shapes {shown} do not broadcast: dim {k} of the result would be one of "
                          f"{', '.join(map(str, real))}, which cannot be shown equal before run time")
        out.append(real[0] if real else 1)
    return tuple(out)


def same_dim(a, b) -> bool:
    """Whether two dims are the same: equal ints, or the same expression of size variables (structurally; size
    variables by identity)."""
    if is_static_dim(a) != is_static_dim(b):
        return False
    return a == b


def show_shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def same_dtype(op: str, types) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise OpError(f"{op}: inputs have different dtypes {sorted(dtypes)}")
    return dtypes.pop()


def expect_ndim(op: str, t: TensorType, ndim: int, what: str = "input"):
    if len(t.shape) != ndim:
        raise OpError(f"{op}: {what} must be {ndim}-D, got shape {t.shape}")


def broadcast_index(tensor: te.Tensor, out_index, out_ndim: int):
    """Index `tensor` (numpy-broadcast against an output of rank out_ndim) at out_index."""
    offset = out_ndim - tensor.ndim
    idx = []
    for d, extent in enumerate(tensor.shape):
        idx.append(0 if extent == 1 else out_index[offset + d])
    return tensor[tuple(idx)] if idx else tensor[()]


def int_tuple(op: str, attrs, name: str, length: int, minimum: int | None = None) -> tuple[int, ...]:
    """attrs[name] as a tuple of exactly `length` ints, each >= minimum; else OpError naming op and attribute."""
    value = attrs[name]
    if isinstance(value, (int, np.integer)):
        value = (value,)
    try:
        out = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise OpError(f"{op}: attribute {name} must be {length} ints, got {value!r}") from None
    if len(out) != length:
        raise OpError(f"{op}: attribute {name} must be {length} ints, got {out}")
    if minimum is not None and any(v < minimum for v in out):
        raise OpError(f"{op}: attribute {name} must be >= {minimum}, got {out}")
    return out


def normalize_axis(op: str, axis: int, ndim: int, what: str = "axis") -> int:
    """axis in [-ndim, ndim) -> [0, ndim); else OpError."""
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise OpError(f"{op}: {what} {axis} out of range for a {ndim}-D input")
    return axis % ndim


def expect_float(op: str, t: TensorType, what: str = "input"):
    if not is_float(t.dtype):
        raise OpError(f"{op}: {what} must be a float tensor, got {t.dtype} (not supported)")


def num_elements(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def pad_axis_index(index, before: int, extent: int, padded_extent: int):
    """Read index into an axis of `extent` elements for padded position `index` in [0, padded_extent), where the
    data starts at `before`. Returns (conditions for being inside the data, clamped index into the data).
    Only the conditions that can be false are emitted, so an unpadded side costs nothing."""
    conds, idx = [], index - before
    if before > 0:
        conds.append(index >= before)
        idx = te.max_(idx, 0)
    if not (is_static_dim(padded_extent) and is_static_dim(extent)):  # sizes known at run time: the same
        if not same_dim(padded_extent, before + extent):           # expression or guarded
            conds.append(index < before + extent)
            idx = te.min_(idx, extent - 1)
    elif padded_extent > before + extent:
        conds.append(index < before + extent)
        idx = te.min_(idx, extent - 1)
    return conds, idx


def pad_stage(x: te.Tensor, before: dict, padded_shape, value, name: str = "pad") -> te.Tensor:
    """x padded with `value` (a number, or an expression of x's dtype: a 0-d tensor's element): before maps axis ->
    elements added in front; padded_shape is the full output shape (it may also cut off trailing elements that
    nobody reads). Reads are clamped into x."""
    fill = value if isinstance(value, te.PrimExpr) else te.const(value, x.dtype)
    def body(*i):
        conds, idx = [], list(i)
        for axis, extent in enumerate(x.shape):
            c, idx[axis] = pad_axis_index(i[axis], before.get(axis, 0), extent, padded_shape[axis])
            conds += c
        read = x[tuple(idx)]
        return te.select(te.all_of(*conds), read, fill) if conds else read
    return te.compute(padded_shape, body, name=name, tag=PAD_TAG)

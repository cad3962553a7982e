"""Ops on tensors of any dtype (token ids, masks, comparison results): gather (take), strided_slice,
broadcast_to, where, cast, trilu.

Index tensors are int64 or int32; their values are read at run time. Invariant (relayish/ops/common.py): every
read stays in bounds whatever the values, so take clamps its index into the table: a caller that must not see a
clamped result checks the indices before native code runs (runtime/feeds.py does it for graph inputs).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import DTYPES, TensorType, dim, is_static_dim, numpy_dtype
from ..op import REQUIRED, OpError, Pattern, register_op
from .common import broadcast_index, broadcast_shape, normalize_axis, same_dtype, show_shape

INDEX_DTYPES = ("int64", "int32")


def _movement_flops(arg_types, attrs, out_type):
    return float(out_type.size)

# ---------------------------------------------------------------------------------------------- take


def _take_normalize(attrs, arg_types):
    attrs = dict(attrs)
    attrs["axis"] = normalize_axis("take", attrs["axis"], arg_types[0].ndim)
    return attrs


def _take_infer(arg_types, attrs):
    data, indices = arg_types
    if indices.dtype not in INDEX_DTYPES:
        raise OpError(f"take: indices must be {' or '.join(INDEX_DTYPES)}, got {indices.dtype}")
    ax = attrs.axis
    if is_static_dim(data.shape[ax]) and data.shape[ax] < 1:  # (a run-time size is at least 1)
        raise OpError(f"take: axis {ax} of data {data.shape} is empty")
    return TensorType(data.shape[:ax] + indices.shape + data.shape[ax + 1:], data.dtype)


def _take_ref(data, indices, axis):
    n = data.shape[axis]
    bad = (indices < -n) | (indices >= n)
    if np.any(bad):
        raise IndexError(f"take: index {int(indices[bad].flat[0])} out of range [-{n}, {n}) of axis {axis}")
    return np.take(data, indices, axis=axis)


def clamped_index(value: te.PrimExpr, extent) -> te.PrimExpr:
    """An int32 index into an axis of `extent` (an int, or a dim known at run time) from a run-time index
    (negative counts from the end), clamped into [0, extent) in the index's own width so that no value can read
    out of bounds (0 for an axis found empty at run time, a data-sized one: its buffer is placed for its largest
    size)."""
    n = te.const(extent, value.dtype) if isinstance(extent, int) else te.cast(value.dtype, te.as_expr(te.dim(extent)))
    k = te.select(value < 0, value + n, value)
    return te.cast("int32", te.max_(te.min_(k, n - te.const(1, value.dtype)), te.const(0, value.dtype)))


def _take_compute(inputs, attrs, out_type):
    data, indices = inputs
    ax, ni = attrs.axis, indices.ndim

    def body(*i):
        k = clamped_index(indices[tuple(i[ax:ax + ni])], data.shape[ax])
        return data[tuple(i[:ax]) + (k,) + tuple(i[ax + ni:])]
    return te.compute(out_type.shape, body, name="take", tag="injective")


register_op("take", inputs=2, pattern=Pattern.INJECTIVE, op_class="layout", infer=_take_infer, ref=_take_ref,
            compute=_take_compute, normalize=_take_normalize, attrs={"axis": 0}, flops=_movement_flops,
            doc="np.take(data, indices, axis) (ONNX Gather); negative indices count from the end; compiled code "
                "clamps an index out of range (check them before: runtime/feeds.py)")

# ---------------------------------------------------------------------------------------------- strided_slice


def slice_ranges(shape, begin, end, strides, axes):
    """Per-axis (start, step, count) of a numpy-style slice (ONNX Slice semantics: starts/ends clamped, negative
    values count from the end). Axes not given keep their full range. On an axis of a run-time extent, or with
    a bound known only at run time, the step is positive and the bounds are taken as they are: 0 <= begin < end
    <= extent is the caller's to ensure (the frontend resolves and checks them: frontends/onnx/ops/movement.py)."""
    out = [(0, 1, d) for d in shape]
    for b, e, s, a in zip(begin, end, strides, axes):
        n = shape[a]
        if not (is_static_dim(n) and is_static_dim(b) and is_static_dim(e)):
            out[a] = (b, s, dim((e - b + (s - 1)) // s))
            continue
        start, stop, step = slice(b, e, s).indices(n)
        out[a] = (start, step, len(range(start, stop, step)))
    return tuple(out)


def _slice_normalize(attrs, arg_types):
    attrs = dict(attrs)
    x = arg_types[0]
    n = len(attrs["begin"])
    axes = attrs["axes"] if attrs["axes"] is not None else tuple(range(n))
    strides = attrs["strides"] if attrs["strides"] is not None else (1,) * n
    if not len(axes) == len(attrs["end"]) == len(strides) == n:
        raise OpError(f"strided_slice: begin, end, strides and axes must have one value per sliced axis, got "
                      f"{attrs['begin']}, {attrs['end']}, {strides}, {axes}")
    axes = tuple(normalize_axis("strided_slice", a, x.ndim) for a in axes)
    if len(set(axes)) != len(axes):
        raise OpError(f"strided_slice: repeated axes {axes}")
    if any(int(s) == 0 for s in strides):
        raise OpError(f"strided_slice: a step of 0 in {strides}")
    attrs.update(axes=axes, strides=tuple(int(s) for s in strides), begin=tuple(dim(b) for b in attrs["begin"]),
                 end=tuple(dim(e) for e in attrs["end"]))
    for b, e, s, a in zip(attrs["begin"], attrs["end"], attrs["strides"], axes):
        if not (is_static_dim(x.shape[a]) and is_static_dim(b) and is_static_dim(e)) and \
                (s < 1 or (is_static_dim(b) and b < 0) or (is_static_dim(e) and e < 0)):
            raise OpError(f"strided_slice: axis {a} of {show_shape(x.shape)} from {b} to {e} by {s}: over a size "
                          f"known only at run time, the step must be positive and the bounds resolved (not "
                          f"negative)")
    return attrs


def _slice_infer(arg_types, attrs):
    x, = arg_types
    ranges = slice_ranges(x.shape, attrs.begin, attrs.end, attrs.strides, attrs.axes)
    return TensorType(tuple(c for _, _, c in ranges), x.dtype)


def _slice_ref(x, begin, end, strides, axes):
    index = [slice(None)] * x.ndim
    for b, e, s, a in zip(begin, end, strides, axes):
        index[a] = slice(b, e, s)
    return np.ascontiguousarray(x[tuple(index)])


def _slice_compute(inputs, attrs, out_type):
    x, = inputs
    ranges = slice_ranges(x.shape, attrs.begin, attrs.end, attrs.strides, attrs.axes)
    return te.compute(out_type.shape, lambda *i: x[tuple(start + step * v for (start, step, _), v in zip(ranges, i))],
                      name="strided_slice", tag="injective")


register_op("strided_slice", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_slice_infer,
            ref=_slice_ref, compute=_slice_compute, normalize=_slice_normalize,
            attrs={"begin": REQUIRED, "end": REQUIRED, "strides": None, "axes": None}, flops=_movement_flops,
            doc="x[begin:end:strides] on the given axes (numpy/ONNX Slice clamping; negatives from the end)")

# ---------------------------------------------------------------------------------------------- broadcast_to


def _broadcast_to_infer(arg_types, attrs):
    x, = arg_types
    shape = tuple(dim(d) for d in attrs.shape)
    if broadcast_shape("broadcast_to", x.shape, shape) != shape:
        raise OpError(f"broadcast_to: {show_shape(x.shape)} does not broadcast to {show_shape(shape)}")
    return TensorType(shape, x.dtype)


def _broadcast_to_compute(inputs, attrs, out_type):
    x, = inputs
    nd = len(out_type.shape)
    return te.compute(out_type.shape, lambda *i: broadcast_index(x, i, nd), name="broadcast_to", tag="broadcast")


register_op("broadcast_to", inputs=1, pattern=Pattern.BROADCAST, op_class="layout", infer=_broadcast_to_infer,
            ref=lambda x, shape: np.ascontiguousarray(np.broadcast_to(x, shape)), compute=_broadcast_to_compute,
            attrs={"shape": REQUIRED}, flops=_movement_flops, doc="numpy broadcast_to (ONNX Expand, shape resolved)")

# ---------------------------------------------------------------------------------------------- where


def _where_infer(arg_types, attrs):
    cond, x, y = arg_types
    if cond.dtype != "bool":
        raise OpError(f"where: condition must be bool, got {cond.dtype}")
    return TensorType(broadcast_shape("where", cond.shape, x.shape, y.shape), same_dtype("where", [x, y]))


def _where_compute(inputs, attrs, out_type):
    cond, x, y = inputs
    nd = len(out_type.shape)
    return te.compute(out_type.shape, lambda *i: te.select(broadcast_index(cond, i, nd), broadcast_index(x, i, nd),
                                                           broadcast_index(y, i, nd)), name="where", tag="broadcast")


register_op("where", inputs=3, pattern=Pattern.BROADCAST, op_class="elementwise", infer=_where_infer,
            ref=np.where, compute=_where_compute, doc="cond ? x : y, broadcast as in numpy")

# ---------------------------------------------------------------------------------------------- cast


def _cast_infer(arg_types, attrs):
    if attrs.dtype not in DTYPES:
        raise OpError(f"cast: dtype {attrs.dtype!r} is not one of {DTYPES}")
    return TensorType(arg_types[0].shape, attrs.dtype)


def _cast_ref(x, dtype):
    with np.errstate(invalid="ignore"):  # NaN / inf to int: unspecified in ONNX, as in C
        return x.astype(numpy_dtype(dtype))


register_op("cast", inputs=1, pattern=Pattern.ELEMWISE, op_class="elementwise", infer=_cast_infer, ref=_cast_ref,
            compute=lambda inputs, attrs, out: te.compute(out.shape, lambda *i: te.cast(attrs.dtype, inputs[0][i]),
                                                          name="cast", tag="elemwise"),
            attrs={"dtype": REQUIRED}, doc="x converted to dtype (float -> int truncates; to bool: x != 0)")

# ---------------------------------------------------------------------------------------------- trilu


def _trilu_infer(arg_types, attrs):
    x, = arg_types
    if x.ndim < 2:
        raise OpError(f"trilu: input must be at least 2-D, got shape {x.shape}")
    return x


def _trilu_ref(x, upper, k):
    return np.triu(x, k) if upper else np.tril(x, k)


def _trilu_compute(inputs, attrs, out_type):
    x, = inputs

    def body(*i):
        row, col = i[-2], i[-1]
        keep = (col - row >= attrs.k) if attrs.upper else (col - row <= attrs.k)
        return te.select(keep, x[i], te.const(0, x.dtype))
    return te.compute(out_type.shape, body, name="trilu", tag="injective")


register_op("trilu", inputs=1, pattern=Pattern.INJECTIVE, op_class="elementwise", infer=_trilu_infer,
            ref=_trilu_ref, compute=_trilu_compute, attrs={"upper": 1, "k": 0},
            doc="upper (k-th diagonal and above) or lower triangle of the last two dims, the rest 0")

# ---------------------------------------------------------------------------------------------- arange


def _arange_infer(arg_types, attrs):
    start, = arg_types
    if start.shape != ():
        raise OpError(f"arange: start must be a scalar, got shape {start.shape}")
    if is_static_dim(attrs.count) and attrs.count < 1:
        raise OpError(f"arange: count must be at least 1, got {attrs.count}")
    return TensorType((dim(attrs.count),), start.dtype)


def _arange_ref(start, count, delta):
    return (start + np.arange(count) * np.asarray(delta, start.dtype)).astype(start.dtype)


def _arange_compute(inputs, attrs, out_type):
    start, = inputs
    delta = te.const(attrs.delta, start.dtype)
    return te.compute(out_type.shape, lambda i: start[()] + te.cast(start.dtype, i) * delta, name="arange",
                      tag="injective")


register_op("arange", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_arange_infer, ref=_arange_ref,
            compute=_arange_compute, attrs={"count": REQUIRED, "delta": 1}, flops=_movement_flops,
            doc="start + i * delta for i < count (ONNX Range whose length is known only at run time; a Range of "
                "constants is a constant)")

"""Data-movement ops of ONNX: pad (constant, reflect, edge, wrap; negative pads crop), gather_elements,
gather_nd, scatter_elements, scatter_nd (reductions none/add/mul/max/min) and one_hot.

Index tensors are int64 or int32 and read at run time. Invariant (relayish/ops/common.py): every read stays in
bounds whatever their values. Gathers clamp an index into its axis, as take does; scatters never read through an
index (an output element compares its own position with each index), so an index out of range hits nothing.
Graph inputs used as indices are checked before native code runs (compiler/index_bounds.py, runtime/feeds.py);
the numpy references raise IndexError on an index out of range.

Scatters are written per output element: out[j] combines data[j] with the updates whose index names j. The
update positions are reduce axes: reduction none keeps the last match (ONNX leaves duplicates undefined; the
reference's loop order makes the last one win), add/max/min are sum/max/min reductions, mul is a chain of
selects unrolled over the update positions (there is no product reduction), so it is limited to MAX_MUL_UPDATES.
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import te
from ..types import TensorType, is_static_dim
from ..op import REQUIRED, OpError, Pattern, register_op
from .common import normalize_axis, num_elements
from .norm import _axis_normalize
from .tensor import INDEX_DTYPES, clamped_index

REDUCTIONS = ("none", "add", "mul", "max", "min")
MAX_MUL_UPDATES = 64  # reduction mul unrolls one select per update position an output element may receive


def _movement_flops(arg_types, attrs, out_type):
    return float(out_type.size)


def _expect_indices(op: str, t: TensorType, what: str = "indices"):
    if t.dtype not in INDEX_DTYPES:
        raise OpError(f"{op}: {what} must be {' or '.join(INDEX_DTYPES)}, got {t.dtype}")


def _check_range(op: str, indices: np.ndarray, n: int, what: str):
    bad = (indices < -n) | (indices >= n)
    if np.any(bad):
        raise IndexError(f"{op}: index {int(indices[bad].flat[0])} out of range [-{n}, {n}) of {what}")


def _normalized(value: te.PrimExpr, extent: int) -> te.PrimExpr:
    """A run-time index with negative values counted from the end, in its own width (not clamped)."""
    return te.select(value < 0, value + extent, value)

# ---------------------------------------------------------------------------------------------- pad


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_normalize(attrs, arg_types):
    attrs = dict(attrs)
    ndim = arg_types[0].ndim
    pads = tuple(int(p) for p in attrs["pads"])
    if len(pads) != 2 * ndim:
        raise OpError(f"pad: pads must have 2 values per axis (all befores, then all afters), got {len(pads)} "
                      f"for a {ndim}-D input")
    if attrs["mode"] not in PAD_MODES:
        raise OpError(f"pad: mode must be one of {PAD_MODES}, got {attrs['mode']!r}")
    attrs.update(pads=pads, value=float(attrs["value"]))
    return attrs


def _pad_crop(shape, pads):
    """Per axis: (first kept input element, kept extent, elements added before, output extent). Negative pads
    crop the input first; the positive ones then pad what is left."""
    ndim = len(shape)
    out = []
    for a, n in enumerate(shape):
        before, after = pads[a], pads[ndim + a]
        start = max(-before, 0)
        kept = n - start - max(-after, 0)
        out.append((start, kept, max(before, 0), kept + max(before, 0) + max(after, 0)))
    return out


def _pad_infer(arg_types, attrs):
    x, = arg_types
    axes = _pad_crop(x.shape, attrs.pads)
    for a, (_, kept, before, extent) in enumerate(axes):
        if not is_static_dim(kept):  # over a run-time extent: the frontend checks what the mode needs per call
            continue
        if kept < 1 and extent > 0 and attrs.mode != "constant":
            raise OpError(f"pad: pads {attrs.pads} crop axis {a} of {x.shape} to nothing, which {attrs.mode} mode "
                          f"cannot pad from")
        if attrs.mode == "reflect" and kept < 2 and extent > kept:
            raise OpError(f"pad: reflect mode needs at least 2 elements on a padded axis, axis {a} has {kept}")
    return TensorType(tuple(e for *_, e in axes), x.dtype)


def _pad_ref(x, pads, mode, value):
    ndim = x.ndim
    cropped = x[tuple(slice(start, start + kept) for start, kept, _, _ in _pad_crop(x.shape, pads))]
    width = [(max(pads[a], 0), max(pads[ndim + a], 0)) for a in range(ndim)]
    if mode == "constant":
        return np.pad(cropped, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(cropped, width, mode=mode)


def pad_source(i, start: int, kept, before: int, mode: str):
    """(condition of being inside the data or None, input index) for output position i of one axis. kept may be a
    run-time extent: then a reflect or wrap pad must be shorter than it (one mirror image, one wrap; the frontend
    checks it per call)."""
    idx = i - before  # position in the kept (cropped) data, may be outside [0, kept)
    if not is_static_dim(kept) and mode in ("reflect", "wrap"):
        inside = te.select(idx < kept, idx, idx - kept if mode == "wrap" else 2 * (kept - 1) - idx)
        return None, te.select(idx < 0, idx + kept if mode == "wrap" else -idx, inside) + start
    if kept == 1:  # every mode but constant repeats the one element
        return (te.all_of(i >= before, i < before + 1) if mode == "constant" else None), te.const(start, "int32")
    if mode == "constant":
        conds = []
        if before > 0:
            conds.append(i >= before)
        conds.append(i < before + kept)
        return te.all_of(*conds), te.min_(te.max_(idx, 0), kept - 1) + start
    if mode == "edge":
        return None, te.min_(te.max_(idx, 0), kept - 1) + start
    if mode == "wrap":
        shift = -(-before // kept) * kept  # a multiple of kept that makes idx >= 0 (% of negatives differs)
        return None, (idx + shift) % kept + start
    period = 2 * (kept - 1)  # reflect: the mirror images repeat with this period (numpy's reflect)
    m = (idx + -(-before // period) * period) % period
    return None, te.select(m < kept, m, period - m) + start


def _pad_compute(inputs, attrs, out_type):
    x, = inputs
    axes = _pad_crop(x.shape, attrs.pads)

    def body(*i):
        conds, idx = [], []
        for d, (start, kept, before, extent) in enumerate(axes):
            if kept == extent:  # not padded (maybe cropped)
                idx.append(i[d] + start)
                continue
            cond, read = pad_source(i[d], start, kept, before, attrs.mode)
            idx.append(read)
            if cond is not None:
                conds.append(cond)
        read = x[tuple(idx)]
        return te.select(te.all_of(*conds), read, te.const(attrs.value, x.dtype)) if conds else read
    return te.compute(out_type.shape, body, name="pad", tag="injective")


register_op("pad", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_pad_infer, ref=_pad_ref,
            compute=_pad_compute, normalize=_pad_normalize, flops=_movement_flops,
            attrs={"pads": REQUIRED, "mode": "constant", "value": 0.0},
            doc="ONNX Pad: pads = all befores then all afters; negative pads crop first; modes constant (value), "
                "reflect, edge, wrap (numpy's np.pad modes reflect, edge, wrap)")

# ---------------------------------------------------------------------------------------------- gather_elements


def _same_rank_not_larger(op, data, indices, axis):
    if indices.ndim != data.ndim:
        raise OpError(f"{op}: indices {indices.shape} must have the rank of data {data.shape}")
    for d in range(data.ndim):
        if d != axis and indices.shape[d] > data.shape[d]:
            raise OpError(f"{op}: indices {indices.shape} exceed data {data.shape} in dim {d}")


def _gather_elements_infer(arg_types, attrs):
    data, indices = arg_types
    _expect_indices("gather_elements", indices)
    _same_rank_not_larger("gather_elements", data, indices, attrs.axis)
    return TensorType(indices.shape, data.dtype)


def _gather_elements_ref(data, indices, axis):
    _check_range("gather_elements", indices, data.shape[axis], f"axis {axis}")
    index = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take_along_axis(data[tuple(slice(0, s) if d != axis else slice(None)
                                         for d, s in enumerate(indices.shape))], index, axis=axis)


def _gather_elements_compute(inputs, attrs, out_type):
    data, indices = inputs
    ax = attrs.axis

    def body(*i):
        k = clamped_index(indices[i], data.shape[ax])
        return data[tuple(i[:ax]) + (k,) + tuple(i[ax + 1:])]
    return te.compute(out_type.shape, body, name="gather_elements", tag="injective")


register_op("gather_elements", inputs=2, pattern=Pattern.INJECTIVE, op_class="layout",
            infer=_gather_elements_infer, ref=_gather_elements_ref, compute=_gather_elements_compute,
            normalize=_axis_normalize("gather_elements"), attrs={"axis": 0}, flops=_movement_flops,
            doc="out[i] = data[i with axis replaced by indices[i]] (ONNX GatherElements); compiled code clamps an "
                "index out of range (check them before: runtime/feeds.py)")

# ---------------------------------------------------------------------------------------------- gather_nd


def _nd_depth(op, data, indices, batch_dims):
    k = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or not 1 <= k <= data.ndim - batch_dims:
        raise OpError(f"{op}: the last dim of indices {indices.shape} must be in [1, {data.ndim - batch_dims}] "
                      f"for data {data.shape} with batch_dims {batch_dims}")
    return k


def _gather_nd_infer(arg_types, attrs):
    data, indices = arg_types
    _expect_indices("gather_nd", indices)
    b = attrs.batch_dims
    if not 0 <= b < min(data.ndim, indices.ndim):
        raise OpError(f"gather_nd: batch_dims {b} must be in [0, {min(data.ndim, indices.ndim)})")
    if data.shape[:b] != indices.shape[:b]:
        raise OpError(f"gather_nd: the first {b} dims of data {data.shape} and indices {indices.shape} differ")
    k = _nd_depth("gather_nd", data, indices, b)
    return TensorType(indices.shape[:-1] + data.shape[b + k:], data.dtype)


def _gather_nd_ref(data, indices, batch_dims):
    b, k = batch_dims, indices.shape[-1]
    for t in range(k):
        _check_range("gather_nd", indices[..., t], data.shape[b + t], f"dim {b + t}")
    batch = data.shape[:b]
    flat_data = data.reshape((-1,) + data.shape[b:])
    flat_idx = indices.reshape((num_elements(batch), -1, k))
    out = []
    for n in range(flat_data.shape[0]):
        for row in flat_idx[n]:
            out.append(flat_data[n][tuple(int(v) for v in row)])
    return np.asarray(out, dtype=data.dtype).reshape(indices.shape[:-1] + data.shape[b + k:])


def _gather_nd_compute(inputs, attrs, out_type):
    data, indices = inputs
    b, q = attrs.batch_dims, indices.ndim
    k = indices.shape[-1]

    def body(*i):
        pos = tuple(i[:q - 1])
        idx = tuple(clamped_index(indices[pos + (t,)], data.shape[b + t]) for t in range(k))
        return data[tuple(i[:b]) + idx + tuple(i[q - 1:])]
    return te.compute(out_type.shape, body, name="gather_nd", tag="injective")


register_op("gather_nd", inputs=2, pattern=Pattern.INJECTIVE, op_class="layout", infer=_gather_nd_infer,
            ref=_gather_nd_ref, compute=_gather_nd_compute, attrs={"batch_dims": 0}, flops=_movement_flops,
            doc="ONNX GatherND: slices of data at the index tuples in the last dim of indices, over batch_dims "
                "leading dims; compiled code clamps an index out of range (check them before: runtime/feeds.py)")

# ---------------------------------------------------------------------------------------------- scatters


def _reduction_normalize(op, with_axis):
    def normalize(attrs, arg_types):
        attrs = dict(attrs)
        if attrs["reduction"] not in REDUCTIONS:
            raise OpError(f"{op}: reduction must be one of {REDUCTIONS}, got {attrs['reduction']!r}")
        if with_axis:
            attrs["axis"] = normalize_axis(op, attrs["axis"], arg_types[0].ndim)
        return attrs
    return normalize


def _check_reduction(op, reduction, dtype, positions):
    if reduction != "none" and dtype == "bool":
        raise OpError(f"{op}: reduction {reduction} of a bool tensor is not supported")
    if reduction == "mul" and positions > MAX_MUL_UPDATES:
        raise OpError(f"{op}: reduction mul with {positions} update positions per output element is not "
                      f"supported (at most {MAX_MUL_UPDATES}: it is unrolled)")


def _apply(reduction, old, new):
    """numpy: old combined with new (for the references)."""
    if reduction == "none":
        return new
    return {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction](old, new)


def _combine(reduction, old, new):
    """te: old combined with new."""
    return {"add": lambda: old + new, "mul": lambda: old * new, "max": lambda: te.max_(old, new),
            "min": lambda: te.min_(old, new)}[reduction]()


def scatter_compute(data, updates, reduction, extents, match, update_index, name):
    """out[j] = data[j] combined with updates[update_index(j, u)] for every u (a tuple over `extents`, in
    row-major order) where match(j, u) holds. Reads of updates must be clamped by update_index."""
    if reduction == "mul":
        def chain(*j):
            value = data[j]
            for u in itertools.product(*[range(e) for e in extents]):
                u = tuple(te.const(v, "int32") for v in u)
                value = te.select(match(j, u), value * updates[update_index(j, u)], value)
            return value
        return te.compute(data.shape, chain, name=name, tag="injective")
    raxes = [te.reduce_axis(e, f"u{d}") for d, e in enumerate(extents)]
    u = tuple(a.var for a in raxes)
    if reduction == "none":  # the last matching position in row-major order, -1 if none
        strides = [num_elements(extents[d + 1:]) for d in range(len(extents))]
        linear = sum((v * s for v, s in zip(u[1:], strides[1:])), u[0] * strides[0])
        last = te.compute(data.shape, lambda *j: te.max_reduce(te.select(match(j, u), linear, -1), raxes),
                          name=name + "_last", tag="scatter")

        def pick(*j):
            at = te.max_(last[j], 0)
            pos = tuple((at // s) % e if d else at // s for d, (s, e) in enumerate(zip(strides, extents)))
            return te.select(last[j] >= 0, updates[update_index(j, pos)], data[j])
        return te.compute(data.shape, pick, name=name, tag="injective")
    reducer = {"add": te.sum, "max": te.max_reduce, "min": te.min_reduce}[reduction]
    identity = te.reduce_identity({"add": "sum"}.get(reduction, reduction), data.dtype)
    total = te.compute(data.shape, lambda *j: reducer(te.select(match(j, u), updates[update_index(j, u)], identity),
                                                      raxes), name=name + "_" + reduction, tag="scatter")
    return te.compute(data.shape, lambda *j: _combine(reduction, data[j], total[j]), name=name, tag="injective")


def _scatter_elements_infer(arg_types, attrs):
    data, indices, updates = arg_types
    _expect_indices("scatter_elements", indices)
    _same_rank_not_larger("scatter_elements", data, indices, attrs.axis)
    if updates.shape != indices.shape or updates.dtype != data.dtype:
        raise OpError(f"scatter_elements: updates {updates.shape} {updates.dtype} must have the shape of indices "
                      f"{indices.shape} and the dtype of data {data.dtype}")
    _check_reduction("scatter_elements", attrs.reduction, data.dtype, indices.shape[attrs.axis])
    return data


def _scatter_elements_ref(data, indices, updates, axis, reduction):
    _check_range("scatter_elements", indices, data.shape[axis], f"axis {axis}")
    out = data.copy()
    for pos in np.ndindex(*indices.shape):
        target = list(pos)
        target[axis] = int(indices[pos]) % data.shape[axis]
        out[tuple(target)] = _apply(reduction, out[tuple(target)], updates[pos])
    return out


def _scatter_elements_compute(inputs, attrs, out_type):
    data, indices, updates = inputs
    ax, n = attrs.axis, data.shape[attrs.axis]

    def position(j, u):  # the update position of output j for candidate u (clamped into indices)
        return tuple(u[0] if d == ax else (te.min_(j[d], indices.shape[d] - 1) if indices.shape[d] < data.shape[d]
                                           else j[d]) for d in range(data.ndim))

    def match(j, u):
        inside = [j[d] < indices.shape[d] for d in range(data.ndim) if d != ax and indices.shape[d] < data.shape[d]]
        value = indices[position(j, u)]
        return te.all_of(*inside, te.eq(_normalized(value, n), te.cast(value.dtype, j[ax])))
    return scatter_compute(data, updates, attrs.reduction, (indices.shape[ax],), match, position,
                           "scatter_elements")


register_op("scatter_elements", inputs=3, pattern=Pattern.OPAQUE, op_class="layout",
            infer=_scatter_elements_infer, ref=_scatter_elements_ref, compute=_scatter_elements_compute,
            normalize=_reduction_normalize("scatter_elements", True), attrs={"axis": 0, "reduction": "none"},
            flops=lambda arg_types, attrs, out: float(out.size * arg_types[1].shape[attrs.axis]),
            doc="ONNX ScatterElements: data with updates[p] written (reduction none: the last one wins) or "
                "combined (add, mul, max, min) at p with axis replaced by indices[p]; an index out of range "
                "writes nothing in compiled code (check them before: runtime/feeds.py)")


def _scatter_nd_infer(arg_types, attrs):
    data, indices, updates = arg_types
    _expect_indices("scatter_nd", indices)
    k = _nd_depth("scatter_nd", data, indices, 0)
    want = indices.shape[:-1] + data.shape[k:]
    if updates.shape != want or updates.dtype != data.dtype:
        raise OpError(f"scatter_nd: updates {updates.shape} {updates.dtype} must have shape {want} (indices' "
                      f"leading dims, then data's after the first {k}) and the dtype of data {data.dtype}")
    _check_reduction("scatter_nd", attrs.reduction, data.dtype, num_elements(indices.shape[:-1]))
    return data


def _scatter_nd_ref(data, indices, updates, reduction):
    k = indices.shape[-1]
    for t in range(k):
        _check_range("scatter_nd", indices[..., t], data.shape[t], f"dim {t}")
    out = data.copy()
    for pos in np.ndindex(*indices.shape[:-1]):
        target = tuple(int(v) % data.shape[t] for t, v in enumerate(indices[pos]))
        out[target] = _apply(reduction, out[target], updates[pos])
    return out


def _scatter_nd_compute(inputs, attrs, out_type):
    data, indices, updates = inputs
    k = indices.shape[-1]

    def match(j, u):
        conds = []
        for t in range(k):
            value = indices[tuple(u) + (t,)]
            conds.append(te.eq(_normalized(value, data.shape[t]), te.cast(value.dtype, j[t])))
        return te.all_of(*conds)
    return scatter_compute(data, updates, attrs.reduction, indices.shape[:-1], match,
                           lambda j, u: tuple(u) + tuple(j[k:]), "scatter_nd")


register_op("scatter_nd", inputs=3, pattern=Pattern.OPAQUE, op_class="layout", infer=_scatter_nd_infer,
            ref=_scatter_nd_ref, compute=_scatter_nd_compute,
            normalize=_reduction_normalize("scatter_nd", False), attrs={"reduction": "none"},
            flops=lambda arg_types, attrs, out: float(out.size * num_elements(arg_types[1].shape[:-1])),
            doc="ONNX ScatterND: data with the slices updates[p] written (reduction none: the last one wins) or "
                "combined (add, mul, max, min) at the index tuples indices[p]; an index out of range writes "
                "nothing in compiled code (check them before: runtime/feeds.py)")

# ---------------------------------------------------------------------------------------------- one_hot


def _one_hot_normalize(attrs, arg_types):
    attrs = dict(attrs)
    attrs["axis"] = normalize_axis("one_hot", attrs["axis"], arg_types[0].ndim + 1)
    attrs["depth"] = int(attrs["depth"])
    if attrs["depth"] < 1:
        raise OpError(f"one_hot: depth must be >= 1, got {attrs['depth']}")
    return attrs


def _one_hot_infer(arg_types, attrs):
    indices, values = arg_types
    _expect_indices("one_hot", indices)
    if values.shape != (2,):
        raise OpError(f"one_hot: values must be [off_value, on_value] (shape (2,)), got shape {values.shape}")
    ax = attrs.axis
    return TensorType(indices.shape[:ax] + (attrs.depth,) + indices.shape[ax:], values.dtype)


def _one_hot_ref(indices, values, depth, axis):
    index = np.where(indices < 0, indices + depth, indices)
    hot = np.expand_dims(index, axis) == np.arange(depth).reshape((-1,) + (1,) * (indices.ndim - axis))
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def _one_hot_compute(inputs, attrs, out_type):
    indices, values = inputs
    ax = attrs.axis

    def body(*i):
        value = indices[tuple(i[:ax]) + tuple(i[ax + 1:])]
        hot = te.eq(_normalized(value, attrs.depth), te.cast(value.dtype, i[ax]))
        return te.select(hot, values[te.const(1, "int32")], values[te.const(0, "int32")])
    return te.compute(out_type.shape, body, name="one_hot", tag="injective")


register_op("one_hot", inputs=2, pattern=Pattern.INJECTIVE, op_class="layout", infer=_one_hot_infer,
            ref=_one_hot_ref, compute=_one_hot_compute, normalize=_one_hot_normalize,
            attrs={"depth": REQUIRED, "axis": -1}, flops=_movement_flops,
            doc="ONNX OneHot: values[1] where the position along the new axis equals the index (negative ones "
                "count from the end), values[0] elsewhere (also for an index out of range)")

"""Converters of the data-movement ops: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Identity, Slice,
Split, Gather, GatherElements, GatherND, ScatterElements (and the older Scatter), ScatterND, Pad, OneHot, Expand,
Trilu, ReverseSequence (relayish/ops/movement.py and transform ops), and the ones written with
reshape/transpose/broadcast_to/slices: DepthToSpace, SpaceToDepth, Tile, CenterCropPad; EyeLike is a constant (its
value depends only on the input's shape).

Conventions: frontends/onnx/registry.py. Inputs that decide a shape (shape, pads, repeats, depth, starts, ends,
split) must be constants. Constant indices are checked here; indices given at run time are checked by the runtime
before native code runs (compiler/index_bounds.py).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from relayish import Call, Constant, Expr, call, const, get_op
from relayish.dims import exact_quotient
from relayish.op import OpError
from relayish.ops.common import broadcast_shape, show_shape
from relayish.prim_expr import PrimExpr
from relayish.types import DTYPES, dim, is_static_dim

from ..builders import binary, fixed_dims, fold, is_const, matched_dims, normalize_axis, reshape, shape_of, transpose
from ..registry import converter
from ..shape_values import dims_input, require
from ..values import (ConversionError, checked_elements, constant_value, empty, int_list_input, int_tuple,
                      optional_ints, scalar_input)


INDEX_DTYPES = (np.int32, np.int64)


def _check_constant_indices(indices, extents, what: str):
    """Constant indices: int32/int64, each in [-n, n) of its extent (extents broadcast against the values)."""
    if not is_const(indices):
        return
    value = indices.data
    if value.dtype not in INDEX_DTYPES:
        raise ConversionError(f"input 'indices' must be int32 or int64, got {value.dtype}")
    n = np.broadcast_to(np.asarray(extents), value.shape) if value.size else np.asarray(extents)
    bad = (value < -n) | (value >= n)
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ConversionError(f"indices hold {int(value[where])} at {where}, out of range of {what}")


# ---- reshapes, transposes, concatenation ----

@converter("Identity")
def identity(x):
    return x


@converter("Flatten")
def flatten(x, *, axis=1):
    shape = shape_of(x)
    if not -len(shape) <= axis <= len(shape):
        raise ConversionError(f"axis {axis} out of range for a {len(shape)}-D input")
    axis = axis + len(shape) if axis < 0 else axis
    return reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@converter("Reshape")
def reshape_(data, shape, *, allowzero=0):
    """0 copies the input's dim at that position (unless allowzero), -1 is inferred (at most one). Over dims known
    only at run time, the -1 must divide out exactly (relayish.dims.exact_quotient)."""
    target = list(dims_input(shape, "shape"))
    in_shape = shape_of(data)
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ConversionError(f"shape {tuple(target)}: a 0 at position {i} has no input dim to copy "
                                      f"(input shape {in_shape})")
            target[i] = in_shape[i]
    free = [d for d in target if isinstance(d, int) and d == -1]
    if len(free) > 1 or any(isinstance(d, int) and d < -1 for d in target):
        raise ConversionError(f"invalid shape {tuple(target)}")
    size, known = dim(math.prod(in_shape)), dim(math.prod(d for d in target if not (isinstance(d, int) and d == -1)))
    if free:
        inferred = exact_quotient(size, known) if known != 0 else None
        if inferred is None and target[0] == -1 and in_shape and isinstance(in_shape[0], int) and \
                all(isinstance(d, int) for d in target[1:]):
            inferred = in_shape[0]  # a flatten to (-1, features) over a free size: the -1 is the batch (_fixed_to)
        if inferred is None:
            raise ConversionError(f"cannot reshape {show_shape(in_shape)} to {show_shape(target)}: the -1 does not "
                                  f"divide out exactly")
        target[target.index(-1)] = inferred
    if dim(math.prod(target)) != size:
        data = _fixed_to(data, target)
        if dim(math.prod(target)) != dim(math.prod(shape_of(data))):
            raise ConversionError(f"cannot reshape {show_shape(in_shape)} ({size} elements) to {show_shape(target)}")
    return reshape(data, target)


def _fixed_to(data, target: list):
    """data with its one dim known only at run time fixed (fixed_dims) to what a target shape of fixed dims
    needs: ShuffleNet's channel shuffle reshapes (1, 54, h, 56) to (1, 3, 18, 56, 56), so h is 56 at every size
    it runs at. data itself where that is not the case (another error follows)."""
    shape = shape_of(data)
    free = [a for a, d in enumerate(shape) if not is_static_dim(d)]
    if len(free) != 1 or not all(isinstance(d, int) for d in target):
        return data
    rest = math.prod(d for a, d in enumerate(shape) if a != free[0])
    if rest == 0 or math.prod(target) % rest:
        return data
    return fixed_dims(data, {free[0]: math.prod(target) // rest}, "the reshape's input")


@converter("Transpose")
def transpose_(data, *, perm=None):
    ndim = len(shape_of(data))
    perm = tuple(perm) if perm is not None else tuple(reversed(range(ndim)))
    if sorted(perm) != list(range(ndim)):
        raise ConversionError(f"perm {perm} is not a permutation of the {ndim} axes")
    return transpose(data, perm)


def _squeeze(data, axes):
    shape = shape_of(data)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {normalize_axis(a, len(shape), "squeeze axis") for a in axes}
    for a in sorted(axes):
        if not is_static_dim(shape[a]):  # (a CRNN's height pooled to 1): 1 at the sizes served, checked per call
            require(2 - shape[a], f"squeezed axis {a} of size {shape[a]} must be 1")
            data = fold("strided_slice", data, begin=(0,), end=(1,), axes=(a,))
        elif shape[a] != 1:
            raise ConversionError(f"cannot squeeze axis {a} of size {shape[a]} (input shape {shape})")
    return reshape(data, [d for i, d in enumerate(shape_of(data)) if i not in axes])


def _unsqueeze(data, axes):
    shape = shape_of(data)
    ndim = len(shape) + len(axes)
    axes = [normalize_axis(a, ndim, "unsqueeze axis") for a in axes]
    if len(set(axes)) != len(axes):
        raise ConversionError(f"duplicate unsqueeze axes {tuple(axes)}")
    dims = iter(shape)
    return reshape(data, [1 if i in axes else next(dims) for i in range(ndim)])


@converter("Squeeze")
def squeeze_v1(data, *, axes=None):
    return _squeeze(data, axes)


@converter("Squeeze", since=13)
def squeeze_v13(data, axes=None):
    return _squeeze(data, None if axes is None else int_list_input(axes, "axes"))


@converter("Unsqueeze")
def unsqueeze_v1(data, *, axes):
    return _unsqueeze(data, axes)


@converter("Unsqueeze", since=13)
def unsqueeze_v13(data, axes):
    return _unsqueeze(data, int_list_input(axes, "axes"))


@converter("Concat")
def concat(*inputs, axis):
    axis = normalize_axis(axis, len(shape_of(inputs[0])))
    # an empty part adds nothing (exporters slice shape[2:2])
    nonempty = [x for x in inputs if not (is_static_dim(shape_of(x)[axis]) and shape_of(x)[axis] == 0)]
    if nonempty and len(nonempty) < len(inputs):
        call("concatenate", *inputs, axis=axis)  # (the parts' shapes are checked all the same)
        inputs = tuple(nonempty)
    if len(inputs) == 1:
        return inputs[0]
    if is_const(*inputs):
        return Constant(np.concatenate([x.data for x in inputs], axis=axis))
    if len({len(shape_of(x)) for x in inputs}) == 1:  # run-time dims that must be equal are matched
        fixed = {a: d for x in inputs for a, d in enumerate(shape_of(x)) if a != axis and isinstance(d, int)}
        inputs = [fixed_dims(x, fixed, f"input {k}") for k, x in enumerate(inputs)]  # (meeting a part's fixed dim)
        first = shape_of(inputs[0])
        inputs = [inputs[0]] + [matched_dims(x, {a: d for a, d in enumerate(first) if a != axis}) for x in inputs[1:]]
    return call("concatenate", *inputs, axis=axis)


# ---- slices ----

def _slice(data, starts, ends, axes, steps):
    axes = tuple(range(len(starts))) if axes is None else tuple(axes)
    steps = (1,) * len(starts) if steps is None else tuple(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ConversionError(f"starts {tuple(starts)}, ends {tuple(ends)}, axes {axes} and steps {steps} must "
                              f"have equal lengths")
    shape = shape_of(data)
    starts, ends = list(starts), list(ends)
    for k, (b, e, a, s) in enumerate(zip(starts, ends, axes, steps)):
        n = shape[normalize_axis(a, len(shape))]
        if not all(isinstance(v, int) for v in (b, e, n)):
            starts[k], ends[k] = _run_time_bounds(b, e, n, s, a)
    if any(isinstance(v, PrimExpr) for v in starts + ends):  # (a slice of a constant is not folded then)
        return call("strided_slice", data, begin=tuple(starts), end=tuple(ends), strides=steps, axes=axes)
    return fold("strided_slice", data, begin=tuple(starts), end=tuple(ends), strides=steps, axes=axes)


_END = 1 << 62  # an end at least this large means "to the end of the axis" (exporters write INT64_MAX)


def _run_time_bounds(b, e, n, step, axis) -> tuple:
    """A slice bound to dims known only at run time (the axis extent, or the bounds): begin and end resolved as ONNX
    resolves them (negative from the end, a huge end to the end), a positive step (YOLOX's x[..., ::2, ::2]). That
    the slice is not empty and that its bounds are inside the axis (ONNX would clamp them) is recorded for the
    generic module to check per call (shape_values.require): sizes outside are compiled for."""
    if step < 1:
        raise ConversionError(f"a slice of axis {axis} with step {step} over dims known only at run time is not "
                              f"supported (a positive step only)")

    def resolve(v):
        if isinstance(v, int):
            return dim(n + v) if v < 0 else (n if v >= _END else v)
        return dim(v)
    begin, end = resolve(b), resolve(e)
    require(begin + 1, f"slice begin {b} of axis {axis} (size {n}) must be inside the axis")
    require(n - end + 1, f"slice end {e} of axis {axis} (size {n}) must be inside the axis")
    require(end - begin, f"the slice {b}:{e} of axis {axis} (size {n}) must not be empty")
    return begin, end


@converter("Slice")
def slice_v1(data, *, starts, ends, axes=None):
    return _slice(data, starts, ends, axes, None)


@converter("Slice", since=10)
def slice_v10(data, starts, ends, axes=None, steps=None):
    index_types = (np.int64, np.int32)  # (Slice's Tind)
    return _slice(data, dims_input(starts, "starts", index_types), dims_input(ends, "ends", index_types),
                  optional_ints(axes, "axes"), optional_ints(steps, "steps"))


def _split(data, axis, sizes, count):
    """One strided_slice per part: `sizes` along axis, or `count` parts (ONNX: equal, the last smaller)."""
    extent = shape_of(data)[normalize_axis(axis, len(shape_of(data)))]
    if sizes is None:
        if count < 1:
            raise ConversionError("no output to split into")
        part = -(-extent // count)
        sizes = [min(part, extent - i * part) for i in range(count)]
        if sizes[-1] <= 0:
            raise ConversionError(f"cannot split an axis of {extent} into {count} parts")
    if sum(sizes) != extent or any(s < 0 for s in sizes):
        raise ConversionError(f"split sizes {tuple(sizes)} do not add up to the axis extent {extent}")
    offsets = np.cumsum([0] + list(sizes)).tolist()
    return tuple(_slice(data, [offsets[i]], [offsets[i + 1]], [axis], None) for i in range(len(sizes)))


@converter("Split", since=2)
def split_v2(data, *, axis=0, split=None, _outputs=1):
    return _split(data, axis, None if split is None else list(split), _outputs)


@converter("Split", since=13)
def split_v13(data, split=None, *, axis=0, _outputs=1):
    return _split(data, axis, None if split is None else list(int_tuple(constant_value(split, "split"))), _outputs)


@converter("Split", since=18)
def split_v18(data, split=None, *, axis=0, num_outputs=None, _outputs=1):
    if (split is None) == (num_outputs is None):
        raise ConversionError("exactly one of the input 'split' and the attribute num_outputs must be given")
    if split is not None:
        return split_v13(data, split, axis=axis, _outputs=_outputs)
    if num_outputs != _outputs:
        raise ConversionError(f"num_outputs={num_outputs} but the node has {_outputs} outputs")
    return _split(data, axis, None, num_outputs)


# ---- Pad ----

def _pad(data, pads, mode, value, axes=None):
    """value: a number, or a run-time scalar tensor (constant mode: the data padded with 0, then a where with the
    constant mask of the data's positions puts value around it)."""
    ndim = len(shape_of(data))
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ConversionError(f"mode must be 'constant', 'reflect', 'edge' or 'wrap', got {mode!r}")
    axes = tuple(range(ndim)) if axes is None else tuple(normalize_axis(a, ndim, "axes value") for a in axes)
    if len(set(axes)) != len(axes):
        raise ConversionError(f"repeated axes {axes}")
    if len(pads) != 2 * len(axes):
        raise ConversionError(f"pads must have 2 values per padded axis ({2 * len(axes)}), got {len(pads)}")
    full = [0] * (2 * ndim)
    for k, a in enumerate(axes):
        full[a], full[ndim + a] = pads[k], pads[len(axes) + k]
    if not any(full):
        return data
    _require_pad_fits(shape_of(data), full, mode)
    if not isinstance(value, Expr):
        return fold("pad", data, pads=tuple(full), mode=mode, value=float(value))
    if value.type.dtype != data.type.dtype or value.type.size != 1:
        raise ConversionError(f"input 'constant_value' must be one {data.type.dtype} value, got shape "
                              f"{shape_of(value)} of {value.type.dtype}")
    if not all(is_static_dim(d) for d in shape_of(data)):
        raise ConversionError("a constant_value computed at run time over dims known only at run time is not "
                              "supported")
    padded = fold("pad", data, pads=tuple(full), mode=mode, value=0.0)
    inside = get_op("pad").ref(np.ones(shape_of(data), bool), pads=tuple(full), mode=mode, value=0.0)
    return fold("where", Constant(inside), padded, reshape(value, ()))


def _require_pad_fits(shape, pads, mode: str):
    """Over a dim known only at run time, what the pad needs of it, checked per call by the generic module
    (shape_values.require): what a crop keeps is not empty; a reflect pad is shorter than it (one mirror image,
    as onnxruntime requires), a wrap pad no longer."""
    ndim = len(shape)
    for a, n in enumerate(shape):
        if is_static_dim(n):
            continue
        before, after = pads[a], pads[ndim + a]
        kept = n - max(-before, 0) - max(-after, 0)
        require(kept, f"axis {a} of {shape} cropped by pads {pads} must keep an element")
        for p in (before, after):
            if p > 0 and mode == "reflect":
                require(kept - p, f"a reflect pad of {p} over axis {a} needs more than {p} elements")
            elif p > 0 and mode == "wrap":
                require(kept - p + 1, f"a wrap pad of {p} over axis {a} needs at least {p} elements")


@converter("Pad", since=2)
def pad_v2(data, *, pads, mode="constant", value=0.0):
    return _pad(data, int_tuple(pads), mode, value)


@converter("Pad", since=11)
def pad_v11(data, pads, constant_value=None, axes=None, *, mode="constant"):
    """axes exists from opset 18 (the importer refuses an input a schema does not have). constant_value may be
    given at run time; only constant mode reads it."""
    pads = int_list_input(pads, "pads")
    axes = None if axes is None else int_list_input(axes, "axes", (np.int64, np.int32))
    if constant_value is None or mode != "constant":
        value = 0.0
    elif is_const(constant_value):
        value = scalar_input(constant_value, "constant_value")
    else:
        value = constant_value
    return _pad(data, pads, mode, value, axes)


# ---- gathers ----

@converter("Gather")
def gather(data, indices, *, axis=0):
    axis = normalize_axis(axis, len(shape_of(data)))
    if is_const(indices):  # run-time indices are checked at the boundary (runtime/feeds.py) or clamped
        index, n = indices.data, shape_of(data)[axis]
        if index.dtype not in (np.int32, np.int64):
            raise ConversionError(f"input 'indices' must be int32 or int64, got {index.dtype}")
        if index.size and (index.min() < -n or index.max() >= n):
            raise ConversionError(f"indices {int_tuple(index)} out of range for axis {axis} of size {n}")
    _require_range_in(indices, shape_of(data)[axis], axis)
    return fold("take", data, indices, axis=axis)


def _require_range_in(indices, n, axis: int):
    """Indices made by a Range of run-time length (positions 0..T-1 gathering a position table): compiled take
    clamps them, onnxruntime refuses them past the table, so the generic module checks per call that the last
    one is inside the axis (shape_values.require); a static compile checks the folded constant above."""
    while isinstance(indices, Call) and indices.op == "reshape":
        indices = indices.args[0]
    if not (isinstance(indices, Call) and indices.op == "arange" and isinstance(indices.args[0], Constant)):
        return
    first, count, delta = int(indices.args[0].data), indices.attrs.count, indices.attrs.delta
    if first < 0:
        raise ConversionError(f"a range from {first} indexes axis {axis} (negative positions of a run-time range "
                              f"are not supported)")
    require(n - (first + (count - 1) * delta), f"the range of positions {first}..{first} + ({count} - 1) * "
                                                f"{delta} must be inside axis {axis} of size {n}")


@converter("GatherElements", since=11)
def gather_elements(data, indices, *, axis=0):
    axis = normalize_axis(axis, len(shape_of(data)))
    _check_constant_indices(indices, shape_of(data)[axis], f"axis {axis} of size {shape_of(data)[axis]}")
    return fold("gather_elements", data, indices, axis=axis)


@converter("GatherND", since=11)
def gather_nd(data, indices, *, batch_dims=0):
    k = shape_of(indices)[-1] if shape_of(indices) else 0
    dims = shape_of(data)[batch_dims:batch_dims + k]
    if len(dims) == k:
        _check_constant_indices(indices, dims, f"data dims {dims}")
    return fold("gather_nd", data, indices, batch_dims=int(batch_dims))


# ---- scatters ----

@converter("ScatterElements", since=11)
def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    axis = normalize_axis(axis, len(shape_of(data)))
    _check_constant_indices(indices, shape_of(data)[axis], f"axis {axis} of size {shape_of(data)[axis]}")
    return fold("scatter_elements", data, indices, updates, axis=axis, reduction=reduction)


@converter("Scatter", since=9)
def scatter(data, indices, updates, *, axis=0):
    """Deprecated from opset 11: ScatterElements without reduction."""
    return scatter_elements(data, indices, updates, axis=axis)


@converter("ScatterND", since=11)
def scatter_nd(data, indices, updates, *, reduction="none"):
    k = shape_of(indices)[-1] if shape_of(indices) else 0
    dims = shape_of(data)[:k]
    if len(dims) == k:
        _check_constant_indices(indices, dims, f"data dims {dims}")
    return fold("scatter_nd", data, indices, updates, reduction=reduction)


# ---- OneHot, EyeLike, Trilu ----

@converter("OneHot", since=9)
def one_hot(indices, depth, values, *, axis=-1):
    """Indices of another numeric type are converted to int64 (floats truncate, as onnxruntime)."""
    depth = scalar_input(depth, "depth")
    if depth != int(depth) or depth < 1:
        raise ConversionError(f"input 'depth' must be a positive integer, got {depth}")
    if indices.type.dtype not in ("int32", "int64"):
        indices = fold("cast", indices, dtype="int64")
    if shape_of(values) != (2,):
        raise ConversionError(f"input 'values' must be [off_value, on_value] (shape (2,)), got {shape_of(values)}")
    return fold("one_hot", indices, values, depth=int(depth), axis=normalize_axis(axis, len(shape_of(indices)) + 1))


@converter("EyeLike", since=9)
def eye_like(x, *, dtype=None, k=0):
    shape = shape_of(x)
    if len(shape) != 2:
        raise ConversionError(f"input must be 2-D, got shape {shape}")
    out = x.type.dtype if dtype is None else np.dtype(helper.tensor_dtype_to_np_dtype(dtype)).name
    if out not in DTYPES:
        raise ConversionError(f"dtype {out} is not supported (supported: {', '.join(DTYPES)})")
    return Constant(np.eye(shape[0], shape[1], int(k), dtype=out))


@converter("Trilu", since=14)
def trilu(x, k=None, *, upper=1):
    k = 0 if k is None else int(constant_value(k, "k").reshape(()))
    return fold("trilu", x, upper=int(upper), k=k)


# ---- rearrangements: reshape, transpose, broadcast ----

def _blocks(x, blocksize, mode):
    if len(shape_of(x)) != 4:
        raise ConversionError(f"input must be 4-D (N, C, H, W), got shape {shape_of(x)}")
    if mode not in ("DCR", "CRD"):
        raise ConversionError(f"mode must be 'DCR' or 'CRD', got {mode!r}")
    if blocksize < 1:
        raise ConversionError(f"blocksize must be >= 1, got {blocksize}")
    return shape_of(x)


@converter("DepthToSpace", since=1)
def depth_to_space(x, *, blocksize, mode="DCR"):
    b, c, h, w = _blocks(x, blocksize, mode)
    s = blocksize
    if c % (s * s):
        raise ConversionError(f"channels {c} are not a multiple of blocksize^2 = {s * s}")
    if mode == "DCR":
        tmp = transpose(reshape(x, (b, s, s, c // (s * s), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        tmp = transpose(reshape(x, (b, c // (s * s), s, s, h, w)), (0, 1, 4, 2, 5, 3))
    return reshape(tmp, (b, c // (s * s), h * s, w * s))


@converter("SpaceToDepth", since=1)
def space_to_depth(x, *, blocksize, mode="DCR"):
    """mode exists from opset 28 (before, the layout is DCR's)."""
    b, c, h, w = _blocks(x, blocksize, mode)
    s = blocksize
    if h % s or w % s:
        raise ConversionError(f"height {h} and width {w} must be multiples of blocksize {s}")
    tmp = reshape(x, (b, c, h // s, s, w // s, s))
    tmp = transpose(tmp, (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return reshape(tmp, (b, c * s * s, h // s, w // s))


@converter("Tile", since=6)
def tile(x, repeats):
    """x with each dim d repeated repeats[d] times: broadcast a new leading dim of repeats[d] before each dim."""
    shape = shape_of(x)
    reps = int_list_input(repeats, "repeats")
    if len(reps) != len(shape):
        raise ConversionError(f"repeats {reps} must have one value per dim of the input {shape}")
    if any(r < 0 for r in reps):
        raise ConversionError(f"repeats {reps} must be >= 0")
    if all(r == 1 for r in reps):
        return x
    if 0 in reps or 0 in shape:  # an empty result: nothing to compute
        return empty([r * d for r, d in zip(reps, shape)], x.type.dtype)
    if is_const(x):
        checked_elements([r * d for r, d in zip(reps, shape)], "the output")  # before np.tile allocates it
        return Constant(np.tile(x.data, reps))
    interleaved = tuple(v for r, d in zip(reps, shape) for v in (1, d))
    target = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    expanded = call("broadcast_to", reshape(x, interleaved), shape=target)
    return reshape(expanded, tuple(r * d for r, d in zip(reps, shape)))


@converter("Expand", since=8)
def expand(x, shape):
    dims = dims_input(shape, "shape", (np.int64, np.int32))
    if all(isinstance(d, int) for d in dims + tuple(shape_of(x))):
        target = np.broadcast_shapes(shape_of(x), dims)
    else:  # over dims known only at run time (relayish/ops/common.py broadcast_shape decides what it can)
        try:
            target = broadcast_shape("Expand", shape_of(x), dims)
        except OpError as e:
            raise ConversionError(str(e)) from None
    if tuple(target) == tuple(shape_of(x)):
        return x
    return fold("broadcast_to", x, shape=tuple(target)) if all(isinstance(d, int) for d in target) else \
        call("broadcast_to", x, shape=tuple(target))


# ---- ReverseSequence ----

@converter("ReverseSequence", since=10)
def reverse_sequence(x, sequence_lens, *, batch_axis=1, time_axis=0):
    """out[t, b] = x[len[b] - 1 - t, b] for t < len[b], else x[t, b]: a gather along the time axis of indices
    computed from the lengths. Lengths given at run time are clamped to [0, max_time] first, so the indices are
    always in range (onnxruntime refuses such lengths; no length can make native code read outside the input)."""
    shape = shape_of(x)
    if len(shape) < 2:
        raise ConversionError(f"the input must be at least 2-D, got shape {shape}")
    if sorted((batch_axis, time_axis)) != [0, 1]:
        raise ConversionError(f"batch_axis and time_axis must be 0 and 1 in some order, got {batch_axis} and "
                              f"{time_axis}")
    t_len, b_len = shape[time_axis], shape[batch_axis]
    if sequence_lens.type.dtype != "int64" or shape_of(sequence_lens) != (b_len,):
        raise ConversionError(f"input 'sequence_lens' must be int64 of shape ({b_len},), got "
                              f"{sequence_lens.type.dtype} of shape {shape_of(sequence_lens)}")
    if isinstance(sequence_lens, Constant) and np.any((sequence_lens.data < 0) | (sequence_lens.data > t_len)):
        raise ConversionError(f"sequence_lens {sequence_lens.data.tolist()} must be in [0, {t_len}]")
    lens = binary("minimum", binary("maximum", sequence_lens, const(0, "int64")), const(t_len, "int64"))
    both = (t_len, 1) if time_axis == 0 else (1, t_len)
    t = Constant(np.arange(t_len, dtype=np.int64).reshape(both))
    lens = reshape(lens, (1, b_len) if time_axis == 0 else (b_len, 1))
    index = fold("where", fold("less", t, lens), binary("subtract", binary("subtract", lens, const(1, "int64")),
                                                        t), t)
    index = reshape(index, shape_of(index) + (1,) * (len(shape) - 2))
    index = fold("broadcast_to", index, shape=shape)
    return fold("gather_elements", x, index, axis=time_axis)


# ---- CenterCropPad ----

@converter("CenterCropPad", since=18)
def center_crop_pad(x, shape, *, axes=None):
    """Each axis cropped or zero-padded to its target size, centered (an odd difference leaves the extra element at
    the end), as the reference: a slice, then a pad."""
    dims = shape_of(x)
    target = int_list_input(shape, "shape", (np.int64, np.int32))
    axes = tuple(range(len(dims))) if axes is None else tuple(normalize_axis(a, len(dims), "axes value") for a in axes)
    if len(set(axes)) != len(axes):
        raise ConversionError(f"repeated axes {axes}")
    if len(target) != len(axes):
        raise ConversionError(f"shape has {len(target)} values for {len(axes)} axes")
    begin, end, pads = [], [], [0] * (2 * len(dims))
    for a, size in zip(axes, target):
        if size < 1:
            raise ConversionError(f"target size {size} of axis {a} must be >= 1")
        if size < dims[a]:
            start = (dims[a] - size) // 2
            begin.append(start)
            end.append(start + size)
        else:
            begin.append(0)
            end.append(dims[a])
            pads[a] = (size - dims[a]) // 2
            pads[len(dims) + a] = size - dims[a] - pads[a]
    if any(b != 0 or e != dims[a] for a, b, e in zip(axes, begin, end)):
        x = fold("strided_slice", x, begin=tuple(begin), end=tuple(end), strides=(1,) * len(axes), axes=axes)
    if any(pads):
        x = fold("pad", x, pads=tuple(pads), mode="constant", value=0.0)
    return x

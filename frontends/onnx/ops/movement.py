"""Converters of the data-movement ops: Pad, GatherElements, GatherND, ScatterElements (and the older Scatter),
ScatterND, OneHot (relayish/ops/movement.py), and the ones written with reshape/transpose/broadcast_to:
DepthToSpace, SpaceToDepth, Tile; EyeLike is a constant (its value depends only on the input's shape).

Conventions as in frontends/onnx_ops_tensor.py. Inputs that decide a shape (pads, repeats, depth) must be
constants. Constant indices are checked here; indices given at run time are checked by the runtime before native
code runs (compiler/index_bounds.py).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from relayish import Constant, Expr, call, get_op
from relayish.types import DTYPES, numpy_dtype

from ..builders import fold, is_const, normalize_axis, reshape, shape_of, transpose
from ..registry import converter
from ..values import ConversionError, checked_elements, int_list_input, int_tuple, scalar_input

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
    if not isinstance(value, Expr):
        return fold("pad", data, pads=tuple(full), mode=mode, value=float(value))
    if value.type.dtype != data.type.dtype or value.type.size != 1:
        raise ConversionError(f"input 'constant_value' must be one {data.type.dtype} value, got shape "
                              f"{shape_of(value)} of {value.type.dtype}")
    padded = fold("pad", data, pads=tuple(full), mode=mode, value=0.0)
    inside = get_op("pad").ref(np.ones(shape_of(data), bool), pads=tuple(full), mode=mode, value=0.0)
    return fold("where", Constant(inside), padded, reshape(value, ()))


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


# ---- OneHot, EyeLike ----

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
        return Constant(np.zeros([r * d for r, d in zip(reps, shape)], np.dtype(numpy_dtype(x.type.dtype))))
    if is_const(x):
        checked_elements([r * d for r, d in zip(reps, shape)], "the output")  # before np.tile allocates it
        return Constant(np.tile(x.data, reps))
    interleaved = tuple(v for r, d in zip(reps, shape) for v in (1, d))
    target = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    expanded = call("broadcast_to", reshape(x, interleaved), shape=target)
    return reshape(expanded, tuple(r * d for r, d in zip(reps, shape)))

"""Converters of the ops that pick elements by their values: TopK (a rank by pairwise comparison, then a scatter of
the indices to their ranks), and NonZero, Compress, NonMaxSuppression and Unique, whose output shapes depend on the
data (folded at import when it is constant, else, but for Unique, ops sized at run time: relayish/ops/
data_sized.py). Numerics follow onnx's reference implementations (onnx/reference/ops/op_*.py), which generated the
conformance cases. Conventions: frontends/onnx/registry.py.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, free_vars, te

from ..builders import astype, fixed_dims, fold, matched_dims, normalize_axis, reshape, shape_of
from ..registry import converter
from ..values import (ConversionError, RunTimeValueNeeded, constant_value, data_sized_allowed, data_sized_name, empty,
                      int_list_input)

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


# ---- TopK ----

MAX_TOPK_COMPARISONS = 1 << 26  # the rank's [..., n, n] comparison tensors

def _topk(x: Expr, k: int, axis: int, largest: bool, sorted_: bool):
    """(values, int64 indices) of the k largest (smallest) elements along axis, in order, ties broken by the lower
    index and NaN greater than every number, as the reference's lexsort. Each element's rank is the count of the
    elements that come before it (O(n^2) comparisons along the axis); the ranks are a permutation, so scattering
    the positions to their ranks gives the sorted order, whose first k positions gather the values."""
    shape = shape_of(x)
    if not shape:
        raise ConversionError("the input must be at least 1-D, got a scalar")
    axis = normalize_axis(axis, len(shape))
    n = shape[axis]
    if not 0 <= k <= n:
        raise ConversionError(f"k = {k} must be in [0, {n}] (the size of axis {axis})")
    if k == 0 or n == 0:  # empty outputs: known without computing anything
        out = shape[:axis] + (k,) + shape[axis + 1:]
        return empty(out, x.type.dtype), empty(out, "int64")
    # sorted=0 allows any order: the sorted one is given (as onnxruntime does)
    comparisons = int(np.prod(shape)) * n
    if comparisons > MAX_TOPK_COMPARISONS:
        raise ConversionError(f"TopK over axis {axis} of {n} elements of a {shape} input needs {comparisons} pairwise "
                              f"comparisons, more than the {MAX_TOPK_COMPARISONS} this composition allows")
    xi = reshape(x, shape[:axis + 1] + (1,) + shape[axis + 1:])  # element i on axis, j on axis + 1
    xj = reshape(x, shape[:axis] + (1,) + shape[axis:])
    better = fold("greater" if largest else "less", xj, xi)
    tie = fold("equal", xj, xi)
    if x.type.dtype in FLOAT_DTYPES:
        nan_i, nan_j = fold("isnan", xi), fold("isnan", xj)
        nan_first = fold("logical_and", nan_j, fold("logical_not", nan_i)) if largest else \
            fold("logical_and", nan_i, fold("logical_not", nan_j))
        better = fold("logical_or", better, nan_first)
        tie = fold("logical_or", tie, fold("logical_and", nan_i, nan_j))
    lower = np.arange(n)[None, :] < np.arange(n)[:, None]  # [i, j]: j < i
    lower = Constant(lower.reshape((n, n) + (1,) * (len(shape) - axis - 1)))
    before = fold("logical_or", better, fold("logical_and", tie, lower))
    rank = fold("sum", astype(before, "int64"), axes=(axis + 1,), keepdims=False)
    positions = np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (len(shape) - axis - 1))
    positions = Constant(np.ascontiguousarray(np.broadcast_to(positions, shape)))
    order = fold("scatter_elements", Constant(np.zeros(shape, np.int64)), rank, positions, axis=axis)
    if k < n:
        order = fold("strided_slice", order, begin=(0,), end=(k,), strides=(1,), axes=(axis,))
    return fold("gather_elements", x, order, axis=axis), order


@converter("TopK", since=1)
def topk_v1(x, *, k, axis=-1):
    return _topk(x, int(k), axis, True, True)


def _k_input(k) -> int:
    try:
        value = int_list_input(k, "K")
    except RunTimeValueNeeded as e:  # an output sized by data: the generic tier runs it (_run_time_k)
        raise RunTimeValueNeeded(str(e), e.inputs, data_sized=True) from None
    if len(value) != 1:
        raise ConversionError(f"input 'K' must hold one value, got {len(value)}")
    return value[0]


def _run_time_k(x, k, axis: int, largest: bool):
    """TopK with a k computed at run time (the generic tier): every element ranked (k = the axis), then the first
    k of the order along the axis (slice_to_count: k's value at run time, at most the axis), and their values."""
    if shape_of(k) not in ((1,), ()):
        raise ConversionError(f"input 'K' must hold one value, got shape {shape_of(k)}")
    axis = normalize_axis(axis, len(shape_of(x)))
    _, order = _topk(x, shape_of(x)[axis], axis, largest, True)
    first = fold("slice_to_count", order, astype(k, "int64"), axis=axis,
                 count_dim=te.size_var(data_sized_name("topk")))
    return fold("gather_elements", x, first, axis=axis), first


@converter("TopK", since=10)
def topk_v10(x, k, *, axis=-1):
    if not isinstance(k, Constant) and data_sized_allowed():
        return _run_time_k(x, k, axis, True)
    return _topk(x, _k_input(k), axis, True, True)


@converter("TopK", since=11)
def topk_v11(x, k, *, axis=-1, largest=1, sorted=1):  # noqa: A002  (ONNX's attribute name)
    if largest not in (0, 1) or sorted not in (0, 1):
        raise ConversionError(f"largest and sorted must be 0 or 1, got {largest} and {sorted}")
    if not isinstance(k, Constant) and data_sized_allowed():
        return _run_time_k(x, k, axis, bool(largest))
    return _topk(x, _k_input(k), axis, bool(largest), bool(sorted))


# ---- NonZero, Compress, Unique: output shapes that depend on the data ----

def _data_value(x: Expr, what: str, op: str, data_sized: bool = True) -> np.ndarray:
    """The value of an input whose values decide the output's shape; RunTimeValueNeeded saying so otherwise (and
    whether the generic tier's import makes a data-sized op of it)."""
    if isinstance(x, Constant):
        return x.data
    inputs = tuple(sorted({v.name for v in free_vars(x)}))
    raise RunTimeValueNeeded(f"the output shape of {op} depends on the values of input {what!r}, which are "
                             f"computed at run time" + (f" from graph input(s) {list(inputs)}" if inputs else "")
                             + ": relayish compiles static shapes, so it must be a constant", inputs,
                             data_sized=data_sized)


def _data_sized_nonzero(x: Expr):
    """nonzero(x, count) of a value computed at run time: its count a reduction, its columns a size variable of
    their own, the count's value per call (relayish/ops/data_sized.py)."""
    if not shape_of(x):
        x = reshape(x, (1,))
    nonzero = x if x.type.dtype == "bool" else \
        fold("logical_not", fold("equal", x, Constant(np.zeros((), x.type.dtype))))
    count = fold("sum", astype(nonzero, "int64"), axes=tuple(range(len(shape_of(x)))), keepdims=False)
    return fold("nonzero", x, count, count_dim=te.size_var(data_sized_name("nonzero")))


@converter("NonZero", since=9)
def nonzero(x):
    """The indices of the nonzero elements, [rank, count] (a scalar counts as 1-D)."""
    if not isinstance(x, Constant) and data_sized_allowed():
        return _data_sized_nonzero(x)
    value = np.atleast_1d(_data_value(x, "X", "NonZero"))
    return Constant(np.array(np.nonzero(value), np.int64).reshape(value.ndim, -1))  # [rank, 0] if none


@converter("Compress", since=9)
def compress(x, condition, *, axis=None):
    """Only the condition decides the shape: the selected positions are a constant `take` of the input, or, for
    a condition computed at run time in the generic tier, the take of its nonzero positions."""
    if not isinstance(condition, Constant) and data_sized_allowed():
        if len(shape_of(condition)) != 1:
            raise ConversionError(f"input 'condition' must be 1-D, got shape {shape_of(condition)}")
        if axis is None:
            x, axis = reshape(x, (int(np.prod(shape_of(x))),)), 0
        axis = normalize_axis(axis, len(shape_of(x)))
        if shape_of(condition)[0] != shape_of(x)[axis]:  # (a shorter one selects among the first elements)
            x = fold("strided_slice", x, begin=(0,), end=(shape_of(condition)[0],), strides=(1,), axes=(axis,))
        picked = _data_sized_nonzero(astype(condition, "bool"))
        return fold("take", x, reshape(picked, (shape_of(picked)[1],)), axis=axis)
    cond = _data_value(condition, "condition", "Compress")
    if cond.ndim != 1:
        raise ConversionError(f"input 'condition' must be 1-D, got shape {cond.shape}")
    if axis is None:
        x, axis = reshape(x, (int(np.prod(shape_of(x))),)), 0
    axis = normalize_axis(axis, len(shape_of(x)))
    if cond.size > shape_of(x)[axis]:
        raise ConversionError(f"condition has {cond.size} values, more than the {shape_of(x)[axis]} of axis {axis}")
    picked = np.nonzero(cond.astype(bool))[0].astype(np.int64)
    return fold("take", x, Constant(picked), axis=axis)  # nothing selected: an empty result


@converter("NonMaxSuppression", since=10)
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None, *,
                        center_point_box=0):
    """The kept boxes' (batch, class, box) rows: non_max_suppression's rows after the first, which counts them,
    taken by slice_to_count. The thresholds must be constants (as exports write them); an omitted or empty one is
    as onnx's reference: no box kept, an IoU threshold of 0, no score threshold."""
    def given(x, what):
        if x is None:
            return None
        value = constant_value(x, what)
        if value.size > 1:
            raise ConversionError(f"input {what!r} must hold one value, got shape {value.shape}")
        return value.reshape(-1)[0] if value.size else None
    limit = given(max_output_boxes_per_class, "max_output_boxes_per_class")
    iou, floor = given(iou_threshold, "iou_threshold"), given(score_threshold, "score_threshold")
    attrs = dict(max_output=max(int(limit or 0), 0), iou_threshold=float(np.float32(iou or 0)),
                 score_threshold=float("-inf") if floor is None else float(np.float32(floor)),
                 center_point_box=center_point_box)
    for name, x in (("boxes", boxes), ("scores", scores)):
        if x.type.dtype not in FLOAT_DTYPES:
            raise ConversionError(f"input {name!r} must be a float tensor, got {x.type.dtype}")
    boxes, scores = astype(boxes, "float32"), astype(scores, "float32")
    if len(shape_of(boxes)) == 3 and len(shape_of(scores)) == 3:  # their batch and box count must agree (checked
        same = {0: shape_of(boxes)[0], 2: shape_of(boxes)[1]}   # per call where known only at run time): the
        scores = matched_dims(fixed_dims(scores, same, "scores"), same)  # kernel reads boxes by scores' count
        boxes = fixed_dims(boxes, {0: shape_of(scores)[0], 1: shape_of(scores)[2]}, "boxes")
    if isinstance(boxes, Constant) and isinstance(scores, Constant):
        rows = fold("non_max_suppression", boxes, scores, **attrs).data
        return Constant(rows[1:1 + rows[0, 0]])
    if not data_sized_allowed():
        inputs = tuple(sorted({v.name for v in free_vars(boxes) + free_vars(scores)}))
        raise RunTimeValueNeeded("the output shape of NonMaxSuppression depends on the values of its boxes and "
                                 "scores, which are computed at run time", inputs, data_sized=True)
    rows = fold("non_max_suppression", boxes, scores, **attrs)
    count = fold("strided_slice", rows, begin=(0, 0), end=(1, 1), strides=(1, 1), axes=(0, 1))
    return fold("slice_to_count", rows, count, axis=0, start=1, count_dim=te.size_var(data_sized_name("nms")))


def _data_sized_unique(x: Expr, sorted_: bool):
    """unique_positions of the flattened x: its rows' slots 1..U (slice_to_count, U a data-sized dim) are the
    first indices and the counts; its row 1 the inverse indices."""
    flat = reshape(x, (math.prod(shape_of(x)),))  # (an expression of the free dims where one is known at run time)
    n = shape_of(flat)[0]
    rows = fold("unique_positions", flat, sorted=int(sorted_))
    count = fold("strided_slice", rows, begin=(0, 0), end=(1, 1), strides=(1, 1), axes=(0, 1))
    picked = fold("slice_to_count", rows, count, axis=1, start=1, count_dim=te.size_var(data_sized_name("unique")))
    u = shape_of(picked)[1]
    first = reshape(fold("strided_slice", picked, begin=(0,), end=(1,), strides=(1,), axes=(0,)), (u,))
    counts = reshape(fold("strided_slice", picked, begin=(2,), end=(3,), strides=(1,), axes=(0,)), (u,))
    inverse = reshape(fold("strided_slice", rows, begin=(1, 0), end=(2, n), strides=(1, 1), axes=(0, 1)), (n,))
    return fold("take", flat, first, axis=0), first, inverse, counts


@converter("Unique", since=11)
def unique(x, *, axis=None, sorted=1):  # noqa: A002  (ONNX's attribute name)
    """(Y, indices, inverse_indices, counts) as np.unique; sorted=0 keeps the order of first occurrence (the
    spec). Of a constant: folded. Of a run-time value without an axis, in the generic tier: unique_positions,
    whose distinct count U is a data-sized dim (relayish/ops/data_sized.py)."""
    if not isinstance(x, Constant) and axis is None and data_sized_allowed():
        return _data_sized_unique(x, bool(sorted))
    value = _data_value(x, "X", "Unique", data_sized=axis is None)
    if axis is not None:
        axis = normalize_axis(axis, value.ndim)
        flat = np.moveaxis(value, axis, 0).reshape(value.shape[axis], -1)
    else:
        flat = value.reshape(-1, 1)
    if sorted:
        _, first, inverse, counts = np.unique(value, True, True, True, **({} if axis is None else {"axis": axis}))
        inverse = inverse.reshape(-1)
    else:
        position, first, inverse, counts = {}, [], [], []
        keys = [row.tobytes() for row in (flat + 0 if flat.dtype.kind == "f" else flat)]  # -0.0 is 0.0
        for i, key in enumerate(keys):
            if key not in position:
                position[key] = len(first)
                first.append(i)
                counts.append(0)
            inverse.append(position[key])
            counts[position[key]] += 1
    first = np.asarray(first, np.int64)
    y = np.take(value.reshape(-1), first) if axis is None else np.take(value, first, axis=axis)
    return (Constant(np.ascontiguousarray(y)), Constant(first), Constant(np.asarray(inverse, np.int64)),
            Constant(np.asarray(counts, np.int64)))

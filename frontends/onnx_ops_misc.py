"""Converters of miscellaneous ops, each a composition of existing relayish ops: TopK (a rank by pairwise
comparison, then a scatter of the indices to their ranks), Einsum (transpose / reshape / batch matmul / sum),
and the ops whose output shape depends on the data (NonZero, Compress, Unique), folded at import.

Conventions as in frontends/onnx_ops.py. Numerics follow onnx's reference implementations
(onnx/reference/ops/op_*.py), which generated the conformance cases.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, const

from .onnx_ops import _axis, _binary, _is_const, _reshape, _shape, converter
from .onnx_ops_attention import _cast
from .onnx_ops_tensor import fold
from .onnx_values import ConversionError, int_list_input

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


# ---- TopK ----

def _topk(x: Expr, k: int, axis: int, largest: bool, sorted_: bool):
    """(values, int64 indices) of the k largest (smallest) elements along axis, in order, ties broken by the lower
    index and NaN greater than every number, as the reference's lexsort. Each element's rank is the count of the
    elements that come before it (O(n^2) comparisons along the axis); the ranks are a permutation, so scattering
    the positions to their ranks gives the sorted order, whose first k positions gather the values."""
    shape = _shape(x)
    if not shape:
        raise ConversionError("the input must be at least 1-D, got a scalar")
    axis = _axis(axis, len(shape))
    n = shape[axis]
    if not 0 <= k <= n:
        raise ConversionError(f"k = {k} must be in [0, {n}] (the size of axis {axis})")
    if k == 0:
        raise ConversionError("k = 0 gives zero-size outputs, which are not supported")
    if not sorted_:
        pass  # any order is allowed when sorted=0: the sorted one is given (as onnxruntime does)
    xi = _reshape(x, shape[:axis + 1] + (1,) + shape[axis + 1:])  # element i on axis, j on axis + 1
    xj = _reshape(x, shape[:axis] + (1,) + shape[axis:])
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
    rank = fold("sum", _cast(before, "int64"), axes=(axis + 1,), keepdims=False)
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
    value = int_list_input(k, "K")
    if len(value) != 1:
        raise ConversionError(f"input 'K' must hold one value, got {len(value)}")
    return value[0]


@converter("TopK", since=10)
def topk_v10(x, k, *, axis=-1):
    return _topk(x, _k_input(k), axis, True, True)


@converter("TopK", since=11)
def topk_v11(x, k, *, axis=-1, largest=1, sorted=1):  # noqa: A002  (ONNX's attribute name)
    if largest not in (0, 1) or sorted not in (0, 1):
        raise ConversionError(f"largest and sorted must be 0 or 1, got {largest} and {sorted}")
    return _topk(x, _k_input(k), axis, bool(largest), bool(sorted))

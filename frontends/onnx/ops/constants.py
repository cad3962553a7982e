"""Converters of the ops whose values are known at import: Constant, ConstantOfShape, Shape and Size, and Range
(its start, limit and delta must be constants). Over a dim known only at run time, Shape and Size give a
ShapeValue and ConstantOfShape takes one (frontends/onnx/shape_values.py). Conventions: frontends/onnx/registry.py.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, call
from relayish.prim_expr import PrimExpr
from relayish.types import dim

from ..builders import shape_of
from ..registry import converter
from ..shape_values import dims_input, is_symbolic, require
from ..shape_values import value as shape_value
from ..values import ConversionError, checked_elements, constant_value, tensor_array


@converter("Constant")
def constant(*, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             sparse_value=None, value_string=None, value_strings=None):
    given = {k: v for k, v in locals().items() if v is not None}
    if len(given) != 1:
        raise ConversionError(f"exactly one value attribute must be set, got {sorted(given) or 'none'}")
    kind, v = given.popitem()
    if kind == "value":
        return Constant(tensor_array(v, "attribute value"))
    if kind in ("value_float", "value_floats"):
        return Constant(np.asarray(v, np.float32))
    if kind in ("value_int", "value_ints"):
        return Constant(np.asarray(v, np.int64))
    raise ConversionError(f"attribute {kind} is not supported (only numeric constants)")


@converter("ConstantOfShape")
def constant_of_shape(shape, *, value=None):
    fill = tensor_array(value, "attribute value").reshape(-1) if value is not None else np.zeros(1, np.float32)
    if fill.size != 1:
        raise ConversionError(f"value must have exactly one element, got {fill.size}")
    dims = dims_input(shape, "shape")
    if any(isinstance(d, PrimExpr) for d in dims):  # a fill of a size known at run time: a broadcast
        return call("broadcast_to", Constant(fill.reshape((1,) * len(dims))), shape=dims)
    checked_elements(dims, "the output")
    return Constant(np.full(dims, fill[0], dtype=fill.dtype))


@converter("Shape")
def shape_(data, *, start=0, end=None):
    return shape_value(shape_of(data)[start:end], "int64")


@converter("Size")
def size(data):
    """The element count: known at import, or an expression of the run-time dims."""
    return shape_value(math.prod(shape_of(data)), "int64")


@converter("Range", since=11)
def range_(start, limit, delta):
    if is_symbolic(limit):  # a length known only at run time (torch's arange(x.shape[1])): computed by a kernel
        return _run_time_range(start, limit, delta)
    values = [constant_value(v, name).reshape(()) for v, name in ((start, "start"), (limit, "limit"),
                                                                  (delta, "delta"))]
    checked_elements((_range_length(*values),), f"the range from {values[0]} to {values[1]} by {values[2]}")
    return Constant(np.arange(*values).astype(values[0].dtype))


def _run_time_range(start, limit, delta):
    """Range(start, limit, delta) with start and delta > 0 integral constants (0.0 and 1.0 of a float range over a
    dim cast to float, as YOLOv8's anchor grids) and a limit known only at run time: an arange of
    (limit - start + delta - 1) // delta elements, which must not be empty (recorded for the generic module's
    per-call check: shape_values.require)."""
    first, step = (constant_value(v, name).reshape(()) for v, name in ((start, "start"), (delta, "delta")))
    integral = first.dtype.kind in "iu" or (first.dtype.kind == "f" and float(first).is_integer() and
                                            float(step).is_integer())
    if not integral or int(step) < 1:
        raise ConversionError(f"a range to a limit known only at run time must have an integral start and a delta "
                              f">= 1, got start {first} and delta {step}")
    if limit.dtype != first.dtype.name:
        raise ConversionError(f"the limit is {limit.dtype} but start is {first.dtype}")
    end, = dims_input(limit, "limit") if limit.values.ndim == 1 else (limit.values.reshape(()).item(),)
    count = dim((end - int(first) + int(step) - 1) // int(step))
    require(count, f"the range from {int(first)} to {end} by {int(step)} must not be empty")
    delta_attr = int(step) if first.dtype.kind in "iu" else float(step)
    return call("arange", Constant(first), count=count, delta=delta_attr)


def _range_length(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    """max(ceil((limit - start) / delta), 0), the spec's element count, computed before anything is allocated (in
    Python ints for integer ranges: a float would round a long int64 range)."""
    if delta == 0:
        raise ConversionError("delta is 0: the range never reaches its limit")
    if start.dtype.kind in "iu":
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    span = (float(limit) - float(start)) / float(delta)
    if not np.isfinite(span):
        raise ConversionError(f"the range from {start} to {limit} by {delta} has no finite length")
    return max(math.ceil(span), 0)

"""Shape arithmetic over dims known only at run time, evaluated at import.

Models compute shapes from shapes: Shape -> Gather -> Slice of a position table (BERT), Concat(n, n) ->
ConstantOfShape for a causal mask (GPT), Shape -> Gather -> Unsqueeze -> Concat -> Reshape (most exporters).
When a dim is a size variable (te.size_var), Shape gives a ShapeValue: a small integer tensor whose elements are
ints or dim expressions in canonical form (relayish/dims.py). It never becomes a run-time tensor:

- the ops of shape arithmetic (SHAPE_OPS: Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Cast, Identity,
  Add, Sub, Mul, Div, Mod, Neg, Equal, Less, Greater, Where, Max, Min, ReduceProd, Shape, Size) are evaluated
  over it here, an element at a time; a result whose elements are all ints is a Constant again;
- the converters that take a shape (Reshape, Expand, ConstantOfShape, Slice's starts and ends, Range's limit)
  read its dims with `dims_input`;
- anything else it reaches (used as data, a graph output) is refused with a ConversionError naming the input.

Comparisons and Max/Min are decided when they hold for every size >= 1 (relayish.dims.sign); an integer division
is taken as floor division of a numerator that must not be negative. Facts the arithmetic assumes of the sizes
(that numerator, a slice end inside its axis, two dims a feature pyramid adds being equal) are recorded with
`require` as expressions that must be >= 1; the importer returns them, each with what it checks, in the module's
attrs["dim_checks"], and the generic module evaluates them at every call before any kernel runs
(compiler/generic.py: sizes that break one are compiled for instead).
"""
from __future__ import annotations

import operator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from relayish import Constant
from relayish.dims import canonical, exact_quotient, lower_bound, sign
from relayish.prim_expr import PrimExpr

from .values import ConversionError, ShapeValue, int_list_input


def is_symbolic(x) -> bool:
    return isinstance(x, ShapeValue)


# ---- facts the arithmetic assumes, checked per call by the generic module ----

_checks: ContextVar[list | None] = ContextVar("relayish_dim_checks", default=None)


@contextmanager
def collecting_checks():
    """Collect what `require` records during an import: yields the list."""
    token = _checks.set([])
    try:
        yield _checks.get()
    finally:
        _checks.reset(token)


def require(expr, why: str):
    """Record that expr (an int or a dim expression) must be >= 1 for what the import assumed (why) to hold."""
    expr = canonical(expr)
    least = lower_bound(expr)
    if least is not None and least >= 1:
        return
    if isinstance(expr, int):
        raise ConversionError(why)
    found = _checks.get()
    if found is None:
        raise ConversionError(f"{why}: cannot be checked outside an import")
    if not any(isinstance(e, PrimExpr) and e == expr for e, _ in found):
        found.append((expr, why))


# ---- values ----

def elements(x, what: str) -> np.ndarray:
    """The elements of a shape arithmetic input as an object array (ints, bools, dim expressions)."""
    if isinstance(x, ShapeValue):
        return x.values
    if isinstance(x, Constant):
        if x.data.dtype.kind not in "iub":
            raise ConversionError(f"input {what!r} is {x.data.dtype}: arithmetic over dims known only at run time "
                                  f"takes integer values")
        return x.data.astype(object)
    raise ConversionError(f"input {what!r} is a run-time tensor: shape arithmetic over dims known only at run time "
                          f"takes shapes and constants")


def value(values, dtype: str):
    """A ShapeValue of the elements, or a Constant when they are all known."""
    values = np.asarray(values, dtype=object)
    flat = [canonical(v) if isinstance(v, PrimExpr) else v for v in values.reshape(-1)]
    if not any(isinstance(v, PrimExpr) for v in flat):
        return Constant(np.asarray(flat, dtype=np.dtype(dtype)).reshape(values.shape))
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return ShapeValue(out.reshape(values.shape), dtype)


def dims_input(x, what: str, dtypes=(np.int64,)) -> tuple:
    """The values of a 1-D shape input (shape, starts, ends), each an int or a dim expression; a constant one must
    be of one of `dtypes` (int_list_input: Reshape's shape is int64, Slice's starts and ends int32 or int64)."""
    if isinstance(x, ShapeValue):
        if x.values.ndim > 1:
            raise ConversionError(f"input {what!r} must be 1-D, got shape {x.values.shape}")
        return tuple(x.values.reshape(-1))
    return int_list_input(x, what, dtypes)


def _ints(x, what: str) -> tuple[int, ...]:
    if isinstance(x, ShapeValue):
        raise ConversionError(f"input {what!r} is computed from dims known only at run time ({x}); it must be known "
                              f"at import")
    return int_list_input(x, what, (np.int64, np.int32))


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ConversionError(f"axis {axis} out of range for a {ndim}-D value")
    return axis % ndim


# ---- the ops ----

def _decided(a, b, op: str) -> bool:
    """a op b (==, <, >) for every size >= 1, or ConversionError if it depends on the sizes."""
    s = sign(canonical(a - b)) if isinstance(a, PrimExpr) or isinstance(b, PrimExpr) else ((a > b) - (a < b))
    if s is None:
        raise ConversionError(f"cannot decide {a} {op} {b} before run time")
    return {"==": s == 0, "<": s < 0, ">": s > 0}[op]


def _floor_div(a, b):
    if not (isinstance(a, PrimExpr) or isinstance(b, PrimExpr)):
        if not b:
            raise ConversionError("an integer division by zero in shape arithmetic")
        q = abs(a) // abs(b)  # ONNX's integer division truncates toward zero
        return q if (a < 0) == (b < 0) else -q
    q = exact_quotient(a, b)
    if q is not None:
        return q
    if isinstance(b, PrimExpr) or b <= 0:
        raise ConversionError(f"cannot divide {a} by {b} before run time (only by a positive constant, or exactly)")
    require(a + 1, f"{a} must not be negative for its division by {b}")
    return a // b


def _mod(a, b):
    if isinstance(b, PrimExpr) or b <= 0:
        raise ConversionError(f"cannot take {a} modulo {b} before run time (only modulo a positive constant)")
    return a % b


def _pick(a, b, which):
    if not (isinstance(a, PrimExpr) or isinstance(b, PrimExpr)):
        return which(a, b)
    return a if _decided(a, b, ">") == (which is max) else b


def _elementwise(fn, dtype_of=None):
    def run(*args, **attrs):
        for a in args:
            if isinstance(a, ShapeValue):
                _integer_valued(a, "arithmetic")
        vals = [elements(a, f"input {i}") for i, a in enumerate(args)]
        out = np.frompyfunc(fn, len(vals), 1)(*vals)
        dtype = dtype_of or next(a.dtype for a in args if isinstance(a, ShapeValue))
        return value(out, dtype)
    return run


def _gather(data, indices, *, axis=0):
    vals = elements(data, "data")
    axis = _axis(axis, vals.ndim)
    index = np.asarray(_ints_array(indices, "indices"))
    n = vals.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        raise ConversionError(f"indices {index.tolist()} out of range for axis {axis} of size {n}")
    return value(np.take(vals, index, axis=axis), data.dtype)


def _ints_array(x, what: str) -> np.ndarray:
    if isinstance(x, ShapeValue):
        raise ConversionError(f"input {what!r} is computed from dims known only at run time ({x}); it must be known "
                              f"at import")
    if not isinstance(x, Constant) or x.data.dtype.kind not in "iu":
        raise ConversionError(f"input {what!r} must be an integer constant")
    return x.data


def _slice(data, starts=None, ends=None, axes=None, steps=None, **attrs):
    vals = elements(data, "data")
    starts = attrs.get("starts", starts)
    ends = attrs.get("ends", ends)
    axes = attrs.get("axes", axes)
    starts = tuple(starts) if isinstance(starts, (tuple, list)) else _ints(starts, "starts")
    ends = tuple(ends) if isinstance(ends, (tuple, list)) else _ints(ends, "ends")
    axes = tuple(range(len(starts))) if axes is None else (tuple(axes) if isinstance(axes, (tuple, list))
                                                           else _ints(axes, "axes"))
    steps = (1,) * len(starts) if steps is None else _ints(steps, "steps")
    index = [slice(None)] * vals.ndim
    for b, e, a, s in zip(starts, ends, axes, steps):
        index[_axis(a, vals.ndim)] = slice(b, e, s)
    return value(vals[tuple(index)], data.dtype)


def _concat(*inputs, axis):
    vals = [elements(x, f"input {i}") for i, x in enumerate(inputs)]
    dtype = next(x.dtype for x in inputs if isinstance(x, ShapeValue))
    return value(np.concatenate(vals, axis=_axis(axis, vals[0].ndim)), dtype)


def _unsqueeze(data, axes=None, **attrs):
    vals = elements(data, "data")
    axes = attrs.get("axes", axes)
    axes = tuple(axes) if isinstance(axes, (tuple, list)) else _ints(axes, "axes")
    ndim = vals.ndim + len(axes)
    for a in sorted(_axis(a, ndim) for a in axes):
        vals = np.expand_dims(vals, a)
    return value(vals, data.dtype)


def _squeeze(data, axes=None, **attrs):
    vals = elements(data, "data")
    axes = attrs.get("axes", axes)
    if axes is not None:
        axes = tuple(axes) if isinstance(axes, (tuple, list)) else _ints(axes, "axes")
        axes = tuple(_axis(a, vals.ndim) for a in axes)
    return value(np.squeeze(vals, axis=axes), data.dtype)


def _reshape(data, shape, *, allowzero=0):
    vals = elements(data, "data")
    target = list(_ints(shape, "shape"))
    if not allowzero:
        target = [vals.shape[i] if d == 0 and i < vals.ndim else d for i, d in enumerate(target)]
    try:
        return value(vals.reshape(target), data.dtype)
    except ValueError as e:
        raise ConversionError(f"cannot reshape a value of shape {vals.shape} to {tuple(target)}: {e}") from None


_INT_DTYPES = {6: "int32", 7: "int64"}  # onnx TensorProto INT32, INT64
_FLOAT_DTYPES = {1: "float32", 11: "float64"}  # FLOAT, DOUBLE: a dim as a float (YOLOv8's Range over a float limit)


def _cast(x, *, to, saturate=1, round_mode=None):
    if to == 9:  # BOOL
        return value(np.frompyfunc(lambda v: not _decided(v, 0, "=="), 1, 1)(x.values), "bool")
    if to in _FLOAT_DTYPES:  # the dims stay exact (integers below 2^24): for Range's limit, or cast back
        return ShapeValue(x.values, _FLOAT_DTYPES[to])
    if to not in _INT_DTYPES:
        raise ConversionError(f"a value computed from dims known only at run time ({x}) cast to a non-integer "
                              f"type: used as data, which is not supported")
    return value(x.values, _INT_DTYPES[to])


def _integer_valued(x: ShapeValue, op: str) -> ShapeValue:
    """x for integer arithmetic: a float ShapeValue (a dim cast to float) is data to it, which is refused."""
    if x.dtype not in _INT_DTYPES.values() and x.dtype != "bool":
        raise ConversionError(f"{op} of a value computed from dims known only at run time, cast to {x.dtype} "
                              f"({x}): float arithmetic over run-time dims is not supported (only a Range to it)")
    return x


def _compare(op):
    return _elementwise(lambda a, b: _decided(a, b, op), "bool")


def _where(cond, x, y):
    c = elements(cond, "condition")
    if any(isinstance(v, PrimExpr) for v in c.reshape(-1)):
        raise ConversionError("the condition depends on dims known only at run time")
    dtype = next(v.dtype for v in (x, y) if isinstance(v, ShapeValue))
    return value(np.where(c.astype(bool), elements(x, "X"), elements(y, "Y")), dtype)


def _reduce_prod(data, axes=None, *, keepdims=1, noop_with_empty_axes=0, **attrs):
    vals = elements(data, "data")
    axes = attrs.get("axes", axes)
    if axes is not None and not isinstance(axes, (tuple, list)):
        axes = _ints(axes, "axes")
    if axes is not None and len(axes) == 0 and noop_with_empty_axes:
        return data
    axes = tuple(range(vals.ndim)) if not axes else tuple(_axis(a, vals.ndim) for a in axes)
    out = vals
    for a in sorted(axes, reverse=True):
        out = np.frompyfunc(operator.mul, 2, 1).reduce(out, axis=a, keepdims=bool(keepdims), initial=1) \
            if out.shape[a] else np.ones(out.shape[:a] + ((1,) if keepdims else ()) + out.shape[a + 1:], object)
    return value(out, data.dtype)


def _shape(data, *, start=0, end=None):
    return Constant(np.asarray(data.values.shape[start:end], np.int64))


def _size(data):
    return Constant(np.asarray(data.values.size, np.int64))


SHAPE_OPS = {
    "Identity": lambda x: x,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Cast": _cast,
    "Add": _elementwise(operator.add),
    "Sub": _elementwise(operator.sub),
    "Mul": _elementwise(operator.mul),
    "Div": _elementwise(_floor_div),
    "Mod": _elementwise(_mod),
    "Neg": _elementwise(operator.neg),
    "Max": _elementwise(lambda a, b: _pick(a, b, max)),
    "Min": _elementwise(lambda a, b: _pick(a, b, min)),
    "Equal": _compare("=="),
    "Less": _compare("<"),
    "Greater": _compare(">"),
    "Where": _where,
    "ReduceProd": _reduce_prod,
    "Shape": _shape,
    "Size": _size,
}
# ops that take a shape (their inputs at these positions may be ShapeValues; see dims_input)
SHAPE_CONSUMERS = {"Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Slice": {1, 2}, "Range": {1}}
# the inputs of SHAPE_OPS that are shape arithmetic's data (the others must be constants)
_DATA_INPUTS = {"Gather": {0}, "Slice": {0}, "Unsqueeze": {0}, "Squeeze": {0}, "Reshape": {0}, "Cast": {0},
                "Identity": {0}, "Where": {1, 2}, "ReduceProd": {0}, "Shape": {0}, "Size": {0}}


def convert(op_type: str, converter, inputs: list, attrs: dict):
    """A node with a ShapeValue among its inputs: evaluated here when they are shape arithmetic's data, else the
    converter's own when it takes shapes there; ConversionError otherwise."""
    at = {i for i, x in enumerate(inputs) if isinstance(x, ShapeValue)}
    data = _DATA_INPUTS.get(op_type, set(range(len(inputs))))
    if op_type in SHAPE_OPS and at & data:
        for key in ("_outputs", "_scope"):
            attrs.pop(key, None)
        return SHAPE_OPS[op_type](*inputs, **attrs)
    if at <= SHAPE_CONSUMERS.get(op_type, set()):
        return converter(*inputs, **attrs)
    k = min(at)
    raise ConversionError(f"input {k} is computed from dims known only at run time ({inputs[k]}); {op_type} "
                          f"over it is not supported (only shape arithmetic and the ops that take a shape)")

"""Values in an ONNX model, checked before use: tensors stored in the model (initializers, Constant values)
and the constant inputs that converters read (shapes, axes, clip bounds). Every check raises ConversionError
naming what is wrong; the importer adds the file and node."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from relayish import Constant, Expr, free_vars
from relayish.op import MAX_TENSOR_ELEMENTS
from relayish.types import numpy_dtype


class ConversionError(ValueError):
    """A node that its converter cannot handle (unsupported attribute value, non-constant shape input...)."""


@dataclass(frozen=True, eq=False)
class ShapeValue:
    """An int64 (or int32) tensor computed from shapes, whose elements are ints or dim expressions: what shape
    arithmetic over dims known only at run time gives at import (frontends/onnx/shape_values.py)."""
    values: np.ndarray  # dtype object: each element an int or a canonical PrimExpr
    dtype: str = "int64"

    def __str__(self):
        return "[" + ", ".join(map(str, self.values.reshape(-1))) + "]"


def int_tuple(values) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(values).reshape(-1))


# ---- tensors stored in the model ----

_NUMERIC_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
                  TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                  TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL}


def empty(shape, dtype: str) -> Constant:
    """The value of a tensor with a dim of 0: known at import without computing anything (no element)."""
    return Constant(np.zeros(tuple(shape), np.dtype(numpy_dtype(dtype))))


def checked_elements(dims, what: str) -> int:
    """The element count of a shape whose dims are all >= 0 and whose size is at most MAX_TENSOR_ELEMENTS."""
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise ConversionError(f"{what} has negative dims {dims}")
    count = math.prod(dims)
    if count > MAX_TENSOR_ELEMENTS:
        raise ConversionError(f"{what} has shape {dims}: {count} elements, more than the {MAX_TENSOR_ELEMENTS} "
                              f"a tensor may have")
    return count


def check_tensor_data(tensor: TensorProto, what: str):
    """The tensor's dtype is numeric and its data (raw bytes or typed values) holds exactly as many elements as
    its dims say, at most MAX_TENSOR_ELEMENTS; else ConversionError naming `what`. Reads no data."""
    if tensor.data_type not in _NUMERIC_TYPES:
        name = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() \
            else str(tensor.data_type)
        raise ConversionError(f"{what} has unsupported data type {name}")
    count = checked_elements(tensor.dims, what)
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    if tensor.HasField("raw_data"):
        if len(tensor.raw_data) != count * dtype.itemsize:
            raise ConversionError(f"{what}: raw data has {len(tensor.raw_data)} bytes, but dims "
                                  f"{tuple(tensor.dims)} of {dtype} need {count * dtype.itemsize}")
        return
    field = helper.tensor_dtype_to_field(tensor.data_type)
    given = len(getattr(tensor, field))
    if given != count:
        raise ConversionError(f"{what}: {field} holds {given} values, but dims {tuple(tensor.dims)} need {count}")


def tensor_array(tensor: TensorProto, what: str) -> np.ndarray:
    """A TensorProto's value after check_tensor_data."""
    check_tensor_data(tensor, what)
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as e:
        raise ConversionError(f"{what}: cannot read its data ({e})") from None


class RunTimeValueNeeded(ConversionError):
    """A shape, axes, sizes or bounds input is computed at run time. `inputs` names the graph inputs it is computed
    from: given their values (compile_model(input_values=...)) the model imports; compile_model without them
    returns a session that compiles once per distinct value (compiler/specialize.py)."""

    def __init__(self, message: str, inputs: tuple[str, ...], data_sized: bool = False):
        super().__init__(message)
        self.inputs = inputs
        self.data_sized = data_sized  # an output's size depends on the values (NonZero): a data-sized op could run it


_data_sized: ContextVar[list | None] = ContextVar("relayish_data_sized", default=None)  # the names made so far


@contextmanager
def data_sized_ops():
    """While it lasts, an op whose output size depends on values computed at run time (NonZero, Compress) imports
    as a data-sized op (relayish/ops/data_sized.py), not RunTimeValueNeeded: the generic tier's import."""
    token = _data_sized.set([])
    try:
        yield
    finally:
        _data_sized.reset(token)


def data_sized_allowed() -> bool:
    return _data_sized.get() is not None


def data_sized_name(prefix: str) -> str:
    """A new data-sized dim's name in this import: prefix0, prefix1, ... in the order of the graph's nodes."""
    made = _data_sized.get()
    made.append(prefix)
    return f"{prefix}{made.count(prefix) - 1}"


def constant_value(expr: Expr | None, what: str) -> np.ndarray:
    """The numpy value of a constant input; RunTimeValueNeeded if it is computed at run time."""
    if isinstance(expr, ShapeValue):
        raise ConversionError(f"input {what!r} is computed from dims known only at run time ({expr}); this op needs "
                              f"its value at import")
    if not isinstance(expr, Constant):
        inputs = tuple(sorted({v.name for v in free_vars(expr)})) if expr is not None else ()
        raise RunTimeValueNeeded(f"input {what!r} must be a constant (an initializer or computable at import), "
                                 f"got a run-time tensor" + (f" computed from graph input(s) {list(inputs)}"
                                                              if inputs else ""), inputs)
    return expr.data


def scalar_input(expr: Expr, what: str) -> float:
    """The value of a constant input that must hold exactly one number."""
    value = constant_value(expr, what)
    if value.size != 1:
        raise ConversionError(f"input {what!r} must be a scalar, got shape {value.shape}")
    return float(value.reshape(-1)[0])


def int_list_input(expr: Expr, what: str, dtypes=(np.int64,)) -> tuple[int, ...]:
    """The values of a constant 1-D (or scalar) integer input of one of `dtypes` (ONNX: shapes and axes are
    int64)."""
    value = constant_value(expr, what)
    if value.dtype not in [np.dtype(d) for d in dtypes]:
        raise ConversionError(f"input {what!r} must be {' or '.join(np.dtype(d).name for d in dtypes)}, got "
                              f"{value.dtype}")
    if value.ndim > 1:
        raise ConversionError(f"input {what!r} must be 1-D, got shape {value.shape}")
    return int_tuple(value)


def optional_ints(expr: Expr | None, what: str) -> tuple[int, ...] | None:
    """The values of an optional constant input (axes, steps...) as ints, or None when it is omitted."""
    return None if expr is None else int_tuple(constant_value(expr, what))

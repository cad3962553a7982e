"""The types of the graph IR and the frozen attribute mapping: plain data that imports nothing from relayish but
the expressions a dim known only at run time is (prim_expr, dims).

Every other module of relayish (expressions, the op registry, the ops' shape rules, the printer) builds on these,
so they live apart: the op registry can type a call without knowing what an expression is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dims import canonical
from .prim_expr import IntImm, IterVar, PrimExpr


# every dtype a tensor may have (graph inputs, outputs, constants, intermediate values)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint64", "uint32",
          "uint16", "uint8", "bool")


FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


def is_float(dtype) -> bool:
    """dtype (a name or a numpy dtype) is a floating-point type; bfloat16 too, whose numpy kind is 'V'."""
    return str(dtype) in FLOAT_DTYPES


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a relayish dtype name; bfloat16 is ml_dtypes' (imported on first use, which registers
    the name with numpy)."""
    if name == "bfloat16":
        import ml_dtypes  # noqa: F401  (onnx depends on it)
    return np.dtype(name)


def dim(d):
    """A tensor dim: an int, or an int32 expression of size variables (relayish.prim_expr Vars: dims known only at
    run time, te.size_var)."""
    if isinstance(d, IntImm):
        return d.value
    if isinstance(d, PrimExpr):
        if d.dtype != "int32" or isinstance(d, IterVar):
            raise TypeError(f"a dim must be an int or an int32 expression of size variables, got {d}")
        return canonical(d)  # one form per value (relayish/dims.py): equal dims compare equal
    return int(d)


def is_static_dim(d) -> bool:
    """Whether a dim is a number (not an expression of size variables)."""
    return not isinstance(d, PrimExpr) or isinstance(d, IntImm)


@dataclass(frozen=True)
class TensorType:
    """shape: ints, or int32 expressions of size variables where a dim is known only at run time."""
    shape: tuple
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(dim(d) for d in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(is_static_dim(d) for d in self.shape)

    @property
    def size(self):
        """The element count: an int, or an expression of size variables."""
        if self.is_static:
            return int(np.prod(self.shape, dtype=np.int64))
        n = 1
        for d in self.shape:
            n = n * d
        return n

    def __str__(self):
        return f"Tensor[({', '.join(map(str, self.shape))}), {self.dtype}]"


@dataclass(frozen=True)
class TupleType:
    fields: tuple[TensorType, ...]

    @property
    def is_static(self) -> bool:
        return all(f.is_static for f in self.fields)

    def __str__(self):
        return f"({', '.join(map(str, self.fields))})"


Type = TensorType | TupleType


def _freeze(value: Any) -> Any:
    """Attribute values become hashable: lists -> tuples, numpy scalars -> python scalars."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return tuple(_freeze(v) for v in value.tolist())
    return value


class Attrs:
    """A frozen, hashable mapping of op attributes."""

    __slots__ = ("_items", "_hash")

    def __init__(self, mapping: dict | None = None, **kwargs):
        items = dict(mapping or {}, **kwargs)
        self._items = tuple(sorted((k, _freeze(v)) for k, v in items.items()))
        self._hash = hash(self._items)

    def __getitem__(self, key):
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def get(self, key, default=None):
        for k, v in self._items:
            if k == key:
                return v
        return default

    def items(self):
        return iter(self._items)

    def keys(self):
        return [k for k, _ in self._items]

    def as_dict(self) -> dict:
        return dict(self._items)

    def __contains__(self, key):
        return any(k == key for k, _ in self._items)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._items)

    def __eq__(self, other):
        return isinstance(other, Attrs) and self._items == other._items

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"

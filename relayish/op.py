"""The op registry: each op is declared once, with everything the compiler needs to know about it.

An `OpDef` holds the op's attributes and their defaults, its shape/dtype rule, its fusion pattern kind, its numpy
reference (the oracle of every test) and its tensor-level compute definition (a function building `relayish.te`
stages). Ops are registered in `relayish/ops/*.py`; nothing about an op lives anywhere else. This module knows
no op: `relayish/__init__.py` imports `relayish.ops`, so the registry is full once relayish is imported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable

from .types import Attrs, TensorType, TupleType


class Pattern(IntEnum):
    """Fusion pattern kinds, ordered as in TVM: a larger kind is harder to fuse into."""
    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class OpError(ValueError):
    """An op was given inputs or attributes it cannot accept. The message names the op and the problem."""


@dataclass
class OpDef:
    name: str
    num_inputs: int | None  # None: variadic
    attrs: dict  # name -> default; a default of REQUIRED means the attribute must be given
    infer: Callable  # (arg_types: list[TensorType], attrs: Attrs) -> TensorType; raises OpError
    pattern: Pattern
    ref: Callable  # (*numpy arrays, **attrs) -> numpy array
    compute: Callable | None = None  # (inputs: list[te.Tensor], attrs: Attrs, out_type) -> te.Tensor
    flops: Callable | None = None  # (arg_types, attrs, out_type) -> float; default: 1 per output element
    doc: str = ""
    normalize: Callable | None = None  # (attrs dict, arg_types) -> attrs dict, run before infer


REQUIRED = object()
_REGISTRY: dict[str, OpDef] = {}


def register_op(name, *, inputs, pattern, infer, ref, compute=None, attrs=None, flops=None, normalize=None,
                doc="") -> OpDef:
    if name in _REGISTRY:
        raise ValueError(f"op {name!r} registered twice")
    opdef = OpDef(name, inputs, dict(attrs or {}), infer, pattern, ref, compute, flops, doc, normalize)
    _REGISTRY[name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OpError(f"unknown op {name!r}") from None


def list_ops() -> list[str]:
    return sorted(_REGISTRY)


def infer_call_type(op_name: str, args, attrs: Attrs) -> tuple[Attrs, TensorType | TupleType]:
    """Fill attribute defaults, check arity and run the op's shape rule. Returns (complete attrs, type)."""
    opdef = get_op(op_name)
    if opdef.num_inputs is not None and len(args) != opdef.num_inputs:
        raise OpError(f"{op_name}: expected {opdef.num_inputs} inputs, got {len(args)}")
    given = attrs.as_dict()
    unknown = set(given) - set(opdef.attrs)
    if unknown:
        raise OpError(f"{op_name}: unknown attribute(s) {sorted(unknown)}; known: {sorted(opdef.attrs)}")
    full = {}
    for k, default in opdef.attrs.items():
        if k in given:
            full[k] = given[k]
        elif default is REQUIRED:
            raise OpError(f"{op_name}: attribute {k!r} is required")
        else:
            full[k] = default
    arg_types = [a.type for a in args]
    if opdef.normalize is not None:
        full = opdef.normalize(full, arg_types)
    full_attrs = Attrs(full)
    return full_attrs, opdef.infer(arg_types, full_attrs)

"""The op registry: each op is declared once, with everything the compiler needs to know about it.

An `OpDef` holds the op's attributes and their defaults, its shape/dtype rule, its fusion pattern kind, its class
(conv, pool, ...), its numpy reference (the oracle of every test), its tensor-level compute definition (a function
building `relayish.te` stages) and whether it can run in a blocked layout; `stage_tag` declares what schedules may
assume about the stages its compute builds. `op_table()` prints them all.

Ops are registered in `relayish/ops/*.py`; nothing about an op lives anywhere else. This module knows no op:
`relayish/__init__.py` imports `relayish.ops`, so the registry is full once relayish is imported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
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


# Largest tensor any op may produce: index arithmetic of compiled kernels is int32, and no model we compile
# needs more. A shape rule that would give a larger tensor is an OpError, before anything is allocated.
MAX_TENSOR_ELEMENTS = 2**31 - 1


class OpError(ValueError):
    """An op was given inputs or attributes it cannot accept. The message names the op and the problem."""


# What kind of work an op does. The tuner groups tasks by their first op that is not "elementwise" (their anchor).
OP_CLASSES = ("conv", "pool", "dense", "normalization", "layout", "elementwise")


@dataclass
class OpDef:
    name: str
    num_inputs: int | None  # None: variadic
    attrs: dict  # name -> default; a default of REQUIRED means the attribute must be given
    infer: Callable  # (arg_types: list[TensorType], attrs: Attrs) -> TensorType; raises OpError
    pattern: Pattern
    ref: Callable  # (*numpy arrays, **attrs) -> numpy array
    op_class: str  # one of OP_CLASSES
    compute: Callable | None = None  # (inputs: list[te.Tensor], attrs: Attrs, out_type) -> te.Tensor
    flops: Callable | None = None  # (arg_types, attrs, out_type) -> float; default: 1 per output element
    doc: str = ""
    normalize: Callable | None = None  # (attrs dict, arg_types) -> attrs dict, run before infer
    # its `layout` attribute may name a blocked layout NCHW{c}c: the layout passes move it into the blocked layout
    # instead of converting its input back to NCHW
    blocked_layout: bool = False


REQUIRED = object()
_REGISTRY: dict[str, OpDef] = {}


def register_op(name, *, inputs, pattern, op_class, infer, ref, compute=None, attrs=None, flops=None,
                normalize=None, blocked_layout=False, doc="") -> OpDef:
    if name in _REGISTRY:
        raise ValueError(f"op {name!r} registered twice")
    if op_class not in OP_CLASSES:
        raise ValueError(f"op {name!r}: op_class {op_class!r} is not one of {OP_CLASSES}")
    if blocked_layout and "layout" not in (attrs or {}):
        raise ValueError(f"op {name!r}: blocked_layout needs a 'layout' attribute")
    opdef = OpDef(name, inputs, dict(attrs or {}), infer, pattern, ref, op_class, compute, flops, doc, normalize,
                  blocked_layout)
    _REGISTRY[name] = opdef
    return opdef


@dataclass(frozen=True)
class StageTag:
    """What schedules may assume about the te stages an op's compute tags `name` (te.compute(..., tag=name)).
    Declared with `stage_tag` next to the compute that uses it; a tag never declared has no traits."""
    name: str
    keeps_buffer: bool = False  # computed into its own buffer although it could be inlined
    is_padding: bool = False  # pads its input: keeps its buffer when a consumer has buffered_padding
    buffered_padding: bool = False  # reads each element of its (padded) input many times: padding before it is
    # computed once into a buffer, and its inner loop reads without bounds checks
    gathers_lanes: bool = False  # its innermost axis (a channel block's lanes) reads channels found by division
    # and remainder (a channel map, a shuffle): vectorized all the same, each lane loaded on its own, so that the
    # index arithmetic runs once per vector, not per element


_STAGE_TAGS: dict[str, StageTag] = {}


def stage_tag(name: str, **traits) -> str:
    """Declare the traits of a stage tag; returns the tag to pass to te.compute."""
    tag = StageTag(name, **traits)
    if _STAGE_TAGS.setdefault(name, tag) != tag:
        raise ValueError(f"stage tag {name!r} declared twice with different traits")
    return name


def stage_tag_traits(name: str) -> StageTag:
    return _STAGE_TAGS.get(name) or StageTag(name)


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OpError(f"unknown op {name!r}") from None


def list_ops() -> list[str]:
    return sorted(_REGISTRY)


def op_table() -> str:
    """Every registered op as a markdown table (by class, then name): the contract between the frontend, the
    passes and the compiler, generated so that it cannot fall behind the registry."""
    rows = ["| op | class | pattern | inputs | attrs=default | blocked layout | description |",
            "|---|---|---|---|---|---|---|"]
    for op in sorted(_REGISTRY.values(), key=lambda o: (OP_CLASSES.index(o.op_class), o.name)):
        attrs = ", ".join(f"{k} (required)" if v is REQUIRED else f"{k}={v!r}" for k, v in op.attrs.items())
        inputs = "variadic" if op.num_inputs is None else str(op.num_inputs)
        blocked = "yes" if op.blocked_layout else ""
        rows.append(f"| {op.name} | {op.op_class} | {op.pattern.name} | {inputs} | {attrs} | {blocked} | {op.doc} |")
    return "\n".join(rows)


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
    out_type = opdef.infer(arg_types, full_attrs)
    for t in out_type.fields if isinstance(out_type, TupleType) else (out_type,):
        if not t.is_static:
            continue  # (dims known at run time are checked against the bounds of their sizes when they run)
        if any(d < 0 for d in t.shape):
            raise OpError(f"{op_name}: output shape {t.shape} has a negative dim")
        if math.prod(t.shape) > MAX_TENSOR_ELEMENTS:
            raise OpError(f"{op_name}: output shape {t.shape} has more than {MAX_TENSOR_ELEMENTS} elements")
    return full_attrs, out_type

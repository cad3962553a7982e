"""The graph IR: typed, immutable, structurally hashable expression nodes.

Every node is typed at construction (a Call runs its op's shape rule when it is built), so an ill-typed graph
cannot exist. Nodes are frozen; `replace()` returns a new node. Equality and hashing are structural (a Var is
equal only to itself), so identical fused workloads deduplicate into one task.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self):
        return f"Tensor[({', '.join(map(str, self.shape))}), {self.dtype}]"


@dataclass(frozen=True)
class TupleType:
    fields: tuple[TensorType, ...]

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


class Expr:
    """Base of graph nodes. Subclasses are frozen dataclasses with eq=False; structural equality lives here."""

    type: Type

    def _key(self) -> tuple:  # the fields that define structural identity
        raise NotImplementedError

    def __hash__(self):
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((type(self).__name__, self._key()))
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other):
        if self is other:
            return True
        if type(self) is not type(other) or hash(self) != hash(other):
            return False
        return self._key() == other._key()

    def replace(self, **changes) -> "Expr":
        import dataclasses
        return dataclasses.replace(self, **changes)

    @property
    def checked_type(self) -> Type:
        return self.type

    def __str__(self):
        from .printer import astext
        return astext(self)


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A graph input or function parameter. Equal only to itself."""
    name: str
    type: Type

    def _key(self):
        return (id(self),)

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return f"Var({self.name}: {self.type})"


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    data: np.ndarray
    type: Type = field(default=None)

    def __post_init__(self):
        data = np.asarray(self.data, order="C")
        if not data.flags.c_contiguous:
            data = data.copy()
        if data.flags.writeable:
            data = data.copy() if data.base is not None else data
            data.setflags(write=False)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "type", TensorType(data.shape, str(data.dtype)))

    @property
    def digest(self) -> str:
        d = self.__dict__.get("_digest")
        if d is None:
            d = hashlib.sha1(self.data.tobytes()).hexdigest()
            object.__setattr__(self, "_digest", d)
        return d

    def _key(self):
        return (self.type, self.digest)

    def __repr__(self):
        return f"Constant({self.type})"


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """A call of a registered op (op is its name) or of a primitive Function (a fused group)."""
    op: "str | Function"
    args: tuple[Expr, ...]
    attrs: Attrs = field(default_factory=Attrs)
    type: Type = field(default=None)

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        if isinstance(self.op, Function):
            ty = self.op.ret_type
        else:
            from .op import infer_call_type
            attrs, ty = infer_call_type(self.op, self.args, self.attrs)
            object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "type", ty)

    def _key(self):
        return (self.op, self.args, self.attrs)

    def replace(self, **changes) -> "Call":
        kw = dict(op=self.op, args=self.args, attrs=self.attrs)
        kw.update(changes)
        return Call(**kw)

    @property
    def op_name(self) -> str:
        return self.op if isinstance(self.op, str) else "fn"

    def __repr__(self):
        return f"Call({self.op_name}, {len(self.args)} args) -> {self.type}"


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]
    type: Type = field(default=None)

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "type", TupleType(tuple(f.type for f in self.fields)))

    def _key(self):
        return (self.fields,)


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    type: Type = field(default=None)

    def __post_init__(self):
        ty = self.tuple_value.type
        if not isinstance(ty, TupleType) or not 0 <= self.index < len(ty.fields):
            raise TypeError(f"TupleGetItem index {self.index} out of range for {ty}")
        object.__setattr__(self, "type", ty.fields[self.index])

    def _key(self):
        return (self.tuple_value, self.index)


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """params -> body. A Function with attrs {"Primitive": 1} is a fused group that becomes one kernel.

    Structural equality of Functions is alpha-equivalence: parameters are compared by position and type,
    so two fused groups with the same computation on the same shapes are equal (one task)."""
    params: tuple[Var, ...]
    body: Expr
    attrs: Attrs = field(default_factory=Attrs)
    type: Type = field(default=None)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        object.__setattr__(self, "type", self.body.type)

    @property
    def ret_type(self) -> Type:
        return self.body.type

    def _key(self):
        return (tuple(p.type for p in self.params), _alpha_key(self), self.attrs)

    def replace(self, **changes) -> "Function":
        kw = dict(params=self.params, body=self.body, attrs=self.attrs)
        kw.update(changes)
        return Function(**kw)


def _alpha_key(fn: Function):
    """A hashable key of fn's body in which parameters are replaced by their positions."""
    pos = {p: i for i, p in enumerate(fn.params)}
    memo: dict[int, Any] = {}

    def key(e: Expr):
        got = memo.get(id(e))
        if got is not None:
            return got
        if isinstance(e, Var):
            k = ("param", pos[e]) if e in pos else ("free", e.name, e.type)
        elif isinstance(e, Constant):
            k = ("const",) + e._key()
        elif isinstance(e, Call):
            k = ("call", e.op, tuple(key(a) for a in e.args), e.attrs)
        elif isinstance(e, Tuple):
            k = ("tuple", tuple(key(f) for f in e.fields))
        elif isinstance(e, TupleGetItem):
            k = ("get", key(e.tuple_value), e.index)
        else:
            k = ("fn", e)
        memo[id(e)] = k
        return k

    return key(fn.body)


def post_order(root: Expr) -> Iterator[Expr]:
    """Every node reachable from root, each once, children before parents (iterative: graphs are deep)."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(children(node)):
            if id(child) not in seen:
                stack.append((child, False))


def children(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Tuple):
        return node.fields
    if isinstance(node, TupleGetItem):
        return (node.tuple_value,)
    if isinstance(node, Function):
        return (node.body,)
    return ()


def rebuild(root: Expr, fn) -> Expr:
    """Bottom-up rewrite: fn(old_node, node_with_new_children) -> replacement. Shared nodes are rewritten once."""
    memo: dict[int, Expr] = {}
    for node in post_order(root):
        if isinstance(node, Call):
            new_args = tuple(memo[id(a)] for a in node.args)
            new = node if all(a is b for a, b in zip(new_args, node.args)) else node.replace(args=new_args)
        elif isinstance(node, Tuple):
            new_fields = tuple(memo[id(f)] for f in node.fields)
            new = node if all(a is b for a, b in zip(new_fields, node.fields)) else Tuple(new_fields)
        elif isinstance(node, TupleGetItem):
            tv = memo[id(node.tuple_value)]
            new = node if tv is node.tuple_value else TupleGetItem(tv, node.index)
        elif isinstance(node, Function):
            body = memo[id(node.body)]
            new = node if body is node.body else node.replace(body=body)
        else:
            new = node
        memo[id(node)] = fn(node, new)
    return memo[id(root)]


def free_vars(root: Expr) -> list[Var]:
    out, seen = [], set()
    for node in post_order(root):
        if isinstance(node, Var) and node not in seen:
            seen.add(node)
            out.append(node)
    return out


def const(value, dtype="float32") -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def call(op: str, *args: Expr, **attrs) -> Call:
    return Call(op, tuple(args), Attrs(attrs))

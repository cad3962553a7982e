"""The graph IR: typed, immutable, structurally hashable expression nodes, and their text form.

Every node is typed at construction (a Call runs its op's shape rule when it is built), so an ill-typed graph
cannot exist. Nodes are frozen; `replace()` returns a new node. Equality and hashing are structural (a Var is
equal only to itself), so identical fused workloads deduplicate into one task.

The printer (`astext`, which `str()` of a node uses) lives here with the nodes it prints, so that neither module
would have to import the other. Its format:

    fn (%x: Tensor[(1, 3, 8, 8), float32]) -> Tensor[(1, 4, 8, 8), float32] {
      %0 = nn.conv2d(%x, meta[Constant][0] /* (4, 3, 3, 3) */, strides=[1, 1], ...) /* ty=Tensor[...] */;
      %1 = fn (%p0: Tensor[...], Primitive=1) -> Tensor[...] {
        nn.relu(%p0) /* ty=Tensor[...] */
      };
      %2 = %1(%0) /* ty=Tensor[...] */;
      %2
    }

Every Call, Tuple and TupleGetItem gets its own `%n = ...` line (each node printed once, however often it is
used); Vars and Constants are printed inline. Scalar constants print as their value, others as
`meta[Constant][k]` with their shape. Fused primitive Functions are printed nested and indented, bound to a `%n`
and then called. Numbering is shared by the whole text so that a name means one node.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .op import OpError, get_op, infer_call_type
from .types import Attrs, TensorType, TupleType, Type


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
        return dataclasses.replace(self, **changes)

    @property
    def checked_type(self) -> Type:
        return self.type

    def __str__(self):
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


# ---------------------------------------------------------------------------------------------- text form

INDENT = "  "


def astext(node: Expr, show_types: bool = True) -> str:
    """The text of an expression or a Function (for an IRModule: its `astext()`)."""
    return _Printer(show_types).top(node)


class _Printer:
    def __init__(self, show_types: bool):
        self.show_types = show_types
        self.names: dict[int, str] = {}  # id(node) -> how a use of the node is printed
        self.var_names: set[str] = set()
        self.constants: dict[int, int] = {}  # id(Constant) -> meta index
        self.counter = 0

    def top(self, node: Expr) -> str:
        if isinstance(node, Function):
            return "\n".join(self.function(node, 0))
        lines: list[str] = []
        result = self.block(node, 0, lines)
        return "\n".join(lines + [result])

    # -------------------------------------------------------------------------------------------- blocks

    def function(self, fn: Function, depth: int) -> list[str]:
        """Lines of `fn (params) -> type { ... }` at indentation depth (the first line is not indented)."""
        params = [f"{self.var(p)}: {p.type}" for p in fn.params]
        params += [f"{k}={_value(v)}" for k, v in fn.attrs.items()]
        lines = [f"fn ({', '.join(params)}) -> {fn.ret_type} {{"]
        body_lines: list[str] = []
        result = self.block(fn.body, depth + 1, body_lines)
        lines += body_lines + [INDENT * (depth + 1) + result, INDENT * depth + "}"]
        return lines

    def block(self, root: Expr, depth: int, lines: list[str]) -> str:
        """Append the `%n = ...;` lines of every non-atomic node under root; return how root itself reads.

        The root's own value is printed as the block's result: a Call root is printed in full, not bound."""
        pad = INDENT * depth
        for node in post_order(root):
            if id(node) in self.names or isinstance(node, (Var, Constant)):
                continue
            if isinstance(node, Function):  # a Function reached as a value (not as a Call target)
                self.bind_function(node, depth, lines)
                continue
            if isinstance(node, Call) and isinstance(node.op, Function) and id(node.op) not in self.names:
                self.bind_function(node.op, depth, lines)
            text = self.node_text(node)
            if node is root:
                return text
            name = self.fresh()
            lines.append(f"{pad}{name} = {text};")
            self.names[id(node)] = name
        return self.atom(root)

    def bind_function(self, fn: Function, depth: int, lines: list[str]):
        name = self.fresh()
        fn_lines = self.function(fn, depth)
        lines.append(f"{INDENT * depth}{name} = {fn_lines[0]}")
        lines.extend(fn_lines[1:-1])
        lines.append(fn_lines[-1] + ";")
        self.names[id(fn)] = name

    # -------------------------------------------------------------------------------------------- nodes

    def node_text(self, node: Expr) -> str:
        if isinstance(node, Call):
            callee = self.names[id(node.op)] if isinstance(node.op, Function) else node.op
            parts = [self.atom(a) for a in node.args] + self.attrs_text(node)
            return f"{callee}({', '.join(parts)}){self.type_note(node)}"
        if isinstance(node, Tuple):
            inner = ", ".join(self.atom(f) for f in node.fields)
            return f"({inner}{',' if len(node.fields) == 1 else ''})"
        if isinstance(node, TupleGetItem):
            return f"{self.atom(node.tuple_value)}.{node.index}{self.type_note(node)}"
        return self.atom(node)

    def attrs_text(self, call: Call) -> list[str]:
        """key=value in the op's declaration order (the order a reader of the op table expects)."""
        if isinstance(call.op, Function):
            return []
        try:
            order = list(get_op(call.op).attrs)
        except OpError:
            order = []
        keys = [k for k in order if k in call.attrs] + [k for k in call.attrs.keys() if k not in order]
        return [f"{k}={_value(call.attrs[k])}" for k in keys]

    def type_note(self, node: Expr) -> str:
        return f" /* ty={node.type} */" if self.show_types else ""

    def atom(self, node: Expr) -> str:
        if isinstance(node, Var):
            return self.var(node)
        if isinstance(node, Constant):
            return self.constant(node)
        return self.names[id(node)]

    def var(self, v: Var) -> str:
        """%name, made unique when two distinct Vars share a name."""
        got = self.names.get(id(v))
        if got is None:
            base = v.name or "v"
            name, k = base, 1
            while name in self.var_names:
                name, k = f"{base}_{k}", k + 1
            self.var_names.add(name)
            got = self.names[id(v)] = f"%{name}"
        return got

    def constant(self, c: Constant) -> str:
        if c.data.ndim == 0:
            return _scalar(c.data.item(), c.type.dtype)
        index = self.constants.setdefault(id(c), len(self.constants))
        dtype = "" if c.type.dtype == "float32" else f", {c.type.dtype}"
        return f"meta[Constant][{index}] /* ({', '.join(map(str, c.type.shape))}){dtype} */"

    def fresh(self) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        return name


def _scalar(v, dtype: str) -> str:
    if dtype in ("float32", "float64", "float16", "bfloat16"):
        return f"{float(v)!r}f" if dtype == "float32" else f"{float(v)!r}" + ("" if dtype == "float64" else dtype)
    if dtype == "bool":
        return str(bool(v))
    return f"{int(v)}" + ("" if dtype == "int32" else f"i{dtype[3:]}" if dtype.startswith("int") else
                          f"u{dtype[4:]}")


def _value(v) -> str:
    """An attribute value: tuples as [a, b], strings quoted, floats in their shortest exact form."""
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):  # a float32 attribute (e.g. from ONNX) prints as its shortest float32 form
        return str(np.float32(v)) if float(np.float32(v)) == v else repr(v)
    if isinstance(v, np.ndarray):
        return _value(tuple(v.tolist()))
    return str(v)

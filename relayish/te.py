"""Tensor expressions: the tensor-level language of op compute definitions (like TVM's TE).

A computation is a DAG of stages. `placeholder` declares an input; `compute(shape, lambda *i: expr)` declares a
stage whose element at index i is expr; `reduce_axis` + `sum`/`prod_reduce`/`max_reduce`/`min_reduce` express
reductions. Expressions are small immutable trees with Python operator overloading; integer constants are folded as
they are built so that index expressions stay readable. Comparisons build expressions (`a < b`); use `eq(a, b)` for
equality.

The expressions themselves (their node kinds, builders, traversal and text form) are relayish/prim_expr.py's,
re-exported here; this module holds the tensors and stages built from them. It is pure data. Scheduling,
lowering and codegen live in `compiler/`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .prim_expr import (  # noqa: F401  (the expression language, re-exported: te.<name>)
    PrimExpr, IntImm, FloatImm, Var, BinOp, Cmp, Logic, Select, Cast, BitCast, Call, TensorRead, Reduce, IterVar,
    const, as_expr, BITWISE_OPS, binop, min_, max_, eq, ne, all_of, any_of, logical_not, select, cast, bitcast,
    intrin, dot4_u8s8, exp, log, sqrt, tanh, sigmoid, power, erf, sin, cos, tan, asin, acos, atan, fabs, floor, ceil,
    bitwise_and, bitwise_or, bitwise_xor, shift_left, shift_right, expr_children, walk, substitute, substitute_vars,
    expr_str)
from .types import dim, is_static_dim as is_static  # noqa: F401  (a shape's dims: te.dim, te.is_static)


# ---------------------------------------------------------------------------------------------- tensors

@dataclass(eq=False)
class Operation:
    name: str

    @property
    def input_tensors(self) -> list["Tensor"]:
        return []


@dataclass(eq=False)
class PlaceholderOp(Operation):
    shape: tuple
    dtype: str


@dataclass(eq=False)
class ComputeOp(Operation):
    axes: tuple  # spatial IterVars, one per output dimension
    body: PrimExpr  # may be a Reduce at the top
    dtype: str
    tag: str = ""
    _inputs: tuple | None = field(default=None, init=False, repr=False, compare=False)  # (body, input_tensors)

    @property
    def reduce_axes(self) -> tuple:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def shape(self):
        return tuple(a.extent for a in self.axes)

    @property
    def input_tensors(self) -> list["Tensor"]:
        """The tensors the body reads, in first-read order. Walked once per op (a Winograd transform's body has
        thousands of nodes and schedules ask for every stage's producers and consumers often): an op is never
        changed once built (a schedule step replaces a stage's op)."""
        if self._inputs is None or self._inputs[0] is not self.body:
            out, seen = [], set()
            for e in walk(self.body):
                if isinstance(e, TensorRead) and id(e.tensor) not in seen:
                    seen.add(id(e.tensor))
                    out.append(e.tensor)
            self._inputs = (self.body, tuple(out))
        return list(self._inputs[1])


@dataclass(eq=False)
class Tensor:
    op: Operation

    @property
    def name(self):
        return self.op.name

    @property
    def shape(self) -> tuple:
        return tuple(self.op.shape)

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(f"tensor {self.name} has {len(self.shape)} dims, indexed with {len(idx)}")
        return TensorRead(self, tuple(as_expr(i) for i in idx))

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


# ---------------------------------------------------------------------------------------------- dims

def size_var(name: str) -> Var:
    """A dim known only at run time (a sequence length, an image width): an int32 Var that a shape may hold in
    place of an int. A kernel reads its value from its `sizes` parameter (compiler/lower.py)."""
    return Var(name, "int32")


def placeholder(shape: Sequence, dtype="float32", name="placeholder") -> Tensor:
    return Tensor(PlaceholderOp(name, tuple(dim(s) for s in shape), dtype))


def reduce_axis(extent, name="r") -> IterVar:
    return IterVar(Var(name), dim(extent), "reduce")


def compute(shape: Sequence, fcompute: Callable, name="compute", tag="", dtype=None) -> Tensor:
    """out[i...] = fcompute(*i). fcompute receives one index Var per dimension. A dim may be a size variable (or
    an int32 expression of them): its extent is known at run time."""
    shape = tuple(dim(s) for s in shape)
    nargs = len(shape)
    names = ["i", "j", "k", "l", "m", "n", "o", "p"]
    axes = tuple(IterVar(Var(f"{name}_{names[d] if d < len(names) else 'd' + str(d)}"), s, "spatial")
                 for d, s in enumerate(shape))
    body = as_expr(fcompute(*[a.var for a in axes]), "float32") if nargs else as_expr(fcompute(), "float32")
    if dtype is not None and body.dtype != dtype:
        body = cast(dtype, body) if not isinstance(body, Reduce) else body
    _check_reduce_on_top(body, name)
    if isinstance(body, Reduce) and body.combiner in ("sum", "prod") and body.dtype in ("float16", "bfloat16"):
        # a 16-bit sum (or product) accumulates in float32 and rounds once (as numpy and onnxruntime): an
        # accumulator stored as 16 bits would round at every step
        acc = Tensor(ComputeOp(name + "_f32", axes, Reduce(body.combiner, cast("float32", body.body), body.axes),
                               "float32", tag))
        return compute(shape, lambda *i: cast(body.dtype, acc[i]), name=name)
    return Tensor(ComputeOp(name, axes, body, body.dtype, tag))


def _check_reduce_on_top(body, name):
    inner = body.body if isinstance(body, Reduce) else body
    for e in walk(inner):
        if isinstance(e, Reduce):
            raise ValueError(f"compute {name!r}: a reduction must be the whole body, not nested inside it")


def _reduce(combiner):
    def make(expr, axis):
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        return Reduce(combiner, as_expr(expr, "float32"), axes)
    return make


sum = _reduce("sum")  # noqa: A001  (mirrors te.sum)
max_reduce = _reduce("max")
min_reduce = _reduce("min")
prod_reduce = _reduce("prod")


def reduce_identity(combiner: str, dtype: str) -> PrimExpr:
    if combiner == "sum":
        return const(0, dtype)
    if combiner == "prod":
        return const(1, dtype)
    if dtype == "bool":
        return IntImm(int(combiner == "min"), dtype)
    inf = math.inf if combiner == "min" else -math.inf
    if dtype.startswith("int"):
        bits = int(dtype[3:])
        return IntImm(2**(bits - 1) - 1 if combiner == "min" else -2**(bits - 1), dtype)
    if dtype.startswith("uint"):
        return IntImm(2**int(dtype[4:]) - 1 if combiner == "min" else 0, dtype)
    return FloatImm(inf, dtype)


def bind_sizes(tensors: Sequence[Tensor], values: dict) -> dict:
    """The static twin of a computation over size variables: every tensor reachable from `tensors` rebuilt with
    each size variable v (a key of values) replaced by the int values[v] in shapes, extents and index
    expressions; names, stages and their structure are unchanged, so that a schedule made for the twin replays
    on the original (compiler/run_time_schedule.py default_schedule_for_sizes). Returns {id(old): new tensor}."""
    consts = {v: IntImm(int(n)) for v, n in values.items()}
    new: dict = {}

    def bound(d):
        return d if is_static(d) else dim(substitute_vars(d, consts))

    def axis(ax: IterVar) -> IterVar:
        return IterVar(ax.var, bound(ax.extent), ax.kind)

    def rewrite(e):
        def fn(node):
            if isinstance(node, Var):
                return consts.get(node)
            if isinstance(node, TensorRead):
                return TensorRead(new[id(node.tensor)], tuple(rewrite(i) for i in node.indices))
            if isinstance(node, Reduce):
                return Reduce(node.combiner, rewrite(node.body), tuple(axis(a) for a in node.axes))
            return None
        return substitute(e, fn)

    for t in stage_dag(tensors):
        if isinstance(t.op, PlaceholderOp):
            new[id(t)] = Tensor(PlaceholderOp(t.op.name, tuple(bound(d) for d in t.op.shape), t.op.dtype))
        else:
            op = t.op
            new[id(t)] = Tensor(ComputeOp(op.name, tuple(axis(a) for a in op.axes), rewrite(op.body), op.dtype,
                                          op.tag))
    return new


def stage_dag(outputs: Sequence[Tensor]) -> list[Tensor]:
    """All tensors reachable from outputs, producers before consumers (placeholders included)."""
    order, seen = [], set()

    def visit(t: Tensor):
        if id(t) in seen:
            return
        seen.add(id(t))
        for inp in t.op.input_tensors:
            visit(inp)
        order.append(t)

    for t in outputs:
        visit(t)
    return order

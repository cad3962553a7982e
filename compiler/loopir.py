"""The loop IR: what lowering produces from a scheduled stage DAG and what codegen turns into LLVM.

A `PrimFunc` is one kernel: buffer parameters and a statement tree. Expressions are `relayish.te` PrimExprs
(IntImm, FloatImm, Var, BinOp, Cmp, Logic, Select, Cast, Call) plus `Load`; TensorRead and Reduce never appear
here (lowering has flattened every access to a `Load`/`Store` at a flat element index and expanded every
reduction into an init store and an update store).

Loop kinds: "serial", "parallel" (iterations split over the runtime thread pool; never nested in another parallel
loop), "vectorize" (extent must be a constant; codegen emits <N x T> operations when the body allows, else a
serial loop), "unroll" (extent must be a constant; codegen emits the body extent times).

Invariants: loop `start` and `extent` are int32 expressions that do not depend on the loop's own variable;
every Var used is bound by an enclosing For or LetStmt; local buffers are declared by an enclosing Allocate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from relayish import te
from relayish.te import PrimExpr, Var


@dataclass(eq=False)
class Buffer:
    """A flat array. scope "global": a kernel parameter; scope "local": stack memory of the kernel."""
    name: str
    shape: tuple
    dtype: str = "float32"
    scope: str = "global"

    @property
    def size(self):
        """The element count: an int, or an int32 expression in size variables (a dim known at run time)."""
        n = 1
        for s in self.shape:
            n = n * te.dim(s)
        return n

    @property
    def strides(self) -> tuple:
        """Row-major element strides: ints, or expressions where a dim inside is known only at run time."""
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc = acc * te.dim(s)
        return tuple(reversed(out))

    def flat_index(self, indices) -> PrimExpr:
        flat = te.IntImm(0)
        for idx, stride in zip(indices, self.strides):
            flat = flat + te.as_expr(idx) * stride
        return flat

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


@dataclass(frozen=True, eq=False, repr=False)
class Load(PrimExpr):
    buffer: Buffer
    index: PrimExpr  # flat element index, int32

    @property
    def dtype(self):
        return self.buffer.dtype


class Stmt:
    def __str__(self):
        return stmt_str(self)


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: PrimExpr
    value: PrimExpr


@dataclass(eq=False)
class For(Stmt):
    var: Var
    start: PrimExpr
    extent: PrimExpr
    kind: str  # serial | parallel | vectorize | unroll
    body: Stmt


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list = field(default_factory=list)


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(eq=False)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer  # scope "local"
    body: Stmt


@dataclass(eq=False)
class PrimFunc:
    name: str
    params: list  # of Buffer (scope "global"), in call order
    body: Stmt
    attrs: dict = field(default_factory=dict)

    def __str__(self):
        head = f"kernel {self.name}(" + ", ".join(
            f"{b.name}: {b.dtype}[{', '.join(expr_str(te.as_expr(d)) for d in b.shape)}]" for b in self.params) + ")"
        return head + "\n" + stmt_str(self.body, 1)


def expr_str(e) -> str:
    return te.expr_str(e)


def stmt_str(s: Stmt, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(s, Seq):
        return "\n".join(stmt_str(x, indent) for x in s.stmts)
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else f" {s.kind}"
        rng = f"{expr_str(s.extent)}" if _is_zero(s.start) else f"{expr_str(s.start)}, {expr_str(s.start)} + {expr_str(s.extent)}"
        return f"{pad}for {s.var.name} in range({rng}){kind}:\n" + stmt_str(s.body, indent + 1)
    if isinstance(s, Store):
        return f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}"
    if isinstance(s, IfThenElse):
        out = f"{pad}if {expr_str(s.cond)}:\n" + stmt_str(s.then_case, indent + 1)
        if s.else_case is not None:
            out += f"\n{pad}else:\n" + stmt_str(s.else_case, indent + 1)
        return out
    if isinstance(s, LetStmt):
        return f"{pad}{s.var.name} = {expr_str(s.value)}\n" + stmt_str(s.body, indent)
    if isinstance(s, Allocate):
        return f"{pad}{s.buffer.name} = local {s.buffer.dtype}[{s.buffer.size}]\n" + stmt_str(s.body, indent)
    return pad + repr(s)


def _is_zero(e) -> bool:
    return isinstance(e, te.IntImm) and e.value == 0

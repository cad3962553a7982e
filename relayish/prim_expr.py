"""Scalar expressions of tensor expressions (relayish/te.py): the immutable expression trees (PrimExpr and its
node kinds, IterVar), their builders (integer constants folded as they are built, so that index expressions stay
readable), and their traversal and text form. Comparisons build expressions (`a < b`); use `eq(a, b)` for
equality.

relayish.te re-exports every name here: use them as te.<name>.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

from .intrinsics import get_intrinsic

_counter = itertools.count()


class PrimExpr:
    dtype: str

    def __add__(self, o): return binop("+", self, o)
    def __radd__(self, o): return binop("+", o, self)
    def __sub__(self, o): return binop("-", self, o)
    def __rsub__(self, o): return binop("-", o, self)
    def __mul__(self, o): return binop("*", self, o)
    def __rmul__(self, o): return binop("*", o, self)
    def __truediv__(self, o): return binop("/", self, o)
    def __rtruediv__(self, o): return binop("/", o, self)
    def __floordiv__(self, o): return binop("//", self, o)
    def __rfloordiv__(self, o): return binop("//", o, self)
    def __mod__(self, o): return binop("%", self, o)
    def __rmod__(self, o): return binop("%", o, self)
    def __neg__(self): return binop("-", const(0, self.dtype), self)
    def __lt__(self, o): return Cmp("<", as_expr(self), as_expr(o, self.dtype))
    def __le__(self, o): return Cmp("<=", as_expr(self), as_expr(o, self.dtype))
    def __gt__(self, o): return Cmp("<", as_expr(o, self.dtype), as_expr(self))
    def __ge__(self, o): return Cmp("<=", as_expr(o, self.dtype), as_expr(self))
    def __bool__(self):
        raise TypeError("a te expression has no truth value; use te.select / te.all_of")

    def __str__(self):
        return expr_str(self)


@dataclass(frozen=True, eq=True, repr=False)
class IntImm(PrimExpr):
    value: int
    dtype: str = "int32"


@dataclass(frozen=True, eq=True, repr=False)
class FloatImm(PrimExpr):
    value: float
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class Var(PrimExpr):
    """An index variable (a loop or axis variable). Identity-compared."""
    name: str
    dtype: str = "int32"
    uid: int = field(default_factory=lambda: next(_counter))

    def __hash__(self):
        return hash(self.uid)

    def __eq__(self, other):
        return self is other


@dataclass(frozen=True, eq=True, repr=False)
class BinOp(PrimExpr):
    op: str  # + - * / // % min max, and on integers only: & | ^ << >> (BITWISE_OPS)
    a: PrimExpr
    b: PrimExpr

    @property
    def dtype(self):
        return self.a.dtype


@dataclass(frozen=True, eq=True, repr=False)
class Cmp(PrimExpr):
    op: str  # < <= == !=
    a: PrimExpr
    b: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=True, repr=False)
class Logic(PrimExpr):
    op: str  # and or not
    args: tuple
    dtype: str = "bool"


@dataclass(frozen=True, eq=True, repr=False)
class Select(PrimExpr):
    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr

    @property
    def dtype(self):
        return self.true_value.dtype


@dataclass(frozen=True, eq=True, repr=False)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@dataclass(frozen=True, eq=True, repr=False)
class BitCast(PrimExpr):
    """The bits of `value` read as `dtype`, a dtype of the same width (ONNX BitCast): no value conversion. A
    16-bit float is its 16-bit pattern here, not its float32 register value; bool is one byte (0 or 1)."""
    dtype: str
    value: PrimExpr


@dataclass(frozen=True, eq=True, repr=False)
class Call(PrimExpr):
    """A math intrinsic, one of relayish/intrinsics.py's table (build it with `intrin`)."""
    name: str
    args: tuple
    dtype: str = "float32"


@dataclass(frozen=True, eq=True, repr=False)
class TensorRead(PrimExpr):
    tensor: object  # a te.Tensor (relayish/te.py, which builds on this module)
    indices: tuple

    @property
    def dtype(self):
        return self.tensor.dtype


@dataclass(frozen=True, eq=True, repr=False)
class Reduce(PrimExpr):
    """combiner over axes of body; only allowed at the top of a compute body."""
    combiner: str  # sum, prod, max, min
    body: PrimExpr
    axes: tuple  # of IterVar

    @property
    def dtype(self):
        return self.body.dtype


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(PrimExpr):
    """An axis: its variable, extent and kind. Usable in expressions as its variable."""
    var: Var
    extent: int
    kind: str  # "spatial" or "reduce"
    dtype = "int32"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    @property
    def name(self):
        return self.var.name

    def __repr__(self):
        return f"IterVar({self.var.name}, {self.extent}, {self.kind})"


# ---------------------------------------------------------------------------------------------- construction

def const(value, dtype="float32") -> PrimExpr:
    if dtype.startswith("int") or dtype.startswith("uint") or dtype == "bool":
        return IntImm(int(value), dtype)
    return FloatImm(float(value), dtype)


def as_expr(x, dtype="int32") -> PrimExpr:
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, PrimExpr):
        return x
    if isinstance(x, bool):
        return IntImm(int(x), "bool")
    integral = dtype.startswith(("int", "uint")) or dtype == "bool"
    if isinstance(x, int):  # beside an integer expression: of its dtype (bool: an int32 it is widened to)
        if integral:
            return IntImm(x, "int32" if dtype == "bool" else dtype)
        return FloatImm(float(x), dtype)
    if isinstance(x, float):
        return FloatImm(x, "float32" if integral else dtype)
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


BITWISE_OPS = ("&", "|", "^", "<<", ">>")  # never folded here: their meaning depends on the width of the dtype


def binop(op: str, a, b) -> PrimExpr:
    """Build a binary op with integer constant folding and the identities that keep indices short."""
    if isinstance(a, IterVar):
        a = a.var
    if isinstance(b, IterVar):
        b = b.var
    if isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        b = as_expr(b, a.dtype)
    elif isinstance(b, PrimExpr) and not isinstance(a, PrimExpr):
        a = as_expr(a, b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    if op in BITWISE_OPS:
        return BinOp(op, a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(_fold_int(op, a.value, b.value), a.dtype)
    if isinstance(a, FloatImm) and isinstance(b, FloatImm) and op in ("+", "-", "*", "/", "min", "max"):
        return FloatImm(_fold_float(op, a.value, b.value), a.dtype)
    is_zero = lambda e: isinstance(e, (IntImm, FloatImm)) and e.value == 0
    is_one = lambda e: isinstance(e, (IntImm, FloatImm)) and e.value == 1
    if op == "+":
        if is_zero(b): return a
        if is_zero(a): return b
    elif op == "-":
        if is_zero(b): return a
    elif op == "*":
        if is_one(b): return a
        if is_one(a): return b
        if isinstance(a, IntImm) and a.value == 0: return a
        if isinstance(b, IntImm) and b.value == 0: return b
    elif op in ("/", "//"):
        if is_one(b): return a
    elif op == "%":
        if isinstance(b, IntImm) and b.value == 1: return IntImm(0, a.dtype)
    return BinOp(op, a, b)


def _fold_int(op, a, b):
    if op == "+": return a + b
    if op == "-": return a - b
    if op == "*": return a * b
    if op in ("//", "/"): return a // b
    if op == "%": return a % b
    if op == "min": return min(a, b)
    if op == "max": return max(a, b)
    raise ValueError(op)


def _fold_float(op, a, b):
    if op == "+": return a + b
    if op == "-": return a - b
    if op == "*": return a * b
    if op == "/": return a / b
    if math.isnan(a) or math.isnan(b): return math.nan  # min/max propagate NaN, as the compiled code does
    if op == "min": return min(a, b)
    return max(a, b)


def min_(a, b): return binop("min", a, b)
def max_(a, b): return binop("max", a, b)
def eq(a, b): return Cmp("==", as_expr(a), as_expr(b))
def ne(a, b): return Cmp("!=", as_expr(a), as_expr(b))


def all_of(*conds) -> PrimExpr:
    conds = [c for c in conds if not (isinstance(c, IntImm) and c.value)]
    if not conds:
        return IntImm(1, "bool")
    return conds[0] if len(conds) == 1 else Logic("and", tuple(conds))


def any_of(*conds) -> PrimExpr:
    return conds[0] if len(conds) == 1 else Logic("or", tuple(conds))


def logical_not(c) -> PrimExpr:
    return Logic("not", (c,))


def select(cond, t, f) -> PrimExpr:
    t = as_expr(t, f.dtype if isinstance(f, PrimExpr) else "float32")
    f = as_expr(f, t.dtype)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Select(cond, t, f)


def cast(dtype, x) -> PrimExpr:
    x = as_expr(x)
    return x if x.dtype == dtype else Cast(dtype, x)


def bitcast(dtype, x) -> PrimExpr:
    x = as_expr(x)
    return x if x.dtype == dtype else BitCast(dtype, x)


def intrin(name, *args) -> PrimExpr:
    """Math intrinsic `name` (relayish/intrinsics.py) of float args; a wrong name or arity raises ValueError."""
    if len(args) != get_intrinsic(name).arity:
        raise ValueError(f"intrinsic {name} takes {get_intrinsic(name).arity} argument(s), got {len(args)}")
    args = tuple(as_expr(a, "float32") for a in args)
    return Call(name, args, args[0].dtype)


def dot4_u8s8(a, w) -> PrimExpr:
    """sum over t < 4 of a[t] * (byte t of w): a is 4 uint8 expressions (consecutive input channels or K elements),
    w an int32 expression holding 4 int8 values, the first in its least significant byte (a packed weight word).
    Exact in int32. `acc + dot4_u8s8(a, w)` is one lane of vpdpbusd (compiler/codegen/intdot.py)."""
    a = tuple(as_expr(x) for x in a)
    w = as_expr(w)
    if len(a) != 4 or any(x.dtype != "uint8" for x in a) or w.dtype != "int32":
        raise TypeError(f"dot4_u8s8 takes 4 uint8 values and an int32 word, got "
                        f"{[x.dtype for x in a]} and {w.dtype}")
    return Call("dot4_u8s8", a + (w,), "int32")


def exp(x): return intrin("exp", x)
def log(x): return intrin("log", x)
def sqrt(x): return intrin("sqrt", x)
def tanh(x): return intrin("tanh", x)
def sigmoid(x): return intrin("sigmoid", x)
def power(x, y): return intrin("pow", x, y)
def erf(x): return intrin("erf", x)
def sin(x): return intrin("sin", x)
def cos(x): return intrin("cos", x)
def tan(x): return intrin("tan", x)
def asin(x): return intrin("asin", x)
def acos(x): return intrin("acos", x)
def atan(x): return intrin("atan", x)
def fabs(x): return intrin("fabs", x)
def floor(x): return intrin("floor", x)
def ceil(x): return intrin("ceil", x)


def _bitwise(op):
    """The builder of integer op `op` (BITWISE_OPS) over two expressions of one integer dtype."""
    def build(a, b):
        a, b = as_expr(a), as_expr(b)
        if a.dtype != b.dtype or not a.dtype.startswith(("int", "uint")):
            raise TypeError(f"bitwise {op} needs integers of one dtype, got {a.dtype} and {b.dtype}")
        return binop(op, a, b)
    return build


bitwise_and, bitwise_or, bitwise_xor = _bitwise("&"), _bitwise("|"), _bitwise("^")
# shifts by an amount outside [0, bits) are defined (ONNX BitShift-28): the bits all leave, so the result is 0,
# or for >> of a signed value its sign fill (-1 or 0); >> is arithmetic on signed dtypes, logical on unsigned
shift_left, shift_right = _bitwise("<<"), _bitwise(">>")


# ---------------------------------------------------------------------------------------------- traversal

def expr_children(e: PrimExpr) -> tuple:
    if isinstance(e, (BinOp, Cmp)):
        return (e.a, e.b)
    if isinstance(e, Logic):
        return e.args
    if isinstance(e, Select):
        return (e.cond, e.true_value, e.false_value)
    if isinstance(e, (Cast, BitCast)):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, TensorRead):
        return e.indices
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def walk(e: PrimExpr):
    """Pre-order over an expression, each node once: a node shared by several parents (expressions are DAGs) is
    visited at its first occurrence only, so a walk costs the DAG's size, not the size of its tree."""
    stack, seen = [e], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(expr_children(node)))


def substitute(e: PrimExpr, fn: Callable) -> PrimExpr:
    """Rebuild e bottom-up; fn(node) returns a replacement or None to keep (with rebuilt children). A node whose
    children all come back unchanged is kept as it is, not rebuilt (the same expression: the builders would fold
    nothing new), so a pass that changes a few leaves of a large tree allocates only their paths. fn must be a
    function of the node alone: a node shared by several parents (an expression is a DAG: an antialiased Resize
    reuses each tap weight in every product) is visited once and its result shared, so the result stays a DAG of
    the same size instead of growing into a tree."""
    memo: dict = {}

    def go(e):
        hit = memo.get(id(e))
        if hit is not None:
            return hit[1]
        out = fn(e)
        if out is None:
            out = _rebuilt(e, go)
        memo[id(e)] = (e, out)  # (e kept alive: its id is not reused while the memo lives)
        return out
    try:
        return go(e)
    finally:
        del go  # go's closure holds go: a reference cycle (with the memo and fn) left to the cyclic GC otherwise


def _rebuilt(e: PrimExpr, go: Callable) -> PrimExpr:
    """e with its children mapped by go (e itself when none changes)."""
    if isinstance(e, BinOp):
        a, b = go(e.a), go(e.b)
        return e if a is e.a and b is e.b else binop(e.op, a, b)
    if isinstance(e, Cmp):
        a, b = go(e.a), go(e.b)
        return e if a is e.a and b is e.b else Cmp(e.op, a, b)
    if isinstance(e, Logic):
        args = tuple(go(a) for a in e.args)
        return e if _same(args, e.args) else Logic(e.op, args)
    if isinstance(e, Select):
        c, t, f = go(e.cond), go(e.true_value), go(e.false_value)
        return e if c is e.cond and t is e.true_value and f is e.false_value else select(c, t, f)
    if isinstance(e, Cast):
        v = go(e.value)
        return e if v is e.value else Cast(e.dtype, v)
    if isinstance(e, BitCast):
        v = go(e.value)
        return e if v is e.value else BitCast(e.dtype, v)
    if isinstance(e, Call):
        args = tuple(go(a) for a in e.args)
        return e if _same(args, e.args) else Call(e.name, args, e.dtype)
    if isinstance(e, TensorRead):
        indices = tuple(go(i) for i in e.indices)
        return e if _same(indices, e.indices) else TensorRead(e.tensor, indices)
    if isinstance(e, Reduce):
        body = go(e.body)
        return e if body is e.body else Reduce(e.combiner, body, e.axes)
    return e


def _same(new: tuple, old: tuple) -> bool:
    return all(a is b for a, b in zip(new, old))


def substitute_vars(e: PrimExpr, mapping: dict) -> PrimExpr:
    return substitute(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def expr_str(e: PrimExpr) -> str:
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, FloatImm):
        return repr(e.value) + ("f" if e.dtype == "float32" else "")
    if isinstance(e, Var):
        return e.name
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        return f"({expr_str(e.a)} {e.op} {expr_str(e.b)})"
    if isinstance(e, Cmp):
        return f"({expr_str(e.a)} {e.op} {expr_str(e.b)})"
    if isinstance(e, Logic):
        if e.op == "not":
            return f"!{expr_str(e.args[0])}"
        return "(" + f" {'&&' if e.op == 'and' else '||'} ".join(expr_str(a) for a in e.args) + ")"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, BitCast):
        return f"bitcast<{e.dtype}>({expr_str(e.value)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        return f"{e.combiner}({expr_str(e.body)}, axes=[{', '.join(a.name for a in e.axes)}])"
    if hasattr(e, "buffer") and hasattr(e, "index"):  # compiler.loopir.Load
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    return repr(e)

"""The expression half of the kernel emitter: loop-IR expressions (relayish/prim_expr.py nodes and loopir.Load)
-> LLVM values, scalar or <N x T> in a vector body. The semantics are compiler/codegen/llvm.py's (its module
docstring); llvm.py's _FunctionEmitter subclasses ExprEmitter and provides the state used here: `b` (the
IRBuilder), `env` (Var -> value), `lanes` (the vector width, None outside a vector body), the emission caches
`_shared`, `_int_values`, `_free_vars`, `_structures` and `_structure_numbers`, and the methods `load(Load)` and `error(msg)`.
"""
from __future__ import annotations

from llvmlite import ir

from relayish import te
from relayish.intrinsics import INTEGER_INTRINSICS
from relayish.te import BITWISE_OPS, BinOp, BitCast, Call, Cast, Cmp, FloatImm, IntImm, Logic, Select, Var

from ..arith import add_forms, affine_form
from ..loopir import Load
from .cgutils import bit_width, is_float, is_vector, scalar_type, shaped, splat
from .dtypes import bitcast, convert, int_constant, is_unsigned, value_type, widen_int
from .intdot import emit_dot4, vnni_lanes
from .intrinsics import emit_intrinsic, float_max_min, int_floor_divmod
from .mathbase import FAST, const

I1 = ir.IntType(1)


class ExprEmitter:
    """Emits expressions into the current block of `b` (see the module docstring for what a subclass provides)."""

    def expr(self, e):
        if self._shared is not None and isinstance(e, (Load, BinOp, Cmp, Logic, Select, Cast, BitCast, Call)):
            hit = self._shared.get(id(e))
            if hit is None:
                hit = self._shared[id(e)] = (e, self._expr(e))
            return hit[1]
        return self._expr(e)

    def _expr(self, e):
        if isinstance(e, (int, float)):  # plain Python numbers are accepted where loop IR expects constants
            e = te.as_expr(e, "int32" if isinstance(e, int) else "float32")
        if isinstance(e, IntImm):
            return int_constant(value_type(e.dtype), e.value)
        if isinstance(e, FloatImm):
            return const(value_type(e.dtype), e.value)
        if isinstance(e, Var):
            if e not in self.env:
                raise self.error(f"variable {e.name} is not bound by an enclosing loop or let")
            return self.env[e]
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, BinOp):
            if e.op == "+" and _is_dot(e.b):  # acc + dot4: one vpdpbusd (intdot.py)
                return self.dot4(e.b, self.expr(e.a))
            if e.op == "+" and _is_dot(e.a):
                return self.dot4(e.a, self.expr(e.b))
            key = self._int_key(e) if e.dtype == "int32" else None
            if key is None:  # data arithmetic (it wraps)
                return self.binop(e.op, *self.operands(e), e.dtype, index=False)
            if key not in self._int_values:  # index arithmetic: int32 reading no memory
                self._int_values[key] = self.binop(e.op, *self.operands(e), e.dtype, index=True)
            return self._int_values[key]
        if isinstance(e, Cmp):
            return self.compare(e.op, *self.operands(e), e.a.dtype)
        if isinstance(e, Logic):
            args = [self.as_bool(self.expr(a)) for a in e.args]
            if e.op == "not":
                return self.b.not_(args[0])
            out = args[0]
            for a in args[1:]:
                out, a = self.unify(out, a, "bool", "bool")
                out = self.b.and_(out, a) if e.op == "and" else self.b.or_(out, a)
            return out
        if isinstance(e, Select):
            known = self.static_int(e.cond)
            if known is not None:  # (an unrolled Winograd tile position): emit only the branch taken
                return self.expr(e.true_value if known else e.false_value)
            padded = self.padded_read(e)
            if padded is not None:
                return padded
            cond = self.as_bool(self.expr(e.cond))
            t, f = self.unify(self.expr(e.true_value), self.expr(e.false_value), e.true_value.dtype,
                              e.false_value.dtype)
            if is_vector(cond):
                t, f = splat(self.b, t, self.lanes), splat(self.b, f, self.lanes)
            return self.b.select(cond, t, f)
        if isinstance(e, Cast):
            return convert(self.b, self.expr(e.value), e.value.dtype, e.dtype, _within_int32(e.value))
        if isinstance(e, BitCast):
            return bitcast(self.b, self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, Call):
            if e.name in INTEGER_INTRINSICS:
                return self.dot4(e, None)
            args = [self.expr(a) for a in e.args]
            if any(is_vector(a) for a in args):
                args = [splat(self.b, a, self.lanes) for a in args]
            return emit_intrinsic(self.b, e.name, args)
        raise self.error(f"unknown expression {type(e).__name__}: {te.expr_str(e)}")

    def padded_read(self, e: Select):
        """A vectorized form of select(cond, x[clamped index], other), or None (the subclass's vector bodies)."""
        return None

    def dot4(self, call: Call, acc):
        """acc + dot4_u8s8(*call.args) (acc None: 0). Bytes that are all flipped int8 data (bitcast(x ^ -128),
        relayish/ops/qnn.py) are read raw and flipped as one word."""
        raw = [_flipped(a) for a in call.args[:4]]
        flip = all(r is not None for r in raw)
        data = raw if flip else call.args[:4]
        word = self._data_word(data) if self.lanes in vnni_lanes() else None
        if word is not None:
            return emit_dot4(self.b, acc, None, self.expr(call.args[4]), self.lanes, flip, word=word)
        args = [self.expr(a) for a in data] + [self.expr(call.args[4])]
        return emit_dot4(self.b, acc, args[:4], args[4], self.lanes, flip)

    def _data_word(self, data):
        """The 4 data bytes as one int32 load, when they are 4 consecutive bytes of one buffer, the same in every
        lane (a convolution's input pixel, a matmul's row element); else None. Loaded byte by byte, LLVM's SLP
        vectorizer could pack the bytes' address arithmetic of several columns into vectors and extract every
        address again (four byte loads, shifts and ors per word: an int8 1x1 convolution of 32 -> 16 channels
        over 112x112 ran at 82 GOP/s)."""
        if not all(isinstance(d, Load) and d.buffer is data[0].buffer for d in data):
            return None
        base = affine_form(data[0].index)
        if any(add_forms(affine_form(d.index), base, -1) != ({1: t} if t else {}) for t, d in enumerate(data)):
            return None
        if self.lanes and self.k.coefficient(data[0].index, self.vec_var, self.lets) != 0:
            return None
        index = self.expr(data[0].index)
        if is_vector(index):
            index = self.b.extract_element(index, ir.IntType(32)(0))
        ptr = self.b.bitcast(self.addr(self.buffer_ptr(data[0].buffer), index), ir.IntType(32).as_pointer())
        return self.b.load(ptr, align=1)

    def _int_key(self, e):
        """The reuse key of int expression e here: None if it reads memory or has an unbound variable."""
        variables = self._variables(e)
        if variables is None or any(v not in self.env for v in variables):
            return None
        values = tuple(("c", self.env[v].constant) if isinstance(self.env[v], ir.Constant) and
                       isinstance(self.env[v].constant, int) else id(self.env[v]) for v in variables)
        return (self._structure(e), id(self.b.block), self.lanes, values)

    def _structure(self, e) -> int:
        """A number for e's structure, equal for structurally equal expressions (same kinds, operators, dtypes,
        constants and variables), so that an index computed again in nodes of its own is emitted once per block;
        memoized per node and computed bottom-up (hashing the frozen nodes would walk each subtree again)."""
        memo, numbers = self._structures, self._structure_numbers
        for node, kids in _unmemoized_bottom_up(e, memo):
            if isinstance(node, Var):
                own = ("var", node.uid)
            elif isinstance(node, Load):
                own = ("load", id(node.buffer))
            else:
                own = (type(node).__name__, node.dtype, getattr(node, "op", None), getattr(node, "name", None),
                       repr(node.value) if isinstance(node, (IntImm, FloatImm)) else None)  # repr: -0.0 != 0.0
            key = (own, tuple(memo[id(k)][1] for k in kids))
            memo[id(node)] = (node, numbers.setdefault(key, len(numbers)))
        return memo[id(e)][1]

    def _variables(self, e):
        """The Vars of e in first-seen order, None if e reads memory; memoized per node and computed bottom-up
        from the children's (an index expression of an unrolled tile has thousands of nested nodes that share
        subterms: walking each node's whole subtree again was a tenth of a kernel's IR emission)."""
        memo = self._free_vars
        for node, kids in _unmemoized_bottom_up(e, memo):
            if isinstance(node, Load):
                found = None
            elif isinstance(node, Var):
                found = (node,)
            else:
                found, uids = [], set()
                for k in kids:
                    kv = memo[id(k)][1]
                    if kv is None:
                        found = None
                        break
                    for v in kv:
                        if v.uid not in uids:
                            uids.add(v.uid)
                            found.append(v)
                found = None if found is None else tuple(found)
            memo[id(node)] = (node, found)  # the node kept, so that its id stays its own
        return memo[id(e)][1]

    def static_int(self, e):
        """The value of an int/bool expression if it is known while emitting (constants and variables bound to
        constants: unrolled loop indices), else None."""
        if isinstance(e, IntImm):
            return e.value
        if isinstance(e, Var):
            v = self.env.get(e)
            return v.constant if isinstance(v, ir.Constant) and isinstance(v.constant, int) else None
        if isinstance(e, (BinOp, Cmp)):
            a, b = self.static_int(e.a), self.static_int(e.b)
            if a is None or b is None:
                return None
            if isinstance(e, Cmp):
                return int({"<": a < b, "<=": a <= b, "==": a == b, "!=": a != b}[e.op])
            if e.op in ("//", "%") and b <= 0:
                return None
            return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else None, "%": a % b if b else None,
                    "min": min(a, b), "max": max(a, b)}.get(e.op)
        if isinstance(e, Logic):
            args = [self.static_int(a) for a in e.args]
            if any(a is None for a in args):
                return None
            if e.op == "not":
                return int(not args[0])
            return int(all(args) if e.op == "and" else any(args))
        return None

    def operands(self, e):
        return self.unify(self.expr(e.a), self.expr(e.b), e.a.dtype, e.b.dtype)

    def unify(self, a, b, dtype_a: str, dtype_b: str):
        """Bring two values of dtypes dtype_a, dtype_b to one type: widen the narrower int (unsigned ones and bool
        zero-extend) or float, splat a scalar."""
        sa, sb = scalar_type(a.type), scalar_type(b.type)
        if sa != sb:
            if is_float(sa) != is_float(sb):
                raise self.error(f"operands of mixed types {sa} and {sb}; lowering must insert a Cast")
            wide = sa if bit_width(sa) > bit_width(sb) else sb
            a, b = self.widen(a, dtype_a, wide), self.widen(b, dtype_b, wide)
        if is_vector(a) != is_vector(b):
            a, b = splat(self.b, a, self.lanes), splat(self.b, b, self.lanes)
        return a, b

    def widen(self, v, dtype: str, scalar_ty):
        if scalar_type(v.type) == scalar_ty:
            return v
        if is_float(scalar_ty):
            return self.b.fpext(v, shaped(scalar_ty, v.type.count if is_vector(v) else None))
        return widen_int(self.b, v, "bool" if scalar_type(v.type) == I1 else dtype, scalar_ty)

    def as_bool(self, v):
        if scalar_type(v.type) == I1:
            return v
        zero = const(v.type, 0.0 if is_float(v.type) else 0)
        return self.b.fcmp_unordered("!=", v, zero) if is_float(v.type) else self.b.icmp_unsigned("!=", v, zero)

    def binop(self, op, a, b, dtype: str, index: bool):
        """a op b for operands of one type; dtype (of the expression) says the signedness; index: int32 index
        arithmetic, which cannot overflow (nsw), where data arithmetic wraps."""
        bl = self.b
        if is_float(a.type):
            if op == "+": return bl.fadd(a, b, flags=FAST)
            if op == "-": return bl.fsub(a, b, flags=FAST)
            if op == "*": return bl.fmul(a, b, flags=FAST)
            if op == "/": return bl.fdiv(a, b)
            if op in ("//", "%"):
                q = emit_intrinsic(bl, "floor", [bl.fdiv(a, b)])
                return q if op == "//" else bl.fsub(a, bl.fmul(q, b))
            if op in ("max", "min"): return float_max_min(bl, op, a, b)
        else:
            flags = ("nsw",) if index else ()
            if op == "+": return bl.add(a, b, flags=flags)
            if op == "-": return bl.sub(a, b, flags=flags)
            if op == "*": return bl.mul(a, b, flags=flags)
            unsigned = is_unsigned(dtype) or scalar_type(a.type) == I1
            if op in ("/", "//", "%"):
                return int_floor_divmod(bl, a, b, want_mod=(op == "%"), unsigned=unsigned)
            if op in BITWISE_OPS:
                return _bitwise(bl, op, a, b, unsigned)
            less = bl.icmp_unsigned if unsigned else bl.icmp_signed  # bool: false < true
            if op == "max": return bl.select(less("<", a, b), b, a)
            if op == "min": return bl.select(less("<", b, a), b, a)
        raise self.error(f"unknown binary operator {op!r}")

    def compare(self, op, a, b, dtype: str):
        if op not in ("<", "<=", "==", "!="):
            raise self.error(f"unknown comparison {op!r}")
        if is_float(a.type):  # ordered, except != which is true for NaN (as in Python / numpy)
            return self.b.fcmp_unordered(op, a, b) if op == "!=" else self.b.fcmp_ordered(op, a, b)
        if scalar_type(a.type) == I1 or is_unsigned(dtype):
            return self.b.icmp_unsigned(op, a, b)
        return self.b.icmp_signed(op, a, b)


def _flipped(e):
    """x of bitcast<uint8>(x ^ -128) with x int8 (a flipped data byte), else None."""
    if isinstance(e, BitCast) and e.dtype == "uint8" and isinstance(e.value, BinOp) and e.value.op == "^" and \
            e.value.a.dtype == "int8" and isinstance(e.value.b, IntImm) and e.value.b.value == -128:
        return e.value.a
    return None


def _within_int32(e) -> bool:
    """Whether float e is a clamp, min(max(x, lo), hi) or max(min(x, hi), lo), with constant bounds inside int32's
    range (a requantization's clip to [0, 255]): its conversion to a narrow integer may go through int32
    (vcvttps2dq + vpmovdb) rather than int64 (two vcvttps2qq, an extract, two vpmovqb and an unpack per 16 lanes),
    with the same result."""
    def bound(e, op):  # (the constant bound, the other operand) of e = op(x, c), else None
        if not (isinstance(e, BinOp) and e.op == op and e.dtype.startswith("float")):
            return None
        c, x = (e.b, e.a) if isinstance(e.b, FloatImm) else (e.a, e.b)
        return (c.value, x) if isinstance(c, FloatImm) and -2.0 ** 31 <= c.value < 2.0 ** 31 else None
    for outer, inner in (("min", "max"), ("max", "min")):
        b = bound(e, outer)
        if b is not None and bound(b[1], inner) is not None:
            return True
    return False


def _is_dot(e) -> bool:
    return isinstance(e, Call) and e.name == "dot4_u8s8"


def _bitwise(bl: ir.IRBuilder, op: str, a, b, unsigned: bool):
    """a & | ^ << >> b on integers of one type. LLVM's shifts by >= the width are poison: a shift amount outside
    [0, bits) (an unsigned compare catches the negative ones) gives 0, or for >> of a signed value the sign fill
    (te.shift_left / shift_right)."""
    if op in ("&", "|", "^"):
        return {"&": bl.and_, "|": bl.or_, "^": bl.xor}[op](a, b)
    bits = scalar_type(a.type).width
    outside = bl.icmp_unsigned(">=", b, const(a.type, bits))
    if op == ">>" and not unsigned:
        return bl.ashr(a, bl.select(outside, const(a.type, bits - 1), b))
    shifted = bl.shl(a, b) if op == "<<" else bl.lshr(a, b)
    return bl.select(outside, const(a.type, 0), shifted)


def _unmemoized_bottom_up(e, memo: dict):
    """(node, children) for every node of e whose id is not in `memo`, children before their parents (a Load's
    child is its index), each once: the caller stores memo[id(node)] from its children's entries before the next
    is yielded. Iterative, as index expressions of unrolled tiles nest thousands deep."""
    stack = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        kids = (node.index,) if isinstance(node, Load) else te.expr_children(node)
        if not ready:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        yield node, kids

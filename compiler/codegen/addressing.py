"""The addressing half of the kernel emitter: the address of a scalar access, &ptr[index], from a loop-IR index
expression. llvm.py's _FunctionEmitter subclasses AddressEmitter (itself an emit_expr.ExprEmitter) and provides
the state used here besides the expression emitter's: `vec_var` and `vec_start` (the vector body's variable and
its lane 0's scalar value), and the caches `_affine` (id(expr) -> (expr, its affine form)) and `_offsets`
((id(i32 value), id(block), constant) -> their i64 sum).

An index is emitted as sext(rest) + c in i64 (index_addr): index_parts splits its affine form into the constant c
(with the loop variables bound to constants folded in) and the rest, its other terms in a canonical order, so that
the accesses of an unrolled tile share one rest (emitted once per block) and differ by constants.
"""
from __future__ import annotations

from llvmlite import ir

from relayish.te import BinOp, IntImm, Var

from .cgutils import is_vector
from .emit_expr import ExprEmitter, _unmemoized_bottom_up

I32, I64 = ir.IntType(32), ir.IntType(64)
MAX_INDEX_TERMS = 16  # an index's terms split apart by index_parts; beyond, the index is emitted as written


class AddressEmitter(ExprEmitter):
    """Addresses of scalar accesses (see the module docstring for what a subclass provides)."""

    def lane0_index(self, index):
        """The value of int expression `index` in lane 0 of the vector body, computed on scalars (vec_var bound to
        its lane 0) rather than as a vector of lanes of which only the first is used: a contiguous access's
        address. The vector form (splat, add, extract for each of thousands of unrolled accesses) was a third of
        some candidates' IR, which LLVM then folded back."""
        shared, vector = self._shared, self.env[self.vec_var]
        self._shared, self.env[self.vec_var] = None, self.vec_start  # _shared holds values of the vector binding
        try:
            value = self.expr(index)
        finally:
            self._shared, self.env[self.vec_var] = shared, vector
        return self.b.extract_element(value, I32(0)) if is_vector(value) else value  # (a vector let in it)

    def addr(self, ptr, index):
        """&ptr[index] for an emitted scalar int index (i32, or i64)."""
        return self.b.gep(ptr, [self.offset(index, 0) if index.type.width < 64 else index], inbounds=True)

    def index_addr(self, ptr, index, lane0: bool = False):
        """&ptr[index] for a scalar int32 index expression (lane0: its value at lane 0 of the vector body), emitted
        as sext(rest) + c in i64: `index_parts` splits off the constant c, so that the accesses of an unrolled tile
        share one `rest` (emitted once per block) and differ by constants. Emitted as written, the constant sat
        inside each index's chain of adds (`add nsw i32 %x, 0`): a chain and a sext per access, and LLVM's loop
        load elimination spent 12 s of a 14 s build comparing 800 such addresses in one loop."""
        parts = self.index_parts(index, lane0)
        if parts is None:
            return self.addr(ptr, self.lane0_index(index) if lane0 else self.expr(index))
        rest, c = parts
        if rest is None:
            return self.b.gep(ptr, [I64(c)], inbounds=True)
        value = self.lane0_index(rest) if lane0 else self.expr(rest)
        return self.b.gep(ptr, [self.offset(value, c)], inbounds=True)

    def offset(self, value, c: int):
        """sext(value) + c in i64 for an i32 value, emitted once per block (the sext keeps value alive, so that its
        id stays its own)."""
        key = (id(value), id(self.b.block), c)
        if key not in self._offsets:
            if c:
                self._offsets[key] = self.b.add(self.offset(value, 0), I64(c), flags=("nsw",))
            else:
                self._offsets[key] = self.b.sext(value, I64)
        return self._offsets[key]

    def index_parts(self, index, lane0: bool):
        """(rest, c): int32 index = rest + c with c a constant (rest None if index is one), the variables bound
        to constants here (unrolled loop indices; with lane0, the vector variable at a constant start) folded
        into c and rest's terms in a canonical order; None if index is not int32 or has a vector value."""
        if isinstance(index, int):  # (loop IR accepts plain Python ints as constants)
            return None, index
        if index.dtype != "int32":
            return None
        c, terms = 0, []
        for term, coef in self.affine_terms(index):
            if term is None:
                c += coef
                continue
            value = self.vec_start if lane0 and term is self.vec_var else self.env.get(term) \
                if isinstance(term, Var) else None
            if isinstance(value, ir.Constant) and isinstance(value.constant, int):
                c += coef * value.constant
            elif value is not None and is_vector(value) or term.dtype != "int32":
                return None
            else:
                terms.append((term, coef))
        if not terms:
            return None, c
        terms.sort(key=lambda tc: (0, tc[0].uid) if isinstance(tc[0], Var) else (1, self._structure(tc[0])))
        rest = None
        for term, coef in terms:
            t = term if coef == 1 else BinOp("*", term, IntImm(coef))
            rest = t if rest is None else BinOp("+", rest, t)
        return rest, c

    def affine_terms(self, e) -> list:
        """e as [(term, coef)], term None for the constant: arith.affine_form's split, iterative and memoized per
        node (index expressions of unrolled tiles nest deep and share subterms), other nodes kept whole as terms.
        A form of more than MAX_INDEX_TERMS terms is kept whole too."""
        memo = self._affine
        for node, kids in _unmemoized_bottom_up(e, memo):
            form = None
            if isinstance(node, IntImm):
                form = {None: (None, node.value)} if node.value else {}
            elif isinstance(node, Var):
                form = {node.uid: (node, 1)}
            elif isinstance(node, BinOp) and node.dtype == "int32" and node.op in ("+", "-", "*"):
                a, b = memo[id(node.a)][1], memo[id(node.b)][1]
                if node.op == "*":
                    for x, y in ((a, b), (b, a)):
                        if set(x) <= {None}:
                            k = x[None][1] if x else 0
                            form = {key: (t, v * k) for key, (t, v) in y.items() if v * k}
                            break
                else:
                    form = dict(a)
                    sign = 1 if node.op == "+" else -1
                    for key, (t, v) in b.items():
                        total = form.get(key, (t, 0))[1] + sign * v
                        if total:
                            form[key] = (t, total)
                        else:
                            form.pop(key, None)
            if form is None or len(form) > MAX_INDEX_TERMS:
                form = {("node", id(node)): (node, 1)}
            memo[id(node)] = (node, form)
        return list(memo[id(e)][1].values())

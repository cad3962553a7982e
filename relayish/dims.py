"""Dims known only at run time: canonical int expressions of size variables.

A dim of a TensorType is an int or an int32 expression of size variables (te.size_var). Shape rules build such
expressions as they go (a convolution's (h + 2*p - k) // s + 1), so two paths to one size build different trees:
the main branch and the shortcut of a residual block both give (h - 1) // 2 + 1, one as
(((h + 2) - 3) // 2) + 1 and one as ((h - 1) // 2) + 1. `canonical` rewrites an expression into one form per
value, so that shape rules can compare dims structurally (relayish/ops/common.py same_dim):

- a sum is an affine form: terms (size variables, products of them, and floor divisions) with int coefficients
  plus a constant, terms in a fixed order (by their text), no zero coefficient; a product of sums is expanded;
- a floor division by a constant c > 0 of a canonical sum: terms whose coefficients c divides come out of it
  ((c*a + b) // c = a + b // c), and so does the constant's multiple of c; what remains, if anything, stays
  inside: a term `r // c` with r canonical and its constant in [0, c);
- modulo by a constant: r % c = r - c * (r // c), with r // c as above.

It is exact on integers (floor division and modulo as in Python and the generated code). Expressions it does not
know (min, max, a division by a size variable) are kept as opaque terms with canonical operands.
"""
from __future__ import annotations

from .prim_expr import BinOp, IntImm, PrimExpr, Var, binop

TYPICAL_SIZE = 256  # what a choice that depends on a size (a register tile, a block) assumes of a run-time dim


_TYPICAL_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                "//": lambda a, b: a // b if b else a, "%": lambda a, b: a % b if b else 0, "min": min, "max": max}


def typical(d) -> int:
    """A dim as a number for a choice that only tunes speed: d itself, or for a dim known only at run time its
    value with every size variable at TYPICAL_SIZE, at least 1 (ResNet's last stage over an image of h x w is
    (h + 31) // 32 or so: 8, not 256). The value is then a guess, never a fact that correctness relies on."""
    if not isinstance(d, PrimExpr):
        return d

    def value(e) -> int:
        if isinstance(e, IntImm):
            return e.value
        if isinstance(e, BinOp) and e.op in _TYPICAL_OPS:
            return _TYPICAL_OPS[e.op](value(e.a), value(e.b))
        if hasattr(e, "value") and isinstance(e.value, PrimExpr):  # a cast
            return value(e.value)
        return TYPICAL_SIZE  # a size variable, or a term this does not evaluate
    return max(1, value(d))


def canonical(e):
    """e (an int or an int32 expression of size variables) in canonical form: an int when it is constant."""
    if not isinstance(e, PrimExpr):
        return int(e)
    return _expr(_form(e))


def _form(e) -> dict:
    """e as {monomial: coef}: a monomial is a tuple of factor terms (sorted by text), () for the constant."""
    if isinstance(e, IntImm):
        return {(): e.value} if e.value else {}
    if isinstance(e, (Var,)):
        return {(e,): 1}
    if isinstance(e, BinOp):
        if e.op in ("+", "-"):
            return _add(_form(e.a), _form(e.b), 1 if e.op == "+" else -1)
        if e.op == "*":
            return _mul(_form(e.a), _form(e.b))
        if e.op in ("//", "%") and isinstance(e.b, IntImm) and e.b.value > 0:
            return _floordiv(_form(e.a), e.b.value) if e.op == "//" else _mod(_form(e.a), e.b.value)
        return {(binop(e.op, canonical(e.a), canonical(e.b)),): 1}
    return {(e,): 1}


def _key(term) -> str:
    return str(term)


def _add(a: dict, b: dict, sign: int = 1) -> dict:
    out = dict(a)
    for m, c in b.items():
        v = out.get(m, 0) + sign * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def _mul(a: dict, b: dict) -> dict:
    out: dict = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb, key=_key))
            out = _add(out, {m: ca * cb})
    return out


def _floordiv(a: dict, c: int) -> dict:
    """(sum of a) // c: the multiples of c out, the rest one floor-division term."""
    out, rest = {}, {}
    for m, coef in a.items():
        if m == ():
            continue
        (out if coef % c == 0 else rest)[m] = coef // c if coef % c == 0 else coef
    const = a.get((), 0)
    if not rest:
        return _add(out, {(): const // c} if const // c else {})
    q, r = divmod(const, c)
    if r:
        rest[()] = r
    if q:
        out = _add(out, {(): q})
    return _add(out, {(binop("//", _expr(rest), IntImm(c)),): 1})


def _mod(a: dict, c: int) -> dict:
    return _add(a, {m: coef * c for m, coef in _floordiv(a, c).items()}, -1)


def _expr(form: dict):
    """The expression of a form: an int when constant; terms in text order, the constant last."""
    if set(form) <= {()}:
        return form.get((), 0)
    out = None
    for m in sorted((m for m in form if m != ()), key=lambda m: tuple(map(_key, m))):
        term = m[0]
        for f in m[1:]:
            term = term * f
        coef = form[m]
        piece = term if coef == 1 else term * coef
        out = piece if out is None else out + piece
    const = form.get((), 0)
    return out + const if const else out


def _var_monomials(form: dict) -> bool:
    """Whether every term of a form is a product of size variables (no floor division or opaque term)."""
    return all(isinstance(f, Var) for m in form if m != () for f in m)


def lower_bound(e) -> int | None:
    """The least value of e over size variables >= 1 when e is a sum of products of them with coefficients >= 0
    plus a constant (each product is then least at 1); None otherwise."""
    form = _form(e) if isinstance(e, PrimExpr) else ({(): int(e)} if int(e) else {})
    terms = [c for m, c in form.items() if m != ()]
    if not _var_monomials(form) or any(c < 0 for c in terms):
        return None
    return sum(terms) + form.get((), 0)


def sign(e) -> int | None:
    """The sign of e (-1, 0 or 1) for every value of its size variables, each taken >= 1; None when it depends
    on them (or on a term this cannot bound). The generic module serves sizes >= 1 only."""
    form = _form(e) if isinstance(e, PrimExpr) else ({(): int(e)} if int(e) else {})
    const = form.get((), 0)
    terms = [c for m, c in form.items() if m != ()]
    if not terms:
        return (const > 0) - (const < 0)
    if not _var_monomials(form):
        return None
    if all(c > 0 for c in terms) and sum(terms) + const > 0:  # each product of variables is >= 1
        return 1
    if all(c < 0 for c in terms) and sum(terms) + const < 0:
        return -1
    return None


def exact_quotient(a, b):
    """a / b when it divides exactly for every value of the size variables, in canonical form; None when it
    cannot be shown to (b a constant that divides every coefficient, or one term that divides every term)."""
    fa = _form(a) if isinstance(a, PrimExpr) else ({(): int(a)} if int(a) else {})
    fb = _form(b) if isinstance(b, PrimExpr) else ({(): int(b)} if int(b) else {})
    if len(fb) != 1:
        return None
    (mb, cb), = fb.items()
    out = {}
    for m, c in fa.items():
        rest = list(m)
        for f in mb:
            if f not in rest:
                return None
            rest.remove(f)
        if c % cb:
            return None
        out[tuple(rest)] = c // cb
    return _expr(out)

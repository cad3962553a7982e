"""Integer index arithmetic: affine forms, value ranges and simplification of index expressions.

Lowering (bound inference, the indices that splits and fuses create, clamping of padded reads), default schedules
(is an axis contiguous?), codegen (does an access move with the vector lane?) and the cost model's features
(strides, loop extents) all ask these questions of `relayish.te` expressions; this module answers them once.

Semantics. `//` and `%` are floor division and modulo, as in Python and in the code we generate, so `e % c` with
c > 0 always lies in [0, c). Vars are loop variables: `ranges` maps a Var to its extent n >= 1 and the Var then
takes the values 0 .. n-1. Casts are taken as value-preserving (index arithmetic only widens).

Affine form. `affine_form(e)` writes e as (sum of coef * term) + constant: a dict {term: coef} whose key 1 holds
the constant. Invariants: no coefficient is 0 (e == 0 is the empty dict); a term is a Var or an *opaque*
expression, one whose top is not +, - or a product with a constant (`v // 9`, `v % 9`, `min(e, n)`, `v * w`,
a Load...); equal terms are merged (Vars compare by identity, other expressions structurally).

Value range. `interval(e, ranges)` is an inclusive (lo, hi) that contains every value e takes while each Var in
`ranges` runs over its values, or None when that is unknown (a Var not in `ranges`, a loaded value). It is exact
for affine expressions over distinct Vars and conservative otherwise.
"""
from __future__ import annotations

import math

from relayish import te
from relayish.te import BinOp, Cast, FloatImm, IntImm, PrimExpr, Select, Var

from .loopir import Load


# ---------------------------------------------------------------------------------------------- affine forms

def affine_form(e: PrimExpr) -> dict:
    """e as {term: coef}, key 1 for the constant (see the module docstring for the invariants)."""
    if isinstance(e, IntImm):
        return {1: e.value} if e.value else {}
    if isinstance(e, Var):
        return {e: 1}
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return add_forms(affine_form(e.a), affine_form(e.b), 1 if e.op == "+" else -1)
    if isinstance(e, BinOp) and e.op == "*":
        a, b = affine_form(e.a), affine_form(e.b)
        for x, y in ((a, b), (b, a)):
            if set(x) <= {1}:
                c = x.get(1, 0)
                return {t: v * c for t, v in y.items() if v * c}
    return {e: 1}


def add_forms(a: dict, b: dict, sign: int = 1) -> dict:
    """The form of a + sign * b (zero coefficients dropped)."""
    out = dict(a)
    for t, c in b.items():
        out[t] = out.get(t, 0) + sign * c
        if out[t] == 0:
            del out[t]
    return out


def form_expr(form: dict) -> PrimExpr:
    """The int32 expression of a form: the constant, then the terms in the form's order."""
    out = IntImm(form.get(1, 0))
    for t, c in form.items():
        if t != 1:
            out = out + t * c
    return out


def coefficient(e: PrimExpr, var: Var, lets: dict | None = None) -> int | None:
    """c such that e = c * var + (terms without var): 0 if e does not depend on var, None if it depends on var
    but not affinely. `lets` maps let-bound Vars to their own coefficient in var (None: not affine)."""
    lets = lets or {}
    total = 0
    for term, coef in affine_form(e).items():
        if term == 1:
            continue
        if isinstance(term, Var):
            c = 1 if term is var else lets.get(term, 0)
        else:  # opaque: independent of var only if all its operands are
            c = 0 if all(coefficient(x, var, lets) == 0 for x in _operands(term)) else None
        if c is None:
            return None
        total += coef * c
    return total


def unclamped(e: PrimExpr, var: Var) -> tuple[PrimExpr, list]:
    """e without the clamps that involve var: each max(x, c) or min(x, c) with a constant c, reached through +, -
    and *, becomes x, and `limits` gets (x, c, is_lower): e equals the stripped expression wherever every x >= c
    (a max) or x <= c (a min) holds. A padded window's read x[min(max(2 * l + rx - 1, 0), W - 1)] is affine in l
    once stripped (codegen's padded_read)."""
    limits: list = []

    def strip(x):
        if isinstance(x, BinOp) and x.op in ("max", "min"):
            a, c = (x.a, x.b) if isinstance(x.b, IntImm) else (x.b, x.a) if isinstance(x.a, IntImm) else (None, None)
            if a is not None and var in variables(a):
                inner = strip(a)
                limits.append((inner, c.value, x.op == "max"))
                return inner
            return x
        if isinstance(x, BinOp) and x.op in ("+", "-", "*"):
            a, b = strip(x.a), strip(x.b)
            return x if a is x.a and b is x.b else BinOp(x.op, a, b)
        return x

    return strip(e), limits


def implies_limits(cond: PrimExpr, limits: list) -> bool:
    """Whether cond (a conjunction) implies every (x, c, is_lower) of `limits` (x >= c, or x <= c): each by one of
    its comparisons k <= e, e < k (and the mirrored forms) with e - x a constant. A padded window's guard 1 <= 2 *
    l + rx < W + 1 implies 0 <= 2 * l + rx - 1 <= W - 1, the clamps of its read."""
    terms = list(cond.args) if isinstance(cond, te.Logic) and cond.op == "and" else [cond]
    bounds = []  # (form of e, lowest or None, highest or None) that cond implies
    for t in terms:
        if not isinstance(t, te.Cmp) or t.op not in ("<", "<=", ">", ">="):
            continue
        a, b, op = t.a, t.b, t.op
        if op in (">", ">="):
            a, b, op = b, a, "<" if op == ">" else "<="
        slack = 1 if op == "<" else 0  # a op b: a <= b - slack
        if isinstance(a, IntImm):  # k <= b - ... : b >= k + slack
            bounds.append((affine_form(b), a.value + slack, None))
        elif isinstance(b, IntImm):  # a <= k - slack
            bounds.append((affine_form(a), None, b.value - slack))
    for x, c, is_lower in limits:
        fx = affine_form(x)
        ok = False
        for fe, lo, hi in bounds:
            d = add_forms(fe, fx, -1)
            if set(d) <= {1}:  # e = x + d
                shift = d.get(1, 0)
                ok = ok or (lo is not None and is_lower and lo - shift >= c) or \
                    (hi is not None and not is_lower and hi - shift <= c)
        if not ok:
            return False
    return True


def slope(e: PrimExpr, var: Var) -> float:
    """How much e moves when var steps by one, ignoring wrap-around and clamping: a stride estimate for the cost
    model. Through +, - and constant factors it is exact (the coefficient); v // c moves 1/c per step of v, v % c
    and a clamp or select like their moving operand, and any other dependence on var (a gather) counts 1."""
    if isinstance(e, Var):
        return 1.0 if e is var else 0.0
    if isinstance(e, (IntImm, FloatImm)):
        return 0.0
    if isinstance(e, Cast):
        return slope(e.value, var)
    if isinstance(e, BinOp):
        if e.op in ("+", "-"):
            sb = slope(e.b, var)
            return slope(e.a, var) + (sb if e.op == "+" else -sb)
        if e.op == "*":
            if isinstance(e.b, IntImm):
                return slope(e.a, var) * e.b.value
            if isinstance(e.a, IntImm):
                return slope(e.b, var) * e.a.value
        if e.op == "//" and isinstance(e.b, IntImm) and e.b.value:
            return slope(e.a, var) / e.b.value
        if e.op == "%":
            return slope(e.a, var)
        if e.op in ("min", "max"):
            sa, sb = slope(e.a, var), slope(e.b, var)
            return sa if abs(sa) >= abs(sb) else sb
    if isinstance(e, Select):
        sa, sb = slope(e.true_value, var), slope(e.false_value, var)
        return sa if abs(sa) >= abs(sb) else sb
    return 1.0 if var in variables(e) else 0.0


def variables(e: PrimExpr) -> set:
    """The Vars e mentions, Load indices included."""
    out, stack = set(), [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.add(n)
        stack.extend(_operands(n))
    return out


def _operands(e: PrimExpr) -> tuple:
    return (e.index,) if isinstance(e, Load) else te.expr_children(e)


# ---------------------------------------------------------------------------------------------- value ranges

def interval(e: PrimExpr, ranges: dict) -> tuple[int, int] | None:
    """Inclusive (lo, hi) of e's values while every Var v in ranges runs over 0 .. ranges[v]-1; None if unknown.
    Affine terms add up exactly; an opaque term is bounded from its operands' intervals."""
    lo = hi = 0
    for term, coef in affine_form(e).items():
        rng = (1, 1) if term == 1 else _term_interval(term, ranges)
        if rng is None:
            return None
        a, b = coef * rng[0], coef * rng[1]
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def _term_interval(t: PrimExpr, ranges: dict) -> tuple[int, int] | None:
    if isinstance(t, Var):  # (an extent known only at run time bounds nothing here)
        return (0, ranges[t] - 1) if t in ranges and isinstance(ranges[t], int) else None
    if isinstance(t, Cast):
        return interval(t.value, ranges)
    if isinstance(t, Select):
        a, b = interval(t.true_value, ranges), interval(t.false_value, ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if not isinstance(t, BinOp):
        return None
    if t.op in ("//", "%") and isinstance(t.b, IntImm) and t.b.value > 0:
        c, a = t.b.value, interval(t.a, ranges)
        if t.op == "%":  # floor modulo by c > 0: always in [0, c)
            return a if a is not None and 0 <= a[0] and a[1] < c else (0, c - 1)
        return None if a is None else (a[0] // c, a[1] // c)
    a, b = interval(t.a, ranges), interval(t.b, ranges)
    if a is None or b is None:
        return None
    if t.op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if t.op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if t.op == "*":
        corners = [x * y for x in a for y in b]
        return min(corners), max(corners)
    return None


def evaluate(e, values: dict) -> int:
    """The value of an int expression (a dim of size variables) with each Var v bound to values[v]; ints pass
    through. Floor division and modulo, as in the generated code."""
    if not isinstance(e, PrimExpr):
        return int(e)
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        if e not in values:
            raise KeyError(f"no value for size variable {e.name!r}")
        return int(values[e])
    if isinstance(e, Cast):
        return evaluate(e.value, values)
    if isinstance(e, BinOp) and e.op in _INT_OPS:
        return _INT_OPS[e.op](evaluate(e.a, values), evaluate(e.b, values))
    raise ValueError(f"not an int expression of size variables: {te.expr_str(e)}")


_INT_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "//": lambda a, b: a // b,
            "%": lambda a, b: a % b, "min": min, "max": max}


def evaluator(exprs, variables):
    """One function that evaluates every expression of `exprs` (ints or int expressions of the size variables
    `variables`) as `evaluate` does: f(*values in the order of variables) -> tuple of ints. It is Python code
    generated once, so that evaluating the shapes of a whole model at new sizes costs one call, not a tree walk
    per dim (the generic module's first call at a new size)."""
    names = {v: f"v{k}" for k, v in enumerate(variables)}

    def text(e) -> str:
        if not isinstance(e, PrimExpr):
            return str(int(e))
        if isinstance(e, IntImm):
            return str(e.value)
        if isinstance(e, Var):
            if e not in names:
                raise KeyError(f"no value for size variable {e.name!r}")
            return names[e]
        if isinstance(e, Cast):
            return text(e.value)
        if isinstance(e, BinOp) and e.op in ("min", "max"):
            return f"{e.op}({text(e.a)}, {text(e.b)})"
        if isinstance(e, BinOp) and e.op in _INT_OPS:
            return f"({text(e.a)} {e.op} {text(e.b)})"
        raise ValueError(f"not an int expression of size variables: {te.expr_str(e)}")
    body = ", ".join(text(e) for e in exprs)
    return eval(f"lambda {', '.join(names.values())}: ({body}{',' if len(exprs) == 1 else ''})",  # noqa: S307
                {"min": min, "max": max})


# ---------------------------------------------------------------------------------------------- simplification

def simplify(e: PrimExpr, ranges: dict) -> PrimExpr:
    """Canonical form of an int32 index (other dtypes are returned unchanged): affine terms collected (constant
    first), and (q*c + r) // c -> q, (q*c + r) % c -> r where the interval of r is provably inside [0, c) (the
    splits and fuses of schedules create exactly these); more generally, for k dividing c, (q*k + r) // c ->
    q // (c/k) and (q*k + r) % c -> (q % (c/k))*k + r when r is provably in [0, k) (a split j = 2*j0 + j1 read
    as j // 16, the group of a grouped convolution's output block, becomes j0 // 8: both j1 read one input). The
    result takes the same values as e wherever every Var v in ranges is in 0 .. ranges[v]-1."""
    def fn(n):
        if isinstance(n, BinOp) and n.op in ("//", "%") and isinstance(n.b, IntImm) and n.b.value > 0:
            inner = simplify(n.a, ranges)
            split = _divisible_split(affine_form(inner), n.b.value, ranges)
            if split is None:
                return te.binop(n.op, inner, n.b)
            k, q, r = split
            c = n.b.value
            if n.op == "//":
                return form_expr(q) if k == c else te.binop("//", form_expr(q), IntImm(c // k))
            return form_expr(r) if k == c else \
                form_expr(add_forms({te.binop("%", form_expr(q), IntImm(c // k)): k}, r))
        return None
    if e.dtype != "int32":
        return e
    return form_expr(_recombine(affine_form(te.substitute(e, fn))))


def _recombine(form: dict) -> dict:
    """k*c*(x // c) + k*(x % c) -> k*x (floor division: x == (x // c)*c + x % c for any x and c > 0): the flat index
    of a tensor read through a reshape of its trailing axes (a reduction over a flattened H*W, read as
    x[.., l // W, l % W]) becomes affine in l again, so that it vectorizes."""
    changed = True
    while changed:  # an index unflattened over several axes recombines from the innermost out
        changed = False
        for term, k in list(form.items()):
            if not (isinstance(term, BinOp) and term.op == "%" and isinstance(term.b, IntImm) and term.b.value > 0):
                continue
            quotient = te.binop("//", term.a, term.b)
            match = next((t for t in form if t is not term and t == quotient), None)
            if match is not None and form[match] == k * term.b.value:
                del form[term], form[match]
                for t, v in affine_form(term.a).items():
                    form[t] = form.get(t, 0) + k * v
                form = {t: v for t, v in form.items() if v}
                changed = True
                break
    return form


def _divisible_split(form: dict, c: int, ranges: dict) -> tuple[int, dict, dict] | None:
    """(k, q, r) with form = k*q + r, k > 1 dividing c and r provably in [0, k): r is the terms of smallest
    coefficient (and the constant's remainder), and of the splits that qualify the one of largest k; None if none
    does. k == c is the plain rule, tried first: it is what the splits and fuses of schedules make, and one interval
    settles it (the search below costs one per candidate split)."""
    q = {t: v // c for t, v in form.items() if v % c == 0}
    r = {t: v for t, v in form.items() if v % c != 0}
    rng = interval(form_expr(r), ranges)
    if rng is not None and 0 <= rng[0] and rng[1] < c:
        return c, q, r
    terms = sorted((t for t in form if t != 1), key=lambda t: abs(form[t]))
    const = form.get(1, 0)
    best = None
    for n_small in range(len(terms) + 1):
        small, big = terms[:n_small], terms[n_small:]
        k = c
        for t in big:
            k = math.gcd(k, form[t])
        if k <= 1 or (best is not None and k <= best[0]):
            continue
        r = {t: form[t] for t in small}
        if const % k:
            r[1] = const % k
        rng = interval(form_expr(r), ranges)
        if rng is not None and 0 <= rng[0] and rng[1] < k:
            q = {t: form[t] // k for t in big}
            if const // k:
                q[1] = const // k
            best = (k, q, r)
    return best

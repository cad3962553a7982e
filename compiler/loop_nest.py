"""One stage's loop nest for lowering (compiler/lower.py): loops in order, guards where they become decidable, attached
stages at their loops, a reduction's init nest before its first reduce loop, and the versions that let full tiles
run without a split tail's guard (`_NestEmitter.tail_version`) or a padded window's selects (`_tile_version`).
`_guard_select_loads` clamps the loads of select branches that lowering's reads leave unguarded. LoweringError
(compiler.lower's, defined here where the nests raise it too) names a schedule that cannot be lowered.
"""
from __future__ import annotations

from relayish import te

from .arith import add_forms, affine_form, form_expr, interval, simplify
from .loopir import Allocate, For, IfThenElse, Load, Seq, Stmt, Store
from .schedule import Stage


class LoweringError(ValueError):
    """A schedule that lowering cannot turn into loops (the message says which stage and why; `stage` names it
    where one stage's buffer is the cause)."""

    def __init__(self, message: str, stage: str | None = None):
        super().__init__(message)
        self.stage = stage


MAX_TAIL_VERSIONS = 2  # split tails versioned per stage (each doubles the nest's code)


class _NestEmitter:
    """Builds one stage's loop nest: loops in order, guards where they become decidable, attached stages at
    their loops, and a reduction's init nest just before its first reduce loop.

    A split that does not divide leaves a guard on its innermost loop (`i0 * f + i1 < n`), which would keep that
    loop scalar everywhere. Where the loops outside can tell that a whole tile is in range, the nest is versioned
    instead (`tail_version`): the full tiles run a copy without the guard, only the tail runs the guarded one."""

    def __init__(self, lowering, loops, guards, unrolled, attach_plan, versions=MAX_TAIL_VERSIONS, whole=None,
                 tight=None):
        self.lowering, self.loops, self.guards = lowering, loops, guards
        self.unrolled, self.attach_plan, self.versions = unrolled, attach_plan, versions
        self.whole = whole or {}  # id(a split's guard) -> (its outer loop's variable, its whole tiles)
        self.tight = tight or {}  # variable -> its extent in this version (a dropped guard's whole tiles)
        self.own = {var for _, var, _ in loops if isinstance(var, te.Var)}
        # where each guard is placed: at the innermost of this nest's own loops it reads (the loops around the
        # nest are bound throughout it)
        self.placed = [(g, vs & self.own) for g, vs in guards if vs & self.own]

    def emit(self, update, init, version_whole: bool = True) -> Stmt:
        """The whole nest: versioned first by the guards that the loops around it decide (a producer's past-end
        guard at its consumer's tile), and under the guards that read none of its own loops."""
        version = self.tail_version(0, set(), None) if version_whole else None
        if version is not None:
            full_tiles, guards = version
            return IfThenElse(full_tiles, self.versioned(drop=guards).emit(update, init),
                              self.versioned().emit(update, init, version_whole=False))
        outside = [g for g, vs in self.guards if not vs & self.own]
        nest = self.nest(0, set(), update, init)
        return IfThenElse(te.all_of(*outside), nest) if outside else nest

    def versioned(self, drop=()) -> _NestEmitter:
        """This emitter with one version fewer left, and without the guards `drop` (for the full tiles)."""
        tight = dict(self.tight)
        for guard in drop:
            if id(guard[0]) in self.whole:
                var, tiles = self.whole[id(guard[0])]
                tight[var] = tiles
        return _NestEmitter(self.lowering, self.loops, [g for g in self.guards if not any(g is d for d in drop)],
                            self.unrolled, self.attach_plan, self.versions - 1, self.whole, tight)

    def tail_version(self, k: int, bound: set, newly: te.Var | None):
        """(condition, guards) to version the loops from k on by: each guard involves loops from k on and `newly`
        (loop k - 1's variable), its other variables are in `bound`, and `condition`, on those, says that all of
        them hold for every value of the loops from k on. None when no guard qualifies. newly=None (k = 0): the
        guards whose other variables are all loops around this nest (a producer's past-end guard at its tile)."""
        if self.versions <= 0:
            return None
        inner = {var: extent for _, var, extent in self.loops[k:] if isinstance(var, te.Var)}
        own = {var for _, var, _ in self.loops}
        conds, guards = [], []
        for guard in self.guards:
            cond, vs = guard
            outer = vs - inner.keys()
            if not vs & inner.keys() or not outer:
                continue
            if (newly not in outer or not outer & own <= bound) if newly is not None else (outer & own):
                continue
            holds = _holds_throughout(cond, inner)
            if holds is not None and holds is not True and holds is not False:
                conds.append(holds)
                guards.append(guard)
        return (te.all_of(*conds), guards) if guards else None

    def nest(self, k, bound, update, init) -> Stmt:
        loops = self.loops
        if init is not None and k < len(loops) and loops[k][0].kind == "reduce":
            spatial_inner = [l for l in loops[k:] if l[0].kind == "spatial"]
            allowed = bound | {l[1] for l in spatial_inner}
            init_guards = [(g, vs) for g, vs in self.placed if vs <= allowed]
            init_nest = _plain_nest(spatial_inner, init_guards, bound, init, self.unrolled)
            return Seq([init_nest, self.nest(k, bound, update, None)])
        if k == len(loops):
            return _resimplified(update, {**self.lowering.var_extent, **self.tight}) if self.tight else update
        it, var, extent = loops[k]
        inner_bound = bound | {var}
        version = self.tail_version(k + 1, inner_bound, var) if isinstance(var, te.Var) else None
        if version is not None:
            full_tiles, guards = version
            inner = IfThenElse(full_tiles, self.versioned(drop=guards).nest(k + 1, inner_bound, update, init),
                               self.versioned().nest(k + 1, inner_bound, update, init))
        else:
            inner = self.nest(k + 1, inner_bound, update, init)
        for prod, region, extents in reversed(self.attach_plan.get(it.name, [])):
            inner = Allocate(region.buffer, Seq([self.lowering.stage_nest(prod, region, extents), inner]))
        if not isinstance(var, te.Var):
            return inner
        inner = _wrap_guards(inner, self.placed, inner_bound, var)
        return For(var, te.IntImm(0), te.as_expr(extent), _loop_kind(it, self.unrolled, extent), inner)


def _resimplified(stmt, ranges: dict):
    """stmt (a Store) with its indices simplified again over `ranges`: in the whole tiles of a split that does not
    divide, the outer loop's range is the whole tiles' (the version's condition), so that an index such as
    (g * 17 + t * 8 + lane) // 17 of a group's unpadding is g there (an affine index: a transposing tile, a
    vector load). Anything but a Store is left as it is."""
    if not isinstance(stmt, Store):
        return stmt

    def load(node):
        return Load(node.buffer, simplify(node.index, ranges)) if isinstance(node, Load) else None
    return Store(stmt.buffer, simplify(stmt.index, ranges), te.substitute(stmt.value, load))


def _plain_nest(loops, guards, bound, stmt, unrolled) -> Stmt:
    if not loops:
        return stmt
    (it, var, extent), rest = loops[0], loops[1:]
    if not isinstance(var, te.Var):
        return _plain_nest(rest, guards, bound, stmt, unrolled)
    inner_bound = bound | {var}
    inner = _wrap_guards(_plain_nest(rest, guards, inner_bound, stmt, unrolled), guards, inner_bound, var)
    return For(var, te.IntImm(0), te.as_expr(extent), _loop_kind(it, unrolled, extent), inner)


def _affine_or_simplified(idx, ranges: dict):
    """idx itself when it has no division or remainder, else simplified over the loops' ranges."""
    if not any(isinstance(n, te.BinOp) and n.op in ("//", "%") for n in te.walk(idx)):
        return idx
    return simplify(idx, ranges)


def _dim_box(indices, varying: dict):
    """(base expr, extent) covering every index expression as the varying vars run; None if not affine."""
    items = []
    for idx in indices:
        form = affine_form(idx)
        lo = hi = 0
        for term, coef in form.items():
            if term == 1:
                continue
            if isinstance(term, te.Var) and term in varying:
                if not te.is_static(varying[term]):
                    return None
                span = coef * (varying[term] - 1)
                lo, hi = lo + min(0, span), hi + max(0, span)
            elif any(isinstance(v, te.Var) and v in varying for v in te.walk(term)):
                return None
        fixed = {t: c for t, c in form.items() if not (isinstance(t, te.Var) and t in varying)}
        items.append((fixed, lo, hi))
    base_form, _, _ = items[0]
    lo_all, hi_all = None, None
    for fixed, lo, hi in items:
        diff = add_forms(fixed, base_form, -1)
        if any(t != 1 for t in diff):
            return None
        off = diff.get(1, 0)
        lo_all = off + lo if lo_all is None else min(lo_all, off + lo)
        hi_all = off + hi if hi_all is None else max(hi_all, off + hi)
    return form_expr(base_form) + lo_all, hi_all - lo_all + 1


def _combine(combiner, acc, value):
    if combiner == "sum":
        return acc + value
    if combiner == "prod":
        return acc * value
    if combiner == "max":
        return te.max_(acc, value)
    return te.min_(acc, value)


def _loop_kind(it, unrolled, extent=None) -> str:
    if it.annotation == "none":
        return "unroll" if it.name in unrolled else "serial"
    if it.annotation in ("vectorize", "unroll") and not te.is_static(extent):
        raise LoweringError(f"loop {it.name!r} is annotated {it.annotation} but its extent {te.expr_str(extent)} "
                            "is known only at run time")
    return it.annotation


def _auto_unroll_set(st: Stage, ext) -> set:
    """Names of the innermost loops to unroll under the stage's auto_unroll_max_step pragma."""
    if not st.auto_unroll:
        return set()
    out, prod = set(), 1
    for it in reversed(st.leaves):
        if it.annotation == "vectorize":
            continue
        if not te.is_static(ext[it.name]):
            break
        prod *= ext[it.name]
        if prod > st.auto_unroll or it.annotation != "none":
            break
        out.add(it.name)
    return out


def _vars_of(e) -> set:
    return {n for n in te.walk(e) if isinstance(n, te.Var)}


def _wrap_guards(stmt, guards, bound, newly) -> Stmt:
    """Wrap stmt in the guards that become decidable at this level (all their vars bound, `newly` just now)."""
    conds = [g for g, vs in guards if vs <= bound and newly in vs]
    if not conds:
        return stmt
    return IfThenElse(te.all_of(*conds), stmt)


def _guard_select_loads(expr, var_extent):
    """Loads in a branch of a Select may be out of bounds when that branch is not taken (padding): clamp those
    whose index is not provably inside the buffer (codegen evaluates both branches). One pass over the tree."""
    def clamped(load):
        rng, size = interval(load.index, var_extent), load.buffer.size
        if rng is not None and all(isinstance(v, int) for v in (*rng, size)) and rng[0] >= 0 and rng[1] < size:
            return load
        return Load(load.buffer, te.max_(te.IntImm(0), te.min_(load.index, load.buffer.size - 1)))

    memo: dict = {}  # (id, in_branch) -> (node, result): a subtree shared by many selects is visited once

    def visit(e, in_branch: bool):
        hit = memo.get((id(e), in_branch))
        if hit is not None:
            return hit[1]
        if isinstance(e, Load):
            out = clamped(e) if in_branch else e
        elif isinstance(e, te.Select):
            out = te.select(visit(e.cond, in_branch), visit(e.true_value, True), visit(e.false_value, True))
        else:
            out = te.substitute(e, lambda m: visit(m, in_branch) if isinstance(m, (Load, te.Select)) else None)
        memo[(id(e), in_branch)] = (e, out)
        return out
    try:
        return visit(expr, False)
    finally:
        del visit  # visit's closure holds visit: a reference cycle (with the memo) left to the cyclic GC otherwise


def _tile_version(expr, inner: dict) -> tuple | None:
    """(interior, expr'): `interior` is a condition on the variables outside `inner` (the loops of a tile: var ->
    extent) under which some Select conditions of expr hold for every value of the inner variables, and expr' is
    expr with those selects replaced by their true values. None when no such condition involves an outer
    variable (nothing to version: a condition of the inner variables alone is left to the selects)."""
    decided, interior = {}, []
    for node in te.walk(expr):
        if isinstance(node, te.Select) and node.cond not in decided:
            holds = _holds_throughout(node.cond, inner)
            decided[node.cond] = holds
            if holds is not None and holds is not True and holds is not False:
                interior.append(holds)
    if not interior:
        return None
    true = {c for c, h in decided.items() if h is not None and h is not False}

    def strip(e):
        if isinstance(e, te.Select):
            body = e.true_value if e.cond in true else None
            return te.substitute(body, strip) if body is not None else None
        return None
    return te.all_of(*dict.fromkeys(interior)), te.substitute(expr, strip)


def _holds_throughout(cond, inner: dict):
    """When does `cond` hold for every value of the inner variables? True, False (never for all), a condition on
    the other variables, or None (not decidable here: not a conjunction of integer comparisons affine in the inner
    variables, or one that reads memory)."""
    if isinstance(cond, te.Logic) and cond.op == "and":
        parts = [_holds_throughout(a, inner) for a in cond.args]
        if any(p is None for p in parts):
            return None
        if any(p is False for p in parts):
            return False
        rest = [p for p in parts if p is not True]
        return te.all_of(*rest) if rest else True
    if not (isinstance(cond, te.Cmp) and cond.op in ("<", "<=") and cond.a.dtype == "int32"):
        return None
    form = add_forms(affine_form(cond.a), affine_form(cond.b), -1)  # cond: a - b < 0 (or <= 0)
    outer, most = {}, 0
    for term, c in form.items():
        if term != 1 and any(isinstance(n, Load) for n in te.walk(term)):
            return None  # a value read from memory (a scatter's index): its loop variables are hidden in the Load
        if term in inner:
            if not te.is_static(inner[term]):
                return None  # a loop whose extent is known at run time
            most += max(0, c * (inner[term] - 1))  # the inner variables at their worst for the condition
        elif term == 1 or not (_vars_of(term) & inner.keys()):
            outer[term] = c
        else:
            return None
    worst = add_forms(outer, {1: most})
    if set(worst) <= {1}:
        value = worst.get(1, 0)
        return value < 0 if cond.op == "<" else value <= 0
    return te.Cmp(cond.op, form_expr(worst), te.IntImm(0))

"""Lowering: a scheduled State -> a loop IR PrimFunc.

Every root stage becomes a loop nest over its leaf iterators in order. A stage computed at another is emitted at
its attach point over the region its consumer needs there (bound inference below), into a local buffer. Inlined
stages are substituted into their readers. A reduction becomes an init nest (placed just before its first reduce
loop, over the spatial loops inside it) and an update store in the innermost loop. Splits that do not divide get
a guard at the innermost loop whose variable they use.

A stage computed at another whose body selects on conditions of its indices (padding read inline: a depthwise
window, a pool) is versioned at its attach point (`_tile_version`): when the outer loops' values make every such
condition true for the whole tile, a copy of its nest without those selects (and without the clamps that keep
their loads in bounds) runs; the border tiles run the nest with them.

Kernel parameters: the task's inputs, then its outputs, then scratch buffers for intermediate stages at root
(the graph executor places those in the workspace). `func.attrs` says how many of each.
"""
from __future__ import annotations

from dataclasses import dataclass

from relayish import te

from .arith import add_forms, affine_form, form_expr, interval, simplify
from .loopir import Allocate, Buffer, For, IfThenElse, Load, LetStmt, PrimFunc, Seq, Stmt, Store
from .schedule import SplitRel, Stage, State


class LoweringError(ValueError):
    """A schedule that lowering cannot turn into loops (the message says which stage and why; `stage` names it
    where one stage's buffer is the cause)."""

    def __init__(self, message: str, stage: str | None = None):
        super().__init__(message)
        self.stage = stage


def lower(state: State, name: str = "kernel") -> PrimFunc:
    ctx = _Lowering(state)
    body = Seq([ctx.stage_nest(st, None) for st in state.stages if st.loc.is_root])
    return prim_func(name, ctx.input_bufs, ctx.output_bufs, ctx.scratch_bufs, body)


def prim_func(name: str, inputs: list, outputs: list, scratch: list, body) -> PrimFunc:
    """A kernel of these buffers (its parameters, in that order) and body; the dims known only at run time are read
    from one more parameter, `sizes`."""
    params = inputs + outputs + scratch
    attrs = {"num_inputs": len(inputs), "num_outputs": len(outputs), "num_scratch": len(scratch)}
    sizes = size_vars(params)
    if sizes:  # dims known at run time: read from one more parameter, an int32 array, before anything else
        sizes_buf = Buffer("sizes", (len(sizes),), "int32")
        for k, var in reversed(list(enumerate(sizes))):
            body = LetStmt(var, Load(sizes_buf, te.IntImm(k)), body)
        params = params + [sizes_buf]
        attrs["size_vars"] = tuple(v.name for v in sizes)
    return PrimFunc(name, params, body, attrs=attrs)


def size_vars(buffers) -> list:
    """The size variables in the buffers' shapes, in first-seen order: what a kernel reads from its `sizes`
    parameter (sizes[k] is the value of the k-th)."""
    out, seen = [], set()
    for buf in buffers:
        for d in buf.shape:
            if te.is_static(d):
                continue
            for v in te.walk(d):
                if isinstance(v, te.Var) and v.uid not in seen:
                    seen.add(v.uid)
                    out.append(v)
    return out


@dataclass
class _Region:
    buffer: Buffer
    bases: list  # one PrimExpr per spatial axis: the region's first index
    past_end: tuple = ()  # (axis, size): axes whose box may run past the tensor's end; the producer guards them


class _Lowering:
    def __init__(self, state: State):
        self.state = state
        self.global_bufs: dict[int, Buffer] = {}  # id(tensor) -> buffer
        self.input_bufs = []
        for t in state.inputs:
            buf = Buffer(_ident(t.name), t.shape, t.dtype)
            self.global_bufs[id(t)] = buf
            self.input_bufs.append(buf)
        self.output_bufs, self.scratch_bufs = [], []
        for t in state.outputs:
            st = state.stage_of(t)
            buf = Buffer(_ident(st.name), t.shape, t.dtype)
            self.global_bufs[id(st.tensor)] = buf
            self.output_bufs.append(buf)
        for st in state.stages:
            if st.loc.is_root and id(st.tensor) not in self.global_bufs:
                buf = Buffer(_ident(st.name), st.op.shape, st.op.dtype)
                self.global_bufs[id(st.tensor)] = buf
                self.scratch_bufs.append(buf)
        self.regions: dict[str, _Region] = {}  # stage name -> its region while lowering inside its attach point
        self.var_extent: dict[te.Var, int] = {}  # every loop variable made so far -> its extent

    # ------------------------------------------------------------------------------------------ reads

    def expand_inline(self, expr: te.PrimExpr) -> te.PrimExpr:
        """Replace reads of inlined stages by their bodies, recursively."""
        def fn(node):
            if isinstance(node, te.TensorRead):
                st = self.state.stage_of(node.tensor)
                if st is not None and st.loc.is_inline:
                    idx = [self.expand_inline(i) for i in node.indices]
                    body = self.expand_inline(te.substitute_vars(st.op.body, dict(zip((ax.var for ax in st.op.axes),
                                                                                      idx))))
                    if st.op.dtype in ("float16", "bfloat16"):  # rounded as if stored: inlining changes no result
                        body = te.Cast(st.op.dtype, te.Cast("float32", body))
                    return body
            return None
        return te.substitute(expr, fn)

    def resolve(self, expr: te.PrimExpr, memo: dict | None = None, guard: bool = True) -> te.PrimExpr:
        """Turn every TensorRead (after inlining) into a Load of the buffer that holds the tensor. memo: the
        reads already resolved in this expression (a Winograd transform reads each element in many branches).
        guard: clamp the loads in select branches (_guard_select_loads); off, the caller does it."""
        memo = {} if memo is None else memo

        def fn(node):
            if isinstance(node, te.TensorRead):
                key = (id(node.tensor), node.indices)
                if key not in memo:
                    memo[key] = read(node)
                return memo[key]
            return None

        def read(node):
            idx = [self.resolve(i, memo) for i in node.indices]
            t = node.tensor
            if id(t) in self.global_bufs:
                buf = self.global_bufs[id(t)]
                return Load(buf, buf.flat_index(idx))
            st = self.state.stage_of(t)
            region = self.regions.get(st.name) if st is not None else None
            if region is None:
                raise AssertionError(f"read of {t.name} outside the scope where it is computed")
            rel = [i - b for i, b in zip(idx, region.bases)]
            return Load(region.buffer, region.buffer.flat_index(rel))

        simplified = {}

        def simplify_index(node):
            if isinstance(node, Load):
                key = (id(node.buffer), node.index)
                if key not in simplified:
                    simplified[key] = Load(node.buffer, simplify(node.index, self.var_extent))
                return simplified[key]
            if isinstance(node, te.Cmp) and node.a.dtype == "int32":  # (a Winograd tile position: y % m == k)
                return te.Cmp(node.op, simplify(node.a, self.var_extent), simplify(node.b, self.var_extent))
            return None
        loaded = te.substitute(te.substitute(self.expand_inline(expr), fn), simplify_index)
        return _guard_select_loads(loaded, self.var_extent) if guard else loaded

    # ------------------------------------------------------------------------------------------ nests

    def stage_nest(self, st: Stage, region: _Region | None, region_extents=None) -> Stmt:
        """The loop nest of stage st; region given when it is computed at another stage."""
        root_ext = st.root_extents()
        if region_extents is not None:
            for it, e in zip(st.roots, region_extents):
                root_ext[it.name] = e
        ext = st.leaf_extents(root_ext)
        # a loop of one iteration is no loop: its variable is the constant 0
        leaf_var = {it.name: te.Var(f"{_ident(st.name)}_{_ident(it.name)}") if ext[it.name] != 1 or
                    it.annotation == "parallel" else te.IntImm(0) for it in st.leaves}
        self.var_extent.update({v: ext[n] for n, v in leaf_var.items() if isinstance(v, te.Var)})
        val = {n: v for n, v in leaf_var.items()}
        guards, whole = [], {}  # whole: id(a split's guard) -> (its outer loop's variable, whole tiles)
        for rel in reversed(st.relations):
            if isinstance(rel, SplitRel):
                val[rel.parent] = val[rel.outer] * rel.factor + val[rel.inner]
                if not te.is_static(ext[rel.parent]) or ext[rel.parent] % rel.factor:
                    guards.append(val[rel.parent] < ext[rel.parent])
                    if isinstance(val[rel.outer], te.Var):  # where the guard holds throughout: whole tiles only
                        whole[id(guards[-1])] = (val[rel.outer], ext[rel.parent] // rel.factor)
            else:
                val[rel.outer] = val[rel.fused] // ext[rel.inner]
                val[rel.inner] = val[rel.fused] % ext[rel.inner]
        axes = st.root_axes
        n_sp = len(st.op.axes)
        rel_vals = [val[it.name] for it in st.roots[:n_sp]]  # region-relative spatial indices
        if region is not None:
            abs_vals = [b + r for b, r in zip(region.bases, rel_vals)]
            buf, store_idx = region.buffer, rel_vals
            guards += [abs_vals[d] < size for d, size in region.past_end]  # its elements past the end: not computed
        else:
            abs_vals = rel_vals
            buf, store_idx = self.global_bufs[id(st.tensor)], rel_vals
        mapping = {ax.var: v for ax, v in zip(axes[:n_sp], abs_vals)}
        mapping.update({ax.var: val[it.name] for ax, it in zip(axes[n_sp:], st.roots[n_sp:])})
        body = st.op.body
        raw = body.body if isinstance(body, te.Reduce) else body
        body_now = te.substitute_vars(raw, mapping)  # in terms of this nest's loop variables
        attach_plan = self._plan_attached(st, body_now, leaf_var, ext)
        flat = simplify(buf.flat_index(store_idx), self.var_extent)
        unguarded = self.resolve(body_now, guard=False)

        def updated(value):
            value = _guard_select_loads(value, self.var_extent)
            if isinstance(body, te.Reduce) and body.axes:
                return Store(buf, flat, _combine(body.combiner, Load(buf, flat), value))
            return Store(buf, flat, value)  # (a reduction over no axes is its body: nothing to accumulate)
        init = Store(buf, flat, te.reduce_identity(body.combiner, body.dtype)) \
            if isinstance(body, te.Reduce) and body.axes else None
        loops = [(it, leaf_var[it.name], ext[it.name]) for it in st.leaves]
        emit = _NestEmitter(self, loops, [(g, _vars_of(g)) for g in guards], _auto_unroll_set(st, ext), attach_plan,
                            whole=whole)
        nest = emit.emit(updated(unguarded), init)
        inner = {v: ext[n] for n, v in leaf_var.items() if isinstance(v, te.Var)}
        version = _tile_version(unguarded, inner) if region is not None else None
        if version is None:
            return nest
        interior, without_selects = version
        return IfThenElse(interior, emit.emit(updated(without_selects), init), nest)

    def _plan_attached(self, st: Stage, body_now, leaf_var, ext) -> dict:
        """For each loop of st that has stages computed at it: [(stage, region, extents)], regions registered."""
        plan = {}
        for k, it in enumerate(st.leaves):
            attached = self.state.attached_at(st, it.name)
            if not attached:
                continue
            varying = {leaf_var[i.name]: ext[i.name] for i in st.leaves[k + 1:] if isinstance(leaf_var[i.name], te.Var)}
            entries = {}  # stage name -> (stage, region, extents)
            for prod in reversed(attached):  # consumers first: a stage attached here may read another one
                bodies, inner = [body_now], dict(varying)
                for consumer, region, extents in entries.values():
                    bodies.append(self._body_over_region(consumer, region, extents, inner))
                bases, extents, past_end = self._infer_region(prod, bodies, inner)
                buf = Buffer(_ident(prod.name) + "_local", tuple(extents), prod.op.dtype, "local")
                region = _Region(buf, bases, past_end)
                self.regions[prod.name] = region
                entries[prod.name] = (prod, region, extents)
            plan[it.name] = [entries[prod.name] for prod in attached]
        return plan

    def _body_over_region(self, st: Stage, region: _Region, extents, varying: dict) -> te.PrimExpr:
        """st's body (attached, over its region) in fresh variables, added to `varying` with their extents: the
        reads a stage computed at the same loop makes of the stages computed before it there."""
        mapping = {}
        for ax, base, extent in zip(st.op.axes, region.bases, extents):
            var = te.Var(f"{ax.var.name}_region")
            varying[var] = extent
            mapping[ax.var] = base + var
        for ax in st.op.reduce_axes:
            var = te.Var(f"{ax.var.name}_region")
            varying[var] = ax.extent
            mapping[ax.var] = var
        body = st.op.body
        return te.substitute_vars(body.body if isinstance(body, te.Reduce) else body, mapping)

    # ------------------------------------------------------------------------------------------ bounds

    def _infer_region(self, prod: Stage, consumer_bodies: list, varying: dict) -> tuple[list, list, tuple]:
        """The box of prod's indices that the consumers read while the loops in `varying` run (others fixed):
        (bases, extents, past_end), past_end naming the axes (with their sizes) whose box may run past the end of
        prod's tensor, every element there guarded in prod's nest (see below)."""
        reads = [r for body in consumer_bodies for r in te.walk(self.expand_inline(body))
                 if isinstance(r, te.TensorRead) and r.tensor is prod.tensor]
        full = list(prod.op.shape)
        bases, extents, past_end = [], [], []
        ranges = {**self.var_extent, **varying}  # a tile's pixel (y // m, y % m) is affine in the loops once
        # simplified: (4 * k0 + k1) // 4 is k0 for k1 < 4
        for d, full_d in enumerate(full):
            box = _dim_box([_affine_or_simplified(r.indices[d], ranges) for r in reads], varying)
            if not te.is_static(full_d):  # a dim known at run time: a tile of constant extent, guarded past the end
                if box is None or not te.is_static(box[1]):
                    raise LoweringError(f"stage {prod.name!r} is computed at another stage over its dim {d}, whose "
                                        f"size {te.expr_str(full_d)} is known only at run time, and the region "
                                        "read there has no constant extent: its local buffer would have no size",
                                        stage=prod.name)
                bases.append(box[0])
                extents.append(box[1])
                past_end.append((d, full_d))
                continue
            if box is None:
                bases.append(te.IntImm(0))
                extents.append(full_d)
                continue
            base, extent = box
            rng = interval(base, self.var_extent)
            runs_past = rng is not None and rng[0] >= 0 and rng[1] + extent > full_d
            if runs_past and d == len(full) - 1 and extent % 4 == 0 and \
                    not self._reads_in_bounds_past_end(prod, d, base, extent):
                past_end.append((d, full_d))  # the contiguous axis of a partial last tile: see below
            else:
                extent = min(extent, full_d)
                if extent == full_d:
                    base = te.IntImm(0)
                elif rng is None or rng[0] < 0 or rng[1] + extent > full_d:  # keep the box inside the tensor ...
                    if rng is None or rng[0] < 0 or not self._reads_in_bounds_past_end(prod, d, base, extent):
                        base = te.max_(te.IntImm(0), te.min_(base, full_d - extent))
            bases.append(base)
            extents.append(extent)
        return bases, extents, tuple(past_end)

    # A tile's box that runs past the end of its producer's tensor on the contiguous axis (N = 19 columns in a tile
    # of 2 vectors) keeps its whole extent and its unclamped base, and the producer guards the elements past the
    # end instead: clamping the base would make every tile's loads non-affine (gathers), and shrinking the extent
    # to the tensor's would leave the local buffer's rows misaligned (19 floats apart) so that its accumulators
    # cannot live in registers. The guard is versioned (full tiles skip it) and runs masked in vector loops.

    def _reads_in_bounds_past_end(self, prod: Stage, d: int, base, extent: int) -> bool:
        """... unless computing prod over [base, base + extent) on dim d, past the end of its tensor, reads only
        inside what it reads (a packed weight padded to whole tiles): its region is a local buffer, so the extra
        elements are harmless, and an unclamped base keeps the tile's loads affine (contiguous vectors) where a
        clamped one makes every tile's index a min/max."""
        body = self.expand_inline(prod.op.body)
        ranges = dict(self.var_extent)
        mapping = {}
        for i, ax in enumerate(prod.op.axes):
            v = te.Var(f"_box{i}")
            mapping[ax.var] = base + v if i == d else v
            ranges[v] = extent if i == d else prod.op.shape[i]
        if isinstance(body, te.Reduce):
            ranges.update((ax.var, ax.extent) for ax in body.axes)
        for read in te.walk(te.substitute_vars(body, mapping)):
            if isinstance(read, te.TensorRead):
                for index, size in zip(read.indices, read.tensor.shape):
                    rng = interval(index, ranges)
                    if rng is None or rng[0] < 0 or rng[1] >= size:
                        return False
        return True


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
        memo.clear()  # visit's closure is a reference cycle: without this, the memo waits for the cyclic GC


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


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)

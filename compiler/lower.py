"""Lowering: a scheduled State -> a loop IR PrimFunc.

Every root stage becomes a loop nest over its leaf iterators in order. A stage computed at another is emitted at
its attach point over the region its consumer needs there (bound inference below), into a local buffer. Inlined
stages are substituted into their readers. A reduction becomes an init nest (placed just before its first reduce
loop, over the spatial loops inside it) and an update store in the innermost loop. Splits that do not divide get
a guard at the innermost loop whose variable they use.

A stage computed at another whose body selects on conditions of its indices (padding read inline: a depthwise
window, a pool) is versioned at its attach point (`_tile_version`, compiler/loop_nest.py, which builds each nest):
when the outer loops' values make every such condition true for the whole tile, a copy of its nest without those
selects (and without the clamps that keep their loads in bounds) runs; the border tiles run the nest with them.

Kernel parameters: the task's inputs, then its outputs, then scratch buffers for intermediate stages at root
(the graph executor places those in the workspace). `func.attrs` says how many of each.
"""
from __future__ import annotations

from dataclasses import dataclass

from relayish import te

from .arith import interval, simplify
from .loop_nest import (LoweringError, _NestEmitter, _affine_or_simplified, _auto_unroll_set, _combine,
                        _dim_box, _guard_select_loads, _tile_version, _vars_of)
from .loopir import Buffer, IfThenElse, Load, LetStmt, PrimFunc, Seq, Stmt, Store
from .schedule import SplitRel, Stage, State


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


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)

"""Sketch generation (Ansor section 4.1): derivation rules applied over a task's stage DAG, outputs to inputs.

A sketch is the high-level structure of a program: which stages are inlined, which are tiled and how their
consumers are fused, which get a cache stage or an rfactor. It is a list of schedule steps whose Split lengths
are still symbols: "T<k>.<level>" names the level-th factor of tile variable k (a product "a*b" of such names is
allowed). Random annotation (tuning/annotate.py) picks the factors, the parallel granularity, the vectorized and
unrolled loops and the compute locations of the remaining stages, giving a concrete `Schedule`.

Each rule is a small unit with `condition(sketch, stage) -> Cond` and `apply(sketch, stage) -> [Sketch]`.
Users can add rules: `generate_sketches(task, rules=DEFAULT_RULES + [MyRule()])`.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from compiler.schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, Fuse, Reorder, Rfactor, Split, Stage,
                               State, Step, divisors)
from compiler.codegen import vector_width
from compiler.default_schedule import broadcast_reuse_axis, contiguous_last, fused_rows_steps, winograd_chunk_steps
from compiler.default_schedule import window_outside as window_outside_step
from compiler.matmul_schedule import matmul_operands
from compiler.task import Task
from relayish.ops.rows import ROW_TAG

from .stage_analysis import (fusible_consumer, has_data_reuse, reduce_size, spatial_parallelism,
                             strictly_inlinable)


class Cond(enum.Enum):
    """What a rule's condition says about a stage."""
    SKIP = 0  # the rule does not apply: go on to the next rule
    APPLY_AND_CONTINUE = 1  # apply, and offer the stage to the next rules too (alternative sketches)
    APPLY_AND_SKIP_REST = 2  # apply, and move to the previous stage


@dataclass(frozen=True)
class TileVar:
    """The split of one iterator into `levels` nested loops whose extents multiply to `extent`. tail: the inner
    factor may also be a small number that does not divide the extent (the loop nest then has a partial last
    tile, as the hand-written register tiles have: 4 columns of a 7-wide row)."""
    stage: str
    iter: str
    extent: int
    levels: int
    tail: bool = False


@dataclass(frozen=True)
class Movable:
    """A stage whose compute location annotation chooses: root, inline, or one of `at_iters` of `target`."""
    stage: str
    target: str
    at_iters: tuple
    can_inline: bool = True


@dataclass(frozen=True)
class Tiled:
    """A multi-level tiled stage and, if fused, the consumer computed around it.

    root_stage: the stage at root whose outer loops become parallel; outer_iters: its iterators that may be fused
    into the parallel loop (outer to inner); vector_iters: (stage, iter) candidates to vectorize."""
    anchor: str
    root_stage: str
    outer_iters: tuple
    vector_iters: tuple
    unroll_stages: tuple


@dataclass
class Sketch:
    steps: list = field(default_factory=list)
    tiles: list = field(default_factory=list)
    tiled: list = field(default_factory=list)
    movable: list = field(default_factory=list)
    simple_roots: list = field(default_factory=list)  # root stages annotated with parallel/vectorize only
    rules: list = field(default_factory=list)  # names of the rules applied, for printing
    state: State = None  # the state after `steps` with every tile factor 1 (structure only)

    def copy(self) -> "Sketch":
        return Sketch(list(self.steps), list(self.tiles), list(self.tiled), list(self.movable),
                      list(self.simple_roots), list(self.rules), self.state.copy())

    def add(self, step: Step):
        apply_template(step, self.state)
        self.steps.append(step)

    def new_tile(self, stage: str, iter: str, extent: int, levels: int, tail: bool = False) -> int:
        self.tiles.append(TileVar(stage, iter, extent, levels, tail))
        return len(self.tiles) - 1

    def __str__(self):
        return f"Sketch({' + '.join(self.rules) or 'plain'}: {len(self.steps)} steps, {len(self.tiles)} tiles)"


def apply_template(step: Step, state: State):
    """Apply a step whose Split lengths may be symbols, with every symbol taken as 1 (the structure is the same)."""
    if isinstance(step, Split) and any(isinstance(l, str) for l in step.lengths):
        step = dataclasses.replace(step, lengths=tuple(1 if isinstance(l, str) else l for l in step.lengths))
    step.apply(state)


# ---------------------------------------------------------------------------------------------- rules

class SketchRule:
    name = "rule"

    def condition(self, sketch: Sketch, st: Stage) -> Cond:
        raise NotImplementedError

    def apply(self, sketch: Sketch, st: Stage) -> list[Sketch]:
        raise NotImplementedError


class SkipStage(SketchRule):
    """Stages that need no decision (already inlined or attached): leave them."""
    name = "skip"

    def condition(self, sketch, st):
        return Cond.APPLY_AND_SKIP_REST if not st.loc.is_root else Cond.SKIP

    def apply(self, sketch, st):
        return [sketch]


class AlwaysInline(SketchRule):
    """A strictly inlinable stage is always inlined."""
    name = "inline"

    def condition(self, sketch, st):
        return Cond.APPLY_AND_SKIP_REST if strictly_inlinable(sketch.state, st) else Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        s.add(ComputeInline(st.name))
        return [s]


class AddRfactor(SketchRule):
    """Little spatial parallelism but a long reduction: factor the reduction so that its inner part becomes a
    spatial (parallel, vectorizable) axis. Both the rfactor'd and the plain sketch are kept."""
    name = "rfactor"

    def __init__(self, min_parallel: int = 16, min_reduce: int = 256):
        self.min_parallel, self.min_reduce = min_parallel, min_reduce

    def condition(self, sketch, st):
        if st.is_reduction and not st.relations and spatial_parallelism(st) < self.min_parallel and \
                reduce_size(st) >= self.min_reduce and len(st.op.reduce_axes) >= 1:
            return Cond.APPLY_AND_CONTINUE
        return Cond.SKIP

    def apply(self, sketch, st):
        red = [i for i in st.roots if i.kind == "reduce"]
        longest = max(red, key=lambda it: sketch.state.stage(st.name).root_extents()[it.name])
        extent = st.root_extents()[longest.name]
        factor = next((f for f in (16, 8, 4, 2) if extent % f == 0 and extent // f >= 1), None)
        if factor is None:
            return []
        s = sketch.copy()
        s.add(Rfactor(st.name, longest.name, factor))
        s.rules.append(f"rfactor({st.name})")
        rf = s.state.stage(f"{st.name}.rf")
        # the partial sums run in parallel over their outer reduce part; the final sum is small
        s.simple_roots.append(rf.name)
        s.simple_roots.append(st.name)
        return [s]


class MultiLevelTilingWithFusion(SketchRule):
    """Tile a stage with data reuse "SSRSRS" and compute it at the second spatial level of its elementwise
    consumer: the tile is kept in a small local buffer (registers) and the consumer writes it out."""
    name = "tile+fuse"

    def condition(self, sketch, st):
        if has_data_reuse(st) and not st.relations and fusible_consumer(sketch.state, st) is not None:
            return Cond.APPLY_AND_SKIP_REST
        return Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        consumer = fusible_consumer(s.state, st)
        _tile_and_fuse(s, st.name, consumer.name)
        s.rules.append(f"tile+fuse({st.name}->{consumer.name})")
        return [s]


class AddCacheStage(SketchRule):
    """A stage with data reuse and no fusible consumer gets a cache_write stage to fuse into."""
    name = "cache"

    def condition(self, sketch, st):
        if has_data_reuse(st) and not st.relations and st.loc.is_root and \
                fusible_consumer(sketch.state, st) is None and not st.name.endswith(".local"):
            return Cond.APPLY_AND_CONTINUE
        return Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        s.add(CacheWrite(st.name))
        s.rules.append(f"cache({st.name})")
        local = s.state.stage(f"{st.name}.local")
        _tile_and_fuse(s, local.name, st.name)
        s.rules.append(f"tile+fuse({local.name}->{st.name})")
        return [s]


class MultiLevelTiling(SketchRule):
    """Plain "SSRSRS" tiling of a stage with data reuse, without fusion."""
    name = "tile"

    def condition(self, sketch, st):
        return Cond.APPLY_AND_SKIP_REST if has_data_reuse(st) and not st.relations else Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        sp = [i.name for i in st.leaves if i.kind == "spatial"]
        red = [i.name for i in st.leaves if i.kind == "reduce"]
        ext = st.leaf_extents()
        levels_s = {n: _split(s, st.name, n, ext[n], 4) for n in sp}
        levels_r = {n: _split(s, st.name, n, ext[n], 2) for n in red}
        order = [levels_s[n][0] for n in sp] + [levels_s[n][1] for n in sp] + [levels_r[n][0] for n in red] + \
                [levels_s[n][2] for n in sp] + [levels_r[n][1] for n in red] + [levels_s[n][3] for n in sp]
        s.add(Reorder(st.name, tuple(order)))
        s.tiled.append(Tiled(st.name, st.name, tuple(order[:2 * len(sp)]), ((st.name, order[-1]),), (st.name,)))
        s.rules.append(f"tile({st.name})")
        return [s]


class SimpleRoot(SketchRule):
    """Any other stage at root: annotation parallelizes and vectorizes it."""
    name = "root"

    def condition(self, sketch, st):
        return Cond.APPLY_AND_SKIP_REST if st.loc.is_root else Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        if st.op.tag == "pad" and any(has_data_reuse(c) for c in s.state.effective_consumers(st)):
            tgt = s.state.effective_consumers(st)[0]
            iters = tuple(i.name for i in s.state.stage(tgt.name).leaves[:-1])
            s.movable.append(Movable(st.name, tgt.name, iters))
        s.simple_roots.append(st.name)
        return [s]


class RegisterTile(SketchRule):
    """The hand-written schedules' structure (compiler/default_schedule.py, rule 2) as sketches, so that the search
    space contains every default program. The task's last reduction (the anchor) is computed at the outer loops
    of its output stage (of a cache_write copy of itself when it is the output or is not read elementwise by
    the output), fused into one parallel loop; inside, a register tile: [blocks of the axis a broadcast operand
    does not index] x [columns, unrolled] x [vector lanes], with the anchor's reductions outside its tile.
    Variants: the lane axis split (lanes x columns are two levels of one tile variable) or whole; the innermost
    reduction split (its inner part unrolled) or not; and the plain form (anchor at the output's second-innermost
    loop, no tile). An anchor the default leaves to the root rule (no output stage to tile) is a simple root.
    Every variant is offered besides the other tiling rules'."""
    name = "register-tile"

    def condition(self, sketch, st):
        last = next((s for s in reversed(sketch.state.stages) if s.is_reduction), None)
        return Cond.APPLY_AND_CONTINUE if st is last and st.loc.is_root and not st.relations else Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        if not st.op.axes:  # a reduction to one value: no tile, the root rule's (as the default's)
            s.simple_roots.append(st.name)
            s.rules.append(f"root({st.name})")
            return [s]
        anchor, out = st.name, output_consumer(s.state, st)
        if st.is_output or ((out is None or out.op.shape != st.op.shape) and len(st.op.axes) >= 2):
            s.add(CacheWrite(st.name))
            s.rules.append(f"cache({st.name})")
            anchor, out = f"{st.name}.local", s.state.stage(st.name)
        if out is None or len(out.op.axes) != len(st.op.axes) or out.op.shape != st.op.shape:
            s.simple_roots.append(st.name)  # as the default does: the root rule schedules it
            s.rules.append(f"root({st.name})")
            return [s]
        if out.name in s.simple_roots:
            s.simple_roots.remove(out.name)
        out = out.name
        variants = [_plain_at(s.copy(), anchor, out), _plain_at(s.copy(), anchor, out, window_outside=True)]
        extent = s.state.stage(out).op.shape[-1]
        a_st = s.state.stage(anchor)
        red = [i.name for i in a_st.leaves if i.kind == "reduce"]
        for split_lane in _lane_variants(a_st, extent):
            for split_reduce in (False, True) if red and a_st.root_extents()[red[-1]] >= 4 else (False,):
                variants.append(_register_tile(s.copy(), anchor, out, split_lane, split_reduce))
        return [v for v in variants if v is not None]


class RowStages(SketchRule):
    """A task made only of row stages (relayish/ops/rows.py: softmax, layer norm as per-lane partial reductions,
    the default's `schedule_rows`): an elementwise stage read once is inlined, every other stage (the reductions,
    the output, an elementwise stage read twice such as softmax's exp) stays a simple root: outer spatial axes
    fused and parallel, the innermost (a partial reduction's lanes, inside its reduction loop) vectorized. Where
    the default runs the task row by row (compiler/row_schedule.py), that schedule is a second, whole sketch."""
    name = "rows"

    def condition(self, sketch, st):
        rows = all(s.op.tag == ROW_TAG for s in sketch.state.stages)
        return Cond.APPLY_AND_SKIP_REST if rows else Cond.SKIP

    def apply(self, sketch, st):
        if not st.loc.is_root:  # inlined or computed at the row by the row-by-row sketch
            return [sketch]
        s = sketch.copy()
        if not st.is_output and not st.is_reduction and len(s.state.consumers(st)) == 1:
            s.add(ComputeInline(st.name))
        else:
            s.simple_roots.append(st.name)
            s.rules.append(f"row({st.name})")
        fused = fused_rows_steps(sketch.state, vector_width()) if st.is_output else None
        if fused is None:
            return [s]
        whole = sketch.copy()
        for step in fused:
            whole.add(step)
        whole.rules.append("row_by_row")
        return [s, whole]


class WinogradChunks(SketchRule):
    """A Winograd task's default schedule (compiler/winograd_schedule.py: chunks of tiles, every stage computed at
    the chunk) as one whole sketch, offered at the output stage besides the other rules' sketches."""
    name = "winograd-chunks"

    def condition(self, sketch, st):
        return Cond.APPLY_AND_CONTINUE if st.is_output and not sketch.steps and \
            any(s.op.tag == "winograd_gemm" for s in sketch.state.stages) else Cond.SKIP

    def apply(self, sketch, st):
        steps = winograd_chunk_steps(sketch.state, vector_width())
        if steps is None:
            return []
        whole = sketch.copy()
        for step in steps:
            whole.add(step)
        whole.rules.append("winograd_chunks")
        return [whole]


class MatmulTile(SketchRule):
    """The default's matmul register tile (compiler/matmul_schedule.py) with symbolic sizes: the output (a
    cache_write copy's reader when the matmul is the output) split into T<n>.2 lanes x T<n>.1 column vectors of
    its last axis and T<m>.1 rows of the one before; loops [outer.., column blocks, row blocks | rows, column
    vectors, lanes], the parallel part fused, the matmul computed there with its reduction outside its tile
    (split by T<k>.1, inner part unrolled, in one variant). Offered besides the other rules' sketches."""
    name = "matmul-tile"

    def condition(self, sketch, st):
        if not st.loc.is_root or st.relations or matmul_operands(st) is None:
            return Cond.SKIP
        out = output_consumer(sketch.state, st)
        fits = st.is_output or (out is not None and out.op.shape == st.op.shape)
        return Cond.APPLY_AND_CONTINUE if fits else Cond.SKIP

    def apply(self, sketch, st):
        s = sketch.copy()
        anchor, out = st.name, output_consumer(s.state, st)
        if st.is_output:
            s.add(CacheWrite(st.name))
            anchor, out = f"{st.name}.local", s.state.stage(st.name)
        if out.name in s.simple_roots:
            s.simple_roots.remove(out.name)
        *outer, m, n = [i.name for i in out.leaves]
        ext = dict(zip([i.name for i in out.leaves], out.op.shape))
        kn = s.new_tile(anchor, n, ext[n], 3)
        for name in (out.name, anchor):
            s.add(Split(name, [i.name for i in s.state.stage(name).leaves if i.kind == "spatial"][-1], (f"T{kn}.2",)))
        s.add(Split(out.name, f"{n}.0", (f"T{kn}.1",)))
        km = s.new_tile(out.name, m, ext[m], 2)
        s.add(Split(out.name, m, (f"T{km}.1",)))
        parallel = outer + [f"{n}.0.0", f"{m}.0"]
        s.add(Reorder(out.name, tuple(parallel + [f"{m}.1", f"{n}.0.1", f"{n}.1"])))
        _parallel(s, out.name, parallel)
        s.add(ComputeAt(anchor, out.name, "@".join(parallel)))
        for it, how in ((f"{m}.1", "unroll"), (f"{n}.0.1", "unroll"), (f"{n}.1", "vectorize")):
            s.add(Annotate(out.name, it, how))
        name = f"matmul-tile({anchor}->{out.name}"
        return [_matmul_anchor(s.copy(), anchor, split, name) for split in (False, True)]


def _matmul_anchor(s: Sketch, anchor: str, split_reduce: bool, name: str) -> Sketch:
    """The matmul's loops inside the parallel one: outer (extent 1 there), the reduction (split by a tile
    variable, inner part unrolled, if split_reduce), then rows and column vectors unrolled, lanes vectorized."""
    a_st = s.state.stage(anchor)
    *outer, m, n_vec, n_lane = [i.name for i in a_st.leaves if i.kind == "spatial"]
    k = next(i.name for i in a_st.leaves if i.kind == "reduce")
    red = [k]
    if split_reduce:
        t = s.new_tile(anchor, k, a_st.root_extents()[k], 2)
        s.add(Split(anchor, k, (f"T{t}.1",)))
        red = [f"{k}.0", f"{k}.1"]
    s.add(Reorder(anchor, tuple(outer + red + [m, n_vec, n_lane])))
    for it in red[1:] + [m, n_vec]:
        s.add(Annotate(anchor, it, "unroll"))
    s.add(Annotate(anchor, n_lane, "vectorize"))
    s.rules.append(name + (", reduction unrolled)" if split_reduce else ")"))
    return s


MAX_LANES = 64  # the longest vector a register tile's lane axis may be


def output_consumer(state: State, st: Stage) -> Stage | None:
    """The output stage at root that reads st once the stages between them are inlined (the default's view: they
    may branch and join again)."""
    consumers = state.effective_consumers(st)
    if len(consumers) == 1 and consumers[0].is_output and consumers[0].loc.is_root:
        return consumers[0]
    return None


def _lane_variants(anchor: Stage, extent: int) -> list[bool]:
    """Which lane forms a last axis of this extent allows: split (some divisor 4 <= d < extent, d <= 64, as the
    vector) and/or whole (4 <= extent <= 64); both need the axis contiguous in the anchor's reads."""
    out = []
    lanes = [d for d in divisors(extent) if 4 <= d <= MAX_LANES and d < extent]
    if any(contiguous_last(anchor, d) for d in lanes):
        out.append(True)
    if 4 <= extent <= MAX_LANES and contiguous_last(anchor, extent):
        out.append(False)
    return out


def _plain_at(s: Sketch, anchor: str, out: str, window_outside: bool = False) -> Sketch | None:
    """The anchor computed at the output's second-innermost loop, the loops outside it fused and parallel; with
    window_outside, its reductions moved outside its innermost spatial loop (the default of an NCHW pool; None
    when the anchor has no reduction to move)."""
    names = [i.name for i in s.state.stage(out).leaves]
    outer = names[:-1] if len(names) >= 2 else names
    _parallel(s, out, outer)
    s.add(ComputeAt(anchor, out, "@".join(outer)))
    s.rules.append(f"at({anchor}->{out})")
    if window_outside:
        step = window_outside_step(s.state.stage(anchor))
        if step is None:
            return None
        s.add(step)
        s.rules.append(f"window-outside({anchor})")
    return s


def _parallel(s: Sketch, stage: str, names: list[str]) -> None:
    if len(names) > 1:
        s.add(Fuse(stage, tuple(names)))
    s.add(Annotate(stage, "@".join(names), "parallel"))


def _register_tile(s: Sketch, anchor: str, out: str, split_lane: bool, split_reduce: bool) -> Sketch | None:
    """The default's register tile with symbolic sizes: T<lane var>.2 lanes x T<lane var>.1 columns when the lane
    axis is split, else T<col var>.1 columns of the axis before the lanes; T<reuse var>.1 blocks of the reuse axis;
    T<reduce var>.1 iterations of the innermost reduction, unrolled."""
    o_st = s.state.stage(out)
    if split_lane:
        last = [i.name for i in o_st.leaves if i.kind == "spatial"][-1]
        k = s.new_tile(anchor, last, o_st.op.shape[-1], 3)
        for name in (out, anchor):
            st = s.state.stage(name)
            s.add(Split(name, [i.name for i in st.leaves if i.kind == "spatial"][-1], (f"T{k}.2",)))
    names = [i.name for i in s.state.stage(out).leaves]
    if len(names) < 2:
        return None
    last, tile_axis = names[-1], len(names) - 2
    reuse_axis = broadcast_reuse_axis(s.state.stage(anchor), tile_axis)
    col = names[tile_axis]
    if split_lane:
        s.add(Split(out, col, (f"T{k}.1",)))
    else:
        c = s.new_tile(out, col, o_st.op.shape[tile_axis], 2, tail=True)  # columns: 4 of 7 as the default does
        s.add(Split(out, col, (f"T{c}.1",)))
    order, tile = names[:tile_axis] + [f"{col}.0"], [f"{col}.1", last]
    if reuse_axis is not None:
        r = names[reuse_axis]
        k = s.new_tile(out, r, o_st.op.shape[reuse_axis], 2)
        s.add(Split(out, r, (f"T{k}.1",)))
        order = [f"{r}.0" if n == r else n for n in order]
        tile = [f"{r}.1"] + tile
    s.add(Reorder(out, tuple(order + tile)))
    _parallel(s, out, order)
    s.add(ComputeAt(anchor, out, "@".join(order)))
    s.add(Annotate(out, f"{col}.1", "unroll"))
    s.add(Annotate(out, last, "vectorize"))
    a_st = s.state.stage(anchor)
    a_sp = [i.name for i in a_st.leaves if i.kind == "spatial"]
    a_red = [i.name for i in a_st.leaves if i.kind == "reduce"]
    a_tile = [a_sp[tile_axis]] + ([a_sp[reuse_axis]] if reuse_axis is not None else []) + [a_sp[-1]]
    unrolled = a_tile[:-1]
    if split_reduce:
        k = s.new_tile(anchor, a_red[-1], a_st.root_extents()[a_red[-1]], 2)
        s.add(Split(anchor, a_red[-1], (f"T{k}.1",)))
        a_red = a_red[:-1] + [f"{a_red[-1]}.0", f"{a_red[-1]}.1"]
        unrolled.append(a_red[-1])
    s.add(Reorder(anchor, tuple([n for n in a_sp if n not in a_tile] + a_red + a_tile)))
    for n in unrolled:
        s.add(Annotate(anchor, n, "unroll"))
    s.add(Annotate(anchor, a_tile[-1], "vectorize"))
    s.rules.append(f"register-tile({anchor}->{out}{', lanes split' if split_lane else ''}"
                   f"{', reduction unrolled' if split_reduce else ''})")
    return s


DEFAULT_RULES = [SkipStage(), RowStages(), WinogradChunks(), AlwaysInline(), AddRfactor(), MatmulTile(), RegisterTile(),
                 MultiLevelTilingWithFusion(), AddCacheStage(), MultiLevelTiling(), SimpleRoot()]


def _split(s: Sketch, stage: str, iter: str, extent: int, levels: int) -> list[str]:
    """Split iter into `levels` loops named iter.0 .. iter.{levels-1}, lengths symbolic in a new tile var."""
    k = s.new_tile(stage, iter, extent, levels)
    s.add(Split(stage, iter, tuple(f"T{k}.{lv}" for lv in range(1, levels))))
    return [f"{iter}.{lv}" for lv in range(levels)]


def _tile_and_fuse(s: Sketch, anchor: str, consumer: str):
    """Consumer: spatial axes split (outer, middle, tile); anchor computed at its last middle loop, its own
    spatial axes split (tile / inner, inner) and reductions split in two: order R S R S inside the tile."""
    cons = s.state.stage(consumer)
    if consumer in s.simple_roots:  # it was visited first as a plain root; now the tiling annotates it
        s.simple_roots.remove(consumer)
    c_names = [i.name for i in cons.leaves]
    c_ext = cons.leaf_extents()
    anc = s.state.stage(anchor)
    a_sp = [i.name for i in anc.leaves if i.kind == "spatial"]
    a_red = [i.name for i in anc.leaves if i.kind == "reduce"]
    a_ext = anc.leaf_extents()
    c_levels, a_levels = [], []
    for cn, an in zip(c_names, a_sp):
        k = s.new_tile(anchor, an, c_ext[cn], 4)
        s.add(Split(consumer, cn, (f"T{k}.1", f"T{k}.2*T{k}.3")))
        c_levels.append([f"{cn}.0", f"{cn}.1", f"{cn}.2"])
        s.add(Split(anchor, an, (f"T{k}.3",)))
        a_levels.append([f"{an}.0", f"{an}.1"])
    c_order = [l[0] for l in c_levels] + [l[1] for l in c_levels] + [l[2] for l in c_levels]
    s.add(Reorder(consumer, tuple(c_order)))
    s.add(ComputeAt(anchor, consumer, c_levels[-1][1]))
    r_levels = [_split(s, anchor, rn, a_ext[rn], 2) for rn in a_red]
    a_order = [l[0] for l in r_levels] + [l[0] for l in a_levels] + [l[1] for l in r_levels] + \
              [l[1] for l in a_levels]
    s.add(Reorder(anchor, tuple(a_order)))
    s.tiled.append(Tiled(anchor, consumer, tuple(c_order[:2 * len(c_levels)]),
                         ((anchor, a_order[-1]), (consumer, c_order[-1])), (anchor, consumer)))


def generate_sketches(task: Task, rules=None) -> list[Sketch]:
    """All sketches of a task: rules applied from the last stage to the first, branching where a rule says
    APPLY_AND_CONTINUE (the stage is also offered to the following rules)."""
    rules = DEFAULT_RULES if rules is None else rules
    start = Sketch(state=task.initial_state())
    work = [(start, len(start.state.stages) - 1)]
    done = []
    while work:
        sketch, idx = work.pop()
        if idx < 0:
            done.append(sketch)
            continue
        st = sketch.state.stages[idx]
        for rule in rules:
            cond = rule.condition(sketch, st)
            if cond == Cond.SKIP:
                continue
            for new in rule.apply(sketch, st):
                # the rule has handled the stage and any stage it made for it (cache_write and rfactor insert
                # "<name>.local" / "<name>.rf" before it): go on with the stage before that group
                start = min(i for i, x in enumerate(new.state.stages)
                            if x.name == st.name or x.name.startswith(st.name + "."))
                work.append((new, start - 1))
            if cond == Cond.APPLY_AND_SKIP_REST:
                break
    for sketch in done:  # inlining first, as the default schedule does (it only makes later steps more legal)
        sketch.steps = [s for s in sketch.steps if isinstance(s, ComputeInline)] + \
                       [s for s in sketch.steps if not isinstance(s, ComputeInline)]
    # deterministic order: fewest rules first
    done.sort(key=lambda s: (len(s.rules), s.rules))
    return done

"""Default schedules: what an untuned model runs, built from the same steps the tuner searches over.

The rules, applied to a task's initial state:
  1. every non-output stage without a reduction is inlined into its readers, except those worth their own
     buffer (`keeps_buffer`: padding before a convolution, so that its inner loop reads without bounds checks;
     a Winograd input transform, read once per output channel);
  2. the anchor (the last reduction: conv, dense, pool...) gets a register tile: computed at a loop of the
     output stage (or of its cache_write copy when it is the output), reduction loops outside, a few output
     columns unrolled and the contiguous innermost axis vectorized. When one operand is a broadcast (it does not
     depend on the lanes: a conv's input pixel) the tile also takes REUSE_FACTORS blocks of an axis that operand
     does not index (the output-channel block), columns outside it, so each broadcast feeds consecutive FMAs;
     the innermost reduction loop is unrolled by REDUCE_UNROLL; the tile is narrowed if that is what it takes
     to give the parallel loop PARALLEL_TILES iterations (the bench/hand_schedules.py templates, generalized);
     An anchor that is not read elementwise by the output (a Winograd batched product, read by the inverse
     transform) is tiled in a cache_write copy of itself;
  3. every root stage fuses its outer spatial loops into one parallel loop and vectorizes its innermost axis
     when that axis is contiguous in what the stage reads and writes. Short axes that index no input (they only
     choose between branches of a select: the tile position of a Winograd transform) are moved inside and
     unrolled, so that the selects fold away.
Three task kinds have their own rule instead: a matmul anchor gets a tile of several rows x column vectors
(compiler/matmul_schedule.py), a task of row stages (softmax, layer norm) gets `schedule_rows`, and a recurrent
cell (one step of an LSTM, GRU or RNN) compiler/recurrent_schedule.py's column tiles.
"""
from __future__ import annotations

import functools

from relayish import te
from relayish.op import stage_tag_traits
from relayish.ops.rows import ROW_TAG

from .arith import coefficient, simplify, unclamped, variables
from .flat_schedule import flat_lane, flat_tail
from .matmul_schedule import schedule_matmul, streams_weight
from .recurrent_schedule import schedule_recurrent
from .registers import conv_tile_budget, pointwise_tile_budget, unrolled_reduce_budget, vector_registers
from .row_schedule import MIN_PARALLEL_ELEMENTS, schedule_fused_rows
from .schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, Fuse, Reorder, Schedule, Split, Stage,
                       State)
from .transpose_schedule import tile_loops, transpose_tile
from .winograd_schedule import schedule_winograd

MAX_VECTOR = 64
PARALLEL_CHUNKS = 64  # outer iterations wanted in a parallel loop (load balance across threads)
# Register tiles of reductions: their accumulator budgets follow the target's register file
# (compiler/registers.py: 28 or 16 vectors of 32 zmm, 10 or 8 of 16 ymm; see bench/kernel_bench.py)
REUSE_FACTORS = (2, 3)  # blocks of the reuse axis per tile, the first that divides it (conv: 2 output-channel
# blocks share each input pixel; 3 when the block count is odd)
POINTWISE_REUSE_FACTORS = (3, 2)  # the same for a windowless anchor (1x1 convolution) on a 16-register target:
# 3 blocks x 4 columns fill the file (12 accumulators, 3 weights, 1 broadcast; registers.pointwise_tile_budget)
MIN_REDUCE_LOOP = 4  # a shorter innermost reduction is fully unrolled by LLVM (3 RGB channels)
REDUCE_UNROLL = 4  # the innermost reduction loop of a tile within unrolled_reduce_budget is unrolled this much
# (less loop overhead per FMA block; with a full file of accumulators LLVM then rotates them all through
# registers and spills)
PARALLEL_TILES = 16  # a tile smaller than the widest is chosen if that is needed for this many parallel tiles
TILE_OVERHEAD = 1  # the fixed cost of a register tile (zeroing, storing its accumulators), in columns (_column_tile)


def default_schedule(state: State, vector_width: int = 16) -> Schedule:
    """A sensible schedule for any task; replaying its steps on `state` gives the scheduled state."""
    b = ScheduleBuilder(state)
    if schedule_rows(b, vector_width) or schedule_recurrent(b, vector_width):
        return Schedule(tuple(b.steps))
    _inline_unbuffered(b)
    anchor = next((s for s in reversed(b.state.stages) if s.is_reduction and not s.loc.is_inline), None)
    if not schedule_winograd(b, vector_width) and anchor is not None and \
            not schedule_matmul(b, anchor, _output_consumer(b, anchor), vector_width):
        _schedule_anchor(b, anchor, vector_width)
    for st in list(b.state.stages):
        if st.loc.is_root and not b.done(st):
            _schedule_root(b, st, vector_width)
    return Schedule(tuple(b.steps))


def schedule_rows(b: ScheduleBuilder, vector_width: int) -> bool:
    """Tasks made only of row stages (relayish/ops/rows.py: softmax, layer norm over the last axis as two-stage
    reductions): every elementwise stage with one reader inlined (one with two, softmax's exp, is computed once
    into its own buffer), then every stage by the root rule: rows in parallel, a partial
    reduction's lanes vectorized inside its reduction loop (one vector load and max/add per step), the output
    vectorized along the row. No anchor tile: the per-row reductions are too short to gain from one, and would
    give the whole task one scalar reduction loop. False (nothing applied) for any other task."""
    stages = list(b.state.stages)
    if not all(st.op.tag == ROW_TAG for st in stages):
        return False
    _inline_row_stages(b)
    if schedule_fused_rows(b, vector_width):  # enough rows: row by row, every stage computed at the row
        return True
    for st in list(b.state.stages):
        if st.loc.is_root:
            _schedule_root(b, st, vector_width)
    return True


def _inline_row_stages(b: ScheduleBuilder):
    """A row task's elementwise stages with one reader inlined (softmax's exp, read twice, keeps its buffer)."""
    for st in reversed(list(b.state.stages)):
        if not st.is_output and not st.is_reduction and len(b.state.consumers(st)) == 1:
            b.add(ComputeInline(st.name))


def fused_rows_steps(state: State, vector_width: int = 16) -> list | None:
    """The steps of the default's row-by-row schedule of a row task (compiler/row_schedule.py), None when the
    default schedules it otherwise: what the tuner's row sketch holds (tuning/sketch.py)."""
    b = ScheduleBuilder(state)
    if not all(st.op.tag == ROW_TAG for st in b.state.stages):
        return None
    _inline_row_stages(b)
    return b.steps if schedule_fused_rows(b, vector_width) else None


def winograd_chunk_steps(state: State, vector_width: int = 16) -> list | None:
    """The steps of the default's chunked schedule of a Winograd task (compiler/winograd_schedule.py: the
    default's inlining, then the chunks), None when the default schedules it otherwise: what the tuner's
    Winograd sketch holds (tuning/sketch.py)."""
    b = ScheduleBuilder(state)
    _inline_unbuffered(b)
    return b.steps if schedule_winograd(b, vector_width) else None


def _inline_unbuffered(b: ScheduleBuilder) -> None:
    """Rule 1: every stage that is not an output, has no reduction and is not worth its own buffer, inlined."""
    for st in reversed(list(b.state.stages)):
        if not st.is_output and not st.is_reduction and not keeps_buffer(b.state, st):
            b.add(ComputeInline(st.name))


def keeps_buffer(state: State, st: Stage) -> bool:
    """A stage worth computing into its own buffer although it could be inlined: a padding stage read by a
    convolution (each element is read KH*KW*(output channels) times; padding before a pool is read a few times
    and is cheaper inlined), and the Winograd transforms (a dozen adds per element: the input transform is
    read once per output channel block by the batched product, the inverse gathers a tile's products).
    The ops' computes declare these traits with their stages' tags (relayish.op.StageTag)."""
    tag = stage_tag_traits(st.op.tag)
    return tag.keeps_buffer or (tag.is_padding and any(stage_tag_traits(c.op.tag).buffered_padding
                                                       for c in state.consumers(st)))


class ScheduleBuilder:
    """Applies steps to a working copy as they are chosen, so later choices see the current state."""

    def __init__(self, state: State):
        self.state = state.copy()
        self.steps = []
        self.scheduled = set()

    def add(self, step):
        step.apply(self.state)
        self.steps.append(step)

    def stage(self, name) -> Stage:
        return self.state.stage(name)

    def done(self, st) -> bool:
        return st.name in self.scheduled


def _output_consumer(b: ScheduleBuilder, st: Stage) -> Stage | None:
    """The root stage that reads st once everything between them is inlined, if it is an output. The inlined
    stages may branch and join again (QuantizeLinear's NaN guard reads its value twice: where(x == x, x, 0); a
    SiLU x * sigmoid(x)): before, such an epilogue made the anchor a buffer of its own and a second pass."""
    consumers = b.state.effective_consumers(st)
    if len(consumers) == 1 and consumers[0].is_output and consumers[0].loc.is_root:
        return consumers[0]
    return None


def _schedule_anchor(b: ScheduleBuilder, anchor: Stage, vw: int):
    if not anchor.op.axes:  # a 0-d result (a reduction over every axis): no tile; the root rule handles it
        return
    out = _output_consumer(b, anchor)
    if anchor.is_output or ((out is None or out.op.shape != anchor.op.shape) and len(anchor.op.axes) >= 2):
        b.add(CacheWrite(anchor.name))
        out, anchor = anchor, b.stage(anchor.name + ".local")
    if out is None or len(out.op.axes) != len(anchor.op.axes) or out.op.shape != anchor.op.shape:
        return  # not a tile-able pattern: the root rule handles it
    shape = out.op.shape
    lane = _lane_factor(anchor, shape[-1], vw)
    if lane and shape[-1] > lane:  # a long contiguous axis: its inner `lane` elements become the vector
        for st in (out, anchor):
            b.add(Split(st.name, [i.name for i in st.leaves if i.kind == "spatial"][-1], (lane,)))
    names = [i.name for i in out.leaves]
    last = names[-1]
    if not lane or len(names) < 2:
        at = names[-2] if len(names) >= 2 else names[-1]
        _parallelize(b, out, names[:names.index(at) + 1])
        b.add(ComputeAt(anchor.name, out.name, _fused_name(names[:names.index(at) + 1])))
        if not lane and anchor.op.tag == "pool":
            window = window_outside(anchor)
            if window is not None:
                b.add(window)
        b.scheduled.update((out.name, anchor.name))
        return
    # register tile: the lanes vectorized, the axis before them split into an unrolled block of columns, and
    # (when one operand is a broadcast) a second unrolled axis that reuses each broadcast
    tile_axis = column_axis(b.stage(out.name).leaf_extents(), names)
    pointwise = windowless(anchor) and vector_registers(vw) < 32
    found = broadcast_reuse(anchor, tile_axis, POINTWISE_REUSE_FACTORS if pointwise else REUSE_FACTORS)
    reuse_axis, reuse = found if found is not None else (None, 1)
    col = names[tile_axis]
    vectors = max(1, lane // vw) * reuse  # accumulator vectors per column
    three = pointwise and reuse == 3  # 3 x 4 fills the 16 registers, reduction unrolled
    budget = pointwise_tile_budget(vw) if three else _tile_budget(anchor, reuse_axis, vw)
    cols = _column_tile(b.stage(out.name).leaf_extents(), names, tile_axis, reuse, budget // vectors,
                        exact=streams_weight(anchor))
    b.add(Split(out.name, col, (cols,)))
    order = names[:tile_axis] + names[tile_axis + 1:-1] + [f"{col}.0"]  # (the unit axes skipped by column_axis)
    tile = [f"{col}.1", last]
    if reuse_axis is not None:
        r = names[reuse_axis]
        b.add(Split(out.name, r, (reuse,)))
        order = [f"{r}.0" if n == r else n for n in order]
        tile = [f"{r}.1"] + tile
    b.add(Reorder(out.name, tuple(order + tile)))
    _parallelize(b, out, order)
    b.add(ComputeAt(anchor.name, out.name, _fused_name(order)))
    b.add(Annotate(out.name, f"{col}.1", "unroll"))
    b.add(Annotate(out.name, last, "vectorize"))
    unrolled = budget if three else unrolled_reduce_budget(vw)
    _anchor_loops(b, anchor, tile_axis, reuse_axis, unroll_reduce=cols * vectors <= unrolled)
    b.scheduled.update((out.name, anchor.name))


def column_axis(ext: dict, names: list) -> int:
    """The axis of the register tile's columns: the one before the lanes, or, when that has extent 1, the
    nearest one before it that does not (a 1-D convolution stored as (N, C, L, 1): its columns run along L, not
    along a width of 1; a 256 -> 256, k = 3 one over L = 64 ran 31 GFLOP/s with columns of 1, Zen 4). names[k] for
    k < the axis is the anchor's root axis k (lane split or not)."""
    axis = len(names) - 2
    while axis > 1 and ext[names[axis]] == 1 and ext[names[axis - 1]] > 1:
        axis -= 1
    return axis


def window_outside(anchor: Stage) -> Reorder | None:
    """The step that moves an anchor's reduction loops outside its innermost spatial loop (None when it has no
    reduction or one spatial loop). The default gives it to a pool whose row is not a vector (NCHW: its window
    reads the row with a stride): each step of the window then updates every accumulator of the row once, instead
    of chaining the window's updates through one accumulator in memory. AlexNet's NCHW 3x3/2 max pool over
    96x54x54 on a Zen 3: 1055 -> ~380 us."""
    a_sp = [i.name for i in anchor.leaves if i.kind == "spatial"]
    a_red = [i.name for i in anchor.leaves if i.kind == "reduce"]
    if not a_red or len(a_sp) < 2:
        return None
    return Reorder(anchor.name, tuple(a_sp[:-1] + a_red + a_sp[-1:]))


def _anchor_loops(b: ScheduleBuilder, anchor: Stage, tile_axis: int, reuse_axis: int | None, unroll_reduce: bool):
    """The anchor's own loops: reductions outside the tile (the innermost one unrolled by REDUCE_UNROLL if
    unroll_reduce); in the tile, columns then the reuse axis (one broadcast feeds consecutive FMAs and is dead
    after them), then the lanes."""
    a_sp = [i.name for i in anchor.leaves if i.kind == "spatial"]
    a_red = [i.name for i in anchor.leaves if i.kind == "reduce"]
    a_tile = [a_sp[tile_axis]] + ([a_sp[reuse_axis]] if reuse_axis is not None else []) + [a_sp[-1]]
    unrolled = a_tile[:-1]
    red_ext = anchor.leaf_extents()[a_red[-1]]
    if unroll_reduce and red_ext % REDUCE_UNROLL == 0 and red_ext >= 2 * REDUCE_UNROLL:
        b.add(Split(anchor.name, a_red[-1], (REDUCE_UNROLL,)))
        a_red = a_red[:-1] + [f"{a_red[-1]}.0", f"{a_red[-1]}.1"]
        unrolled.append(a_red[-1])
    b.add(Reorder(anchor.name, tuple([n for n in a_sp if n not in a_tile] + a_red + a_tile)))
    for n in unrolled:
        b.add(Annotate(anchor.name, n, "unroll"))
    b.add(Annotate(anchor.name, a_tile[-1], "vectorize"))


def _tile_budget(anchor: Stage, reuse_axis: int | None, vw: int) -> int:
    """Accumulator vectors the register tile may use on a target of vw float32 lanes."""
    budget = conv_tile_budget(vw, reuse_axis is not None)
    red = anchor.op.reduce_axes
    if red and red[-1].extent < MIN_REDUCE_LOOP:  # LLVM unrolls that loop fully and hoists its loads
        budget = min(budget, conv_tile_budget(vw, False))
    return budget


def broadcast_reuse_axis(anchor: Stage, tile_axis: int) -> int | None:
    """The axis of broadcast_reuse (None if there is none)."""
    found = broadcast_reuse(anchor, tile_axis)
    return None if found is None else found[0]


def windowless(anchor: Stage) -> bool:
    """An anchor without a window: every reduction axis that an index combines with a spatial axis (ry in a
    convolution's y * s + ry) has extent 1, as in a 1x1 convolution, so each input pixel feeds the reduction
    over channels only. (A 3x3 convolution over a single input-channel block also has a reduction axis of
    extent 1, its channel blocks: it has a window.)"""
    spatial = {ax.var for ax in anchor.op.axes}
    moving = {ax.var for ax in anchor.op.reduce_axes if ax.extent > 1}
    for read in _reads(anchor.op):
        for index in read.indices:
            used = _vars(index)
            if used & spatial and used & moving:
                return False
    return True


def _reads(op: te.ComputeOp) -> list:
    """The tensor reads of a compute op's body (inside its reduction, if it is one)."""
    body = op.body.body if isinstance(op.body, te.Reduce) else op.body
    return [r for r in te.walk(body) if isinstance(r, te.TensorRead)]


def _vars(e: te.PrimExpr) -> set:
    return {v for v in te.walk(e) if isinstance(v, te.Var)}


def broadcast_reuse(anchor: Stage, tile_axis: int, factors=REUSE_FACTORS) -> tuple[int, int] | None:
    """(axis, factor): the spatial axis before the column axis that a broadcast operand does not index, or indexes
    only in blocks of `factor` (`_blocks_of`), the innermost such, and how many of its blocks a tile takes: the
    first of `factors` dividing its extent (3 for MobileNetV2's 24 channels, 3 blocks of 8: its 1x1
    convolution 144->24 ran 81 GFLOP/s with 1 block x 8 columns, 110 with 3 x 3, Zen 3). A broadcast operand is a
    read that does not depend on the lane axis (conv: the input pixel; its reuse axis is the output-channel block,
    which only the weight indexes, and a grouped convolution's input indexes only through its group)."""
    axes = anchor.op.axes
    lane_var = axes[-1].var
    reads = _reads(anchor.op)
    used = [set().union(*map(_vars, r.indices)) for r in reads]
    broadcast = [r for r, u in zip(reads, used) if lane_var not in u]
    if not broadcast or len(broadcast) == len(used):
        return None
    for k in range(tile_axis - 1, -1, -1):
        var = axes[k].var
        if not any(var in u for u in used):
            continue
        for factor in factors:
            if axes[k].extent % factor == 0 and \
                    all(_blocks_of(i, var, factor) for r in broadcast for i in r.indices):
                return k, factor
    return None


def _blocks_of(e: te.PrimExpr, var: te.Var, factor: int) -> bool:
    """Whether e depends on var at most through var // d with d a multiple of factor: then e takes one value on
    each run of `factor` consecutive values of var that starts at a multiple of factor (a grouped convolution's
    input block (j // 16) * 6 + ric is the same for output blocks 2*o and 2*o + 1: they can share a broadcast)."""
    def blocked(n):
        return isinstance(n, te.BinOp) and n.op == "//" and n.a is var and isinstance(n.b, te.IntImm) \
            and n.b.value > 0 and n.b.value % factor == 0
    # every parent of var is such a division (te.walk visits each node of the DAG once)
    return e is not var and all(blocked(n) or all(c is not var for c in te.expr_children(n)) for n in te.walk(e))


def _column_tile(ext: dict, names: list, tile_axis: int, reuse: int, at_most: int, exact: bool = False) -> int:
    """The column tile c <= at_most that computes the columns at the least cost, ceil(extent / c) tiles of
    c + TILE_OVERHEAD column-equivalents each (a last, partial tile is computed whole), the wider on a tie, among
    the tiles that leave PARALLEL_TILES parallel iterations if any does (no thread idles while another finishes a
    last big chunk). 2 x 4 accumulators over 7 columns (4 + 3) ran 1.5x faster than the divisor's 2 x 1, and over
    14 columns 1.4x faster than 2 x 2; 2 x 5 over 13 or 14 columns beats 2 x 4, over 7 it loses (10 columns
    computed for 7, not 8) (Zen 3). exact: only tiles that divide the extent, if one wider than 1 does (see
    streams_weight)."""
    extent = ext[names[tile_axis]]
    outer = 1
    for n in names[:tile_axis]:
        outer *= ext[n]
    outer //= reuse
    tiles = {c: -(-extent // c) for c in range(1, min(extent, max(1, at_most)) + 1)}
    if exact and any(extent % c == 0 for c in tiles if c > 1):
        tiles = {c: n for c, n in tiles.items() if extent % c == 0}
    enough = [c for c, n in tiles.items() if outer * n >= PARALLEL_TILES]
    return min(enough or tiles, key=lambda c: (tiles[c] * (c + TILE_OVERHEAD), -c))


def _lane_factor(st: Stage, extent: int, vw: int) -> int:
    """How many elements of the last axis to compute as one vector: the whole axis when it is short, else the
    widest of vw, vw/2 that divides it and keeps the stage's reads contiguous (a packed weight's blocks of 8
    columns: 8), else a whole vector, the last one partial (lowering versions the tail's guard, so the full vectors
    run unguarded, and codegen runs the tail masked: 18,710 columns in vectors of 16 ran a softmax 1.9x faster
    than in vectors of 10, its largest divisor; 10,860 in vectors of 16 ran a tanh 3.4x and a softmax 3x faster
    than in quarter vectors of 4, Zen 4), else a half vector (a batch-1 dense of 22 units reads its weight packed
    in blocks of 8: 3 vectors of 8, the last masked, ran 8x faster than 22 scalar reductions), else a quarter
    vector that divides it and reads contiguously; 0 when no width narrower than the axis gives contiguous reads
    or the axis is too narrow to pay off. A pool's row is one vector only if that is one register: its padded
    reads are masked loads, which LLVM runs element by element in a vector of 20 or 25 lanes (an NCHW 3x3 / 2
    max pool of 768 x 39 x 39 took 3x onnxruntime's time in 20 lanes), and whose masks of 32 lanes cost more
    than two vectors of 16 (1,447 x 64 x 64: 1.3 against 1.0 ms)."""
    whole = extent <= vw and extent & (extent - 1) == 0  # (a pool's masked loads: one whole register)
    if extent <= MAX_VECTOR and extent >= 4 and (whole or st.op.tag != "pool") and contiguous_last(st, extent):
        return extent
    widths = [b for b in (vw, vw // 2) if b >= 4 and extent % b == 0] + [vw, vw // 2] + \
        [b for b in (vw // 4,) if b >= 4 and extent % b == 0]
    widths = [b for b in widths if b < extent]
    return next((b for b in widths if contiguous_last(st, b)), 0)


def _schedule_root(b: ScheduleBuilder, st: Stage, vw: int):
    """Outer spatial loops fused and parallel; the innermost contiguous axis vectorized; select-only axes
    unrolled inside."""
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    red = [i.name for i in st.leaves if i.kind == "reduce"]
    shape = st.op.shape
    vec_name = None
    tile = transpose_tile(b.state, st, vw)
    rows = 1
    for n in shape[:-1]:
        rows *= n
    # flattened: a short last axis that is not whole vectors, or rows too few for the parallel loop, which would
    # then take the vectors of each row too, each step dividing its index by the row length (a third of an Exp
    # over 31 x 12858 went to that arithmetic)
    short = bool(shape) and shape[-1] % vw != 0 and shape[-1] <= MAX_VECTOR
    flat = 1 if tile or red or not shape or branch_axes(st) or not (short or rows < PARALLEL_CHUNKS) else \
        flat_tail(b.state, st)
    lane = 0 if tile or not sp else _lane_factor(st, shape[-1], vw)
    if flat > 1:  # the last axes read as one contiguous run: one axis of whole vectors (flat_schedule.py)
        b.add(Fuse(st.name, tuple(sp[-flat:])))
        sp = sp[:-flat] + [_fused_name(sp[-flat:])]
        lane = flat_lane(shape[-flat:], vw)
        if b.stage(st.name).leaf_extents()[sp[-1]] > lane:
            b.add(Split(st.name, sp[-1], (lane,)))
            sp = sp[:-1] + [f"{sp[-1]}.0", f"{sp[-1]}.1"]
        vec_name = sp[-1] if lane >= 4 else None
    elif tile:  # a transposing copy: an L x L tile, u's part unrolled around v's vectorized part (codegen transposes)
        splits, sp, inner = tile_loops(st, tile, sp)
        for step in splits:
            b.add(step)
        unrolled, vec_name = inner[:1], inner[1]
    elif lane:
        if shape[-1] > lane:
            b.add(Split(st.name, sp[-1], (lane,)))
            sp = sp[:-1] + [f"{sp[-1]}.0", f"{sp[-1]}.1"]
        vec_name = sp[-1]
    # a blocked channel gather: ShuffleNet's shuffle of 72 channels padded per group (1, 9, 56, 56, 8) ran 405 us
    # with scalar lanes, 51 us vectorized; a layout transform into a blocked layout alike (PP-OCRv6's FPN
    # upsample-and-concat over run-time sizes: 11.7 -> 1.7 ms)
    if not vec_name and not tile and flat <= 1 and sp and 4 <= shape[-1] <= vw and \
            stage_tag_traits(st.op.tag).gathers_lanes:
        vec_name = sp[-1]
    if not tile:
        unrolled = [sp[k] for k in branch_axes(st) if sp[k] != vec_name]
    outer = [n for n in sp if n != vec_name and n not in unrolled]
    if red or vec_name or unrolled:
        b.add(Reorder(st.name, tuple(outer + red + unrolled + ([vec_name] if vec_name else []))))
    total = 1  # the stage's work: its elements, times its reduction's length (softmax's per-row partials: 40 x 16
    for s in shape:  # elements, each a reduction over 1,169 vectors of the row, are worth running in parallel)
        total *= s
    for name in red:
        total *= st.leaf_extents()[name]
    if outer and total >= MIN_PARALLEL_ELEMENTS:
        # fuse just enough outer loops to feed every thread several chunks: the inner ones keep cheap indexing
        ext = b.stage(st.name).leaf_extents()
        prefix, n = [], 1
        for name in outer:
            prefix.append(name)
            n *= ext[name]
            if n >= PARALLEL_CHUNKS:
                break
        _parallelize(b, st, prefix)
    for name in unrolled:
        b.add(Annotate(st.name, name, "unroll"))
    if vec_name:
        b.add(Annotate(st.name, vec_name, "vectorize"))
    b.scheduled.add(st.name)


MAX_BRANCH_AXIS = 8


def branch_axes(st: Stage) -> list[int]:
    """Spatial axes (at most MAX_BRANCH_AXIS long) that index no tensor the stage reads: they only choose
    between the branches of selects (a Winograd transform's tile position). Unrolled, every select folds."""
    return list(_branch_axes_of(st.op))


@functools.lru_cache(maxsize=256)
def _branch_axes_of(op: te.ComputeOp) -> tuple[int, ...]:  # (ops are hashed by identity; the tuner asks often)
    body = op.body.body if isinstance(op.body, te.Reduce) else op.body
    nodes = list(te.walk(body))
    indexing = {v for i in {i for r in nodes if isinstance(r, te.TensorRead) for i in r.indices}
                for v in te.walk(i) if isinstance(v, te.Var)}
    used = {v for v in nodes if isinstance(v, te.Var)}
    return tuple(k for k, ax in enumerate(op.axes)
                 if ax.var in used and ax.var not in indexing and ax.extent <= MAX_BRANCH_AXIS)


def _parallelize(b: ScheduleBuilder, st: Stage, names: list[str]):
    if len(names) > 1:
        b.add(Fuse(st.name, tuple(names)))
    b.add(Annotate(st.name, _fused_name(names), "parallel"))


def _fused_name(names):
    return "@".join(names) if len(names) > 1 else names[0]


def contiguous_last(st: Stage, lane: int) -> bool:
    """True if, once the last output axis is split by `lane`, the inner part indexes only the last dimension
    of every tensor the stage reads, with coefficient 1 (so vectorizing it gives contiguous or broadcast loads), or
    in a pool 1 or 2 once the clamps of its padding are set aside (an NCHW row read with stride 2 is two vector
    loads and a shuffle; its padding, masked lanes)."""
    if not st.op.axes:
        return False
    ax = st.op.axes[-1]
    pool = st.op.tag == "pool"
    outer, inner = te.Var("outer"), te.Var("inner")
    split = outer * lane + inner if ax.extent > lane else inner
    ranges = {outer: -(-ax.extent // lane), inner: lane}
    # each distinct (index, is it the last dimension) once: a Winograd transform repeats its reads in every branch
    indices = {(idx, d == len(r.indices) - 1) for r in _reads(st.op) for d, idx in enumerate(r.indices)}
    for idx, last in indices:
        idx = simplify(te.substitute_vars(idx, {ax.var: split}), ranges)
        if pool:  # a padded row's clamps: codegen reads it as masked vectors (llvm.padded_read)
            idx = unclamped(idx, inner)[0]
        if inner in variables(idx) and (not last or coefficient(idx, inner) not in ((1, 2) if pool else (1,))):
            return all(_contiguous_flat(r, ax.var, split, inner, ranges) for r in _reads(st.op))
    return True


def _contiguous_flat(read: te.TensorRead, var, split, inner, ranges) -> bool:
    """Whether `read` steps by one element of its tensor's memory per step of `inner` (or not at all), judged on
    its row-major flat index: a reshape of trailing axes reads x[.., l // W, l % W], contiguous in l."""
    flat, stride = te.IntImm(0), 1
    for idx, size in reversed(list(zip(read.indices, read.tensor.shape))):
        flat = flat + te.substitute_vars(idx, {var: split}) * stride
        stride *= size
    flat = simplify(flat, ranges)
    return inner not in variables(flat) or coefficient(flat, inner) == 1


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)

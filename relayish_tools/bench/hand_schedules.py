"""Hand-written schedules for ResNet-18's hot tasks: NCHW16c convolutions (+ bias/residual/relu) and dense_pack.

They are ordinary step lists on the task's initial state (what a tuner would find, written down), parametrized by
the task's shapes; `hand_schedule(task)` returns None for any other kind of task. compiler/default_schedule.py applies
the same register-tile rule to any reduction generically; these templates name every choice explicitly, so they are
the reference the default and the tuner are measured against (python -m relayish_tools.bench.kernel_bench).

The convolution kernel (direct convolution on channel blocks):

    parallel for (batch, oc-block pair, output row, column tile):           <- the output stage's fused loops
      acc[ow_tile][oc_tile][16] = 0                                         <- conv computed at that loop
      for ic-block, ky, kx, ici (unrolled by 4):                            <- reduction outside the tile
        for x in ow_tile (unrolled):
          b = broadcast(data[ic-block, y*s + ky, x*s + kx, ici])            <- one load, used oc_tile times
          for o in oc_tile (unrolled):
            acc[x][o][:] += b * weight[o, ic-block, ky, kx, ici, :]         <- oc_tile vectors, loaded once per ici
      out[...] = epilogue(acc)                                              <- bias, residual, relu: one pass

With 2 x 14 the loop issues 28 FMAs per 14 broadcasts + 2 vector loads, in 28 accumulator registers + 2 weights
+ 1 broadcast of the 32 zmm (checked: no spills; the oc-inner order matters, with oc outermost in the tile LLVM
keeps every broadcast live across the tile and spills). The padded input is materialized at root (one cheap
parallel pass) so the inner loop reads it without bounds checks; computing it per ic block inside the tile was
measured slower (the recomputed halo and the select per element cost more than the pass).
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.default_schedule import ScheduleBuilder
from compiler.registers import conv_tile_budget
from compiler.schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, Fuse, Reorder, Schedule, Split, Stage,
                               State)

SHORT_ICI = 4  # an ici loop shorter than this is fully unrolled by LLVM, which then hoists its loads


@dataclass(frozen=True)
class ConvTile:
    """The register tile of a convolution and how its outer loops are split."""
    oc_tile: int  # output channel blocks per tile (unrolled)
    ow_tile: int  # output columns per tile (unrolled)
    ici_unroll: int = 1  # inner input channels unrolled (1: a loop)
    oc_inner: bool = True  # tile loop order columns-then-oc (one broadcast used by consecutive FMAs, then dead)


def hand_schedule(task, vector_width: int = 16) -> Schedule | None:
    """Our best hand schedule for the task, or None if we have none for its kind."""
    state = task.initial_state()
    anchor = _anchor(state)
    if anchor is None:
        return None
    if anchor.op.tag == "conv2d_nchwc" and anchor.op.shape[-1] == vector_width:
        data = anchor.op.input_tensors[0]  # the (padded) input: (n, ic_blocks, h, w, in_block)
        return conv_schedule(state, conv_tile(anchor.op.shape, data.shape[-1], vector_width))
    if anchor.op.tag == "dense_pack":
        return dense_schedule(state)
    return None


def _anchor(state: State) -> Stage | None:
    return next((s for s in reversed(state.stages) if s.is_reduction), None)


# ---------------------------------------------------------------------------------------------- conv

def conv_tile(out_shape, in_block: int, vector_width: int = 16) -> ConvTile:
    """The tile for an NCHW{vw}c conv output (n, oc_blocks, oh, ow, vw) whose input has channel block in_block.

    Two oc blocks share every broadcast of the input (7 loads per 14 FMAs instead of 15); the widest column tile
    that divides ow and keeps 2 x ow_tile within the register file (conv_tile_budget: 28 of 32 zmm, 10 of 16
    ymm); ici unrolled by 4 when the tile is narrow (the loop overhead of a 14-FMA body is not negligible at 7
    columns; with 28 accumulators, unrolling makes LLVM rotate all of them through registers and spill one per
    iteration). A short ici loop (the 3 channels of an RGB
    input) is fully unrolled by LLVM anyway: with a full file of accumulators that spills, so the tile stays at
    the no-reuse budget (2 x 8 of 32 registers)."""
    n, ocb, oh, ow, _ = out_shape
    oc_tile = 2 if ocb % 2 == 0 else 1
    widest = conv_tile_budget(vector_width, in_block >= SHORT_ICI) // oc_tile
    ow_tile = max(d for d in range(1, min(ow, widest) + 1) if ow % d == 0)
    narrow = oc_tile * ow_tile <= conv_tile_budget(vector_width, False)
    ici_unroll = 4 if in_block % 4 == 0 and in_block >= 8 and narrow else 1
    return ConvTile(oc_tile, ow_tile, ici_unroll)


def conv_schedule(state: State, tile: ConvTile) -> Schedule:
    """The direct-convolution schedule above for a conv2d_nchwc task (any epilogue of elementwise stages)."""
    b = ScheduleBuilder(state)  # applies each step to its own copy of the state as it records it
    add, state = b.add, b.state
    anchor = _anchor(state)
    for st in reversed(list(state.stages)):
        if st is not anchor and not st.is_output and st.op.tag != "pad":
            add(ComputeInline(st.name))
    if anchor.is_output:  # no epilogue: accumulate in a local copy (registers), store once
        add(CacheWrite(anchor.name))
        out, anchor = anchor, state.stage(anchor.name + ".local")
    else:
        out = next(s for s in state.stages if s.is_output)
    n, c, y, x, v = (i.name for i in out.leaves)
    add(Split(out.name, c, (tile.oc_tile,)))
    add(Split(out.name, x, (tile.ow_tile,)))
    outer = [n, f"{c}.0", y, f"{x}.0"]
    add(Reorder(out.name, tuple(outer + [f"{c}.1", f"{x}.1", v])))
    add(Fuse(out.name, tuple(outer)))
    par = "@".join(outer)
    add(Annotate(out.name, par, "parallel"))
    add(ComputeAt(anchor.name, out.name, par))
    add(Annotate(out.name, f"{x}.1", "unroll"))
    add(Annotate(out.name, v, "vectorize"))
    # the conv's own loops: reduction outside, the register tile (oc, columns, lanes) inside
    an, ac, ay, ax, av = (i.name for i in anchor.leaves if i.kind == "spatial")
    ric, ry, rx, rii = (i.name for i in anchor.leaves if i.kind == "reduce")
    red = [ric, ry, rx, rii]
    if tile.ici_unroll > 1:
        add(Split(anchor.name, rii, (tile.ici_unroll,)))
        red = [ric, ry, rx, f"{rii}.0", f"{rii}.1"]
    tile_order = (ax, ac, av) if tile.oc_inner else (ac, ax, av)
    add(Reorder(anchor.name, (an, ay) + tuple(red) + tile_order))
    if tile.ici_unroll > 1:
        add(Annotate(anchor.name, f"{rii}.1", "unroll"))
    add(Annotate(anchor.name, ac, "unroll"))
    add(Annotate(anchor.name, ax, "unroll"))
    add(Annotate(anchor.name, av, "vectorize"))
    for st in state.stages:
        if st.op.tag == "pad" and st.loc.is_root:
            _pad_at_root(state, st, add)
    return Schedule(tuple(b.steps))


def _pad_at_root(state: State, pad: Stage, add):
    """Padding as its own parallel pass: rows in parallel, the 16 lanes vectorized."""
    n, c, y, x, v = (i.name for i in pad.leaves)
    add(Fuse(pad.name, (n, c, y)))
    add(Annotate(pad.name, f"{n}@{c}@{y}", "parallel"))
    add(Annotate(pad.name, v, "vectorize"))


# ---------------------------------------------------------------------------------------------- dense

def dense_schedule(state: State, jb_tile: int | None = None, k_unroll: int = 1) -> Schedule:
    """dense_pack (m, j) with weight (j // nb, k, j % nb): a tile of jb_tile weight blocks x nb lanes is computed
    at a parallel loop over tiles, k outermost inside it, so each x[m, k] is loaded once per tile and every
    weight block is one contiguous stream."""
    b = ScheduleBuilder(state)  # applies each step to its own copy of the state as it records it
    add, state = b.add, b.state
    anchor = _anchor(state)
    for st in reversed(list(state.stages)):
        if st is not anchor and not st.is_output:
            add(ComputeInline(st.name))
    if anchor.is_output:
        add(CacheWrite(anchor.name))
        out, anchor = anchor, state.stage(anchor.name + ".local")
    else:
        out = next(s for s in state.stages if s.is_output)
    nb = _dense_block(anchor)
    m, j = (i.name for i in out.leaves)
    blocks = out.op.shape[1] // nb
    if jb_tile is None:
        jb_tile = max(d for d in range(1, 9) if blocks % d == 0)
    add(Split(out.name, j, (jb_tile, nb)))
    add(Fuse(out.name, (m, f"{j}.0")))
    par = f"{m}@{j}.0"
    add(Annotate(out.name, par, "parallel"))
    add(ComputeAt(anchor.name, out.name, par))
    add(Annotate(out.name, f"{j}.1", "unroll"))
    add(Annotate(out.name, f"{j}.2", "vectorize"))
    am, aj = (i.name for i in anchor.leaves if i.kind == "spatial")
    rk = next(i.name for i in anchor.leaves if i.kind == "reduce")
    add(Split(anchor.name, aj, (nb,)))
    red = [rk]
    if k_unroll > 1:
        add(Split(anchor.name, rk, (k_unroll,)))
        red = [f"{rk}.0", f"{rk}.1"]
    add(Reorder(anchor.name, (am, *red, f"{aj}.0", f"{aj}.1")))
    if k_unroll > 1:
        add(Annotate(anchor.name, f"{rk}.1", "unroll"))
    add(Annotate(anchor.name, f"{aj}.0", "unroll"))
    add(Annotate(anchor.name, f"{aj}.1", "vectorize"))
    return Schedule(tuple(b.steps))


def _dense_block(anchor: Stage) -> int:
    """nb of a dense_pack stage: the last dimension of its weight (the 3-D input)."""
    weight = next(t for t in anchor.op.input_tensors if len(t.shape) == 3)
    return weight.shape[2]

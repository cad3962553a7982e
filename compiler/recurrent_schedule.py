"""Default schedule rule for a recurrent cell (relayish/ops/recurrent.py: one time step of an LSTM, GRU or RNN).

The cell's output [1, D, S, B, Hp] is cut into column tiles of W units per direction; at each tile, the gates
stage (the hidden state times the packed recurrent weight, every gate of the tile's columns) is computed into a
register tile: the reduction over k outside (its inner part unrolled), then the batch rows, the G gates and the W
columns as W/lanes vectors, all unrolled; the weight's panel of the tile is one contiguous stream of H x G x nb
floats per block. The cell math then reads its gates from those registers, lanes vectorized and the state slot
axis s unrolled (LSTM's h' and c' share the loaded gates). The tiles of every direction run in parallel when a
step has enough multiply-adds to pay the fork/join (PARALLEL_MACS), serially otherwise: a small step costs about
as much in thread handoffs as it computes (2 threads, Zen 4: an RNN step of 16k multiply-adds ran 1.3 us serially,
2.1 us in 2 tiles; an LSTM step of 32k in 4 tiles 1.3 us, serially 1.5; of 64k 2.4 us, serially 3.4).

W is the narrowest multiple of the weight's block (nb columns) that dividing Hp gives MIN_ACCUMULATORS
accumulator vectors (B x G x W / lanes): enough independent FMA chains to hide the FMA latency (an RNN, G = 1,
takes 4 blocks per tile; an LSTM, 1). A batch too large for the register budget is cut into blocks of rows
(each block streams the panel again, from L1/L2).

A GRU without linear_before_reset multiplies the reset gate of every unit into the state before its second product:
its z, r gates are a root stage tiled the same way (a cache stage per tile), the reset-gated state another root
stage, and the h gate's product the one computed at the cell's tiles. A quantized LSTM (quantize_state) finds its
state's range in two small root reductions (left as they are) and quantizes the state in a root stage, lanes
vectorized, that the gates read.
"""
from __future__ import annotations

from relayish.ops.recurrent import CELL_TAG, GATES_TAG, RANGE_TAG

from .registers import vector_registers
from .schedule import Annotate, CacheWrite, ComputeAt, Fuse, Reorder, Split, Stage

MIN_ACCUMULATORS = 4  # FMA chains per reduction step (latency 4, one vector FMA per cycle: Zen 4's AVX-512)
PARALLEL_MACS = 1 << 15  # multiply-adds of a step from which its tiles run in parallel
REDUCE_UNROLL = 4


def schedule_recurrent(b, vector_width: int) -> bool:
    """Schedule a recurrent cell's task through the ScheduleBuilder `b`; False (nothing applied) for other tasks."""
    stages = list(b.state.stages)
    out = stages[-1]
    if out.op.tag != CELL_TAG or not out.is_output or len(b.state.outputs) != 1:
        return False
    tiled = [s for s in stages if s.op.tag == GATES_TAG and [c.name for c in b.state.consumers(s)] == [out.name]]
    if len(tiled) != 1:
        return False
    gates = tiled[0]
    _, dirs, _, batch, padded = out.op.shape
    lanes = min(vector_width, 16)
    width, rows = _tile(gates, padded, batch, lanes, vector_width)
    macs = _macs(stages)
    parallel = macs >= PARALLEL_MACS and dirs * padded // width > 1
    for st in stages[:-1]:
        if st is not gates and st.op.tag != RANGE_TAG:
            # GRU without linear_before_reset: its z, r gates and the reset-gated state; a quantized LSTM's state
            _schedule_root_stage(b, st, lanes, vector_width, parallel)
    # the cell: (directions x column tiles) | batch rows, slots, column vectors, lanes
    b.add(Split(out.name, "m", (width,)))
    inner = ["m.1"]
    if width > lanes:
        b.add(Split(out.name, "m.1", (lanes,)))
        inner = ["m.1.0", "m.1.1"]
    b.add(Reorder(out.name, ("i", "j", "m.0", "l", "k", *inner)))
    b.add(Fuse(out.name, ("i", "j", "m.0")))
    tile = "i@j@m.0"
    if parallel:
        b.add(Annotate(out.name, tile, "parallel"))
    b.add(ComputeAt(gates.name, out.name, tile))
    for name in (["l"] if batch <= 4 else []) + ["k"] + inner[:-1]:
        b.add(Annotate(out.name, name, "unroll"))
    b.add(Annotate(out.name, inner[-1], "vectorize"))
    _register_tile(b, gates, lanes, rows)
    b.scheduled.update(s.name for s in b.state.stages)
    return True


def _tile(gates: Stage, padded: int, batch: int, lanes: int, vector_width: int) -> tuple[int, int]:
    """(W, the batch rows of the register tile: the largest divisor of the batch within the register budget)."""
    weight = gates.op.input_tensors[-1]
    block, count = weight.shape[-1], gates.op.shape[2]
    widths = [block * m for m in (1, 2, 4) if padded % (block * m) == 0]
    width = next((w for w in widths if count * w // lanes >= MIN_ACCUMULATORS), widths[-1])
    most = max(1, vector_registers(vector_width) // 2 // (count * width // lanes))
    return width, max(r for r in range(1, min(batch, most) + 1) if batch % r == 0)


def _macs(stages) -> int:
    """Multiply-adds of the task's reductions."""
    total = 0
    for st in stages:
        if st.is_reduction:
            n = 1
            for ax in list(st.op.axes) + list(st.op.reduce_axes):
                n *= ax.extent
            total += n
    return total


def _register_tile(b, gates: Stage, lanes: int, rows: int):
    """The gates stage's loops at its attach point (region: one direction, all batch rows and gates, W columns):
    blocks of `rows` batch rows, the reduction (inner part unrolled), then the block's rows, gates, column vectors
    (unrolled) and lanes."""
    name = gates.name
    b.add(Split(name, "j", (rows,)))
    b.add(Split(name, "l", (lanes,)))
    reduce = ["rk"]
    units = gates.op.reduce_axes[0].extent
    if units % REDUCE_UNROLL == 0 and units >= 2 * REDUCE_UNROLL:
        b.add(Split(name, "rk", (REDUCE_UNROLL,)))
        reduce = ["rk.0", "rk.1"]
    b.add(Reorder(name, ("i", "j.0", *reduce, "j.1", "k", "l.0", "l.1")))
    for it in reduce[1:] + ["j.1", "k", "l.0"]:
        b.add(Annotate(name, it, "unroll"))
    b.add(Annotate(name, "l.1", "vectorize"))


def _schedule_root_stage(b, st: Stage, lanes: int, vector_width: int, parallel: bool):
    """A GRU's z, r gates over every column (register tiles in a cache stage, tiles of directions x columns in
    parallel), or its reset-gated state (lanes vectorized where the units divide into them)."""
    if st.is_reduction:
        _, batch, _, padded = st.op.shape
        width, rows = _tile(st, padded, batch, lanes, vector_width)
        b.add(CacheWrite(st.name))
        b.add(Split(st.name, "l", (width,)))
        b.add(Reorder(st.name, ("i", "l.0", "j", "k", "l.1")))
        b.add(Fuse(st.name, ("i", "l.0")))
        if parallel:
            b.add(Annotate(st.name, "i@l.0", "parallel"))
        b.add(ComputeAt(st.name + ".local", st.name, "i@l.0"))
        b.add(Annotate(st.name, "l.1", "vectorize"))
        _register_tile(b, b.stage(st.name + ".local"), lanes, rows)
        return
    units = st.op.shape[-1]
    if units % lanes == 0:
        b.add(Split(st.name, "k", (lanes,)))
        b.add(Annotate(st.name, "k.1", "vectorize"))

"""Default schedule rule for matmul (nn.matmul, both operands at least 2-D): a register tile of rows x vectors.

out[.., m, n] = sum_k a[.., m, k] * b[.., k, n]. The generic anchor rule of default_schedule.py tiles one output
row by up to 16 vectors of columns: each FMA then loads its own vector of b, and a row of b (N columns) is
streamed from L2 per output row. Here the tile is ROWS rows x COLS vectors of `lane` columns (the
hand-written GEMM micro-kernel): per reduction step, COLS vector loads of b and ROWS broadcasts of a feed
ROWS x COLS FMAs into accumulators that stay in registers; the reduction loop is outside the tile (unrolled by
REDUCE_UNROLL) and the epilogue (bias, residual, GELU, scale, mask: whatever the fusion put after the matmul) is
computed on the tile right after it, from registers. The parallel loop runs over batch x column blocks x row
blocks (column blocks outside: consecutive row blocks of one thread reuse the same panel of b from cache).

ROWS divides M. When COLS x lane divides N no loop needs a tail guard; when no such tile exists (N = 1000, 6625,
8210 columns) the tile still applies with a partial last column tile: lowering versions the guard of its split
(compiler/lower.py), so every full tile runs unguarded and vectorized, and the anchor's last tile is clamped to end
at column N (it overlaps the one before). A packed weight is then padded with zero columns to whole blocks
(compiler/passes/layout.py), so that every block is a contiguous panel.
"""
from __future__ import annotations

from relayish import te
from relayish.ops.qnn import QMATMUL_PACK_TAG

from .recurrent_schedule import PARALLEL_MACS
from .registers import matmul_accumulators, vector_registers
from .schedule import Annotate, CacheWrite, ComputeAt, Fuse, Reorder, Split, Stage

ROW_TILES = (8, 6, 4, 3, 2, 1)  # rows of a tile, preferred first among equal accumulator counts
COL_VECTORS = (4, 3, 2, 1)  # vectors of columns per tile row
REDUCE_UNROLL = 4
MIN_PARALLEL_TILES = 16  # prefer a smaller tile if the bigger one leaves fewer parallel iterations
MIN_ROW_TAIL_GAIN = 1.5  # a tile with a partial last row tile must have this many times the useful accumulators


def matmul_operands(anchor: Stage):
    """(a read, b read) of a matmul stage whose body is sum(a[.., m, k] * b[.., k, n]) (tag "matmul") or
    sum(a[.., m, k] * w[n // nb, k, n % nb]) (tag "matmul_pack", or "dense_pack": the same form) with m, n its
    last two axes, or qnn.matmul_pack's sum(dot4(a[.., m, 4k..4k+3], w[n // nb, k, n % nb])), else None (a 1-D
    operand, or not a matmul)."""
    body = anchor.op.body
    if anchor.op.tag not in ("matmul", "matmul_pack", "dense_pack", QMATMUL_PACK_TAG) or \
            not isinstance(body, te.Reduce) or len(anchor.op.axes) < 2:
        return None
    if anchor.op.tag == QMATMUL_PACK_TAG:
        return _int8_operands(anchor)
    reads = [r for r in te.walk(body.body) if isinstance(r, te.TensorRead)]
    if len(reads) != 2 or any(len(r.indices) < 2 for r in reads):
        return None
    a, b = reads
    k, m, n = body.axes[-1].var, anchor.op.axes[-2].var, anchor.op.axes[-1].var
    packed = anchor.op.tag != "matmul"
    if a.indices[-2:] != (m, k) or (b.indices[1] is not k if packed else b.indices[-2:] != (k, n)):
        return None
    return a, b


def _int8_operands(anchor: Stage):
    """(first data byte read, weight word read) of qnn.matmul_pack's sum(dot4(a[.., m, 4k + t], w[n // nb, k,
    n % nb])), else None."""
    dot = anchor.op.body.body
    if not (isinstance(dot, te.Call) and dot.name == "dot4_u8s8"):
        return None
    reads = [next((r for r in te.walk(arg) if isinstance(r, te.TensorRead)), None) for arg in dot.args]
    if any(r is None for r in reads):
        return None
    a, b = reads[0], reads[4]  # (int8 data is read through a bit flip: bitcast(x ^ -128))
    k, m = anchor.op.body.axes[-1].var, anchor.op.axes[-2].var
    if len(a.indices) < 2 or a.indices[-2] is not m or b.indices[1] is not k:
        return None
    return a, b


def streams_weight(anchor: Stage) -> bool:
    """A dense over one row (batch 1): every weight element is read once, so the kernel streams the weight from
    memory. Its column tile should divide the columns: MobileNetV2's 1000 outputs in tiles of 8 vectors (16
    tiles, the last one clamped to overlap the one before) ran the whole model 2-3% slower than tiles of 5 (25
    tiles, none clamped), weights cold inside the model, although alone, weights in cache, both ran alike (Zen 3,
    paired comparison in one process; the tuner had found the 5)."""
    return anchor.op.tag in ("dense_pack", QMATMUL_PACK_TAG) and anchor.op.shape[-2] == 1 and \
        all(d == 1 for d in anchor.op.shape[:-2])


def matmul_tile(m: int, n: int, batch: int, vector_width: int, block: int | None = None
                ) -> tuple[int, int, int] | None:
    """(rows, column vectors, lane) of the register tile for an [m, n] output repeated `batch` times, or None
    when n has no vector-sized divisor. Enough parallel tiles first, then most accumulators, then the fewest
    loads per FMA ((r + c) / (r c): r broadcasts and c vectors feed r c FMAs), then more rows. With 16
    registers the load count decides: BERT's 256-column matmuls took 8 x 1 (9 loads per 8 FMAs, load-bound)
    where 4 x 2 (6 per 8) runs the model 1.3x faster (Zen 3). `block`: the columns of a packed weight's block,
    which the tile's columns must be."""
    width = n if block is None else block
    lane = next((w for w in (vector_width, vector_width // 2) if w >= 4 and width % w == 0), None)
    if lane is None and block is None:
        # no vector divides n: the last column tile is partial (masked); fewer columns than a vector (N = 3) take
        # the narrowest vector that holds them
        lane = vector_width if n >= vector_width else max(4, 1 << (n - 1).bit_length())
    if lane is None:
        return None
    cols = COL_VECTORS if block is None else (block // lane,)
    vectors = -(-n // lane)
    # r x c accumulators, c loaded column vectors and one broadcast must fit in the register file
    most, regs = matmul_accumulators(vector_width), vector_registers(vector_width)
    fits = [(r, c) for r in ROW_TILES for c in cols
            if r <= m and c <= vectors and r * c <= most and r * c + c + 1 <= regs]
    whole_rows = [(r, c) for r, c in fits if m % r == 0]
    # whole tiles where some tile divides n
    options = [(r, c) for r, c in whole_rows if n % (c * lane) == 0] or whole_rows
    if not fits:
        return None

    def score(rc, useful=1.0):
        r, c = rc
        return (batch * -(-m // r) * -(-vectors // c) >= MIN_PARALLEL_TILES, r * c * useful, -(r + c) / (r * c), r)

    def useful(rc):  # the share of the tiles' rows and columns that are the output's (partial last tiles)
        r, c = rc
        return m / (-(-m // r) * r) * n / (-(-vectors // c) * c * lane)
    best = max(options, key=score) if options else None
    # rows that no good tile divides (M = 94 = 2 x 47: tiles of 2 rows, 4 accumulators): a partial last row tile
    # (its guard versioned away from the full tiles) when its useful accumulators beat the whole-row tile's
    partial = max(fits, key=lambda rc: score(rc, useful(rc)))
    if best is None or score(partial, useful(partial))[:2] > score(best, useful(best))[:2] and \
            partial[0] * partial[1] * useful(partial) >= MIN_ROW_TAIL_GAIN * best[0] * best[1] * useful(best):
        best = partial
    r, c = best
    return r, c, lane


def schedule_matmul(b, anchor: Stage, out: Stage | None, vector_width: int) -> bool:
    """Apply the matmul tile to `anchor` and `out` (the root output stage reading it elementwise, None if the
    anchor is itself the output) through the ScheduleBuilder `b`; False (nothing applied) if it does not fit."""
    if matmul_operands(anchor) is None:
        return False
    shape = anchor.op.shape
    if streams_weight(anchor):
        return False  # the generic rule's row tile, with an exact column tile
    if not anchor.is_output and (out is None or out.op.shape != shape):
        return False
    batch = 1
    for s in shape[:-2]:
        batch *= s
    block = None if anchor.op.tag == "matmul" else anchor.op.input_tensors[1].shape[-1]
    tile = matmul_tile(shape[-2], shape[-1], batch, vector_width, block)
    if tile is None:
        return False
    rows, cols, lane = tile
    if anchor.is_output:
        b.add(CacheWrite(anchor.name))
        out, anchor = anchor, b.stage(anchor.name + ".local")
    names = [i.name for i in out.leaves]
    *outer, m, n = names
    for st in (out, anchor):
        sp = [i.name for i in st.leaves if i.kind == "spatial"]
        b.add(Split(st.name, sp[-1], (lane,)))
    b.add(Split(out.name, f"{n}.0", (cols,)))
    b.add(Split(out.name, m, (rows,)))
    parallel = outer + [f"{n}.0.0", f"{m}.0"]
    b.add(Reorder(out.name, tuple(parallel + [f"{m}.1", f"{n}.0.1", f"{n}.1"])))
    b.add(Fuse(out.name, tuple(parallel)))
    fused = "@".join(parallel)
    if batch * shape[-2] * shape[-1] * anchor.op.body.axes[-1].extent >= PARALLEL_MACS:
        b.add(Annotate(out.name, fused, "parallel"))  # (a smaller one costs more in the fork/join than it saves)
    b.add(ComputeAt(anchor.name, out.name, fused))
    for it in (f"{m}.1", f"{n}.0.1"):
        b.add(Annotate(out.name, it, "unroll"))
    b.add(Annotate(out.name, f"{n}.1", "vectorize"))
    _tile_loops(b, b.stage(anchor.name))
    b.scheduled.update((out.name, anchor.name))
    return True


def _tile_loops(b, anchor: Stage):
    """The anchor's loops inside the parallel one: batch (extent 1 there), the reduction (inner part unrolled),
    then the tile: rows, column vectors (both unrolled), lanes (vectorized)."""
    sp = [i.name for i in anchor.leaves if i.kind == "spatial"]
    k = next(i.name for i in anchor.leaves if i.kind == "reduce")
    red = [k]
    if anchor.leaf_extents()[k] % REDUCE_UNROLL == 0:
        b.add(Split(anchor.name, k, (REDUCE_UNROLL,)))
        red = [f"{k}.0", f"{k}.1"]
    *outer, m, n_vec, n_lane = sp
    b.add(Reorder(anchor.name, tuple(outer + red + [m, n_vec, n_lane])))
    for it in red[1:] + [m, n_vec]:
        b.add(Annotate(anchor.name, it, "unroll"))
    b.add(Annotate(anchor.name, n_lane, "vectorize"))

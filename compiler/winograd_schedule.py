"""The default schedule of a Winograd convolution: its stages computed chunk by chunk of tiles, in cache.

relayish/ops/winograd.py writes F(m x m, 3 x 3) as five stages: pad, data_pack (the input transform, alpha^2
values per tile and channel), batch_gemm (alpha^2 matrix products over the channels), inverse (the output
transform) and the output, which reads the inverse back per pixel. Run one after another over the whole image,
the transformed input and the products go through memory: a 96 -> 24 channel 3x3 convolution over 160x160 with
m = 4 writes and reads back 22 MB of data_pack and 7 MB of products, and ran no faster than the direct
convolution (8.7 vs 8.8 ms, 2 threads, Zen 4), its products at 45 GFLOP/s per thread.

Here the output is computed in chunks of T tiles along a row of tiles (T x m columns, m rows), in parallel over
the chunks. At each chunk the inverse, the products and the input transform are computed into local buffers over
that chunk's tiles only (alpha^2 x T x channels floats of transformed input: 110 KB for 96 channels and T = 8),
so that they stay in the L2 cache; so is the padded input where chunks are whole parts of a row of tiles (its
rows of the padded input are then a box). Only the input and the output go through memory. The products run
in a register tile of T tiles x 2 (or 3) output-channel blocks, the reduction loops outside it: its accumulators
sit at fixed addresses of the chunk's buffer and LLVM keeps them in registers. Half the register file
(registers.conv_tile_budget without reuse: 16 accumulators of 32 zmm) is what that takes: with 2 x 14 (the
budget of a convolution's tile in a cache_write copy) it spilled, and 64 -> 64 channels over 112x112 ran 3.1 ms
against 2.7 unfused; with 2 x 7, 1.6-1.8 ms (Zen 4, 2 threads). The transforms unroll their tile position axes
so that their selects fold away. The 96 -> 24 convolution above: 3.2-4.1 ms, 1.6-2x faster than stage by stage;
64 -> 64 over 112x112: 1.5 ms against 2.4-2.7.

Every chunk reads all the transformed weights. Where they do not fit in L2 (MAX_WEIGHT_BYTES: 128 -> 128 channels
with m = 4, 2.4 MB; 256 -> 256 with m = 2, 4 MB), the stage-by-stage schedule, which reads them once per tile
block, was as fast or faster (1.03-1.05x), and is kept (default_schedule's generic rules); so is it for a
convolution whose smallest chunk's transformed input would not fit MAX_CHUNK_BYTES.
"""
from __future__ import annotations

from .registers import conv_tile_budget
from .schedule import Annotate, ComputeAt, Fuse, Reorder, Split

MAX_CHUNK_BYTES = 512 * 1024  # a chunk's transformed input (alpha^2 x T x channels floats): well inside L2
MAX_WEIGHT_BYTES = 1024 * 1024  # the transformed weights, read once per chunk: from L2 when they fit
MIN_CHUNK_TILES = 4  # fewer tiles per chunk than this: each transformed weight matrix would serve too few tiles
OC_BLOCKS_PER_TILE = (2, 3, 1)  # output-channel blocks per register tile, the first that divides the blocks


def winograd_stages(state) -> dict | None:
    """{"data_pack", "batch_gemm", "inverse", "output"} stages of a Winograd task whose output stage reads the
    inverse transform (with the gather and any elementwise epilogue inlined into it), else None."""
    by_tag = {st.op.tag: st for st in state.stages}
    names = {"data_pack": "winograd_data", "batch_gemm": "winograd_gemm", "inverse": "winograd_inverse"}
    found = {k: by_tag.get(tag) for k, tag in names.items()}
    if any(st is None or not st.loc.is_root for st in found.values()):
        return None
    outputs = [st for st in state.stages if st.is_output and st.loc.is_root]
    if len(outputs) != 1 or state.effective_consumers(found["inverse"]) != outputs:
        return None
    out = outputs[0]
    if len(out.op.shape) != 5 or [i.kind for i in out.leaves] != ["spatial"] * 5:
        return None
    found["output"] = out
    return found


def chunk_tiles(tiles_per_row: int, columns: int) -> int:
    """Tiles per chunk: a divisor of the row's tiles between columns / 2 and columns (the register tile's columns)
    when there is one, so that chunks never straddle rows; else `columns`."""
    if tiles_per_row <= columns:
        return tiles_per_row
    return next((t for t in range(columns, columns // 2, -1) if tiles_per_row % t == 0), columns)


def schedule_winograd(b, vw: int) -> bool:
    """Steps for a Winograd task (after default_schedule inlined the stages without buffers): see the module
    docstring. False (nothing added) for any other task, or one whose chunks would not fit."""
    stages = winograd_stages(b.state)
    if stages is None:
        return False
    data, gemm, inverse, out = (stages[k] for k in ("data_pack", "batch_gemm", "inverse", "output"))
    alpha, _, _, channel_blocks, lanes = data.op.shape
    oc_blocks, m = inverse.op.shape[0], inverse.op.shape[2]
    _, out_blocks, out_h, out_w, out_lanes = out.op.shape
    if out_blocks != oc_blocks or out_lanes != inverse.op.shape[4] or out_lanes % vw:
        return False
    tiles_per_row = -(-out_w // m)
    blocks = next(k for k in OC_BLOCKS_PER_TILE if oc_blocks % k == 0)
    columns = max(1, conv_tile_budget(vw, reuse=False) // (blocks * (out_lanes // vw)))
    tiles = chunk_tiles(tiles_per_row, columns)
    if tiles < min(MIN_CHUNK_TILES, tiles_per_row) or \
            alpha * alpha * tiles * channel_blocks * lanes * 4 > MAX_CHUNK_BYTES or \
            alpha * alpha * channel_blocks * lanes * oc_blocks * out_lanes * 4 > MAX_WEIGHT_BYTES:
        return False

    # the output: chunks of `tiles` tiles (m rows x tiles * m columns) in parallel
    i, j, k, l, v = (it.name for it in out.leaves)
    b.add(Split(out.name, k, (m,)))
    b.add(Split(out.name, l, (tiles, m)))
    outer = [i, f"{k}.0", f"{l}.0"]
    b.add(Reorder(out.name, tuple(outer + [j, f"{k}.1", f"{l}.1", f"{l}.2", v])))
    b.add(Fuse(out.name, tuple(outer)))
    chunk = "@".join(outer)
    b.add(Annotate(out.name, chunk, "parallel"))
    b.add(Annotate(out.name, v, "vectorize"))

    # the products in a register tile of `blocks` output-channel blocks x `tiles` tiles: the reduction loops
    # outside the tile, whose accumulators (at fixed addresses of the chunk's buffer) LLVM keeps in registers
    pad = b.state.producers(data)[0]  # (its padded rows are a box only if the chunk stays within one row)
    for st in (inverse, gemm, data) + ((pad,) if tiles_per_row % tiles == 0 else ()):
        b.add(ComputeAt(st.name, out.name, chunk))
    e, a, ko, p, o, rc, ri = (it.name for it in gemm.leaves)
    b.add(Split(gemm.name, ko, (blocks,)))
    b.add(Reorder(gemm.name, (e, a, f"{ko}.0", rc, ri, f"{ko}.1", p, o)))
    b.add(Annotate(gemm.name, f"{ko}.1", "unroll"))
    b.add(Annotate(gemm.name, p, "unroll"))
    b.add(Annotate(gemm.name, o, "vectorize"))

    # the transforms: tile positions unrolled (their selects fold), lanes vectorized
    ki, ti, y, x, lo = (it.name for it in inverse.leaves)
    b.add(Reorder(inverse.name, (ki, ti, y, x, lo)))
    b.add(Annotate(inverse.name, y, "unroll"))
    b.add(Annotate(inverse.name, x, "unroll"))
    b.add(Annotate(inverse.name, lo, "vectorize"))
    if pad.loc.is_at(out.name, chunk):
        b.add(Annotate(pad.name, pad.leaves[-1].name, "vectorize"))
        b.scheduled.add(pad.name)
    e, a, p, c, lo = (it.name for it in data.leaves)
    b.add(Reorder(data.name, (p, c, e, a, lo)))
    b.add(Annotate(data.name, e, "unroll"))
    b.add(Annotate(data.name, a, "unroll"))
    b.add(Annotate(data.name, lo, "vectorize"))
    b.scheduled.update((out.name, gemm.name, inverse.name, data.name))
    return True

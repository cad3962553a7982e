"""The vector register file that register tiles are sized for.

A register tile keeps its accumulators in vector registers; the operands each FMA step loads (a few weight
vectors, one broadcast) need registers too. A tile with more accumulators than the file holds spills on every
reduction step and runs at a fraction of the FMA peak (measured on a Zen 3 with AVX2: ResNet-18's convolutions
sized for 32 registers ran at ~40% of the peak on 16). The schedules only know the target's float32 lanes, and
on x86-64 that decides the file: AVX-512 (16 lanes) has 32 zmm registers, AVX2/AVX/SSE (8 or 4 lanes) 16.
"""
from __future__ import annotations


def vector_registers(vector_width: int) -> int:
    """Vector registers of an x86-64 target whose float32 vectors have `vector_width` lanes."""
    return 32 if vector_width >= 16 else 16


def conv_tile_budget(vector_width: int, reuse: bool) -> int:
    """Accumulator vectors of a convolution-like register tile. With 32 registers and a broadcast operand reused
    across the tile's output-channel blocks (`reuse`), the rest of the file holds those blocks' weight vectors and
    the broadcast: 28 (2 blocks x 14 columns); without reuse every FMA loads its broadcast and the loads need room
    to be scheduled ahead: 16. With 16 registers: 10 with reuse (2 blocks x 5 columns, + 2 weights + 1 broadcast),
    8 without. On a Zen 3 (2 threads, peak ~180 GFLOP/s), 2 x 5 against 2 x 4: 3x3 convolutions over 14 columns
    122 vs 111 GFLOP/s (256 channels) and 122 vs 104 (512), over 13 columns 107 vs 96; 2 x 6 and 2 x 7 ran
    slower (65-101: LLVM keeps the unrolled reduction's weights and broadcasts live and spills); over 7 columns
    2 x 4 stays better (8 columns computed, not 10: _column_tile weighs that)."""
    regs = vector_registers(vector_width)
    if regs < 32:
        return regs * 5 // 8 if reuse else regs // 2
    return regs - 4 if reuse else regs // 2


def pointwise_tile_budget(vector_width: int) -> int:
    """Accumulator vectors of a 1x1 convolution's tile of 3 output-channel blocks on a 16-register target: 12,
    the rest of the file holding the 3 blocks' weight vectors and the broadcast pixel (3 x 4). MobileNetV2's
    1x1 convolutions with 3 x 4 instead of 2 x 5 ran the whole model 2-3% faster (0.968, 0.983 paired, Zen 3);
    3 x 3 ran it 3% slower, and in 3x3 convolutions 12 accumulators spill (conv_tile_budget). The tuner's best
    records for MobileNetV2's 16->96 and 24->144 expansions were 3 x 4. The reduction stays unrolled."""
    return vector_registers(vector_width) - 4


def unrolled_reduce_budget(vector_width: int) -> int:
    """The most accumulator vectors a tile may have and still get its innermost reduction loop unrolled (default
    schedule's REDUCE_UNROLL): 16 of 32 registers (with a full file of accumulators LLVM rotates them through
    registers and spills), 10 of 16 (2 x 5 ran 122 GFLOP/s unrolled, 97 not, on a Zen 3)."""
    regs = vector_registers(vector_width)
    return regs // 2 if regs >= 32 else conv_tile_budget(vector_width, True)


def matmul_accumulators(vector_width: int) -> int:
    """Accumulator vectors of a matmul tile of rows x column vectors: at most 3/4 of the file, the rest holds the
    column vectors loaded per step and the broadcast row element (24 of 32; 12 of 16: 4 x 3, or 4 x 2 when the
    columns do not divide by 3; compiler/matmul_schedule.py chooses among them)."""
    return vector_registers(vector_width) * 3 // 4

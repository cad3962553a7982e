"""This machine's int8 dot-product peak (AVX-512 VNNI / AVX-VNNI vpdpbusd), measured with an llvmlite micro-kernel.

    python -m relayish_tools.bench.peak_int8 [--threads N ...] [--chains C] [--seconds S] [--asm]

The int8 twin of bench/peak.py: `chains` independent int32 accumulators, each a native vector (<16 x i32> with
AVX-512), and `acc_k = vpdpbusd(acc_k, x, w)` on all of them in a loop (compiler/codegen/intdot.py's emit_dot4, the
instruction of our int8 kernels: per lane, 4 uint8 x int8 products summed into the int32 accumulator). A chain
waits only for its own previous vpdpbusd, so with chains >= latency x pipes every pipe issues every cycle.

Figures count each multiply and each add: GOP/s = threads * iters * chains * lanes * 4 * 2 / seconds, the unit of
a kernel's "int8 GOP/s" (2 ops per multiply-accumulate, as GFLOP/s counts an FMA). A host without VNNI has no such
instruction: the command says so and measures nothing.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import os
import time

from llvmlite import ir

from compiler.codegen import TASK_FN_TYPE, emit_dot4, emit_fork_entry, host_vnni_lanes, ir_assembly, load_library, \
    pool_module
from compiler.registers import vector_registers

from .peak import cpu_info

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
ENTRY = "relayish_peak_int8"  # void relayish_peak_int8(i64 iters, i32* buf, i32 ntasks)


def default_chains(lanes: int) -> int:
    """As bench.peak: >= latency x pipes, within the register file with room for the two operands."""
    return min(16, vector_registers(lanes) - 4)


def int8_lanes() -> int | None:
    """int32 lanes of the widest vpdpbusd of the host (None: no VNNI)."""
    lanes = host_vnni_lanes()
    return max(lanes) if lanes else None


def _peak_module(chains: int, lanes: int) -> ir.Module:
    """The thread pool, a task running the vpdpbusd loop, and the entry that forks the tasks. buf (int32): [0,
    lanes) the data bytes (4 per lane), [lanes, 2 lanes) the weight words, then one vector of results per task."""
    module = pool_module("peak_int8")
    vty, bty = ir.VectorType(I32, lanes), ir.VectorType(I8, 4 * lanes)
    closure_ty = ir.LiteralStructType([I64, I32.as_pointer()])
    task = ir.Function(module, TASK_FN_TYPE, "peak_int8_task")
    task.linkage = "internal"
    closure, index, _ = task.args
    b = ir.IRBuilder(task.append_basic_block("entry"))
    cl = b.bitcast(closure, closure_ty.as_pointer())
    iters = b.load(b.gep(cl, [I32(0), I32(0)]))
    vbuf = b.bitcast(b.load(b.gep(cl, [I32(0), I32(1)])), vty.as_pointer())
    data = b.bitcast(b.load(b.gep(vbuf, [I32(0)])), bty)
    # the 4 data bytes of each lane as 4 <lanes x i8> vectors (emit_dot4 recombines them into one word)
    a = [b.shuffle_vector(data, ir.Constant(bty, None), ir.Constant(ir.VectorType(I32, lanes),
                                                                     [4 * j + t for j in range(lanes)]))
         for t in range(4)]
    w = b.load(b.gep(vbuf, [I32(1)]))
    init = [b.add(w, ir.Constant(vty, [k] * lanes)) for k in range(chains)]  # distinct chains: no CSE
    pre = b.block
    loop, done = task.append_basic_block("loop"), task.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64, "i")
    i.add_incoming(I64(0), pre)
    accs = []
    for k in range(chains):
        phi = b.phi(vty, f"acc{k}")
        phi.add_incoming(init[k], pre)
        accs.append(phi)
    new = [emit_dot4(b, acc, a, w, lanes) for acc in accs]
    for phi, value in zip(accs, new):
        phi.add_incoming(value, loop)
    nxt = b.add(i, I64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, iters), loop, done)
    b.position_at_end(done)
    total = new[0]
    for v in new[1:]:
        total = b.add(total, v)
    b.store(total, b.gep(vbuf, [b.add(index, I32(2))]))
    b.ret_void()
    emit_fork_entry(module, ENTRY, task, closure_ty)
    return module


def peak_assembly(chains: int | None = None) -> str:
    """Host assembly of the kernel (its loop: `chains` vpdpbusd on registers)."""
    lanes = int8_lanes()
    if lanes is None:
        raise RuntimeError("the host has no VNNI (avx512vnni or avxvnni): no vpdpbusd to measure")
    return ir_assembly(_peak_module(default_chains(lanes) if chains is None else chains, lanes))


@functools.lru_cache(maxsize=None)
def _library(chains: int, lanes: int):
    return load_library(_peak_module(chains, lanes), "peak_int8", ENTRY,
                        [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32])


def measure_int8_peak(threads: int = 1, chains: int | None = None, seconds: float = 0.05, repeat: int = 7) -> float:
    """int8 GOP/s (2 ops per uint8 x int8 multiply-accumulate) of `threads` threads together, best of `repeat`
    runs of about `seconds` each. RuntimeError on a host without VNNI."""
    import numpy as np
    lanes = int8_lanes()
    if lanes is None:
        raise RuntimeError("the host has no VNNI (avx512vnni or avxvnni): no vpdpbusd to measure")
    chains = default_chains(lanes) if chains is None else chains
    if threads < 1 or chains < 1:
        raise ValueError(f"measure_int8_peak: threads and chains must be >= 1, got {threads}, {chains}")
    lib = _library(chains, lanes)
    lib.relayish_set_num_threads(threads)
    buf = np.ones(lanes * (2 + threads) + 16, np.int32)
    offset = (-buf.ctypes.data % 64) // 4  # whole-vector loads and stores: 64-byte aligned
    ptr = buf[offset:].ctypes.data
    ops_per_iter = threads * chains * lanes * 4 * 2

    def run(iters):
        t0 = time.perf_counter()
        lib.relayish_peak_int8(iters, ptr, threads)
        return time.perf_counter() - t0

    run(1000)  # starts the pool's workers
    iters = 10000
    while run(iters) < seconds / 4:
        iters *= 2
    iters = int(iters * seconds / max(run(iters), 1e-6))
    best = min(run(iters) for _ in range(repeat))
    return ops_per_iter * iters / best / 1e9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayish_tools.bench.peak_int8", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all cores)")
    parser.add_argument("--chains", type=int, default=None, help="independent accumulators (default: 16)")
    parser.add_argument("--seconds", type=float, default=0.05, help="length of one timed run")
    parser.add_argument("--asm", action="store_true", help="print the kernel's inner loop assembly")
    args = parser.parse_args(argv)
    info = cpu_info()
    lanes = int8_lanes()
    print(f"cpu {info['cpu']} ({info['model']}), {info['cores']} cores, vpdpbusd lanes {lanes}, "
          f"features {' '.join(info['features'])}")
    if lanes is None:
        print("no VNNI (avx512vnni / avxvnni) on this host: int8 kernels use the widening fallback; no peak to measure")
        return 1
    chains = default_chains(lanes) if args.chains is None else args.chains
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.asm:
        print("\n".join(l for l in peak_assembly(chains).splitlines() if "vpdpbusd" in l or l.strip().startswith("j")))
    for n in args.threads or sorted({1, info["cores"]}):
        gops = measure_int8_peak(n, chains, args.seconds)
        print(f"threads {n}: {gops:8.1f} int8 GOP/s total, {gops / n:8.1f} per core ({chains} chains x {lanes} "
              f"lanes x 4 bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

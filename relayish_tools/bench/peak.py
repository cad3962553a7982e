"""This machine's fp32 FMA peak, measured with an llvmlite micro-kernel (not quoted from a data sheet).

    python -m relayish_tools.bench.peak [--threads N ...] [--chains C] [--seconds S]

The kernel keeps `chains` independent accumulators, each a native vector (<16 x float> with AVX-512), and runs
`acc_k = fma(acc_k, x, y)` on all of them in a loop. One FMA's result is needed by the next FMA of its chain only,
so with chains >= latency x FMA pipes (4 x 2 on Zen 4/5, 4 x 2 on Ice Lake) every pipe issues every cycle; the
chains must also fit in the register file (32 zmm, 16 ymm) or the loop spills. Nothing is fast-math: LLVM cannot fold or
reassociate the chains, and it keeps one `vfmadd` per FMA (checked by `peak_assembly`).

With several threads the same loop runs once per thread as tasks of our own thread pool (relayish_parallel_for),
so the figure is what our kernels can reach through it: GFLOP/s = threads * iters * chains * lanes * 2 / seconds.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import os
import time

from llvmlite import ir

from compiler.codegen import (TASK_FN_TYPE, emit_fork_entry, host_target, ir_assembly, load_library, pool_module,
                              vector_width)
from compiler.registers import vector_registers
from runtime.aligned import aligned_empty

I32, I64, F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()

def default_chains(lanes: int) -> int:
    """Accumulator chains: >= the 4-cycle latency x 2 pipes, and within the register file with room for x and y
    (16 of 32 zmm; 12 of 16 ymm: 16 chains spill there and read half the peak, measured on a Zen 3)."""
    return min(16, vector_registers(lanes) - 4)

ENTRY = "relayish_peak"  # void relayish_peak(i64 iters, float* buf, i32 ntasks)


def _peak_module(chains: int, lanes: int) -> ir.Module:
    """The module: the thread pool, a task running the FMA loop, and the exported entry that forks the tasks.

    buf layout (floats): [0, lanes) = x, [lanes, 2 lanes) = y, then one vector of results per task (the sum of its
    accumulators, stored so that the loop is not dead code)."""
    module = pool_module("peak")  # the header and the thread pool, no kernels
    vty = ir.VectorType(F32, lanes)
    fma = ir.Function(module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{lanes}f32")
    closure_ty = ir.LiteralStructType([I64, F32.as_pointer()])

    task = ir.Function(module, TASK_FN_TYPE, "peak_task")
    task.linkage = "internal"
    closure, index, _ = task.args
    b = ir.IRBuilder(task.append_basic_block("entry"))
    cl = b.bitcast(closure, closure_ty.as_pointer())
    iters = b.load(b.gep(cl, [I32(0), I32(0)]))
    buf = b.load(b.gep(cl, [I32(0), I32(1)]))
    vbuf = b.bitcast(buf, vty.as_pointer())
    x = b.load(b.gep(vbuf, [I32(0)]))
    y = b.load(b.gep(vbuf, [I32(1)]))
    # each chain starts from a different value so that no two chains are the same computation (CSE)
    init = [b.fadd(x, ir.Constant(vty, [float(k)] * lanes)) for k in range(chains)]
    pre = b.block
    loop = task.append_basic_block("loop")
    done = task.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64, "i")
    i.add_incoming(I64(0), pre)
    accs = []
    for k in range(chains):
        phi = b.phi(vty, f"acc{k}")
        phi.add_incoming(init[k], pre)
        accs.append(phi)
    new = [b.call(fma, [acc, x, y]) for acc in accs]
    for phi, value in zip(accs, new):
        phi.add_incoming(value, loop)
    nxt = b.add(i, I64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, iters), loop, done)
    b.position_at_end(done)
    total = new[0]
    for v in new[1:]:
        total = b.fadd(total, v)
    b.store(total, b.gep(vbuf, [b.add(index, I32(2))]))
    b.ret_void()

    emit_fork_entry(module, ENTRY, task, closure_ty)
    return module


def peak_assembly(chains: int | None = None) -> str:
    """Host assembly of the peak kernel (its loop should be `chains` vfmadd on registers, no memory operand)."""
    lanes = vector_width("float32")
    return ir_assembly(_peak_module(default_chains(lanes) if chains is None else chains, lanes))


@functools.lru_cache(maxsize=None)
def _library(chains: int):
    """Build and load the peak library once per chain count; returns (ctypes lib, lanes)."""
    lanes = vector_width("float32")
    lib = load_library(_peak_module(chains, lanes), "peak", ENTRY, [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32])
    return lib, lanes


def measure_peak(threads: int = 1, chains: int | None = None, seconds: float = 0.05, repeat: int = 7) -> float:
    """fp32 FMA GFLOP/s of `threads` threads together (best of `repeat` runs of about `seconds` each); chains:
    default_chains of the host's vectors."""
    chains = default_chains(vector_width("float32")) if chains is None else chains
    if threads < 1 or chains < 1:
        raise ValueError(f"measure_peak: threads and chains must be >= 1, got {threads}, {chains}")
    lib, lanes = _library(chains)
    lib.relayish_set_num_threads(threads)
    buf = aligned_empty(lanes * (2 + threads), "float32")  # vector loads and stores of whole zmm: 64-aligned
    buf[:] = 0.5  # x = y = 0.5: the accumulators stay finite
    ptr = buf.ctypes.data
    flops_per_iter = threads * chains * lanes * 2

    def run(iters):
        t0 = time.perf_counter()
        lib.relayish_peak(iters, ptr, threads)
        return time.perf_counter() - t0

    run(1000)  # starts the pool's workers
    iters = 10000
    while run(iters) < seconds / 4:  # calibrate: about `seconds` per timed run
        iters *= 2
    iters = int(iters * seconds / max(run(iters), 1e-6))
    best = min(run(iters) for _ in range(repeat))
    return flops_per_iter * iters / best / 1e9


def cpu_info() -> dict:
    """name (LLVM's CPU name and the /proc/cpuinfo model), features that matter for fp32 SIMD, cores usable."""
    t = host_target()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    wanted = ("avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma", "avx512bf16", "avx512vnni")
    feats = [f[1:] for f in t["features"].split(",") if f.startswith("+") and f[1:] in wanted]
    return {"cpu": t["cpu"], "model": model, "features": feats, "lanes": vector_width("float32"),
            "cores": len(os.sched_getaffinity(0))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayish_tools.bench.peak", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all cores)")
    parser.add_argument("--chains", type=int, default=None,
                        help="independent FMA chains (accumulators; default: 16, 12 with 16 vector registers)")
    parser.add_argument("--seconds", type=float, default=0.05, help="length of one timed run")
    parser.add_argument("--asm", action="store_true", help="print the kernel's inner loop assembly")
    args = parser.parse_args(argv)
    info = cpu_info()
    args.chains = default_chains(info["lanes"]) if args.chains is None else args.chains
    print(f"cpu {info['cpu']} ({info['model']}), {info['cores']} cores, fp32 lanes {info['lanes']}, "
          f"features {' '.join(info['features'])}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.asm:
        asm = peak_assembly(args.chains)
        print("\n".join(l for l in asm.splitlines() if "vfmadd" in l or l.strip().startswith("j")))
    threads = args.threads or sorted({1, info["cores"]})
    for n in threads:
        gflops = measure_peak(n, args.chains, args.seconds)
        print(f"threads {n}: {gflops:8.1f} GFLOP/s total, {gflops / n:8.1f} GFLOP/s per core "
              f"({args.chains} chains x {info['lanes']} lanes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

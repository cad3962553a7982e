"""This machine's read bandwidth per working-set size, measured with an llvmlite streaming kernel.

    python -m relayish_tools.bench.bandwidth [--threads N] [--sizes 256K 1M 2M 8M 64M] [--accumulators A] [--asm]

The roof of a roofline: a kernel of arithmetic intensity AI (FLOPs per byte it must move) can reach at most
min(FMA peak, AI x bandwidth), where the bandwidth is that of the level of the memory hierarchy its working set
fits in. The FMA peak comes from bench/peak.py; this module measures the bandwidth side the same way: a kernel
generated with llvmlite, run on our own thread pool (relayish_parallel_for), so the figure is what our kernels can
reach through it.

The kernel. The buffer of nbytes (64-byte aligned floats) is cut into one contiguous chunk per thread; task t sums
its chunk into `accumulators` independent native vectors (<16 x float> with AVX-512), acc_k += v[i + k], so the
loop is bound by loads, not by the fadd latency of one chain. It reads its chunk `reps` times in a row (warm: the
figure is that of a working set of nbytes, whether it sits in L2, L3 or DRAM), then stores the sum of its
accumulators (so the loads are not dead code). Nothing is fast-math: LLVM keeps every fadd and every load
(checked by `bandwidth_assembly`), and `stream_sums` returns the partial sums so that a test can compare them with
numpy's sums of the same chunks. GB/s = reps * nbytes / seconds (1 GB = 1e9 bytes).
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import os
import re
import time

import numpy as np
from llvmlite import ir

from compiler.codegen import TASK_FN_TYPE, emit_fork_entry, ir_assembly, load_library, pool_module, vector_width
from runtime.aligned import aligned_empty

from .peak import cpu_info

I32, I64, F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
ALIGN = 64  # bytes: buffer and chunks start on a cache line, so every vector load is aligned and whole-line
DEFAULT_ACCUMULATORS = 8  # 2 loads/cycle x fadd latency (2-4 cycles) needs >= 8 chains; 4 to 16 measure alike
DEFAULT_SIZES = ("256K", "1M", "2M", "8M", "64M")
ENTRY = "relayish_bandwidth"  # void relayish_bandwidth(i64 reps, i64 vecs_per_task, float* buf, float* out, i32 n)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _task_function(module: ir.Module, accumulators: int, lanes: int, closure_ty: ir.Type) -> ir.Function:
    """task(closure, t, ntasks): reads vectors [t * n, (t + 1) * n) of buf `reps` times into `accumulators`
    chains, then stores their sum at out[t] (one vector). Invariant: n is a multiple of `accumulators`."""
    vty = ir.VectorType(F32, lanes)
    task = ir.Function(module, TASK_FN_TYPE, "bandwidth_task")
    task.linkage = "internal"
    closure, index, _ = task.args
    b = ir.IRBuilder(task.append_basic_block("entry"))
    cl = b.bitcast(closure, closure_ty.as_pointer())
    reps, nvec, buf, out = (b.load(b.gep(cl, [I32(0), I32(k)])) for k in range(4))
    base = b.gep(b.bitcast(buf, vty.as_pointer()), [b.mul(b.sext(index, I64), nvec)])
    zero = ir.Constant(vty, [0.0] * lanes)
    entry = b.block
    rep_head, vec_loop, rep_tail, done = (task.append_basic_block(n) for n in ("rep", "vec", "rep_next", "done"))
    b.branch(rep_head)

    # for r in range(reps): for i in range(0, nvec, accumulators): acc_k += base[i + k]
    b.position_at_end(rep_head)
    r = b.phi(I64, "r")
    r.add_incoming(I64(0), entry)
    outer = [b.phi(vty, f"acc{k}.rep") for k in range(accumulators)]
    for phi in outer:
        phi.add_incoming(zero, entry)
    b.branch(vec_loop)
    b.position_at_end(vec_loop)
    i = b.phi(I64, "i")
    i.add_incoming(I64(0), rep_head)
    inner = [b.phi(vty, f"acc{k}") for k in range(accumulators)]
    for phi, start in zip(inner, outer):
        phi.add_incoming(start, rep_head)
    sums = []
    for k, acc in enumerate(inner):
        load = b.load(b.gep(base, [b.add(i, I64(k))]))
        load.align = ALIGN
        sums.append(b.fadd(acc, load))
    for phi, value in zip(inner, sums):
        phi.add_incoming(value, vec_loop)
    i_next = b.add(i, I64(accumulators))
    i.add_incoming(i_next, vec_loop)
    b.cbranch(b.icmp_signed("<", i_next, nvec), vec_loop, rep_tail)

    b.position_at_end(rep_tail)
    for phi, value in zip(outer, sums):
        phi.add_incoming(value, rep_tail)
    r_next = b.add(r, I64(1))
    r.add_incoming(r_next, rep_tail)
    b.cbranch(b.icmp_signed("<", r_next, reps), rep_head, done)

    b.position_at_end(done)
    total = sums[0]
    for v in sums[1:]:
        total = b.fadd(total, v)
    b.store(total, b.gep(b.bitcast(out, vty.as_pointer()), [index]), align=ALIGN)
    b.ret_void()
    return task


def _bandwidth_module(accumulators: int, lanes: int) -> ir.Module:
    """The module: the thread pool (pool_module), the streaming task, and the exported entry
    that forks one task per chunk and lets the pool go idle."""
    module = pool_module("bandwidth")
    closure_ty = ir.LiteralStructType([I64, I64, F32.as_pointer(), F32.as_pointer()])
    emit_fork_entry(module, ENTRY, _task_function(module, accumulators, lanes, closure_ty), closure_ty)
    return module


def bandwidth_assembly(accumulators: int = DEFAULT_ACCUMULATORS) -> str:
    """Host assembly of the streaming kernel (its inner loop should be `accumulators` vector loads, or a
    multiple if LLVM unrolls, each folded into a vaddps or a vmovaps/vmovups)."""
    return ir_assembly(_bandwidth_module(accumulators, vector_width("float32")))


def inner_loop_vector_loads(asm: str) -> list[str]:
    """The vector loads (an instruction on a vector register with a memory operand) of bandwidth_task's
    innermost loop: the lines between the last loop label of the function and its backward jump."""
    body = asm.split("bandwidth_task:", 1)[1].split(".Lfunc_end", 1)[0].splitlines()
    jumps = [k for k, line in enumerate(body) if re.match(r"\s+j\w+\s+(\.LBB\S+)", line)]
    labels = {line.split(":")[0]: k for k, line in enumerate(body) if re.match(r"\.LBB\S+:", line)}
    loops = [(labels[target], k) for k in jumps
             for target in [body[k].split()[-1]] if target in labels and labels[target] < k]
    if not loops:
        return []
    start, end = min(loops, key=lambda span: span[1] - span[0])  # the innermost loop: the shortest back edge
    return [line.strip() for line in body[start:end] if _is_vector_load(line)]


def _is_vector_load(line: str) -> bool:
    """An AT&T-syntax AVX instruction with a memory source and a vector register destination (the last operand),
    e.g. `vaddps -448(%r11), %zmm0, %zmm0` or `vmovups (%rax), %zmm1`."""
    mnemonic, _, operands = line.strip().replace("\t", " ").partition(" ")
    destination = operands.rsplit(",", 1)[-1]
    return (mnemonic.startswith("v") and "(" in operands and "(" not in destination
            and re.search(r"%[xyz]mm\d+", destination) is not None)


@functools.lru_cache(maxsize=None)
def _library(accumulators: int):
    """Build and load the streaming library once per accumulator count; returns (ctypes lib, lanes)."""
    lanes = vector_width("float32")
    lib = load_library(_bandwidth_module(accumulators, lanes), "bandwidth", ENTRY,
                       [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32])
    return lib, lanes


def granule(threads: int, accumulators: int = DEFAULT_ACCUMULATORS) -> int:
    """The bytes nbytes must be a multiple of: one accumulator block (accumulators x one vector) per thread."""
    return threads * accumulators * vector_width("float32") * 4


def _check(nbytes: int, threads: int, accumulators: int, caller: str) -> None:
    if threads < 1:
        raise ValueError(f"{caller}: threads must be >= 1, got {threads}")
    if accumulators < 1:
        raise ValueError(f"{caller}: accumulators must be >= 1, got {accumulators}")
    unit = granule(threads, accumulators)
    if nbytes <= 0 or nbytes % unit:
        raise ValueError(f"{caller}: nbytes must be a positive multiple of {unit} (threads {threads} x "
                         f"{accumulators} accumulators x one {vector_width('float32') * 4}-byte vector), "
                         f"got {nbytes}")


class _Stream:
    """One buffer and its runner: run(reps) reads the buffer reps times on `threads` threads, in seconds."""

    def __init__(self, values: np.ndarray, threads: int, accumulators: int):
        self.lib, lanes = _library(accumulators)
        self.fn = getattr(self.lib, ENTRY)
        self.buf = values if values.ctypes.data % ALIGN == 0 else _aligned_copy(values)
        self.out = aligned_empty((threads, lanes), "float32")
        self.threads = threads
        self.vecs_per_task = values.size // lanes // threads

    def run(self, reps: int) -> float:
        self.lib.relayish_set_num_threads(self.threads)
        t0 = time.perf_counter()
        self.fn(reps, self.vecs_per_task, self.buf.ctypes.data, self.out.ctypes.data, self.threads)
        return time.perf_counter() - t0


def _aligned_copy(values: np.ndarray) -> np.ndarray:
    out = aligned_empty(values.shape, "float32")
    out[...] = values
    return out


def stream_sums(values: np.ndarray, threads: int, accumulators: int = DEFAULT_ACCUMULATORS) -> np.ndarray:
    """Run the streaming kernel once over `values` (1-D float32) and return its stored partial sums, shape
    (threads, lanes): row t is the lane-wise sum of chunk t (values split in `threads` equal contiguous chunks)."""
    values = np.asarray(values)
    if values.dtype != np.float32 or values.ndim != 1:
        raise ValueError(f"stream_sums: values must be a 1-D float32 array, got {values.ndim}-D {values.dtype}")
    _check(values.nbytes, threads, accumulators, "stream_sums")
    stream = _Stream(np.ascontiguousarray(values), threads, accumulators)
    stream.run(1)
    return stream.out.copy()


def measure_bandwidth(nbytes: int, threads: int, repeat: int = 7, seconds: float = 0.02,
                      accumulators: int = DEFAULT_ACCUMULATORS) -> float:
    """Read bandwidth in GB/s (median of `repeat` runs of about `seconds` each) of `threads` threads streaming
    a warm buffer of nbytes, each its own contiguous nbytes / threads. nbytes must be a multiple of granule()."""
    _check(nbytes, threads, accumulators, "measure_bandwidth")
    if repeat < 1 or not seconds > 0:
        raise ValueError(f"measure_bandwidth: repeat must be >= 1 and seconds > 0, got {repeat}, {seconds}")
    values = aligned_empty(nbytes // 4, "float32")
    values[:] = 1.0  # sums stay finite (and exact up to 2^24 per lane): no denormal or inf slow paths
    stream = _Stream(values, threads, accumulators)
    stream.run(1)  # starts the pool's workers, faults the pages in, and warms the caches
    reps = 1
    while (elapsed := stream.run(reps)) < seconds / 4:  # calibrate: about `seconds` per timed run
        reps *= 2
    reps = max(1, round(reps * seconds / max(elapsed, 1e-9)))
    times = [stream.run(reps) for _ in range(repeat)]
    return reps * nbytes / float(np.median(times)) / 1e9


def round_to_granule(nbytes: int, threads: int, accumulators: int = DEFAULT_ACCUMULATORS) -> int:
    """nbytes rounded to the nearest positive multiple of granule(threads) (for measuring a task's working set)."""
    unit = granule(threads, accumulators)
    return max(unit, round(nbytes / unit) * unit)


def parse_size(text: str) -> int:
    """'256K' / '1M' / '64M' / '4096' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"parse_size: expected a size like 256K, 2M or 4096, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def format_size(nbytes: int) -> str:
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]} {unit}iB"
    return f"{nbytes} B"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayish_tools.bench.bandwidth", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all cores)")
    parser.add_argument("--sizes", nargs="*", default=list(DEFAULT_SIZES),
                        help="working-set sizes, e.g. 256K 2M (rounded to a multiple of granule())")
    parser.add_argument("--accumulators", type=int, default=DEFAULT_ACCUMULATORS,
                        help="independent vector accumulators per thread")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per figure (median reported)")
    parser.add_argument("--seconds", type=float, default=0.02, help="length of one timed run")
    parser.add_argument("--asm", action="store_true", help="print the vector loads of the kernel's inner loop")
    args = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in args.sizes]
    except ValueError as e:
        parser.error(str(e))
    info = cpu_info()
    threads = args.threads or sorted({1, info["cores"]})
    print(f"cpu {info['cpu']} ({info['model']}), {info['cores']} cores, fp32 lanes {info['lanes']}, "
          f"{args.accumulators} accumulators, load average {os.getloadavg()[0]:.2f}")
    if args.asm:
        print("\n".join(inner_loop_vector_loads(bandwidth_assembly(args.accumulators))))
    print(f"{'working set':>12} " + " ".join(f"{f'{n} thread' + 's' * (n > 1):>12}" for n in threads)
          + "   (GB/s, read)")
    for nbytes in sizes:
        cells = []
        for n in threads:
            size = round_to_granule(nbytes, n, args.accumulators)
            cells.append(f"{measure_bandwidth(size, n, args.repeat, args.seconds, args.accumulators):12.1f}")
        print(f"{format_size(nbytes):>12} " + " ".join(cells), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

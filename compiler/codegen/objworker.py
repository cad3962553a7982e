"""LLVM IR text -> optimized host object code, in this process or in worker processes (parallel codegen).

llvmlite serializes every call into LLVM behind one process-wide lock, so threads cannot optimize two modules at
once; worker processes can. A worker is this file run as a script (`python objworker.py`): it imports llvmlite only,
never the relayish packages nor the caller's __main__ (which multiprocessing's spawn would re-run). Protocol on its
stdin/stdout, one job at a time:

    request:  4-byte big-endian length + JSON {"target": {triple, cpu, features}, "opt_level": int}
              4-byte length + the module's LLVM IR text (UTF-8)
    reply:    b"O" or b"E", 4-byte length + object code (O) or an error message (E)

`optimize` is the one definition of the optimization pipeline, used in-process by library.py as well.
"""
from __future__ import annotations

import json
import re
import struct
import sys
import time

import llvmlite.binding as llvm

_MACHINES: dict = {}

# LLVM's loop vectorizer miscompiles loops with data-dependent loads when it tunes for Zen 4/5: RoiAlign's
# gather_elements kernel (its indices loaded from int64 tensors, clamped, then used to load floats) computed wrong
# values compiled for znver4 or znver5, right ones for x86-64-v4 with the same features, for znver3, and for znver5
# with the loop vectorizer off (llvmlite 0.50). On those CPUs a module that loads integers (index tensors) is
# optimized without the loop vectorizer; the float kernels, whose hot loops the schedules vectorize themselves and
# which lost ~5% on ResNet-18 without it, keep it.
NO_LOOP_VECTORIZER_CPUS = ("znver4", "znver5")
_INTEGER_LOAD = re.compile(r"= load i\d+,")


def loop_vectorizer(text: str, cpu: str) -> bool:
    """Whether the loop vectorizer may run on this module's IR text for this CPU (see NO_LOOP_VECTORIZER_CPUS)."""
    return cpu not in NO_LOOP_VECTORIZER_CPUS or _INTEGER_LOAD.search(text) is None


# What an opt_level (compile_model's, 3 by default; the tuner's builds use 3) asks of LLVM: the level of the IR
# pipeline and of the code generator. Above 2 they stop rising: the IR is LLVM's O2 pipeline and the code generator
# runs at O1. On the tuner's candidate set (bench.build_rate: 137 kernels of ResNet-18 and BERT) O3 + O3 took
# 1.25-1.4x the LLVM CPU time of O2 + O1, and six models compiled both ways (ResNet-18, BERT, MobileNetV2, CRNN,
# ShuffleNet v1 g4, PP-OCRv6 rec) gave bit-identical outputs at the same speed (paired ratios 0.98-1.01, Zen 4).
# Our kernels arrive scheduled, vectorized and unrolled: O3's extra IR passes and the code generator's O2/O3 found
# nothing left to gain. O1's IR pipeline (no vectorizers) ran some models up to 4% slower.
MAX_IR_LEVEL = 2
MAX_CODEGEN_LEVEL = 1

# LLVM options of every process that optimizes our modules. LLVM's partial unrolling of loops left rolled (on x86
# it unrolls a loop of unknown or large trip count by a factor its cost model picks) is off: the schedules decide
# what to unroll (their unroll annotations and auto_unroll_max_step), and LLVM still unrolls small loops of known
# trip count in full. On the tuner's candidate set it took a tenth of the LLVM time per build (bench.build_rate:
# 21.4 -> 19.0 s, code generation 6.4 -> 4.8 s), and nine models compiled with and without it gave bit-identical
# outputs at the same speed (paired ratios 0.98-1.04, their intervals around 1; Zen 4).
LLVM_OPTIONS = ("-unroll-allow-partial=false",)
_options_set = False


def llvm_levels(opt_level: int) -> tuple[int, int]:
    """(IR pipeline level, code generator level) for an opt_level 0-3."""
    return min(opt_level, MAX_IR_LEVEL), min(opt_level, MAX_CODEGEN_LEVEL)


def optimize(mod, machine, opt_level: int, loop_vectorize: bool = True) -> None:
    """Run the new pass manager's pipeline for opt_level (llvm_levels; loop + SLP vectorization on from level 2,
    the loop vectorizer unless loop_vectorize is False) on mod, in place, with LLVM_OPTIONS."""
    global _options_set
    if not _options_set:
        for option in LLVM_OPTIONS:
            llvm.set_option("", option)
        _options_set = True
    level, _ = llvm_levels(opt_level)
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = level >= 2 and loop_vectorize
    pto.slp_vectorization = level >= 2
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(mod, pb)


def machine_for(target: dict, opt_level: int):
    """A PIC TargetMachine for target (triple, cpu, features) whose code generator runs at opt_level's level
    (llvm_levels), one per (target, level) in this process."""
    _, level = llvm_levels(opt_level)
    key = (target["triple"], target["cpu"], target["features"], level)
    if key not in _MACHINES:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        t = llvm.Target.from_triple(target["triple"])
        _MACHINES[key] = t.create_target_machine(cpu=target["cpu"], features=target["features"], opt=level,
                                                 reloc="pic", codemodel="default")
    return _MACHINES[key]


def compile_text(text: str, target: dict, opt_level: int, phases: dict | None = None) -> bytes:
    """Parse, verify, optimize and emit one module's IR text as object code. phases: the CPU seconds of each step
    are added to its parse_s, optimize_s and object_s."""
    t0 = time.process_time()
    machine = machine_for(target, opt_level)
    mod = llvm.parse_assembly(text)
    mod.verify()
    t1 = time.process_time()
    if opt_level > 0:
        optimize(mod, machine, opt_level, loop_vectorizer(text, target["cpu"]))
    t2 = time.process_time()
    obj = machine.emit_object(mod)
    if phases is not None:
        for name, seconds in (("parse_s", t1 - t0), ("optimize_s", t2 - t1), ("object_s", time.process_time() - t2)):
            phases[name] = phases.get(name, 0.0) + seconds
    return obj


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("objworker: the pipe closed mid-message")
    return data


def read_message(stream) -> bytes:
    (n,) = struct.unpack(">I", _read_exact(stream, 4))
    return _read_exact(stream, n)


def write_message(stream, data: bytes) -> None:
    stream.write(struct.pack(">I", len(data)))
    stream.write(data)


def serve(stdin, stdout) -> None:
    """Answer jobs until stdin closes."""
    while True:
        header = stdin.read(4)
        if not header:
            return
        if len(header) < 4:
            header += _read_exact(stdin, 4 - len(header))
        (n,) = struct.unpack(">I", header)
        job = json.loads(_read_exact(stdin, n))
        text = read_message(stdin).decode()
        try:
            obj, status = compile_text(text, job["target"], job["opt_level"]), b"O"
        except Exception as e:  # reported to the caller, which raises it with the kernel's name
            obj, status = f"{type(e).__name__}: {e}".encode(), b"E"
        stdout.write(status)
        write_message(stdout, obj)
        stdout.flush()


if __name__ == "__main__":
    llvm.initialize_native_target()  # while the parent still runs its passes (workers.prestart)
    llvm.initialize_native_asmprinter()
    serve(sys.stdin.buffer, sys.stdout.buffer)

"""Candidate builds: a lowered candidate (a PrimFunc) -> the bytes of a shared library that measure's run job loads.

    lib = library_bytes(func, phases)      # phases: seconds per step, added up (see PHASES)

The kernel's module alone is compiled (emit its LLVM IR, parse, optimize at O3, emit object code) and linked with
the thread pool's object, which a worker compiles for its first candidate and remembers (compile_ir_text remembers
objects by IR text: the pool at O3 is ~0.15 s, a sixth of a typical candidate's build; a candidate whose IR text
equals an earlier one's is not compiled again). The optimization pipeline is the one compile_model uses
(compiler/codegen/objworker.optimize), so the code measured is the code that ships.
"""
from __future__ import annotations

import os
import tempfile
import time

from compiler.codegen import compile_ir_text, kernel_module_text, link_shared, thread_pool_module_text
from compiler.loopir import PrimFunc

# a build's steps, in order, as BuildOutput.phases names them: seconds summed over the candidates of a job
PHASES = ("lower_s", "emit_ir_s", "parse_s", "optimize_s", "object_s", "link_s")


def add_phase(phases: dict, name: str, seconds: float) -> None:
    phases[name] = phases.get(name, 0.0) + seconds


def library_bytes(func: PrimFunc, phases: dict) -> bytes:
    """The shared library of one lowered candidate (its kernel + the thread pool), as bytes."""
    t0 = time.perf_counter()
    text = kernel_module_text(func)
    add_phase(phases, "emit_ir_s", time.perf_counter() - t0)
    objects = [compile_ir_text(text, 3, phases), compile_ir_text(thread_pool_module_text(), 3, phases)]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="relayish-measure-") as tmp:
        path = os.path.join(tmp, "kernel.so")
        link_shared(objects, path)
        with open(path, "rb") as f:
            lib = f.read()
    add_phase(phases, "link_s", time.perf_counter() - t0)
    return lib

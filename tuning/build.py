"""Candidate builds: a lowered candidate (a PrimFunc) -> the bytes of a shared library that measure's run job loads.

    lib = library_bytes(func, phases)      # phases: seconds per step, added up (see PHASES)

The kernel's module alone is compiled (emit its LLVM IR, parse, optimize, emit object code) and linked, by the
linker alone (link_shared's bare), with the thread pool's object, which a worker compiles for its first candidate
and remembers (compile_ir_text remembers objects by IR text: the pool is ~0.15 s, a sixth of a typical candidate's
build; a candidate whose IR text equals an earlier one's is not compiled again). The optimization pipeline is the one compile_model uses
(compiler/codegen/objworker.optimize), so the code measured is the code that ships.
"""
from __future__ import annotations

import collections
import hashlib
import os
import tempfile
import time

from compiler.codegen import compile_ir_text, kernel_module_text, link_shared, thread_pool_module_text
from compiler.loopir import PrimFunc

# a build's steps, in order, as BuildOutput.phases names them: CPU seconds of the worker (link: wall seconds, it
# runs in the C compiler), robust to other work on the machine
PHASES = ("lower_s", "emit_ir_s", "parse_s", "optimize_s", "object_s", "link_s")


def add_phase(phases: dict, name: str, seconds: float) -> None:
    phases[name] = phases.get(name, 0.0) + seconds


MAX_REMEMBERED_LIBRARIES = 64  # per worker process: libraries of a few tens of KB, the last few batches' worth
_LIBRARIES: collections.OrderedDict = collections.OrderedDict()  # lowered_key -> library bytes


def lowered_key(task_key: str, func: PrimFunc) -> str:
    """What decides a candidate's build: its task (the computation, shapes and dtypes) and its loop IR's text,
    which names every loop and its kind, every buffer with its dtype and shape, every index and value expression
    and every constant. Within one task, two schedules whose loop IR prints the same build the same code (a split
    by 1, a reorder of unit loops, an annotation on a loop of one iteration...)."""
    text = f"{task_key}\n{sorted(func.attrs.items())}\n{func}"
    return hashlib.sha256(text.encode()).hexdigest()


def reused_library(key: str, phases: dict) -> bytes | None:
    """The library built earlier in this process for an equal lowered candidate (counted in phases["reused"]),
    or None."""
    lib = _LIBRARIES.get(key)
    if lib is not None:
        _LIBRARIES.move_to_end(key)
        phases["reused"] = phases.get("reused", 0) + 1
    return lib


def remember_library(key: str, lib: bytes) -> None:
    _LIBRARIES[key] = lib
    while len(_LIBRARIES) > MAX_REMEMBERED_LIBRARIES:
        _LIBRARIES.popitem(last=False)


def library_bytes(func: PrimFunc, phases: dict, key: str | None = None) -> bytes:
    """The shared library of one lowered candidate (its kernel + the thread pool), as bytes. key (lowered_key):
    a library built before in this process for the same key is returned as it is, without emitting or compiling
    anything; a new one is remembered under it."""
    lib = reused_library(key, phases) if key is not None else None
    if lib is not None:
        return lib
    t0 = time.process_time()
    text = kernel_module_text(func)
    add_phase(phases, "emit_ir_s", time.process_time() - t0)
    objects = [compile_ir_text(text, 3, phases), compile_ir_text(thread_pool_module_text(), 3, phases)]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="relayish-measure-") as tmp:
        path = os.path.join(tmp, "kernel.so")
        link_shared(objects, path, bare=True)  # loaded only by measure's workers
        with open(path, "rb") as f:
            lib = f.read()
    add_phase(phases, "link_s", time.perf_counter() - t0)
    if key is not None:
        remember_library(key, lib)
    return lib


# ---------------------------------------------------------------------------------------------- in the driver

MAX_REMEMBERED_BUILDS = 256  # built candidates the driver keeps (a library of tens of KB each)
_BUILDS: collections.OrderedDict = collections.OrderedDict()  # (task key, schedule JSON) -> BuildOutput


def built_before(task_key: str, schedule_json: str):
    """The BuildOutput of this schedule of this task built earlier in this process (by an earlier measure call),
    or None. The tuner measures a program again (its final re-measurement rounds of each task's best few programs
    and default: 203 of 490 builds of a 300-trial ResNet-18 run), and a program's library does not change."""
    key = (task_key, schedule_json)
    out = _BUILDS.get(key)
    if out is not None:
        _BUILDS.move_to_end(key)
    return out


def remember_build(task_key: str, schedule_json: str, output) -> None:
    """Keep a successful build (output.lib not None) for built_before."""
    if output.lib is None:
        return
    _BUILDS[(task_key, schedule_json)] = output
    while len(_BUILDS) > MAX_REMEMBERED_BUILDS:
        _BUILDS.popitem(last=False)


def forget_builds() -> None:
    """Drop what built_before remembers (a benchmark that builds the same candidates twice, as two passes)."""
    _BUILDS.clear()


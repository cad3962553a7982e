"""The library: kernels (+ thread pool + executor) -> one LLVM module -> optimized object code -> shared library.

The target is always the host: its triple, CPU name and feature string (so AVX-512 is used where present). The
optimizer is LLVM's new pass manager, its O2 pipeline with loop and SLP vectorization on; the code generator runs
at O1 (objworker.llvm_levels says why not O3). Fast-math is not global: only the instructions codegen marks
(`contract` on float + - *) may be fused. The object is linked with the system C compiler
(`cc -shared`) against libc only (pthread_create, pthread_atfork, syscall, sysconf, clock_gettime).

A model is built split (emit_objects): one LLVM module per kernel, one for the thread pool and one for the
executor, optimized in parallel by worker processes (workers.py) and linked into one library; tools and tuning
build one module (emit_object, build_library). A module's object code is remembered by its IR text (the same text,
target and opt level give the same object): the thread pool, identical in every model, and kernels shared with an
earlier build of this process are compiled once.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import gc
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time

import llvmlite.binding as llvm
from llvmlite import ir

from ..loopir import PrimFunc
from .host import _init_llvm, host_target  # noqa: F401  (re-exported: the codegen's public names)
from .dtypes import register_bits
from .executor import ExecutorPlan, emit_executor
from . import objworker, workers
from .llvm import declare_kernel, emit_kernel
from .threadpool import emit_thread_pool

_LAST_STATS: dict = {}
# LLVM's global context and a shared TargetMachine are not safe to use from two threads at once: builds from
# several Python threads are serialized (build in processes to build in parallel).
_LLVM_LOCK = threading.RLock()




def vector_width(dtype: str = "float32") -> int:
    """Lanes of `dtype` in one native vector register: 512-bit with avx512f, 256 with avx2, else 128."""
    features = host_target()["features"].split(",")
    bits = 512 if "+avx512f" in features else 256 if "+avx2" in features else 128
    try:
        return bits // register_bits(dtype)
    except TypeError:
        raise ValueError(f"vector_width: unsupported dtype {dtype!r}") from None


@functools.lru_cache(maxsize=None)
def target_machine(opt_level: int = 3) -> llvm.TargetMachine:
    """The host target machine (PIC, for shared libraries) whose code generator runs at opt_level's level
    (objworker.llvm_levels), cached per level: the one the worker processes use (objworker.machine_for)."""
    _init_llvm()
    return objworker.machine_for(host_target(), opt_level)


def _arch() -> str:
    return host_target()["triple"].split("-")[0]


def _empty_module(name: str) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = host_target()["triple"]
    module.data_layout = str(target_machine().target_data)
    return module


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the block (on again after, if it was on). Emitting a kernel's IR
    makes ~10^5 short-lived objects and no garbage cycles that need freeing at once; the collector's passes over
    them took a quarter to a third of the emission (a Winograd kernel of SqueezeNet: 0.42-0.62 s -> 0.32-0.36 s):
    the tuner emits a module per candidate."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _check_funcs(funcs: list) -> None:
    for f in funcs:
        if not isinstance(f, PrimFunc):
            raise TypeError(f"build: expected PrimFunc, got {type(f).__name__}")


def build_ir_module(funcs: list, plan: ExecutorPlan | None = None, name: str = "relayish") -> ir.Module:
    """One llvmlite.ir module: every kernel, the thread pool and (if plan) the executor."""
    _check_funcs(funcs)
    module = _empty_module(name)
    with gc_paused():
        for f in funcs:
            emit_kernel(module, f)
        emit_thread_pool(module, _arch(), host_target()["features"])
        if plan is not None:
            emit_executor(module, plan)
    return module


@functools.lru_cache(maxsize=4)
def _thread_pool_text(arch: str, features: str, triple: str) -> str:
    """The thread pool's module as IR text: the same for every build on a target, made once per process (~20 ms,
    a fifth of the compile time of a one-op model)."""
    module = _empty_module("relayish_pool")
    emit_thread_pool(module, arch, features)
    return str(module)


def kernel_module_text(func: PrimFunc) -> str:
    """The IR text of one kernel's module in the split build: the kernel, declaring the pool functions it calls."""
    with gc_paused():
        module = _empty_module(func.name)
        emit_kernel(module, func)
        return str(module)


def thread_pool_module_text() -> str:
    """The IR text of the thread pool's module (the same for every build on this target)."""
    t = host_target()
    return _thread_pool_text(_arch(), t["features"], t["triple"])


def _split_module_texts(funcs: list, plan: ExecutorPlan | None):
    """The IR texts of the split build, made one at a time: a module per kernel (it declares the pool functions it
    calls), the thread pool, then the executor (it declares the kernels and the pool functions). Linked together
    they are the one module of build_ir_module: kernels and the pool's API are external symbols, every other
    function is internal to its module."""
    for f in funcs:
        yield kernel_module_text(f)
    yield _thread_pool_text(_arch(), host_target()["features"], host_target()["triple"])
    if plan is not None:
        module = _empty_module("relayish_executor")
        for f in funcs:
            declare_kernel(module, f)
        emit_executor(module, plan)
        yield str(module)


def _compile_text_here(text: str, opt_level: int, phases: dict | None = None) -> bytes:
    _init_llvm()
    with _LLVM_LOCK:
        return objworker.compile_text(text, host_target(), opt_level, phases)


MAX_REMEMBERED_OBJECTS = 512  # object codes kept by IR text (a few KB each; kernels of big models up to ~100 KB)
_OBJECTS: collections.OrderedDict = collections.OrderedDict()  # (text digest, opt level, target) -> object code
_OBJECTS_LOCK = threading.Lock()


def _object_key(text: str, opt_level: int) -> tuple:
    t = host_target()
    return hashlib.sha256(text.encode()).hexdigest(), opt_level, t["triple"], t["cpu"], t["features"]


def compile_ir_text(text: str, opt_level: int = 3, phases: dict | None = None) -> bytes:
    """One module's IR text -> object code, compiled in this process unless remembered (by text, as emit_objects
    remembers them). phases: seconds of parse_s / optimize_s / object_s are added to it, and 1 to "remembered"
    when the text was compiled before."""
    key = _object_key(text, opt_level)
    with _OBJECTS_LOCK:
        obj = _OBJECTS.get(key)
        if obj is not None:
            _OBJECTS.move_to_end(key)
    if obj is not None:
        if phases is not None:
            phases["remembered"] = phases.get("remembered", 0) + 1
        return obj
    obj = _compile_text_here(text, opt_level, phases)
    with _OBJECTS_LOCK:
        _OBJECTS[key] = obj
        while len(_OBJECTS) > MAX_REMEMBERED_OBJECTS:
            _OBJECTS.popitem(last=False)
    return obj


def emit_objects(funcs: list, plan: ExecutorPlan | None = None, opt_level: int = 3, stats: dict | None = None,
                 n_workers: int | None = None) -> list[bytes]:
    """funcs (+ executor for plan) -> host object codes to link together: one per kernel, one for the pool and one
    for the executor, optimized and compiled in parallel by codegen workers (workers.py) while this process
    emits the IR of the next kernels; a text compiled before in this process is not compiled again. The same
    code as emit_object's single module, minus inlining across kernels (which are noinline anyway). Fills
    stats["codegen_wall_s"] and stats["objects_remembered"]."""
    _check_funcs(funcs)
    _init_llvm()
    stats = {} if stats is None else stats
    t0 = time.perf_counter()
    keys, known, missing = [], {}, []

    def texts_to_compile():
        for text in _split_module_texts(funcs, plan):
            key = _object_key(text, opt_level)
            keys.append(key)
            if key in known or key in missing:
                continue
            with _OBJECTS_LOCK:
                obj = _OBJECTS.get(key)
                if obj is not None:
                    _OBJECTS.move_to_end(key)
            if obj is not None:
                known[key] = obj
            else:
                missing.append(key)
                yield text

    compiled = workers.compile_texts(texts_to_compile(), host_target(), opt_level,
                                     lambda text: _compile_text_here(text, opt_level), n_workers)
    with _OBJECTS_LOCK:
        for key, obj in zip(missing, compiled):
            known[key] = _OBJECTS[key] = obj
            while len(_OBJECTS) > MAX_REMEMBERED_OBJECTS:
                _OBJECTS.popitem(last=False)
    objects = [known[k] for k in keys]
    stats.update(codegen_wall_s=time.perf_counter() - t0, kernels=len(funcs), objects=len(objects),
                 objects_remembered=len(objects) - len(missing))
    return objects


def optimize(mod: llvm.ModuleRef, opt_level: int = 3, text: str | None = None) -> None:
    """Run the new pass manager's pipeline for opt_level (objworker.optimize) on mod, in place. text: the
    IR text mod was parsed from, if the caller has it (objworker.loop_vectorizer reads it; else mod is printed)."""
    objworker.optimize(mod, target_machine(opt_level), opt_level,
                       objworker.loop_vectorizer(str(mod) if text is None else text, host_target()["cpu"]))


def compile_module(funcs: list, plan: ExecutorPlan | None = None, opt_level: int = 3, stats: dict | None = None):
    """funcs (+ plan) -> verified, optimized llvm.ModuleRef. Fills stats with emit/parse/optimize seconds."""
    _init_llvm()
    stats = {} if stats is None else stats
    t0 = time.perf_counter()
    with gc_paused():
        text = str(build_ir_module(funcs, plan))
    t1 = time.perf_counter()
    with _LLVM_LOCK:
        mod = llvm.parse_assembly(text)
        mod.verify()
        t2 = time.perf_counter()
        if opt_level > 0:
            optimize(mod, opt_level, text)
    t3 = time.perf_counter()
    stats.update(emit_ir_s=t1 - t0, parse_s=t2 - t1, optimize_s=t3 - t2, kernels=len(funcs))
    return mod


def emit_llvm_ir(funcs: list, plan: ExecutorPlan | None = None, optimized: bool = False, opt_level: int = 3) -> str:
    """The module's LLVM IR text, before or after optimization (for debugging)."""
    if not optimized:
        return str(build_ir_module(funcs, plan))
    return str(compile_module(funcs, plan, opt_level))


def emit_assembly(funcs: list, plan: ExecutorPlan | None = None, opt_level: int = 3) -> str:
    """Host assembly of the optimized module (to check e.g. for zmm FMAs)."""
    with _LLVM_LOCK:
        return target_machine(opt_level).emit_assembly(compile_module(funcs, plan, opt_level))


def _c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("build_library: no C compiler found to link the shared library (install cc/gcc/clang "
                           "or set CC)")
    return cc


def link_shared(obj, path: str, bare: bool = False) -> None:
    """Link object code (bytes, or a list of object codes) into the shared library `path` with the system C
    compiler. bare: with the linker itself (ld, when there is one) and no libraries: the C library's functions the
    code calls (the pool's pthreads) stay unresolved until the library is loaded into a process that has them, as
    the tuner's Python measuring process does. That is for the tuner's candidates, linked by the thousand: ld alone
    takes ~3 ms where cc, which runs collect2 and ld with the C runtime's objects, takes ~17 ms."""
    ld = shutil.which("ld") if bare else None
    objects = [obj] if isinstance(obj, (bytes, bytearray)) else list(obj)
    with tempfile.TemporaryDirectory(prefix="relayish-") as tmp:
        obj_paths = [os.path.join(tmp, f"module{i}.o") for i in range(len(objects))]
        for obj_path, code in zip(obj_paths, objects):
            with open(obj_path, "wb") as f:
                f.write(code)
        tmp_out = os.path.join(tmp, "lib.so")  # link aside, then rename: a loaded library is never overwritten
        linker = ld or _c_compiler()
        libraries = [] if ld else ["-lpthread"]
        proc = subprocess.run([linker, "-shared", "-o", tmp_out, *obj_paths, *libraries], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"build_library: linking with {linker} failed:\n{proc.stderr.strip()}")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        shutil.move(tmp_out, path)


def emit_object(funcs: list, plan: ExecutorPlan | None = None, opt_level: int = 3, stats: dict | None = None) -> bytes:
    """funcs (+ executor for plan) -> optimized host object code. Fills stats with emit/parse/optimize/codegen
    seconds."""
    stats = {} if stats is None else stats
    mod = compile_module(funcs, plan, opt_level, stats)
    t = time.perf_counter()
    with _LLVM_LOCK:
        obj = target_machine(opt_level).emit_object(mod)
    stats["codegen_s"] = time.perf_counter() - t
    return obj


def build_library(funcs: list, plan: ExecutorPlan | None, path: str, opt_level: int = 3) -> str:
    """Compile funcs (+ executor for plan) into the shared library `path`; returns path.
    The phase timings (seconds) are kept and returned by last_build_stats()."""
    stats: dict = {}
    t0 = time.perf_counter()
    obj = emit_object(funcs, plan, opt_level, stats)
    t1 = time.perf_counter()
    link_shared(obj, path)
    t2 = time.perf_counter()
    stats.update(link_s=t2 - t1, total_s=t2 - t0, path=path)
    _LAST_STATS.clear()
    _LAST_STATS.update(stats)
    return path


def last_build_stats() -> dict:
    """Timings of the last build_library call: emit_ir_s, parse_s, optimize_s, codegen_s, link_s, total_s."""
    return dict(_LAST_STATS)

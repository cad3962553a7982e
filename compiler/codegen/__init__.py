"""Code generation: loop IR -> one llvmlite module (kernels + thread pool + graph executor) -> shared library.

    host_target() -> dict(triple, cpu, features)      vector_width(dtype) -> lanes per native vector
    emit_kernel(module, PrimFunc) -> ir.Function       emit_thread_pool(module)      emit_executor(module, plan)
    vectorize_report(PrimFunc) -> {loop var: None | why the vectorize loop runs serially}
    emit_object(funcs, plan, opt_level=3) -> bytes              link_shared(object or objects, path)
    emit_objects(funcs, plan, opt_level=3) -> [bytes]: one object per kernel, compiled in parallel (workers.py)
    kernel_module_text(func), thread_pool_module_text() -> IR text; compile_ir_text(text) -> bytes (remembered)
    prestart_workers(): start those worker processes ahead of the first build (compile_model does, before the passes)
    build_library(funcs, plan, path, opt_level=3) -> path       last_build_stats() -> dict of phase seconds
    emit_llvm_ir(funcs, plan=None, optimized=False) -> str      emit_assembly(funcs, plan=None) -> str

Hand-written micro-kernels (bench/peak.py, bench/peak_int8.py, bench/bandwidth.py) use microkernel.py's API:
pool_module(name), TASK_FN_TYPE, emit_fork_entry, compile_ir, ir_assembly and load_library; int8 ones
emit_dot4(builder, acc, a bytes, w word, lanes) and host_vnni_lanes() (intdot.py: vpdpbusd where the host has it).
"""
from .library import (build_ir_module, build_library, compile_ir_text, compile_module, emit_assembly, emit_llvm_ir,
                      emit_object, emit_objects, host_target, kernel_module_text, last_build_stats, link_shared,
                      target_machine, thread_pool_module_text, vector_width)
from .intdot import emit_dot4, host_vnni_lanes
from .executor import BufferRef, ExecutorPlan, KernelCall, emit_executor
from .analysis import vectorize_blocker, vectorize_report, walk_stmt
from .llvm import emit_kernel
from .microkernel import TASK_FN_TYPE, compile_ir, emit_fork_entry, ir_assembly, load_library, pool_module
from .threadpool import emit_thread_pool
from .workers import prestart as prestart_workers

__all__ = ["BufferRef", "ExecutorPlan", "KernelCall", "TASK_FN_TYPE", "build_ir_module",
           "build_library", "compile_ir", "compile_ir_text", "compile_module", "emit_assembly", "emit_dot4", "emit_executor", "emit_fork_entry",
           "emit_kernel", "emit_llvm_ir", "emit_object", "emit_objects", "emit_thread_pool", "host_target", "host_vnni_lanes", "ir_assembly",
           "kernel_module_text", "last_build_stats", "link_shared", "load_library", "pool_module", "prestart_workers", "target_machine", "thread_pool_module_text", "vector_width",
           "vectorize_blocker", "vectorize_report", "walk_stmt"]

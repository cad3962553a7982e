"""Code generation: loop IR -> one llvmlite module (kernels + thread pool + graph executor) -> shared library.

    host_target() -> dict(triple, cpu, features)      vector_width(dtype) -> lanes per native vector
    emit_kernel(module, PrimFunc) -> ir.Function       emit_thread_pool(module)      emit_executor(module, plan)
    vectorize_report(PrimFunc) -> {loop var: None | why the vectorize loop runs serially}
    build_library(funcs, plan, path, opt_level=3) -> path       last_build_stats() -> dict of phase seconds
    emit_llvm_ir(funcs, plan=None, optimized=False) -> str      emit_assembly(funcs, plan=None) -> str
"""
from .build import (build_ir_module, build_library, compile_module, emit_assembly, emit_llvm_ir, host_target,
                    last_build_stats, target_machine, vector_width)
from .executor import BufferRef, ExecutorPlan, KernelCall, emit_executor
from .analysis import vectorize_blocker, vectorize_report
from .llvm import emit_kernel
from .threadpool import emit_thread_pool

__all__ = ["BufferRef", "ExecutorPlan", "KernelCall", "build_ir_module", "build_library",
           "compile_module", "emit_assembly", "emit_executor", "emit_kernel", "emit_llvm_ir", "emit_thread_pool",
           "host_target", "last_build_stats", "target_machine", "vector_width", "vectorize_blocker", "vectorize_report"]

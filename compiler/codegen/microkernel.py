"""Hand-written llvmlite micro-kernels (the machine's FMA peak, its read bandwidth): the public way to build one.

    module = pool_module("peak")                       # host triple + data layout, the thread pool, no kernels
    task = ir.Function(module, TASK_FN_TYPE, "task")   # void task(i8* closure, i32 index, i32 ntasks)
    emit_fork_entry(module, "entry", task, closure_ty) # void entry(closure fields..., i32 ntasks)
    lib = load_library(module, "peak", "entry", [ctypes.c_int64, ..., ctypes.c_int32])
    ir_assembly(module)                                # host assembly, to check what LLVM made of the loop

Such a module goes through the same pipeline as a compiled model (LLVM's passes with the host's target machine,
linked with `cc -shared`), so a figure measured with it is what our kernels can reach through our own thread pool.
"""
from __future__ import annotations

import ctypes
import os
import tempfile

import llvmlite.binding as llvm
from llvmlite import ir

from .library import _LLVM_LOCK, _init_llvm, build_ir_module, link_shared, optimize, target_machine
from .threadpool import TASK_FN_TYPE, declare_api

__all__ = ["TASK_FN_TYPE", "compile_ir", "emit_fork_entry", "ir_assembly", "load_library", "pool_module"]

I32 = ir.IntType(32)


def pool_module(name: str) -> ir.Module:
    """An llvmlite module for the host (triple, data layout) holding the thread pool and nothing else."""
    return build_ir_module([], None, name=name)


def emit_fork_entry(module: ir.Module, name: str, task: ir.Function, closure_ty: ir.LiteralStructType) -> None:
    """`void name(fields of closure_ty..., i32 ntasks)`: stores the fields into a closure, runs `task` ntasks times
    on the thread pool (relayish_parallel_for), then lets the pool go idle (its workers sleep, not spin)."""
    fields = list(closure_ty.elements)
    entry = ir.Function(module, ir.FunctionType(ir.VoidType(), fields + [I32]), name)
    *values, ntasks = entry.args
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    slot = b.alloca(closure_ty)
    for k, value in enumerate(values):
        b.store(value, b.gep(slot, [I32(0), I32(k)]))
    pool = declare_api(module)
    b.call(pool["relayish_parallel_for"], [task, b.bitcast(slot, ir.IntType(8).as_pointer()), ntasks])
    b.call(pool["relayish_pool_idle"], [])
    b.ret_void()


def compile_ir(module: ir.Module) -> llvm.ModuleRef:
    """Parse, verify and optimize (as a compiled model, opt_level 3) a hand-built module."""
    _init_llvm()
    with _LLVM_LOCK:
        mod = llvm.parse_assembly(str(module))
        mod.verify()
        optimize(mod, 3)
    return mod


def ir_assembly(module: ir.Module) -> str:
    """Host assembly of the optimized module."""
    mod = compile_ir(module)
    with _LLVM_LOCK:
        return target_machine().emit_assembly(mod)


def load_library(module: ir.Module, prefix: str, entry: str, argtypes: list) -> ctypes.CDLL:
    """Compile, link and load the module (it stays mapped for the process); `entry` gets argtypes and returns
    nothing, relayish_set_num_threads takes an int32."""
    path = os.path.join(tempfile.mkdtemp(prefix=f"relayish_{prefix}_"), f"{prefix}.so")
    mod = compile_ir(module)
    with _LLVM_LOCK:
        obj = target_machine().emit_object(mod)
    link_shared(obj, path)
    lib = ctypes.CDLL(path)
    getattr(lib, entry).argtypes = argtypes
    getattr(lib, entry).restype = None
    lib.relayish_set_num_threads.argtypes = [ctypes.c_int32]
    return lib

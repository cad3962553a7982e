"""The graph executor: the kernel calls of one model, in order, over a static memory plan.

Emitted into the same module as the kernels:

    void relayish_run(i8** inputs, i8** outputs, i8* params, i8* workspace)
    void relayish_run_profiled(i8** inputs, i8** outputs, i8* params, i8* workspace, i64* ns)

relayish_run calls every kernel of the plan in order (but the elided ones: see compiler/memory.py), then relayish_pool_linger() so that the pool's workers stop
spinning soon after the model is done (threadpool.LINGER_CYCLES: a run that follows at once finds them awake). relayish_run_profiled does the same and also writes the elapsed wall time of
call k (clock_gettime(CLOCK_MONOTONIC), in nanoseconds) into ns[k].
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from . import threadpool

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()
VOID = ir.VoidType()
CLOCK_MONOTONIC = 1
TIMESPEC = ir.LiteralStructType([I64, I64])  # struct timespec on LP64 Linux

BUFFER_KINDS = ("input", "output", "param", "workspace")


@dataclass
class BufferRef:
    """Where a kernel argument lives: inputs[index] / outputs[index], or params / workspace + offset (bytes)."""
    kind: str  # "input" | "output" | "param" | "workspace"
    index: int = 0  # position for input/output
    offset: int = 0  # byte offset into params blob or workspace (multiple of 64)

    def __post_init__(self):
        if self.kind not in BUFFER_KINDS:
            raise ValueError(f"BufferRef kind {self.kind!r} is not one of {BUFFER_KINDS}")
        if self.offset % 64:
            raise ValueError(f"BufferRef {self.kind} offset {self.offset} is not a multiple of 64 (kernels assume "
                             "64-byte aligned buffers)")
        if self.index < 0 or self.offset < 0:
            raise ValueError(f"BufferRef {self.kind}: negative index {self.index} or offset {self.offset}")


@dataclass
class KernelCall:
    kernel: str
    args: list  # of BufferRef, one per PrimFunc param, in order
    elided: bool = False  # its output is already in place (a concatenation whose inputs were written into it)


@dataclass
class ExecutorPlan:
    calls: list = field(default_factory=list)  # of KernelCall, in execution order


def _arg_pointer(b: ir.IRBuilder, ref: BufferRef, inputs, outputs, params, workspace):
    if ref.kind in ("input", "output"):
        table = inputs if ref.kind == "input" else outputs
        return b.load(b.gep(table, [I64(ref.index)], inbounds=True))
    base = params if ref.kind == "param" else workspace
    return b.gep(base, [I64(ref.offset)], inbounds=True)


def _emit_calls(b: ir.IRBuilder, module: ir.Module, plan: ExecutorPlan, args, on_call=None):
    """Emit the calls of `plan`; on_call(k, emit) lets the caller wrap call k (used for timing)."""
    for k, call in enumerate(plan.calls):
        if call.elided:  # nothing to run (its profile slot reads 0)
            continue
        kernel = module.globals.get(call.kernel)
        if not isinstance(kernel, ir.Function):
            raise ValueError(f"executor: call {k} names kernel {call.kernel!r}, which is not in the module")
        params = kernel.function_type.args
        if len(call.args) != len(params):
            raise ValueError(f"executor: call {k} to {call.kernel} passes {len(call.args)} buffers, "
                             f"the kernel takes {len(params)}")

        def emit(kernel=kernel, call=call, params=params):
            ptrs = [b.bitcast(_arg_pointer(b, ref, *args), ty) for ref, ty in zip(call.args, params)]
            b.call(kernel, ptrs)

        if on_call is None:
            emit()
        else:
            on_call(k, emit)


def emit_executor(module: ir.Module, plan: ExecutorPlan) -> None:
    """Define relayish_run and relayish_run_profiled for `plan` in `module` (its kernels must be there)."""
    linger = threadpool.declare_api(module)["relayish_pool_linger"]
    ptr_args = [I8P.as_pointer(), I8P.as_pointer(), I8P, I8P]

    fn = ir.Function(module, ir.FunctionType(VOID, ptr_args), "relayish_run")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    _emit_calls(b, module, plan, fn.args)
    b.call(linger, [])
    b.ret_void()

    fn = ir.Function(module, ir.FunctionType(VOID, ptr_args + [I64.as_pointer()]), "relayish_run_profiled")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    clock = module.globals.get("clock_gettime") or ir.Function(
        module, ir.FunctionType(I32, [I32, TIMESPEC.as_pointer()]), "clock_gettime")
    ts = b.alloca(TIMESPEC)
    ns_out = fn.args[4]

    def now():
        b.call(clock, [I32(CLOCK_MONOTONIC), ts])
        sec = b.load(b.gep(ts, [I32(0), I32(0)], inbounds=True))
        nsec = b.load(b.gep(ts, [I32(0), I32(1)], inbounds=True))
        return b.add(b.mul(sec, I64(1_000_000_000)), nsec)

    def timed(k, emit):
        t0 = now()
        emit()
        b.store(b.sub(now(), t0), b.gep(ns_out, [I64(k)], inbounds=True))

    _emit_calls(b, module, plan, fn.args[:4], on_call=timed)
    b.call(linger, [])
    b.ret_void()

"""Loop IR (compiler/loopir.py) -> LLVM IR (llvmlite.ir), one kernel at a time.

`emit_kernel(module, func)` adds `void NAME(T0* noalias align 64 p0, T1* ...)` to `module`, one pointer per PrimFunc
parameter in order (bool buffers are i8 in memory). Semantics:

- dtypes (register and memory types, conversions): compiler/codegen/dtypes.py; expressions are emitted by
  compiler/codegen/emit_expr.py, the addresses of scalar accesses by compiler/codegen/addressing.py, reads of
  buffers (vector loads, padded windows, gathers) by compiler/codegen/reads.py.
- int index math (int32, reading no memory) is `nsw` (an index that overflows is a lowering bug); pointer
  offsets are i64 GEPs. Integer data arithmetic wraps (no `nsw`), as ONNX and numpy do.
  `//`, `/` and `%` on ints are floor division / modulo (Python semantics, operands may be negative; on
  unsigned dtypes the unsigned forms); a run-time divisor of 0 gives 0 and never traps.
- float `+ - *` carry the `contract` fast-math flag (a*b+c may become one FMA); nothing is reassociated.
- float min/max propagate NaN from either operand, as numpy and onnxruntime's Max/Min/Relu/Clip do
  (intrinsics.float_max_min: one vmaxps/vminps, plus a NaN test unless an operand is a non-NaN constant).
- Loop kinds: serial -> a phi loop (an innermost one whose iterations are independent, analysis.carried_dependence,
  is marked llvm.loop.parallel_accesses); unroll (constant extent) -> the body emitted extent times with the variable
  bound to constants (or, for the square tile of a transposing copy, vector loads, shuffles and vector stores:
  transpose.py); vectorize (constant extent N) -> the body emitted once on <N x T> values when
  `vectorize_blocker` finds nothing unsafe, else a serial loop; parallel -> the body outlined into a
  `noinline` chunk function called by `void NAME.parK(i8* closure, i32 task, i32 ntasks)`, which the module's
  thread pool runs (nested parallel -> serial).
- Allocate -> an `alloca` (align 64) in the entry block of the current LLVM function, so SROA can promote it.
- Kernel parameters are `noalias` and aligned to their element only (every load and store is too): a graph input
  is the caller's numpy array as it comes (numpy aligns fresh arrays to 16 bytes, views anywhere), read in place
  instead of copied into a 64-byte-aligned buffer first (x86 vector loads run at the same speed either way).
"""
from __future__ import annotations

import re

from llvmlite import ir

from relayish import te
from relayish.te import IntImm, Var

from ..arith import coefficient
from ..loopir import Allocate, Buffer, For, IfThenElse, LetStmt, PrimFunc, Seq, Store
from . import threadpool
from .analysis import carried_dependence, referenced, vectorize_blocker
from .cgutils import ALIGN, entry_alloca, for_range, is_vector, nbytes, scalar_type, splat
from .dtypes import from_memory, memory_type, to_memory, value_type
from .reads import ReadEmitter
from .transpose import emit_transpose, transposable

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
# Elements an Allocate's alloca has on each side of its buffer: a tail's vector of a local buffer (a register tile's
# accumulators, 20 columns in vectors of 16) is loaded whole and stored as a blend of its old value, not through
# masked loads and stores, which keep SROA from promoting the tile to registers (each tap of an NCHW 3x3 / 2 max
# pool then waited on a masked store's forwarding: 3.7x onnxruntime's time)
LOCAL_SLACK = 64
F32, F64, VOID = ir.FloatType(), ir.DoubleType(), ir.VoidType()
I8P = I8.as_pointer()


# ---------------------------------------------------------------------------------------------- emission

class _Kernel:
    """Per-kernel emission state shared by the kernel function and the functions outlined from it."""

    def __init__(self, module: ir.Module, func: PrimFunc):
        self.module = module
        self.func = func
        self.outlined = 0
        self._blockers: dict[int, str | None] = {}  # id(For) -> vectorize_blocker (an unrolled body repeats loops)
        self._carried: dict[int, str | None] = {}  # id(For) -> carried_dependence
        self._lane_offsets: dict[tuple, ir.Constant] = {}  # (lanes, start) -> constant
        self._coefficients: dict = {}  # (id(index), lane var) -> (index, its coefficient in the lane var)

    def vectorize_blocker(self, loop: For) -> str | None:
        if id(loop) not in self._blockers:
            self._blockers[id(loop)] = vectorize_blocker(loop)
        return self._blockers[id(loop)]

    def independent_iterations(self, loop: For) -> bool:
        """Whether no iteration of loop touches memory another writes (analysis.carried_dependence)."""
        if id(loop) not in self._carried:
            self._carried[id(loop)] = carried_dependence(loop)
        return self._carried[id(loop)] is None

    def lane_offsets(self, n: int, start: int = 0) -> ir.Constant:
        """The constant <start, start + 1, ..., start + n - 1> (i32), made once per kernel (llvmlite builds a vector
        constant slowly)."""
        if (n, start) not in self._lane_offsets:
            self._lane_offsets[n, start] = ir.Constant(ir.VectorType(I32, n), list(range(start, start + n)))
        return self._lane_offsets[n, start]

    def coefficient(self, index, var: Var, lets: dict) -> int | None:
        """arith.coefficient(index, var, lets), remembered per index expression while no let is bound (an unrolled
        body emits the same loads and stores once per iteration)."""
        if lets:
            return coefficient(index, var, lets)
        key = (id(index), var)
        got = self._coefficients.get(key)
        if got is None:
            got = self._coefficients[key] = (index, coefficient(index, var))  # index kept: its id stays its own
        return got[1]


class _FunctionEmitter(ReadEmitter):
    """Emits statements into one LLVM function (its expressions: emit_expr.ExprEmitter). env: Var -> value;
    bufs: Buffer -> element pointer.

    Vector mode (self.lanes = N): the loop variable self.vec_var is bound to the lane vector <s, s+1, ...>;
    any value may be a scalar (lane-uniform) or an <N x T> vector, and operations splat scalars as needed.
    """

    def __init__(self, kernel: _Kernel, fn: ir.Function, in_parallel: bool):
        self.k = kernel
        self.fn = fn
        self.entry = fn.append_basic_block("entry")  # allocas only; branches to `body` in finish()
        self.b = ir.IRBuilder(fn.append_basic_block("body"))
        self.in_parallel = in_parallel
        self.env: dict = {}
        self.bufs: dict = {}
        self.lanes: int | None = None
        self.loops = 0  # phi loops emitted so far
        self.mask = None  # in a vector body under a lane-dependent condition: its <N x i1> (masked stores/loads)
        self.vec_var: Var | None = None
        self.vec_start = None  # in a vector body: the scalar value of vec_var's lane 0
        self.lets: dict = {}  # let-bound Var -> its coefficient in vec_var (vector mode only)
        # integer index arithmetic already emitted in the current block: (structure of expr, block, values of its
        # variables) -> value. A Winograd transform's unrolled body computes the same indices many times, each in
        # nodes of its own (by id, (k // 14) was emitted 2,016 times in one candidate: 1.6 MB of IR, 9 s of LLVM).
        self._int_values: dict = {}
        self._free_vars: dict = {}  # id(expr) -> (expr, its variables); expr kept so the id stays its own
        self._structures: dict = {}  # id(expr) -> (expr, its structure number: equal for equal expressions)
        self._structure_numbers: dict = {}  # (kind, attributes, children's structure numbers) -> number
        self._affine: dict = {}  # id(expr) -> (expr, its affine form: affine_terms)
        self._offsets: dict = {}  # (id(int32 index value), id(block), constant) -> their i64 sum (offset)
        # while one Store is emitted: id(expr) -> (expr, value). Its expression is straight-line code in one block
        # under one binding of the variables, so a node shared by several parents (the expressions are DAGs) is
        # emitted once; None outside a Store
        self._shared: dict | None = None

    def finish(self):
        self.b.ret_void()
        ir.IRBuilder(self.entry).branch(self.fn.blocks[1])

    def error(self, msg: str):
        return ValueError(f"codegen: kernel {self.k.func.name}: {msg}")

    # ------------------------------------------------------------------ statements

    def stmt(self, s):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, IfThenElse):
            self.if_then_else(s)
        elif isinstance(s, LetStmt):
            value = self.expr(s.value)
            self.env[s.var] = value
            if self.lanes:
                self.lets[s.var] = coefficient(s.value, self.vec_var, self.lets)
            self.stmt(s.body)
            del self.env[s.var]
        elif isinstance(s, Allocate):
            self.allocate(s)
        else:
            raise self.error(f"unknown statement {type(s).__name__}")

    def allocate(self, s: Allocate):
        buf = s.buffer
        if buf.scope != "local":
            raise self.error(f"Allocate of {buf.name} with scope {buf.scope!r}; only 'local' buffers are allocated")
        slot = entry_alloca(self.fn, ir.ArrayType(memory_type(buf.dtype), buf.size + 2 * LOCAL_SLACK), name=buf.name)
        self.bufs[buf] = self.b.gep(slot, [I32(0), I32(LOCAL_SLACK)], inbounds=True)
        self.stmt(s.body)
        del self.bufs[buf]

    def if_then_else(self, s: IfThenElse):
        cond = self.as_bool(self.expr(s.cond))
        if is_vector(cond):
            return self.masked(cond, s)
        if s.else_case is None:
            with self.b.if_then(cond):
                self.stmt(s.then_case)
            return
        with self.b.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then_case)
            with otherwise:
                self.stmt(s.else_case)

    def masked(self, cond, s: IfThenElse):
        """A lane-dependent condition (a split's tail in a vector body): the body runs once for the lanes where it
        holds, its stores and lane-varying loads masked, and not at all when it holds for none (its lane-uniform
        loads then read nothing that serial order would not have read)."""
        if s.else_case is not None:
            raise self.error(f"lane-dependent condition {te.expr_str(s.cond)} with an else branch in a vector body")
        outer = self.mask
        mask = cond if outer is None else self.b.and_(outer, cond)
        reduce_or = self.k.module.globals.get(f"llvm.vector.reduce.or.v{self.lanes}i1") or ir.Function(
            self.k.module, ir.FunctionType(ir.IntType(1), [mask.type]), f"llvm.vector.reduce.or.v{self.lanes}i1")
        with self.b.if_then(self.b.call(reduce_or, [mask])):
            self.mask = mask
            try:
                self.stmt(s.then_case)
            finally:
                self.mask = outer

    def masked_intrinsic(self, op: str, vty):
        """llvm.masked.load / store / gather of vector type vty (declared on first use)."""
        elem = vty.element
        suffix = f"v{vty.count}{'f' if isinstance(elem, (ir.FloatType, ir.DoubleType)) else 'i'}{nbytes(elem) * 8}"
        name = f"llvm.masked.{op}.{suffix}." + (f"v{vty.count}p0" if op == "gather" else "p0")
        fn = self.k.module.globals.get(name)
        if fn is None:
            mask_ty = ir.VectorType(ir.IntType(1), vty.count)
            args = ([ir.VectorType(elem.as_pointer(), vty.count), I32, mask_ty, vty] if op == "gather" else
                    [vty.as_pointer(), I32, mask_ty, vty] if op == "load" else [vty, vty.as_pointer(), I32, mask_ty])
            fn = ir.Function(self.k.module, ir.FunctionType(VOID if op == "store" else vty, args), name)
        return fn

    def loop(self, s: For):
        if s.kind not in ("serial", "parallel", "vectorize", "unroll"):
            raise self.error(f"loop {s.var.name} has unknown kind {s.kind!r}")
        if self.lanes:
            raise self.error(f"loop {s.var.name} inside a vector body")  # vectorize_blocker refuses this
        if s.kind == "vectorize":
            if self.k.vectorize_blocker(s) is None:
                return self.vector_loop(s)
        elif s.kind == "unroll" and isinstance(s.extent, IntImm):
            return self.unrolled_loop(s)
        elif s.kind == "parallel" and not self.in_parallel:
            return self.parallel_loop(s)
        return self.serial_loop(s)

    def serial_loop(self, s: For, start=None, stop=None):
        """A phi loop. An innermost one (no loop emitted in its body) whose iterations are independent
        (_Kernel.independent_iterations) says so to LLVM: its loads, stores and calls join an access group that
        its loop ID lists as parallel_accesses (LLVM's loop passes look at innermost loops only)."""
        start = self.expr(s.start) if start is None else start
        stop = self.b.add(start, self.expr(s.extent), flags=("nsw",)) if stop is None else stop
        loops_before = self.loops
        with for_range(self.b, start, stop, name=s.var.name) as i:
            first = len(self.fn.blocks)  # the body's blocks: the one for_range made, then those appended from here
            body = self.b.block
            self.env[s.var] = i
            self.stmt(s.body)
        del self.env[s.var]
        if self.loops == loops_before and self.k.independent_iterations(s):
            group = distinct_node(self.k.module)
            join_access_group([body] + self.fn.blocks[first:], group)
            back_edge = i.incomings[-1][1].terminator
            back_edge.set_metadata("llvm.loop", parallel_loop_id(group))
        self.loops += 1

    def unrolled_loop(self, s: For):
        tile = transposable(s)
        if tile is not None:
            return emit_transpose(self, tile)
        start = self.expr(s.start)
        for k in range(s.extent.value):
            if isinstance(start, ir.Constant):  # a constant index lets selects on it fold as they are emitted
                self.env[s.var] = I32(start.constant + k)
            else:
                self.env[s.var] = self.b.add(start, I32(k), flags=("nsw",)) if k else start
            self.stmt(s.body)
        self.env.pop(s.var, None)

    def vector_loop(self, s: For):
        n = s.extent.value
        start = self.expr(s.start)
        self.lanes, self.vec_var, self.lets, self.vec_start = n, s.var, {}, start
        if isinstance(start, ir.Constant):  # (an unrolled loop's index: no add for every copy of the body)
            self.env[s.var] = self.k.lane_offsets(n, start.constant)
        else:
            self.env[s.var] = self.b.add(splat(self.b, start, n), self.k.lane_offsets(n), flags=("nsw",))
        self.stmt(s.body)
        del self.env[s.var]
        self.lanes, self.vec_var, self.lets, self.vec_start = None, None, {}, None

    def parallel_loop(self, s: For):
        """Outline the loop: closure = {buffers, free vars, start, extent}; run chunks on the thread pool."""
        vars_, bufs = referenced(s.body)
        vars_ = [v for v in vars_ if v in self.env]
        bufs = [bf for bf in bufs if bf in self.bufs]
        values = [self.bufs[bf] for bf in bufs] + [self.env[v] for v in vars_]
        start, extent = self.expr(s.start), self.expr(s.extent)
        chunk = self.outline_chunk(s, bufs, vars_, [v.type for v in values])
        task_fn = _outline_task(self.k, chunk, [v.type for v in values])
        closure_ty = ir.LiteralStructType([v.type for v in values] + [I32, I32])
        closure = entry_alloca(self.fn, closure_ty, name=f"{s.var.name}.closure", align=8)
        for k, v in enumerate(values + [start, extent]):
            self.b.store(v, self.b.gep(closure, [I32(0), I32(k)], inbounds=True))
        pool = threadpool.declare_api(self.k.module)
        nthreads = self.b.call(pool["relayish_get_num_threads"], [])
        ntasks = self.b.select(self.b.icmp_signed("<", nthreads, extent), nthreads, extent)
        self.b.call(pool["relayish_parallel_for"], [task_fn, self.b.bitcast(closure, I8P), ntasks])

    def outline_chunk(self, s: For, bufs: list, vars_: list, types: list) -> ir.Function:
        """`void chunk(bufs..., vars..., i32 lo, i32 hi)`: the loop over [lo, hi). Buffers are noalias params so
        alias information survives outlining. It is `noinline`: inlined into its task function (one call per
        thread), the loop was optimized twice, once in each function, and its noalias parameters became scoped
        alias metadata on every access, which LLVM's alias queries then compared; on the tuner's candidate set
        (bench.build_rate) the optimization took a fifth less CPU time without it."""
        self.k.outlined += 1
        name = f"{self.k.func.name}.par{self.k.outlined}.chunk"  # '.': cannot clash with a kernel (C identifier)
        fn = ir.Function(self.k.module, ir.FunctionType(VOID, types + [I32, I32]), name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")  # see outline_chunk's docstring
        em = _FunctionEmitter(self.k, fn, in_parallel=True)
        for arg, bf in zip(fn.args, bufs):
            arg.add_attribute("noalias")
            if bf.scope == "local":  # an alloca of this function's caller: 64-byte aligned
                arg.attributes.align = ALIGN
            else:
                arg.attributes.align = nbytes(memory_type(bf.dtype))
            em.bufs[bf] = arg
        for arg, v in zip(fn.args[len(bufs):], vars_):
            em.env[v] = arg
        em.serial_loop(s, start=fn.args[-2], stop=fn.args[-1])
        em.finish()
        return fn

    def store(self, s: Store):
        ptr = self.buffer_ptr(s.buffer)
        contiguous = self.lanes and self.k.coefficient(s.index, self.vec_var, self.lets) == 1
        self._shared = {}
        try:
            value = self.to_memory(self.expr(s.value), s.buffer)
            if contiguous or not self.lanes:
                address = self.index_addr(ptr, s.index, lane0=bool(contiguous))
            else:
                index = self.expr(s.index)
        finally:
            self._shared = None
        if contiguous:
            value = splat(self.b, value, self.lanes)
            vptr = self.b.bitcast(address, value.type.as_pointer())
            if self.mask is not None and s.buffer.scope == "local":  # see LOCAL_SLACK
                old = self.b.load(vptr, align=nbytes(value.type.element))
                self.b.store(self.b.select(self.mask, value, old), vptr, align=nbytes(value.type.element))
            elif self.mask is not None:
                align = I32(nbytes(value.type.element))
                self.b.call(self.masked_intrinsic("store", value.type), [value, vptr, align, self.mask])
            else:
                self.b.store(value, vptr, align=nbytes(value.type.element))
            return
        if not self.lanes:
            self.b.store(value, address)
            return
        if not is_vector(index):
            if is_vector(value):  # every lane stores to one address: the last lane wins, as in serial order
                value = self.b.extract_element(value, I32(self.lanes - 1))
            self.b.store(value, self.addr(ptr, index))
            return
        value = splat(self.b, value, self.lanes)
        for lane in range(self.lanes):  # scatter in lane order (= serial order)
            idx = self.b.extract_element(index, I32(lane))
            if self.mask is not None:
                with self.b.if_then(self.b.extract_element(self.mask, I32(lane))):
                    self.b.store(self.b.extract_element(value, I32(lane)), self.addr(ptr, idx))
            else:
                self.b.store(self.b.extract_element(value, I32(lane)), self.addr(ptr, idx))

    # ------------------------------------------------------------------ memory

    def buffer_ptr(self, buf):
        try:
            return self.bufs[buf]
        except KeyError:
            raise self.error(f"buffer {buf.name} is neither a parameter nor allocated by an enclosing "
                             "Allocate") from None

    def to_memory(self, value, buf):
        if buf.dtype == "bool":
            value = self.as_bool(value)
        if scalar_type(value.type) != value_type(buf.dtype):
            raise self.error(f"storing a {scalar_type(value.type)} value into {buf.name} of dtype {buf.dtype}; "
                             "lowering must insert a Cast")
        return to_memory(self.b, value, buf.dtype)

    def from_memory(self, value, buf):
        return from_memory(self.b, value, buf.dtype)


class _DistinctNode(ir.values.MDValue):
    """`distinct !{...}`, which llvmlite's uniquing add_metadata cannot make: an access group, or a loop ID
    (whose first operand is itself)."""

    def descr(self, buf):
        buf += ("distinct ",)
        super().descr(buf)

    __eq__ = object.__eq__  # each node is its own (MDValue compares operands: all access groups would be one)
    __hash__ = object.__hash__


def distinct_node(module: ir.Module, operands=()) -> _DistinctNode:
    return _DistinctNode(module, operands, name=str(len(module.metadata)))


def parallel_loop_id(group) -> _DistinctNode:
    """The loop ID `!L = distinct !{!L, !{"llvm.loop.parallel_accesses", group}}`."""
    module = group.parent
    parallel = module.add_metadata([ir.MetaDataString(module, "llvm.loop.parallel_accesses"), group])
    loop_id = distinct_node(module)
    loop_id.operands = (loop_id, parallel)
    return loop_id


_MEMORY_INSTRUCTIONS = (ir.LoadInstr, ir.StoreInstr, ir.CallInstr)


def join_access_group(blocks, group) -> None:
    """Every load, store and call in blocks joins access group `group`."""
    for block in blocks:
        for instr in block.instructions:
            if isinstance(instr, _MEMORY_INSTRUCTIONS):
                instr.set_metadata("llvm.access.group", group)


def _outline_task(kernel: _Kernel, chunk: ir.Function, types: list) -> ir.Function:
    """`void NAME.parK(i8* closure, i32 task, i32 ntasks)`: unpack the closure, run chunk `task` of `ntasks`
    equal contiguous chunks of [start, start + extent)."""
    name = chunk.name[: -len(".chunk")]
    fn = ir.Function(kernel.module, threadpool.TASK_FN_TYPE, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    closure, task, ntasks = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sty = ir.LiteralStructType(types + [I32, I32])
    sptr = b.bitcast(closure, sty.as_pointer())
    fields = [b.load(b.gep(sptr, [I32(0), I32(k)], inbounds=True)) for k in range(len(types) + 2)]
    start, extent = fields[-2], fields[-1]

    def bound(t):  # start + t * extent / ntasks, in i64 so the product cannot overflow
        num = b.mul(b.sext(t, I64), b.sext(extent, I64))
        return b.add(start, b.trunc(b.sdiv(num, b.sext(ntasks, I64)), I32))

    lo, hi = bound(task), bound(b.add(task, I32(1)))
    b.call(chunk, fields[:-2] + [lo, hi])
    b.ret_void()
    return fn


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = {"syscall", "sysconf", "pthread_create", "pthread_atfork", "clock_gettime"}  # libc symbols we call


def kernel_type(func: PrimFunc) -> ir.FunctionType:
    """`void (T0*, T1*, ...)`: one pointer per parameter buffer."""
    return ir.FunctionType(VOID, [memory_type(p.dtype).as_pointer() for p in func.params])


def declare_kernel(module: ir.Module, func: PrimFunc) -> ir.Function:
    """Declare (not define) the kernel `func` in `module`, for calls to it from another module of one library."""
    return ir.Function(module, kernel_type(func), func.name)


def emit_kernel(module: ir.Module, func: PrimFunc) -> ir.Function:
    """Emit `func` into `module` as `void NAME(T* noalias align 64, ...)`; returns the LLVM function."""
    if not _C_IDENTIFIER.fullmatch(func.name) or func.name.startswith("relayish_") or func.name in _RESERVED:
        raise ValueError(f"codegen: kernel name {func.name!r} must be a C identifier, not start with 'relayish_' "
                         f"and not be one of {sorted(_RESERVED)}")
    if func.name in module.globals:
        raise ValueError(f"codegen: two kernels named {func.name!r} in one module")
    for p in func.params:
        if not isinstance(p, Buffer) or p.scope != "global":
            raise ValueError(f"codegen: kernel {func.name}: parameter {p!r} is not a global Buffer")
    if len(set(map(id, func.params))) != len(func.params):
        raise ValueError(f"codegen: kernel {func.name}: a buffer appears twice among the parameters (they are noalias)")
    fn = ir.Function(module, kernel_type(func), func.name)
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")  # the executor calls each kernel; inlining them there only costs compile time
    kernel = _Kernel(module, func)
    em = _FunctionEmitter(kernel, fn, in_parallel=False)
    for arg, p in zip(fn.args, func.params):
        arg.name = p.name
        arg.add_attribute("noalias")
        arg.attributes.align = nbytes(memory_type(p.dtype))  # element alignment: see the module docstring
        em.bufs[p] = arg
    em.stmt(func.body)
    em.finish()
    return fn

"""Loop IR (compiler/loopir.py) -> LLVM IR (llvmlite.ir), one kernel at a time.

`emit_kernel(module, func)` adds `void NAME(T0* noalias align 64 p0, T1* ...)` to `module`, one pointer per PrimFunc
parameter in order (bool buffers are i8 in memory). Semantics:

- dtypes (register and memory types, conversions): compiler/codegen/dtypes.py; expressions are emitted by
  compiler/codegen/emit_expr.py, the addresses of scalar accesses by compiler/codegen/addressing.py.
- int index math (int32, reading no memory) is `nsw` (an index that overflows is a lowering bug); pointer
  offsets are i64 GEPs. Integer data arithmetic wraps (no `nsw`), as ONNX and numpy do.
  `//`, `/` and `%` on ints are floor division / modulo (Python semantics, operands may be negative; on
  unsigned dtypes the unsigned forms); a run-time divisor of 0 gives 0 and never traps.
- float `+ - *` carry the `contract` fast-math flag (a*b+c may become one FMA); nothing is reassociated.
- float min/max propagate NaN from either operand, as numpy and onnxruntime's Max/Min/Relu/Clip do
  (intrinsics.float_max_min: one vmaxps/vminps, plus a NaN test unless an operand is a non-NaN constant).
- Loop kinds: serial -> a phi loop; unroll (constant extent) -> the body emitted extent times with the variable
  bound to constants (or, for the square tile of a transposing copy, vector loads, shuffles and vector stores:
  transpose.py); vectorize (constant extent N) -> the body emitted once on <N x T> values when
  `vectorize_blocker` finds nothing unsafe, else a serial loop; parallel -> the body outlined into
  `void NAME.parK(i8* closure, i32 task, i32 ntasks)` run by the module's thread pool (nested parallel -> serial).
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

from ..arith import coefficient, implies_limits, unclamped
from ..loopir import Allocate, Buffer, For, IfThenElse, LetStmt, Load, PrimFunc, Seq, Store
from . import threadpool
from .analysis import referenced, vectorize_blocker
from .cgutils import ALIGN, entry_alloca, for_range, is_vector, nbytes, scalar_type, splat
from .dtypes import from_memory, memory_type, to_memory, value_type
from .addressing import AddressEmitter
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
        self._lane_offsets: dict[tuple, ir.Constant] = {}  # (lanes, start) -> constant
        self._coefficients: dict = {}  # (id(index), lane var) -> (index, its coefficient in the lane var)

    def vectorize_blocker(self, loop: For) -> str | None:
        if id(loop) not in self._blockers:
            self._blockers[id(loop)] = vectorize_blocker(loop)
        return self._blockers[id(loop)]

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


class _FunctionEmitter(AddressEmitter):
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
        start = self.expr(s.start) if start is None else start
        stop = self.b.add(start, self.expr(s.extent), flags=("nsw",)) if stop is None else stop
        with for_range(self.b, start, stop, name=s.var.name) as i:
            self.env[s.var] = i
            self.stmt(s.body)
        del self.env[s.var]

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
        alias information survives outlining (the inliner turns them into scoped metadata)."""
        self.k.outlined += 1
        name = f"{self.k.func.name}.par{self.k.outlined}.chunk"  # '.': cannot clash with a kernel (C identifier)
        fn = ir.Function(self.k.module, ir.FunctionType(VOID, types + [I32, I32]), name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
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

    def every_other(self, ptr, start, vty: ir.VectorType):
        """Lanes start, start + 2, ..., start + 2 (N - 1) of ptr (a stride-2 row, as a schedule that vectorizes the
        columns of an NCHW strided convolution reads it): two contiguous loads, of [start, start + N) and of
        [start + N - 1, start + 2N - 1), which end at the last lane's element (never past it), and one shuffle of
        their even and odd positions (vpermt2ps on AVX-512), instead of N scalar loads and inserts."""
        low = self.vector_load(ptr, start, vty)
        high = self.vector_load(ptr, self.b.add(start, ir.Constant(start.type, vty.count - 1)), vty)
        return self.even_lanes(low, high)

    def vector_load(self, ptr, start, vty: ir.VectorType):
        """Elements [start, start + N) of ptr as one vector (element-aligned)."""
        return self.b.load(self.b.bitcast(self.addr(ptr, start), vty.as_pointer()), align=nbytes(vty.element))

    def even_lanes(self, low, high):
        """The even positions of low's elements [0, N) and high's [N - 1, 2N - 1) (high starts at low's last
        element): lane i is element 2i of their span."""
        n = low.type.count
        picks = [2 * i for i in range(n // 2)] + [n + 2 * i - (n - 1) for i in range(n // 2, n)]
        return self.b.shuffle_vector(low, high, ir.Constant(ir.VectorType(I32, n), picks))

    def padded_read(self, e: te.Select):
        """select(cond, x[index], other) in a vector body where index clamps a lane-dependent value c into the
        tensor and is affine in the lanes (stride 1 or 2) without its clamps: a padded window's read, x[min(max(2
        * l + rx - 1, 0), W - 1)] where 1 <= 2 * l + rx <= W. Three versions, chosen per vector:
        - no clamp bites at the first or the last lane (c is affine: at none): the unclamped index's plain vector
          load (two and a shuffle at stride 2), the rows' interior;
        - else, where no lane that cond selects is clamped: masked loads of the elements whose c is in range (c
          moves one per element), the rest `other`: no lane reads outside the tensor, the rows' borders;
        - else (an edge value repeated, not padding): the clamped elements, lane by lane; a version compiled only
          where cond does not imply the clamps' limits (arith.implies_limits). Its mere test and branch made a
          20-column max pool's kernel 7x slower.
        In a tail, the lanes past its mask read nothing but in the first version, where every lane's element is in
        the tensor. The values the emitter shares (which must dominate their uses) are computed before the
        branches; the border's masks are built in their block from those, the edge's index with a memo of its
        own."""
        load = e.true_value
        if not self.lanes or not isinstance(load, Load) or load.buffer.dtype == "bool" \
                or self.k.coefficient(load.index, self.vec_var, self.lets) is not None:
            return None
        stripped, limits = unclamped(load.index, self.vec_var)
        step = coefficient(stripped, self.vec_var, self.lets)
        slopes = [coefficient(x, self.vec_var, self.lets) for x, _, _ in limits]
        if not limits or step not in (1, 2) or any(slope != step for slope in slopes):
            return None
        n, b = self.lanes, self.b
        cond = splat(b, self.as_bool(self.expr(e.cond)), n)
        if self.mask is not None:
            cond = b.and_(cond, self.mask)
        other = self.expr(e.false_value)
        start = self.lane0_index(stripped)
        firsts = [self.lane0_index(x) for x, _, _ in limits]  # c at lane 0 of each limit (c moves `step` a lane)
        ity = firsts[0].type
        whole = ir.Constant(I1, 1)  # no clamp bites at the first or the last lane
        for (x, bound, is_lower), first in zip(limits, firsts):
            last = b.add(first, ir.Constant(ity, step * (n - 1)))
            for value in (first, last):
                whole = b.and_(whole, b.icmp_signed(">=" if is_lower else "<=", value, ir.Constant(ity, bound)))
        # A clamp of the whole index into the buffer (lowering's, where a tile's lanes may run past a row's end)
        # decides the interior version above; in the border's, an element whose coordinates are inside their
        # axes' clamps and whose lane is active is inside the buffer, and a selected lane that only it would
        # clamp reads outside the tensor, not an edge. Its vector tests made 1 of 3 taps of a 23-column max pool
        # 3x slower there (LLVM no longer unswitched the window's loop on them).
        if len(limits) > 1:
            kept = [k for k, lim in enumerate(limits) if not (lim[0] is stripped and lim[1] == (
                0 if lim[2] else load.buffer.size - 1))]
            if kept:
                limits, firsts = [limits[k] for k in kept], [firsts[k] for k in kept]
        edge_case = not implies_limits(e.cond, limits)  # (a padding guard implies its clamps: never an edge)
        ptr = self.buffer_ptr(load.buffer)
        vty = ir.VectorType(memory_type(load.buffer.dtype), n)
        results = []
        interior = b.append_basic_block("padded.interior")
        border = b.append_basic_block("padded.border")
        edge = b.append_basic_block("padded.edge") if edge_case else None
        merge = b.append_basic_block("padded.merge")
        pick = b.append_basic_block("padded.pick") if edge_case else border
        b.cbranch(whole, interior, pick)
        # in the border's versions only (the interior skips this work): per element of the loads (c of element j is
        # c(lane 0) + j) and per lane, inside every limit
        b.position_at_end(pick)
        span = n * step  # (2N: a power of two of lanes, where the loads need 2N - 1)
        iota = ir.Constant(ir.VectorType(ity, span), list(range(span)))
        elements = ir.Constant(ir.VectorType(I1, span), [1] * span)
        lanes = ir.Constant(ir.VectorType(I1, n), [1] * n)
        for (x, bound, is_lower), first in zip(limits, firsts):
            op = ">=" if is_lower else "<="
            at = b.add(splat(b, first, span), iota)
            elements = b.and_(elements, b.icmp_signed(op, at, ir.Constant(at.type, [bound] * span)))
            if edge_case:
                lane_c = b.shuffle_vector(at, at, ir.Constant(ir.VectorType(I32, n), [step * i for i in range(n)]))
                lanes = b.and_(lanes, b.icmp_signed(op, lane_c, ir.Constant(lane_c.type, [bound] * n)))
        if self.mask is not None:  # elements of no active lane are not read either
            active = b.shuffle_vector(self.mask, ir.Constant(self.mask.type, [0] * n), ir.Constant(
                ir.VectorType(I32, span), [j // step if j % step == 0 else min(j // step + 1, n - 1)
                                           for j in range(span)]))
            elements = b.and_(elements, active)
        if edge_case:
            clamped = b.and_(cond, b.not_(lanes))
            any_clamped = b.icmp_unsigned("!=", b.bitcast(clamped, ir.IntType(n)), ir.Constant(ir.IntType(n), 0))
            b.cbranch(any_clamped, edge, border)
        b.position_at_end(interior)
        results.append((self.every_other(ptr, start, vty) if step == 2 else self.vector_load(ptr, start, vty),
                        b.block))
        b.branch(merge)
        b.position_at_end(border)
        results.append((self.masked_span(ptr, start, vty, elements, step), b.block))
        b.branch(merge)
        if edge_case:  # the clamped index is computed here, where it is needed: every vector paid for it (a
            b.position_at_end(edge)  # 16 + 7 column max pool ran 2.3x slower), with values of this block only
            shared, self._shared = self._shared, {}
            try:
                index = splat(b, self.expr(load.index), n)
            finally:
                self._shared = shared
            if self.mask is not None:  # (lane 0 is in every tail; its element is always there)
                index = b.select(self.mask, index, splat(b, b.extract_element(index, I32(0)), n))
            results.append((self.gather(ptr, index, vty), b.block))
            b.branch(merge)
        b.position_at_end(merge)
        raw = b.phi(vty)
        for value, block in results:
            raw.add_incoming(value, block)
        t, f = self.unify(self.from_memory(raw, load.buffer), other, load.dtype, e.false_value.dtype)
        return b.select(cond, t, splat(b, f, n))

    def masked_span(self, ptr, start, vty: ir.VectorType, elements, step: int):
        """Lane i holds element start + step * i, read only where `elements` (<span x i1>, span = N at step 1,
        2N at step 2: the elements from start on) says so, undefined elsewhere: one masked load at step 1;
        at step 2, every_other's two loads, of elements [0, N) and [N - 1, 2N - 1), each masked."""
        n, load = vty.count, self.masked_intrinsic("load", vty)
        undef, align = ir.Constant(vty, ir.Undefined), I32(nbytes(vty.element))
        span = elements.type.count

        def masked(offset):
            mask = elements if span == n else self.b.shuffle_vector(elements, elements, ir.Constant(
                ir.VectorType(I32, n), list(range(offset, offset + n))))
            at = self.b.add(start, ir.Constant(start.type, offset)) if offset else start
            return self.b.call(load, [self.b.bitcast(self.addr(ptr, at), vty.as_pointer()), align, mask, undef])

        return masked(0) if step == 1 else self.even_lanes(masked(0), masked(n - 1))

    def load(self, e: Load):
        ptr = self.buffer_ptr(e.buffer)
        if not self.lanes:
            return self.from_memory(self.b.load(self.index_addr(ptr, e.index)), e.buffer)
        coeff = self.k.coefficient(e.index, self.vec_var, self.lets)
        if coeff == 0:  # one address (lane 0's) for every lane
            return self.from_memory(self.b.load(self.index_addr(ptr, e.index, lane0=True)), e.buffer)
        elem = memory_type(e.buffer.dtype)
        vty = ir.VectorType(elem, self.lanes)
        if coeff == 1:  # contiguous, from lane 0's address: one vector load
            vptr = self.b.bitcast(self.index_addr(ptr, e.index, lane0=True), vty.as_pointer())
            if self.mask is not None and e.buffer.scope != "local":  # the lanes past a tail read nothing (they may
                # lie past the buffer's end; a local buffer's slack holds them: LOCAL_SLACK)
                return self.from_memory(self.b.call(self.masked_intrinsic("load", vty), [
                    vptr, I32(nbytes(elem)), self.mask, ir.Constant(vty, None)]), e.buffer)
            return self.from_memory(self.b.load(vptr, align=nbytes(elem)), e.buffer)
        if coeff == 2 and self.mask is None and self.lanes >= 4:
            return self.from_memory(self.every_other(ptr, self.lane0_index(e.index), vty), e.buffer)
        index = self.expr(e.index)
        if not is_vector(index):
            return self.from_memory(self.b.load(self.addr(ptr, index)), e.buffer)
        if self.mask is not None:  # a masked-off lane reads element 0 (always there) instead of its own index
            index = self.b.select(self.mask, index, ir.Constant(index.type, None))
        return self.from_memory(self.gather(ptr, index, vty), e.buffer)

    def gather(self, ptr, index, vty: ir.VectorType):
        """Lane i reads element index[i]: one llvm.masked.gather of the lanes' addresses (a vector GEP), every lane
        on. LLVM emits a gather instruction where the CPU's is fast (AVX-512: vgatherdps) and scalar loads where it
        is not, after its IR passes in either case. Emitted as scalar loads inserted lane by lane, a candidate's
        unrolled gathers (a softmax reading 32 lanes 16 apart, 2,000 inserts) kept LLVM's SLP vectorizer 2 s on one
        build (2.7 -> 0.2 s; bench.build_rate's set 25.2 -> 22.0 s of LLVM time), and the models whose kernels
        gather (ShuffleNet's channel shuffles and blocked concatenations, PP-OCRv6 rec, ddddocr) ran as fast or
        faster (Zen 4)."""
        n = vty.count
        wide = self.b.sext(index, ir.VectorType(I64, n)) if index.type.element.width < 64 else index
        addresses = _VectorGep(self.b.block, ir.VectorType(vty.element.as_pointer(), n), "getelementptr",
                               [ptr, wide])
        self.b._insert(addresses)
        every_lane = ir.Constant(ir.VectorType(I1, n), [1] * n)
        return self.b.call(self.masked_intrinsic("gather", vty), [addresses, I32(nbytes(vty.element)), every_lane,
                                                                   ir.Constant(vty, None)])


class _VectorGep(ir.Instruction):
    """`getelementptr inbounds T, T* %base, <N x i64> %index`: a vector of N addresses (llvmlite's gep takes
    scalar indices only)."""

    def descr(self, buf):
        base, index = self.operands
        buf.append(f"getelementptr inbounds {base.type.pointee}, {base.type} {base.get_reference()}, "
                   f"{index.type} {index.get_reference()}\n")


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

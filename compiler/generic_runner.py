"""A generic module's planning and kernel calls as generated code (compiler/generic_module.py).

    runner = GeneratedRunner(module)        # module: a GenericModule; its steps, evaluator numbers and packing
    status = runner.plan(values, state)     # values: int64 [runner.inputs]; state: int64 [runner.words]
    status = runner.run(state, workspace, inputs, returned, final)

`plan` evaluates what GenericModule._plan does in Python and numpy, in one call into native code: every number of
the module's evaluator (the checks, the intermediates' dims, the kernels' size arguments; floor division and modulo
as Python's) with each data-sized dim at its largest value, the algorithm of each convolution that has several
(winograd_tile_at's rule), each buffer's bytes, the blocks of the packing and the buffers' offsets, the
workspace's size and the size arguments as int32, into `state`:

    state[:n]                      the evaluator's numbers, then a 1
    state[choice_at + i]           the chosen kernel of the i-th step with several
    state[values_at + i]           the value of the module's i-th size variable (its inputs', then data-sized dims')
    state[offset_at + b]           buffer b's offset in the workspace
    state[size_at]                 the workspace's bytes
    state[sizes_at:] (as int32)    the size arguments of every kernel, in GenericModule._size_at's order

It returns -1, or the index of the first failed check, -2 for a negative output dim, -3 for a division by zero:
then the caller plans in Python, which raises the error that names it; -5 where a size overflows 64 bits (or a
size argument 32): sizes no memory holds, which the caller refuses. `run` calls every step's chosen kernel
with its arguments' addresses (inputs and returned results from the two tables; constants at their addresses;
intermediates and scratch at the workspace plus their offsets), a scan's cell once per step in a loop. Before the
step that a data-sized dim's count feeds, it reads the count (an int64 an earlier kernel wrote), evaluates every
number again at it into its own copy of the size arguments, and writes the numbers it ends at into `final` (the
shapes of the results, which the caller cuts from room made for the largest counts); a count out of range or a
failed check returns DATA_REFUSED (the caller runs the call again in Python, which names it). Both functions hold
no state and release the GIL (ctypes): `state` is read only by `run`, so concurrent calls are safe.

The point is a shape's first call: GenericModule._plan's numpy and the Python loop over the steps ran 0.15-0.2 ms
and 3-5 us per kernel with their caches cold after the kernels (BERT's generic module, 33 kernels, Zen 4), as much
as the model itself at short lengths; here a plan is a few thousand integer operations and a call one ctypes call.
"""
from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from relayish import te
from relayish.prim_expr import BinOp, Cast, IntImm, PrimExpr, Var

from .codegen.host import host_target
from .codegen.library import _LLVM_LOCK, _init_llvm
from .passes.layout import WINOGRAD_MIN_TILES

I8, I32, I64, I1 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.IntType(1)
I8P, I64P = I8.as_pointer(), I64.as_pointer()
ALIGN = 64
OK, NEGATIVE_OUTPUT, DIVISION_BY_ZERO, DATA_REFUSED, OVERFLOW = -1, -2, -3, -4, -5


def _memcpy(module: ir.Module) -> ir.Function:
    name = "llvm.memcpy.p0i8.p0i8.i64"
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ir.VoidType(), [I8P, I8P, I64, I1]), name)


class _Ints:
    """Emits the evaluator's int expressions as i64 arithmetic, each distinct subexpression once; a division or
    modulo by zero sets a flag (its divisor taken as 1), and so does a sum or product that overflows 64 bits
    (sizes no memory holds: Python's ints would not wrap, these must not)."""

    def __init__(self, b: ir.IRBuilder, values: dict):
        self.b, self.values, self.memo = b, values, {}
        self.zero_divisor = self.overflow = I1(0)

    def checked(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """x + y, x - y or x * y; an overflow sets the flag."""
        method = {"+": self.b.sadd_with_overflow, "-": self.b.ssub_with_overflow, "*": self.b.smul_with_overflow}
        pair = method[op](x, y)
        self.overflow = self.b.or_(self.overflow, self.b.extract_value(pair, 1))
        return self.b.extract_value(pair, 0)

    def __call__(self, e) -> ir.Value:
        if not isinstance(e, PrimExpr):
            return I64(int(e))
        if isinstance(e, IntImm):
            return I64(e.value)
        if isinstance(e, Var):
            if e not in self.values:
                raise KeyError(f"no value for size variable {e.name!r}")
            return self.values[e]
        if isinstance(e, Cast):
            return self(e.value)
        key = te.expr_str(e)
        if key not in self.memo:
            self.memo[key] = self._binop(e)
        return self.memo[key]

    def _binop(self, e) -> ir.Value:
        if not isinstance(e, BinOp):
            raise ValueError(f"not an int expression of size variables: {te.expr_str(e)}")
        b, x, y = self.b, self(e.a), self(e.b)
        if e.op in ("+", "-", "*"):
            return self.checked(e.op, x, y)
        if e.op == "min":
            return b.select(b.icmp_signed("<", x, y), x, y)
        if e.op == "max":
            return b.select(b.icmp_signed(">", x, y), x, y)
        if e.op in ("//", "%"):
            return self.floor_divide(x, y, e.op)
        raise ValueError(f"not an int expression of size variables: {te.expr_str(e)}")

    def floor_divide(self, x: ir.Value, y: ir.Value, op: str) -> ir.Value:
        """x // y or x % y as Python's (rounding toward minus infinity)."""
        b = self.b
        zero = b.icmp_signed("==", y, I64(0))
        self.zero_divisor = b.or_(self.zero_divisor, zero)
        y = b.select(zero, I64(1), y)
        q, r = b.sdiv(x, y), b.srem(x, y)
        # the truncated remainder has x's sign: off by one step where it is nonzero and its sign differs from y's
        off = b.and_(b.icmp_signed("!=", r, I64(0)), b.xor(b.icmp_signed("<", r, I64(0)),
                                                            b.icmp_signed("<", y, I64(0))))
        if op == "//":
            return b.sub(q, b.zext(off, I64))
        return b.add(r, b.select(off, y, I64(0)))

    def ceil_divide(self, x: ir.Value, m: int) -> ir.Value:
        """-(-x // m) for a positive constant m."""
        return self.b.sub(I64(0), self.floor_divide(self.b.sub(I64(0), x), I64(m), "//"))


def _jit(ir_module: ir.Module, names: list[str]):
    """(the execution engine, which must be kept alive, the addresses of the functions `names`) of the module
    compiled in this process for the host."""
    _init_llvm()
    with _LLVM_LOCK:
        mod = llvm.parse_assembly(str(ir_module))
        mod.verify()
        t = host_target()  # a machine of its own: the engine takes ownership of it (the shared ones are the compiler's)
        machine = llvm.Target.from_triple(t["triple"]).create_target_machine(cpu=t["cpu"], features=t["features"],
                                                                             opt=2, jit=True)
        engine = llvm.create_mcjit_compiler(mod, machine)
        engine.finalize_object()
        return engine, [engine.get_function_address(n) for n in names]


def native_evaluator(exprs: list, variables: list):
    """compiler.arith.evaluator's function as the generated code computes it: f(*values) -> the tuple of the
    expressions' values, or None where one divides by zero or overflows 64 bits (the plan's statuses
    DIVISION_BY_ZERO, OVERFLOW)."""
    ir_module = ir.Module(name="relayish_ints")
    fn = ir.Function(ir_module, ir.FunctionType(I32, [I64P, I64P]), "evaluate")
    values_ptr, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ints = _Ints(b, {v: b.load(b.gep(values_ptr, [I64(k)])) for k, v in enumerate(variables)})
    for k, e in enumerate(exprs):
        b.store(ints(e), b.gep(out, [I64(k)]))
    b.ret(b.select(ints.zero_divisor, I32(DIVISION_BY_ZERO), b.select(ints.overflow, I32(OVERFLOW), I32(OK))))
    engine, (address,) = _jit(ir_module, ["evaluate"])
    call = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(address)

    def evaluate(*values):
        args = (ctypes.c_int64 * max(len(values), 1))(*values)
        result = (ctypes.c_int64 * max(len(exprs), 1))()
        status = call(ctypes.addressof(args), ctypes.addressof(result))
        return None if status != OK else tuple(result[:len(exprs)])
    evaluate.engine = engine  # (the code lives as long as the function)
    return evaluate


class GeneratedRunner:
    """The plan and run functions of one GenericModule (see the module docstring), compiled in this process."""

    def __init__(self, module):
        m = module
        self.numbers = len(m._exprs) + 1  # the evaluator's, then a 1
        choosing = {k: (h, w, tiles) for k, h, w, tiles in m._choosing}
        self.choice_index = {k: i for i, k in enumerate(sorted(choosing))}
        n_buffers = len(m._starts)
        self.inputs = list(m._vars.values())  # the plan's values, in order (the data-sized dims' it computes)
        self.choice_at = self.numbers
        self.values_at = self.choice_at + len(choosing)
        self.offset_at = self.values_at + len(m._order)
        self.size_at = self.offset_at + n_buffers
        self.sizes_at = self.size_at + 1
        self.words = self.sizes_at + (len(m._size_at) + 1) // 2
        ir_module = ir.Module(name="relayish_generic_runner")
        self._emit_plan(ir_module, m, choosing)
        self._emit_run(ir_module, m)
        self._engine, (plan_address, run_address) = _jit(ir_module, ["plan", "run"])
        vp = ctypes.c_void_p
        self.plan = ctypes.CFUNCTYPE(ctypes.c_int32, vp, vp)(plan_address)
        self.run = ctypes.CFUNCTYPE(ctypes.c_int32, vp, vp, vp, vp, vp)(run_address)

    # ------------------------------------------------------------------------------------------------ plan

    def _emit_plan(self, ir_module, m, choosing: dict) -> None:
        fn = ir.Function(ir_module, ir.FunctionType(I32, [I64P, I64P]), "plan")
        values_ptr, state = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        values = {v: b.load(b.gep(values_ptr, [I64(k)])) for k, v in enumerate(self.inputs)}
        ints = _Ints(b, values)
        for var, bound in m._data.values():  # a data-sized dim at its largest value (the buffers' room)
            largest = ints(bound)
            values[var] = b.select(b.icmp_signed("<", largest, I64(0)), I64(0), largest)
        for k, v in enumerate(m._order):
            b.store(values[v], b.gep(state, [I64(self.values_at + k)]))
        numbers = [ints(e) for e in m._exprs] + [I64(1)]
        for k, v in enumerate(numbers):
            b.store(v, b.gep(state, [I64(k)]))
        status = I32(OK)
        for k in reversed(range(len(m._checks))):  # the first failed check
            status = b.select(b.icmp_signed("<", numbers[k], I64(1)), I32(k), status)
        negative = I1(0)
        for p in m._out_dims.tolist():
            negative = b.or_(negative, b.icmp_signed("<", numbers[p], I64(0)))
        status = b.select(b.and_(b.icmp_signed("==", status, I32(OK)), negative), I32(NEGATIVE_OUTPUT), status)
        status = b.select(ints.zero_divisor, I32(DIVISION_BY_ZERO), status)
        choice = {}
        for k, (h, w, tiles) in choosing.items():  # winograd_tile_at's rule; the last kernel if no tile fits
            chosen = I64(tiles.index(0) if 0 in tiles else len(tiles) - 1)
            for i in reversed(range(len(tiles))):
                if tiles[i]:
                    count = b.mul(ints.ceil_divide(numbers[h], tiles[i]), ints.ceil_divide(numbers[w], tiles[i]))
                    chosen = b.select(b.icmp_signed(">=", count, I64(WINOGRAD_MIN_TILES)), I64(i), chosen)
            choice[k] = chosen
            b.store(chosen, b.gep(state, [I64(self.choice_at + self.choice_index[k])]))
        chooser = {b_: kc for kc, bufs in m._by_choice.items() for b_ in bufs}  # scratch buffer -> (step, choice)
        starts, gather = m._starts.tolist() + [len(m._gather)], m._gather.tolist()
        nbytes = []
        for buf, itemsize in enumerate(m._itemsizes.tolist()):
            count = I64(1)
            for p in gather[starts[buf]:starts[buf + 1]]:
                if p >= 0:
                    count = ints.checked("*", count, numbers[p])
            if buf in chooser:  # the scratch of a kernel not chosen: none
                k, c = chooser[buf]
                count = b.select(b.icmp_signed("==", choice[k], I64(c)), count, I64(0)) if k in choice else \
                    (count if c == 0 else I64(0))
            count = b.select(b.icmp_signed("<", count, I64(1)), I64(1), count)
            padded = ints.checked("+", ints.checked("*", count, I64(itemsize)), I64(ALIGN - 1))
            aligned = b.mul(b.sdiv(padded, I64(ALIGN)), I64(ALIGN))
            nbytes.append(aligned)
        packing = list(m._packing)
        blocks = [I64(0)] * (max(packing, default=-1) + 1)
        for buf, p in enumerate(packing):
            blocks[p] = b.select(b.icmp_signed(">", nbytes[buf], blocks[p]), nbytes[buf], blocks[p])
        starts_of, end = [], I64(0)
        for size in blocks:
            starts_of.append(end)
            end = ints.checked("+", end, size)
        for buf, p in enumerate(packing):
            b.store(starts_of[p], b.gep(state, [I64(self.offset_at + buf)]))
        b.store(end, b.gep(state, [I64(self.size_at)]))
        sizes = b.bitcast(b.gep(state, [I64(self.sizes_at)]), I32.as_pointer())
        too_large = I1(0)  # a size argument is an int32
        for i, p in enumerate(m._size_at.tolist()):
            too_large = b.or_(too_large, b.icmp_signed(">", numbers[p], I64(2**31 - 1)))
            b.store(b.trunc(numbers[p], I32), b.gep(sizes, [I64(i)]))
        b.ret(b.select(b.or_(ints.overflow, too_large), I32(OVERFLOW), status))

    # ------------------------------------------------------------------------------------------------ run

    def _emit_run(self, ir_module, m) -> None:
        fn = ir.Function(ir_module, ir.FunctionType(I32, [I64P, I8P, I8P.as_pointer(), I8P.as_pointer(), I64P]),
                         "run")
        state, workspace, inputs, returned, final = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        returned_index = {kj: i for i, kj in
                          enumerate((k, j) for k, dtypes in m._returned for j in range(len(dtypes)))}

        def word(at):
            return b.load(b.gep(state, [I64(at)]))

        def in_workspace(buf):
            return b.gep(workspace, [word(self.offset_at + buf)])

        def source(a):
            """The address of a kernel argument: an input, a constant, or an earlier step's result."""
            if a[0] == "input":
                return b.load(b.gep(inputs, [I64(a[1])]))
            if a[0] == "const":
                return b.inttoptr(I64(m._const_ptrs[a[1]]), I8P)
            return results[a[1]][a[2]]
        numbers = [None] * self.numbers  # the numbers at this point of the call (loaded from the plan when first read)

        def number(p):
            if numbers[p] is None:
                numbers[p] = word(p)
            return numbers[p]
        if m._data:  # the size arguments change as data-sized dims are bound: a copy of the plan's, this call's own
            sizes = b.bitcast(b.alloca(I32, max(len(m._size_at), 1)), I8P)
            planned = b.bitcast(b.gep(state, [I64(self.sizes_at)]), I8P)
            b.call(_memcpy(ir_module), [sizes, planned, I64(4 * len(m._size_at)), I1(0)])
            values = {v: word(self.values_at + k) for k, v in enumerate(m._order)}
        else:
            sizes = b.bitcast(b.gep(state, [I64(self.sizes_at)]), I8P)
        results = []  # per step: per output, its address
        for k, (fns, s, out_bufs, scratch_bufs) in enumerate(zip(m._kernels, m._steps, m._out_bufs,
                                                                  m._scratch_bufs)):
            if k in m._data:  # its count is computed: what follows runs at it
                self._bind_data(b, fn, m, k, source(s.args[1]), values, numbers, sizes)
            outs = [b.load(b.gep(returned, [I64(returned_index[(k, j)])])) if buf is None else in_workspace(buf)
                    for j, buf in enumerate(out_bufs)]
            results.append(outs)
            options = s.choices or (s,)
            if s.scan:
                self._emit_scan(b, fn, k, m, [source(a) for a in s.args], outs[0],
                                [in_workspace(buf) for buf in scratch_bufs[0]], sizes, number)
                continue

            def call(c, option=options[0]):
                args = [source(a) for a in option.args] + outs + [in_workspace(buf) for buf in scratch_bufs[c]]
                start = m._size_start[k][c]
                if start is not None:
                    args.append(b.gep(sizes, [I64(4 * start)]))
                address = ctypes.cast(fns[c], ctypes.c_void_p).value
                kernel_type = ir.FunctionType(ir.VoidType(), [I8P] * len(args))
                b.call(b.inttoptr(I64(address), kernel_type.as_pointer()), args)
            if len(options) == 1:
                call(0)
                continue
            chosen = word(self.choice_at + self.choice_index[k])
            done = fn.append_basic_block(f"step{k}_done")
            cases = [fn.append_basic_block(f"step{k}_choice{c}") for c in range(len(options))]
            switch = b.switch(chosen, cases[-1])
            for c, block in enumerate(cases):
                switch.add_case(I64(c), block)
                b.position_at_end(block)
                call(c, options[c])
                b.branch(done)
            b.position_at_end(done)
        if m._data:  # the numbers the call ended at: the shapes of its results
            for p in range(self.numbers):
                b.store(number(p), b.gep(final, [I64(p)]))
        b.ret(I32(OK))

    def _bind_data(self, b, fn, m, k: int, count_at, values: dict, numbers: list, sizes) -> None:
        """Before step k: its data-sized dim takes the value its count input holds (an int64), within [0, the
        plan's largest]; every number is evaluated again at it, the checks hold again, and the size arguments
        change (generic_module._bind_data's work). A count out of range, a failed check or a division by zero
        returns DATA_REFUSED: the caller runs the call again in Python, which raises the error naming it."""
        var, _ = m._data[k]
        count = b.load(b.bitcast(count_at, I64P))
        largest = values[var]
        wrong = b.or_(b.icmp_signed("<", count, I64(0)), b.icmp_signed(">", count, largest))
        values[var] = count
        ints = _Ints(b, values)
        fresh = [ints(e) for e in m._exprs] + [I64(1)]
        for p in range(len(m._checks)):
            wrong = b.or_(wrong, b.icmp_signed("<", fresh[p], I64(1)))
        wrong = b.or_(b.or_(wrong, ints.zero_divisor), ints.overflow)
        for p in m._size_at.tolist():
            wrong = b.or_(wrong, b.icmp_signed(">", fresh[p], I64(2**31 - 1)))
        with b.if_then(wrong, likely=False):
            b.ret(I32(DATA_REFUSED))
        numbers[:] = fresh
        sizes32 = b.bitcast(sizes, I32.as_pointer())
        for i, p in enumerate(m._size_at.tolist()):
            b.store(b.trunc(fresh[p], I32), b.gep(sizes32, [I64(i)]))

    def _emit_scan(self, b: ir.IRBuilder, fn: ir.Function, k: int, m, inputs: list, history: ir.Value,
                   scratch: list, sizes, number) -> None:
        """A scan's steps (generic_module._run_scan's loop): step t runs the cell (xp, times, state, weight[, bias],
        out, scratch..., sizes) on the state of step t - 1 (the initial one first) into the history's slice t, with
        the times (t, T - 1 - t) that its forward and reverse directions process."""
        s = m._steps[k]
        dims = [number(p) for p in m._shape_at[(k, 0)]]
        step_bytes = I64(np.dtype(s.outputs[0][1]).itemsize)
        for d in dims[1:]:
            step_bytes = b.mul(step_bytes, d)
        times = b.alloca(I32, 2)
        xp, initial, *rest = inputs
        start = m._size_start[k][0]
        tail = scratch + ([b.gep(sizes, [I64(4 * start)])] if start is not None else [])
        kernel = ctypes.cast(m._kernels[k][0], ctypes.c_void_p).value
        kernel_type = ir.FunctionType(ir.VoidType(), [I8P] * (len(inputs) + 2 + len(tail)))
        before = b.block
        head, body, done = (fn.append_basic_block(f"scan{k}_{n}") for n in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        t = b.phi(I64)
        t.add_incoming(I64(0), before)
        b.cbranch(b.icmp_signed("<", t, dims[0]), body, done)
        b.position_at_end(body)
        b.store(b.trunc(t, I32), times)
        b.store(b.trunc(b.sub(b.sub(dims[0], I64(1)), t), I32), b.gep(times, [I32(1)]))
        previous = b.gep(history, [b.mul(b.sub(t, I64(1)), step_bytes)])
        state = b.select(b.icmp_signed("==", t, I64(0)), initial, previous)
        out = b.gep(history, [b.mul(t, step_bytes)])
        b.call(b.inttoptr(I64(kernel), kernel_type.as_pointer()),
               [xp, b.bitcast(times, I8P), state, *rest, out, *tail])
        t.add_incoming(b.add(t, I64(1)), body)
        b.branch(head)
        b.position_at_end(done)

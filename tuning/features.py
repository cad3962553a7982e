"""Per-statement features of a lowered kernel, the input of the learned cost model (Ansor, OSDI'20, section 5.2).

One row per Store statement of the loop IR (the innermost buffer writes: a reduction's init, its update, the
write-back of a cache stage, a padding copy...). A row describes the statement in the context of its enclosing
loops: the float and integer operations it executes by kind, how its loops are annotated, what LLVM will make of
them (straight-line code, vector lanes of its own or found by LLVM's vectorizers, gathers, accumulators kept in
registers, dependence chains), a rough cycle estimate, its register tile, its memory traffic and arithmetic
intensity, the local buffers in scope, and per buffer (the `TOP_K_BUFFERS` buffers with the most bytes accessed,
sorted by bytes, zero-padded): access type, bytes, unique bytes, cache lines, strides and reuse (Ansor's). A
program's predicted score is the sum of its rows' predictions, so each row describes its statement alone.

Memory analysis. Every flat index is an affine form over *terms*: loop variables, and opaque sub-expressions such
as `v // 9`, `v % 9` (fused loops) or `max(0, min(e, n))` (clamped padding reads). The distinct elements an access
touches while the innermost loops run (the outer ones fixed) are estimated term by term: a loop variable takes
its extent's values, `v // c`, `v % c` and clamps take no more values than their operand (and `% c` at most c);
terms of equal stride slide over each other (a window: ry*144 + k*144 takes ry + k - 1 values), terms of
different strides multiply; the count never exceeds the width of the index's range + 1, nor the buffer's size.

Invariants: rows are finite, deterministic (nothing depends on object ids or hash order), and every count is
scaled by log2(1 + x) (signed for strides), so programs of very different sizes stay comparable. Featurizing a
ResNet-18 task's kernel takes 1-2 ms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from compiler.arith import affine_form, interval, slope, variables
from compiler.codegen.analysis import vectorize_blocker
from compiler.loopir import Allocate, For, IfThenElse, LetStmt, Load, PrimFunc, Seq, Store
from relayish import te

TOP_K_BUFFERS = 5
CACHE_LINE_BYTES = 64
AI_LEVELS = (1, 2, 3)  # arithmetic intensity over the innermost 1, 2, 3 loops (and over the whole nest)
CACHE_BYTES = {"l1": 32 * 1024, "l2": 1024 * 1024}  # typical sizes: what matters is the order of magnitude
LOOP_KINDS = ("serial", "parallel", "vectorize", "unroll")
# What the code generator's LLVM does with the loops (see _straight_line_block, _vector_lanes, _accumulators):
UNROLL_BUDGET = 128  # statement copies LLVM's full unrolling produces at most (its O3 threshold, roughly)
MAX_LANES = 16  # float32 lanes of the widest vector register (AVX-512)
FMA_LATENCY = 4  # cycles; a round trip through memory (store, then load of the same address) adds about 6
MAX_REGISTER_VECTORS = 28  # of 32 vector registers, a few stay for the operands
_ITEMSIZE = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}

STMT_FEATURES = [
    # float and integer operations executed by the statement in total (count per execution x executions)
    "f_addsub", "f_mul", "f_div", "f_fma", "f_minmax", "f_math", "f_cmp_select", "f_cast",
    "i_addsub", "i_mul", "i_divmod", "i_minmax_cmp", "flops",
    # loops around the statement
    "n_loops", "exec_count", "outer_prod", "inner_extent",
    *[f"inner_kind_{k}" for k in LOOP_KINDS],
    "par_num", "par_prod", "par_len", "work_per_par_iter",
    "vec_num", "vec_prod", "vec_len", "vec_innermost", "vec_effective",
    "unroll_num", "unroll_prod", "unroll_len", "guard_depth",
    # what LLVM makes of the innermost loops: straight-line code (unrolled), vector lanes (ours or its own)
    "straight_elems", "lanes", "llvm_vectorized", "gathers", "vector_instr_estimate", "body_iters", "acc_in_registers",
    # a rough cycle count: vector operations, distinct loads per straight-line block, cache traffic
    "vec_ops", "mem_ops", "acc_chains", "latency_cycles", "est_cycles",
    # the register tile: the loops inside the innermost loop that does not move the stored element
    "tile_elems", "tile_read_elems", "tile_intensity", "tile_reuse_extent",
    # what the statement is
    "store_local", "is_init", "is_update",
    # memory of the statement as a whole
    "bytes_total", "unique_bytes_total", "lines_total", "ai_total", "ai_unique",
    *[f"ai_level{l}" for l in AI_LEVELS], *[f"traffic_{c}" for c in CACHE_BYTES],
    # local buffers allocated around it
    "alloc_num", "alloc_bytes", "alloc_max_bytes",
]
BUFFER_FEATURES = [
    "read", "write", "read_write", "local", "buffer_bytes",
    "bytes", "unique_bytes", "lines", "unique_lines",
    "stride", "first_nonzero_stride",
    "reuse_loop", "reuse_serial", "reuse_none", "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct",
    "bytes_per_reuse",
]
FEATURE_NAMES = STMT_FEATURES + [f"buf{k}.{n}" for k in range(TOP_K_BUFFERS) for n in BUFFER_FEATURES]
NUM_FEATURES = len(FEATURE_NAMES)
_SIGNED = {i for i, n in enumerate(FEATURE_NAMES) if n.endswith("stride")}


def extract_features(func: PrimFunc) -> np.ndarray:
    """(number of Store statements, NUM_FEATURES) float32 matrix of the kernel's statements, in program order."""
    rows: list[np.ndarray] = []
    _visit(func.body, _Context(), rows)
    if not rows:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    return np.stack(rows).astype(np.float32)


# ---------------------------------------------------------------------------------------------- traversal

@dataclass(frozen=True)
class _Loop:
    var: te.Var
    extent: int
    kind: str
    vector_ok: bool  # a vectorize loop that codegen turns into <N x T> code


@dataclass
class _Context:
    loops: tuple = ()
    allocs: tuple = ()  # local Buffers in scope
    lets: dict = field(default_factory=dict)
    guards: int = 0


def _visit(s, ctx: _Context, rows: list) -> None:
    if isinstance(s, Seq):
        for x in s.stmts:
            _visit(x, ctx, rows)
    elif isinstance(s, For):
        extent = _const_int(s.extent, ctx)
        ok = s.kind == "vectorize" and vectorize_blocker(s) is None
        sub = _Context(ctx.loops + (_Loop(s.var, extent, s.kind, ok),), ctx.allocs, ctx.lets, ctx.guards)
        _visit(s.body, sub, rows)
    elif isinstance(s, IfThenElse):
        sub = _Context(ctx.loops, ctx.allocs, ctx.lets, ctx.guards + 1)
        _visit(s.then_case, sub, rows)
        if s.else_case is not None:
            _visit(s.else_case, sub, rows)
    elif isinstance(s, LetStmt):
        _visit(s.body, _Context(ctx.loops, ctx.allocs, {**ctx.lets, s.var: _inline_lets(s.value, ctx.lets)},
                                ctx.guards), rows)
    elif isinstance(s, Allocate):
        _visit(s.body, _Context(ctx.loops, ctx.allocs + (s.buffer,), ctx.lets, ctx.guards), rows)
    elif isinstance(s, Store):
        rows.append(_statement_row(s, ctx))
    else:
        raise TypeError(f"extract_features: unexpected statement {type(s).__name__}")


def _const_int(e, ctx: _Context) -> int:
    """A loop extent: its value, or its largest value over the enclosing loops when it is not a constant."""
    if isinstance(e, te.IntImm):
        return max(e.value, 0)
    rng = interval(_inline_lets(e, ctx.lets), {l.var: max(l.extent, 1) for l in ctx.loops})
    return max(rng[1], 1) if rng is not None else 1


def _inline_lets(e, lets: dict):
    return te.substitute_vars(e, lets) if lets else e


# ---------------------------------------------------------------------------------------------- one statement

def _statement_row(store: Store, ctx: _Context) -> np.ndarray:
    loops = ctx.loops
    value = _inline_lets(store.value, ctx.lets)
    index = _inline_lets(store.index, ctx.lets)
    ops = _count_ops(value)
    _count_int_ops(index, ops)
    accesses = []  # one per load in the expression as a tree: a load the DAG shares is one _Access, repeated
    for load, times in _loads(value):
        access = _Access(load.buffer, _inline_lets(load.index, ctx.lets), False, loops)
        _count_int_ops(access.index, ops, times)
        accesses += [access] * times
    accesses.append(_Access(store.buffer, index, True, loops))  # the store is always the last access
    execs = math.prod(l.extent for l in loops)
    f = dict.fromkeys(STMT_FEATURES, 0.0)
    f.update({k: v * execs for k, v in ops.items()})
    flops_per_exec = ops["f_addsub"] + ops["f_mul"] + ops["f_div"] + ops["f_minmax"] + ops["f_math"]
    f["flops"] = flops_per_exec * execs
    f["store_local"] = float(store.buffer.scope == "local")
    f["is_init"] = float(isinstance(value, (te.IntImm, te.FloatImm)))
    f["is_update"] = float(any(a.buffer is store.buffer and a.index == index for a in accesses[:-1]))
    # in this order: each step reads features the previous ones wrote
    _loop_features(f, loops, execs, ctx.guards)
    block, lanes, lane_var = _codegen_features(f, ops, accesses, loops, execs, flops_per_exec)
    buffers = _buffer_features(accesses, loops, execs)
    _memory_features(f, buffers, accesses, loops, execs, flops_per_exec)
    _tile_features(f, accesses, loops)
    _accumulators(f, accesses, loops, block, lanes, lane_var)
    _cycle_estimate(f, ops, accesses, block, lanes, lane_var, execs)
    alloc_bytes = [b.size * _ITEMSIZE.get(b.dtype, 4) for b in ctx.allocs]
    f["alloc_num"], f["alloc_bytes"] = len(alloc_bytes), sum(alloc_bytes)
    f["alloc_max_bytes"] = max(alloc_bytes, default=0)
    row = [f[n] for n in STMT_FEATURES]
    buffers.sort(key=lambda b: (-b["bytes"], -b["unique_bytes"], b["name"]))
    for k in range(TOP_K_BUFFERS):
        row += [buffers[k][n] for n in BUFFER_FEATURES] if k < len(buffers) else [0.0] * len(BUFFER_FEATURES)
    return _scale(np.asarray(row, dtype=np.float64))


def _codegen_features(f: dict, ops: dict, accesses: list, loops: tuple, execs: int, flops_per_exec: int) -> tuple:
    """What LLVM makes of the innermost loops: the straight-line block, the vector lanes, the gathers; returns
    (block, lanes, lane variable) for the estimates that follow."""
    block = _straight_line_block(loops, flops_per_exec + len(accesses))  # index arithmetic folds away
    f["straight_elems"] = math.prod(l.extent for l in block)
    lanes, lane_var = _vector_lanes(loops, block, accesses)
    f["lanes"] = lanes
    f["llvm_vectorized"] = float(lanes > 1 and not f["vec_effective"])
    f["gathers"] = sum(1 for a in accesses if lane_var is not None and a.stride(lane_var) not in (0, 1))
    f["vector_instr_estimate"] = execs * (sum(ops.values()) + len(accesses)) / lanes
    # iterations of the innermost loop left after unrolling; a loop LLVM vectorizes runs once per vector
    lane_outside = lane_var is not None and all(l.var is not lane_var for l in block)
    f["body_iters"] = execs / f["straight_elems"] / (lanes if lane_outside else 1.0)
    return block, lanes, lane_var


def _memory_features(f: dict, buffers: list, accesses: list, loops: tuple, execs: int, flops_per_exec: int):
    f["bytes_total"] = sum(b["bytes"] for b in buffers)
    f["unique_bytes_total"] = sum(b["unique_bytes"] for b in buffers)
    f["lines_total"] = sum(b["lines"] for b in buffers)
    f["ai_total"] = f["flops"] / max(f["bytes_total"], 1.0)
    f["ai_unique"] = f["flops"] / max(f["unique_bytes_total"], 1.0)
    footprint = [sum(a.unique_bytes(inner) for a in accesses) for inner in range(len(loops) + 1)]
    for level in AI_LEVELS:
        inner = min(level, len(loops))
        iterations = math.prod(l.extent for l in loops[len(loops) - inner:])
        f[f"ai_level{level}"] = flops_per_exec * iterations / footprint[inner]
    for name, size in CACHE_BYTES.items():
        f[f"traffic_{name}"] = _traffic(footprint, loops, execs, size)


def _loop_features(f: dict, loops: tuple, execs: int, guards: int) -> None:
    f["n_loops"] = len(loops)
    f["exec_count"] = execs
    f["inner_extent"] = loops[-1].extent if loops else 1
    f["outer_prod"] = execs / max(f["inner_extent"], 1)
    if loops:
        f[f"inner_kind_{loops[-1].kind}"] = 1.0
    par = [l for l in loops if l.kind == "parallel"]
    vec = [l for l in loops if l.kind == "vectorize"]
    unr = [l for l in loops if l.kind == "unroll"]
    f["par_num"], f["par_prod"] = len(par), math.prod(l.extent for l in par)
    f["par_len"] = par[0].extent if par else 0
    f["work_per_par_iter"] = execs / max(f["par_prod"], 1)
    f["vec_num"], f["vec_prod"] = len(vec), math.prod(l.extent for l in vec)
    f["vec_len"] = vec[-1].extent if vec else 0
    f["vec_innermost"] = float(bool(loops) and loops[-1].kind == "vectorize")
    f["vec_effective"] = float(bool(vec) and vec[-1] is loops[-1] and vec[-1].vector_ok)
    f["unroll_num"], f["unroll_prod"] = len(unr), math.prod(l.extent for l in unr)
    f["unroll_len"] = unr[-1].extent if unr else 0
    f["guard_depth"] = guards


def _cycle_estimate(f: dict, ops: dict, accesses: list, block: tuple, lanes: float, lane_var, execs: int):
    """Issue-bound cycles (2 vector ops and 2 loads per cycle; CSE keeps one load per distinct element or
    vector of a straight-line block; an accumulator kept in registers is neither loaded nor stored) against
    cache-bound cycles (a line per cycle from L2, a quarter from beyond)."""
    arith = ops["f_addsub"] + ops["f_mul"] - ops["f_fma"] + ops["f_div"] * 4 + ops["f_minmax"] + ops["f_math"] * 10
    f["vec_ops"] = execs * (arith + ops["f_cmp_select"]) / lanes
    blocks = execs / max(math.prod(l.extent for l in block), 1)
    mem = 0.0
    for a in accesses:
        if a.buffer is accesses[-1].buffer and f["acc_in_registers"]:
            continue
        elems = a.unique_elems(len(block))
        contiguous = lane_var is not None and a.stride(lane_var) in (0, 1)
        mem += elems / lanes if contiguous else elems
    f["mem_ops"] = blocks * mem
    issue = max(f["vec_ops"], f["mem_ops"]) / 2 + f["body_iters"]
    issue = max(issue, f["latency_cycles"])
    cache = f["traffic_l1"] / CACHE_LINE_BYTES + 4 * f["traffic_l2"] / CACHE_LINE_BYTES
    f["est_cycles"] = max(issue, cache)


def _accumulators(f: dict, accesses: list, loops: tuple, block: tuple, lanes: float, lane_var) -> None:
    """A reduction (a loop that does not move the stored element) is a chain of dependent updates per stored
    element: per straight-line block, `acc_chains` independent vector chains run side by side, and each step
    waits for the previous one (FMA latency, plus a store-to-load round trip unless the accumulators live in
    registers: a local buffer indexed only inside the block, in few enough registers)."""
    store = accesses[-1]
    if not f["is_update"] or all(l.extent == 1 or store.depends_on(l.var) for l in loops):
        return
    contiguous = lane_var is not None and store.stride(lane_var) == 1
    # the elements updated side by side: those of the block, and of the loop LLVM vectorizes around it
    around = lane_var is not None and all(l.var is not lane_var for l in block)
    elems = store.unique_elems(len(block) + int(around))
    f["acc_chains"] = elems / lanes if contiguous else elems
    f["acc_in_registers"] = float(store.buffer.scope == "local" and f["acc_chains"] <= MAX_REGISTER_VECTORS and
                                  not any(store.depends_on(l.var) for l in loops[:len(loops) - len(block)]))
    latency = FMA_LATENCY if f["acc_in_registers"] else FMA_LATENCY + 6
    vector_updates = math.prod(l.extent for l in loops) / (lanes if contiguous else 1.0)
    f["latency_cycles"] = vector_updates / max(f["acc_chains"], 1.0) * latency


def _tile_features(f: dict, accesses: list, loops: tuple) -> None:
    """A reduction's register tile: the loops inside the innermost loop whose variable the store index does not
    use; per iteration of that loop, the tile's elements are updated from the elements read (an outer product
    when the tile is well shaped). Zero when every loop moves the stored element."""
    store = accesses[-1]
    depth = next((d for d in range(len(loops) - 1, -1, -1)
                  if loops[d].extent > 1 and not store.depends_on(loops[d].var)), None)
    if depth is None:
        return
    inner = len(loops) - depth - 1
    f["tile_elems"] = math.prod(l.extent for l in loops[depth + 1:])
    f["tile_read_elems"] = sum(a.unique_elems(inner) for a in accesses[:-1] if a.buffer is not store.buffer)
    f["tile_intensity"] = f["tile_elems"] / max(f["tile_read_elems"], 1)
    f["tile_reuse_extent"] = loops[depth].extent


def _traffic(footprint: list, loops: tuple, execs: int, cache_bytes: int) -> float:
    """Bytes moved into a cache of the given size: the innermost loops whose data fits run from the cache, and
    each iteration of the loop around them loads their footprint anew."""
    fits = max(l for l in range(len(footprint)) if l == 0 or footprint[l] <= cache_bytes)
    return footprint[fits] * execs / math.prod(l.extent for l in loops[len(loops) - fits:])


def _straight_line_block(loops: tuple, ops: int) -> tuple:
    """The innermost loops that become straight-line code: unrolled by annotation, vectorized into <N x T>, or
    short constant loops that LLVM unrolls fully on its own (while the copies stay within UNROLL_BUDGET)."""
    copies, n = 1, 0
    for l in reversed(loops):
        if l.kind == "unroll" or l.vector_ok:
            copies *= 1 if l.vector_ok else l.extent
        elif l.kind == "serial" and copies * l.extent * ops <= UNROLL_BUDGET:
            copies *= l.extent
        else:
            break
        n += 1
    return loops[len(loops) - n:]


def _vector_lanes(loops: tuple, block: tuple, accesses: list) -> tuple:
    """(lanes, the loop variable along them) of the statement's vector code: its effective vectorize loop; else
    what LLVM's loop vectorizer makes of the innermost loop left after unrolling, the loop just around the
    straight-line block, unless it is a reduction loop (any stride: others than 0 and 1 become gathers and
    scatters, as seen in its output); else what the SLP vectorizer finds in the block (a loop along which every
    access is contiguous or invariant). (1, None): scalar code."""
    if loops and loops[-1].vector_ok:
        return float(min(loops[-1].extent, 64)), loops[-1].var
    around = loops[len(loops) - len(block) - 1] if len(block) < len(loops) else None
    store = accesses[-1]
    # (a loop that does not move the stored element carries a float reduction: LLVM keeps its order, no vectors)
    if around is not None and around.kind == "serial" and around.extent >= 4 and store.stride(around.var) != 0:
        return float(min(around.extent, MAX_LANES)), around.var
    for l in reversed(block):
        if l.extent >= 4 and store.stride(l.var) == 1 and all(a.stride(l.var) in (0, 1) for a in accesses):
            return float(min(l.extent, MAX_LANES)), l.var
    return 1.0, None


def _scale(row: np.ndarray) -> np.ndarray:
    out = np.log2(1.0 + np.abs(row))
    for i in _SIGNED:
        out[i] = math.copysign(out[i], row[i])
    return out


# ---------------------------------------------------------------------------------------------- operations

def _tree_counts(root, children) -> list[tuple]:
    """(node, how often it occurs in the expression read as a tree) for each distinct node, parents first. A
    lowered expression is a DAG (a Winograd transform reads each input element in many of its products: 3,259
    loads, 315 distinct, in four programs of one task), and the features count the tree, as written; counting
    by node keeps their values and visits each node once."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:  # iterative post-order over distinct nodes
        node, done = stack.pop()
        if done:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children(node))
    times = {id(root): 1}
    for node in reversed(order):  # reversed post-order: every parent before its children
        m = times[id(node)]
        for c in children(node):
            times[id(c)] = times.get(id(c), 0) + m
    return [(node, times[id(node)]) for node in reversed(order)]


def _value_children(n) -> tuple:
    return () if isinstance(n, Load) else te.expr_children(n)  # a load's index is integer work: _count_int_ops


def _load_children(n) -> tuple:
    return (n.index,) if isinstance(n, Load) else te.expr_children(n)  # loads in indices too: gathers


def _loads(e) -> list[tuple]:
    """(Load, occurrences) of each distinct Load of an expression, indices of loads searched too (gathers)."""
    return [(n, k) for n, k in _tree_counts(e, _load_children) if isinstance(n, Load)]


def _count_ops(value) -> dict:
    """Operation counts of one execution of a stored value (index arithmetic excluded)."""
    ops = dict.fromkeys(("f_addsub", "f_mul", "f_div", "f_fma", "f_minmax", "f_math", "f_cmp_select", "f_cast",
                         "i_addsub", "i_mul", "i_divmod", "i_minmax_cmp"), 0)
    for n, k in _tree_counts(value, _value_children):
        if isinstance(n, Load):
            continue
        if isinstance(n, te.BinOp) and n.dtype.startswith("float"):
            if n.op in ("+", "-"):
                ops["f_addsub"] += k
                # a mul feeding an add is one fused multiply-add under `contract`
                ops["f_fma"] += k * any(isinstance(x, te.BinOp) and x.op == "*" for x in (n.a, n.b))
            elif n.op == "*":
                ops["f_mul"] += k
            elif n.op == "/":
                ops["f_div"] += k
            else:
                ops["f_minmax"] += k
        elif isinstance(n, te.BinOp):
            _count_int_binop(n, ops, k)
        elif isinstance(n, te.Call):
            ops["f_math"] += k
        elif isinstance(n, (te.Cmp, te.Select, te.Logic)):
            ops["f_cmp_select"] += k
        elif isinstance(n, (te.Cast, te.BitCast)):
            ops["f_cast"] += k
    return ops


def _count_int_ops(index, ops: dict, times: int = 1) -> None:
    """Integer operations of an index (times over), loads in it excluded (counted where they are visited)."""
    for n, k in _tree_counts(index, _value_children):
        if isinstance(n, te.BinOp):
            _count_int_binop(n, ops, k * times)
        elif isinstance(n, (te.Cmp, te.Logic, te.Select)):
            ops["i_minmax_cmp"] += k * times


def _count_int_binop(n: te.BinOp, ops: dict, times: int = 1) -> None:
    key = {"+": "i_addsub", "-": "i_addsub", "*": "i_mul", "//": "i_divmod", "%": "i_divmod",
           "/": "i_divmod"}.get(n.op, "i_minmax_cmp")
    ops[key] += times


# ---------------------------------------------------------------------------------------------- memory

class _Access:
    """One Load or Store: its index (as an affine form over terms, and compiled for counting), and the number of
    distinct elements it touches per loop level."""

    def __init__(self, buffer, index, is_write: bool, loops: tuple):
        self.buffer, self.index, self.is_write, self.loops = buffer, index, is_write, loops
        self.itemsize = _ITEMSIZE.get(buffer.dtype, 4)
        self.form = affine_form(index)
        self.used = {id(v) for v in variables(index)}  # ids: Var hashing is Python code, and this is the hot path
        position = {id(l.var): k for k, l in enumerate(loops)}
        self.compiled = _compile(index, position)
        self._unique: dict[int, int] = {}

    def depends_on(self, var) -> bool:
        return id(var) in self.used

    def unique_elems(self, inner: int) -> int:
        """Distinct elements touched while the innermost `inner` loops run (the outer ones fixed)."""
        got = self._unique.get(inner)
        if got is None:
            cut = len(self.loops) - inner
            ext = [l.extent if k >= cut else 1 for k, l in enumerate(self.loops)]
            got = self._unique[inner] = max(1, min(_count(self.compiled, ext, cut)[0], self.buffer.size))
        return got

    def unique_bytes(self, inner: int) -> int:
        return self.unique_elems(inner) * self.itemsize

    def stride(self, var) -> float:
        """Elements the index moves when `var` steps by one (fractional for v // c terms)."""
        return sum(c * slope(t, var) for t, c in self.form.items() if t != 1)


# A compiled index is a tree of tuples (kind, innermost loop position it depends on or -1, ...):
#   ("lin", pos, [(|coefficient|, child), ...])   ("var", pos, position)   ("div" | "mod", pos, child, c)
#   ("clamp" | "select", pos, child, child)        ("opaque", pos, [positions])   ("const", -1)

def _compile(e, position: dict) -> tuple:
    form = affine_form(e)
    if len(form) == 1 and 1 not in form and next(iter(form.values())) == 1:
        return _compile_term(next(iter(form)), position)
    items = [(abs(c), _compile_term(t, position)) for t, c in form.items() if t != 1]
    return ("lin", max((x[1][1] for x in items), default=-1), items)


def _compile_term(t, position: dict) -> tuple:
    if isinstance(t, te.Var):
        k = position.get(id(t), -1)
        return ("var", k, k) if k >= 0 else ("const", -1)
    if isinstance(t, te.Cast):
        return _compile(t.value, position)
    if isinstance(t, te.BinOp) and t.op in ("//", "%") and isinstance(t.b, te.IntImm) and t.b.value > 0:
        child = _compile(t.a, position)
        return ("div" if t.op == "//" else "mod", child[1], child, t.b.value)
    if isinstance(t, (te.BinOp, te.Select)) and (isinstance(t, te.Select) or t.op in ("min", "max")):
        a, b = (t.true_value, t.false_value) if isinstance(t, te.Select) else (t.a, t.b)
        ca, cb = _compile(a, position), _compile(b, position)
        return ("select" if isinstance(t, te.Select) else "clamp", max(ca[1], cb[1]), ca, cb)
    ks = sorted({position[id(v)] for v in variables(t) if id(v) in position})
    return ("opaque", ks[-1] if ks else -1, ks)


def _count(node: tuple, ext: list, cut: int) -> tuple[int, int]:
    """(distinct values, width of their range) of a compiled index while the loops at positions >= cut run
    (ext: extent per position, 1 for the fixed ones). Terms of equal stride slide over each other (a window:
    their counts add up); terms of different strides multiply; a count never exceeds its width + 1; v // c and
    v % c take no more values than v (and % c at most c); a clamp no more than its operands; a select both."""
    kind = node[0]
    if node[1] < cut:
        return 1, 0
    if kind == "var":
        n = ext[node[2]]
        return n, n - 1
    if kind == "lin":
        by_stride: dict[int, list[int]] = {}
        width = 0
        for coef, child in node[2]:
            if child[1] >= cut:
                d, w = _count(child, ext, cut)
                by_stride.setdefault(coef, []).append(d)
                width += coef * w
        count = 1
        for counts in by_stride.values():
            count *= sum(counts) - (len(counts) - 1)
        return min(count, width + 1), width
    if kind in ("div", "mod"):
        d, w = _count(node[2], ext, cut)
        c = node[3]
        return (min(d, w // c + 1), w // c) if kind == "div" else (min(d, c), min(w, c - 1))
    if kind in ("clamp", "select"):
        (da, wa), (db, wb) = _count(node[2], ext, cut), _count(node[3], ext, cut)
        return (max(da, db) if kind == "clamp" else da + db), max(wa, wb)
    n = math.prod(ext[k] for k in node[2])  # a gather or an unknown form: every point may differ
    return n, n * 1024


def _buffer_features(accesses: list, loops: tuple, execs: int) -> list[dict]:
    """Features of each buffer the statement accesses (its accesses merged)."""
    n = len(loops)
    out = []
    groups: dict[int, list] = {}
    for a in accesses:
        groups.setdefault(id(a.buffer), []).append(a)
    for accs in groups.values():
        a0 = accs[0]
        reads, writes = any(not a.is_write for a in accs), any(a.is_write for a in accs)
        b = dict.fromkeys(BUFFER_FEATURES, 0.0)
        b["name"] = a0.buffer.name
        b["read"], b["write"] = float(reads and not writes), float(writes and not reads)
        b["read_write"] = float(reads and writes)
        b["local"] = float(a0.buffer.scope == "local")
        b["buffer_bytes"] = a0.buffer.size * a0.itemsize
        b["bytes"] = len(accs) * execs * a0.itemsize
        b["unique_bytes"] = min(sum(a.unique_bytes(n) for a in accs), b["buffer_bytes"])
        inner = loops[-1] if loops else None
        stride = a0.stride(inner.var) if inner else 0.0
        b["stride"] = stride
        b["first_nonzero_stride"] = next((s for s in (a0.stride(l.var) for l in reversed(loops)) if s), 0.0)
        b["lines"] = len(accs) * _lines(execs, inner.extent if inner else 1, stride, a0.itemsize)
        b["unique_lines"] = _unique_lines(b["unique_bytes"], b["first_nonzero_stride"], a0.itemsize)
        _reuse(b, accs, accesses, loops)
        out.append(b)
    return out


def _lines(execs: int, inner_extent: int, stride: float, itemsize: int) -> float:
    """Cache lines fetched over all executions, assuming a line survives only while the innermost loop runs."""
    step = abs(stride) * itemsize
    if step == 0:
        return execs / max(inner_extent, 1)
    return execs * min(step, CACHE_LINE_BYTES) / CACHE_LINE_BYTES


def _unique_lines(unique_bytes: float, stride: float, itemsize: int) -> float:
    step = min(max(abs(stride), 1.0) * itemsize, CACHE_LINE_BYTES)
    return unique_bytes / itemsize * step / CACHE_LINE_BYTES


def _reuse(b: dict, accs: list, all_accesses: list, loops: tuple) -> None:
    """Ansor's reuse: the innermost loop whose variable the accesses do not use reuses the data (its extent is the
    reuse count; the iterations and bytes inside it are the reuse distance); else several accesses of the same
    buffer in one statement reuse serially; else no reuse."""
    n = len(loops)
    for depth in range(n - 1, -1, -1):
        loop = loops[depth]
        if loop.extent > 1 and not any(a.depends_on(loop.var) for a in accs):
            inner = n - depth - 1
            b["reuse_loop"] = 1.0
            b["reuse_ct"] = loop.extent
            b["reuse_dis_iter"] = math.prod(l.extent for l in loops[depth + 1:])
            b["reuse_dis_bytes"] = sum(a.unique_bytes(inner) for a in all_accesses)
            b["bytes_per_reuse"] = b["bytes"] / loop.extent
            return
    if len(accs) > 1:
        b["reuse_serial"], b["reuse_ct"] = 1.0, len(accs) - 1
        b["bytes_per_reuse"] = b["bytes"] / len(accs)
    else:
        b["reuse_none"] = 1.0
        b["bytes_per_reuse"] = b["bytes"]

"""The generic tier with run-time extents: one module that runs a model at every size of its free dims.

    module = compile_generic(model, {"x": (1, 3, "h", "w")}, options)   # a str: a free dim, by its symbol
    outputs = module.run(None, {"x": image})                             # any h, w: no compile on the call

Each free dim becomes a size variable (te.size_var). The model is imported over them (shape rules build dims
as canonical expressions, relayish/dims.py), goes through the same graph passes as a static compile (a choice
that depends on a size, as a Winograd tile, is made for the typical size), and each call's task is taken over
its own dims (_own_dims: d0, d1, ... for the run-time dims of its parameters, whatever expressions of the symbols
they are at that call), deduplicated, and scheduled once: the default schedule of the task at a typical size of
each variable (HINT_SIZE, inside its range, through the call's expressions), replayed on the task over the
variables (compiler/run_time_schedule.py default_schedule_for_sizes), so that a split of a run-time extent runs
whole tiles and a guarded last tile. The kernels read their sizes from a last int32 parameter
(compiler/lower.py) and are built into one library.

A call binds the variables from its inputs' shapes, evaluates every intermediate's shape (one generated function
per module; kept per set of sizes, as the kernel calls' size arguments), places the intermediates in blocks they
share by liveness and calls the kernels in order from Python (ctypes). A recurrent layer over a run-time length is
a scan (nn.recurrent_scan): its kernel is one step, the cell, called once per step on the state before it
(_run_scan). Tuning records are not used: every task runs its default schedule.

What is not here yet: shape arithmetic the importer cannot evaluate over the sizes (frontends/onnx/shape_values.py),
outputs sized by data, a recurrent layer over a run-time length outside its fused form, pooling in ceil mode over a
free dim, a SAME padding of stride > 1 over one: a model with any of them is refused (GenericUnsupported says
where), and the session compiles per shape instead.

Invariants: inputs are checked against the symbols before any kernel runs (a dim named in two inputs must agree,
fixed dims must match, the values of an input that indexes a table must be in range, and what the import assumed
of the sizes must hold: every intermediate dim and shape-arithmetic fact >= 1, else SizesOutsideGeneric); every
buffer a kernel writes is allocated at the size the expressions give for this call; the module holds no per-call
state, so concurrent calls are safe.
"""
from __future__ import annotations

import ctypes
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np

from relayish import te
from relayish.dims import TYPICAL_SIZE
from relayish.expr import Call, Constant, Function, Tuple, TupleGetItem, Var, post_order
from relayish.types import TensorType, is_static_dim
from runtime.aligned import aligned_empty, as_aligned
from runtime.feeds import check_index_values
from runtime.module import TensorSpec

from .arith import evaluate, evaluator
from .backend import materialize_outputs
from .codegen import build_library, vector_width
from .run_time_schedule import default_schedule_for_sizes
from .free_dims import Dim, bind
from .index_bounds import input_index_bounds, input_index_ignored
from .lower import LoweringError, lower
from .memory import WorkspacePlanner
from .passes import PassContext, run_pipeline
from .task import extract_task_calls, scan_of

HINT_SIZE = TYPICAL_SIZE  # the size a free dim's kernels are scheduled for (clamped into its range)
MAX_PLANS = 16  # sets of sizes whose shapes (and intermediates) are kept
MAX_POOLED = 2  # workspaces kept between calls (one per concurrent call, up to this)


class GenericUnsupported(Exception):
    """The model cannot run with run-time extents (yet); the message says where."""


class SizesOutsideGeneric(ValueError):
    """These sizes make an intermediate dim of the model smaller than 1 (a window larger than its input, which
    onnxruntime clips to the input and the shape rules over size variables do not): the generic module does not
    serve them; a module compiled for them does (the session falls back to one)."""


@dataclass
class _Step:
    kernel: str
    args: tuple  # per kernel input: ("input", k) | ("const", k) | ("value", step, field)
    outputs: tuple  # per output: (dims, dtype)
    scratch: tuple  # per scratch buffer: (element count, dtype)
    sizes: tuple  # the values of the kernel's `sizes` parameter, in order, as expressions of the symbols ((): none)
    scan: bool = False  # the kernel is one step of a scan (compiler/task.py scan_step): called once per step


def compile_generic(model, shapes: dict, options, output_names: list, ranges: dict | None = None,
                    log=None) -> "GenericModule":
    """The generic module of an ONNX model (path, bytes or ModelProto) whose inputs have `shapes` (name -> dims,
    each an int or a str: a free dim's symbol, one size variable per symbol); options: compiler.options.
    CompileOptions (layout, opt level, Winograd; records are not used); output_names: the graph's outputs, in
    order; ranges: symbol -> (lo, hi) (hi None: unbounded), where the hint size is clamped. Raises
    GenericUnsupported naming what is not supported."""
    from frontends import from_onnx
    t0 = time.perf_counter()
    symbols = {s: te.size_var(s) for dims in shapes.values() for s in dims if isinstance(s, str)}
    hints = {}
    for s, var in symbols.items():
        lo, hi = (ranges or {}).get(s, (0, None))
        hints[var] = max(lo, min(HINT_SIZE, hi if hi is not None else HINT_SIZE), 1)
    input_shapes = {n: tuple(symbols[d] if isinstance(d, str) else d for d in dims) for n, dims in shapes.items()}
    try:
        mod = from_onnx(model, input_shapes=input_shapes)
    except Exception as e:
        raise GenericUnsupported(f"the model does not import over free dims: {_first_line(e)}") from e
    checks = _dim_checks(mod) + list(mod.attrs.get("dim_checks", ()))
    ignored = input_index_ignored(mod)
    index_specs = {}
    for name, b in input_index_bounds(mod).items():
        if not all(is_static_dim(v) for v in np.ravel(np.asarray(b, dtype=object))):
            raise GenericUnsupported(f"input {name!r} indexes an axis of a size known only at run time")
        index_specs[name] = TensorSpec(name, (), None, b, ignored.get(name))
    ctx = PassContext(opt_level=options.opt_level, layout=options.layout.value, vector_width=vector_width(),
                      winograd=options.winograd)
    try:
        fused = materialize_outputs(run_pipeline(mod, ctx))
        found = extract_task_calls(fused, prepare=_own_dims)  # each call's task over its own dims
    except Exception as e:
        raise GenericUnsupported(f"the graph passes fail over free dims: {_first_line(e)}") from e
    calls, tasks, task_of, own = found.calls, found.tasks, found.task_of, found.prepared
    # a task's hints: the typical sizes through the expressions of its first call's own dims
    first = {t: k for k, t in reversed(list(enumerate(task_of)))}
    task_hints = [{**hints, **{v: max(1, evaluate(e, hints)) for v, e in own[first[i]].items()}}
                  for i in range(len(tasks))]
    funcs = []
    for i, task in enumerate(tasks):
        state = task.initial_state()
        try:
            funcs.append(_lower_for_sizes(state, task_hints[i], ctx.vector_width, f"{task.name}_{i}"))
        except Exception as e:
            raise GenericUnsupported(f"task {task.name} ({', '.join(task.ops)}) has no schedule over free dims: "
                                     f"{_first_line(e)}") from e
    lib_dir = tempfile.mkdtemp(prefix="relayish_generic_")
    lib_path = build_library(funcs, None, os.path.join(lib_dir, "generic.so"), opt_level=options.opt_level)
    by_name = {v.name: v for v in symbols.values()}
    params = {id(p): k for k, p in enumerate(fused.main.params)}
    consts, const_ids, steps, where = [], {}, [], {}

    def source(a):
        if isinstance(a, Var):
            return ("input", params[id(a)])
        if isinstance(a, Constant):
            if id(a) not in const_ids:
                const_ids[id(a)] = len(consts)
                consts.append(as_aligned(np.ascontiguousarray(a.data)))
            return ("const", const_ids[id(a)])
        if isinstance(a, TupleGetItem):
            step, _ = where[id(a.tuple_value)]
            return ("value", step, a.index)
        return ("value",) + where[id(a)]

    for k, c in enumerate(calls):
        func = funcs[task_of[k]]
        n_in, n_out = func.attrs["num_inputs"], func.attrs["num_outputs"]
        types = c.type.fields if hasattr(c.type, "fields") else (c.type,)
        sized = "size_vars" in func.attrs
        at_call = {v.name: e for v, e in own[k].items()}  # this call's own dims, as expressions of the symbols

        def at_this_call(e):  # (the kernel's variables are those of the task's first call: matched by name)
            if te.is_static(e) or not at_call:
                return e
            return te.substitute_vars(e, {v: at_call[v.name] for v in te.walk(e)
                                          if isinstance(v, te.Var) and v.name in at_call})
        scratch = tuple((at_this_call(p.size), p.dtype) for p in func.params[n_in + n_out:len(func.params) - sized])
        steps.append(_Step(func.name, tuple(source(a) for a in c.args), tuple((t.shape, t.dtype) for t in types),
                           scratch, tuple(at_call.get(s, by_name.get(s)) for s in func.attrs.get("size_vars", ())),
                           scan_of(c.op) is not None))
        where[id(c)] = (k, 0)
    body = fused.main.body
    outs = tuple(source(o) for o in (body.fields if isinstance(body, Tuple) else (body,)))
    inputs = [(p.name, p.type.shape, p.type.dtype) for p in fused.main.params]
    if any(not isinstance(d, (int, te.Var)) for _, dims, _ in inputs for d in dims):
        raise GenericUnsupported(f"a graph input's dim is an expression of the free dims: {inputs}")
    if log is not None:
        log(f"generic module: {len(calls)} kernel calls ({len(funcs)} kernels) over "
            f"{sorted(symbols)} in {time.perf_counter() - t0:.1f} s")
    return GenericModule(lib_path, inputs, list(output_names), steps, outs, consts, time.perf_counter() - t0,
                         checks, ranges, index_specs)


def _own_dims(func):
    """(func over its own dims, {fresh size variable: the expression of the symbols it stands for}): each dim of
    the function's parameters known only at run time (a symbol or an expression of them) becomes a size variable
    of the kernel's own, d0, d1, ... in first-seen order, its value evaluated per call with the other shapes. The
    kernel's index arithmetic is then over those (a Winograd kernel of ResNet-18 over ((h + 1) // 2 + 1) // 2
    written out in every index was 1.6 MB of loop IR; lowering and LLVM took 40 s for the model), and call sites
    whose dims are other expressions of the same shape share one kernel. Returned unchanged when it has no such
    dim, when an op's attributes hold a dim expression (a reshape's run-time shape: they would name the symbols),
    or when the ops' shape rules cannot be redone over the fresh variables."""
    fresh: dict = {}

    def own(d):
        if te.is_static(d):
            return d
        key = te.expr_str(d)
        if key not in fresh:
            fresh[key] = (te.size_var(f"d{len(fresh)}"), d)
        return fresh[key][0]
    shapes = [tuple(own(d) for d in p.type.shape) for p in func.params]
    if not fresh or any(_holds_expr(n.attrs) for n in post_order(func.body) if isinstance(n, Call)):
        return func, {}
    params = tuple(Var(p.name, TensorType(shape, p.type.dtype)) for p, shape in zip(func.params, shapes))
    new = {id(p): q for p, q in zip(func.params, params)}
    try:
        for node in post_order(func.body):
            if id(node) in new:
                continue
            if isinstance(node, Call):
                new[id(node)] = Call(node.op, tuple(new[id(a)] for a in node.args), node.attrs)
            elif isinstance(node, Tuple):
                new[id(node)] = Tuple(tuple(new[id(f)] for f in node.fields))
            elif isinstance(node, TupleGetItem):
                new[id(node)] = TupleGetItem(new[id(node.tuple_value)], node.index)
            else:
                new[id(node)] = node
    except Exception:  # a shape rule that needs the relation between two dims the fresh variables hide
        return func, {}
    return Function(params, new[id(func.body)], func.attrs), {v: d for v, d in fresh.values()}


def _holds_expr(attrs) -> bool:
    def has(v):
        return isinstance(v, te.PrimExpr) or (isinstance(v, (tuple, list)) and any(has(x) for x in v))
    return any(has(v) for _, v in attrs.items())


def _lower_for_sizes(state, hints: dict, vector_width: int, name: str):
    """The task's default schedule over its run-time extents, lowered; a stage whose local buffer would span a
    run-time axis is computed in place instead (default_schedule_for_sizes' `uncached`), and one computed at
    another over a region of run-time extent at root (`rooted`)."""
    uncached: frozenset = frozenset()
    rooted: frozenset = frozenset()
    while True:
        sched = default_schedule_for_sizes(state, hints, vector_width, uncached, rooted)
        try:
            return lower(sched.apply(state), name)
        except LoweringError as e:
            stage = e.stage or ""
            if stage.endswith(".local"):
                cached = stage[:-len(".local")]
                if cached in uncached:
                    raise
                uncached |= {cached}
            else:
                if not stage or stage in rooted:
                    raise
                rooted |= {stage}


def _dim_checks(mod) -> list:
    """(expression, what it is) for every dim of the imported graph that is an expression of the size variables
    (not one alone): each must be at least 1 for the generic module to compute what a static compile would (see
    SizesOutsideGeneric)."""
    from relayish.expr import post_order
    found = {}
    for node in post_order(mod.main.body):
        ty = getattr(node, "type", None) if isinstance(node, Call) else None
        for t in (getattr(ty, "fields", None) or ((ty,) if ty is not None else ())):
            for d in getattr(t, "shape", ()):
                if isinstance(d, te.PrimExpr) and not isinstance(d, te.Var):
                    found.setdefault(te.expr_str(d), (d, "an intermediate dim of the model"))
    return list(found.values())


def _allocate(outs, scratch) -> tuple[list, list]:
    """A step's output arrays and scratch buffers (64-byte aligned), from its plan entry."""
    return [aligned_empty(shape, dtype) for shape, dtype in outs], [aligned_empty((n,), d) for n, d in scratch]


def _run_scan(fn, args: list, num_inputs: int) -> None:
    """A scan's steps. args: the scan's inputs (xp, initial state, weight[, bias]: num_inputs), its history
    [T, ...], scratch buffers, sizes. Step t runs the cell (xp, times, state, weight[, bias], out, scratch...,
    sizes) on the state of step t - 1 (the initial one first) into the history's slice t, with the times
    (t, T - 1 - t) that its forward and reverse directions process."""
    history = args[num_inputs]
    length, stride, base = history.shape[0], history.strides[0], history.ctypes.data
    times = np.empty(2, np.int32)
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in args[:1] + [times] + args[1:]]
    state, out = 2, num_inputs + 1  # their places among the cell's arguments
    for t in range(length):
        times[0], times[1] = t, length - 1 - t
        if t:
            ptrs[state] = ctypes.c_void_p(base + (t - 1) * stride)
        ptrs[out] = ctypes.c_void_p(base + t * stride)
        fn(*ptrs)


def _first_line(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"


class GenericModule:
    """A model's kernels with run-time extents and the order they run in (see the module docstring)."""

    def __init__(self, lib_path: str, inputs: list, output_names: list, steps: list, outputs: tuple, consts: list,
                 compile_s: float, checks: list = (), ranges: dict | None = None, index_specs: dict | None = None):
        """inputs: (name, dims, dtype) per graph input, each dim an int or a size variable; ranges: symbol ->
        (lo, hi) of the sizes it may take (hi None: unbounded); checks: (dim expression that must be >= 1, what it
        is) pairs;
        index_specs: input name -> its index bounds (runtime/feeds.py checks its values before any kernel)."""
        ranges = ranges or {}

        def spec(d) -> Dim:
            if isinstance(d, int):
                return Dim(size=d)
            lo, hi = ranges.get(d.name, (0, None))
            return Dim(symbol=d.name, lo=lo, hi=hi)
        self.lib_path, self.compile_s = lib_path, compile_s
        self._vars = {d.name: d for _, dims, _ in inputs for d in dims if isinstance(d, te.Var)}
        self._specs = {name: tuple(spec(d) for d in dims) for name, dims, _ in inputs}
        self._inputs, self._output_names, self._steps, self._outs = inputs, output_names, steps, outputs
        self._consts, self._checks, self._index_specs = consts, list(checks), index_specs or {}
        self._lib = ctypes.CDLL(lib_path)
        self._lib.relayish_set_num_threads.argtypes = [ctypes.c_int32]
        self._kernels = []
        for s in steps:
            fn = getattr(self._lib, s.kernel)  # (one object per step: a scan's kernel takes its times too)
            fn = type(fn)((s.kernel, self._lib))
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p] * (len(s.args) + s.scan + len(s.outputs) + len(s.scratch) +
                                               bool(s.sizes))
            self._kernels.append(fn)
        self._const_ptrs = [c.ctypes.data for c in consts]
        # every dim a new set of sizes needs (the checks, then per step its outputs' dims and scratch sizes), in
        # that order, evaluated by one generated function (compiler/arith.py evaluator)
        self._order = list(self._vars.values())
        self._evaluate = evaluator([d for d, _ in self._checks] +
                                   [n for s in steps for n in [d for dims, _ in s.outputs for d in dims] +
                                    [n for n, _ in s.scratch] + list(s.sizes)], self._order)
        self._plans: dict = {}  # sizes -> (per step: output shapes, scratch sizes, size arguments; _layout's)
        self._spaces: list = []  # workspaces not in use (each a call's intermediates, at any sizes that fit)
        self._lock = threading.Lock()
        self._is_output = {src[1] for src in outputs if src[0] == "value"}  # steps whose results are returned
        self._last_use = {}  # (step, output) -> the last step that reads it
        self._as_arrays = set()  # steps whose results a scan reads as arrays (the others: as addresses)
        for k, s in enumerate(steps):
            for a in s.args:
                if a[0] == "value":
                    self._last_use[(a[1], a[2])] = k
                    if s.scan:
                        self._as_arrays.add(a[1])
            if s.scan:
                self._as_arrays.add(k)

    @property
    def num_threads(self) -> int:
        self._lib.relayish_get_num_threads.restype = ctypes.c_int32
        return int(self._lib.relayish_get_num_threads())

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        self._lib.relayish_set_num_threads(int(n))

    def bind(self, feed: dict) -> dict:
        """Each size variable's value for these inputs; ValueError naming the input and dim that disagree (the
        session's own check, compiler/dynamic.py bind)."""
        sizes = bind(self._specs, {name: np.shape(feed[name]) for name in self._specs if name in feed})
        return {self._vars[s]: n for s, n in sizes.items()}

    def _plan(self, values: dict, key: tuple) -> tuple:
        """(per step: its outputs' shapes, scratch sizes and size arguments; _layout of those) at these sizes."""
        plan = self._plans.get(key)
        if plan is None:
            small = {v.name: n for v, n in values.items() if n < 1}
            if small:
                raise SizesOutsideGeneric(f"sizes {small}: an empty dim is compiled for")
            numbers = iter(self._evaluate(*[values[v] for v in self._order]))
            for d, what in self._checks:
                got = next(numbers)
                if got < 1:
                    raise SizesOutsideGeneric(f"sizes {dict(key)}: {what}: {te.expr_str(d)} would be {got}, not >= 1")
            steps = []
            for s in self._steps:
                outs = [(tuple(next(numbers) for _ in dims), dtype) for dims, dtype in s.outputs]
                if any(d < 0 for shape, _ in outs for d in shape):
                    raise ValueError(f"sizes {dict(key)}: kernel {s.kernel} would make an output of shape "
                                     f"{[o[0] for o in outs]} (a negative dim: the input is too small)")
                scratch = [(max(1, next(numbers)), dtype) for _, dtype in s.scratch]
                sizes = np.array([next(numbers) for _ in s.sizes], np.int32) if s.sizes else None
                steps.append((outs, scratch, sizes, None if sizes is None else sizes.ctypes.data))
            plan = (steps, self._layout(steps))
            with self._lock:
                if len(self._plans) >= MAX_PLANS:  # sizes change from call to call: keep memory bounded
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    def _layout(self, plan: list) -> tuple:
        """Where each step's outputs and scratch buffers live in one workspace (compiler/memory.py's planner: a
        block is reused once its last reader has run, best fit), and the workspace's size: a model's
        intermediates take the memory of the few alive at once, not their sum. Workspaces are kept across calls
        whatever their sizes (_take_workspace), so a new size within the largest seen touches no fresh memory.
        The steps whose results are returned get None (allocated anew)."""
        planner, offsets = WorkspacePlanner(), []
        for k, (outs, scratch, _, _) in enumerate(plan):
            if k in self._is_output:
                offsets.append(None)
                continue
            offsets.append(([planner.alloc(math.prod(shape) * np.dtype(dtype).itemsize, k,
                                           self._last_use.get((k, j), k)) for j, (shape, dtype) in enumerate(outs)],
                            [planner.alloc(n * np.dtype(dtype).itemsize, k, k) for n, dtype in scratch]))
        return offsets, planner.size

    def _take_workspace(self, size: int) -> np.ndarray:
        """A workspace of at least `size` bytes for one call, its own until _give_back: the smallest kept one that
        fits (its pages touched by an earlier call: a new size costs no page faults), else a new one in place of
        the largest kept (the workspace grows when larger sizes arrive)."""
        with self._lock:  # (by position: list.remove would compare the arrays' elements)
            fits = [k for k, w in enumerate(self._spaces) if w.nbytes >= size]
            if fits:
                return self._spaces.pop(min(fits, key=lambda k: self._spaces[k].nbytes))
            if self._spaces:
                self._spaces.pop(max(range(len(self._spaces)), key=lambda k: self._spaces[k].nbytes))
        return aligned_empty((max(size, 1),), np.uint8)

    def _give_back(self, space: np.ndarray) -> None:
        with self._lock:
            if len(self._spaces) < MAX_POOLED:
                self._spaces.append(space)

    def run(self, output_names, feed: dict, run_options=None) -> list[np.ndarray]:
        values = self.bind(feed)
        arrays = []
        for (name, _, dtype) in self._inputs:
            a = np.asarray(feed[name])
            if a.dtype != np.dtype(dtype):
                raise ValueError(f"input {name!r} has dtype {a.dtype}, expected {dtype}")
            if name in self._index_specs:
                check_index_values(self._index_specs[name], a)
            arrays.append(as_aligned(np.ascontiguousarray(a)))
        key = tuple(sorted((v.name, n) for v, n in values.items()))
        plan, (offsets, size) = self._plan(values, key)
        space = self._take_workspace(size)
        try:
            values_out = self._run_steps(plan, offsets, space, arrays)
        finally:
            self._give_back(space)
        if output_names is None:
            return values_out
        index = {n: k for k, n in enumerate(self._output_names)}
        missing = [n for n in output_names if n not in index]
        if missing:
            raise ValueError(f"unknown output(s) {missing}; outputs: {self._output_names}")
        return [values_out[index[n]] for n in output_names]

    def _run_steps(self, plan, offsets, space, arrays) -> list:
        """Call every kernel in order; intermediates at their offsets in `space`, passed as addresses (ints: the
        kernels' argtypes are void pointers, so a call costs little per argument), as arrays only where a scan
        reads them; the results that are returned allocated anew. Returns the graph's outputs."""
        base, in_ptrs, const_ptrs = space.ctypes.data, [a.ctypes.data for a in arrays], self._const_ptrs

        def view(at, shape, dtype):
            dtype = np.dtype(dtype)
            return space[at:at + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
        produced, pointers = [], []  # per step: its results (arrays, or None), and their addresses
        for k, (fn, s, (outs, scratch, sizes, sizes_ptr), at) in enumerate(zip(self._kernels, self._steps, plan,
                                                                             offsets)):
            results = temps = None
            if at is None:
                results, temps = _allocate(outs, scratch)
                result_ptrs, temp_ptrs = [r.ctypes.data for r in results], [t.ctypes.data for t in temps]
            else:
                result_ptrs, temp_ptrs = [base + o for o in at[0]], [base + o for o in at[1]]
                if k in self._as_arrays:
                    results = [view(o, shape, dtype) for o, (shape, dtype) in zip(at[0], outs)]
                    temps = [view(o, (n,), dtype) for o, (n, dtype) in zip(at[1], scratch)]
            if s.scan:
                args = [self._value(a, arrays, produced) for a in s.args] + results + temps
                _run_scan(fn, args + ([sizes] if sizes is not None else []), len(s.args))
            else:
                args = [in_ptrs[a[1]] if a[0] == "input" else const_ptrs[a[1]] if a[0] == "const" else
                        pointers[a[1]][a[2]] for a in s.args] + result_ptrs + temp_ptrs
                if sizes_ptr is not None:
                    args.append(sizes_ptr)
                fn(*args)
            produced.append(results)
            pointers.append(result_ptrs)
        return [self._value(o, arrays, produced) for o in self._outs]

    def _value(self, src, arrays, produced):
        if src[0] == "input":
            return arrays[src[1]]
        if src[0] == "const":
            return self._consts[src[1]]
        return produced[src[1]][src[2]]

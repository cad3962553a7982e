"""The generic tier's module: the kernels with run-time extents of compiler/generic.py, called in order at whatever
sizes the inputs have.

    module = GenericModule(lib_path, inputs, output_names, steps, outputs, consts, compile_s, checks, ranges)
    outputs = module.run(None, {"x": image})

A call binds the size variables from its inputs' shapes and plans that set of sizes once (kept for the next calls
with it, up to MAX_PLANS): every intermediate's dims, the checks and the kernels' size arguments, the buffers'
bytes and workspace offsets. The offsets come from a packing made once, at the typical sizes: each intermediate
and scratch buffer is given a block shared with buffers whose lives do not overlap (best fit), and at each set of
sizes a block is as large as its largest buffer, the blocks end to end. Both the plan and the calls are generated
code (compiler/generic_runner.py: one native call plans, one calls every kernel, every step of a scan, and binds
each data-sized dim between two kernels), so a new shape's first call costs a few microseconds more than its next
ones. The same work in Python (a generated Python function, compiler/arith.py evaluator, numpy and a loop over
the steps) is the reference, the path when the native code cannot be generated, and what names an error: sizes
that break a check, a count out of range.

Workspaces are anonymous memory maps kept across calls (one per concurrent call, up to MAX_POOLED), asking the
kernel for huge pages: a call takes the smallest that fits, else grows one in place (mremap), so that a larger
shape faults in only the pages it adds and a smaller one none. The kernels get the intermediates' addresses as
ints; a scan's step (nn.recurrent_scan, called once per step from Python) gets arrays, views of the workspace.

Invariants: inputs are checked against the symbols and every check (an intermediate dim >= 1) before any kernel
runs; every buffer a kernel writes is at least the size the expressions give for this call, and buffers alive at
once never overlap; the module holds no per-call state, so concurrent calls are safe.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import threading
import warnings

import numpy as np

from relayish import te
from relayish.dims import TYPICAL_SIZE
from runtime.aligned import aligned_empty, as_aligned, data_address
from runtime.feeds import check_index_values

from .arith import evaluate, evaluator
from .free_dims import Dim, bind
from .generic_runner import OK, OVERFLOW, GeneratedRunner
from .passes.layout import winograd_tile_at

MAX_PLANS = 16  # sets of sizes whose plans are kept
MAX_POOLED = 2  # workspaces kept between calls (one per concurrent call, up to this)
HINT_SIZE = TYPICAL_SIZE  # a free dim's size the kernels are scheduled for, the buffers packed for and the warm-up
# call runs at (clamped into its range)
ALIGN = 64  # every buffer starts on a cache line


def hint_size(bounds: tuple | None) -> int:
    """HINT_SIZE clamped into a free dim's range (lo, hi) (hi None: unbounded; None: any size)."""
    lo, hi = bounds or (0, None)
    return max(lo, min(HINT_SIZE, hi if hi is not None else HINT_SIZE), 1)


class SizesOutsideGeneric(ValueError):
    """These sizes make an intermediate dim of the model smaller than 1 (a window larger than its input, which
    onnxruntime clips to the input and the shape rules over size variables do not): the generic module does not
    serve them; a module compiled for them does (the session falls back to one)."""


class _Workspace:
    """A call's intermediates: an anonymous private map that grows in place, its pages kept."""

    def __init__(self, size: int):
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._advise()

    def _advise(self) -> None:
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._map.madvise(mmap.MADV_HUGEPAGE)
            except OSError:  # a kernel without transparent huge pages: small pages, same results
                pass
        view = ctypes.c_char.from_buffer(self._map)  # (an export of the buffer: dropped at once, resize needs none)
        self.address = ctypes.addressof(view)
        del view

    @property
    def size(self) -> int:
        return len(self._map)

    def grow(self, size: int) -> None:
        """At least `size` bytes; the pages touched before stay touched (where the map can be resized)."""
        try:
            self._map.resize(size)
        except (BufferError, OSError, SystemError):  # a view still held, or no mremap: a fresh map
            self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._advise()

    def view(self, offset: int, shape: tuple, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self._map, dtype, math.prod(shape), offset).reshape(shape)


def _pack(nbytes: list[int], lives: list[tuple[int, int]]) -> list[int]:
    """Each buffer's block: buffers in order of their first step, each into the free block (its last reader has
    run before the buffer's producer) nearest its size from above, else the largest free one, else a new one."""
    blocks: list[list[int]] = []  # [largest size seen, last step that reads it]
    out = []
    for n, (first, last) in zip(nbytes, lives):
        free = [b for b, (_, until) in enumerate(blocks) if until < first]
        fits = [b for b in free if blocks[b][0] >= n]
        b = min(fits, key=lambda b: blocks[b][0]) if fits else max(free, key=lambda b: blocks[b][0]) if free else None
        if b is None:
            b = len(blocks)
            blocks.append([n, last])
        blocks[b] = [max(blocks[b][0], n), last]
        out.append(b)
    return out


def _run_scan(fn, inputs: list, history: np.ndarray, tail: list) -> None:
    """A scan's steps. inputs: the scan's (xp, initial state, weight[, bias]), arrays; history: its output [T, ...];
    tail: the addresses of its scratch buffers and sizes. Step t runs the cell (xp, times, state, weight[, bias],
    out, scratch..., sizes) on the state of step t - 1 (the initial one first) into the history's slice t, with the
    times (t, T - 1 - t) that its forward and reverse directions process."""
    length, stride, base = history.shape[0], history.strides[0], history.ctypes.data
    times = np.empty(2, np.int32)
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in inputs[:1] + [times] + inputs[1:] + [history]] + \
        [ctypes.c_void_p(p) for p in tail]
    state, out = 2, len(inputs) + 1  # their places among the cell's arguments
    for t in range(length):
        times[0], times[1] = t, length - 1 - t
        if t:
            ptrs[state] = ctypes.c_void_p(base + (t - 1) * stride)
        ptrs[out] = ctypes.c_void_p(base + t * stride)
        fn(*ptrs)


def _cut(result: np.ndarray, shape: tuple) -> np.ndarray:
    """A result made at a data-sized dim's largest value as the call's shape: its first elements (the kernel wrote
    them at the call's sizes), copied out where they are under half of it (the memory goes back)."""
    if result.shape == shape:
        return result
    n = math.prod(shape)
    view = result.reshape(-1)[:n].reshape(shape)
    return view.copy() if 2 * n < result.size else view


class _Plan:
    """What a call at one set of sizes needs besides its inputs."""
    __slots__ = ("offsets", "size", "sizes", "size_ptrs", "shapes", "choice", "values", "nbytes", "state",
                 "state_address")

    def __init__(self, offsets: list, size: int, sizes: np.ndarray, size_ptrs: list, shapes: dict, choice: list,
                 values: dict, nbytes: np.ndarray):
        self.offsets, self.size = offsets, size  # per workspace buffer: its offset; the workspace's bytes
        self.sizes, self.size_ptrs = sizes, size_ptrs  # every kernel's size arguments (int32); per step: address
        self.shapes = shapes  # (step, output) -> shape, of the outputs made arrays (returned, or read by a scan)
        self.choice = choice  # per step: which of its kernels runs (0 but for a convolution of several algorithms)
        self.values, self.nbytes = values, nbytes  # every size variable's value; each buffer's bytes (its room)
        self.state = None  # the generated plan's numbers (GeneratedRunner.plan), when it made this plan
        self.state_address = 0


class GenericModule:
    """A model's kernels with run-time extents and the order they run in (see the module docstring)."""

    def __init__(self, lib_path: str, inputs: list, output_names: list, steps: list, outputs: tuple, consts: list,
                 compile_s: float, checks: list = (), ranges: dict | None = None, index_specs: dict | None = None,
                 data_dims: list = ()):
        """inputs: (name, dims, dtype) per graph input, each dim an int or a size variable; steps: compiler/
        generic.py _Step per kernel call, in order; outputs: where each graph output comes from; ranges: symbol ->
        (lo, hi) of the sizes it may take (hi None: unbounded); checks: (dim expression that must be >= 1, what it
        is) pairs; index_specs: input name -> its index bounds (runtime/feeds.py checks its values before any
        kernel); data_dims: (size variable, step, its largest value as an expression of the others) per dim whose
        size is a value the model computes: the int64 the step's second input holds when it runs."""
        self._ranges = ranges = ranges or {}
        self._data = {k: (var, bound) for var, k, bound in data_dims}  # step -> the data-sized dim it binds

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
        self._lib.relayish_pool_linger.restype = self._lib.relayish_pool_idle.restype = None
        self._kernels = []  # per step, per choice of kernel (one, but for a convolution of several algorithms)
        for s in steps:
            fns = []
            for c in s.choices or (s,):
                fn = getattr(self._lib, c.kernel)  # (one object per step: a scan's kernel takes its times too)
                fn = type(fn)((c.kernel, self._lib))
                fn.restype = None
                fn.argtypes = [ctypes.c_void_p] * (len(c.args) + c.scan + len(c.outputs) + len(c.scratch) +
                                                   bool(c.sizes))
                fns.append(fn)
            self._kernels.append(fns)
        self._const_ptrs = [c.ctypes.data for c in consts]
        self._plans: dict = {}  # sizes -> _Plan
        self._spaces: list = []  # workspaces not in use
        self._lock = threading.Lock()
        self._index_steps()
        hint = self._hint_numbers()
        self._packing = _pack([ALIGN] * len(self._lives) if hint is None else self._aligned_bytes(hint).tolist(),
                              self._lives)
        self._in_dtypes = [np.dtype(dtype) for _, _, dtype in inputs]
        # the generated run's two tables in one: the inputs' addresses, then the returned results'
        self._table = ctypes.c_void_p * max(len(inputs) + sum(len(d) for _, d in self._returned), 1)
        self._runner = None  # the plan and the calls in generated code (compiler/generic_runner.py)
        try:
            self._runner = GeneratedRunner(self)
        except (ValueError, KeyError):  # a dim expression it cannot emit: planned and called from Python
            pass
        except Exception as e:  # noqa: BLE001  (LLVM refused it: the Python planner and loop serve every size)
            warnings.warn(f"relayish: the generic module's planner could not be generated ({type(e).__name__}: "
                          f"{e}); it plans and calls its kernels from Python, slower on a new shape",
                          RuntimeWarning, stacklevel=2)

    def _index_steps(self) -> None:
        """Where each step's numbers are among the evaluator's, and its buffers among the workspace's."""
        steps, checks = self._steps, self._checks
        returned = {src[1] for src in self._outs if src[0] == "value"}  # steps whose results are returned
        self._returned = [(k, [dtype for _, dtype in steps[k].outputs]) for k in sorted(returned)]
        last_use, self._as_arrays = {}, set()  # (step, output) -> last reader; steps whose results a scan reads
        for k, s in enumerate(steps):
            for a in s.args:
                if a[0] == "value":
                    last_use[(a[1], a[2])] = k
                    if s.scan:
                        self._as_arrays.add(a[1])
            if s.scan:
                self._as_arrays.add(k)
        # the evaluator's numbers: the checks, then per step its outputs' dims, and per choice of its kernel (one
        # but for a convolution of several algorithms) its scratch sizes and size arguments; then a 1 (the empty
        # product of a scalar's dims)
        exprs = [d for d, _ in checks]
        gather, starts, itemsizes, lives = [], [], [], []  # per workspace buffer: its dims, from gather[start:]
        self._by_choice = {}  # (step, choice) -> its scratch buffers' indices (emptied when another is chosen)
        self._shape_at = {}  # (step, output) -> its dims' positions, for the outputs made arrays
        self._choosing = []  # per step of several kernels: (step, its output's height and width positions, tiles)
        self._out_bufs, self._scratch_bufs, self._size_start, size_at, out_dims = [], [], [], [], []

        def buffer(positions, dtype, live, choice=None) -> int:
            starts.append(len(gather))
            gather.extend(positions)
            gather.append(-1)  # the 1 (see above)
            itemsizes.append(np.dtype(dtype).itemsize)
            lives.append(live)
            if choice is not None:
                self._by_choice.setdefault(choice, []).append(len(starts) - 1)
            return len(starts) - 1

        def numbers(these) -> list[int]:
            exprs.extend(these)
            return list(range(len(exprs) - len(these), len(exprs)))
        for k, s in enumerate(steps):
            outs = []
            for j, (dims, dtype) in enumerate(s.outputs):
                positions = numbers(dims)
                out_dims.extend(positions)
                if k in returned or k in self._as_arrays:
                    self._shape_at[(k, j)] = positions
                outs.append(None if k in returned else buffer(positions, dtype, (k, last_use.get((k, j), k))))
                if s.choices and j == 0:  # a convolution's blocked output (NCHW{b}c): its spatial dims choose
                    self._choosing.append((k, positions[2], positions[3], s.tiles))
            self._out_bufs.append(outs)
            scratch_bufs, size_starts = [], []
            for c, choice in enumerate(s.choices or (s,)):
                scratch_bufs.append([buffer([p], dtype, (k, k), (k, c)) for p, (_, dtype) in
                                     zip(numbers([n for n, _ in choice.scratch]), choice.scratch)])
                size_starts.append(len(size_at) if choice.sizes else None)
                size_at.extend(numbers(choice.sizes))
            self._scratch_bufs.append(scratch_bufs)
            self._size_start.append(size_starts)
        self._order = list(self._vars.values()) + [var for var, _ in self._data.values()]
        self._exprs = exprs
        self._evaluate = evaluator(exprs, self._order)
        self._gather, self._starts = np.array(gather, np.intp), np.array(starts, np.intp)
        self._itemsizes, self._lives = np.array(itemsizes, np.int64), lives
        self._size_at = np.array(size_at, np.intp)
        self._out_dims = np.array(out_dims, np.intp)

    def _hint_numbers(self) -> np.ndarray | None:
        """The evaluator's numbers at each symbol's hint size (HINT_SIZE within its range), None if they break a
        check (then every buffer is packed as if of one size)."""
        try:
            numbers = self._numbers(self._with_bounds(self._hint_values()))
        except (ArithmeticError, ValueError):
            return None
        return None if self._failed_check(numbers) is not None else numbers

    def _hint_values(self) -> dict:
        """Each input symbol's hint size (HINT_SIZE within its range)."""
        return {v: hint_size(self._ranges.get(v.name)) for v in self._vars.values()}

    def _numbers(self, values: dict) -> np.ndarray:
        """The evaluator's numbers (see _index_steps) at these values of every size variable."""
        return np.array(self._evaluate(*[values[v] for v in self._order]) + (1,), np.int64)

    def _failed_check(self, numbers: np.ndarray) -> int | None:
        """The first check (an intermediate dim >= 1) these numbers break, else None."""
        bad = np.flatnonzero(numbers[:len(self._checks)] < 1)
        return int(bad[0]) if len(bad) else None

    def _unchosen(self, choice: list) -> list:
        """The scratch buffers of the kernels a plan does not run."""
        return [b for (k, c), bufs in self._by_choice.items() if choice[k] != c for b in bufs]

    def _arguments(self, numbers: np.ndarray, choice: list) -> tuple:
        """(every kernel's size arguments as int32, per step the address of its chosen kernel's, the shapes of the
        outputs made arrays) at these numbers."""
        sizes = numbers[self._size_at].astype(np.int32)
        base, listed = sizes.ctypes.data, numbers.tolist()
        return (sizes, [None if at[c] is None else base + 4 * at[c] for at, c in zip(self._size_start, choice)],
                {kj: tuple(listed[p] for p in positions) for kj, positions in self._shape_at.items()})

    def _keep(self, key: tuple, plan: _Plan) -> _Plan:
        with self._lock:
            if len(self._plans) >= MAX_PLANS:  # sizes change from call to call: keep memory bounded
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _with_bounds(self, values: dict) -> dict:
        """values (the input symbols') and each data-sized dim at its largest value."""
        values = dict(values)
        for var, bound in self._data.values():
            values[var] = max(0, evaluate(bound, values))
        return values

    def _aligned_bytes(self, numbers: np.ndarray, unchosen=()) -> np.ndarray:
        """Each workspace buffer's bytes at these numbers, a cache line at least (and for the scratch buffers of
        the kernels not chosen)."""
        if not len(self._starts):
            return np.zeros(0, np.int64)
        counts = np.multiply.reduceat(numbers[self._gather], self._starts)
        counts[unchosen] = 0
        return (np.maximum(counts, 1) * self._itemsizes + (ALIGN - 1)) // ALIGN * ALIGN

    @property
    def data_sized(self) -> list[str]:
        """The size variables whose values the model computes (the columns of a NonZero), in order."""
        return [var.name for var, _ in self._data.values()]

    def idle(self) -> None:
        """Let the library's pool workers sleep now (runtime.Module.idle)."""
        self._lib.relayish_pool_idle()

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
        return self._values({name: np.shape(feed[name]) for name in self._specs if name in feed})

    def _values(self, shapes: dict) -> dict:
        return {self._vars[s]: n for s, n in bind(self._specs, shapes).items()}

    def kernels_for(self, shapes: dict) -> list[tuple[str, int | None]]:
        """The kernels a call with inputs of these shapes (name -> shape) runs, in order: (name, the Winograd tile
        of a convolution whose algorithm is chosen per call (0: direct), else None)."""
        plan = self._plan(self._values(shapes))
        return [((s.choices[c].kernel, s.tiles[c]) if s.choices else (s.kernel, None))
                for s, c in zip(self._steps, plan.choice)]

    def warm_up(self) -> None:
        """One call on zeros at the hint sizes: the library's code and threads, and a workspace, ready before the
        first real call. Best effort: sizes the model refuses leave it cold."""
        values = self._hint_values()
        by_name = {v.name: n for v, n in values.items()}
        feed = {name: np.zeros(tuple(d if isinstance(d, int) else by_name[d.name] for d in dims), dtype)
                for name, dims, dtype in self._inputs}
        try:
            self.run(None, feed)
        except (ValueError, ArithmeticError):
            pass

    def _plan(self, values: dict) -> _Plan:
        """What a call at these sizes (size variable -> value) needs: kept per set of sizes."""
        key = tuple(sorted((v.name, n) for v, n in values.items()))
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        small = {v.name: n for v, n in values.items() if n < 1}
        if small:
            raise SizesOutsideGeneric(f"sizes {small}: an empty dim is compiled for")
        if self._runner is not None:
            plan = self._generated_plan(values)
            if plan is not None:
                return self._keep(key, plan)
        return self._keep(key, self._python_plan(values))

    def _python_plan(self, values: dict) -> _Plan:
        """_plan's work in Python and numpy (the generated plan's reference; raises the error that names what is
        wrong with these sizes)."""
        key = tuple(sorted((v.name, n) for v, n in values.items()))
        values = self._with_bounds(values)  # (the buffers are placed for the largest data-sized dims)
        numbers = self._numbers(values)
        bad = self._failed_check(numbers)
        if bad is not None:
            d, what = self._checks[bad]
            raise SizesOutsideGeneric(f"sizes {dict(key)}: {what}: {te.expr_str(d)} would be {numbers[bad]}, "
                                      f"not >= 1")
        if (numbers[self._out_dims] < 0).any():
            raise ValueError(f"sizes {dict(key)}: a kernel would make an output with a negative dim (an input is "
                             f"too small for the model)")
        choice = [0] * len(self._steps)
        for k, h, w, tiles in self._choosing:  # the algorithm of a convolution: the rule of a static compile's
            m = winograd_tile_at(int(numbers[h]), int(numbers[w]), tiles)
            choice[k] = tiles.index(m) if m in tiles else len(tiles) - 1
        nbytes = self._aligned_bytes(numbers, self._unchosen(choice))
        blocks = np.zeros(max(self._packing, default=-1) + 1, np.int64)
        np.maximum.at(blocks, self._packing, nbytes)
        ends = np.cumsum(blocks)
        offsets = (ends - blocks)[self._packing].tolist() if len(blocks) else []
        return _Plan(offsets, int(ends[-1]) if len(ends) else 0, *self._arguments(numbers, choice), choice, values,
                     nbytes)

    def _generated_plan(self, values: dict) -> _Plan | None:
        """_plan's work in one call of the generated plan function; None where it finds these sizes wrong (the
        Python planning then raises the error that names the problem)."""
        r = self._runner
        state = np.empty(r.words, np.int64)
        # the sizes' array held by a name for the whole call: a temporary's .ctypes.data outlives the array, whose
        # memory another thread's allocation could take before the plan reads it (a plan made for other sizes)
        inputs = np.array([values[v] for v in r.inputs], np.int64)
        status = r.plan(inputs.ctypes.data, state.ctypes.data)
        if status == OVERFLOW:
            raise ValueError(f"sizes {({v.name: n for v, n in values.items()})}: a buffer or a kernel's size would "
                             f"overflow (more than 2^63 bytes, or 2^31 elements along one loop)")
        if status != OK:
            return None
        listed = state[:r.offset_at].tolist()
        choice = [0] * len(self._steps)
        for k, i in r.choice_index.items():
            choice[k] = listed[r.choice_at + i]
        sizes = state[r.sizes_at:].view(np.int32)
        base = sizes.ctypes.data
        plan = _Plan(state[r.offset_at:r.size_at].tolist(), int(state[r.size_at]), sizes,
                     [None if at[c] is None else base + 4 * at[c] for at, c in zip(self._size_start, choice)],
                     {kj: tuple(listed[p] for p in positions) for kj, positions in self._shape_at.items()}, choice,
                     values, None)
        plan.state, plan.state_address = state, state.ctypes.data
        return plan

    def _bind_data(self, plan: _Plan, k: int, value: int) -> _Plan:
        """The plan of the rest of a call once step k's data-sized dim is known to be `value`: the same buffers
        (placed for its largest value), the sizes, shapes and size arguments at this value."""
        var, _ = self._data[k]
        if not 0 <= value <= plan.values[var]:
            raise RuntimeError(f"the data-sized dim {var.name} would be {value}, outside [0, {plan.values[var]}] "
                               f"(kernel {self._steps[k].kernel}'s count)")
        values = {**plan.values, var: value}
        key = ("data",) + tuple(sorted((v.name, n) for v, n in values.items()))
        bound = self._plans.get(key)
        if bound is not None:
            return bound
        numbers = self._numbers(values)
        bad = self._failed_check(numbers)
        if bad is not None:
            d, what = self._checks[bad]
            raise ValueError(f"{var.name} = {value} (the count of kernel {self._steps[k].kernel}): {what}: "
                             f"{te.expr_str(d)} would be {numbers[bad]}, not >= 1")
        # (the buffers were placed for the largest value, and sizes grow with a data-sized dim: this does not happen)
        if (self._aligned_bytes(numbers, self._unchosen(plan.choice)) > plan.nbytes).any():
            raise RuntimeError(f"{var.name} = {value}: a buffer would outgrow the room made for {var.name} = "
                               f"{plan.values[var]}")
        return self._keep(key, _Plan(plan.offsets, plan.size, *self._arguments(numbers, plan.choice), plan.choice,
                                     values, plan.nbytes))

    def _take_workspace(self, size: int) -> _Workspace:
        """A workspace of at least `size` bytes for one call, its own until _give_back: the smallest kept one that
        fits (its pages touched by an earlier call), else the largest kept one grown in place, else a new one."""
        size = max(size, 1)
        with self._lock:
            fits = [k for k, w in enumerate(self._spaces) if w.size >= size]
            if fits:
                return self._spaces.pop(min(fits, key=lambda k: self._spaces[k].size))
            space = self._spaces.pop(max(range(len(self._spaces)), key=lambda k: self._spaces[k].size)) \
                if self._spaces else None
        if space is None:
            return _Workspace(size)
        space.grow(size)
        return space

    def _give_back(self, space: _Workspace) -> None:
        with self._lock:
            if len(self._spaces) < MAX_POOLED:
                self._spaces.append(space)

    def run(self, output_names, feed: dict, run_options=None) -> list[np.ndarray]:
        values = self.bind(feed)
        arrays = []
        for (name, _, _), dtype in zip(self._inputs, self._in_dtypes):
            a = feed[name]
            if type(a) is not np.ndarray:
                a = np.asarray(a)
            if a.dtype != dtype:
                raise ValueError(f"input {name!r} has dtype {a.dtype}, expected {dtype}")
            if name in self._index_specs:
                check_index_values(self._index_specs[name], a)
            # read in place: kernels assume only element alignment (runtime/aligned.py), a copy costs a pass over it
            if not a.flags.c_contiguous or data_address(a) % a.itemsize:
                a = as_aligned(np.ascontiguousarray(a), a.itemsize)
            arrays.append(a)
        plan = self._plan(values)
        space = self._take_workspace(plan.size)
        try:
            if plan.state is not None:
                values_out = self._run_generated(plan, space, arrays)
            else:
                values_out = self._run_steps(plan, space, arrays)
        finally:
            self._give_back(space)
            self._lib.relayish_pool_linger()  # workers spin a moment for a next call, then sleep (as a module's run)
        if output_names is None:
            return values_out
        index = {n: k for k, n in enumerate(self._output_names)}
        missing = [n for n in output_names if n not in index]
        if missing:
            raise ValueError(f"unknown output(s) {missing}; outputs: {self._output_names}")
        return [values_out[index[n]] for n in output_names]

    def _run_generated(self, plan: _Plan, space: _Workspace, arrays: list) -> list:
        """Every kernel called by the generated run function (compiler/generic_runner.py): the returned results
        allocated here, their addresses and the inputs' passed in two tables."""
        shapes = plan.shapes  # (a data-sized dim's at its largest value: the results are cut to the call's after)
        fresh = {k: [np.empty(shapes[(k, j)], dtype) for j, dtype in enumerate(dtypes)]  # (element alignment)
                 for k, dtypes in self._returned}
        table = self._table(*[data_address(a) for a in arrays],
                            *[data_address(r) for k, _ in self._returned for r in fresh[k]])
        at = ctypes.addressof(table)
        final = np.empty(self._runner.numbers, np.int64) if self._data else None  # (the numbers it ends at)
        if self._runner.run(plan.state_address, space.address, at, at + 8 * len(arrays),
                            None if final is None else final.ctypes.data) != OK:
            # a count out of range or a size that breaks a check: the call again from Python, which names it
            return self._run_steps(self._python_plan(plan.values), space, arrays)
        if final is not None:
            listed = final.tolist()
            for k, results in fresh.items():
                for j, r in enumerate(results):
                    results[j] = _cut(r, tuple(listed[p] for p in self._shape_at[(k, j)]))
        return [self._value(o, arrays, fresh) for o in self._outs]

    def _run_steps(self, plan: _Plan, space: _Workspace, arrays: list) -> list:
        """Call every kernel in order; intermediates at their offsets in the workspace, passed as addresses (ints:
        the kernels' argtypes are void pointers, so a call costs little per argument), as arrays only where a scan
        reads them; the results that are returned allocated anew. Returns the graph's outputs."""
        base, offsets, in_ptrs, const_ptrs = space.address, plan.offsets, [a.ctypes.data for a in arrays], \
            self._const_ptrs
        produced, pointers = [], []  # per step: its results (arrays, or None), and their addresses

        def address(a):
            return in_ptrs[a[1]] if a[0] == "input" else const_ptrs[a[1]] if a[0] == "const" else pointers[a[1]][a[2]]
        for k, (fns, s, out_bufs, scratch_bufs) in enumerate(zip(self._kernels, self._steps, self._out_bufs,
                                                                  self._scratch_bufs)):
            if k in self._data:  # a data-sized dim: its value is now computed, what follows is planned with it
                plan = self._bind_data(plan, k, ctypes.c_int64.from_address(address(s.args[1])).value)
            c, sizes_ptr = plan.choice[k], plan.size_ptrs[k]
            results = None
            if out_bufs and out_bufs[0] is None:  # returned: arrays of their own
                results = [aligned_empty(plan.shapes[(k, j)], dtype) for j, (_, dtype) in enumerate(s.outputs)]
                result_ptrs = [r.ctypes.data for r in results]
            else:
                result_ptrs = [base + offsets[b] for b in out_bufs]
                if k in self._as_arrays:
                    results = [space.view(offsets[b], plan.shapes[(k, j)], dtype)
                               for j, (b, (_, dtype)) in enumerate(zip(out_bufs, s.outputs))]
            temp_ptrs = [base + offsets[b] for b in scratch_bufs[c]]
            if s.scan:
                _run_scan(fns[0], [self._value(a, arrays, produced) for a in s.args], results[0],
                          temp_ptrs + ([sizes_ptr] if sizes_ptr is not None else []))
            else:
                args = [address(a) for a in (s.choices[c].args if s.choices else s.args)] + result_ptrs + temp_ptrs
                if sizes_ptr is not None:
                    args.append(sizes_ptr)
                fns[c](*args)
            produced.append(results)
            pointers.append(result_ptrs)
        return [self._value(o, arrays, produced) for o in self._outs]

    def _value(self, src, arrays, produced):
        """The array of a graph output's source: an input, a constant, or a step's result (produced[step][j])."""
        if src[0] == "input":
            return arrays[src[1]]
        if src[0] == "const":
            return self._consts[src[1]]
        return produced[src[1]][src[2]]

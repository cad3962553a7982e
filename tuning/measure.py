"""Measurement: build and run a task's candidate schedules in worker processes, with timeouts.

    results = measure(task, schedules)          # one MeasureResult per schedule, in order
    results[i].costs  -> [seconds per call, one per repeat] or None;  results[i].error -> None or why

Phases. All candidates are first built (schedule -> loop IR -> LLVM -> shared library) in parallel on the workers;
then the built kernels are run ONE AT A TIME, each with the thread count the model will use (default: all cores).
Two kernels timed at once, or a kernel timed while builds run, would share the cores and both read slow.

Isolation. Every build and every run is a job in a worker process, under a watchdog (faulthandler's C thread) that
kills the process when the job outlives timeout_s. A worker that segfaults, aborts or is killed breaks the process
pool: the pool (`tuning/pool.py`) is replaced, builds that were in flight with the culprit are retried alone (so
only the culprit is blamed), the candidate gets an error ("run crashed ...", "run timed out ..."), and measuring
goes on.

What travels. A Task holds te stages and closures, so the task's primitive Function goes to the workers as plain
data (`function_to_data`) and schedules as JSON; a worker rebuilds the Task (cached per process) and checks that
its key is unchanged. A built library comes back as bytes, so it may run in another process than the one that
built it (or, with a distributed executor, on another machine of the same target).

Correctness. Inputs are random (seeded: the same arrays in every process); outputs start as NaN so that an element
a kernel never writes is caught. The outputs of every candidate that ran are compared with the numpy interpreter's
(relayish.interp.evaluate of the task's Function, computed once per task and seed and cached): an error
max|ours - ref| / max|ref| above the tolerance makes the candidate "wrong result: max rel err ...".

Cost. One untimed call first (the checked one; it also warms the caches and the thread pool), then `repeat` times
`number` calls: costs[r] = their mean in seconds. MeasureResult.cost = min(costs). With flush_cache (what tuning
uses, as TVM's enable_cpu_cache_flush) each call is timed on its own after writing a buffer twice the size of
the last-level cache, so that it reads its weights from memory as a kernel of a model does (the kernels before
it have filled the caches with their own data), and then reading its activation inputs (Task.activation_inputs:
the parameters that are not constants where the task was found), which in a model the kernel before has just
written, and its outputs and scratch buffers, workspace the kernels before it used: they are in cache. On
ResNet-18 (Zen 3) the sum of the default kernels' costs read 33% above the model's latency with everything
flushed, 12% above with the activations warm. The call's dispatch is included; the thread pool is woken between the flush and the
call (in a model it is hot from the kernel before). Without it the calls run
back to back and time a kernel whose data stays in cache, which a model never sees.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import dataclasses
import ctypes
import faulthandler
import glob
import math
import os
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from compiler.codegen.analysis import unrolled_size
from compiler.codegen.library import gc_paused
from compiler.loopir import For, Load, PrimFunc, Seq, Store
from compiler.lower import lower
from compiler.schedule import Schedule
from compiler.task import Task, build_task
from relayish import te
from relayish.expr import Attrs, Call, Constant, Function, TensorType, Tuple, TupleGetItem, Var, post_order
from runtime import default_num_threads
from .build import add_phase, built_before, library_bytes, lowered_key, remember_build
from .pool import RECYCLE_AFTER_RUNS, WorkerPool, _as_pool, default_pool  # noqa: F401  (measure's API)
from runtime.accuracy import DEFAULT_TOLERANCE, output_error
from runtime.aligned import kernel_arguments
from runtime.timing import QUIET_WINDOW_S, QuietCheck, cpu_jiffies, idle_wait

KERNEL_NAME = "candidate"
GRACE_S = 30.0  # extra wait for a job whose own watchdog failed to end it (then its workers are killed)
MAX_UNROLLED_STATEMENTS = 1024  # a candidate whose unrolled code is larger is refused before LLVM sees it
GIVE_UP_MIN_S = 0.01  # a first call faster than this is always followed by the timed calls (measure's give_up_factor)
FAULTS = ("segfault", "hang", "wrong", "build_crash")  # test hooks, see measure(_faults=...)


@dataclass
class MeasureResult:
    """costs: seconds per call, one mean per repeat (None on error); error: why the candidate failed (else None);
    build_s / run_s: worker time spent building / running (loading, checking and timing) the candidate."""
    costs: list[float] | None
    error: str | None
    build_s: float
    run_s: float

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cost(self) -> float:
        """min over repeats of the mean over `number` calls, in seconds; inf for a failed candidate."""
        return min(self.costs) if self.costs else math.inf


# ---------------------------------------------------------------------------------------------- what travels

def function_to_data(func: Function) -> dict:
    """A primitive Function as plain picklable data: nodes in post order, each referring to earlier ones by index.

    (Pickling the nodes themselves would carry hashes cached in the sending process, which string hashing makes
    wrong in another one.)"""
    index = {id(p): i for i, p in enumerate(func.params)}
    params = [(p.name, tuple(p.type.shape), p.type.dtype) for p in func.params]
    nodes = []
    for node in post_order(func.body):
        if id(node) in index:
            continue
        if isinstance(node, Call) and isinstance(node.op, str):
            item = ("call", node.op, [index[id(a)] for a in node.args], node.attrs.as_dict())
        elif isinstance(node, Constant):
            item = ("const", np.array(node.data))
        elif isinstance(node, Tuple):
            item = ("tuple", [index[id(f)] for f in node.fields])
        elif isinstance(node, TupleGetItem):
            item = ("get", index[id(node.tuple_value)], node.index)
        else:
            raise ValueError(f"cannot send a {type(node).__name__} node to a measurement worker: a primitive "
                             "function holds only calls of ops, constants, tuples and its own parameters")
        index[id(node)] = len(params) + len(nodes)
        nodes.append(item)
    return {"params": params, "nodes": nodes, "body": index[id(func.body)], "attrs": func.attrs.as_dict()}


def function_from_data(data: dict) -> Function:
    """Inverse of function_to_data (types are re-inferred, so the result is a fresh, well-typed Function)."""
    values: list = [Var(name, TensorType(shape, dtype)) for name, shape, dtype in data["params"]]
    for item in data["nodes"]:
        kind = item[0]
        if kind == "call":
            values.append(Call(item[1], tuple(values[i] for i in item[2]), Attrs(item[3])))
        elif kind == "const":
            values.append(Constant(item[1]))
        elif kind == "tuple":
            values.append(Tuple(tuple(values[i] for i in item[1])))
        elif kind == "get":
            values.append(TupleGetItem(values[item[1]], item[2]))
        else:
            raise ValueError(f"unknown node kind {kind!r} in function data")
    n = len(data["params"])
    return Function(tuple(values[:n]), values[data["body"]], Attrs(data["attrs"]))


@dataclass(frozen=True)
class TaskSpec:
    """What a worker needs to rebuild a Task."""
    key: str
    name: str
    func: dict  # function_to_data

    @staticmethod
    def of(task: Task) -> "TaskSpec":
        return TaskSpec(task.key, task.name, function_to_data(task.func))


_WORKER_TASKS: collections.OrderedDict = collections.OrderedDict()  # per process: key -> Task, a few recent


def _task_of(spec: TaskSpec) -> Task:
    task = _WORKER_TASKS.get(spec.key)
    if task is None:
        task = build_task(function_from_data(spec.func), spec.name)
        if task.key != spec.key:
            raise RuntimeError(f"task {spec.name} changed in transit: key {task.key} != {spec.key}")
        _WORKER_TASKS[spec.key] = task
        while len(_WORKER_TASKS) > 8:
            _WORKER_TASKS.popitem(last=False)
    return task


def random_inputs(specs, seed: int) -> list[np.ndarray]:
    """Deterministic inputs for (shape, dtype) specs: standard normal floats, small non-negative integers."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(dt))
        else:
            out.append(rng.integers(0, 4, shape).astype(dt))
    return out


# ---------------------------------------------------------------------------------------------- worker jobs

@dataclass
class BuildOutput:
    lib: bytes | None  # the shared library, or None on error
    params: list | None  # (shape, dtype) of every kernel parameter: inputs, outputs, scratch
    num_inputs: int
    num_outputs: int
    error: str | None
    build_s: float
    phases: dict = field(default_factory=dict)  # seconds per build step (tuning/build.py PHASES)


@dataclass
class RunOutput:
    costs: list | None
    outputs: list | None  # the output arrays of the first (untimed) call, when asked for
    error: str | None
    run_s: float


_DEVNULL = None


@contextlib.contextmanager
def _watchdog(timeout_s: float):
    """Kill this process if the block runs longer than timeout_s: a C thread that needs no GIL, so a kernel in
    an endless loop (or LLVM stuck) is stopped too. The pool sees the worker die."""
    global _DEVNULL
    if _DEVNULL is None:
        _DEVNULL = open(os.devnull, "w")
    faulthandler.dump_traceback_later(timeout_s, exit=True, file=_DEVNULL)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _build_job(spec: TaskSpec, schedule_json: str, timeout_s: float, fault: str | None) -> BuildOutput:
    """Worker: schedule -> loop IR -> shared library bytes. The cyclic garbage collector is off for the build
    (lowering and IR emission allocate ~10^5 objects) and on again once _build has returned: the loop IR is then
    freed, and the collection that follows scans only what the build leaves behind (its llvmlite module, whose
    parent links are cycles) instead of every object of the lowering still held."""
    t0 = time.perf_counter()
    with _watchdog(timeout_s), gc_paused():
        return _build(spec, schedule_json, fault, t0)


def _build(spec: TaskSpec, schedule_json: str, fault: str | None, t0: float) -> BuildOutput:
    cpu0 = time.process_time()
    phases: dict = {}
    try:
        task = _task_of(spec)
        func = lower(Schedule.from_json(schedule_json).apply(task.initial_state()), KERNEL_NAME)
        add_phase(phases, "lower_s", time.process_time() - cpu0)
        size = unrolled_size(func)
        if size > MAX_UNROLLED_STATEMENTS:
            # LLVM would take longer than the timeout, whose kill breaks the pool for every build in flight:
            # in two template-free runs of ResNet-18, 11 of 15 build timeouts had > 1024 unrolled statements, and
            # 6 of 1,004 programs that built (the default schedules of the suite models: at most 118)
            return BuildOutput(None, None, 0, 0, f"build refused: {size} statements once unrolled, more than "
                               f"{MAX_UNROLLED_STATEMENTS}", time.perf_counter() - t0, phases)
        if fault == "build_crash":
            ctypes.string_at(0)  # a segfault in the build process
        func = _inject_fault(func, fault)
        lib = library_bytes(func, phases, lowered_key(spec.key, func))
    except Exception as e:  # a bad schedule, a lowering or codegen bug: this candidate's error
        return BuildOutput(None, None, 0, 0, f"build error: {type(e).__name__}: {e}", time.perf_counter() - t0,
                           phases)
    params = [(tuple(int(d) for d in p.shape), p.dtype) for p in func.params]
    return BuildOutput(lib, params, func.attrs["num_inputs"], func.attrs["num_outputs"], None,
                       time.perf_counter() - t0, phases)


def _inject_fault(func: PrimFunc, fault: str | None) -> PrimFunc:
    """Test hook: a kernel that writes 8 GB past its output (segfault), never ends (hang) or is off by 1000 in
    one element (wrong). The fault is in the generated code itself, as a codegen bug would be."""
    if fault in (None, "build_crash"):
        return func
    out = func.params[func.attrs["num_inputs"]]
    if fault == "segfault":
        body = Seq([Store(out, te.IntImm(2 ** 31 - 1), te.const(0.0, out.dtype)), func.body])
    elif fault == "hang":
        body = For(te.Var("forever"), te.IntImm(0), te.IntImm(2 ** 31 - 1), "serial", func.body)
    elif fault == "wrong":
        body = Seq([func.body, Store(out, te.IntImm(0), Load(out, te.IntImm(0)) + te.const(1000.0, out.dtype))])
    else:
        raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
    return PrimFunc(func.name, func.params, body, dict(func.attrs))


def _load_kernel(lib: bytes):
    """dlopen the library bytes (under a unique name: dlopen returns a library already loaded under the same
    path) and return (kernel function, library). The file is removed at once; the mapping stays."""
    fd, path = tempfile.mkstemp(prefix="relayish-candidate-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        dll = ctypes.CDLL(path)
    finally:
        os.unlink(path)
    kernel = getattr(dll, KERNEL_NAME)
    kernel.restype = None
    return kernel, dll


def last_level_cache_bytes() -> int:
    """Size of this machine's largest CPU cache (Linux sysfs); 32 MiB when it cannot be read."""
    sizes = {}
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "level")) as f, open(os.path.join(index, "size")) as g:
                level, text = int(f.read()), g.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        sizes[level] = int(text.rstrip("KMGkmg")) * scale
    return sizes[max(sizes)] if sizes else 32 << 20


_FLUSH_BUFFER = None


def evict_caches() -> None:
    """Evict the caches: write a buffer twice the size of the last-level cache (allocated once per process)."""
    global _FLUSH_BUFFER
    if _FLUSH_BUFFER is None:
        _FLUSH_BUFFER = np.zeros(2 * last_level_cache_bytes() // 4, np.float32)
    _FLUSH_BUFFER.fill(_FLUSH_BUFFER[0] + 1)


# A parallel task that does nothing: running it on a kernel library's pool wakes the pool's workers, which then
# spin for a while (compiler/codegen/threadpool.py), as they do between the kernels of a model.
_NOOP_TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)(lambda closure, task, n: None)


def _wake_pool(dll, threads: int) -> None:
    dll.relayish_parallel_for(_NOOP_TASK, None, ctypes.c_int32(threads))


MAX_RETAKES = 2  # a repeat during which other processes took the CPU is taken again, at most this many times


def _timed_calls(kernel, args, number: int, repeat: int, flush: bool, wake=lambda: None, warm=(),
                 jiffies=cpu_jiffies, max_retakes: int = MAX_RETAKES) -> list[float]:
    """Per repeat, the mean seconds of `number` calls: back to back, or each alone after a cache flush, a read of
    the `warm` arrays (the activations a producer kernel has just written in a model) and wake() (which wakes the
    thread pool that the flush left asleep: in a model it is hot from the kernel before). A repeat during which
    other processes (or the hypervisor, as steal) took more than OTHERS_MAX_JIFFIES of CPU is taken again, up to
    max_retakes times, as bench's strict mode does: on the shared 2-core machine one busy neighbour halves a
    2-thread kernel, and GoogLeNet's re-measured programs read up to 2x apart from one round to the next."""
    def one_repeat() -> float:
        if not flush:
            start = time.perf_counter()
            for _ in range(number):
                kernel(*args)
            return (time.perf_counter() - start) / number
        total = 0.0
        for _ in range(number):
            evict_caches()
            with np.errstate(all="ignore"):  # a read that touches the lines: its sum may overflow, and is dropped
                for a in warm:
                    a.sum()
            wake()
            start = time.perf_counter()
            kernel(*args)
            total += time.perf_counter() - start
        return total / number

    costs = []
    for _ in range(repeat):
        cost = math.inf
        for _attempt in range(max_retakes + 1):
            with QuietCheck(jiffies) as check:
                cost = min(cost, one_repeat())  # a disturbance only adds time: the least reading is the truest
            if check.quiet:
                break
        costs.append(cost)
    return costs


def _run_job(build: BuildOutput, number: int, repeat: int, threads: int, seed: int, timeout_s: float,
             want_outputs: bool, flush: bool = False, warm: tuple = (), give_up_s: float = math.inf) -> RunOutput:
    """Worker: load the kernel, call it once (outputs kept for checking), then time repeat x number calls; or,
    if that first call took longer than give_up_s, nothing more: its time is the one cost."""
    t0 = time.perf_counter()
    dll = None
    with _watchdog(timeout_s):
        try:
            kernel, dll = _load_kernel(build.lib)
            dll.relayish_set_num_threads(ctypes.c_int32(threads))
            n_in = build.num_inputs
            arrays = kernel_arguments(build.params, random_inputs(build.params[:n_in], seed), fill=None)
            for out in arrays[n_in:n_in + build.num_outputs]:  # so that an element the kernel never writes shows
                out[...] = np.nan if out.dtype.kind == "f" else -1
            args = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
            first = time.perf_counter()
            kernel(*args)
            first = time.perf_counter() - first
            outputs = [np.array(a) for a in arrays[n_in:n_in + build.num_outputs]] if want_outputs else None
            # the workspace it writes (outputs, scratch) was used by the kernels before it in a model: warm too
            costs = [first] if first > give_up_s else \
                _timed_calls(kernel, args, number, repeat, flush, lambda: _wake_pool(dll, threads),
                             [arrays[i] for i in warm] + (arrays[n_in:] if warm else []))
        except Exception as e:
            return RunOutput(None, None, f"run error: {type(e).__name__}: {e}", time.perf_counter() - t0)
        finally:
            if dll is not None:
                dll.relayish_pool_idle()  # its workers sleep now instead of spinning through the next job
    return RunOutput(costs, outputs, None, time.perf_counter() - t0)


def _call_alone(pool: WorkerPool, what: str, timeout_s: float, fn, *args):
    """Run one job with nothing else in flight; returns (value, None) or (None, error). A dead or stuck worker
    becomes the error and the pool is replaced."""
    try:
        future = pool.submit(fn, *args)
    except cf.BrokenExecutor as e:  # only an executor we cannot replace stays broken
        return None, f"{what} not done: the executor is broken ({e})"
    t0 = time.monotonic()
    try:
        return future.result(timeout=timeout_s + GRACE_S), None
    except cf.TimeoutError:  # the job's own watchdog did not end it
        pool.restart(kill=True)
        return None, f"{what} timed out after {timeout_s:g} s (unresponsive worker killed)"
    except cf.BrokenExecutor:
        elapsed = time.monotonic() - t0
        pool.restart()
        # the pool was warm, so elapsed is the job's own time: the watchdog fires at timeout_s
        if elapsed >= timeout_s:
            return None, f"{what} timed out after {timeout_s:g} s (worker killed)"
        return None, f"{what} crashed its worker process after {elapsed:.2f} s (segfault or abort)"


def _build_all(pool: WorkerPool, spec: TaskSpec, schedules: list, timeout_s: float, faults: dict) -> list:
    """Build every candidate, in parallel; equal schedules once, and a schedule built by an earlier call not again
    (tuning/build.py built_before). When a build breaks the pool (a crash, or its
    watchdog), the builds that may have been running beside it are retried alone (blaming only the one that
    breaks it again), and those that had not started are built in parallel again (retrying them all alone left a
    core idle for the rest of the batch after every timeout)."""
    jobs = [(spec, s.to_json(), timeout_s, faults.get(i)) for i, s in enumerate(schedules)]
    first: dict = {}
    unique = [first.setdefault(job[1:], i) == i for i, job in enumerate(jobs)]
    outputs: list = [None] * len(jobs)
    for i, job in enumerate(jobs):  # built by an earlier call (the tuner measures its best programs again)
        earlier = built_before(spec.key, job[1]) if unique[i] and job[3] is None else None
        if earlier is not None:
            outputs[i] = dataclasses.replace(earlier, build_s=0.0, phases={"reused": 1})
    todo = [i for i in range(len(jobs)) if unique[i] and outputs[i] is None]
    while todo:
        suspects = _build_round(pool, jobs, todo, timeout_s, outputs)
        for i in suspects:
            value, error = _call_alone(pool, "build", timeout_s, _build_job, *jobs[i])
            outputs[i] = value or BuildOutput(None, None, 0, 0, error, 0.0)
        todo = [i for i in todo if outputs[i] is None]
    for i, job in enumerate(jobs):
        if unique[i] and job[3] is None:
            remember_build(spec.key, job[1], outputs[i])
    return [outputs[i] if unique[i] else outputs[first[job[1:]]] for i, job in enumerate(jobs)]


def _build_round(pool: WorkerPool, jobs: list, todo: list, timeout_s: float, outputs: list) -> list:
    """Submit the jobs todo at once and fill outputs with what they build. If the pool breaks, returns the jobs
    that may have been running when it broke (the suspects: all of them when the pool cannot tell); the others
    stay None."""
    try:
        futures = {i: pool.submit(_build_job, *jobs[i]) for i in todo}
    except cf.BrokenExecutor:
        return list(todo)
    window = pool.started_at_once  # the pool starts its jobs in order, at most this many at a time
    for i, future in futures.items():
        try:
            outputs[i] = future.result(timeout=timeout_s + GRACE_S)
        except cf.BrokenExecutor:
            pool.restart()
            break  # the futures left are broken too
        except cf.TimeoutError:  # a job's own watchdog did not end it
            pool.restart(kill=True)
            break
    else:
        return []
    for i, future in futures.items():  # jobs that finished before the pool broke keep their result
        if outputs[i] is None and future.done() and not future.cancelled() and future.exception() is None:
            outputs[i] = future.result()
    unfinished = [i for i in todo if outputs[i] is None]
    return unfinished if window is None else unfinished[:window]


def build_candidates(task: Task, schedules, *, executor=None, timeout_s: float = 10) -> list[BuildOutput]:
    """Only the build phase of measure: every schedule built on the workers, one BuildOutput each, in order
    (bench/build_rate.py times it)."""
    return _build_all(_as_pool(executor), TaskSpec.of(task), list(schedules), timeout_s, {})


# ---------------------------------------------------------------------------------------------- reference

_REFERENCES: collections.OrderedDict = collections.OrderedDict()  # (task key, seed) -> outputs, a few recent


def reference_outputs(task: Task, seed: int) -> list[np.ndarray]:
    """The numpy interpreter's outputs of the task on random_inputs(seed); cached for the last few tasks."""
    from relayish.interp import evaluate
    key = (task.key, seed)
    if key not in _REFERENCES:
        specs = [(p.type.shape, p.type.dtype) for p in task.func.params]
        _REFERENCES[key] = evaluate(task.func, random_inputs(specs, seed))
        while len(_REFERENCES) > 4:
            _REFERENCES.popitem(last=False)
    _REFERENCES.move_to_end(key)
    return _REFERENCES[key]


def check_outputs(outputs: list, reference: list, tolerance: float) -> str | None:
    """None when every output matches the reference within tolerance, else the error text."""
    if len(outputs) != len(reference):
        return f"wrong result: {len(outputs)} outputs, the reference has {len(reference)}"
    for k, (ours, ref) in enumerate(zip(outputs, reference)):
        err = output_error(ours, ref, tolerance)
        if not err["passed"]:
            return (f"wrong result: max rel err {err['max_rel']:.3g} (max abs {err['max_abs']:.3g}) in output {k} "
                    f"of shape {tuple(ref.shape)}, tolerance {tolerance:g}")
    return None


# ---------------------------------------------------------------------------------------------- measure

def measure(task: Task, schedules, *, number: int = 3, repeat: int = 3, timeout_s: float = 10,
            executor=None, check_correctness: bool | None = None, num_threads: int | None = None,
            seed: int = 0, tolerance: float = DEFAULT_TOLERANCE, flush_cache: bool = False,
            on_result=None, give_up_factor: float | None = None, best_cost: float = math.inf,
            _faults: dict | None = None) -> list[MeasureResult]:
    """Build and time every schedule of `task`; one MeasureResult per schedule, in order. Never raises for a
    bad candidate (invalid schedule, build failure, crash, hang, wrong result): that is its error.

    number, repeat: see the module docstring. timeout_s: limit of each build job and each run job.
    executor: a WorkerPool (replaced-on-crash processes), a concurrent.futures.Executor of processes, another
    measurer (an object with measure_candidates: tuning/dask_measure.py's DaskMeasurer, builds spread over a Dask
    cluster, one run per host at a time; this module knows nothing of Dask), or None for default_pool(). on_result(i, result): called as each candidate's result is known (in the order they
    finish), e.g. to store it at once. check_correctness: compare outputs with the numpy interpreter (None = True). num_threads:
    threads of each timed kernel (default all cores). flush_cache: time each call alone after evicting the caches
    and reading back the task's activation inputs (in-model conditions, see the module docstring).
    give_up_factor: a candidate whose first (checked) call takes longer than give_up_factor x the least cost known
    (best_cost, or an earlier candidate's of this call) and than GIVE_UP_MIN_S is timed no further: that call,
    page faults and thread start included, is its one cost (a naive loop nest can take a second per call,
    100-1000x a tuned one). It saves little where builds dominate: a template-free ResNet-18 run measured 423
    programs in 15 minutes with it, 407 without, its first round ~690 s either way. Not on dask (its runs are
    dispatched at once). _faults: test hook, {candidate index: one of FAULTS}."""
    schedules = list(schedules)
    if number < 1 or repeat < 1:
        raise ValueError(f"measure: number and repeat must be >= 1, got number={number}, repeat={repeat}")
    if not timeout_s > 0:
        raise ValueError(f"measure: timeout_s must be > 0, got {timeout_s}")
    bad = {i: f for i, f in (_faults or {}).items() if f not in FAULTS}
    if bad:
        raise ValueError(f"measure: unknown fault(s) {bad}; expected {FAULTS}")
    check = check_correctness is None or bool(check_correctness)
    on_result = on_result or (lambda i, result: None)
    if hasattr(executor, "measure_candidates"):  # another measurer: tuning.dask_measure.DaskMeasurer
        return executor.measure_candidates(task, schedules, number=number, repeat=repeat, timeout_s=timeout_s,
                                           check=check, num_threads=num_threads, seed=seed, tolerance=tolerance,
                                           flush_cache=flush_cache, on_result=on_result, faults=_faults or {},
                                           warm=task.activation_inputs())
    if is_dask_client(executor):
        raise TypeError("measure: a dask.distributed Client measures through tuning.dask_measure.DaskMeasurer(client) "
                        "(tune_model and `relayish tune --dask` wrap it themselves)")
    pool = _as_pool(executor)
    pool.recycle_if_due()
    threads = num_threads or default_num_threads()

    builds = _build_all(pool, TaskSpec.of(task), schedules, timeout_s, _faults or {})
    reference = reference_outputs(task, seed) if check and any(b.lib for b in builds) else None
    settle()
    results = []
    for i, b in enumerate(builds):
        if b.lib is None:
            results.append(MeasureResult(None, b.error, b.build_s, 0.0))
        else:
            give_up_s = max(give_up_factor * best_cost, GIVE_UP_MIN_S) if give_up_factor else math.inf
            run, error = _call_alone(pool, "run", timeout_s, _run_job, b, number, repeat, threads, seed, timeout_s,
                                     check, flush_cache, task.activation_inputs(), give_up_s)
            pool.runs += 1
            results.append(run_result(b, run, error, reference if check else None, tolerance))
            best_cost = min(best_cost, results[-1].cost)
        on_result(i, results[-1])
    return results


def settle() -> None:
    """Before timing candidates: wait until no thread of this (the driver's) process still spins. The numpy
    interpreter's reference (OpenBLAS) and the cost model's training (XGBoost, OpenMP) leave worker threads
    spinning after they return, on the cores a candidate is about to be timed on in a worker process: the
    first candidates measured after a task's reference ran 2-6x slow (ResNet-18's Winograd convolutions: 4-7
    ms back to back instead of 0.6-1.2; every task's default is measured first in its batch, so the tuner's
    estimate of the hand-written model read 35.6 ms against 20.3 inside the model, Zen 3; 25.4 after this)."""
    idle_wait(QUIET_WINDOW_S)


def is_dask_client(executor) -> bool:
    """A dask.distributed Client (recognized without importing dask, an optional dependency)."""
    return type(executor).__name__ == "Client" and type(executor).__module__.startswith("distributed")


def run_result(build: BuildOutput, run: RunOutput | None, error: str | None, reference, tolerance: float
               ) -> MeasureResult:
    """The candidate's result from its build and run (None with the error when the run job died); its outputs
    are checked against reference unless that is None."""
    if run is not None:
        error = run.error or (check_outputs(run.outputs, reference, tolerance) if reference is not None else None)
    return MeasureResult(None if error else run.costs, error, build.build_s, run.run_s if run is not None else 0.0)

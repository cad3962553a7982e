"""The back half of the pipeline, on one page: a fused graph -> one shared library. Read after passes/__init__.py.

    fused graph -> materialize_outputs -> extract_tasks -> choose_schedules -> lower -> plan_memory -> emit -> link

Each step is a named function of what came before. `BACKEND` lists them in order with the products each reads
and the one it makes (the fields of `Products`); `run_backend` runs them, timing each, and can stop after any one.
The memory plan comes before emission because the graph executor, emitted into the same LLVM module as the
kernels, calls them over that plan.
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

from relayish import Call, Function, IRModule, Tuple, Var

from .codegen import emit_objects, host_target, link_shared
from .codegen.library import gc_paused
from .default_schedule import default_schedule
from .loopir import PrimFunc
from .lower import lower
from .memory import MemoryPlan, plan_memory
from .options import DefaultSchedules, as_default_schedules
from .passes import check_constant_kernels
from .records import RecordsReader
from .schedule import Schedule, ScheduleError, State
from .task import Task, TaskCalls, extract_task_calls


@dataclass
class Products:
    """What the back half works on: the first six fields are given, each step fills one of the others."""
    fused: IRModule  # the fused graph: a straight line of primitive-function calls
    records: object  # None, a records DB path, or an object with .best(task key) -> Schedule | None
    vector_width: int  # float32 lanes of the target's vectors
    lib_path: str  # where the shared library goes
    log: Callable | None  # progress messages (None: only the records summary, when there are records)
    default_schedules: DefaultSchedules = DefaultSchedules.HAND_WRITTEN  # a task without a record: untuned_schedule
    task_calls: TaskCalls | None = None
    schedules: list | None = None  # of ChosenSchedule, one per task
    kernels: list | None = None  # of PrimFunc, one per task
    memory: MemoryPlan | None = None
    object_code: list | None = None  # of object codes (bytes), linked together
    library: str | None = None  # the shared library's path


@dataclass(frozen=True)
class Step:
    name: str
    fn: Callable  # fn(*(products.<read> for read in reads)) -> products.<makes>
    reads: tuple
    makes: str
    doc: str


class ChosenSchedule(NamedTuple):
    schedule: Schedule
    source: str  # "tuned" (from the records) or "default"
    state: State  # the schedule applied to the task's initial state: what lower reads


def materialize_outputs(fused: IRModule) -> IRModule:
    """Every model output must be written by a kernel: an output that is an input or a constant (an identity
    model, a reshape round trip), or a value returned twice, gets a copy kernel. Then the invariant that no other
    kernel reads only constants is checked (passes/constants.py: raises where RELAYISH_CHECK_INVARIANTS is set)."""
    fused = _with_written_outputs(fused)
    check_constant_kernels(fused)
    return fused


def _with_written_outputs(fused: IRModule) -> IRModule:
    body = fused.main.body
    outs = list(body.fields) if isinstance(body, Tuple) else [body]
    seen, new = set(), []
    for o in outs:
        if not isinstance(o, Call) or id(o) in seen:
            p = Var("p0", o.type)
            o = Call(Function((p,), Call("copy", (p,)), {"Primitive": 1}), (o,))
        seen.add(id(o))
        new.append(o)
    if all(a is b for a, b in zip(new, outs)):
        return fused
    return fused.with_main(Function(fused.main.params, Tuple(tuple(new)) if isinstance(body, Tuple) else new[0],
                                    fused.main.attrs))


def untuned_schedule(task: Task, vector_width: int = 16,
                     kind: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN) -> Schedule:
    """The schedule of a task without a record. HAND_WRITTEN: compiler/default_schedule.py's rules; NAIVE: no
    steps at all, the naive loop nest (every stage at root, serial loops): for tuning experiments, the program a
    template-free tuner starts from (tune_model(start="naive"))."""
    if as_default_schedules(kind) is DefaultSchedules.HAND_WRITTEN:
        return default_schedule(task.initial_state(), vector_width)
    return Schedule()


def choose_schedule(task: Task, records=None, vector_width: int = 16,
                    default_schedules: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN) -> ChosenSchedule:
    """The best recorded schedule for the task on this target, else the untuned one (see untuned_schedule). A
    record is applied once: the state it makes is both the proof that it still fits the task and what lower
    reads."""
    if records is not None:
        best = records.best(task.key)
        if best is not None:
            try:
                return ChosenSchedule(best, "tuned", best.apply(task.initial_state()))
            except ScheduleError:
                pass  # a record from an older compiler may not fit any more
    sched = untuned_schedule(task, vector_width, default_schedules)
    return ChosenSchedule(sched, "default", sched.apply(task.initial_state()))


def choose_schedules(task_calls: TaskCalls, records, vector_width: int, log,
                     default_schedules: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN
                     ) -> list[ChosenSchedule]:
    """One schedule per task, from the records where they have one (see choose_schedule)."""
    with opened_records(records) as store:
        chosen = [choose_schedule(task, store, vector_width, default_schedules) for task in task_calls.tasks]
    if log is not None or records is not None:
        tuned = sum(1 for c in chosen if c.source == "tuned")
        (log or stderr_log)(f"{len(chosen)} tasks: {tuned} tuned from records, {len(chosen) - tuned} default "
                            "schedules")
    return chosen


def lower_kernels(task_calls: TaskCalls, schedules: list[ChosenSchedule]) -> list[PrimFunc]:
    """Task i's scheduled state -> loop IR, as the kernel named <task name>_<i>. (The cyclic GC is off meanwhile:
    lowering makes many short-lived expression nodes and no cycles that need freeing at once, and the GC's passes
    over them were ~40% of lowering a Winograd convolution.)"""
    with gc_paused():
        return [lower(chosen.state, f"{task.name}_{i}")
                for i, (task, chosen) in enumerate(zip(task_calls.tasks, schedules))]


def emit(kernels: list[PrimFunc], memory: MemoryPlan) -> list[bytes]:
    """The kernels the executor calls, and the executor. A kernel whose every call is elided (a concatenation
    written in place: a recurrent layer's history of hundreds of states took LLVM 2 s) is not compiled."""
    called = {c.kernel for c in memory.executor.calls if not c.elided}
    return emit_objects([k for k in kernels if k.name in called], memory.executor)


def link(object_code: list[bytes], lib_path: str) -> str:
    link_shared(object_code, lib_path)
    return lib_path


BACKEND = [
    Step("materialize_outputs", materialize_outputs, ("fused",), "fused",
         "a copy kernel for each model output that no kernel writes (an input, a constant, one returned twice)"),
    Step("extract_tasks", extract_task_calls, ("fused",), "task_calls",
         "the calls in order; unique tasks by workload key, each built once, weight = number of calls"),
    Step("choose_schedules", choose_schedules, ("task_calls", "records", "vector_width", "log", "default_schedules"),
         "schedules", "per task: the best record for this target if it still applies, else the default schedule"),
    Step("lower", lower_kernels, ("task_calls", "schedules"), "kernels", "per task: scheduled state -> loop IR"),
    Step("plan_memory", plan_memory, ("fused", "task_calls", "kernels"), "memory",
         "weights into one params blob; intermediates and scratch into one workspace by live range"),
    Step("emit", emit, ("kernels", "memory"), "object_code",
         "per kernel, then thread pool + executor: an LLVM module -> LLVM O2 -> host object code, in parallel "
         "worker processes while the next kernel's IR is emitted (codegen/workers.py)"),
    Step("link", link, ("object_code", "lib_path"), "library", "the object codes -> one shared library (cc -shared)"),
]

STEP_NAMES = [s.name for s in BACKEND]


def run_backend(fused: IRModule, vector_width: int, records=None, lib_path: str | None = None, log=None,
                timings: dict | None = None, stop_after: str | None = None,
                default_schedules: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN) -> Products:
    """Run BACKEND on a fused module (the output of passes.run_pipeline), up to and including `stop_after`.
    Each step's seconds go to timings[step name]. lib_path is needed only when the link step runs."""
    default_schedules = as_default_schedules(default_schedules)
    if stop_after is not None and stop_after not in STEP_NAMES:
        raise ValueError(f"unknown backend step {stop_after!r}; steps are {', '.join(STEP_NAMES)}")
    if lib_path is None and stop_after in (None, "link"):
        raise ValueError("run_backend: the link step needs lib_path")
    products = Products(fused, records, vector_width, lib_path, log, default_schedules)
    for step in BACKEND:
        t0 = time.perf_counter()
        setattr(products, step.makes, step.fn(*(getattr(products, name) for name in step.reads)))
        if timings is not None:
            timings[step.name] = time.perf_counter() - t0
        if step.name == stop_after:
            break
    return products


def stderr_log(msg: str):
    print(f"[relayish] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def opened_records(records):
    """None, an object with .best(task key) (RecordsReader, tuning's RecordStore: used as given), or a records DB
    path (opened for this target, and closed again)."""
    if records is None or hasattr(records, "best"):
        yield records
        return
    with RecordsReader(str(records), host_target()) as reader:
        yield reader

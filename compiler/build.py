"""compile_model: ONNX file -> passes -> tasks -> schedules -> loop IR -> one LLVM module -> runtime.Module.

The fused graph is a straight line of calls of primitive functions. Each unique function is a task with one
kernel; the graph executor calls the kernels in order over a static memory plan: graph inputs and outputs are the
caller's buffers, weights live in one params blob, and intermediates and kernel scratch share one workspace.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

import runtime
from relayish import Call, Constant, Function, Module, Tuple, TupleGetItem, Var
from relayish.expr import post_order

from .lower import lower
from .memory import WorkspacePlanner, align
from .passes import PassContext, run_pipeline
from .schedule import Schedule
from .task import Task, build_task


@dataclass
class CompiledGraph:
    """Everything the executor needs, before codegen."""
    funcs: list  # PrimFunc per task, in first-use order
    calls: list  # (kernel name, [BufferRef ...]) in execution order
    call_info: list  # per call: dict(name, ops, output_shape, layout, flops)
    params: np.ndarray  # uint8 blob
    workspace_bytes: int
    inputs: list  # (name, shape, dtype)
    outputs: list  # (name, shape, dtype)
    tasks: list  # unique Tasks
    schedules: dict = field(default_factory=dict)  # task key -> (Schedule, source)


def compile_model(model, input_shapes: dict | None = None, layout: str = "NCHWc", opt_level: int = 3,
                  records: str | None = None, num_threads: int | None = None, verbose: bool = False,
                  winograd: bool = True):
    """Compile an ONNX model (path, bytes or ModelProto) into a runnable `runtime.Module`.

    winograd=False keeps every convolution direct (see compiler/passes/layout.py winograd_tile)."""
    from frontends import from_onnx
    t0 = time.perf_counter()
    mod = from_onnx(model, input_shapes=input_shapes)
    return build(mod, layout=layout, opt_level=opt_level, records=records, num_threads=num_threads,
                 verbose=verbose, t_start=t0, winograd=winograd)


def build(mod: Module, layout: str = "NCHWc", opt_level: int = 3, records: str | None = None,
          num_threads: int | None = None, verbose: bool = False, t_start: float | None = None,
          winograd: bool = True):
    """Compile a relayish Module into a runnable `runtime.Module`."""
    from .codegen import build as cg
    if layout not in ("NCHWc", "NCHW"):
        raise ValueError(f"layout must be 'NCHWc' or 'NCHW', got {layout!r}")
    t_start = time.perf_counter() if t_start is None else t_start
    timings: dict[str, float] = {}
    ctx = PassContext(opt_level=opt_level, layout=layout, vector_width=cg_vector_width(), winograd=winograd)
    fused = materialize_outputs(run_pipeline(mod, ctx, timings=timings))
    t = time.perf_counter()
    graph = plan_graph(fused, ctx, records=records, log=_log if verbose else None)
    timings["schedule_and_lower"] = time.perf_counter() - t
    out_dir = tempfile.mkdtemp(prefix="relayish_")
    lib_path = os.path.join(out_dir, "model.so")
    t = time.perf_counter()
    plan = _executor_plan(graph)
    cg.build_library(graph.funcs, plan, lib_path)
    timings["codegen"] = time.perf_counter() - t
    params_path = lib_path + ".params"
    graph.params.tofile(params_path)
    meta = _metadata(graph, cg.host_target(), timings, time.perf_counter() - t_start, ctx)
    runtime.dump_metadata(meta, lib_path + ".json")
    module = runtime.Module(lib_path, meta, params=graph.params, owned_dir=out_dir)
    if num_threads is not None:
        module.num_threads = num_threads
    if verbose:
        _log(f"compiled {len(graph.call_info)} kernel calls ({len(graph.funcs)} unique kernels) in "
             f"{time.perf_counter() - t_start:.1f} s")
    return module


def cg_vector_width() -> int:
    from .codegen import build as cg
    return cg.vector_width("float32")


def _log(msg: str):
    print(f"[relayish] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- planning

def materialize_outputs(fused: Module) -> Module:
    """Every model output must be written by a kernel: an output that is an input or a constant (an identity
    model, a reshape round trip), or a value returned twice, gets a copy kernel."""
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


def extract_calls(fused: Module) -> list[Call]:
    """The primitive-function calls of a fused module, in execution order."""
    calls = [n for n in post_order(fused.main.body) if isinstance(n, Call)]
    for c in calls:
        if not isinstance(c.op, Function):
            raise AssertionError(f"op {c.op} outside a primitive function after fusion")
    return calls


def extract_tasks(fused: Module) -> list[Task]:
    """Unique tasks of a fused module with their weights (number of calls)."""
    tasks: dict[str, Task] = {}
    for c in extract_calls(fused):
        task = build_task(c.op)
        if task.key in tasks:
            tasks[task.key].weight += 1
        else:
            tasks[task.key] = task
    return list(tasks.values())


def choose_schedule(task: Task, records=None, vector_width: int = 16) -> tuple[Schedule, str]:
    """The best recorded schedule for the task on this target, else the default one."""
    from .default_schedule import default_schedule
    from .schedule import ScheduleError
    if records is not None:
        best = records.best(task.key)
        if best is not None:
            try:
                best.apply(task.initial_state())  # a record from an older compiler may not fit any more
                return best, "tuned"
            except ScheduleError:
                pass
    return default_schedule(task.initial_state(), vector_width), "default"


def plan_graph(fused: Module, ctx: PassContext, records=None, log=None) -> CompiledGraph:
    from .codegen.executor import BufferRef
    calls = extract_calls(fused)
    body = fused.main.body
    outputs = list(body.fields) if isinstance(body, Tuple) else [body]
    store = _open_records(records)
    # tasks and kernels
    tasks: dict[str, Task] = {}
    kernel_of: dict[int, str] = {}
    funcs, schedules = [], {}
    for c in calls:
        task = build_task(c.op)
        if task.key not in tasks:
            tasks[task.key] = task
            sched, source = choose_schedule(task, store, ctx.vector_width)
            name = f"{task.name}_{len(funcs)}"
            funcs.append(lower(sched.apply(task.initial_state()), name))
            schedules[task.key] = (sched, source)
        else:
            tasks[task.key].weight += 1
        kernel_of[id(c)] = funcs[[t for t in tasks].index(task.key)].name
    tuned = sum(1 for s, src in schedules.values() if src == "tuned")
    if log is not None or store is not None:
        (log or _log)(f"{len(tasks)} tasks: {tuned} tuned from records, {len(tasks) - tuned} default schedules")
    # params blob
    const_offset: dict[int, int] = {}
    blobs, size = [], 0
    for c in calls:
        for a in c.args:
            if isinstance(a, Constant) and id(a) not in const_offset:
                const_offset[id(a)] = size
                data = np.ascontiguousarray(a.data).view(np.uint8).reshape(-1)
                blobs.append((size, data))
                size = align(size + data.size)
    params = np.zeros(size, dtype=np.uint8)
    for off, data in blobs:
        params[off:off + data.size] = data
    # live ranges of intermediates
    index = {id(c): i for i, c in enumerate(calls)}
    last_use = {id(c): i for i, c in enumerate(calls)}
    for i, c in enumerate(calls):
        for a in c.args:
            if id(a) in last_use:
                last_use[id(a)] = i
    out_index = {}
    for j, o in enumerate(outputs):  # distinct calls: materialize_outputs saw to it
        out_index[id(o)] = j
    params_in = {id(p): i for i, p in enumerate(fused.main.params)}
    planner = WorkspacePlanner()
    value_ref: dict[int, BufferRef] = {}
    plan_calls, call_info = [], []
    func_by_name = {f.name: f for f in funcs}
    for i, c in enumerate(calls):
        refs = []
        for a in c.args:
            if isinstance(a, Var):
                refs.append(BufferRef("input", params_in[id(a)]))
            elif isinstance(a, Constant):
                refs.append(BufferRef("param", 0, const_offset[id(a)]))
            else:
                refs.append(value_ref[id(a)])
        if id(c) in out_index:
            ref = BufferRef("output", out_index[id(c)])
        else:
            ref = BufferRef("workspace", 0, planner.alloc(_nbytes(c.type), i, last_use[id(c)]))
        value_ref[id(c)] = ref
        refs.append(ref)
        func = func_by_name[kernel_of[id(c)]]
        n_fixed = func.attrs["num_inputs"] + func.attrs["num_outputs"]
        for buf in func.params[n_fixed:]:
            refs.append(BufferRef("workspace", 0, planner.alloc(buf.size * 4, i, i)))
        plan_calls.append((func.name, refs))
        task = tasks[build_task_key(c)]
        call_info.append({"name": func.name, "ops": list(task.ops), "output_shape": list(c.type.shape),
                          "layout": _layout_of(c), "flops": int(task.flops)})
    inputs = [(p.name, list(p.type.shape), p.type.dtype) for p in fused.main.params]
    out_specs = [(n, list(o.type.shape), o.type.dtype) for n, o in zip(fused.output_names, outputs)]
    return CompiledGraph(funcs, plan_calls, call_info, params, planner.size, inputs, out_specs,
                         list(tasks.values()), schedules)


def build_task_key(c: Call) -> str:
    from .task import workload_key
    return workload_key(c.op)


def _nbytes(ty) -> int:
    return int(np.prod(ty.shape, dtype=np.int64)) * np.dtype(ty.dtype).itemsize


def _layout_of(c: Call) -> str:
    ty = c.type
    if len(ty.shape) == 5:  # the only 5-D activations are channel-blocked
        return f"NCHW{ty.shape[-1]}c"
    return {4: "NCHW", 2: "NC"}.get(len(ty.shape), f"{len(ty.shape)}-D")


def _open_records(records):
    """None, an object with .best(task_key) (RecordsReader, tuning's RecordStore), or a records DB path."""
    if records is None:
        return None
    if hasattr(records, "best"):
        return records
    from .codegen.build import host_target
    from .records import RecordsReader
    return RecordsReader(str(records), host_target())


def _executor_plan(graph: CompiledGraph):
    from .codegen.executor import ExecutorPlan, KernelCall
    return ExecutorPlan([KernelCall(name, refs) for name, refs in graph.calls])


def _metadata(graph: CompiledGraph, target: dict, timings: dict, total_s: float, ctx: PassContext) -> dict:
    return {
        "format_version": 1,
        "inputs": [{"name": n, "shape": s, "dtype": d} for n, s, d in graph.inputs],
        "outputs": [{"name": n, "shape": s, "dtype": d} for n, s, d in graph.outputs],
        "workspace_bytes": int(graph.workspace_bytes),
        "params_bytes": int(graph.params.size),
        "params_file": "model.so.params",
        "kernels": graph.call_info,
        "target": {"triple": target["triple"], "cpu": target["cpu"], "features": target["features"]},
        "compile_info": {"opt_level": ctx.opt_level, "layout": ctx.layout, "compile_seconds": round(total_s, 3),
                         "timings": {k: round(v, 4) for k, v in timings.items()},
                         "tasks": len(graph.tasks),
                         "tuned_tasks": sum(1 for _, src in graph.schedules.values() if src == "tuned")},
    }

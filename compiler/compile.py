"""compile_model and build: an ONNX model or a relayish IRModule -> a runnable `runtime.Module`.

    graph half: compiler/passes/__init__.py (PIPELINE)        back half: compiler/backend.py (BACKEND)

`build` runs both halves, each step timed into compile_info["timings"], then writes what the library needs
beside it (the params blob, the metadata JSON) and loads it. The fused graph is a straight line of calls of
primitive functions; each unique function is a task with one kernel; the graph executor calls the kernels in
order over a static memory plan: graph inputs and outputs are the caller's buffers, weights live in one params
blob, and intermediates and kernel scratch share one workspace.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
import warnings

import numpy as np

import runtime
from frontends import OnnxImportError, describe_model, from_onnx, load_model
from relayish import Call, IRModule, Tuple

from . import cache as cache_module
from .algorithms import choose_from_records
from .backend import Products, run_backend, stderr_log
from .codegen import host_target, prestart_workers, vector_width
from .index_bounds import input_index_bounds, input_index_ignored
from .options import CompileOptions
from .passes import PassContext, run_pipeline
from .dynamic import ShapeSpecializedSession, restore_session
from .free_dims import has_free_dims
from .specialize import ValueSpecializedSession


def compile_model(model, input_shapes: dict | None = None, layout: str = "NCHWc", opt_level: int = 3,
                  records: str | None = None, num_threads: int | None = None, verbose: bool = False,
                  winograd: bool = True, strict: bool = False, default_schedules: str = "hand-written",
                  cache: bool | None = None, input_values: dict | None = None, *, specialize: str = "auto",
                  options: CompileOptions | None = None):
    """Compile an ONNX model (path, bytes or ModelProto) into a runnable `runtime.Module`.

    The keyword arguments make a compiler.options.CompileOptions (or pass one as `options`, which then replaces
    them all). winograd=False keeps every convolution direct (see compiler/passes/layout.py winograd_tile). A
    symbolic input dim not bound by input_shapes is compiled as 1 with a warning, or refused if strict
    (frontends.from_onnx); a dim given as None, -1 or a range (lo, hi) stays free: compile_model then returns a
    compiler.dynamic.ShapeSpecializedSession, which runs every shape (specialize: "auto", "eager" or "never", see
    there). default_schedules: what a task without a record runs, "hand-written" or, for tuning
    experiments, "naive" (the plain loop nest; see compiler.backend.untuned_schedule).
    cache: look the model up in the compile cache first and store what is compiled (compiler/cache.py); None means
    on unless RELAYISH_CACHE=0. compile_info["cache"] says whether it was a hit.
    input_values: {input name: array}: those graph inputs are compiled as constants of that value (they are no
    longer inputs of the module). A model whose shapes, axes or bounds are computed from graph inputs needs them;
    without them compile_model returns a compiler.specialize.ValueSpecializedSession, which compiles once per
    distinct value on `run`; but a model whose outputs are only sized by data (NonZero, Compress of a value
    computed at run time) returns a session on the generic tier (compiler/dynamic.py), which runs every value."""
    if options is None:
        options = CompileOptions(input_shapes=input_shapes, layout=layout, opt_level=opt_level, records=records,
                                 num_threads=num_threads, verbose=verbose, winograd=winograd, strict=strict,
                                 default_schedules=default_schedules, cache=cache, input_values=input_values,
                                 specialize=specialize)
    return compile_with(model, options)


def load_session(folder: str, model=None, num_threads: int | None = None) -> ShapeSpecializedSession:
    """A session with free dims that ShapeSpecializedSession.export wrote to `folder`, loaded without compiling;
    given `model`, shapes it has no module for (and no generic tier) are compiled from it (compiler/dynamic.py
    restore_session)."""
    return restore_session(folder, model, compile_with, num_threads)


def compile_with(model, options: CompileOptions):
    """compile_model with its options as one object."""
    t0 = time.perf_counter()
    if has_free_dims(options.input_shapes):
        return ShapeSpecializedSession(model, options, compile_with, describe_model(load_model(model)[0]),
                                       options.max_specializations)
    fields = options.cache_fields()
    if options.input_values:
        fields["input_values"] = {k: _value_digest(v) for k, v in options.input_values.items()}
    use_cache = cache_module.enabled_by_default() if options.cache is None else options.cache
    key = _cache_key(model, fields, options.records) if use_cache else None
    module = cache_module.load(key) if key else None
    if module is None:
        prestart_workers()  # the codegen workers start up while the model is imported and the passes run
        try:
            mod = from_onnx(model, input_shapes=options.input_shapes or None, strict=options.strict,
                            input_values=options.input_values or None)
        except OnnxImportError as e:
            if not e.needs_values or options.input_values:
                raise
            described = describe_model(load_model(model)[0])
            if e.data_sized:  # an output sized by data (NonZero): the generic tier's kernels run it at any size
                try:
                    return ShapeSpecializedSession(model, options.replace(specialize="never"), compile_with,
                                                   described, options.max_specializations)
                except ValueError:  # no generic tier: compiled per value, as any value-dependent shape
                    pass
            return ValueSpecializedSession(model, e.needs_values, options, compile_with, described, e)
        module = build(mod, options=options, t_start=t0)
        if key:
            _store(key, module, options.verbose)
    elif options.verbose:
        stderr_log(f"compile cache hit ({cache_module.entry_path(key)}) in {time.perf_counter() - t0:.2f} s")
    if options.num_threads is not None:
        module.num_threads = options.num_threads
    return module


def _value_digest(value) -> str:
    array = np.array(value, order="C")
    return hashlib.sha256(f"{array.dtype.str}{array.shape}".encode() + array.tobytes()).hexdigest()


def _cache_key(model, options: dict, records) -> str | None:
    try:
        return cache_module.cache_key(model, options, records, host_target())
    except OSError:  # an unreadable model or records file: the frontend / backend report it
        return None


def _store(key: str, module, verbose: bool) -> None:
    """Keep the module in the compile cache; a cache that cannot be written only costs the next compile."""
    try:
        cache_module.store(key, module)
        module.meta["compile_info"]["cache"] = {"hit": False, "key": key, "stored": True}
    except OSError as e:
        module.meta["compile_info"]["cache"] = {"hit": False, "key": key, "stored": False}
        warnings.warn(f"relayish: could not write the compile cache in {cache_module.cache_dir()}: {e}",
                      stacklevel=3)


def build(mod: IRModule, layout: str = "NCHWc", opt_level: int = 3, records: str | None = None,
          num_threads: int | None = None, verbose: bool = False, t_start: float | None = None,
          winograd: bool = True, default_schedules: str = "hand-written", *, options: CompileOptions | None = None):
    """Compile a relayish IRModule into a runnable `runtime.Module` (the keyword arguments or `options`, as
    compile_model)."""
    if options is None:
        options = CompileOptions(layout=layout, opt_level=opt_level, records=records, num_threads=num_threads,
                                 verbose=verbose, winograd=winograd, default_schedules=default_schedules)
    records, verbose = options.records, options.verbose
    t_start = time.perf_counter() if t_start is None else t_start
    prestart_workers()
    timings: dict[str, float] = {}
    ctx = PassContext(opt_level=options.opt_level, layout=options.layout.value, vector_width=vector_width(),
                      winograd=options.winograd)
    bounds = input_index_bounds(mod)
    ignored = input_index_ignored(mod)
    ctx = choose_from_records(mod, ctx, records)  # each convolution's algorithm, where the records can tell
    fused = run_pipeline(mod, ctx, timings=timings)
    out_dir = tempfile.mkdtemp(prefix="relayish_")
    lib_path = os.path.join(out_dir, "model.so")
    made = run_backend(fused, ctx.vector_width, records, lib_path, log=stderr_log if verbose else None,
                       timings=timings, default_schedules=options.default_schedules.value)
    made.memory.params.tofile(lib_path + ".params")
    meta = _metadata(made, host_target(), timings, time.perf_counter() - t_start, ctx, bounds)
    for spec in meta["inputs"]:  # a loss's ignore_index, allowed besides index_bounds (compiler/index_bounds.py)
        if spec["name"] in ignored and "index_bounds" in spec:
            spec["index_ignored"] = ignored[spec["name"]]
    if "onnx_model" in mod.attrs:  # declared dims and model metadata, for the session API (runtime/session.py)
        meta["source_model"] = mod.attrs["onnx_model"]
    runtime.dump_metadata(meta, lib_path + ".json")
    module = runtime.Module(lib_path, meta, params=made.memory.params, owned_dir=out_dir)
    if options.num_threads is not None:
        module.num_threads = options.num_threads
    if verbose:
        stderr_log(f"compiled {len(made.task_calls.calls)} kernel calls ({len(made.kernels)} unique kernels) in "
                   f"{time.perf_counter() - t_start:.1f} s")
    return module


def _call_info(made: Products) -> list[dict]:
    """Per kernel call, in order: what the runtime's profile and summaries show, the call's task key and where
    its schedule came from ("tuned" or "default"; tuning's in-model check compares them per task); in_place: a
    concatenation whose inputs were written into its output, so it does not run (compiler/memory.py)."""
    info = []
    for call, t, planned in zip(made.task_calls.calls, made.task_calls.task_of, made.memory.executor.calls):
        task = made.task_calls.tasks[t]
        info.append({"name": made.kernels[t].name, "ops": list(task.ops), "output_shape": list(call.type.shape),
                     "layout": _layout_of(call), "flops": int(task.flops), "task_key": task.key,
                     "schedule": made.schedules[t].source, **({"in_place": True} if planned.elided else {})})
    return info


def _layout_of(c: Call) -> str:
    ty = c.type
    if len(ty.shape) == 5:  # the only 5-D activations are channel-blocked
        return f"NCHW{ty.shape[-1]}c"
    return {4: "NCHW", 2: "NC"}.get(len(ty.shape), f"{len(ty.shape)}-D")


def _io_specs(made: Products, index_bounds: dict) -> tuple[list, list]:
    main = made.fused.main
    outputs = list(main.body.fields) if isinstance(main.body, Tuple) else [main.body]
    inputs = [{"name": p.name, "shape": list(p.type.shape), "dtype": p.type.dtype} for p in main.params]
    for spec in inputs:  # inputs used as indices: the runtime checks their values (compiler/index_bounds.py)
        if spec["name"] in index_bounds:
            spec["index_bounds"] = list(index_bounds[spec["name"]])
    return inputs, [{"name": n, "shape": list(o.type.shape), "dtype": o.type.dtype}
                    for n, o in zip(made.fused.output_names, outputs)]


def _metadata(made: Products, target: dict, timings: dict, total_s: float, ctx: PassContext,
              index_bounds: dict) -> dict:
    inputs, outputs = _io_specs(made, index_bounds)
    return {
        "format_version": 1,
        "inputs": inputs,
        "outputs": outputs,
        "workspace_bytes": int(made.memory.workspace_bytes),
        "params_bytes": int(made.memory.params.size),
        "params_file": "model.so.params",
        "kernels": _call_info(made),
        "target": {"triple": target["triple"], "cpu": target["cpu"], "features": target["features"]},
        "compile_info": {"opt_level": ctx.opt_level, "layout": ctx.layout, "compile_seconds": round(total_s, 3),
                         "timings": {k: round(v, 4) for k, v in timings.items()},
                         "tasks": len(made.task_calls.tasks), "default_schedules": made.default_schedules,
                         "tuned_tasks": sum(1 for c in made.schedules if c.source == "tuned")},
    }

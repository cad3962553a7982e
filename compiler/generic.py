"""The generic tier with run-time extents: one module that runs a model at every size of its free dims.

    module = compile_generic(model, {"x": (1, 3, "h", "w")}, options)   # a str: a free dim, by its symbol
    outputs = module.run(None, {"x": image})                             # any h, w: no compile on the call

Each free dim becomes a size variable (te.size_var). The model is imported over them (shape rules build dims
as canonical expressions, relayish/dims.py), goes through the same graph passes as a static compile (a choice
that depends on a size is made for the typical size, but for a convolution's Winograd tile: each tile's kernel is
built and the call picks one, _algorithm_variants), and each call's task is taken over
its own dims (_own_dims: d0, d1, ... for the run-time dims of its parameters, whatever expressions of the symbols
they are at that call), deduplicated, and scheduled once: the default schedule of the task at a typical size of
each variable (generic_module.HINT_SIZE, inside its range, through the call's expressions), replayed on the task
over the variables (compiler/run_time_schedule.py default_schedule_for_sizes), so that a split of a run-time
extent runs whole tiles and a guarded last tile. The kernels read their sizes from a last int32 parameter
(compiler/lower.py) and are built into one library.

The module (compiler/generic_module.py) binds the variables from a call's inputs' shapes, plans that set of sizes
(every intermediate's shape, the kernels' size arguments, workspace offsets) and calls the kernels in order, both
in generated code (compiler/generic_runner.py). A recurrent layer over a run-time length is a scan
(nn.recurrent_scan): its kernel is one step, the cell, called once per step on the state before it. Tuning records are not used: every task runs its default
schedule. compile_generic ends with a warm-up call at the typical sizes, so the first real call finds the
library's code and threads and a workspace ready.

An output sized by data (NonZero, and Compress through it; TopK's k computed at run time) is a data-sized op
(relayish/ops/data_sized.py): its size variable gets the value its count input has at run time
(generic_module.py), its kernel is written by hand (compiler/sequential.py).

What is not here yet: shape arithmetic the importer cannot evaluate over the sizes (frontends/onnx/shape_values.py),
Unique along an axis of a run-time value, a recurrent layer over a run-time length outside its fused form, pooling
in ceil mode over a free dim, a SAME padding of stride > 1 over one: a model with any of them is refused (GenericUnsupported
says where), and the session compiles per shape (or value) instead.

Invariants: inputs are checked against the symbols before any kernel runs (a dim named in two inputs must agree,
fixed dims must match, the values of an input that indexes a table must be in range, and what the import assumed
of the sizes must hold: every intermediate dim and shape-arithmetic fact >= 1, else SizesOutsideGeneric); every
buffer a kernel writes is allocated at the size the expressions give for this call; the module holds no per-call
state, so concurrent calls are safe.
"""
from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from relayish import te
from relayish.expr import Call, Constant, Function, Tuple, TupleGetItem, Var, post_order
from relayish.types import TensorType, is_static_dim
from runtime.aligned import as_aligned
from runtime.module import TensorSpec

from .arith import evaluate
from .backend import materialize_outputs
from .codegen import build_library, vector_width
from .generic_module import GenericModule, hint_size
from .index_bounds import input_index_bounds, input_index_ignored
from .lower import LoweringError, lower
from .passes import PassContext, run_pipeline
from .run_time_schedule import default_schedule_for_sizes
from .sequential import sequential_kernel
from .passes.layout import conv_signature, winograd_tiles
from .task import extract_task_calls, scan_of

# the algorithms a 3x3 convolution over run-time sizes has kernels for, one chosen per call (Winograd F(m x m, 3 x 3)):
# the largest that leaves WINOGRAD_MIN_TILES tiles, else F(2x2). Not direct, as a static compile of a small map
# would: a direct kernel over run-time extents fits small maps poorly (ResNet-18's last stage over 160x160 images,
# 5x5: 1.4 ms per convolution direct, Zen 4), and F(2x2)'s weights are only 1.8x the direct ones
RUN_TIME_TILES = (4, 2)


class GenericUnsupported(Exception):
    """The model cannot run with run-time extents (yet); the message says where."""


@dataclass
class _Step:
    kernel: str
    args: tuple  # per kernel input: ("input", k) | ("const", k) | ("value", step, field)
    outputs: tuple  # per output: (dims, dtype)
    scratch: tuple  # per scratch buffer: (element count, dtype)
    sizes: tuple  # the values of the kernel's `sizes` parameter, in order, as expressions of the symbols ((): none)
    scan: bool = False  # the kernel is one step of a scan (compiler/task.py scan_step): called once per step
    # a convolution whose algorithm is chosen per call: the step as each algorithm's kernel (the first is this
    # step), the Winograd tile of each (0: direct); chosen by its output's spatial size (generic_module.py)
    choices: tuple = ()
    tiles: tuple = ()


def _step(func, call, own: dict, source, by_name: dict) -> _Step:
    """The step of one kernel call: its arguments' sources, outputs, scratch sizes and size arguments as expressions
    of the symbols (the kernel's own dims are those of its task's first call: matched by name)."""
    n_in, n_out = func.attrs["num_inputs"], func.attrs["num_outputs"]
    types = call.type.fields if hasattr(call.type, "fields") else (call.type,)
    sized = "size_vars" in func.attrs
    at_call = {v.name: e for v, e in (own or {}).items()}  # this call's own dims, as expressions of the symbols

    def at_this_call(e):
        if te.is_static(e) or not at_call:
            return e
        return te.substitute_vars(e, {v: at_call[v.name] for v in te.walk(e)
                                      if isinstance(v, te.Var) and v.name in at_call})
    scratch = tuple((at_this_call(p.size), p.dtype) for p in func.params[n_in + n_out:len(func.params) - sized])
    return _Step(func.name, tuple(source(a) for a in call.args), tuple((t.shape, t.dtype) for t in types), scratch,
                 tuple(at_call.get(s, by_name.get(s)) for s in func.attrs.get("size_vars", ())),
                 scan_of(call.op) is not None)


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
    hints = {var: hint_size((ranges or {}).get(s)) for s, var in symbols.items()}
    input_shapes = {n: tuple(symbols[d] if isinstance(d, str) else d for d in dims) for n, dims in shapes.items()}
    try:
        mod = from_onnx(model, input_shapes=input_shapes, data_sized=True)
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
        tiles, variants = _algorithm_variants(mod, ctx)
    except Exception as e:
        raise GenericUnsupported(f"the graph passes fail over free dims: {_first_line(e)}") from e
    kernels, funcs = {}, []  # task key -> its lowered kernel (each task lowered once, whatever its variants)

    def kernel(found, k):
        task = found.tasks[found.task_of[k]]
        if task.key not in kernels:  # its hints: the typical sizes through the expressions of this call's own dims
            task_hints = {**hints, **{v: max(1, evaluate(e, hints)) for v, e in found.prepared[k].items()}}
            try:
                kernels[task.key] = sequential_kernel(task.func, f"{task.name}_{len(funcs)}") or \
                    _lower_for_sizes(task.initial_state(), task_hints, ctx.vector_width, f"{task.name}_{len(funcs)}")
            except Exception as e:
                raise GenericUnsupported(f"task {task.name} ({', '.join(task.ops)}) has no schedule over free dims: "
                                         f"{_first_line(e)}") from e
            funcs.append(kernels[task.key])
        return kernels[task.key]
    fused, found = variants[0]
    data_dims = _data_dims(found.calls)
    for var, _, bound in data_dims:  # a data-sized dim's kernels are scheduled for its largest value at the hints
        hints[var] = max(1, evaluate(bound, hints))
    chosen = [len({f.tasks[f.task_of[k]].key for _, f in variants}) > 1 for k in range(len(found.calls))]
    made = [[kernel(f, k) for _, f in (variants if chosen[k] else variants[:1])] for k in range(len(found.calls))]
    lib_dir = tempfile.mkdtemp(prefix="relayish_generic_")
    lib_path = build_library(funcs, None, os.path.join(lib_dir, "generic.so"), opt_level=options.opt_level)
    by_name = {v.name: v for v in list(symbols.values()) + [v for v, _, _ in data_dims]}
    consts, const_ids = [], {}

    def sources(fused, calls):
        params = {id(p): k for k, p in enumerate(fused.main.params)}
        where = {id(c): k for k, c in enumerate(calls)}

        def source(a):
            if isinstance(a, Var):
                return ("input", params[id(a)])
            if isinstance(a, Constant):
                if id(a) not in const_ids:
                    const_ids[id(a)] = len(consts)
                    consts.append(as_aligned(np.ascontiguousarray(a.data)))
                return ("const", const_ids[id(a)])
            if isinstance(a, TupleGetItem):
                return ("value", where[id(a.tuple_value)], a.index)
            return ("value", where[id(a)], 0)
        return source
    source_in = [sources(v, f.calls) for v, f in variants]
    steps = []
    for k, c in enumerate(found.calls):
        options_k = [_step(func, f.calls[k], f.prepared[k], source_in[v], by_name)
                     for v, ((_, f), func) in enumerate(zip(variants, made[k]))]
        steps.append(options_k[0] if len(options_k) == 1 else
                     _Step(**{**vars(options_k[0]), "choices": tuple(options_k), "tiles": tiles}))
    calls, source = found.calls, source_in[0]
    body = fused.main.body
    outs = tuple(source(o) for o in (body.fields if isinstance(body, Tuple) else (body,)))
    inputs = [(p.name, p.type.shape, p.type.dtype) for p in fused.main.params]
    if any(not isinstance(d, (int, te.Var)) for _, dims, _ in inputs for d in dims):
        raise GenericUnsupported(f"a graph input's dim is an expression of the free dims: {inputs}")
    if log is not None:
        log(f"generic module: {len(calls)} kernel calls ({len(funcs)} kernels) over "
            f"{sorted(symbols)} in {time.perf_counter() - t0:.1f} s")
    module = GenericModule(lib_path, inputs, list(output_names), steps, outs, consts, time.perf_counter() - t0,
                           checks, ranges, index_specs, data_dims)
    module.warm_up()
    return module


def _data_dims(calls: list) -> list:
    """(size variable, call, its largest value) per data-sized dim: the columns of a nonzero call, at most the
    element count of its input, and the axis of a slice_to_count, at most the input's there past its start; its
    value is the call's second input's (relayish/ops/data_sized.py)."""
    out = []
    for k, c in enumerate(calls):
        body = c.op.body
        if isinstance(body, Call) and body.op == "nonzero":
            out.append((body.attrs["count_dim"], k, math.prod(c.args[0].type.shape or (1,))))
        elif isinstance(body, Call) and body.op == "slice_to_count":
            out.append((body.attrs["count_dim"], k, te.dim(c.args[0].type.shape[body.attrs["axis"]]) -
                        body.attrs["start"]))
    return out


def _algorithm_variants(mod, ctx) -> tuple[tuple, list]:
    """(tiles, [(fused module, its TaskCalls)] per tile): the model through the graph passes once per Winograd
    tile of RUN_TIME_TILES, each forced on every convolution whose algorithm the rule chooses by an output size
    known only at run time (compiler/algorithms.py's sites). The variants differ only in those convolutions'
    calls (checked: else, and for a model with no such site, the one variant of the rule at the typical size,
    tiles ()). Which tile is fastest depends on the size, as passes/layout.py winograd_tile says of a static
    one: ResNet-18's last stage over 96x96 images is 3x3, where F(4x4)'s transformed weights (4x the direct
    ones) cost more than its products save; over 448x448 it is 14x14. Generic ResNet-18 over 96x96 images:
    1.66x onnxruntime's time with F(4x4) everywhere, 1.21x with the tile chosen per call (Zen 4)."""
    sites = sorted({conv_signature(n) for n in post_order(mod.main.body) if isinstance(n, Call) and
                    n.op == "nn.conv2d" and winograd_tiles(n) and not all(te.is_static(d) for d in n.type.shape[2:])})
    if sites and ctx.winograd and ctx.layout == "NCHWc":
        variants = []
        for m in RUN_TIME_TILES:
            forced = dataclasses.replace(ctx, conv_algorithms=ctx.conv_algorithms + tuple((s, m) for s in sites))
            fused = materialize_outputs(run_pipeline(mod, forced))
            variants.append((fused, extract_task_calls(fused, prepare=_own_dims)))
        if _aligned([f for _, f in variants]):
            return RUN_TIME_TILES, variants
    fused = materialize_outputs(run_pipeline(mod, ctx))
    return (), [(fused, extract_task_calls(fused, prepare=_own_dims))]


def _aligned(variants: list) -> bool:
    """Whether the variants' calls correspond one to one: as many, each of one type reading the same graph inputs
    and calls (weights aside), and where their tasks differ, each a convolution's (conv2d_nchwc or
    conv2d_winograd_nchwc) with a blocked 5-D output, whose spatial dims choose among them."""
    wheres = {id(f): {id(c): j for j, c in enumerate(f.calls)} for f in variants}

    def reads(f, k) -> tuple:
        where = wheres[id(f)]
        return tuple(("call", where[id(a.tuple_value)], a.index) if isinstance(a, TupleGetItem) else
                     ("call", where[id(a)]) if id(a) in where else ("const",) if isinstance(a, Constant) else
                     ("input", a.name) for a in f.calls[k].args)
    first = variants[0]
    if any(len(f.calls) != len(first.calls) for f in variants):
        return False
    for k, c in enumerate(first.calls):
        if any(str(f.calls[k].type) != str(c.type) or reads(f, k) != reads(first, k) for f in variants[1:]):
            return False
        if len({f.tasks[f.task_of[k]].key for f in variants}) > 1 and (
                len(getattr(c.type, "shape", ())) != 5 or not all(
                    {"nn.conv2d_nchwc", "nn.conv2d_winograd_nchwc"} & set(f.tasks[f.task_of[k]].ops)
                    for f in variants)):
            return False
    return True


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
    generic_module.SizesOutsideGeneric)."""
    from relayish.expr import post_order
    found = {}
    for node in post_order(mod.main.body):
        ty = getattr(node, "type", None) if isinstance(node, Call) else None
        for t in (getattr(ty, "fields", None) or ((ty,) if ty is not None else ())):
            for d in getattr(t, "shape", ()):
                if isinstance(d, te.PrimExpr) and not isinstance(d, te.Var):
                    found.setdefault(te.expr_str(d), (d, "an intermediate dim of the model"))
    return list(found.values())


def _first_line(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"

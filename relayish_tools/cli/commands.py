"""The model commands of `relayish`: compile, run, verify, inspect and tune (bench: cli/bench.py).

Each subcommand is a pair of functions: `add_<name>_parser(sub)` declares its arguments and `cmd_<name>(args)`
runs it and returns the exit code. Heavy imports (the compiler, onnxruntime, the benchmark tools) happen inside
the commands, so that `relayish --help` is instant.
"""
from __future__ import annotations

import numpy as np

import runtime
from runtime.accuracy import DEFAULT_TOLERANCE, compare_outputs
from runtime.timing import time_repeats

from .common import (EXIT_FAIL, EXIT_OK, CliError, add_compile_options, add_sizes, add_threads, add_winograd,
                     compile_from_args, existing, free_dim_shapes, input_shapes_arg, is_dynamic, load_or_compile,
                     parse_input_shape, positive_int, refuse_sizes)


def add_compile_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile an ONNX model into a library")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-o", "--output", required=True, metavar="LIB",
                   help="library to write (LIB, LIB.json, LIB.params); with free dims, a folder holding the session")
    add_sizes(p, "to compile now, into the session's folder")
    add_compile_options(p)
    add_threads(p)
    p.set_defaults(func=cmd_compile)


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run a compiled library or an ONNX model (compiled first)")
    p.add_argument("path", metavar="LIB|MODEL|DIR",
                   help="a compiled library, an .onnx model, or the folder of a session with free dims")
    p.add_argument("--model", metavar="MODEL", help="with a session's folder: the model to compile the shapes it "
                                                    "holds no module for")
    p.add_argument("-i", "--inputs", metavar="NPZ", help="inputs by name (default: random, seeded)")
    p.add_argument("-o", "--outputs", metavar="NPZ", help="write the outputs here")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--print-time", action="store_true",
                   help="time the model as tvmc does: --repeat measurements, each the mean of --number runs")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="measurements (with --print-time)")
    p.add_argument("--number", type=positive_int, default=1, metavar="M",
                   help="runs averaged into one measurement (with --print-time)")
    p.add_argument("--profile", action="store_true", help="print the per-kernel profile (median of 20 runs)")
    add_compile_options(p)
    add_threads(p)
    p.set_defaults(func=cmd_run)


def add_verify_parser(sub) -> None:
    p = sub.add_parser("verify", help="compile, then compare with onnxruntime on the same random inputs")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="max |ours-ort| / max |ort| to pass")
    add_compile_options(p)
    add_threads(p)
    p.set_defaults(func=cmd_verify)


def add_inspect_parser(sub) -> None:
    p = sub.add_parser("inspect", help="print the model's graph and a summary after import or after a compiler pass")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--after", metavar="PASS",
                   help="stop after this pass of the pipeline ('import': before any; default: after all of them)")
    p.add_argument("--input-shape", dest="input_shapes", action="append", type=parse_input_shape,
                   metavar="NAME=DIMS", help="fix an input's shape (repeatable)")
    p.add_argument("--layout", choices=["NCHW", "NCHWc"], default="NCHWc", help="data layout of convolutions")
    p.add_argument("--opt-level", type=int, default=3, choices=range(4), help="graph optimisation level")
    p.add_argument("--summary-only", action="store_true", help="print the summary without the graph")
    add_winograd(p)
    p.set_defaults(func=cmd_inspect)


def add_tune_parser(sub) -> None:
    p = sub.add_parser("tune", help="tune every task of one or more models; measurements go to a records DB")
    p.add_argument("models", nargs="+", metavar="MODEL", help="ONNX model(s), tuned together")
    p.add_argument("--records", required=True, metavar="DB", help="SQLite records database (created/resumed)")
    p.add_argument("--trials", type=positive_int, help="stop after this many measured programs")
    p.add_argument("--time-budget", type=float, metavar="S", help="stop after this many seconds")
    p.add_argument("--early-stopping", type=positive_int, metavar="N",
                   help="stop tuning a task after N measured programs without improvement")
    p.add_argument("--tasks", metavar="PATTERN", help="tune only these tasks: 'all', indices and ranges "
                   "('0,3-5') or globs over task names ('fused_conv2d*'), comma-separated")
    p.add_argument("--cost-model", default="pretrained", metavar="pretrained|cold|FILE",
                   help="what the search's cost model starts from: the one shipped with the package (if any), "
                   "an empty one, or a file of python -m relayish_tools.bench.pretrain train")
    p.add_argument("--number", type=positive_int, default=3, help="kernel calls averaged into one reading")
    p.add_argument("--repeat", type=positive_int, default=3, help="readings per candidate (the least is kept)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="limit of each build and each run")
    p.add_argument("--no-cache-flush", action="store_true",
                   help="time back-to-back calls with warm caches instead of each call after a cache flush")
    # compiler.DefaultSchedules' values (not imported here: the CLI starts without loading the compiler)
    p.add_argument("--start", choices=["hand-written", "naive"], default="hand-written",
                   help="what each task starts from: the default schedules, or the naive loop nest (experiments; "
                   "compile with the same choice)")
    p.add_argument("--no-model-check", action="store_true",
                   help="skip timing the model untuned and tuned at the end (and the per-task verdicts)")
    p.add_argument("--algorithms", action="store_true",
                   help="also tune the other algorithms of each 3x3 convolution (direct, Winograd F(2x2), F(4x4)) "
                   "and the other channel blocks (half and twice a vector), and let the records choose among them")
    dask = p.add_mutually_exclusive_group()
    dask.add_argument("--dask", metavar="ADDRESS", help="measure on the dask.distributed scheduler at ADDRESS")
    dask.add_argument("--dask-local", type=positive_int, metavar="N",
                      help="measure on a local Dask cluster of N worker processes")
    p.add_argument("--curve", metavar="PNG", help="write the tuning curve (needs matplotlib)")
    p.add_argument("--input-shape", dest="input_shapes", action="append", default=[], metavar="NAME=D0,D1,...")
    p.add_argument("--layout", choices=["NCHWc", "NCHW"], default="NCHWc")
    add_winograd(p)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_tune)


# ---- helpers ---------------------------------------------------------------------------------------------------
def read_inputs(path: str | None, module, seed: int) -> dict:
    if path is None:
        if is_dynamic(module):
            raise CliError(f"the model has free dims {sorted(module.free_dims)}: give inputs of the sizes to run "
                           "with -i NPZ")
        return module.random_inputs(seed)
    existing(path, "inputs file")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (ValueError, OSError) as e:
        raise CliError(f"cannot read inputs file {path}: {e}") from None


def free_input_shapes(model_path: str, inputs: dict) -> list:
    """(name, shape) of every given input whose declared shape is not fully fixed (a dim_param or unnamed dim):
    what --input-shape would say to compile the model for these inputs."""
    from frontends import describe_model, load_model
    try:
        declared = describe_model(load_model(existing(model_path, "model file"))[0])["input_dims"]
    except ValueError as e:
        raise CliError(str(e)) from None
    return [(name, tuple(np.shape(inputs[name]))) for name, dims in declared.items()
            if name in inputs and (dims is None or not all(isinstance(d, int) for d in dims))]


def describe(name: str, array: np.ndarray) -> str:
    stats = ""
    if array.size:
        a = array.astype(np.float64)
        stats = f"  min {a.min():.6g}  max {a.max():.6g}  mean {a.mean():.6g}  std {a.std():.6g}"
    return f"{name}: shape {tuple(array.shape)} {array.dtype}{stats}"


def format_errors(errors: dict) -> list[str]:
    lines = [f"{'output':<24} {'shape':<20} {'max_abs_err':>12} {'max_rel_err':>12}  result"]
    for name, e in errors.items():
        shape = str(tuple(e["shape"])) if e["shape"] is not None else "missing"
        if e["shape"] is not None and tuple(e["shape"]) != tuple(e["ref_shape"]):
            shape += f" vs {tuple(e['ref_shape'])}"
        lines.append(f"{name:<24} {shape:<20} {e['max_abs']:>12.3e} {e['max_rel']:>12.3e}  "
                     f"{'PASS' if e['passed'] else 'FAIL'}")
    return lines


# ---- commands: each returns an exit code -----------------------------------------------------------------------
def cmd_compile(args) -> int:
    module = compile_from_args(args, args.model)
    if is_dynamic(module):
        from compiler.dynamic import describe_generic_tier
        for shapes in free_dim_shapes(module, args.sizes) if args.sizes else ():
            module.specialization(shapes)  # compiled now, exported below
        folder = module.export(args.output)
        tier = module.generic_tier or {}
        print(f"wrote {folder}: a session with free dims "
              + ", ".join(f"{k} ({v})" for k, v in module.free_dims.items())
              + f"; generic tier: {describe_generic_tier(tier)}"
              + f"; {len(module.specializations())} module(s) kept (relayish run {folder} -i NPZ"
              + ("" if "batch" in tier else f" [--model {args.model}: "
                 + ("the generic tier is rebuilt from it" if tier.get("kind") else "other shapes compile from it")
                 + "]") + ")")
        return EXIT_OK
    refuse_sizes(args)
    path = module.export_library(args.output)
    print(f"wrote {path} (+ .json, .params): {len(module.kernels)} kernels, inputs {module.input_shapes}, "
          f"outputs {module.output_shapes}")
    return EXIT_OK


def cmd_run(args) -> int:
    given = read_inputs(args.inputs, None, args.seed) if args.inputs else None
    if given is not None and args.path.lower().endswith(".onnx") and not args.input_shapes:
        args.input_shapes = free_input_shapes(args.path, given)  # the model's free dims take the file's sizes
    module = load_or_compile(args)
    inputs = given if given is not None else read_inputs(None, module, args.seed)
    outputs = module.run(None, inputs)
    names = [o.name for o in module.get_outputs()]
    for name, array in zip(names, outputs):
        print(describe(name, array))
    if args.outputs:
        np.savez(args.outputs, **dict(zip(names, outputs)))
        print(f"wrote {args.outputs}")
    if args.print_time:
        means = time_repeats(lambda: module.run(None, inputs), args.repeat, args.number)
        print(format_execution_time(means, args.repeat, args.number))
    if args.profile:
        if is_dynamic(module):
            module = module.specialization({k: np.shape(v) for k, v in inputs.items()})
        print(runtime.format_profile(module.profile(repeat=20, inputs=inputs)))
    return EXIT_OK


def format_execution_time(means_s: list[float], repeat: int, number: int) -> str:
    """tvmc's 'Execution time summary' over the per-repeat means."""
    ms = np.asarray(means_s) * 1e3
    values = (ms.mean(), np.median(ms), ms.max(), ms.min(), ms.std())
    header = "".join(f"{h:>14}" for h in ("mean (ms)", "median (ms)", "max (ms)", "min (ms)", "std (ms)"))
    return (f"Execution time summary ({repeat} measurement(s), each the mean of {number} run(s)):\n{header}\n"
            + "".join(f"{v:>14.4f}" for v in values))


def cmd_verify(args) -> int:
    from relayish_tools.bench.compare import make_ort_session, run_onnxruntime

    module = compile_from_args(args, args.model)
    if is_dynamic(module):
        raise CliError(f"verify checks one shape, and the model's dims {sorted(module.free_dims)} are free: give "
                       "them sizes with --input-shape (relayish bench --sizes checks free dims size by size)")
    inputs = module.random_inputs(args.seed)
    ours = dict(zip(module.output_names, module.run(None, inputs)))
    ref = run_onnxruntime(make_ort_session(args.model, module.num_threads), inputs)
    errors = compare_outputs(ours, ref, args.tolerance)
    print("\n".join(format_errors(errors)))
    passed = all(e["passed"] for e in errors.values())
    print(f"{'PASS' if passed else 'FAIL'} (tolerance {args.tolerance:g} on max|ours-ort| / max|ort|)")
    return EXIT_OK if passed else EXIT_FAIL


def cmd_inspect(args) -> int:
    from compiler.summary import format_summary, run_until, summarize
    from frontends import from_onnx

    mod = from_onnx(existing(args.model, "model file"), input_shapes_arg(args.input_shapes))
    mod, seconds = run_until(mod, args.after, layout=args.layout, opt_level=args.opt_level,
                             winograd=args.winograd)
    if not args.summary_only:
        print(mod.astext())
        print()
    stage = "as imported" if args.after == "import" else f"after {args.after or 'the whole pipeline'}"
    print(f"summary ({stage}, layout {args.layout}, opt level {args.opt_level}):")
    print(format_summary(summarize(mod, seconds)))
    return EXIT_OK


def cmd_tune(args) -> int:
    if args.trials is None and args.time_budget is None:
        raise CliError("tune needs --trials N or --time-budget S")
    if not args.timeout > 0:
        raise CliError(f"--timeout must be > 0, got {args.timeout}")
    for m in args.models:
        existing(m, "model")
    from tuning.tune import TaskFilterError, tune_model
    params = {"seed": args.seed, "num_measure_number": args.number, "num_measure_repeat": args.repeat,
              "timeout_s": args.timeout, "cache_flush": not args.no_cache_flush}
    client = dask_client(args)
    try:
        tune_model(args.models if len(args.models) > 1 else args.models[0], records=args.records,
                   trials=args.trials, time_budget_s=args.time_budget, input_shapes=input_shapes_arg(args.input_shapes),
                   layout=args.layout, params=params, curve_png=args.curve, winograd=args.winograd, start=args.start,
                   check_model=not args.no_model_check, executor=client, tasks=args.tasks,
                   early_stopping=args.early_stopping, algorithms=args.algorithms, cost_model=args.cost_model)
    except TaskFilterError as e:
        raise CliError(str(e)) from None
    finally:
        if client is not None:
            from tuning.dask_measure import close_client
            close_client(client)
    return EXIT_OK


def dask_client(args):
    """The Dask client --dask / --dask-local ask for, or None (measure on this machine's worker processes)."""
    if args.dask is None and args.dask_local is None:
        return None
    from tuning.dask_measure import connect_client, local_cluster_client
    try:
        return connect_client(args.dask) if args.dask else local_cluster_client(args.dask_local)
    except RuntimeError as e:
        raise CliError(str(e)) from None

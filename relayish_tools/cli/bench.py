"""`relayish bench MODEL`: ours and onnxruntime side by side in one process (bench/compare.py), with the text
report, optionally the per-kernel profile, a JSON report (bench/report.py) and a plot (bench/plot.py); or, with
--compare-layouts, four builds of the model against onnxruntime (bench/layout_bench.py)."""
from __future__ import annotations

import os

import runtime
from runtime.timing import BLOCK_RUNS, TIMING_MODES

from .common import (EXIT_FAIL, EXIT_OK, CliError, add_compile_options, add_sizes, add_threads, compile_from_args,
                     existing, free_dim_shapes, input_shapes_arg, is_dynamic, positive_int, refuse_sizes)

PROFILE_RUNS = 20  # profiled runs whose per-kernel medians make the profile


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="compile, then time ours and onnxruntime in turn in one process")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--repeat", type=positive_int, default=50, help="timed runs of each engine")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs of each engine first")
    p.add_argument("--timing", choices=TIMING_MODES,
                   help="steady: blocks of consecutive runs per engine, alternating block by block with an idle gap "
                        "(default); strict: alternating single runs, an idle gap before each")
    p.add_argument("--block", type=positive_int, default=BLOCK_RUNS, metavar="N",
                   help=f"timed runs per block in the steady mode (default {BLOCK_RUNS})")
    p.add_argument("--profile", action="store_true", help="also print our per-kernel profile")
    p.add_argument("--json", metavar="FILE", help="write a machine-readable report (timings, percentiles, ratio, "
                                                   "accuracy, machine, versions)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the per-kernel profile and the engines side by side "
                                                       "(needs matplotlib: pip install -e '.[plot]')")
    p.add_argument("--measure-peak", action="store_true",
                   help="measure the machine's fp32 FMA peak first (a few seconds): kernels get a %% of peak")
    p.add_argument("--compare-layouts", action="store_true",
                   help="time fused NCHWc, fused NCHW, unfused NCHW (opt level 0) and onnxruntime in rotation "
                        "(ignores --layout and --opt-level)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    add_sizes(p, "to bench at, in turn, each new to the session")
    add_compile_options(p)
    add_threads(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    if args.warmup < 0:
        raise CliError(f"--warmup must be >= 0, got {args.warmup}")
    if args.compare_layouts:
        if args.json or args.plot or args.timing not in (None, "strict"):
            raise CliError("--compare-layouts times in strict rotation and writes no --json or --plot")
        return bench_layouts(args)
    args.timing = args.timing or TIMING_MODES[0]
    if args.plot:
        from relayish_tools.bench.plot import PlotUnavailable, require_matplotlib
        try:
            require_matplotlib()  # before compiling: fail in a second, not after the benchmark
        except PlotUnavailable as e:
            raise CliError(str(e)) from None
    from relayish_tools.bench.compare import compare_with_onnxruntime, format_comparison

    module = compile_from_args(args, args.model)
    threads = args.threads or runtime.default_num_threads()
    if is_dynamic(module):
        if args.json or args.plot or args.profile:
            raise CliError("with free dims, bench prints a table per size: --json, --plot and --profile need one "
                           "shape (give every dim a size with --input-shape)")
        return bench_free_dims(args, module, threads)
    refuse_sizes(args)
    inputs = module.random_inputs(args.seed)
    peak = measure_peak(threads) if args.measure_peak else None
    result = compare_with_onnxruntime(module, args.model, inputs, threads=threads, repeat=args.repeat,
                                      warmup=args.warmup, timing=args.timing, block=args.block)
    print(format_comparison(result))
    rows = None
    if args.profile or args.plot or args.json:
        rows = module.profile(repeat=min(args.repeat, PROFILE_RUNS), inputs=inputs)
    if args.profile:
        print()
        print(runtime.format_profile(rows))
    if args.json:
        write_json(args, module, result, rows, peak)
    if args.plot:
        from relayish_tools.bench.plot import plot_bench
        engines = {"relayish": result["ours"], "onnxruntime": result["onnxruntime"]}
        title = f"{os.path.basename(args.model)}: {threads} thread(s), {args.timing} timing, {args.repeat} runs"
        print(f"wrote {plot_bench(args.plot, rows, engines, title, peak)}")
    return EXIT_OK


def bench_free_dims(args, session, threads: int) -> int:
    """bench of a session with free dims: per shape of --sizes, the first call (a shape the session has not seen),
    then the module that serves it once its background compile is in, timed beside onnxruntime; then the
    session's modules (sess.specializations())."""
    import time

    import numpy as np

    from compiler.dynamic import describe_generic_tier
    from relayish_tools.bench.compare import compare_with_onnxruntime
    from runtime.session import ORT_TYPES

    shapes = free_dim_shapes(session, args.sizes)
    dtypes = {v: k for k, v in ORT_TYPES.items()}
    print("free dims: " + ", ".join(f"{k} ({v})" for k, v in session.free_dims.items()) + "; generic tier: "
          + describe_generic_tier(session.generic_tier))
    print(f"{'input shapes':<36} {'first call ms':>13} {'steady ms':>10} {'onnxruntime ms':>15} {'ratio':>7}  "
          "max rel error")
    wrong = False
    for k, shape in enumerate(shapes):
        rng = np.random.default_rng(args.seed + k)
        feed = {}
        for arg in session.get_inputs():
            dtype = np.dtype(dtypes.get(arg.type, "float32"))
            feed[arg.name] = rng.standard_normal(shape[arg.name]).astype(dtype) if dtype.kind == "f" else \
                rng.integers(0, 2, shape[arg.name]).astype(dtype)
        t = time.perf_counter()
        session.run(None, feed)
        first_ms = (time.perf_counter() - t) * 1e3
        session.wait_for_specializations()
        module = session.specialization({name: a.shape for name, a in feed.items()})
        r = compare_with_onnxruntime(module, args.model, feed, threads=threads, repeat=args.repeat,
                                     warmup=args.warmup, timing=args.timing, block=args.block)
        error = max(e["max_rel"] for e in r["outputs"].values())
        agree = all(e["passed"] for e in r["outputs"].values())
        wrong |= not agree
        ours, theirs = r["ours"]["median_ms"], r["onnxruntime"]["median_ms"]
        text = "; ".join(f"{name} {list(s)}" for name, s in shape.items())
        print(f"{text:<36} {first_ms:>13.1f} {ours:>10.3f} {theirs:>15.3f} {ours / theirs:>7.2f}  {error:.1e}"
              + ("" if agree else "  DISAGREES"))
    print("modules kept (least recently used first):")
    for s in session.specializations():
        state = "pending" if s.get("pending") else f"failed: {s['failed']}" if "failed" in s else \
            f"compiled in {s['compile_s']:.1f} s{' in the background' if s['background'] else ''}, {s['runs']} runs"
        print(f"  {s['symbols']}: {state}")
    return EXIT_FAIL if wrong else EXIT_OK


def measure_peak(threads: int) -> float:
    from relayish_tools.bench.peak import measure_peak as measure

    gflops = measure(threads)
    print(f"fp32 FMA peak on {threads} thread(s): {gflops:.1f} GFLOP/s")
    return gflops


def write_json(args, module, result: dict, rows, peak) -> None:
    from relayish_tools.bench.report import bench_report, command_line, write_report

    configuration = {"layout": args.layout, "opt_level": args.opt_level, "winograd": args.winograd,
                     "records": args.records, "seed": args.seed}
    options = {k: v for k, v in vars(args).items() if k not in ("func", "argv")}
    report = bench_report(result, module, args.model, configuration, options=options, peak_gflops=peak,
                          profile=rows, command=command_line("relayish", args.argv) if hasattr(args, "argv") else None)
    write_report(report, args.json)
    print(f"wrote {args.json}")


def bench_layouts(args) -> int:
    """bench --compare-layouts: every variant of bench.layout_bench.VARIANTS and onnxruntime, one process."""
    from relayish_tools.bench.layout_bench import MIN_REPEAT, compare_layouts, compile_variants, format_layout_comparison

    if args.repeat < MIN_REPEAT:
        raise CliError(f"--compare-layouts needs --repeat >= {MIN_REPEAT}, got {args.repeat}")
    existing(args.model, "model file")
    modules = compile_variants(args.model, input_shapes_arg(args.input_shapes), records=args.records)
    result = compare_layouts(args.model, threads=args.threads, repeat=args.repeat, warmup=args.warmup,
                             seed=args.seed, modules=modules)
    print(format_layout_comparison(result))
    if args.profile:
        inputs = next(iter(modules.values())).random_inputs(args.seed)
        for name, module in modules.items():
            print(f"\n{name}:")
            print(runtime.format_profile(module.profile(repeat=min(args.repeat, PROFILE_RUNS), inputs=inputs)))
    wrong = [r["name"] for r in result["engines"]
             if r["outputs"] is not None and not all(e["passed"] for e in r["outputs"].values())]
    if wrong:
        print(f"FAIL: outputs of {', '.join(wrong)} disagree with onnxruntime")
    return EXIT_FAIL if wrong else EXIT_OK

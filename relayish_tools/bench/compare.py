"""Our compiled module against onnxruntime: same process, same inputs, same thread count, taking turns.

    relayish bench MODEL            # the command line over compare_with_onnxruntime and format_comparison

The engines are timed in steady state (blocks of consecutive runs, engines alternating block by block with an idle
gap; runtime.timing.time_blocks) or, with timing="strict", in strict rotation with an idle gap before each run
(runtime.timing.time_alternating); runtime/timing.py says why and what each measures. bench/layout_bench.py times
four builds of a model in strict rotation. Outputs are judged with runtime.accuracy (max|ours - ort| / max|ort|
<= 1e-4); bench/report.py turns a result into the JSON report.
"""
from __future__ import annotations

from runtime import Module, default_num_threads
from runtime.accuracy import DEFAULT_TOLERANCE, compare_outputs
from runtime.timing import BLOCK_RUNS, IDLE_GAP_S, TIMING_MODES, describe_timing, paired_ratio, time_engines


def make_ort_session(onnx_path, threads: int):
    """An onnxruntime CPU session that uses `threads` threads for one op and runs ops one at a time. onnx_path: a
    model file, or a serialized model (bytes)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        model = onnx_path if isinstance(onnx_path, bytes) else str(onnx_path)
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own RuntimeError subclasses; the cause is the model file
        where = "the given model" if isinstance(onnx_path, bytes) else onnx_path
        raise ValueError(f"onnxruntime cannot load {where}: {str(e).splitlines()[0] if str(e) else e!r}") from e


def ort_feed(session, inputs: dict) -> dict:
    """The subset of `inputs` the session takes; a missing one is a ValueError naming it."""
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise ValueError(f"onnxruntime needs input(s) {', '.join(map(repr, missing))} that the inputs lack "
                         f"(given: {', '.join(map(repr, inputs))})")
    return {n: inputs[n] for n in names}


def run_onnxruntime(session, inputs: dict) -> dict:
    """{output name: array} of one onnxruntime run on the inputs it takes."""
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, ort_feed(session, inputs))))


def compare_with_onnxruntime(module: Module, onnx_path: str, inputs: dict | None = None, threads: int | None = None,
                             repeat: int = 50, warmup: int = 5, tolerance: float = DEFAULT_TOLERANCE,
                             idle_gap_s: float = IDLE_GAP_S, timing: str = TIMING_MODES[0],
                             block: int = BLOCK_RUNS, extra_engines=()) -> dict:
    """Time `module` and onnxruntime on `onnx_path` taking turns; check they agree.

    inputs: a feed for `module` (default: module.random_inputs(seed=0)); threads: both engines' thread count
    (default: all cores; sets module.num_threads). timing: "steady" (blocks of `block` runs) or "strict"
    (runtime.timing.time_engines); the process sleeps idle_gap_s before each turn. Returns {"threads", "repeat",
    "warmup", "timing", "block", "idle_gap_s", "tolerance", "ours": stats, "onnxruntime": stats, "ratio": ours
    median / ort median (< 1: we are faster), "paired": {engine: runtime.timing.paired_ratio against onnxruntime,
    round by round}, "outputs": compare_outputs(...)}, where stats are
    runtime.timing.latency_stats dicts (median, mean, min, max, std, P50/P90/P95/P99). extra_engines: (name,
    run(inputs)) pairs timed in the same rotation (bench/suite.py's OpenVINO), their stats under their names.
    """
    if repeat < 1 or warmup < 0:
        raise ValueError(f"compare_with_onnxruntime needs repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
    threads = default_num_threads() if threads is None else threads
    module.num_threads = threads
    inputs = module.random_inputs(seed=0) if inputs is None else inputs
    session = make_ort_session(onnx_path, threads)
    feed = ort_feed(session, inputs)
    ort_names = [o.name for o in session.get_outputs()]

    def ours():
        return module.run(None, inputs)

    def theirs():
        return session.run(ort_names, feed)

    outputs = compare_outputs(dict(zip(module.output_names, ours())), dict(zip(ort_names, theirs())), tolerance)
    engines = [("ours", ours), ("onnxruntime", theirs)]
    engines += [(name, lambda run=run: run(inputs)) for name, run in extra_engines]
    stats = time_engines(engines, timing, repeat, warmup, idle_gap_s, block)
    ours_stats, ort_stats = stats["ours"], stats["onnxruntime"]
    return {**stats, "threads": threads, "repeat": repeat, "warmup": warmup, "timing": timing, "block": block,
            "idle_gap_s": idle_gap_s, "tolerance": tolerance, "ours": ours_stats, "onnxruntime": ort_stats,
            "ratio": ours_stats["median_ms"] / ort_stats["median_ms"],
            "paired": {name: paired_ratio(stats[name], ort_stats) for name in stats if name != "onnxruntime"},
            "outputs": outputs}


COLUMNS = ("median_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms", "std_ms")  # median = P50


def format_comparison(result: dict) -> str:
    """A short human-readable report of a compare_with_onnxruntime result."""
    lines = [f"threads {result['threads']}, same inputs; "
             + describe_timing(result["timing"], result["repeat"], result["warmup"], result["block"]),
             f"{'engine':<12} " + " ".join(f"{c:>9}" for c in COLUMNS)]
    for label, key in (("relayish", "ours"), ("onnxruntime", "onnxruntime")):
        s = result[key]
        lines.append(f"{label:<12} " + " ".join(f"{s[c]:>9.3f}" for c in COLUMNS))
    ratio = result["ratio"]
    verdict = "relayish faster" if ratio < 1 else "onnxruntime faster" if ratio > 1 else "equal"
    lines.append(f"ratio relayish/onnxruntime: {ratio:.3f} ({verdict})")
    if "paired" in result:
        p = result["paired"]["ours"]
        lines.append(f"paired by round: median {p['ratio']:.3f}, 90% interval {p['low']:.3f}-{p['high']:.3f} over "
                     f"{p['rounds']} rounds (each round's relayish / onnxruntime, timed back to back)")
    worst = max((e["max_rel"] for e in result["outputs"].values()), default=0.0)
    agree = all(e["passed"] for e in result["outputs"].values())
    lines.append(f"outputs {'agree' if agree else 'DISAGREE'} with onnxruntime: max relative error {worst:.2e}")
    return "\n".join(lines)

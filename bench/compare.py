"""Our compiled module against onnxruntime: same process, same inputs, same thread count, alternating runs.

    relayish bench MODEL            # the command line over compare_with_onnxruntime and format_comparison

The engines are timed in strict rotation with an idle gap before each run (runtime.timing.time_alternating, which
says why); bench/layout_bench.py does the same for four builds of a model. Outputs are judged with
runtime.accuracy (max|ours - ort| / max|ort| <= 1e-4).
"""
from __future__ import annotations

from runtime import Module, default_num_threads
from runtime.accuracy import DEFAULT_TOLERANCE, compare_outputs
from runtime.timing import IDLE_GAP_S, time_alternating


def make_ort_session(onnx_path: str, threads: int):
    """An onnxruntime CPU session that uses `threads` threads for one op and runs ops one at a time."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own RuntimeError subclasses; the cause is the model file
        raise ValueError(f"onnxruntime cannot load {onnx_path}: {str(e).splitlines()[0] if str(e) else e!r}") from e


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
                             idle_gap_s: float = IDLE_GAP_S) -> dict:
    """Time `module` and onnxruntime on `onnx_path` in strict alternation; check they agree.

    inputs: a feed for `module` (default: module.random_inputs(seed=0)); threads: both engines' thread count
    (default: all cores; sets module.num_threads). Before each timed run the process sleeps idle_gap_s
    (runtime.timing.time_alternating says why). Returns {"threads", "repeat", "warmup", "ours": stats,
    "onnxruntime": stats, "ratio": ours median / ort median (< 1: we are faster), "outputs": compare_outputs(...)},
    where stats are runtime.summarize_times dicts.
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
    stats = time_alternating([("ours", ours), ("onnxruntime", theirs)], repeat, warmup, idle_gap_s)
    ours_stats, ort_stats = stats["ours"], stats["onnxruntime"]
    return {"threads": threads, "repeat": repeat, "warmup": warmup, "ours": ours_stats, "onnxruntime": ort_stats,
            "ratio": ours_stats["median_ms"] / ort_stats["median_ms"], "outputs": outputs}


def format_comparison(result: dict) -> str:
    """A short human-readable report of a compare_with_onnxruntime result."""
    lines = [f"threads {result['threads']}, {result['repeat']} alternating runs after {result['warmup']} warm-up "
             f"runs each, same inputs",
             f"{'engine':<12} {'median_ms':>10} {'min_ms':>10} {'max_ms':>10}"]
    for label, key in (("relayish", "ours"), ("onnxruntime", "onnxruntime")):
        s = result[key]
        lines.append(f"{label:<12} {s['median_ms']:>10.3f} {s['min_ms']:>10.3f} {s['max_ms']:>10.3f}")
    ratio = result["ratio"]
    verdict = "relayish faster" if ratio < 1 else "onnxruntime faster" if ratio > 1 else "equal"
    lines.append(f"ratio relayish/onnxruntime: {ratio:.3f} ({verdict})")
    worst = max((e["max_rel"] for e in result["outputs"].values()), default=0.0)
    agree = all(e["passed"] for e in result["outputs"].values())
    lines.append(f"outputs {'agree' if agree else 'DISAGREE'} with onnxruntime: max relative error {worst:.2e}")
    return "\n".join(lines)

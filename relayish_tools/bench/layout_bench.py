"""What fusion, the blocked layout and Winograd buy: one model compiled four ways, timed against onnxruntime in ONE
process.

    relayish bench MODEL --compare-layouts

Variants (VARIANTS): fused + NCHW{c}c (the default build), the same with every convolution direct (no Winograd),
fused NCHW, and unfused NCHW (opt_level 0: one kernel per op, the model's own layout). All of them and onnxruntime
run on the same inputs with the same thread count, in strict rotation with an idle gap before each timed run
(runtime.timing.time_alternating), so that machine drift and spinning thread pools fall evenly on every engine.
Every variant's outputs are checked against onnxruntime's.
"""
from __future__ import annotations

from dataclasses import dataclass

import compiler
from runtime import default_num_threads
from runtime.accuracy import DEFAULT_TOLERANCE, compare_outputs
from runtime.timing import IDLE_GAP_S, time_alternating

from .compare import make_ort_session, ort_feed

ORT = "onnxruntime"


@dataclass(frozen=True)
class Variant:
    name: str
    layout: str
    opt_level: int
    winograd: bool = True


VARIANTS = (
    Variant("fused NCHWc", "NCHWc", 3),
    Variant("fused NCHWc direct", "NCHWc", 3, winograd=False),
    Variant("fused NCHW", "NCHW", 3),
    Variant("unfused NCHW", "NCHW", 0),
)

MIN_REPEAT = 20  # medians of fewer runs are too noisy on a shared 2-core machine


def compile_variants(model_path: str, input_shapes: dict | None = None, variants=VARIANTS,
                     records: str | None = None) -> dict:
    """{variant name: runtime.Module} for each variant of the model."""
    return {v.name: compiler.compile_model(model_path, input_shapes=input_shapes, layout=v.layout,
                                           opt_level=v.opt_level, records=records, winograd=v.winograd)
            for v in variants}


def compare_layouts(model_path: str, input_shapes: dict | None = None, threads: int | None = None,
                    repeat: int = 30, warmup: int = 5, seed: int = 0, variants=VARIANTS,
                    modules: dict | None = None, records: str | None = None, idle_gap_s: float = IDLE_GAP_S,
                    tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """Compile (unless `modules` gives {variant name: Module}) and time every variant and onnxruntime.

    Returns {"threads", "repeat", "warmup", "engines": [row, ...]} with one row per variant then onnxruntime:
    {"name", "layout", "opt_level", "kernels", "stats" (runtime.summarize_times), "ratio" (median / onnxruntime's
    median; < 1 is faster than onnxruntime), "outputs" (runtime.accuracy.compare_outputs against onnxruntime, None for
    onnxruntime itself)}."""
    if repeat < MIN_REPEAT:
        raise ValueError(f"compare_layouts needs repeat >= {MIN_REPEAT} for a meaningful median, got {repeat}")
    threads = default_num_threads() if threads is None else threads
    if modules is None:
        modules = compile_variants(model_path, input_shapes, variants, records)
    first = modules[variants[0].name]
    inputs = first.random_inputs(seed)
    session = make_ort_session(model_path, threads)
    feed = ort_feed(session, inputs)
    ort_names = [o.name for o in session.get_outputs()]
    reference = dict(zip(ort_names, session.run(ort_names, feed)))

    engines, rows = [], []
    for v in variants:
        module = modules[v.name]
        module.num_threads = threads
        ours = dict(zip(module.output_names, module.run(None, inputs)))
        rows.append({"name": v.name, "layout": v.layout, "opt_level": v.opt_level, "kernels": len(module.kernels),
                     "outputs": compare_outputs(ours, reference, tolerance)})
        engines.append((v.name, _runner(module, inputs)))
    engines.append((ORT, lambda: session.run(ort_names, feed)))
    rows.append({"name": ORT, "layout": "-", "opt_level": None, "kernels": None, "outputs": None})

    stats = time_alternating(engines, repeat, warmup, idle_gap_s)
    ort_median = stats[ORT]["median_ms"]
    for row in rows:
        row["stats"] = stats[row["name"]]
        row["ratio"] = row["stats"]["median_ms"] / ort_median
    return {"threads": threads, "repeat": repeat, "warmup": warmup, "engines": rows}


def _runner(module, inputs):
    return lambda: module.run(None, inputs)


def _agreement(outputs: dict | None) -> tuple[str, str]:
    """(verdict, worst relative error) of a compare_outputs result; onnxruntime itself is the reference."""
    if outputs is None:
        return "reference", "-"
    worst = max((e["max_rel"] for e in outputs.values()), default=0.0)
    return ("ok" if all(e["passed"] for e in outputs.values()) else "WRONG"), f"{worst:.1e}"


def format_layout_comparison(result: dict) -> str:
    """The comparison as a table: one row per engine, its median/min/max time and its ratio to onnxruntime."""
    header = ("engine", "opt", "kernels", "median_ms", "min_ms", "max_ms", "vs ort", "outputs", "max rel err")
    lines = [header]
    for r in result["engines"]:
        s = r["stats"]
        lines.append((r["name"], "-" if r["opt_level"] is None else str(r["opt_level"]),
                      "-" if r["kernels"] is None else str(r["kernels"]), f"{s['median_ms']:.3f}",
                      f"{s['min_ms']:.3f}", f"{s['max_ms']:.3f}", f"{r['ratio']:.2f}x") + _agreement(r["outputs"]))
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    table = ["  ".join(cell.rjust(w) if c else cell.ljust(w) for c, (cell, w) in enumerate(zip(line, widths)))
             for line in lines]
    intro = (f"threads {result['threads']}, {result['repeat']} rounds after {result['warmup']} warm-up rounds, "
             f"engines in strict rotation, same inputs; 'vs ort' = median / onnxruntime's median (< 1: faster)")
    return "\n".join([intro] + table)

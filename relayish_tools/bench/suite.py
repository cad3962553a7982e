"""The whole model suite side by side: relayish (untuned), onnxruntime and, when installed, OpenVINO.

    python -m models --all --out suite/              # build the suite's .onnx files (models/suite.py)
    python -m relayish_tools.bench.suite suite/ [--models resnet18,mobilenet_v2] [--threads 2] [--repeat 30] [--json F]
    python -m models --wild --out wild/ && python -m relayish_tools.bench.suite wild/     # the real-world suite (models/wild.py)

--json F writes {"benchmark": "suite", "date", "command_line", "machine", "versions", "configuration", "rows": [one
per model: "model", "relayish"/"onnxruntime"/"openvino" (timing stats), "ratio", "paired", "openvino_ratio",
"openvino_paired", "max_rel_error", "agree"; or "error"]} (docs/data/suite.json: bench/report_docs.py).

For each model: compile it, check its outputs against onnxruntime (max|ours - ort| / max|ort|), then time the
engines in one process on the same inputs and thread count, in steady state (runtime.timing.time_blocks: blocks of
consecutive runs per engine, engines alternating block by block with an idle gap), and print the medians and the
ratios to onnxruntime. OpenVINO runs in fp32 (INFERENCE_PRECISION_HINT=f32) with the same thread count; it is an
optional extra (`pip install -e '.[bench]'`): without it its column says "-". A model that fails to compile or to
run in one engine gets its error in the table and the others go on. A folder with a wild.json (the real-world
suite) gives the input shapes of models whose dims are free; the others are compiled at their declared shapes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from compiler import compile_model
from runtime.timing import BLOCK_RUNS, describe_timing

from .compare import compare_with_onnxruntime
from .report import command_line, provenance


def make_openvino(onnx_path: str, threads: int, input_shapes: dict | None = None):
    """A run function of OpenVINO's CPU plugin in fp32 with `threads` threads, or None if openvino is missing.
    input_shapes: {input: shape} for the model's free dims."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    model = core.read_model(str(onnx_path))
    if input_shapes:
        model.reshape({name: list(shape) for name, shape in input_shapes.items()})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
                                                 "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    names = [p.get_any_name() for p in compiled.inputs]
    return lambda feed: request.infer({n: feed[n] for n in names})


def bench_model(path: str, threads: int, repeat: int, warmup: int, block: int,
                input_shapes: dict | None = None) -> dict:
    """One model's row: accuracy vs onnxruntime and each engine's latency stats (or the error that stopped it).
    input_shapes: {input: shape} to compile and feed (a model with free dims: the real-world suite's wild.json)."""
    row = {"model": os.path.splitext(os.path.basename(path))[0]}
    try:
        module = compile_model(path, num_threads=threads, input_shapes=input_shapes)
    except Exception as e:  # noqa: BLE001 - one model's failure is that row's result, not the end of the suite
        row["error"] = f"compile: {type(e).__name__}: {str(e).splitlines()[0]}"
        return row
    extra = openvino_engines(path, threads, input_shapes, row)
    result = compare_with_onnxruntime(module, path, threads=threads, repeat=repeat, warmup=warmup, block=block,
                                      extra_engines=extra)
    row["max_rel_error"] = max(e["max_rel"] for e in result["outputs"].values())
    row["agree"] = all(e["passed"] for e in result["outputs"].values())
    row.update(timing_fields(result))
    return row


def openvino_engines(path: str, threads: int, input_shapes, row: dict) -> list:
    """[("openvino", engine)] for compare_with_onnxruntime's extra_engines, [] without OpenVINO; OpenVINO refusing
    the model is written to row["openvino_error"] (the other engines still run)."""
    try:
        openvino = make_openvino(path, threads, input_shapes)
    except Exception as e:  # noqa: BLE001 - reported in the row
        row["openvino_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        return []
    return [] if openvino is None else [("openvino", openvino)]


def timing_fields(result: dict) -> dict:
    """A row's timings from compare_with_onnxruntime's result: each engine's, the ratios to onnxruntime (of the
    medians, and paired round by round)."""
    fields = dict(relayish=result["ours"], onnxruntime=result["onnxruntime"], ratio=result["ratio"],
                  paired=result["paired"]["ours"])
    if "openvino" in result:
        fields.update(openvino=result["openvino"], openvino_paired=result["paired"]["openvino"],
                      openvino_ratio=result["openvino"]["median_ms"] / result["onnxruntime"]["median_ms"])
    return fields


def timing_head(width: int, ort: str = "ort") -> str:
    """The header of timing_cells' columns (the model's `width` wide; onnxruntime's column named `ort`)."""
    return (f"{'model':<{width}} {'relayish':>9} {ort:>9} {'openvino':>9} {'ours/ort':>9} {'ov/ort':>7}  "
            f"{'paired ours/ort':>17}")


def timing_cells(r: dict, width: int) -> str:
    """A row's model, medians (ms), ratios of medians and paired ratio against onnxruntime: the columns this table
    and bench.int8_suite's share."""
    ov = r.get("openvino")
    return (f"{r['model']:<{width}} {r['relayish']['median_ms']:>9.3f} {r['onnxruntime']['median_ms']:>9.3f} "
            f"{ov['median_ms'] if ov else float('nan'):>9.3f} {r['ratio']:>9.3f} "
            f"{r.get('openvino_ratio', float('nan')):>7.3f}  {_paired(r.get('paired')):>17}")


def openvino_note(r: dict) -> str:
    return f"  (openvino: {r['openvino_error']})" if "openvino_error" in r else ""


def format_table(rows: list[dict]) -> str:
    """Medians in ms, the ratios of medians to onnxruntime (< 1: faster than onnxruntime) and the ratios paired
    round by round (runtime.timing.paired_ratio: the median of each round's ratio, its 90% interval)."""
    head = f"{timing_head(18)}  {'paired ov/ort':>17}  accuracy"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<18} {r['error']}")
            continue
        lines.append(f"{timing_cells(r, 18)}  {_paired(r.get('openvino_paired')):>17}  {r['max_rel_error']:.1e}"
                     f"{'' if r['agree'] else ' DISAGREE'}" + openvino_note(r))
    return "\n".join(lines)


def _paired(p: dict | None) -> str:
    return "-" if p is None else f"{p['ratio']:.3f} [{p['low']:.2f}-{p['high']:.2f}]"


MANIFEST = "wild.json"  # written by `python -m models --wild` (models/wild.py): {name: {"inputs": {input: shape}}}


def input_shapes(directory: str) -> dict:
    """{model name: {input: shape}} from the folder's wild.json, or {} when it has none."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return {name: {k: tuple(v) for k, v in entry["inputs"].items()} for name, entry in json.load(f).items()}


def suite_paths(directory: str, names: list[str] | None) -> list[str]:
    """The .onnx files of `directory` (sorted), or the named ones; a missing one is a clear error."""
    if not os.path.isdir(directory):
        raise SystemExit(f"{directory}: no such directory (build the suite with `python -m models --all --out DIR`)")
    if names:
        paths = [os.path.join(directory, n + ".onnx") for n in names]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise SystemExit(f"not built: {', '.join(missing)} (python -m models NAME ... --out {directory})")
        return paths
    paths = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".onnx"))
    if not paths:
        raise SystemExit(f"{directory} holds no .onnx file (python -m models --all --out {directory})")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.suite", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="folder of .onnx files (python -m models --all --out DIR)")
    p.add_argument("--models", help="comma-separated names (default: every .onnx in the folder)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30, help="timed runs per engine (default 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--block", type=int, default=BLOCK_RUNS, help="consecutive runs per engine turn")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    paths = suite_paths(args.directory, args.models.split(",") if args.models else None)
    print(f"threads {args.threads}; " + describe_timing("steady", args.repeat, args.warmup, args.block), flush=True)
    shapes = input_shapes(args.directory)  # the real-world suite's free dims (python -m models --wild)
    rows = []
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        rows.append(bench_model(path, args.threads, args.repeat, args.warmup, args.block, shapes.get(name)))
        print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(format_table(rows))
    if args.json:
        report = {"benchmark": "suite", **provenance(command_line("python -m relayish_tools.bench.suite", argv)),
                  "configuration": {"threads": args.threads, "timing": "steady", "repeat": args.repeat,
                                    "warmup": args.warmup, "block": args.block},
                  "rows": rows}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    return 0 if all(r.get("agree", False) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

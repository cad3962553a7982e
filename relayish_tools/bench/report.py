"""The machine-readable reports of the bench commands, and what every one of them carries: where and how it was
measured (`provenance`: date, command line, machine, versions), so that docs/benchmarks.md (bench/report_docs.py)
can say it beside each table.

`relayish bench --json FILE` (like OpenVINO benchmark_app's report):

    {"report_version": 2, "command": {the command's options}, "command_line": "relayish bench ...", "date": ISO 8601,
     "model": {"path", "inputs": {name: shape}, "outputs": {name: shape}, "kernels"},
     "configuration": {"threads", "timing": {"mode", "runs", "warmup", "block", "idle_gap_ms"}, compile options},
     "engines": [{"name": "relayish" | "onnxruntime", "runs", "median_ms", "mean_ms", "min_ms", "max_ms", "std_ms",
                  "p50_ms", "p90_ms", "p95_ms", "p99_ms"}, ...],
     "ratios": {"relayish/onnxruntime": median over median},
     "accuracy": {"tolerance", "passed", "outputs": {name: {"max_abs", "max_rel", "passed"}}},
     "machine": {"cpu", "cpu_model", "cores", "load_average", "peak_gflops" (null unless measured)},
     "versions": {"relayish", "python", "numpy", "llvmlite", "onnx", "onnxruntime", "openvino"} (null: not installed),
     "profile": [runtime profile rows] or null}

Non-finite numbers (an infinite error) are written as null: the file is strict JSON. Version 2 added
"command_line" and "date".
"""
from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import shlex
import sys
import time

from .peak import cpu_info

REPORT_VERSION = 2
PACKAGES = ("relayish", "numpy", "llvmlite", "onnx", "onnxruntime", "openvino")
ENGINES = (("relayish", "ours"), ("onnxruntime", "onnxruntime"))  # report name, key of the comparison result


def versions() -> dict:
    """The installed version of each package of PACKAGES (None if it is not installed), and Python's."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine(peak_gflops: float | None = None) -> dict:
    info = cpu_info()
    return {"cpu": info["cpu"], "cpu_model": info["model"], "cores": info["cores"],
            "load_average": list(os.getloadavg()), "peak_gflops": peak_gflops}


def command_line(prog: str, argv: list[str] | None) -> str:
    """The command as a user would type it again: `prog` ("relayish", "python -m relayish_tools.bench.suite") and its arguments
    (sys.argv[1:] when argv is None, as argparse takes them), quoted for a POSIX shell."""
    return " ".join([prog, shlex.join(sys.argv[1:] if argv is None else [str(a) for a in argv])]).strip()


def provenance(command: str, peak_gflops: float | None = None) -> dict:
    """Where and how a measurement was made, the keys every bench JSON carries: "date" (ISO 8601, local time with
    its UTC offset), "command_line" (what reproduces it), "machine" and "versions"."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command_line": command,
            "machine": machine(peak_gflops), "versions": versions()}


def bench_report(result: dict, module, model_path: str, configuration: dict, options: dict | None = None,
                 peak_gflops: float | None = None, profile: list[dict] | None = None,
                 command: str | None = None) -> dict:
    """The report of a bench.compare.compare_with_onnxruntime result for `module` compiled from `model_path`;
    `configuration` holds the compile options to record beside the threads and timing, `options` the command's
    options as given (argparse's namespace as a dict), `command` the command line that reproduces it."""
    timing = {"mode": result["timing"], "runs": result["repeat"], "warmup": result["warmup"],
              "block": result["block"] if result["timing"] == "steady" else None,
              "idle_gap_ms": result["idle_gap_s"] * 1e3}
    engines = []
    for name, key in ENGINES:
        stats = dict(result[key])
        engines.append({"name": name, "runs": stats.pop("repeat"), **stats})
    outputs = {n: {k: e[k] for k in ("max_abs", "max_rel", "passed")} for n, e in result["outputs"].items()}
    report = {
        "report_version": REPORT_VERSION, "command": options or {},
        "model": {"path": str(model_path), "inputs": {k: list(v) for k, v in module.input_shapes.items()},
                  "outputs": {k: list(v) for k, v in module.output_shapes.items()}, "kernels": len(module.kernels)},
        "configuration": {"threads": result["threads"], "timing": timing, **configuration},
        "engines": engines,
        "ratios": {"relayish/onnxruntime": result["ratio"]},
        "paired_ratios": {"relayish/onnxruntime": result["paired"]["ours"]} if "paired" in result else {},
        "accuracy": {"tolerance": result["tolerance"], "passed": all(e["passed"] for e in outputs.values()),
                     "outputs": outputs},
        **provenance(command or command_line("relayish bench", [str(model_path)]), peak_gflops), "profile": profile,
    }
    return _finite(report)


def tune_compare_report(model: str, runs, within: float, options: dict, command: str) -> dict:
    """The JSON of `relayish tune-compare --json FILE`: per strategy (tuning.compare.StrategyRun) its estimate of
    the model at the start (the default schedules, measured once for all) and at the end, the programs it measured,
    its seconds, when it first came within `within` of the best final estimate, its failed programs and its curve
    ([programs, seconds, estimate ms] after each round)."""
    best = min((r.final for r in runs), default=math.inf)
    strategies = []
    for r in runs:
        programs, seconds = r.reach(best * (1 + within))
        strategies.append({"name": r.name, "start_ms": r.curve[0][2] * 1e3 if r.curve else None,
                           "final_ms": r.final * 1e3, "trials": r.trials, "seconds": r.seconds,
                           "failed": r.failed, "trials_to_within": programs, "seconds_to_within": seconds,
                           "curve": [[n, t, est * 1e3] for n, t, est in r.curve]})
    return _finite({"benchmark": "tune_compare", "model": model, **provenance(command), "options": options,
                    "within": within, "strategies": strategies})


def _finite(value):
    """The same structure with every non-finite float replaced by None (and tuples as lists)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_report(report: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, allow_nan=False)
        f.write("\n")

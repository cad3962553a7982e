"""The machine-readable report of `relayish bench --json FILE` (like OpenVINO benchmark_app's report).

    {"report_version": 1, "command": {the command's options},
     "model": {"path", "inputs": {name: shape}, "outputs": {name: shape}, "kernels"},
     "configuration": {"threads", "timing": {"mode", "runs", "warmup", "block", "idle_gap_ms"}, compile options},
     "engines": [{"name": "relayish" | "onnxruntime", "runs", "median_ms", "mean_ms", "min_ms", "max_ms", "std_ms",
                  "p50_ms", "p90_ms", "p95_ms", "p99_ms"}, ...],
     "ratios": {"relayish/onnxruntime": median over median},
     "accuracy": {"tolerance", "passed", "outputs": {name: {"max_abs", "max_rel", "passed"}}},
     "machine": {"cpu", "cpu_model", "cores", "load_average", "peak_gflops" (null unless measured)},
     "versions": {"relayish", "python", "numpy", "llvmlite", "onnx", "onnxruntime", "openvino"} (null: not installed),
     "profile": [runtime profile rows] or null}

Non-finite numbers (an infinite error) are written as null: the file is strict JSON.
"""
from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform

from .peak import cpu_info

REPORT_VERSION = 1
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


def bench_report(result: dict, module, model_path: str, configuration: dict, options: dict | None = None,
                 peak_gflops: float | None = None, profile: list[dict] | None = None) -> dict:
    """The report of a bench.compare.compare_with_onnxruntime result for `module` compiled from `model_path`;
    `configuration` holds the compile options to record beside the threads and timing, `options` the command's
    options as given (argparse's namespace as a dict)."""
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
        "machine": machine(peak_gflops), "versions": versions(), "profile": profile,
    }
    return _finite(report)


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

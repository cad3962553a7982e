"""Timing statistics and per-kernel profile tables (pure functions of measured nanoseconds)."""
from __future__ import annotations

import numpy as np

PROFILE_COLUMNS = ("name", "ops", "output_shape", "layout", "flops", "median_ms", "share", "gflops")


def summarize_times(times_ns) -> dict:
    """median/mean/min/max/std in milliseconds, plus the sample count, of wall times given in nanoseconds."""
    ms = np.asarray(times_ns, dtype=np.float64) / 1e6
    if ms.size == 0:
        raise ValueError("summarize_times needs at least one measurement")
    return {"median_ms": float(np.median(ms)), "mean_ms": float(ms.mean()), "min_ms": float(ms.min()),
            "max_ms": float(ms.max()), "std_ms": float(ms.std()), "repeat": int(ms.size)}


def profile_rows(kernels: list[dict], samples_ns) -> list[dict]:
    """One row per kernel from a (repeat, n_kernels) array of per-kernel nanoseconds.

    A kernel's time is its median over the repetitions (robust to a preempted run); `share` is that median over the
    sum of all kernels' medians, so the shares add up to 1; `gflops` is flops / median time (0 if unmeasurably fast).
    """
    samples = np.asarray(samples_ns, dtype=np.float64).reshape(-1, len(kernels))
    medians_ms = np.median(samples, axis=0) / 1e6 if samples.shape[0] else np.zeros(len(kernels))
    total_ms = float(medians_ms.sum())
    rows = []
    for kernel, median_ms in zip(kernels, medians_ms):
        median_ms = float(median_ms)
        rows.append({
            "name": kernel["name"], "ops": list(kernel["ops"]), "output_shape": list(kernel["output_shape"]),
            "layout": kernel["layout"], "flops": kernel["flops"], "median_ms": median_ms,
            "share": median_ms / total_ms if total_ms > 0 else 0.0,
            "gflops": kernel["flops"] / (median_ms * 1e6) if median_ms > 0 else 0.0,
        })
    return rows


def format_profile(rows: list[dict], sort_by_time: bool = False) -> str:
    """A text table of profile rows, like TVM's debug executor: one line per kernel and a total line."""
    if sort_by_time:
        rows = sorted(rows, key=lambda r: r["median_ms"], reverse=True)
    header = ("Node Name", "Ops", "Time(us)", "Time(%)", "GFLOPS", "Shape", "Layout")
    lines = [header, tuple("-" * len(h) for h in header)]
    for r in rows:
        lines.append((r["name"], ",".join(r["ops"]), f"{r['median_ms'] * 1e3:.2f}", f"{r['share'] * 100:.1f}",
                      f"{r['gflops']:.1f}", str(tuple(r["output_shape"])), r["layout"] or "-"))
    total_ms = sum(r["median_ms"] for r in rows)
    total_gflops = sum(r["flops"] for r in rows) / (total_ms * 1e6) if total_ms > 0 else 0.0
    lines.append(("Total_time", "-", f"{total_ms * 1e3:.2f}", "100.0" if rows else "-", f"{total_gflops:.1f}",
                  "-", "-"))
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)

"""The picture of `relayish bench --plot FILE.png`: where the time goes, kernel by kernel, and the engines side by side.

Top: one horizontal bar per kernel call in execution order, its median time, coloured by the op class of its anchor
(the first op that is not elementwise, from the op registry), annotated with its share of the time, its GFLOP/s and,
when the machine's peak was measured, that as a percentage of the peak. Bottom: each engine's median, with a whisker
from its fastest run to its P99. matplotlib is an optional extra (`pip install -e '.[plot]'`): without it,
plot_bench raises PlotUnavailable, which says how to install it.
"""
from __future__ import annotations

from relayish import OpError, get_op

CLASS_COLOURS = {"conv": "#1f77b4", "dense": "#9467bd", "pool": "#2ca02c", "normalization": "#8c564b",
                 "layout": "#ff7f0e", "elementwise": "#7f7f7f", "other": "#bcbd22"}
ENGINE_COLOURS = {"relayish": "#1f77b4", "onnxruntime": "#d62728"}


class PlotUnavailable(ImportError):
    """matplotlib is not installed."""


def op_class(ops: list[str]) -> str:
    """The registry's class of the kernel's anchor op (the first op that is not elementwise), else 'elementwise';
    'other' for an op the registry does not know."""
    classes = []
    for name in ops:
        try:
            classes.append(get_op(name).op_class)
        except OpError:
            classes.append("other")
    return next((c for c in classes if c != "elementwise"), "elementwise" if classes else "other")


def require_matplotlib():
    """matplotlib.pyplot (with the file-only Agg backend); PlotUnavailable if matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib, an optional extra: pip install -e '.[plot]'") from None
    return plt


def plot_bench(path: str, rows: list[dict], engines: dict[str, dict], title: str = "",
               peak_gflops: float | None = None) -> str:
    """Write the two panels to `path` (PNG). rows: runtime profile rows; engines: {name: latency stats}."""
    plt = require_matplotlib()
    n = max(len(rows), 1)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 2.2 + 0.22 * n + 1.6),
                                 gridspec_kw={"height_ratios": [0.22 * n + 0.6, 1.3]})
    _kernel_panel(ax, rows, peak_gflops)
    _engine_panel(bx, engines)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")  # long kernel names stay inside
    plt.close(fig)
    return path


def _kernel_panel(ax, rows: list[dict], peak_gflops: float | None) -> None:
    classes = [op_class(r["ops"]) for r in rows]
    times_us = [r["median_ms"] * 1e3 for r in rows]
    labels = [f"{i} {r['name'].removeprefix('fused_')[:38]}" for i, r in enumerate(rows)]
    y = list(range(len(rows)))
    ax.barh(y, times_us, color=[CLASS_COLOURS[c] for c in classes])
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()  # execution order, top to bottom
    for yi, t, r in zip(y, times_us, rows):
        note = f" {r['share'] * 100:.1f}%"
        if r["flops"]:
            note += f", {r['gflops']:.0f} GFLOP/s"
            note += f" = {100 * r['gflops'] / peak_gflops:.0f}% of peak" if peak_gflops else ""
        ax.text(t, yi, note, va="center", fontsize=6.5)
    ax.set_xlim(0, max(times_us, default=1) * 1.45)
    ax.set_xlabel("median time per kernel call (us)")
    peak = f", peak {peak_gflops:.0f} GFLOP/s" if peak_gflops else ""
    ax.set_title(f"relayish per-kernel profile ({len(rows)} kernel calls{peak})", fontsize=9)
    present = [c for c in CLASS_COLOURS if c in classes]
    ax.legend(handles=[_patch(CLASS_COLOURS[c], c) for c in present], fontsize=7, loc="lower right")


def _engine_panel(bx, engines: dict[str, dict]) -> None:
    names = list(engines)
    medians = [engines[n]["median_ms"] for n in names]
    low = [m - engines[n]["min_ms"] for n, m in zip(names, medians)]
    high = [engines[n]["p99_ms"] - m for n, m in zip(names, medians)]
    y = list(range(len(names)))
    bx.barh(y, medians, xerr=[low, high], capsize=4, color=[ENGINE_COLOURS.get(n, "#7f7f7f") for n in names])
    bx.set_yticks(y, names, fontsize=8)
    bx.invert_yaxis()
    for yi, n, m in zip(y, names, medians):
        bx.text(engines[n]["p99_ms"], yi, f"  median {m:.3f} ms, P90 {engines[n]['p90_ms']:.3f}, "
                                          f"P99 {engines[n]['p99_ms']:.3f}", va="center", fontsize=7)
    bx.set_xlim(0, max((engines[n]["p99_ms"] for n in names), default=1) * 1.8)
    bx.set_xlabel("latency per inference (ms): bar = median, whisker = min to P99")
    bx.set_title("engines side by side", fontsize=9)


def _patch(colour: str, label: str):
    from matplotlib.patches import Patch
    return Patch(color=colour, label=label)

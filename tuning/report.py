"""What a tuning run shows: the progress bar (tqdm, with an ETA), the task table and the tuning curve."""
from __future__ import annotations

import sys

import numpy as np
from tqdm import tqdm


class Progress:
    """The progress bar of a tuning run: measured programs out of the trial budget (or seconds out of the time
    budget when only that is given), with tqdm's rate and ETA; after each round, the estimated end-to-end latency
    and the task just tuned. `log` prints a message above the bar. Disabled: nothing is drawn."""

    def __init__(self, trials: int | None, seconds: float | None, enabled: bool = True):
        self.by_trials = trials is not None
        self.bar = tqdm(total=trials if self.by_trials else seconds, unit="trial" if self.by_trials else "s",
                        disable=not enabled, file=sys.stderr, dynamic_ncols=True, leave=True,
                        bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} {unit} [{elapsed}<{remaining}] {postfix}")

    def log(self, msg: str) -> None:
        tqdm.write(msg, file=sys.stderr)

    def update(self, trials: int, elapsed: float, est_now: float, est_start: float, task, task_best, errors: int):
        done = trials if self.by_trials else min(elapsed, self.bar.total)
        self.bar.update(done - self.bar.n)
        best = f"{task_best * 1e3:.3f} ms" if task_best and np.isfinite(task_best) else "-"
        self.bar.set_postfix_str(f"est. {_ms(est_now)} (start {_ms(est_start)}) | {task.name[:28]} best {best}"
                                 + (f" errors {errors}" if errors else ""))

    def close(self) -> None:
        self.bar.close()


def _ms(x) -> str:
    return f"{x * 1e3:.2f} ms" if np.isfinite(x) else "  ?  "


def format_task_table(result) -> str:
    rows = [f"{'task':<40} {'weight':>6} {'MFLOP':>9} {'trials':>6} {'default ms':>10} {'best ms':>9} "
            f"{'GFLOP/s':>8}"]
    for t in result.tasks:
        b, d = result.best.get(t.key, np.nan), result.default.get(t.key, np.nan)
        rows.append(f"{t.name[:40]:<40} {t.weight:>6} {t.flops / 1e6:>9.1f} {result.trials_per_task.get(t.key, 0):>6} "
                    f"{d * 1e3:>10.3f} {b * 1e3:>9.3f} {t.flops / b / 1e9 if b and np.isfinite(b) else 0:>8.1f}")
    rows.append(f"estimated end-to-end: default {_ms(result.estimated_latency('default'))}, "
                f"tuned {_ms(result.estimated_latency('best'))}; {result.trials} trials in {result.seconds:.0f} s")
    return "\n".join(rows)


def require_matplotlib():
    try:
        import matplotlib
    except ImportError as e:
        raise RuntimeError("writing the tuning curve as PNG needs matplotlib (pip install 'relayish[plot]'); "
                           "a path ending in .csv writes the data instead") from e
    return matplotlib


def write_curve_png(result, path: str):
    """The tuning curve: estimated end-to-end latency against trials. The data also goes to path + ".csv"."""
    with open(path if path.endswith(".csv") else path + ".csv", "w") as f:
        f.write("trials,elapsed_s,estimated_latency_ms\n")
        for n, t, est in result.curve:
            f.write(f"{n},{t:.1f},{est * 1e3:.4f}\n")
    if path.endswith(".csv"):
        return
    matplotlib = require_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = [c[0] for c in result.curve]
    ys = [c[2] * 1e3 for c in result.curve]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(xs, ys, marker=".", lw=1)
    ax.set_xlabel("measured programs (trials)")
    ax.set_ylabel("estimated end-to-end latency (ms)")
    ax.set_title("tuning curve")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

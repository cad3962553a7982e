"""tune_compare: the three generations of tuning on the same tasks, the same budget, the same measurement.

    runs = tune_compare("model.onnx", ["autotvm-xgb", "ansor", "metaschedule"], trials=300, out_dir="cmp")

Every strategy tunes the model's tasks from scratch (its own records database, out_dir/<strategy>.db) for
`trials` measured programs, with Ansor's gradient task scheduler choosing the task of each round. The tasks'
default schedules are measured once, before any strategy runs, and every strategy starts from those costs: the
curves start from one estimate (trial 0), and a strategy is not credited or blamed for the noise of measuring
the same default again at another time (on ResNet-18 that noise alone spread the strategies' final estimates
by 8% when each measured the defaults itself). The estimate after each round is the weighted sum of the tasks'
best costs (the default's for a task not improved). Strategies:

    ansor                 tuning/tune.py's Tuner as it is (sketches, evolution, XGBoost on program features)
    autotvm-random|grid|ga|xgb   the task's AutoTVM template and that tuner; a task without a template keeps
                          its default schedule (AutoTVM's fallback) and gets no further rounds
    metaschedule          design spaces of the rules, evolutionary search under the XGBoost program model
    metaschedule-replay   the same design spaces, replay-trace (random) search

Writes out_dir/compare.png (estimated latency against trials and against seconds, a curve per strategy),
out_dir/compare.csv (the curves) and out_dir/compare.txt (the table: final latency, trials and seconds to
come within 5% of the best final latency of all strategies, failed programs).
"""
from __future__ import annotations

import functools
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from compiler.algorithms import estimated_latency
from compiler.codegen import host_target, vector_width
from compiler.default_schedule import default_schedule
from compiler.records import RecordStore
from compiler.schedule import Schedule, ScheduleError
from relayish import get_op

from .autotvm import TUNERS, find_template
from .autotvm.tuner import MeasureInput, save_configs
from .cost_model import XGBoostModel
from .measure import WorkerPool, measure
from .metaschedule.database import Database
from .metaschedule.search import MetaScheduleSearch
from .task_scheduler import TaskScheduler
from .tune import TUNE_PARAMS, Budget, Tuner, model_tasks, run_rounds

STRATEGIES = ("autotvm-random", "autotvm-grid", "autotvm-ga", "autotvm-xgb", "ansor", "metaschedule",
              "metaschedule-replay")
# Every strategy times as tuning does, with cold caches (as inside the model); each call is then timed alone after
# a flush, so one call per repeat (TVM's advice with enable_cpu_cache_flush) and the least of 3 repeats.
COMPARE_PARAMS = {"batch_size": 16, "seed": 0, "num_measure_repeat": 3, "num_measure_number": 1,
                  "timeout_s": 10.0, "build_workers": 2, "within": 0.05, "cache_flush": True}


@dataclass
class StrategyRun:
    """One strategy's session: curve points (trials, elapsed s, estimated latency s) and failed programs."""
    name: str
    records: str
    curve: list = field(default_factory=list)
    failed: int = 0
    trials: int = 0
    seconds: float = 0.0

    @property
    def final(self) -> float:
        finite = [c[2] for c in self.curve if np.isfinite(c[2])]
        return finite[-1] if finite else math.inf

    def reach(self, target: float) -> tuple[float, float]:
        """(trials, seconds) at which the estimate first came within target; inf if never."""
        for n, t, est in self.curve:
            if np.isfinite(est) and est <= target:
                return n, t
        return math.inf, math.inf


def tune_compare(model, strategies, trials: int, out_dir: str, input_shapes: dict | None = None,
                 layout: str = "NCHWc", winograd: bool = False, params: dict | None = None,
                 log=None) -> list[StrategyRun]:
    """Tune the tasks of `model` with each strategy for `trials` programs; write the plot, curves and table."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise ValueError(f"unknown strategies {unknown}; choose among {', '.join(STRATEGIES)}")
    p = {**COMPARE_PARAMS, **(params or {})}
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    os.makedirs(out_dir, exist_ok=True)
    tasks = model_tasks(model, input_shapes, layout, winograd)
    runs = []
    # one set of measurement workers for the defaults and every strategy (each spawn of 2 workers and their imports
    # cost seconds); a worker that crashes is replaced as in any tuning run
    with WorkerPool(p["build_workers"]) as pool:
        log(f"measuring the default schedules of {len(tasks)} tasks once, for every strategy")
        defaults = default_costs(tasks, p, pool)
        for name in strategies:
            db = os.path.join(out_dir, f"{name}.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(db + suffix):
                    os.remove(db + suffix)  # every strategy starts from nothing
            log(f"== {name}: {len(tasks)} tasks, {trials} trials, records in {db}")
            run_strategy = _run_ansor if name == "ansor" else functools.partial(_run_generic, name)
            runs.append(run_strategy(tasks, trials, db, p, log, defaults, pool))
    table = format_table(runs, p["within"])
    log(table)
    with open(os.path.join(out_dir, "compare.txt"), "w") as f:
        f.write(table + "\n")
    write_curves(runs, out_dir)
    return runs


def default_costs(tasks, p, pool: WorkerPool) -> dict:
    """Task key -> its default schedule's cost (s), measured as the strategies measure their programs."""
    return {task.key: _measure_schedules(task, [default_schedule(task.initial_state(), vector_width())], pool,
                                         p)[0].cost for task in tasks}


def _estimate(tasks, best: dict) -> float:
    return estimated_latency(tasks, lambda t: best.get(t.key, np.nan))


def _run_ansor(tasks, trials, db, p, log, defaults, pool: WorkerPool) -> StrategyRun:
    params = {**TUNE_PARAMS, **p, "final_remeasure": 0}
    run = StrategyRun("ansor", db)
    budget = Budget(trials, None, time.perf_counter())
    with RecordStore(db) as store:
        tuner = Tuner(tasks, store, host_target(), params, log, executor=pool)
        tuner.assume_defaults(defaults)
        try:
            run.curve = [(0, 0.0, _estimate(tasks, defaults))]
            run.curve += run_rounds(tuner, budget, log, progress=_RoundLog("ansor", trials, log))
        finally:
            tuner.close()
        run.failed = sum(1 for r in store.records(target=host_target()) if not r.ok)
    run.trials, run.seconds = tuner.trials, budget.elapsed()
    return run


class _RoundLog:
    """run_rounds' progress as the other strategies report it: one line per round."""

    def __init__(self, name: str, trials: int, log):
        self.name, self.trials, self.log = name, trials, log

    def update(self, trials, elapsed, est_now, est_start, task, task_best, errors):
        self.log(f"[{self.name}] trials {trials}/{self.trials}  {elapsed:5.0f}s  est. latency {est_now * 1e3:.3f} ms"
                 f"  | {task.name[:40]}")


# ---------------------------------------------------------------------------------------------- adapters

class _AutoTVMSearch:
    """An AutoTVM tuner as a batch source: items are (config index, Schedule or the instantiation error)."""

    def __init__(self, task, kind: str, seed: int, db: str):
        self.task, self.db = task, db
        self.tuner = TUNERS[kind](task, seed=seed)

    def next_batch(self, n):
        out = []
        for i in self.tuner.next_batch(n):
            try:
                out.append((i, self.tuner.instantiate(i)))
            except ScheduleError as e:
                out.append((i, f"instantiation error: {e}"))
        return out

    def update(self, items, costs):
        self.tuner.update([i for i, _ in items], costs)
        save_configs(self.db, self.tuner.template.name,
                     [MeasureInput(self.task, self.tuner.space.get(i), s) for i, s in items if isinstance(s, Schedule)])


class _MetaScheduleSearch:
    """MetaSchedule search as a batch source: items are (trace, Schedule); the traces go to the Database."""

    def __init__(self, task, strategy: str, model, seed: int, db: str):
        self.task, self.model, self.db = task, model, db
        self.search = MetaScheduleSearch(task, model, strategy, seed)

    def next_batch(self, n):
        return self.search.next_batch(n)

    def update(self, items, costs):
        self.search.update(items, costs)
        if self.model is not None:
            self.model.update([(self.task, s, c) for (_, s), c in zip(items, costs)])
        with Database(self.db) as database:
            wl = database.commit_workload(self.task)
            for trace, sch in items:
                database.commit_trace(wl, sch, trace)


def _make_search(name: str, task, model, seed: int, db: str):
    """The strategy's batch source for a task, or None when it cannot tune the task."""
    if name.startswith("autotvm-"):
        return _AutoTVMSearch(task, name.split("-", 1)[1], seed, db) if find_template(task) else None
    return _MetaScheduleSearch(task, "replay" if name.endswith("-replay") else "evolutionary", model, seed, db)


# ---------------------------------------------------------------------------------------------- the driver

def _run_generic(name, tasks, trials, db, p, log, defaults, pool: WorkerPool) -> StrategyRun:
    """Rounds under the task scheduler, as tuning/tune.py's Tuner runs them, with the strategy's searches."""
    run = StrategyRun(name, db)
    rng = random.Random(p["seed"])
    model = XGBoostModel(seed=p["seed"]) if name == "metaschedule" else None
    scheduler = TaskScheduler([t.weight for t in tasks], [t.flops for t in tasks], [_group(t) for t in tasks],
                              rng=random.Random(p["seed"] + 1))
    searches: dict[int, object] = {}
    best = dict(defaults)
    run.curve.append((0, 0.0, _estimate(tasks, best)))
    t0 = time.perf_counter()
    with RecordStore(db) as store:
        while run.trials < trials:
            i = scheduler.next_task()
            if i is None:
                log("every task stopped improving: done")
                break
            task = tasks[i]
            items = []
            want = min(p["batch_size"], trials - run.trials)
            if i not in searches:
                searches[i] = _make_search(name, task, model, rng.randrange(2 ** 31), db)
            if searches[i] is not None:
                items += searches[i].next_batch(want)
            if not items:  # nothing (more) to try for this task (no template, space exhausted): out of the rounds
                scheduler.update(i, best[task.key])  # (its warm-up round: the default's cost)
                scheduler.stop(i)
                continue
            costs = _measure_items(task, items, store, pool, p)
            run.failed += sum(1 for c in costs if not np.isfinite(c))
            best[task.key] = min([best.get(task.key, np.inf)] + costs)
            searches[i].update(items, costs)
            run.trials += len(items)
            scheduler.update(i, best[task.key])
            est = _estimate(tasks, best)
            run.curve.append((run.trials, time.perf_counter() - t0, est))
            log(f"[{name}] trials {run.trials}/{trials}  {time.perf_counter() - t0:5.0f}s  est. latency "
                f"{est * 1e3:.3f} ms  | {task.name[:40]}")
    run.seconds = time.perf_counter() - t0
    return run


def _measure_schedules(task, schedules, pool, p):
    return measure(task, schedules, number=p["num_measure_number"], repeat=p["num_measure_repeat"],
                   timeout_s=p["timeout_s"], executor=pool, flush_cache=p["cache_flush"])


def _measure_items(task, items, store, pool, p) -> list[float]:
    """Measure the items' schedules (an item holding an error string is a failed trial) and store them."""
    schedules = [s for _, s in items if isinstance(s, Schedule)]
    results = iter(_measure_schedules(task, schedules, pool, p) if schedules else [])
    costs, entries = [], []
    for _, s in items:
        if not isinstance(s, Schedule):
            costs.append(np.inf)
            continue
        r = next(results)
        entries.append((task, host_target(), s, r.costs, r.error))
        costs.append(r.cost)
    store.add_many(entries)
    return costs


def _group(task) -> str:
    anchors = [o for o in task.ops if get_op(o).op_class != "elementwise"]
    return anchors[0] if anchors else task.ops[0] if task.ops else "none"


# ---------------------------------------------------------------------------------------------- output

def format_table(runs: list[StrategyRun], within: float = 0.05) -> str:
    best = min((r.final for r in runs), default=math.inf)
    target = best * (1 + within)
    rows = [f"{'strategy':<20} {'final ms':>9} {'trials':>6} {'seconds':>8} {'trials to ' + format(within, '.0%'):>12} "
            f"{'s to ' + format(within, '.0%'):>8} {'failed':>6}"]
    for r in runs:
        n, t = r.reach(target)
        rows.append(f"{r.name:<20} {r.final * 1e3:>9.3f} {r.trials:>6} {r.seconds:>8.0f} "
                    f"{('-' if math.isinf(n) else str(n)):>12} {('-' if math.isinf(t) else format(t, '.0f')):>8} "
                    f"{r.failed:>6}")
    rows.append(f"best final estimate {best * 1e3:.3f} ms; 'to {within:.0%}': first reading within {within:.0%} of it")
    return "\n".join(rows)


def write_curves(runs: list[StrategyRun], out_dir: str) -> str | None:
    """compare.csv always; compare.png when matplotlib is installed (its path, else None)."""
    with open(os.path.join(out_dir, "compare.csv"), "w") as f:
        f.write("strategy,trials,elapsed_s,estimated_latency_ms\n")
        for r in runs:
            for n, t, est in r.curve:
                f.write(f"{r.name},{n},{t:.2f},{est * 1e3:.4f}\n")
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=120, sharey=True)
    for r in runs:
        pts = [c for c in r.curve if np.isfinite(c[2])]
        for ax, k in zip(axes, (0, 1)):
            ax.plot([c[k] for c in pts], [c[2] * 1e3 for c in pts], lw=1.2, marker=".", drawstyle="steps-post",
                    label=r.name)
    axes[0].set_xlabel("measured programs (trials)")
    axes[1].set_xlabel("tuning time (s)")
    axes[0].set_ylabel("estimated end-to-end latency (ms)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle("AutoTVM / Ansor / MetaSchedule on the same tasks and budget")
    fig.tight_layout()
    path = os.path.join(out_dir, "compare.png")
    fig.savefig(path)
    plt.close(fig)
    return path

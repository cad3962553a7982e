"""tune_model: Ansor-style tuning of every task of one or more models, with the records kept in SQLite.

    tune_model("models/resnet18.onnx", records="resnet18.db", trials=2000)        # or time_budget_s=...
    sess = compile_model("models/resnet18.onnx", records="resnet18.db")

A `Tuner` holds one session: the tasks, the records store, the cost model, each task's search space and the task
scheduler. `Tuner.round()` is one round: the task scheduler picks a task; evolutionary search proposes a batch of
programs for it (each task's population starts from its default program and similar tasks' best records as they are
when the round starts: `seed_space`); they are built and timed in worker processes, or on a Dask cluster (with cold
caches, as in a model); every result (or error) is written to the records database as it arrives; the cost model is
retrained in a thread while the next round searches (with the model one round older) and is installed before that
round's timing; the scheduler learns the task's new best. `tune_model` drives rounds until the budget is spent (a tqdm
bar shows the progress), re-measures the best programs (`remeasure_best`), prints the task table (tuning/report.py),
times each model untuned and tuned side by side, keeping the default of every task whose tuned program loses inside
the model (tuning/model_check.py), and writes the curve. Tuning resumes from the database: programs measured before
are not measured again and train the cost model from the start.
"""
from __future__ import annotations

import fnmatch
import os
import random
import time
from dataclasses import dataclass, field

import numpy as np

from compiler import DefaultSchedules, as_default_schedules, extract_tasks
from compiler.algorithms import estimated_latency, tasks_with_alternatives
from compiler.codegen import host_target, vector_width
from compiler.backend import untuned_schedule
from compiler.passes import PassContext, run_pipeline
from compiler.records import RecordStore
from compiler.schedule import Schedule, ScheduleError
from compiler.task import Task
from frontends import from_onnx
from relayish import get_op

from .annotate import derive_program
from .cost_model import XGBoostModel
from .measure import WorkerPool, is_dask_client, measure
from .model_check import check_in_model
from .pretrained import load_cost_model
from .report import Progress, require_matplotlib, format_task_table, write_curve_png
from .search import SEARCH_PARAMS, SearchSpace, evolutionary_search
from .task_scheduler import TaskScheduler

TUNE_PARAMS = {"batch_size": 16, "seed": 0, "num_measure_repeat": 3, "num_measure_number": 3, "timeout_s": 10.0,
               "cache_flush": True,  # time candidates with cold caches, as a model's kernels run (measure.py)
               "give_up_factor": 10,  # a candidate 10x slower than the task's best on its first call: not timed on
               "final_remeasure": 3,  # at the end, the best few programs of each task and its default, again,
               "remeasure_rounds": 3,  # ... this many times, in alternation (the records keep the fastest reading)
               # with a pretrained cost model, a task's first round: its default and the model's best few
               "warm_start": {"batch_size": 4, "search": {"eps_random": 0.0, "time_budget_s": 3.0}}}


@dataclass
class TuneResult:
    tasks: list
    best: dict  # task key -> best cost (s)
    default: dict  # task key -> cost of the default schedule (s)
    trials: int
    seconds: float
    curve: list = field(default_factory=list)  # (trials, elapsed s, estimated end-to-end latency s)
    trials_per_task: dict = field(default_factory=dict)  # task key -> programs measured this session
    model_checks: list = field(default_factory=list)  # of model_check.ModelCheck, one per model (check_model)

    def estimated_latency(self, which: str = "best") -> float:
        costs = self.best if which == "best" else self.default
        return estimated_latency(self.tasks, lambda t: costs.get(t.key, np.nan), "best" if which == "best" else "rule")


def _model_list(models) -> list:
    """One model (a path, bytes or a ModelProto) or several, as a list (paths as strings)."""
    one = isinstance(models, (str, bytes, os.PathLike)) or hasattr(models, "graph")
    return [str(m) if isinstance(m, os.PathLike) else m for m in ([models] if one else list(models))]


def model_tasks(models, input_shapes=None, layout="NCHWc", winograd: bool = True, algorithms: bool = False
                ) -> list[Task]:
    """The unique tasks of one or more ONNX models, weights summed over models. algorithms: also the tasks of
    every other algorithm of each convolution that has a choice, and of the model compiled with each other
    channel block (compiler/algorithms.py), so that the search weighs direct against Winograd F(2x2) and F(4x4),
    and channel blocks of half, one and two vectors (several models: their calls per block are summed)."""
    paths = _model_list(models)
    merged: dict[str, Task] = {}
    ctx = PassContext(layout=layout, vector_width=vector_width(), winograd=winograd)
    for path in paths:
        mod = from_onnx(str(path) if not hasattr(path, "graph") else path, input_shapes)
        tasks = tasks_with_alternatives(mod, ctx, blocks=True) if algorithms else extract_tasks(run_pipeline(mod, ctx))
        for task in tasks:
            if task.key in merged:
                merged[task.key].weight += task.weight
                if task.blocks:
                    old = merged[task.key].blocks
                    calls = dict(old[1]) if old else {}
                    for b, n in task.blocks[1].items():
                        calls[b] = calls.get(b, 0) + n
                    merged[task.key].blocks = (task.blocks[0], calls)
            else:
                merged[task.key] = task
    return list(merged.values())


@dataclass
class Round:
    """What one round did: the task it tuned and the measurements (none when nothing was left to measure)."""
    task: Task
    results: list


class Tuner:
    """One tuning session over fixed tasks. Starts from what the records already hold for this target (see
    `_resume`); measures in worker processes until close().

    Invariants: best[key] is the fastest cost known for a task (this session or the records); defaults[key] is
    the schedule the task starts from (start: "hand-written" defaults or the "naive" loop nest) and default[key]
    its cost, measured by the task's first round of this session; trials counts the programs
    measured this session (per_task: per task key); since_best[key] counts the programs measured since the task's
    best last improved, and with params["early_stopping"] = N a task stops once it reaches N (tvmc's
    --early-stopping)."""

    def __init__(self, tasks: list[Task], store: RecordStore, target: dict, params: dict, log=lambda msg: None,
                 start: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN, executor=None,
                 cost_model: XGBoostModel | None = None):
        """cost_model: what the search starts from (tuning.pretrained.load_cost_model()), updated with every
        measurement; None: an empty XGBoostModel."""
        self.tasks, self.store, self.target, self.params = tasks, store, target, params
        self.rng = random.Random(params["seed"])
        self.model = cost_model if cost_model is not None else XGBoostModel(seed=params["seed"])
        self.pretrained = bool(getattr(self.model, "metadata", None))  # trained before this session (warm start)
        self.spaces = [SearchSpace.of(t) for t in tasks]
        self.best: dict[str, float] = {}
        self.default: dict[str, float] = {}
        self.defaults = {t.key: _default_schedule(t, start) for t in tasks}  # what each task starts from
        _resume(store, tasks, self.spaces, target, self.model, self.best, log, self.defaults)
        seeded = sum(seed_space(space, self.defaults[space.task.key], store, target) for space in self.spaces)
        log(f"initial populations seeded with {seeded} programs (default schedules, similar tasks' best records)")
        self.scheduler = TaskScheduler([t.weight for t in tasks], [t.flops for t in tasks],
                                       [_group(t) for t in tasks], rng=random.Random(params["seed"] + 1))
        self.trials = 0
        self.per_task: dict[str, int] = {}
        self.since_best: dict[str, int] = {}
        # measurement workers: ours (closed by close()), or the caller's (a WorkerPool, an Executor, a Dask Client)
        self.own_pool = executor is None
        self.pool = WorkerPool(params.get("build_workers", 2)) if executor is None else executor

    def assume_defaults(self, costs: dict) -> None:
        """Take the default schedules' costs (task key -> s) as measured elsewhere (tune_compare measures them once
        for every strategy): the first rounds then measure only searched programs. The search spaces and the cost
        model learn them as if this session had measured them."""
        learned = []
        for i, task in enumerate(self.tasks):
            if task.key in costs and task.key not in self.default:
                cost = costs[task.key]
                self.default[task.key] = cost
                self.best[task.key] = min(self.best.get(task.key, np.inf), cost)
                self.spaces[i].record(self.defaults[task.key], cost, None)
                learned.append((task, self.defaults[task.key], cost))
        self.model.update(learned)  # once: the model retrains on everything at each update

    def round(self, max_trials: int | None = None) -> Round | None:
        """Tune the task the scheduler picks once: measure a batch of at most batch_size new programs (at most
        max_trials, except that a task's first round always measures its default schedule), store the results,
        update the cost model and the scheduler. None when every task has stopped improving."""
        i = self.scheduler.next_task()
        if i is None:
            return None
        task = self.tasks[i]
        batch = self._next_batch(i, max_trials)
        if not batch:
            self.scheduler.update(i, self.best.get(task.key, np.inf))
            return Round(task, [])
        schedules = [s for _, s in batch]
        p = self.params

        def store(k, result):  # each record is committed as its result arrives: a kill loses nothing measured
            self.store.add(task, self.target, schedules[k], result.costs, result.error)

        self.model.wait()  # the last round's training (it ran beside this round's search) ends before any timing

        results = measure(task, schedules, number=p["num_measure_number"], repeat=p["num_measure_repeat"],
                          timeout_s=p["timeout_s"], executor=self.pool, flush_cache=p["cache_flush"],
                          on_result=store, give_up_factor=p.get("give_up_factor"),
                          best_cost=self.best.get(task.key, np.inf))
        self._learn(i, batch, results)
        return Round(task, results)

    def _next_batch(self, i: int, max_trials: int | None) -> list:
        """(program or None for the default schedule, schedule) pairs to measure for task i. A task's first round
        under a pretrained cost model is the warm start (params["warm_start"]): its default and the model's few
        best-scored programs, no random ones, from a shorter search, so that every task of a model of many tasks
        has measured programs early (GoogLeNet: 70 tasks; a first round of 16 programs each took seven minutes)."""
        task = self.tasks[i]
        first = task.key not in self.default
        warm = self.warm_batch_size() if first else None
        batch = []
        if first:  # the first round of a task also measures its default schedule
            batch.append((None, self.defaults[task.key]))  # (its program is among the space's seeds)
        want = (warm or self.params["batch_size"]) - len(batch)
        if max_trials is not None:
            want = min(want, max(max_trials - len(batch), 0))
        if want > 0:
            # similar tasks' best records as they are now: a tile found for one shape this session seeds the others
            seed_space(self.spaces[i], self.defaults[task.key], self.store, self.target)
            batch += evolutionary_search(self.spaces[i], self.model, want, self.rng,
                                         self.params["warm_start"]["search"] if warm else None,
                                         exclude=[s.to_json() for _, s in batch])
        return batch

    def warm_batch_size(self) -> int | None:
        """How many programs a task's first round measures under the warm start (its default among them, never
        more than a round's batch_size), or None when there is none (a cold cost model, or no params["warm_start"])."""
        warm = self.params.get("warm_start")
        return min(warm["batch_size"], self.params["batch_size"]) if warm and self.pretrained else None

    def _learn(self, i: int, batch: list, results: list) -> None:
        """Measured costs -> the task's search space, best and default, the cost model, the scheduler."""
        task = self.tasks[i]
        costs = []
        for (prog, sch), r in zip(batch, results):
            cost = float(min(r.costs)) if r.costs else np.inf
            costs.append(cost)
            self.spaces[i].record(sch, cost, prog)
            if task.key not in self.default and sch == self.defaults[task.key]:
                self.default[task.key] = cost
            if cost < self.best.get(task.key, np.inf):
                self.best[task.key] = cost
                self.since_best[task.key] = 0
            else:
                self.since_best[task.key] = self.since_best.get(task.key, 0) + 1
        # trained beside the next round's search (which uses the model trained through the round before this one)
        # and installed before the next round's timing (see XGBoostModel)
        self.model.update([(task, s, c) for (_, s), c in zip(batch, costs)], background=True)
        self.trials += len(batch)
        self.per_task[task.key] = self.per_task.get(task.key, 0) + len(batch)
        self.scheduler.update(i, self.best.get(task.key, np.inf))
        stop_after = self.params.get("early_stopping")
        if stop_after and self.since_best[task.key] >= stop_after:
            self.scheduler.stop(i)

    def estimates(self) -> tuple[float, float]:
        """Estimated end-to-end latency now and with the default schedules (s)."""
        return (_estimate(self.tasks, self.best, self.default),
                _estimate(self.tasks, self.default, self.default, "rule"))

    def close(self) -> None:
        self.model.wait()
        if self.own_pool:
            self.pool.shutdown()


@dataclass
class Budget:
    """A tuning budget: a number of measured programs and/or seconds since t_start (None: no limit)."""
    trials: int | None
    seconds: float | None
    t_start: float

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def trials_left(self, done: int) -> int | None:
        return None if self.trials is None else self.trials - done

    def left(self, done: int) -> bool:
        if self.trials is not None and done >= self.trials:
            return False
        return self.seconds is None or self.elapsed() < self.seconds

    def __str__(self):
        parts = ([f"{self.trials} trials"] if self.trials else []) + ([f"{self.seconds:.0f} s"] if self.seconds else [])
        return " / ".join(parts)


def tune_model(models, records: str, trials: int | None = None, time_budget_s: float | None = None,
               input_shapes: dict | None = None, layout: str = "NCHWc", params: dict | None = None,
               progress: bool = True, curve_png: str | None = None, log=None, winograd: bool = True,
               start: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN, check_model: bool = True, executor=None,
               tasks: str | None = None, early_stopping: int | None = None, algorithms: bool = False,
               cost_model: str | None = "pretrained") -> TuneResult:
    """Tune every task of `models` (a path or a list of paths) until `trials` measurements or the time budget.

    start: what each task starts from and is compared with: "hand-written" (the default schedules, also seeded
    into the search) or "naive" (the plain loop nest, for template-free tuning experiments: then compile the
    model with compile_model(records=..., default_schedules="naive") to match). check_model: at the end, time
    each model compiled with the records against the untuned model, and keep the default of every task whose
    tuned program is not faster inside the model (tuning/model_check.py). executor: where candidates are built
    and run: None (worker processes of this machine), a WorkerPool, a concurrent.futures.Executor of processes, or
    a dask.distributed Client (tuning/dask_measure.py; records are still written here, by the driver).
    tasks: tune only the tasks select_tasks picks (e.g. "0,3-5" or "fused_conv2d*"); early_stopping: a task stops
    after this many programs without improvement. progress: a tqdm bar with an ETA (and messages) on stderr.
    algorithms: tune every algorithm of each convolution that has a choice (direct, Winograd F(2x2), F(4x4)), and
    the model's tasks under each channel block (half, one and two vectors), as
    alternative tasks; compile_model(records=...) then takes the channel block, and gives each convolution the
    algorithm, that its records say are fastest (compiler/algorithms.py). Off: the rule's algorithm and block.
    cost_model: "pretrained" (the model shipped with the package, tuning.pretrained, when there is one; a copy
    keeps learning from this run's measurements), a path to such a model, or None / "cold" (an empty model)."""
    if trials is None and time_budget_s is None:
        raise ValueError("tune_model needs trials=N or time_budget_s=S")
    start = as_default_schedules(start)
    if is_dask_client(executor):  # measure needs it as a measurer (tuning/dask_measure.py)
        from .dask_measure import DaskMeasurer
        executor = DaskMeasurer(executor)
    if curve_png and not curve_png.endswith(".csv"):
        require_matplotlib()  # fail now, not after the whole budget
    p = dict(TUNE_PARAMS, **(params or {}))
    if early_stopping is not None:
        p["early_stopping"] = early_stopping
    budget = Budget(trials, time_budget_s, time.perf_counter())
    all_tasks = model_tasks(models, input_shapes, layout, winograd, algorithms)
    chosen = select_tasks(all_tasks, tasks)
    with RecordStore(records) as store:
        bar = Progress(trials, time_budget_s, enabled=progress)
        log = log or (bar.log if progress else (lambda msg: None))
        try:
            model = _starting_model(cost_model, p["seed"])
            if model is not None and getattr(model, "metadata", None):
                trained = model.metadata.get("trained_on", {})
                log(f"cost model: pretrained on {trained.get('programs')} programs of {trained.get('tasks')} tasks")
            tuner = Tuner(chosen, store, host_target(), p, log, start=start, executor=executor, cost_model=model)
            if tuner.warm_batch_size():
                log(f"warm start: each task's first round measures its default and the model's "
                    f"{tuner.warm_batch_size() - 1} best programs")
            log(f"tuning {len(chosen)} of {len(all_tasks)} tasks ({sum(t.weight for t in chosen)} kernel calls), "
                f"{budget}, records in {records}")
            try:
                curve = run_rounds(tuner, budget, log, bar)
            finally:
                tuner.close()
        finally:
            bar.close()
        if p["final_remeasure"]:
            remeasure_best(chosen, store, tuner.target, p["final_remeasure"], p, log, tuner.defaults, executor)
            _costs_from_records(chosen, store, tuner.target, tuner.best, tuner.default, tuner.defaults)
        result = TuneResult(chosen, tuner.best, tuner.default, tuner.trials, budget.elapsed(), curve, tuner.per_task)
        log(format_task_table(result))
        if check_model:
            result.model_checks = check_models(models, store, tuner, input_shapes, layout, winograd, start, p, log)
    if curve_png:
        write_curve_png(result, curve_png)
        log(f"tuning curve written to {curve_png}")
    return result


class TaskFilterError(ValueError):
    """A task filter (tune_model's tasks=, relayish tune --tasks) that is malformed or picks no task."""


def select_tasks(tasks: list[Task], pattern: str | None) -> list[Task]:
    """The tasks a filter picks, in their order: None or "all" = every task; else comma-separated items, each a
    task index ("3"), an index range ("2-5", inclusive) or a glob over task names ("fused_conv2d*"). Raises
    TaskFilterError when an index is out of range or the filter picks nothing."""
    if pattern is None or pattern.strip() == "all":
        return list(tasks)
    picked = set()
    for item in (x.strip() for x in pattern.split(",") if x.strip()):
        lo, dash, hi = item.partition("-")
        if lo.isdigit() and (not dash or hi.isdigit()):
            first, last = int(lo), int(hi) if dash else int(lo)
            if last >= len(tasks) or first > last:
                raise TaskFilterError(f"task filter {item!r}: there are {len(tasks)} tasks (indices 0-{len(tasks) - 1})")
            picked.update(range(first, last + 1))
        else:
            picked.update(k for k, t in enumerate(tasks) if fnmatch.fnmatchcase(t.name, item))
    if not picked:
        raise TaskFilterError(f"task filter {pattern!r} picks none of the {len(tasks)} tasks "
                         f"({', '.join(sorted({t.name for t in tasks}))})")
    return [t for k, t in enumerate(tasks) if k in picked]


def _typical(store, key: str, schedule, target, least: dict) -> float:
    """store.typical_cost of the schedule, or the least cost the tuner knows when the store has no reading of it."""
    typical = None if schedule is None else store.typical_cost(key, schedule, target)
    return least.get(key, np.nan) if typical is None else typical


def check_models(models, store, tuner: Tuner, input_shapes, layout, winograd, start, params, log) -> list:
    """check_in_model for each model: verdicts in the records, both latencies printed side by side, and the
    tuner's estimate of the model beside them: per kernel call, the median of every reading of the task's best
    program (or of its default, where the task keeps it; store.typical_cost), not the least reading the records
    rank programs by. The least reading of the program that won among ~1,400 is a best case: ResNet-18 tuned
    from the naive loop nests (two runs, Zen 5) summed to 5.19 and 5.05 ms by least readings, 5.68 and 5.79 ms
    by medians, against 5.92 and 5.79 ms measured end to end."""
    estimate = {t.key: (_typical(store, t.key, store.best(t.key, tuner.target), tuner.target, tuner.best),
                        _typical(store, t.key, tuner.defaults[t.key], tuner.target, tuner.default))
                for t in tuner.tasks}
    checks = []
    for model in _model_list(models):
        log(f"timing {model if isinstance(model, str) else 'the model'} untuned and tuned, side by side")
        check = check_in_model(model, store, tuner.target, input_shapes, layout, winograd, start, estimate,
                               params.get("model_check"), log)
        log(check.format())
        checks.append(check)
    return checks


def run_rounds(tuner: Tuner, budget: Budget, log, progress: Progress | None = None) -> list:
    """Tuner rounds until the budget is spent or every task has stopped improving, the progress bar updated after
    each round that measured something. Returns the tuning curve: (trials, elapsed s, estimated latency s) per
    round."""
    curve = []
    while budget.left(tuner.trials):
        outcome = tuner.round(budget.trials_left(tuner.trials))
        if outcome is None:
            log("every task stopped improving: done")
            break
        if outcome.results:
            est_now, est_start = tuner.estimates()
            curve.append((tuner.trials, budget.elapsed(), est_now))
            if progress is not None:
                progress.update(tuner.trials, budget.elapsed(), est_now, est_start, outcome.task,
                                tuner.best.get(outcome.task.key), sum(1 for r in outcome.results if r.error))
    return curve


def remeasure_best(tasks, store, target, k: int, params: dict, log=lambda msg: None,
                   defaults: dict | None = None, executor=None) -> None:
    """Measure again the k best programs of each task and its default schedule, in `remeasure_rounds` rounds
    over all the tasks, and add the new measurements to the records. On a shared machine a program measured
    while something else ran looks slow (noise only ever adds time; the records keep each program's fastest
    reading): a few more looks, spread over time and side by side with the default, keep one unlucky reading of
    the default or one lucky stretch of a candidate from deciding which schedule compile_model applies. Then
    each task's best record must also beat the default side by side (`side_by_side_verdicts`).
    defaults: task key -> the untuned schedule (default: the hand-written one); executor: as measure's."""
    rounds = max(1, int(params.get("remeasure_rounds", 1)))
    defaults = defaults or {task.key: _default_schedule(task) for task in tasks}
    candidates, alone = {}, {}
    for task in tasks:
        ranked, seen = [], set()
        for rec in sorted((r for r in store.records(task.key, target=target) if r.ok), key=lambda r: r.cost):
            key = rec.schedule.to_json()
            if key not in seen:
                seen.add(key)
                ranked.append(rec.schedule)
            if len(ranked) >= k:
                break
        default = defaults[task.key]
        if default.to_json() not in seen:
            ranked.append(default)
        candidates[task.key] = ranked
        if len(ranked) == 1:  # no program but the default: nothing to decide; measured once if it never was
            alone[task.key] = default.to_json() in seen
    log(f"re-measuring the {k} best programs and the default of each of {len(tasks) - len(alone)} tasks, {rounds} "
        f"rounds" + (f" ({len(alone)} tasks have no program but their default)" if alone else ""))
    readings = {task.key: {s.to_json(): [] for s in candidates[task.key]} for task in tasks}
    for r in range(rounds):
        for task in tasks:
            if task.key in alone and (r > 0 or alone[task.key]):
                continue
            ranked = candidates[task.key] if r % 2 == 0 else candidates[task.key][::-1]
            results = measure(task, ranked, number=params["num_measure_number"],
                              repeat=params["num_measure_repeat"], timeout_s=params["timeout_s"],
                              flush_cache=params.get("cache_flush", False), executor=executor)
            store.add_many([(task, target, s, res.costs, res.error) for s, res in zip(ranked, results)])
            for s, res in zip(ranked, results):
                readings[task.key][s.to_json()].append(min(res.costs) if res.error is None and res.costs else np.inf)
    side_by_side_verdicts(tasks, store, target, readings, defaults, log)


def side_by_side_verdicts(tasks, store, target, readings: dict, defaults: dict, log=lambda msg: None) -> list:
    """A task's best record (the program compile_model would apply: the lowest reading of any program) keeps
    applying only if it also beat the default side by side: the median over the re-measure's rounds of its reading
    over the default's in the same round is below 1. Otherwise it gets a keep_default verdict (compiler/records.py).
    The lowest of many noisy readings is biased: of programs that run alike (a batch-1 dense streaming the same
    weights: AlexNet's read "9-30% faster" tuned), the best of dozens always reads faster than the default's few
    readings, and the model check then reverted about half of every payoff run's tasks. readings: task key ->
    schedule JSON -> the program's fastest reading (s) of each round, inf where it failed. Returns the reverted
    task keys."""
    reverted = []
    for task in tasks:
        record = store.best_record(task.key, target=target)
        own, default = (None if record is None else record.schedule.to_json()), defaults[task.key].to_json()
        rows = readings.get(task.key, {})
        if own is None or own == default or own not in rows or default not in rows:
            continue
        pairs = [(a, b) for a, b in zip(rows[own], rows[default]) if np.isfinite(a) and np.isfinite(b)]
        if pairs and not float(np.median([a / b for a, b in pairs])) < 1.0:
            store.add_verdict(task.key, target, record.schedule, float(np.median([a for a, _ in pairs])),
                              float(np.median([b for _, b in pairs])), keep_default=True)
            reverted.append(task.key)
    if reverted:
        log(f"{len(reverted)} tasks' best programs did not beat their defaults side by side in the re-measure: "
            f"they keep their default schedules")
    return reverted


def _costs_from_records(tasks, store, target, best: dict, default: dict, defaults: dict) -> None:
    """best[key] = the cost of the record compile_model will apply, or the default's when it applies none (a
    verdict kept the default); default[key] = the default schedule's fastest reading (both min over every
    measurement in the records)."""
    for task in tasks:
        reading = default_reading(store.records(task.key, target=target), defaults[task.key])
        if reading is not None:
            default[task.key] = reading
        rec = store.best_record(task.key, target=target)
        if rec is not None:
            best[task.key] = rec.cost
        elif task.key in default:
            best[task.key] = default[task.key]


def default_reading(records, default: Schedule) -> float | None:
    """The default schedule's fastest reading among a task's records (None if it has none that ran)."""
    own = default.to_json()
    readings = [r.cost for r in records if r.ok and r.schedule.to_json() == own]
    return min(readings) if readings else None


def seed_space(space: SearchSpace, default: Schedule, store: RecordStore, target, k: int | None = None) -> int:
    """Put the default schedule's program (first, when the space holds it) and programs fitted from the best
    records of similar tasks (same fused ops, other shapes) into space.seeds; returns how many."""
    k = SEARCH_PARAMS["similar_records"] if k is None else k
    initial = space.task.initial_state()
    own = derive_program(space.sketches, default, initial)
    seeds = [own] if own is not None else []
    for rec in store.best_of_similar(space.task.name, space.task.key, target, k):
        prog = derive_program(space.sketches, rec.schedule, initial, exact=False)
        if prog is not None and all(prog.key() != s.key() for s in seeds):
            seeds.append(prog)
    space.seeds = seeds
    return len(seeds)


def _starting_model(cost_model: str | None, seed: int) -> XGBoostModel | None:
    if cost_model in (None, "cold"):
        return None
    return load_cost_model(None if cost_model == "pretrained" else cost_model, seed=seed)


def _default_schedule(task: Task, start: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN) -> Schedule:
    """The untuned schedule tuning starts from and compares with: the hand-written default, or the naive loop nest."""
    return untuned_schedule(task, vector_width(), start)


def _group(task: Task) -> str:
    """The task's similarity group for the scheduler: its anchor, the first op that is not elementwise."""
    anchors = [o for o in task.ops if get_op(o).op_class != "elementwise"]
    return anchors[0] if anchors else task.ops[0] if task.ops else "none"


def _resume(store, tasks, spaces, target, model, best, log, defaults: dict | None = None):
    """Programs measured before (for this target) are known: not measured again, and they train the model. A task's
    best is what compile_model would apply: when a verdict keeps its default (its lowest reading did not hold up side
    by side or in the model), the default's fastest reading, not that lucky one, which would make the task look
    tuned to the scheduler and set a bar no honest reading clears."""
    n = 0
    for task, space in zip(tasks, spaces):
        schedules, costs = [], []
        records = store.records(task.key, target=target)
        for rec in records:
            sch = rec.schedule
            try:
                sch.apply(task.initial_state())
            except ScheduleError:
                continue
            cost = rec.cost
            space.record(sch, cost)
            schedules.append(sch)
            costs.append(cost)
            if cost < best.get(task.key, np.inf):
                best[task.key] = cost
        if schedules:
            model.update([(task, s, c) for s, c in zip(schedules, costs)])
            n += len(schedules)
            if defaults is not None and store.best_record(task.key, target=target) is None:
                reading = default_reading(records, defaults[task.key])  # the records read above, not again
                if reading is not None:
                    best[task.key] = reading
                else:
                    best.pop(task.key, None)
    if n:
        log(f"resumed: {n} measured programs from the records database")


def _estimate(tasks, costs: dict, fallback: dict, which: str = "best") -> float:
    """Estimated end-to-end latency (s): see compiler.algorithms.estimated_latency."""
    return estimated_latency(tasks, lambda t: costs.get(t.key, fallback.get(t.key, np.nan)), which)

"""AutoTVM's tuners over a template's configuration space (Chen et al., NeurIPS'18): random, grid, genetic.

    tuner = GATuner(task)                                  # the task's template (templates.find_template)
    tuner.tune(200, measure_option(), callbacks=[progress(200), log_to_records("tuning.db")])

Every tuner proposes batches of configuration indices (`next_batch`), never one it proposed before, and learns
from their costs (`update`); `tune` drives that loop: instantiate each configuration (a configuration whose
schedule is not legal is a failed trial, like a build error), measure the rest in worker processes
(tuning/measure.py), update, call the callbacks. A tuner built on a bare `space=` (no task) is driven by
next_batch/update alone: the tests run them on synthetic costs.

Records: `log_to_records(path)` writes every measured program to the records store like every other strategy
(compile_model applies the best) and, beside it in table `autotvm_configs`, the template and knob features of
its configuration: what `XGBTuner.load_history` learns from (transfer learning).
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass

import numpy as np

from compiler.codegen import host_target
from compiler.records import RecordStore, connect
from compiler.schedule import Schedule as StepSchedule, ScheduleError
from compiler.task import Task
from tuning.measure import MeasureResult, measure

from .space import ConfigEntity, ConfigSpace
from .templates import Template, find_template

CONFIG_TABLE = """CREATE TABLE IF NOT EXISTS autotvm_configs (task_key TEXT NOT NULL, schedule TEXT NOT NULL,
    template TEXT NOT NULL, config INTEGER NOT NULL, features TEXT NOT NULL, PRIMARY KEY (task_key, schedule))"""


def measure_option(number: int = 3, repeat: int = 3, timeout_s: float = 10.0, batch_size: int = 16,
                   executor=None) -> dict:
    """How tune() measures: tuning.measure.measure's number/repeat/timeout_s/executor, and the batch size."""
    return {"number": number, "repeat": repeat, "timeout_s": timeout_s, "batch_size": batch_size,
            "executor": executor}


@dataclass
class MeasureInput:
    task: Task
    config: ConfigEntity
    schedule: StepSchedule | None  # None: the configuration did not instantiate


class Tuner:
    """Base tuner. Invariants: `visited` holds every index ever proposed; xs/ys are the indices and costs
    (seconds, inf for failures) given to update, in order; best_cost/best_index the fastest of them."""

    def __init__(self, task: Task | None = None, *, template: Template | None = None,
                 space: ConfigSpace | None = None, seed: int = 0):
        if space is None:
            template = template or find_template(task)
            if template is None:
                raise ValueError(f"no AutoTVM template fits task {task.name if task else None}")
            space = template.space(task)
        self.task, self.template, self.space = task, template, space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.best_cost, self.best_index = np.inf, None

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list[int]:
        raise NotImplementedError

    def update(self, indices, costs) -> None:
        for i, c in zip(indices, costs):
            self.xs.append(i)
            self.ys.append(float(c))
            if c < self.best_cost:
                self.best_cost, self.best_index = float(c), i

    def load_history(self, records, **kwargs) -> None:
        """Learn from earlier records. Only model-based tuners (XGBTuner) can use them; the others ignore them."""

    def instantiate(self, index: int) -> StepSchedule:
        return self.template.instantiate(self.task, self.space.get(index))

    def _unvisited_random(self, n: int) -> list[int]:
        """Up to n random indices never proposed (marked proposed)."""
        out, size = [], len(self.space)
        while len(out) < n and len(self.visited) < size:
            i = self.rng.randrange(size)
            if size - len(self.visited) < 64 and i in self.visited:  # nearly exhausted: enumerate what is left
                i = next(k for k in range(size) if k not in self.visited)
            if i not in self.visited:
                self.visited.add(i)
                out.append(i)
        return out

    # ------------------------------------------------------------------ the tuning loop
    def measure_configs(self, indices, option: dict) -> tuple[list[MeasureInput], list[MeasureResult]]:
        inputs, schedules = [], []
        for i in indices:
            cfg = self.space.get(i)
            try:
                sch = self.template.instantiate(self.task, cfg)
            except ScheduleError as e:
                sch, err = None, f"instantiation error: {e}"
            inputs.append(MeasureInput(self.task, cfg, sch))
            if sch is None:
                schedules.append(err)
        valid = [inp.schedule for inp in inputs if inp.schedule is not None]
        measured = iter(measure(self.task, valid, number=option["number"], repeat=option["repeat"],
                                timeout_s=option["timeout_s"], executor=option["executor"]) if valid else [])
        errors = iter(schedules)
        results = [next(measured) if inp.schedule is not None else MeasureResult(None, next(errors), 0.0, 0.0)
                   for inp in inputs]
        return inputs, results

    def tune(self, n_trial: int, measure_option: dict | None = None, callbacks=(),
             early_stopping: int | None = None) -> None:
        """Propose, measure, update until n_trial trials, the space is exhausted, or early_stopping trials
        without a new best."""
        option = measure_option or globals()["measure_option"]()
        done, best_at = 0, 0
        while done < n_trial and self.has_next():
            batch = self.next_batch(min(option["batch_size"], n_trial - done))
            if not batch:
                break
            inputs, results = self.measure_configs(batch, option)
            before = self.best_cost
            self.update(batch, [r.cost for r in results])
            done += len(batch)
            if self.best_cost < before:
                best_at = done
            for cb in callbacks:
                cb(self, inputs, results)
            if early_stopping is not None and done - best_at >= early_stopping:
                break


class RandomTuner(Tuner):
    """Configurations drawn uniformly without repetition."""

    def next_batch(self, n):
        return self._unvisited_random(n)


class GridSearchTuner(Tuner):
    """Configurations in index order, each once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.counter = 0

    def next_batch(self, n):
        out = []
        while len(out) < n and self.counter < len(self.space):
            if self.counter not in self.visited:
                self.visited.add(self.counter)
                out.append(self.counter)
            self.counter += 1
        return out


class GATuner(Tuner):
    """Genetic search (AutoTVM's GATuner): a population of pop_size configurations is measured; the next one
    is the elite_num best seen so far kept aside, plus children of parents drawn with probability proportional
    to their fitness (1 / cost), made by one-point crossover of the knob vectors and mutation of each knob with
    probability mutation_prob; children already visited are dropped (random ones fill in)."""

    def __init__(self, *args, pop_size: int = 32, elite_num: int = 4, mutation_prob: float = 0.1, **kwargs):
        super().__init__(*args, **kwargs)
        self.pop_size, self.elite_num, self.mutation_prob = pop_size, elite_num, mutation_prob
        self.genes = self._unvisited_random(min(pop_size, len(self.space)))
        self.next_pt = 0
        self.scores: dict[int, float] = {}  # measured configuration -> fitness

    def next_batch(self, n):
        out = []
        while len(out) < n:
            if self.next_pt >= len(self.genes):
                self._next_generation()
                if not self.genes:
                    break
            out.append(self.genes[self.next_pt])
            self.next_pt += 1
        return out

    def update(self, indices, costs):
        super().update(indices, costs)
        for i, c in zip(indices, costs):
            self.scores[i] = 0.0 if not np.isfinite(c) or c <= 0 else 1.0 / c

    def _next_generation(self):
        """Parents: the measured genes of the last generation and the elite_num fittest ever."""
        elites = sorted(self.scores, key=lambda k: -self.scores[k])[:self.elite_num]
        parents = list(dict.fromkeys([g for g in self.genes if g in self.scores] + elites))
        weights = np.array([self.scores[k] for k in parents], dtype=np.float64)
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(parents), 1.0 / max(len(parents), 1))
        dims = self.space.dims
        genes = []
        for _ in range(self.pop_size * 4):
            if len(genes) >= self.pop_size or not parents:
                break
            a, b = (self.space.point2knob(parents[j]) for j in self._choice(len(parents), weights, 2))
            point = self.rng.randrange(len(dims))
            child = a[:point] + b[point:]
            child = [self.rng.randrange(d) if self.rng.random() < self.mutation_prob else k
                     for k, d in zip(child, dims)]
            idx = self.space.knob2point(child)
            if idx not in self.visited:
                self.visited.add(idx)
                genes.append(idx)
        genes += self._unvisited_random(self.pop_size - len(genes))
        self.genes, self.next_pt = genes, 0

    def _choice(self, n, weights, k):
        return [self.rng.choices(range(n), weights=weights)[0] for _ in range(k)]


# ---------------------------------------------------------------------------------------------- callbacks

def progress(total: int, log=None):
    """Callback: one line per batch with the trials done and the best cost so far."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    state = {"done": 0}

    def callback(tuner, inputs, results):
        state["done"] += len(inputs)
        fails = sum(1 for r in results if r.error)
        best = f"{tuner.best_cost * 1e3:.3f} ms" if np.isfinite(tuner.best_cost) else "-"
        log(f"[{type(tuner).__name__}] trials {state['done']}/{total}  best {best}  failed in batch {fails}")
    return callback


def log_to_records(path: str, target=None):
    """Callback: every measured program into the records store at `path` (a configuration that did not
    instantiate has no program and is not stored), and its configuration's features beside it."""
    target = target or host_target()

    def callback(tuner, inputs, results):
        entries = [(inp.task, target, inp.schedule, r.costs, r.error)
                   for inp, r in zip(inputs, results) if inp.schedule is not None]
        with RecordStore(path) as store:
            store.add_many(entries)
        save_configs(path, tuner.template.name, inputs)
    return callback


def save_configs(path: str, template: str, inputs) -> None:
    conn = connect(path)
    try:
        with conn:
            conn.execute(CONFIG_TABLE)
            conn.executemany("INSERT OR REPLACE INTO autotvm_configs VALUES (?, ?, ?, ?, ?)",
                             [(inp.task.key, inp.schedule.to_json(), template, inp.config.index,
                               json.dumps(inp.config.features().tolist())) for inp in inputs
                              if inp.schedule is not None])
    finally:
        conn.close()


def load_configs(path: str, template: str) -> list[tuple[str, np.ndarray, float]]:
    """(task key, knob features, cost) of every stored configuration of a template, failures at cost inf."""
    conn = connect(path, read_only=True)
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'autotvm_configs'").fetchone() is None:
            return []
        rows = conn.execute("SELECT c.task_key, c.features, MIN(COALESCE(r.record_cost, 1e300)) FROM autotvm_configs c "
                            "JOIN records r ON r.task_key = c.task_key AND r.schedule = c.schedule "
                            "WHERE c.template = ? GROUP BY c.task_key, c.schedule", (template,)).fetchall()
    finally:
        conn.close()
    return [(k, np.array(json.loads(f)), np.inf if c >= 1e300 else c) for k, f, c in rows]


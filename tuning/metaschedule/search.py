"""MetaSchedule's search strategies over a task's design spaces: replay-trace and evolutionary.

    search = MetaScheduleSearch(task, model, strategy="evolutionary", seed=0)
    batch = search.next_batch(16)          # [(Trace, compiler Schedule)], none measured before
    search.update(batch, costs)            # seconds, inf for a failure

Replay-trace: every candidate is a design space's trace replayed with fresh decisions (random search in the
space). Evolutionary: a population of fresh replays and the best measured traces evolves for a few generations
by the mutators, parents drawn by roulette on the cost model's predicted score; the batch is the best predicted
programs not yet measured plus a share `eps` of fresh replays (exploration). The cost model is any object with
`predict(task, schedules)` (higher is better), normally the shared XGBoost model (tuning/cost_model.py).
"""
from __future__ import annotations

import random

import numpy as np

from compiler.schedule import ScheduleError
from compiler.task import Task
from tuning.search import roulette_weights

from .mutators import DEFAULT_MUTATORS, mutate
from .rules import DEFAULT_RULES, design_spaces
from .schedule import replay
from .trace import Trace

SEARCH_PARAMS = {"population": 48, "generations": 3, "elite_measured": 8, "eps": 0.2, "max_tries": 20}
STRATEGIES = ("replay", "evolutionary")


class MetaScheduleSearch:
    """One task's design spaces and what has been measured of them. Invariant: `measured` maps the step-list
    JSON of every program measured through `update` to its cost; `traces` holds their traces."""

    def __init__(self, task: Task, model=None, strategy: str = "evolutionary", seed: int = 0,
                 rules=DEFAULT_RULES, mutators=DEFAULT_MUTATORS, params: dict | None = None):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown MetaSchedule strategy {strategy!r}; expected one of {STRATEGIES}")
        if strategy == "evolutionary" and model is None:
            raise ValueError("the evolutionary strategy needs a cost model")
        self.task, self.model, self.strategy, self.mutators = task, model, strategy, mutators
        self.params = {**SEARCH_PARAMS, **(params or {})}
        self.rng = random.Random(seed)
        self.spaces = [s.trace for s in design_spaces(task, rules, seed)]
        self.measured: dict[str, float] = {}
        self.traces: dict[str, Trace] = {}

    def next_batch(self, n: int) -> list[tuple]:
        """Up to n (trace, schedule) pairs never measured, all different."""
        if self.strategy == "replay":
            return self._fresh(n, set())
        return self._evolve(n)

    def update(self, batch: list[tuple], costs) -> None:
        for (trace, sch), cost in zip(batch, costs):
            key = sch.to_json()
            self.measured[key] = float(cost)
            self.traces[key] = trace

    def best_traces(self, k: int) -> list[Trace]:
        ok = sorted((c, j) for j, c in self.measured.items() if np.isfinite(c))
        return [self.traces[j] for _, j in ok[:k]]

    # ------------------------------------------------------------------ strategies
    def _replay(self, trace: Trace, decisions: dict | None = None):
        """(trace, schedule) of a replay, or None when its decisions are not legal."""
        try:
            sch = replay(trace, self.task, seed=self.rng.randrange(2 ** 31), decisions=decisions)
            return sch.trace, sch.to_schedule()
        except ScheduleError:
            return None

    def _fresh(self, n: int, taken: set) -> list[tuple]:
        out = []
        for _ in range(n * self.params["max_tries"]):
            if len(out) >= n:
                break
            got = self._replay(self.rng.choice(self.spaces), {})
            if got is not None and self._new(got[1], taken):
                out.append(got)
        return out

    def _new(self, sch, taken: set) -> bool:
        key = sch.to_json()
        if key in self.measured or key in taken:
            return False
        taken.add(key)
        return True

    def _evolve(self, n: int) -> list[tuple]:
        p = self.params
        population = self._fresh(p["population"], set())
        for trace in self.best_traces(p["elite_measured"]):
            got = self._replay(trace)
            if got is not None:
                population.append(got)
        seen: dict[str, tuple] = {}
        for gen in range(p["generations"] + 1):
            scores = self._predict([s for _, s in population])
            for cand, score in zip(population, scores):
                seen.setdefault(cand[1].to_json(), (cand, float(score)))
            if gen == p["generations"] or not population:
                break
            population = self._children(population, scores)
        ranked = sorted(seen.values(), key=lambda cs: -cs[1])
        batch, taken = [], set()
        for cand, _ in ranked:
            if len(batch) >= n - int(round(n * p["eps"])):
                break
            if self._new(cand[1], taken):
                batch.append(cand)
        return batch + self._fresh(n - len(batch), taken)

    def _children(self, population: list[tuple], scores) -> list[tuple]:
        cdf = np.cumsum(roulette_weights(scores))
        out = []
        for _ in range(self.params["population"] * 2):
            if len(out) >= self.params["population"]:
                break
            parent = population[min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1])), len(population) - 1)]
            child = mutate(parent[0], self.rng, self.mutators)
            got = self._replay(child) if child is not None else None
            if got is not None:
                out.append(got)
        return out or population

    def _predict(self, schedules) -> np.ndarray:
        if not schedules:
            return np.zeros(0)
        return np.asarray(self.model.predict(self.task, schedules), dtype=np.float64)

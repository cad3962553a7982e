"""Evolutionary search guided by the cost model (Ansor section 5.1).

Each round of a task: an initial population of fresh random programs plus the best programs measured so far;
a few generations of mutation and node-based crossover, parents drawn with probability proportional to the cost
model's predicted fitness; then the batch to measure is the best predicted programs not measured yet plus a
share of random ones (exploration).

A round's search has a time budget (SEARCH_PARAMS["time_budget_s"]): predicting a program's cost means lowering
it and extracting its features, ~0.01 s for a direct convolution but 0.4 s for a Winograd one (four stages,
the transforms' constant-matrix products expanded; ~0.2 s since features count shared nodes once and lowering
pauses the GC), so the full population and generations took ~110 s a round for each Winograd task of ResNet-18,
where building and timing the batch takes ~20 s: a template-free run spent most of its 15 minutes choosing
programs. Over budget, the populations shrink and the generations stop early.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import numpy as np

from compiler.schedule import Schedule, ScheduleError
from compiler.task import Task

from .annotate import Program, concretize, crossover, mutate, random_programs
from .sketch import generate_sketches

SEARCH_PARAMS = {
    "population": 64,  # programs per generation
    "generations": 3,
    "mutation_prob": 0.85,  # else crossover
    "eps_random": 0.2,  # share of each measured batch that is random programs
    "elite_measured": 16,  # best measured programs seeded into the initial population
    "similar_records": 4,  # best records of other shapes of the same computation seeded into it
    "time_budget_s": 10.0,  # seconds of cost-model predictions per round, spread over the generations
    "min_population": 8,  # predicted programs per generation however slow the predictions
}


@dataclass
class SearchSpace:
    """A task's sketches, what has been measured of it in this session, and the programs every initial
    population starts from (`seeds`: the default schedule's program, programs fitted from similar tasks' best
    records)."""
    task: Task
    sketches: list = field(default_factory=list)
    seeds: list = field(default_factory=list)  # of Program
    measured: dict = field(default_factory=dict)  # schedule JSON -> cost in seconds (inf for errors)
    programs: dict = field(default_factory=dict)  # schedule JSON -> Program (this session's)

    @staticmethod
    def of(task: Task, rules=None) -> "SearchSpace":
        return SearchSpace(task, generate_sketches(task, rules))

    def best_measured(self, k: int) -> list[Program]:
        ok = sorted((c, j) for j, c in self.measured.items() if np.isfinite(c) and j in self.programs)
        return [self.programs[j] for _, j in ok[:k]]

    def record(self, schedule: Schedule, cost: float, program: Program | None = None):
        key = schedule.to_json()
        self.measured[key] = cost
        if program is not None:
            self.programs[key] = program


def _concrete(space: SearchSpace, prog: Program, initial) -> Schedule | None:
    try:
        return concretize(space.sketches[prog.sketch_id], prog, initial)
    except ScheduleError:
        return None


def evolutionary_search(space: SearchSpace, model, batch_size: int, rng: random.Random,
                        params: dict | None = None, exclude=()) -> list[tuple[Program, Schedule]]:
    """The next batch of programs to measure for this task: `batch_size` new (unmeasured) legal programs, none of
    the schedule JSONs in `exclude` (already in the caller's batch)."""
    p = dict(SEARCH_PARAMS, **(params or {}))
    initial = space.task.initial_state()
    t0 = time.perf_counter()
    share = p["time_budget_s"] / (p["generations"] + 1)  # each generation's part of the budget
    pop: dict[str, tuple[Program, Schedule]] = {}
    for prog in space.seeds:  # first: a generation cut short by the budget still predicts them
        sch = _concrete(space, prog, initial)
        if sch is not None:
            pop[sch.to_json()] = (prog, sch)
    rest = [(prog, sch) for prog in space.best_measured(p["elite_measured"])
            if (sch := _concrete(space, prog, initial)) is not None]
    rest += random_programs(space.sketches, initial, p["population"], rng)
    rng.shuffle(rest)  # elites and fresh programs mixed, for the same reason
    for prog, sch in rest:
        pop.setdefault(sch.to_json(), (prog, sch))
    seen: dict[str, tuple[Program, Schedule, float]] = {}
    population = list(pop.values())
    for gen in range(p["generations"] + 1):
        population, scores = _predict_within(model, space.task, population, t0 + share * (gen + 1),
                                             p["min_population"])
        for (prog, sch), sc in zip(population, scores):
            seen.setdefault(sch.to_json(), (prog, sch, float(sc)))
        if gen == p["generations"] or time.perf_counter() - t0 >= p["time_budget_s"]:
            break
        population = _next_generation(space, population, scores, dict(p, population=len(population)), rng,
                                      initial)
    ranked = sorted(seen.values(), key=lambda t: -t[2])
    n_random = int(round(batch_size * p["eps_random"]))
    batch, keys = [], set(exclude)
    for prog, sch, _ in ranked:
        key = sch.to_json()
        if key in space.measured or key in keys:
            continue
        batch.append((prog, sch))
        keys.add(key)
        if len(batch) >= batch_size - n_random:
            break
    for prog, sch in random_programs(space.sketches, initial, batch_size * 3, rng):
        if len(batch) >= batch_size:
            break
        key = sch.to_json()
        if key not in space.measured and key not in keys:
            batch.append((prog, sch))
            keys.add(key)
    return batch


def _predict_within(model, task, population: list, deadline: float, at_least: int) -> tuple[list, np.ndarray]:
    """Predict the population's programs in chunks, stopping at the first chunk that ends past the deadline
    (at_least programs are predicted in any case); returns the predicted programs and their scores."""
    chunk = max(1, at_least)
    done, scores = 0, []
    while done < len(population):
        scores.append(_predict(model, task, [s for _, s in population[done:done + chunk]]))
        done = min(done + chunk, len(population))
        if time.perf_counter() >= deadline:
            break
    return population[:done], np.concatenate(scores) if scores else np.zeros(0)


def _predict(model, task, schedules) -> np.ndarray:
    if not schedules:
        return np.zeros(0)
    return np.asarray(model.predict(task, schedules), dtype=np.float64)


def _next_generation(space, population, scores, p, rng, initial):
    """Parents drawn by roulette on predicted fitness; children by mutation or crossover; illegal ones dropped."""
    cdf = np.cumsum(roulette_weights(scores))
    pick = lambda: population[min(int(np.searchsorted(cdf, rng.random() * cdf[-1])), len(population) - 1)][0]
    out, tries = [], 0
    while population and len(out) < p["population"] and tries < p["population"] * 4:
        tries += 1
        a = pick()
        if rng.random() < p["mutation_prob"]:
            child = mutate(space.sketches, a, rng)
        else:
            child = crossover(space.sketches, a, pick(), rng)
        sch = _concrete(space, child, initial)
        if sch is not None:
            out.append((child, sch))
    return out or population


def roulette_weights(scores) -> np.ndarray:
    """Selection probabilities proportional to predicted fitness (shifted to be positive)."""
    w = np.asarray(scores, dtype=np.float64)
    finite = w[np.isfinite(w)]
    if not finite.size:
        return np.full(len(w), 1.0 / max(len(w), 1))
    w = np.where(np.isfinite(w), w, finite.min() - 1.0)  # unscorable programs: least likely, still possible
    w = w - w.min() + 1e-9 * (1 + abs(w).max())
    return w / w.sum()

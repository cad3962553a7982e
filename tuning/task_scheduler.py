"""Ansor's gradient-based task scheduler (section 6): spend tuning rounds where they shorten end-to-end latency
most. The gradient is a pure function of the history, unit-tested on its own.

Objective: f = sum_i w_i * g_i, with g_i the best latency of task i so far and w_i its weight (occurrences).
For task i after t_i rounds:

    dg_i/dt_i ~= alpha * (g_i(t_i) - g_i(t_i - window)) / window
                 + (1 - alpha) * min(-g_i(t_i) / t_i,  beta * C_i / V_i - g_i(t_i))

where C_i is the task's FLOPs and V_i the best throughput (FLOP/s) reached by a similar task (same op kind):
the first term is the backward difference, the second an optimistic guess of how much further it can go.
df/dt_i = w_i * dg_i/dt_i. The next task is the one with the most negative gradient, chosen with probability
1 - eps (else a random live task). Every task gets one round first (the warm-up), the heaviest first (weight x
FLOPs, descending): a model of many tasks (GoogLeNet: 71) may not finish its warm-up within the time budget, and
the tasks left without a round then are the ones that matter least (they keep their default schedules). A task
whose best has not improved for `patience` rounds stops early.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

SCHEDULER_PARAMS = {"alpha": 0.2, "beta": 2.0, "window": 3, "eps": 0.05, "patience": 6}


def task_gradient(history: list[float], weight: float, flops: float, similar_best_flops_per_s: float,
                  alpha: float = 0.2, beta: float = 2.0, window: int = 3) -> float:
    """df/dt_i for one task. history[r] = best latency (s) after round r of this task (non-increasing)."""
    t = len(history)
    if t == 0:
        return -np.inf  # never tuned: most urgent
    g = history[-1]
    if not np.isfinite(g):
        return -np.inf
    w = min(window, t - 1)
    backward = (history[-1] - history[-1 - w]) / w if w > 0 else 0.0
    optimistic = -g / t
    if similar_best_flops_per_s > 0 and flops > 0:
        optimistic = min(optimistic, beta * flops / similar_best_flops_per_s - g)
    return weight * (alpha * backward + (1 - alpha) * optimistic)


def objective(best: list[float], weights: list[float]) -> float:
    """Estimated end-to-end latency: sum of weight x best latency."""
    return float(sum(w * g for w, g in zip(weights, best)))


@dataclass
class TaskScheduler:
    weights: list
    flops: list
    groups: list  # similarity group of each task (e.g. its anchor op), for the optimistic guess
    params: dict = field(default_factory=lambda: dict(SCHEDULER_PARAMS))
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    history: list = field(default_factory=list)  # per task: best latency after each of its rounds
    stale: list = field(default_factory=list)  # per task: rounds since its best improved

    def __post_init__(self):
        n = len(self.weights)
        self.history = self.history or [[] for _ in range(n)]
        self.stale = self.stale or [0] * n

    def alive(self) -> list[int]:
        return [i for i in range(len(self.weights)) if self.stale[i] < self.params["patience"]]

    def gradients(self) -> np.ndarray:
        best_rate = {}
        for i, h in enumerate(self.history):
            if h and np.isfinite(h[-1]) and h[-1] > 0:
                best_rate[self.groups[i]] = max(best_rate.get(self.groups[i], 0.0), self.flops[i] / h[-1])
        p = self.params
        return np.array([task_gradient(h, self.weights[i], self.flops[i], best_rate.get(self.groups[i], 0.0),
                                       p["alpha"], p["beta"], p["window"]) for i, h in enumerate(self.history)])

    def warm_up_order(self) -> list[int]:
        """The tasks by weight x FLOPs, heaviest first (ties: in task order)."""
        return sorted(range(len(self.weights)), key=lambda i: (-self.weights[i] * self.flops[i], i))

    def next_task(self) -> int | None:
        """The task to tune next, or None when every task has stopped."""
        for i in self.warm_up_order():  # warm-up: until each task has one round
            if not self.history[i]:
                return i
        live = self.alive()
        if not live:
            return None
        if self.rng.random() < self.params["eps"]:
            return self.rng.choice(live)
        grads = self.gradients()
        return min(live, key=lambda i: (grads[i], i))

    def stop(self, task: int) -> None:
        """Tune this task no more (e.g. early stopping: no improvement in many trials)."""
        self.stale[task] = self.params["patience"]

    def update(self, task: int, best_latency: float):
        h = self.history[task]
        prev = h[-1] if h else np.inf
        h.append(min(prev, best_latency))
        self.stale[task] = 0 if best_latency < prev * (1 - 1e-3) else self.stale[task] + 1

    def estimated_latency(self, fallback: list[float]) -> float:
        best = [h[-1] if h and np.isfinite(h[-1]) else fb for h, fb in zip(self.history, fallback)]
        return objective(best, self.weights)

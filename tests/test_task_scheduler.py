"""The task scheduler's gradient (a pure function of the history) and its choices."""
import random

import numpy as np
import pytest

from tuning.task_scheduler import TaskScheduler, objective, task_gradient


def test_gradient_backward_difference_and_optimistic_term():
    # alpha=1: pure backward difference over the window, times the weight
    g = task_gradient([10.0, 8.0, 6.0, 5.0], weight=2.0, flops=0, similar_best_flops_per_s=0, alpha=1.0, window=3)
    assert g == pytest.approx(2.0 * (5.0 - 10.0) / 3)
    # alpha=0: optimistic guess min(-g/t, beta*C/V - g)
    g = task_gradient([4.0, 4.0], weight=1.0, flops=100.0, similar_best_flops_per_s=100.0, alpha=0.0, beta=2.0)
    assert g == pytest.approx(min(-4.0 / 2, 2.0 * 100 / 100 - 4.0))
    assert task_gradient([], 1.0, 1.0, 1.0) == -np.inf  # never tuned: most urgent
    # a task that stopped improving and is already as fast as similar tasks has a smaller (less negative) pull
    flat = task_gradient([1.0] * 5, 1.0, 100.0, 100.0)
    falling = task_gradient([4.0, 3.0, 2.0, 1.5, 1.0], 1.0, 100.0, 100.0)
    assert falling < flat


def test_warm_up_goes_heaviest_first_then_gradient_decides():
    s = TaskScheduler(weights=[1, 1, 1], flops=[1e6] * 3, groups=["a"] * 3, rng=random.Random(0))
    s.params["eps"] = 0.0
    order = []
    for lat in ([1.0], [1.0], [1.0]):
        i = s.next_task()
        order.append(i)
        s.update(i, lat[0])
    assert order == [0, 1, 2]  # equal weight x FLOPs: in task order
    # task 1 keeps improving fast, and it carries a large weight: the gradient says tune it
    s.weights[1] = 5
    s.update(1, 0.5)
    s.update(0, 1.0)
    s.update(2, 1.0)
    grads = s.gradients()
    assert s.next_task() == int(np.argmin(grads)) == 1


def test_warm_up_order_is_weight_times_flops_descending():
    # a 71-task model may not finish its warm-up in the budget: the tasks left without a round must be the light ones
    s = TaskScheduler(weights=[1, 3, 1, 2], flops=[1e3, 1e6, 5e6, 1e6], groups=["a"] * 4, rng=random.Random(0))
    order = []
    while (i := s.next_task()) is not None and not s.history[i]:
        order.append(i)
        s.update(i, 1.0)
    assert order == [2, 1, 3, 0]  # 5e6, 3e6, 2e6, 1e3


def test_patience_stops_a_task():
    s = TaskScheduler(weights=[1, 1], flops=[1.0, 1.0], groups=["a", "b"], rng=random.Random(0))
    s.params["patience"] = 2
    s.update(0, 1.0)
    s.update(1, 1.0)
    s.update(0, 1.0)
    s.update(0, 1.0)
    assert s.alive() == [1]
    s.update(1, 1.0)
    s.update(1, 1.0)
    assert s.next_task() is None


def test_objective_is_weighted_sum():
    assert objective([1.0, 2.0], [3, 1]) == 5.0

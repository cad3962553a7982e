"""AutoTVM-style templates and tuners (tuning/autotvm): the space, the tuners on synthetic costs, diversity-aware
selection against brute force, transfer learning, and templates on real tasks."""
import itertools
import math
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.schedule import ScheduleError
from compiler.task import Task
from relayish import te
from test_sketch import matmul_task
from tuning.autotvm import (ConfigSpace, GATuner, GridSearchTuner, RandomTuner, XGBTuner, diversity_objective,
                            find_template, select_diverse)
from tuning.autotvm.space import split_entities

TARGET = (3, 5, 1, 6, 2, 7)


def knob_space(n_knobs=6, values=8) -> ConfigSpace:
    s = ConfigSpace()
    for j in range(n_knobs):
        s.define_knob(f"k{j}", list(range(values)))
    return s


def synthetic_cost(space, i, target=TARGET, scale=1.0) -> float:
    """A smooth bowl over the knob values with its minimum (scale) at `target`."""
    return scale * (1.0 + sum((a - b) ** 2 for a, b in zip(space.point2knob(i), target)))


def drive(tuner, n, cost=synthetic_cost, batch=16):
    """next_batch/update until n trials (or the space is exhausted); the costs in trial order."""
    while len(tuner.xs) < n and tuner.has_next():
        b = tuner.next_batch(min(batch, n - len(tuner.xs)))
        tuner.update(b, [cost(tuner.space, i) for i in b])
    return tuner.ys


def test_config_space_enumerates_its_product():
    s = ConfigSpace()
    s.define_split("tile", 24, num_outputs=3, max_factor=4)
    s.define_reorder("order", 3, policy="all")
    s.define_annotate("ann", 2, policy="try_unroll_vec")
    s.define_knob("k", [0, 16, 64])
    assert s.dims == [len(split_entities(24, 3, 4)), 6, 6, 3] and len(s) == int(np.prod(s.dims))
    assert all(int(np.prod(e.size)) == 24 and e.size[-1] <= 4 for e in s.space_map["tile"])
    assert [s.knob2point(s.point2knob(i)) for i in range(len(s))] == list(range(len(s)))
    cfg = s.get(len(s) - 1)
    assert cfg["k"].val == 64 and len(cfg.features()) == 3 + 3 + 2 + 1
    with pytest.raises(IndexError):
        s.get(len(s))
    with pytest.raises(ValueError, match="defined twice"):
        s.define_knob("k", [1])


def test_grid_visits_each_configuration_once():
    space = knob_space(3, 5)
    tuner = GridSearchTuner(space=space)
    drive(tuner, 10 ** 6, batch=7)
    assert tuner.xs == list(range(len(space))) and not tuner.has_next()
    assert tuner.next_batch(4) == []


def test_random_tuner_never_repeats_and_exhausts_the_space():
    tuner = RandomTuner(space=knob_space(2, 6), seed=1)
    drive(tuner, 10 ** 6, batch=5)
    assert sorted(tuner.xs) == list(range(36))


def test_ga_beats_random_on_a_synthetic_cost():
    best = {}
    for cls in (RandomTuner, GATuner):
        best[cls.__name__] = [min(drive(cls(space=knob_space(), seed=s), 256)) for s in range(4)]
    assert np.mean(best["GATuner"]) < np.mean(best["RandomTuner"]), best


@pytest.mark.parametrize("seed", range(25))
def test_diversity_selection_maximizes_l_against_brute_force(seed):
    rng = random.Random(seed)
    n, m = rng.randint(3, 9), rng.randint(1, 4)
    k = rng.randint(1, min(n, 5))
    scores = [rng.uniform(0, 1) for _ in range(n)]
    knobs = [[rng.randrange(3) for _ in range(m)] for _ in range(n)]
    alpha = rng.choice([0.0, 0.05, 0.3, 2.0])
    got = select_diverse(scores, knobs, k, alpha)
    best = max(diversity_objective(c, scores, knobs, alpha) for c in itertools.combinations(range(n), k))
    assert len(set(got)) == k and diversity_objective(got, scores, knobs, alpha) == pytest.approx(best)


def test_diversity_trades_score_for_coverage():
    scores = [1.0, 0.99, 0.5]
    knobs = [[0, 0], [0, 0], [1, 1]]  # the second is a copy of the first's knob values
    assert select_diverse(scores, knobs, 2, alpha=0.0) == [0, 1]
    assert select_diverse(scores, knobs, 2, alpha=0.5) == [0, 2]


def test_xgb_tuner_finds_the_optimum_of_a_synthetic_cost():
    ys = drive(XGBTuner(space=knob_space(), seed=0), 96)
    assert min(ys) <= 2.0  # optimum 1.0, next ring 2.0; random search reaches about 8 in 256 trials


def test_transfer_learning_guides_the_first_batch():
    """A global model from another workload (its optimum shifted by one on one knob, costs 3x lower) makes the
    first batch on the new workload better than a cold model's (random) one."""
    space = knob_space()
    hist = random.Random(0).sample(range(len(space)), 200)
    feats = [space.get(i).features() for i in hist]
    costs = [synthetic_cost(space, i) for i in hist]
    shifted = (4,) + TARGET[1:]
    target_cost = lambda sp, i: synthetic_cost(sp, i, shifted, 3.0)
    cold, warm = [], []
    for seed in range(3):
        cold.append(min(drive(XGBTuner(space=knob_space(), seed=seed), 16, target_cost)))
        w = XGBTuner(space=knob_space(), seed=seed)
        w.load_history_arrays(feats, costs, ["other"] * len(feats))
        warm.append(min(drive(w, 16, target_cost)))
    assert np.mean(warm) < np.mean(cold), (warm, cold)


def tagged_matmul(m, n, k, batch=None):
    """nn.matmul's compute shape (tag "matmul"), with a relu epilogue."""
    lead = (batch,) if batch else ()
    A = te.placeholder(lead + (m, k), name="A")
    B = te.placeholder(lead + (k, n), name="B")
    r = te.reduce_axis(k, "r")
    C = te.compute(lead + (m, n), lambda *i: te.sum(A[i[:-1] + (r,)] * B[i[:-2] + (r, i[-1])], r), name="matmul",
                   tag="matmul")
    D = te.compute(lead + (m, n), lambda *i: te.max_(C[i], 0.0), name="relu")
    return Task("test", "matmul", None, [A, B], [D], 2.0 * m * n * k * (batch or 1))


def test_templates_match_their_tasks_and_instantiate():
    assert find_template(matmul_task(4, 8, 16)) is None  # an untagged reduction: no template, default schedule
    assert find_template(tagged_matmul(4, 8, 16, batch=3)).name == "batch_matmul"
    task = tagged_matmul(6, 8, 12)
    tuner = RandomTuner(task, seed=0)
    assert tuner.template.name == "matmul" and len(tuner.space) > 1
    for i in tuner.next_batch(20):
        try:
            tuner.instantiate(i)
        except ScheduleError:
            pytest.fail(f"configuration {tuner.space.get(i)} does not instantiate")


def test_transfer_bench_counts_trials_to_a_target_and_refuses_a_model_without_the_template(tmp_path):
    """bench.transfer's measure of a run (trials until the best so far reaches the target) and its clear refusal
    of a model with no task its template fits (the tool itself is run on real models for the README)."""
    from relayish_tools.bench.transfer import run, trials_to
    assert trials_to([5.0, 3.0, 2.0, 2.0], 2.1) == 3 and trials_to([5.0, 3.0], 1.0) == math.inf
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8))
    path = str(tmp_path / "relu.onnx")
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(SystemExit, match="no task of .* fits the AutoTVM template 'conv2d_nchwc'"):
        run(str(tmp_path / "none.db"), path, "conv2d_nchwc", 2, 8, 4, 1, log=lambda msg: None)

"""The tuner's search space contains the hand-written default schedules (issue 13, item 1): for every task of the
suite's models, some sketch + annotation replays the default schedule's step list exactly; the tuner starts from
that program and from the best records of other shapes of the same computation."""
from __future__ import annotations

import functools
import random

import pytest

import models
from compiler.records import RecordStore
from compiler.codegen import host_target
from frontends.onnx import OnnxImportError
from tuning.annotate import concretize, derive_program, mutate
from tuning.search import SEARCH_PARAMS, SearchSpace, evolutionary_search
from tuning.sketch import generate_sketches
from tuning.tune import _default_schedule, model_tasks, seed_space

# every suite model, at its real input size (the shapes decide tile variants); classifiers narrowed (same ops)
SUITE_MODELS = {
    "mobilenet_v2": ("make_mobilenet_v2", {}),
    "shufflenet_v1": ("make_shufflenet_v1", {}),
    "squeezenet1_1": ("make_squeezenet", {}),
    "googlenet": ("make_googlenet", {}),
    "densenet121": ("make_densenet", {}),
    "alexnet": ("make_alexnet", dict(classifier_width=64)),
    "vgg11": ("make_vgg", dict(classifier_width=64)),
    "bert": ("make_bert", {}),
    "gpt": ("make_gpt", {}),
}


def default_replays(task):
    """derive_program finds the sketch and the decisions of the task's default schedule; replaying them gives the
    default's steps exactly. Returns the program."""
    default = _default_schedule(task)
    sketches = generate_sketches(task)
    prog = derive_program(sketches, default, task.initial_state())
    assert prog is not None, f"{task.name}: no sketch + annotation gives the default schedule {default.to_json()}"
    assert concretize(sketches[prog.sketch_id], prog, task.initial_state()).steps == default.steps
    return prog


@functools.lru_cache(maxsize=None)
def resnet18_tasks(path) -> tuple:
    return tuple(model_tasks(str(path)))


def check_model(model):
    tasks = resnet18_tasks(model) if isinstance(model, str) else model_tasks(model)
    assert tasks
    for task in tasks:
        default_replays(task)


def test_every_resnet18_default_schedule_is_in_the_search_space(resnet18_path):
    check_model(str(resnet18_path))


@pytest.mark.parametrize("name", SUITE_MODELS)
def test_every_suite_default_schedule_is_in_the_search_space(name):
    make, options = SUITE_MODELS[name]
    model = getattr(models, make)(**options)
    try:
        check_model(model)
    except OnnxImportError as e:
        pytest.skip(f"{name} does not import yet: {str(e).splitlines()[0]}")


def test_register_tile_of_the_default_conv_is_a_sketch(resnet18_path):
    """The default conv's tile (2 output-channel blocks x columns x 16 lanes at a loop of the fused relu, the
    reductions outside) comes from the register-tile rule, and mutating it keeps that structure."""
    task = next(t for t in resnet18_tasks(str(resnet18_path)) if t.ops == ["nn.conv2d_nchwc", "add", "nn.relu"])
    prog = default_replays(task)
    sketches = generate_sketches(task)
    assert sketches[prog.sketch_id].rules == ["register-tile(conv2d_nchwc->relu)"]
    rng = random.Random(0)
    child = mutate(sketches, prog, rng)
    state = concretize(sketches[child.sketch_id], child, task.initial_state()).apply(task.initial_state())
    conv = state.stage("conv2d_nchwc")
    assert conv.loc.is_at("relu")
    kinds = [i.kind for i in conv.leaves]
    assert kinds[-3:] == ["spatial"] * 3 and "reduce" in kinds[:-3]


def test_initial_population_holds_the_default_and_similar_tasks_best(tmp_path, resnet18_path):
    """seed_space puts the default's program first, then programs fitted from the best record of another shape of
    the same fused conv; evolutionary search starts from them (its population holds the default schedule)."""
    tasks = [t for t in resnet18_tasks(str(resnet18_path)) if t.name == "fused_conv2d_nchwc_add_relu"]
    assert len(tasks) >= 2
    a, b = tasks[:2]
    target = host_target()
    with RecordStore(str(tmp_path / "r.db")) as store:
        store.add(b, target, _default_schedule(b), costs=[1e-3])
        space = SearchSpace.of(a)
        assert seed_space(space, _default_schedule(a), store, target) == 2
        first = concretize(space.sketches[space.seeds[0].sketch_id], space.seeds[0], a.initial_state())
        assert first == _default_schedule(a)
        fitted = concretize(space.sketches[space.seeds[1].sketch_id], space.seeds[1], a.initial_state())
        fitted.apply(a.initial_state())  # legal for a's shapes
    seen = []

    class Recorder:
        def predict(self, task, schedules):
            seen.extend(s.to_json() for s in schedules)
            return [0.0] * len(schedules)

    evolutionary_search(space, Recorder(), 4, random.Random(0), params={"population": 8, "generations": 1})
    assert _default_schedule(a).to_json() in seen


def test_a_round_of_search_keeps_to_its_time_budget(resnet18_path):
    """Predicting a program lowers it and extracts its features: 0.3-0.4 s for a Winograd convolution, and the full
    population and generations took ~110 s a round for each of ResNet-18's Winograd tasks. A model as slow as
    that (here 0.05 s a program) must still give a full batch of new programs within the budget, seeds
    predicted; without the budget this search predicts >= 64 x 4 programs (> 12 s)."""
    import time
    task = next(t for t in resnet18_tasks(str(resnet18_path)) if t.name == "fused_conv2d_nchwc_add_relu")
    space = SearchSpace.of(task)
    space.seeds = [derive_program(space.sketches, _default_schedule(task), task.initial_state())]
    predicted = []

    class Slow:
        def predict(self, task, schedules):
            time.sleep(0.05 * len(schedules))
            predicted.extend(s.to_json() for s in schedules)
            return [random.random() for _ in schedules]

    t0 = time.perf_counter()
    batch = evolutionary_search(space, Slow(), 16, random.Random(0), params={"time_budget_s": 2.0})
    elapsed = time.perf_counter() - t0
    assert elapsed < 4.0, f"the search took {elapsed:.1f} s on a 2 s budget"
    assert len(batch) == 16 and len({s.to_json() for _, s in batch}) == 16
    assert _default_schedule(task).to_json() in predicted
    assert len(predicted) >= 4 * SEARCH_PARAMS["min_population"]  # each generation predicts at least that many


def test_a_program_found_this_session_seeds_the_similar_tasks_next_round(tmp_path, resnet18_path):
    """Each round re-seeds its task from the best records of similar tasks (same fused ops, other shapes) as they are
    then, not only as they were when tuning started: a tile found for one shape this session is where the others
    start (tuning from plain loop nests, nothing is in the records at the start)."""
    from tuning.tune import TUNE_PARAMS, Tuner
    a, b = [t for t in resnet18_tasks(str(resnet18_path)) if t.name == "fused_conv2d_nchwc_add_relu"][:2]
    target = host_target()
    with RecordStore(str(tmp_path / "r.db")) as store:
        tuner = Tuner([a, b], store, target, dict(TUNE_PARAMS))
        try:
            assert len(tuner.spaces[0].seeds) == 1  # a's default only: nothing measured yet
            store.add(b, target, _default_schedule(b), costs=[1e-4])  # b's round found a program
            tuner.default[a.key] = 1.0  # a's first round is over (else its batch starts with its default)
            tuner._next_batch(0, None)
            assert len(tuner.spaces[0].seeds) == 2
            fitted = concretize(tuner.spaces[0].sketches[tuner.spaces[0].seeds[1].sketch_id], tuner.spaces[0].seeds[1],
                                a.initial_state())
            fitted.apply(a.initial_state())  # b's program, fitted to a's shapes
        finally:
            tuner.close()


CROSSOVERS = """
import hashlib, random, sys
from tuning.annotate import crossover, random_programs
from tuning.sketch import generate_sketches
from tuning.tune import model_tasks
task = next(t for t in model_tasks(sys.argv[1]) if t.name == "fused_conv2d_nchwc_add_relu")
sketches, rng = generate_sketches(task), random.Random(0)
progs = [p for p, _ in random_programs(sketches, task.initial_state(), 24, rng)]
children = [crossover(sketches, rng.choice(progs), rng.choice(progs), rng) for _ in range(300)]
print(hashlib.sha256(repr([(c.sketch_id, c.tiles, sorted(c.parallel.items()), sorted(c.unroll.items()),
                            sorted(c.loc.items()), sorted(map(repr, c.simple.items()))) for c in children]).encode()
                     ).hexdigest())
"""


def test_crossover_is_the_same_whatever_the_process_hash_seed(resnet18_path):
    """A search's programs depend on its seed alone, not on the process: crossover walks the stages in a fixed
    order (a set of strings iterates in the order of the process's hash seed, and each stage draws a random
    number), so that zero-shot and the tuner give the same schedules in another process."""
    import os
    import subprocess
    import sys
    digests = set()
    for hash_seed in ("1", "2", "3", "4"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", CROSSOVERS, str(resnet18_path)], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        digests.add(out.stdout.strip())
    assert len(digests) == 1, f"crossover's children differ with the hash seed: {digests}"

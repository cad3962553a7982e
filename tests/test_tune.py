"""tune_model end to end on a tiny model (two tasks, a few trials): the records are written, a second run resumes
from them without measuring a program again, and compile_model applies the best ones."""
from __future__ import annotations

import time
import zlib

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.codegen import host_target
from frontends import from_onnx
from relayish.interp import evaluate
from compiler.records import RecordStore
from compiler.schedule import Schedule
from tuning.measure import GIVE_UP_MIN_S
from tuning.tune import Budget, _default_schedule, tune_model

PARAMS = {"batch_size": 3, "final_remeasure": 0}


def conv_pool() -> onnx.ModelProto:
    """conv 3x3 -> max pool 2x2: two tasks in the NCHW layout."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["y"], ["z"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "conv_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 8, 8))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, 8, 4, 4))], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def schedules_by_task(db, tasks) -> dict:
    with RecordStore(db) as store:
        return {t.key: store.records(t.key, target=host_target()) for t in tasks}


def test_tune_model_writes_records_resumes_and_compile_model_applies_them(tmp_path):
    model = conv_pool()
    path, db = str(tmp_path / "conv_pool.onnx"), str(tmp_path / "tuned.db")
    onnx.save(model, path)

    first = tune_model(path, db, trials=6, layout="NCHW", params=PARAMS, progress=False, check_model=False)
    assert len(first.tasks) == 2 and first.trials == 6
    before = schedules_by_task(db, first.tasks)
    assert {k: len(r) for k, r in before.items()} == first.trials_per_task == {t.key: 3 for t in first.tasks}
    assert all(any(r.ok for r in recs) for recs in before.values())

    logs = []
    second = tune_model(path, db, trials=6, layout="NCHW", log=logs.append, check_model=False,
                        params=dict(PARAMS, final_remeasure=2, remeasure_rounds=1))
    assert "resumed: 6 measured programs from the records database" in logs
    after = schedules_by_task(db, second.tasks)
    with RecordStore(db) as store:  # what compile_model applies: the best record, unless a verdict kept the default
        applied = {t.key: store.best_record(t.key) for t in second.tasks}
    for task in second.tasks:
        old = before[task.key]
        new = after[task.key][len(old):len(old) + second.trials_per_task[task.key]]  # the rounds, not the re-measure
        assert new and all(r.run_id != old[0].run_id for r in new)
        seen = {r.schedule.to_json() for r in old}
        default = _default_schedule(task).to_json()  # measured again in every session: the table's baseline
        searched = [r.schedule.to_json() for r in new if r.schedule.to_json() != default]
        assert searched and not seen & set(searched), "a program measured in the first run was measured again"
        assert len(after[task.key]) > len(old) + len(new)  # the final re-measure added readings
        record = applied[task.key]  # None: its best program lost to the default side by side in the re-measure
        assert second.best[task.key] == (min(r.cost for r in after[task.key] if r.ok) if record is not None
                                         else second.default[task.key])

    module = compile_model(path, layout="NCHW", records=db)
    assert module.meta["compile_info"]["tuned_tasks"] == sum(r is not None for r in applied.values())
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    expected = evaluate(from_onnx(model), {"x": x})[0]
    assert np.max(np.abs(module.run(None, {"x": x})[0] - expected)) <= 1e-4 * np.max(np.abs(expected))


def test_a_resumed_run_does_not_take_a_rejected_lucky_reading_for_its_best(tmp_path):
    """A record whose lowest reading a verdict rejected (it lost side by side or in the model) is not what
    compile_model applies; a resumed run's best for the task is then its default's fastest reading."""
    from tuning.tune import TUNE_PARAMS, Tuner, model_tasks
    model = conv_pool()
    path, db = str(tmp_path / "conv_pool.onnx"), str(tmp_path / "r.db")
    onnx.save(model, path)
    tasks = model_tasks(path, layout="NCHW")
    task, target = tasks[0], host_target()
    default = _default_schedule(task)
    lucky = Schedule()  # the naive loop nest stands in for a candidate that read impossibly fast once
    with RecordStore(db) as store:
        store.add(task, target, default, [2e-3])
        store.add(task, target, lucky, [1e-9])
        store.add_verdict(task.key, target, lucky, 1e-9, 2e-3, keep_default=True)
        tuner = Tuner(tasks, store, target, dict(TUNE_PARAMS))
        try:
            assert tuner.best[task.key] == 2e-3
        finally:
            tuner.close()


class _Scored:
    """A stand-in cost model: a fixed pseudo-random score in [0, 1) per program, 1 more for its favourite,
    remembered; pretrained when it has metadata (as tuning.pretrained.load_cost_model's)."""

    def __init__(self, metadata, favourite: str):
        self.metadata, self.favourite, self.scores = metadata, favourite, {}

    def predict(self, task, schedules):
        keys = [s.to_json() for s in schedules]
        scores = [zlib.crc32(k.encode()) / 2 ** 32 + (k == self.favourite) for k in keys]
        self.scores.update(zip(keys, scores))
        return np.array(scores)

    def update(self, records, background=False):
        pass

    def wait(self):
        pass


@pytest.mark.parametrize("start", ["hand-written", "naive"])
def test_a_pretrained_model_warm_starts_each_task_with_its_few_best_scored_programs(tmp_path, start):
    """With a pretrained cost model, a task's first round measures its default and the model's best-scored
    programs, warm_start's batch in all, none random and the default not twice; a cold model's first round is a
    whole batch; later rounds are whole batches either way."""
    from tuning.tune import TUNE_PARAMS, Tuner, model_tasks
    path = str(tmp_path / "conv_pool.onnx")
    onnx.save(conv_pool(), path)
    task = model_tasks(path, layout="NCHW")[0]
    params = dict(TUNE_PARAMS, batch_size=8)
    warm = params["warm_start"]["batch_size"]
    for metadata, first_size in (({"trained_on": {"programs": 1}}, warm), (None, 8)):
        with RecordStore(str(tmp_path / f"{start}-{metadata is None}.db")) as store:
            default = _default_schedule(task, start).to_json()
            model = _Scored(metadata, favourite=default)  # the search's best is the default, already in the batch
            tuner = Tuner([task], store, host_target(), params, start=start, cost_model=model)
            try:
                batch = tuner._next_batch(0, None)
                assert batch[0] == (None, tuner.defaults[task.key]) and len(batch) == first_size
                chosen = [s.to_json() for _, s in batch[1:]]
                assert default not in chosen and len(set(chosen)) == len(chosen)
                if metadata:
                    ranked = sorted(((sc, k) for k, sc in model.scores.items() if k != default), reverse=True)
                    assert chosen == [k for _, k in ranked[:warm - 1]]
                tuner.default[task.key] = 1.0  # the first round is over
                assert len(tuner._next_batch(0, None)) == 8
            finally:
                tuner.close()


def test_budget_counts_trials_and_seconds():
    by_trials = Budget(trials=5, seconds=None, t_start=time.perf_counter())
    assert by_trials.left(4) and not by_trials.left(5) and by_trials.trials_left(3) == 2
    by_time = Budget(trials=None, seconds=60.0, t_start=time.perf_counter() - 61)
    assert not by_time.left(0) and by_time.trials_left(100) is None
    assert str(Budget(10, 60.0, 0.0)) == "10 trials / 60 s" and str(by_time) == "60 s"


def test_naive_default_schedules_compute_the_right_results():
    """default_schedules="naive": every task without a record runs the plain loop nest (no steps), still right."""
    import models

    model = models.make_squeezenet(image_size=64)
    module = compile_model(model, default_schedules="naive")
    assert module.meta["compile_info"]["default_schedules"] == "naive"
    assert module.meta["compile_info"]["tuned_tasks"] == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    expected = evaluate(from_onnx(model), {"input": x})[0]
    assert np.max(np.abs(module.run(None, {"input": x})[0] - expected)) <= 1e-4 * np.max(np.abs(expected))
    with pytest.raises(ValueError, match="default_schedules must be one of"):
        compile_model(model, default_schedules="none")


def test_tuning_from_the_naive_loop_nest(tmp_path):
    """start="naive": the baseline each task measures first (and re-measures at the end) is the empty schedule,
    not the hand-written one, and compile_model(default_schedules="naive") with the records is right."""
    model = conv_pool()
    path, db = str(tmp_path / "conv_pool.onnx"), str(tmp_path / "naive.db")
    onnx.save(model, path)
    result = tune_model(path, db, trials=6, layout="NCHW", params=dict(PARAMS, final_remeasure=2,
                                                                       remeasure_rounds=1), progress=False,
                        start="naive", check_model=False)
    for key, records in schedules_by_task(db, result.tasks).items():
        remeasured = [r.schedule.to_json() for r in records[result.trials_per_task[key]:]]
        assert records[0].schedule.to_json() == "[]" and "[]" in remeasured
    assert all(np.isfinite(result.default[t.key]) for t in result.tasks)
    module = compile_model(path, layout="NCHW", records=db, default_schedules="naive")
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    expected = evaluate(from_onnx(model), {"x": x})[0]
    assert np.max(np.abs(module.run(None, {"x": x})[0] - expected)) <= 1e-4 * np.max(np.abs(expected))


def test_select_tasks_by_index_range_and_name():
    from types import SimpleNamespace

    from tuning.tune import TaskFilterError, select_tasks

    tasks = [SimpleNamespace(name=n) for n in ("fused_conv2d", "fused_max_pool2d", "fused_conv2d_add", "fused_dense")]
    names = lambda pattern: [t.name for t in select_tasks(tasks, pattern)]
    assert names(None) == names("all") == [t.name for t in tasks]
    assert names("0,2-3") == ["fused_conv2d", "fused_conv2d_add", "fused_dense"]
    assert names("fused_conv2d*") == ["fused_conv2d", "fused_conv2d_add"]
    assert names("3, fused_max*") == ["fused_max_pool2d", "fused_dense"]
    with pytest.raises(TaskFilterError, match="there are 4 tasks"):
        select_tasks(tasks, "2-7")
    with pytest.raises(TaskFilterError, match="picks none of the 4 tasks"):
        select_tasks(tasks, "fused_softmax*")


def test_relayish_tune_with_tvmc_options(tmp_path, capsys):
    """--tasks picks one task, --number/--repeat set the readings, --early-stopping ends a task that stops
    improving before the trial budget; the progress is a tqdm bar with an ETA."""
    from relayish_tools import cli

    path, db = str(tmp_path / "conv_pool.onnx"), str(tmp_path / "r.db")
    onnx.save(conv_pool(), path)
    code = cli.main(["tune", path, "--records", db, "--trials", "40", "--layout", "NCHW", "--tasks", "fused_max*",
                     "--number", "1", "--repeat", "2", "--timeout", "20", "--early-stopping", "2",
                     "--no-model-check"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "tuning 1 of 2 tasks" in err and "every task stopped improving" in err
    assert "trial [" in err and "<" in err  # tqdm: "n/total trial [elapsed<remaining]"
    with RecordStore(db) as store:
        (summary,) = store.tasks()
        records = store.records(summary.key)
    assert summary.name == "fused_max_pool2d" and 2 <= len(records) < 40
    # --repeat 2: two readings each, except a candidate given up after a first call over GIVE_UP_MIN_S (10x the
    # best too): on a loaded machine even a tiny pool's first call can take that long
    assert all(len(r.costs) == 2 or (len(r.costs) == 1 and r.cost >= GIVE_UP_MIN_S) for r in records if r.ok)
    assert len(min((r for r in records if r.ok), key=lambda r: r.cost).costs) == 2
    code = cli.main(["tune", path, "--records", db, "--trials", "3", "--layout", "NCHW", "--tasks", "fused_soft*"])
    assert code != 0 and "picks none of the 2 tasks" in capsys.readouterr().err

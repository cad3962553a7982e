"""In-model timing at the end of tuning (tuning/model_check.py) and the verdicts it leaves in the records: a
tuned program that loses to the untuned one inside the model is not applied by compile_model any more."""
from __future__ import annotations

import sqlite3

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.codegen import host_target
from compiler.records import RecordsReader, RecordStore
from compiler.schedule import Schedule
from tuning.model_check import check_in_model
from tuning.tune import _default_schedule, model_tasks, tune_model

FAST_CHECK = {"repeat": 3, "warmup": 1, "profile_repeat": 3, "profile_rounds": 2}


def conv_relu(channels=16, size=32) -> onnx.ModelProto:
    """conv 3x3 (16 -> 32 channels) -> relu, NCHW: one task, big enough that the naive loop nest is far slower."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2 * channels, channels, 3, 3))
                                .astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes, "conv_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, channels, size, size))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, 2 * channels, size, size))], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_verdict_keeps_the_default_until_a_better_record_comes(tmp_path):
    db = str(tmp_path / "r.db")
    task = model_tasks(conv_relu(), layout="NCHW")[0]
    slow, fast = Schedule(), _default_schedule(task)
    target = host_target()
    with RecordStore(db) as store:
        store.add(task, target, slow, costs=[1e-6])
        assert store.best(task.key) == slow
        assert store.add_verdict(task.key, target, slow, tuned_s=2e-3, default_s=1e-3)  # lost in the model
        assert store.best(task.key) is None and store.best_record(task.key) is None
        with RecordsReader(db, target) as reader:
            assert reader.best(task.key) is None
        store.add(task, target, fast, costs=[1e-7])  # a later, better record has no verdict: it applies
        assert store.best(task.key) == fast
        assert not store.add_verdict(task.key, target, fast, tuned_s=1e-3, default_s=2e-3)
        assert store.best(task.key) == fast


def test_a_database_without_verdicts_still_reads(tmp_path):
    db = str(tmp_path / "old.db")
    task = model_tasks(conv_relu(), layout="NCHW")[0]
    with RecordStore(db) as store:
        store.add(task, host_target(), Schedule(), costs=[1e-3])
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE verdicts")
    with RecordsReader(db, host_target()) as reader:
        assert reader.best(task.key) == Schedule()


def test_a_program_slower_in_the_model_keeps_the_default(tmp_path, monkeypatch):
    """A record claims the naive loop nest is fast; timed inside the model it loses to the default schedule, so
    the check reverts it and compile_model(records=) compiles the default again. One thread: on a machine whose
    cores are taken by other processes a 2-thread kernel waits for a descheduled worker at every barrier (the
    0.14 ms default ran 50 ms), and the single-threaded naive nest could win."""
    import runtime.module
    monkeypatch.setattr(runtime.module, "default_num_threads", lambda: 1)
    model = conv_relu()
    db = str(tmp_path / "r.db")
    task = model_tasks(model, layout="NCHW")[0]
    with RecordStore(db) as store:
        store.add(task, host_target(), Schedule(), costs=[1e-9])
        assert compile_model(model, layout="NCHW", records=store).meta["compile_info"]["tuned_tasks"] == 1
        check = check_in_model(model, store, host_target(), layout="NCHW", params=FAST_CHECK,
                               estimate={task.key: (1e-9, 1e-4)})
    assert check.reverted == [task.key] and check.kept == []
    untuned_ms, tuned_ms = check.task_ms[task.key]
    assert tuned_ms > untuned_ms > 0
    assert check.untuned_ms > 0 and check.tuned_ms > 0
    assert "untuned" in check.format() and "kept their default" in check.format()
    assert check.estimated_ms is not None and abs(check.estimated_ms - 0.1) < 1e-9  # the default's cost
    assert compile_model(model, layout="NCHW", records=db).meta["compile_info"]["tuned_tasks"] == 0


def test_tune_model_ends_by_timing_the_model(tmp_path):
    path, db = str(tmp_path / "m.onnx"), str(tmp_path / "t.db")
    onnx.save(conv_relu(8, 16), path)
    logs = []
    result = tune_model(path, db, trials=3, layout="NCHW", log=logs.append,
                        params={"batch_size": 3, "final_remeasure": 0, "model_check": FAST_CHECK})
    (check,) = result.model_checks
    assert check.untuned_ms > 0 and check.tuned_ms > 0
    assert any(line.startswith(f"model {path}: untuned") for line in logs)
    assert sorted(check.kept + check.reverted) == sorted(k for k in [result.tasks[0].key])
    # the estimate beside the measured latency: the median reading of the program the model runs, not its least
    task = result.tasks[0]
    with RecordStore(db) as store:
        ran = store.best(task.key) if check.kept else _default_schedule(task)
        typical = store.typical_cost(task.key, ran)
    assert typical is not None and check.estimated_ms == pytest.approx(typical * 1e3 * task.weight, rel=1e-9)


def _check_with_timings(tmp_path, monkeypatch, whole_model_ms):
    """check_in_model of conv_relu with one record (its default schedule), the per-task profile saying the tuned
    program wins, and the whole models timed at whole_model_ms = (untuned, tuned): one time each, or the times
    of each round."""
    from runtime.timing import latency_stats
    import tuning.model_check as mc
    model = conv_relu()
    db = str(tmp_path / "r.db")
    task = model_tasks(model, layout="NCHW")[0]
    monkeypatch.setattr(mc, "in_model_task_times", lambda *a: ({task.key: 2.0}, {task.key: 1.0}))
    rounds = [ms if isinstance(ms, list) else [ms] * 5 for ms in whole_model_ms]
    monkeypatch.setattr(mc, "time_blocks", lambda engines, *a, **k: {
        name: dict(latency_stats(np.asarray(ms) * 1e6), rounds_ms=ms)
        for name, ms in zip(("untuned", "tuned"), rounds)})
    with RecordStore(db) as store:
        store.add(task, host_target(), _default_schedule(task), costs=[1e-9])
        check = mc.check_in_model(model, store, host_target(), layout="NCHW", params=FAST_CHECK)
    return check, task, db, model


def test_a_tuned_model_not_faster_end_to_end_keeps_every_default(tmp_path, monkeypatch):
    """Every task won in its profile, but the whole tuned model was slower: all of them revert, and the records
    compile the untuned model (tuning never ends slower than it started)."""
    check, task, db, model = _check_with_timings(tmp_path, monkeypatch, (5.0, 5.1))
    assert check.model_reverted and check.kept == [] and check.reverted == [task.key]
    assert "not faster" in check.format()
    assert compile_model(model, layout="NCHW", records=db).meta["compile_info"]["tuned_tasks"] == 0


def test_the_end_to_end_verdict_is_paired_by_round(tmp_path, monkeypatch):
    """A slow phase of the machine starts mid-run and one tuned run is disturbed: the medians say the tuned model is
    much slower (8.8 against 5.0 ms), yet it was faster in 4 of the 5 rounds, each round's runs back to back: it
    keeps its tasks."""
    untuned, tuned = [5.0, 5.0, 5.0, 9.0, 9.0], [4.9, 4.9, 9.0, 8.8, 8.8]
    check, task, db, model = _check_with_timings(tmp_path, monkeypatch, (untuned, tuned))
    assert check.tuned_ms > check.untuned_ms and check.paired["ratio"] < 1
    assert not check.model_reverted and check.kept == [task.key]
    assert "paired tuned/untuned 0.98" in check.format()


def test_a_tuned_model_faster_end_to_end_keeps_its_tasks(tmp_path, monkeypatch):
    check, task, db, model = _check_with_timings(tmp_path, monkeypatch, (5.0, 4.0))
    assert not check.model_reverted and check.kept == [task.key] and check.reverted == []
    assert compile_model(model, layout="NCHW", records=db).meta["compile_info"]["tuned_tasks"] == 1

"""The three tuning generations on real tasks: every strategy's programs compute the right thing, compile_model
applies the best record whichever strategy wrote it, and tune_compare writes its plot, curves and table."""
import json
import os
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relayish_tools.bench.report import tune_compare_report
from relayish_tools.bench.report_docs import BENCHMARKS, render_section
from compiler import compile_model
from compiler.backend import choose_schedule
from compiler.codegen import host_target
from compiler.records import RecordsReader, RecordStore
from frontends import from_onnx
from relayish.interp import evaluate
from tuning.annotate import random_programs
from tuning.autotvm import GATuner, GridSearchTuner, RandomTuner, XGBTuner, log_to_records
from tuning.autotvm.tuner import MeasureInput
from tuning.compare import format_table, tune_compare
from tuning.cost_model import RandomModel
from tuning.measure import WorkerPool, measure
from tuning.metaschedule.database import Database, TuningRecord
from tuning.metaschedule.search import MetaScheduleSearch
from tuning.sketch import generate_sketches
from tuning.tune import model_tasks

MEASURE = {"number": 1, "repeat": 1, "timeout_s": 20.0}


def conv_dense_model() -> onnx.ModelProto:
    """conv 3x3 (16 -> 32 channels) + bias + relu -> global average pool -> dense 32 -> 32: in NCHWc a
    conv2d_nchwc task and a dense_pack task, both with AutoTVM templates."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, n)
             for n, s in (("w", (32, 16, 3, 3)), ("b", (32,)), ("wd", (32, 32)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wd"], ["z"], transB=1)]
    graph = helper.make_graph(nodes, "conv_dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, 14, 14))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, 32))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cmp") / "conv_dense.onnx")
    onnx.save(conv_dense_model(), path)
    return path


@pytest.fixture(scope="module")
def tasks(model_path):
    ts = model_tasks(model_path, winograd=False)
    return {t.ops[0]: t for t in ts}


def strategy_programs(task, n=3):
    """n programs of the task from each strategy: the four AutoTVM tuners, MetaSchedule's two searches, Ansor."""
    progs = {}
    for cls in (RandomTuner, GridSearchTuner, GATuner, XGBTuner):
        tuner = cls(task, seed=1)
        progs["autotvm-" + cls.__name__] = [tuner.instantiate(i) for i in tuner.next_batch(n)]
    for strategy in ("replay", "evolutionary"):
        search = MetaScheduleSearch(task, RandomModel(1), strategy, seed=1, params={"population": 6, "generations": 1})
        progs["metaschedule-" + strategy] = [s for _, s in search.next_batch(n)]
    sketches = generate_sketches(task)
    progs["ansor"] = [s for _, s in random_programs(sketches, task.initial_state(), n, random.Random(1))]
    return progs


def test_every_strategys_programs_match_the_reference(tasks):
    with WorkerPool(2) as pool:
        for op in ("nn.conv2d_nchwc", "nn.dense_pack"):
            progs = strategy_programs(tasks[op])
            flat = [(name, s) for name, ss in progs.items() for s in ss]
            results = measure(tasks[op], [s for _, s in flat], executor=pool, **MEASURE)  # checks vs numpy
            errors = [(name, r.error) for (name, _), r in zip(flat, results) if r.error]
            assert not errors and len(flat) == 21


def test_compile_model_applies_the_best_record_of_any_strategy(tmp_path, model_path, tasks):
    db = str(tmp_path / "mixed.db")
    conv, dense = tasks["nn.conv2d_nchwc"], tasks["nn.dense_pack"]
    tuner = XGBTuner(conv, seed=3)
    cfg = tuner.space.get(tuner.next_batch(1)[0])
    autotvm_sched = tuner.template.instantiate(conv, cfg)
    measured = measure(conv, [autotvm_sched], **MEASURE)
    log_to_records(db)(tuner, [MeasureInput(conv, cfg, autotvm_sched)], measured)
    trace, ms_sched = MetaScheduleSearch(dense, None, "replay", seed=3).next_batch(1)[0]
    with Database(db) as database:
        wl = database.commit_workload(dense)
        database.commit_tuning_record(TuningRecord(wl, ms_sched, run_secs=(1e-9,), trace=trace))
    with RecordStore(db) as store:  # an Ansor program of the conv, slower than the AutoTVM one
        ansor = random_programs(generate_sketches(conv), conv.initial_state(), 1, random.Random(0))[0][1]
        store.add(conv, host_target(), ansor, [measured[0].cost * 10])
    with RecordsReader(db, host_target()) as reader:
        chosen = {t: choose_schedule(t, reader) for t in (conv, dense)}
    assert chosen[conv].source == chosen[dense].source == "tuned"
    assert chosen[conv].schedule == autotvm_sched and chosen[dense].schedule == ms_sched
    module = compile_model(model_path, records=db, winograd=False)
    x = np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)
    (ref,) = evaluate(from_onnx(model_path).main, [x])
    (ours,) = module.run(None, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_tune_compare_writes_plot_curves_and_table(tmp_path, model_path, monkeypatch):
    out = str(tmp_path / "cmp")
    logs, flushes = [], set()
    import tuning.compare
    import tuning.tune

    def spy(real):
        def measure_spy(*args, **kwargs):
            flushes.add(kwargs.get("flush_cache", False))
            return real(*args, **kwargs)
        return measure_spy
    for module in (tuning.compare, tuning.tune):  # the generic strategies' measure, and Ansor's Tuner's
        monkeypatch.setattr(module, "measure", spy(module.measure))
    names = ["autotvm-grid", "metaschedule-replay", "ansor"]
    runs = tune_compare(model_path, names, trials=9, out_dir=out,
                        params={"batch_size": 3, "num_measure_number": 1, "num_measure_repeat": 1},
                        log=logs.append)
    assert [r.name for r in runs] == names
    assert len({r.curve[0] for r in runs}) == 1 and runs[0].curve[0][:2] == (0, 0.0)  # one shared start: the defaults
    assert flushes == {True}  # every strategy timed the same way (Ansor's cold caches read ~30% slower than warm)
    for r in runs:
        assert r.trials == 9 and np.isfinite(r.final)
        assert [c[0] for c in r.curve] == sorted(c[0] for c in r.curve)
        assert sum(line.startswith(f"[{r.name}] trials ") for line in logs) == len(r.curve) - 1  # a line per round
        with RecordStore(r.records) as store:
            assert sum(rec.ok for rec in store.records()) == r.trials - r.failed
    table = open(os.path.join(out, "compare.txt")).read()
    assert table == format_table(runs) + "\n" and "metaschedule-replay" in table
    assert os.path.exists(os.path.join(out, "compare.csv"))
    report = tune_compare_report(model_path, runs, 0.05, {"trials": 9}, "relayish tune-compare m --trials 9")
    assert [s["name"] for s in report["strategies"]] == names and report["machine"]["cpu"]
    assert all(s["start_ms"] == runs[0].curve[0][2] * 1e3 and s["trials"] == 9 for s in report["strategies"])
    bench = next(b for b in BENCHMARKS if b.name == "tune_compare")  # docs/benchmarks.md's table of it
    section = render_section(bench, json.loads(json.dumps(report)), "tune_compare_m.json", "m")
    assert all(f"| {name} | " in section for name in names) and "`relayish tune-compare m --trials 9`" in section
    with pytest.raises(ValueError, match="unknown strategies"):
        tune_compare(model_path, ["autotvm-annealing"], trials=1, out_dir=out)

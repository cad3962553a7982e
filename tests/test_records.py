"""Tuning records: SQLite store round trip, exact-target best(), WAL, JSON lines, distill, kill safety, CLI, and
compile_model taking tuned schedules through the read-only reader."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import namedtuple

import numpy as np
import pytest

from relayish_tools import cli
from compiler.records import RecordsError, RecordsFormatError, RecordsReader, RecordStore, target_key
from compiler.schedule import Annotate, Schedule, Split

FakeTask = namedtuple("FakeTask", "key name")
CONV = FakeTask("k_conv", "fused_conv2d_relu")
POOL = FakeTask("k_pool", "fused_max_pool2d")
HOST = {"triple": "x86_64-unknown-linux-gnu", "cpu": "znver5", "features": "+avx512f,+avx2,-amx-tile"}
OTHER_CPU = dict(HOST, cpu="skylake-avx512")
FEWER_FEATURES = dict(HOST, features="+avx2,-avx512f,-amx-tile")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sched(factor: int) -> Schedule:
    """A distinct schedule per factor (records need not apply to a real task)."""
    return Schedule((Split("conv", "i", (factor,)), Annotate("conv", "i.0", "parallel")))


@pytest.fixture
def store(tmp_path):
    with RecordStore(tmp_path / "t.db", run_id="run1") as s:
        yield s


def fill(store):
    """conv: 3 successes + 1 error on HOST, a faster one on another CPU and on fewer features; pool: errors only."""
    store.add_many([(CONV, HOST, sched(2), [3e-3, 3e-3], None),
                    (CONV, HOST, sched(4), [1e-3, 2e-3], None),  # cost min 1 ms: the best on HOST
                    (CONV, HOST, sched(8), [2e-3, 2e-3], None),
                    (CONV, HOST, sched(16), None, "run crashed"),
                    (CONV, OTHER_CPU, sched(32), [1e-4, 1e-4], None),
                    (CONV, FEWER_FEATURES, sched(64), [2e-4, 2e-4], None),
                    (POOL, HOST, sched(3), None, "build error: x")], measured_at=1000.0)


def test_round_trip_and_best_is_exact_target(store):
    fill(store)
    assert store.count() == 7 and store.count(CONV.key) == 6 and store.count(CONV.key, HOST) == 4
    assert store.best(CONV.key, HOST) == sched(4)
    assert store.best(CONV.key, OTHER_CPU) == sched(32)  # another CPU's records stay its own
    assert store.best(CONV.key, FEWER_FEATURES) == sched(64)
    assert store.best(POOL.key, HOST) is None  # errors are never best
    assert store.best("no_such_key", HOST) is None
    rec = store.best_record(CONV.key, HOST)
    assert rec.costs == (1e-3, 2e-3) and rec.cost == pytest.approx(1e-3) and rec.ok
    assert (rec.task_name, rec.run_id, rec.measured_at) == (CONV.name, "run1", 1000.0)
    failed = [r for r in store.records(CONV.key) if not r.ok]
    assert len(failed) == 1 and failed[0].error == "run crashed" and failed[0].costs is None
    assert [r.schedule for r in store.records(CONV.key, HOST)] == [sched(2), sched(4), sched(8), sched(16)]


def test_typical_cost_is_the_median_of_every_reading_of_one_schedule(store):
    """Best ranks by the least reading; typical_cost is the median over all readings (every repeat of every
    record) of one schedule of one task on one target: its re-measures count, other schedules, other targets
    and failures do not."""
    fill(store)
    store.add_many([(CONV, HOST, sched(4), [5e-3, 6e-3, 1.5e-3], None),  # sched(4) re-measured: 5 readings now
                    (CONV, HOST, sched(4), None, "timeout"),
                    (CONV, OTHER_CPU, sched(4), [9e-3], None)])
    assert store.best_record(CONV.key, HOST).cost == pytest.approx(1e-3)  # the least reading still ranks it
    assert store.typical_cost(CONV.key, sched(4), HOST) == pytest.approx(2e-3)  # median of 1, 2, 5, 6, 1.5 ms
    assert store.typical_cost(CONV.key, sched(8), HOST) == pytest.approx(2e-3)
    assert store.typical_cost(CONV.key, sched(4), OTHER_CPU) == pytest.approx(9e-3)
    assert store.typical_cost(CONV.key, sched(16), HOST) is None  # failed only
    assert store.typical_cost(POOL.key, sched(4), HOST) is None  # never measured


def test_target_key_is_canonical():
    shuffled = dict(HOST, features=",".join(reversed(HOST["features"].split(","))))
    assert target_key(shuffled) == target_key(HOST) == target_key(target_key(HOST))
    assert target_key(HOST) != target_key(OTHER_CPU) != target_key(FEWER_FEATURES)
    with pytest.raises(ValueError, match="triple"):
        target_key("znver5")
    with pytest.raises(ValueError, match="lacks"):
        target_key({"cpu": "znver5"})


def test_add_validates(store):
    with pytest.raises(ValueError, match="not both"):
        store.add(CONV, HOST, sched(2), [1e-3], "oops")
    with pytest.raises(ValueError, match="not both or neither"):
        store.add(CONV, HOST, sched(2))
    with pytest.raises(ValueError, match="finite non-negative"):
        store.add(CONV, HOST, sched(2), [-1.0])
    with pytest.raises(TypeError, match="Schedule"):
        store.add(CONV, HOST, "[]", [1.0])
    assert store.count() == 0


def test_tasks_summary_and_targets(store):
    fill(store)
    by_key = {t.key: t for t in store.tasks(HOST)}
    assert by_key[CONV.key].records == 4 and by_key[CONV.key].errors == 1
    assert by_key[CONV.key].best_cost == pytest.approx(1e-3) and by_key[CONV.key].name == CONV.name
    assert by_key[POOL.key].records == 1 and by_key[POOL.key].errors == 1 and by_key[POOL.key].best_cost is None
    assert {t: n for t, n in store.targets()} == {target_key(HOST): 5, target_key(OTHER_CPU): 1,
                                                   target_key(FEWER_FEATURES): 1}


def test_wal_reader_not_blocked_by_open_write(tmp_path, store):
    fill(store)
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    writer = sqlite3.connect(store.path)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM records")  # uncommitted: readers must still see the old rows, without waiting
    t0 = time.monotonic()
    with RecordsReader(store.path, HOST) as reader:
        assert reader.count() == 5 and reader.best(CONV.key) == sched(4)
        assert reader.counts() == {"records": 5, "tasks": 2, "other_target_records": 2}
    assert time.monotonic() - t0 < 5
    writer.rollback()
    writer.close()


def test_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        RecordsReader(tmp_path / "missing.db", HOST)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(RecordsError, match="not a tuning records database"):
        RecordsReader(junk, HOST)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(RecordsError, match="no 'records' table"):
        RecordsReader(other, HOST)
    with pytest.raises(RecordsError, match="without a 'records' table"):
        RecordStore(other)


def test_unparseable_schedule_is_skipped_with_warning(tmp_path, store):
    fill(store)
    old = {"task_key": CONV.key, "task_name": CONV.name, "target": target_key(HOST),
           "schedule": [["StepFromTheFuture", "conv", 7]], "costs": [1e-6], "error": None,
           "measured_at": 5.0, "run_id": "old"}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    assert store.import_jsonl(path) == 1
    with pytest.warns(UserWarning, match="does not parse"):
        assert store.best(CONV.key, HOST) == sched(4)  # the faster, unparseable record is passed over
    with pytest.warns(UserWarning, match="does not parse"):
        assert len(store.records(CONV.key, HOST)) == 4
    with pytest.warns(UserWarning, match="does not parse"):
        assert RecordsReader(store.path, HOST).best(CONV.key) == sched(4)


def test_export_import_round_trip(tmp_path, store):
    fill(store)
    out = tmp_path / "all.jsonl"
    assert store.export_jsonl(out) == 7
    lines = out.read_text().splitlines()
    assert len(lines) == 7 and json.loads(lines[1])["schedule"] == json.loads(sched(4).to_json())
    with RecordStore(tmp_path / "copy.db") as copy:
        assert copy.import_jsonl(out) == 7
        assert copy.import_jsonl(out) == 0  # already there: not duplicated

        def strip(rs):
            return [(r.task_key, r.task_name, r.target, r.schedule, r.costs, r.error, r.measured_at, r.run_id)
                    for r in rs]
        assert strip(copy.records()) == strip(store.records())
        assert copy.best(CONV.key, OTHER_CPU) == sched(32)


@pytest.mark.parametrize("bad_line,message", [
    ('{"task_key": ', "not valid JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"task_key": "k"}', "missing field"),
    (None, "either costs or an error"),
])
def test_malformed_jsonl_line_names_its_number(tmp_path, store, bad_line, message):
    good = {"task_key": "k", "task_name": "n", "target": target_key(HOST), "schedule": [], "costs": [1e-3],
            "error": None, "measured_at": 1.0, "run_id": "r"}
    if bad_line is None:
        bad_line = json.dumps(dict(good, error="boom"))
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + bad_line + "\n")
    with pytest.raises(RecordsFormatError, match=rf"bad\.jsonl:3: .*{message}"):
        store.import_jsonl(path)
    assert store.count() == 0  # all or nothing


def test_distill_keeps_best_per_task_and_target(tmp_path, store):
    fill(store)
    out = tmp_path / "best.db"
    assert store.distill(out) == 3  # conv on three targets; pool has no success
    with RecordStore(out) as best:
        assert best.count() == 3
        assert best.best(CONV.key, HOST) == sched(4) and best.best(CONV.key, OTHER_CPU) == sched(32)
        assert {r.run_id for r in best.records()} == {"run1"}
    with pytest.raises(FileExistsError):
        store.distill(out)


WRITER = textwrap.dedent("""
    import sys
    from collections import namedtuple
    from compiler.schedule import Schedule, Split
    from compiler.records import RecordStore
    T = namedtuple("T", "key name")
    target = {"triple": "t", "cpu": "c", "features": "+f"}
    store = RecordStore(sys.argv[1], run_id=sys.argv[2])
    for batch in range(int(sys.argv[3])):
        store.add_many([(T("k%d" % (i % 3), "task"), target, Schedule((Split("s", "i", (batch + 1, i + 1)),)),
                         [1e-3 * (i + 1)], None) for i in range(10)])
        print(batch, flush=True)
""")


def _writer(db, run_id, batches):
    return subprocess.Popen([sys.executable, "-c", WRITER, str(db), run_id, str(batches)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)


def test_resume_after_sigkill_loses_no_committed_batch(tmp_path):
    db = tmp_path / "killed.db"
    proc = _writer(db, "killed", 100000)
    committed = -1
    while committed < 4:  # let at least five batches commit, then kill mid-run
        committed = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with RecordStore(db) as store:
        n = store.count()
        assert n >= 10 * (committed + 1) and n % 10 == 0  # every committed batch, and no partial batch
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        store.add(FakeTask("k0", "task"), {"triple": "t", "cpu": "c", "features": "+f"}, sched(2), [1e-9])
        assert store.count() == n + 1
        assert store.best("k0", {"triple": "t", "cpu": "c", "features": "+f"}) == sched(2)


def test_several_processes_write_one_store(tmp_path):
    db = tmp_path / "shared.db"
    RecordStore(db).close()
    procs = [_writer(db, f"w{k}", 20) for k in range(3)]
    for p in procs:
        p.communicate(timeout=60)
        assert p.returncode == 0
    with RecordStore(db) as store:
        assert store.count() == 3 * 20 * 10
        assert {r.run_id for r in store.records()} == {"w0", "w1", "w2"}


def records_cli(argv: list[str]) -> int:
    """`relayish records ...` through the command line's entry point; returns the exit code."""
    return cli.main(["records", *argv])


def test_records_cli(tmp_path, store, capsys):
    fill(store)
    assert records_cli(["list", store.path]) == 0
    out = capsys.readouterr().out
    assert "cpu=znver5" in out and "cpu=skylake-avx512" in out and CONV.name in out and "1.0000" in out
    assert records_cli(["list", store.path, "--task", "k_co"]) == 0
    assert "run crashed" in capsys.readouterr().out
    jsonl, copy, best = tmp_path / "x.jsonl", tmp_path / "copy.db", tmp_path / "best.db"
    assert records_cli(["export", store.path, str(jsonl)]) == 0
    assert records_cli(["import", str(copy), str(jsonl)]) == 0
    assert "imported 7 new records" in capsys.readouterr().out
    assert records_cli(["distill", str(copy), str(best)]) == 0
    assert RecordStore(best).count() == 3
    assert records_cli(["list", str(tmp_path / "nope.db")]) == 2
    assert "error: records database not found" in capsys.readouterr().err
    jsonl.write_text("garbage\n")
    assert records_cli(["import", str(copy), str(jsonl)]) == 2
    assert "x.jsonl:1: not valid JSON" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- compile_model

def test_compile_model_takes_tuned_schedules_for_this_target_only(tmp_path):
    from compiler import compile_model
    from compiler import extract_tasks
    from compiler.codegen import host_target
    from compiler.passes import PassContext, run_pipeline
    from frontends import from_onnx
    from relayish.interp import evaluate
    from harness import make_model, random_feeds

    rng = np.random.default_rng(0)
    model = make_model("Conv", {"x": (1, 4, 8, 8)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 11,
                       {"w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32)})
    tasks = extract_tasks(run_pipeline(from_onnx(model), PassContext(layout="NCHW")))
    db = tmp_path / "tuned.db"
    with RecordStore(db) as store:
        for task in tasks:  # the naive schedule (no steps) stands in for a tuned one; another CPU gets junk
            store.add(task, host_target(), Schedule(), [1e-6])
            store.add(task, dict(host_target(), cpu="not-this-cpu"), sched(3), [1e-9])
    feeds = random_feeds(model)
    expected = evaluate(from_onnx(model), feeds)[0]
    with RecordsReader(db, host_target()) as reader:
        assert reader.counts() == {"records": len(tasks), "tasks": len(tasks), "other_target_records": len(tasks)}
        module = compile_model(model, layout="NCHW", records=reader)
    assert module.meta["compile_info"]["tuned_tasks"] == len(tasks) >= 1
    out = module.run(None, feeds)[0]
    assert np.max(np.abs(out - expected)) <= 1e-4 * np.max(np.abs(expected))
    with RecordsReader(db, dict(host_target(), cpu="a-cpu-without-records")) as elsewhere:
        module = compile_model(model, layout="NCHW", records=elsewhere)
    assert module.meta["compile_info"]["tuned_tasks"] == 0
    with RecordStore(db) as store:  # the tuner's store works as well: best(key) defaults to this machine
        module = compile_model(model, layout="NCHW", records=store)
    assert module.meta["compile_info"]["tuned_tasks"] == len(tasks)


def test_remeasure_rounds_let_a_quiet_reading_of_the_default_win(tmp_path, monkeypatch):
    """The default schedule read 5x too slow while the machine was busy; later rounds (alternating order) read it
    again, the records keep the fastest reading, and compile_model's best() becomes the default."""
    from types import SimpleNamespace

    from tuning import tune

    default = sched(1)
    monkeypatch.setattr(tune, "_default_schedule", lambda task: default)
    true_cost = {default.to_json(): 1e-3, sched(4).to_json(): 1.5e-3, sched(8).to_json(): 2e-3}
    calls = []

    def fake_measure(task, schedules, **kw):
        calls.append([s.to_json() for s in schedules])
        busy = len(calls) == 1  # the first round ran while something else used the CPUs
        return [SimpleNamespace(costs=[true_cost[s.to_json()] * (5 if busy and s is default else 1)] * 2,
                                error=None) for s in schedules]
    monkeypatch.setattr(tune, "measure", fake_measure)
    with RecordStore(tmp_path / "r.db") as store:
        store.add_many([(CONV, HOST, sched(4), [1.5e-3], None), (CONV, HOST, sched(8), [2e-3], None),
                        (CONV, HOST, default, [5e-3], None)])  # tuning's own reading of the default: unlucky
        assert store.best(CONV.key, target=HOST).to_json() == sched(4).to_json()
        tune.remeasure_best([CONV], store, HOST, k=2, params=dict(tune.TUNE_PARAMS, remeasure_rounds=3))
        assert len(calls) == 3
        assert calls[0] == [sched(4).to_json(), sched(8).to_json(), default.to_json()]
        assert calls[1] == calls[0][::-1]  # alternate the order: no program is always measured first
        assert store.best(CONV.key, target=HOST).to_json() == default.to_json()


@pytest.mark.parametrize("candidate_reads,applies", [(1.1e-3, "default"), (0.9e-3, "candidate")])
def test_a_lucky_reading_must_also_win_side_by_side(tmp_path, monkeypatch, candidate_reads, applies):
    """A candidate read once at half the default's time (the best of many noisy readings) stays the lowest record,
    but in the re-measure's rounds, side by side, it reads 1.1x the default: it gets a keep_default verdict and
    compile_model applies the default; reading 0.9x it keeps applying. The estimate's best cost follows."""
    from types import SimpleNamespace

    from tuning import tune

    default, candidate = sched(1), sched(4)
    monkeypatch.setattr(tune, "_default_schedule", lambda task: default)
    reads = {default.to_json(): 1e-3, candidate.to_json(): candidate_reads}

    def fake_measure(task, schedules, **kw):
        return [SimpleNamespace(costs=[reads[s.to_json()]] * 2, error=None) for s in schedules]
    monkeypatch.setattr(tune, "measure", fake_measure)
    logs = []
    with RecordStore(tmp_path / "r.db") as store:
        store.add_many([(CONV, HOST, candidate, [0.5e-3], None), (CONV, HOST, default, [1e-3], None)])
        tune.remeasure_best([CONV], store, HOST, k=2, params=dict(tune.TUNE_PARAMS, remeasure_rounds=3),
                            log=logs.append)
        assert store.best_record(CONV.key, target=HOST) is None or applies == "candidate"
        best, cost = {CONV.key: 0.5e-3}, {}
        tune._costs_from_records([CONV], store, HOST, best, cost, {CONV.key: default})
        if applies == "default":
            assert store.best(CONV.key, target=HOST) is None and best[CONV.key] == cost[CONV.key] == 1e-3
            assert any("did not beat their defaults side by side" in line for line in logs)
        else:
            assert store.best(CONV.key, target=HOST).to_json() == candidate.to_json() and best[CONV.key] == 0.5e-3


def test_remeasure_skips_tasks_with_nothing_to_decide(tmp_path, monkeypatch):
    """A task whose only program is its default decides nothing in the re-measure: not measured again if it was
    measured, once (for the estimate) if it never was; a task with a candidate gets every round."""
    from types import SimpleNamespace

    from tuning import tune

    default = sched(1)
    monkeypatch.setattr(tune, "_default_schedule", lambda task: default)
    calls = []

    def fake_measure(task, schedules, **kw):
        calls.append((task.key, len(schedules)))
        return [SimpleNamespace(costs=[1e-3, 1e-3], error=None) for _ in schedules]
    monkeypatch.setattr(tune, "measure", fake_measure)
    other = FakeTask("k_conv2", "fused_conv2d_relu")
    with RecordStore(tmp_path / "r.db") as store:
        store.add_many([(CONV, HOST, default, [1e-3], None), (other, HOST, sched(4), [2e-3], None)])
        tune.remeasure_best([CONV, POOL, other], store, HOST, k=2, params=dict(tune.TUNE_PARAMS, remeasure_rounds=3))
    assert calls.count((CONV.key, 1)) == 0  # measured before, nothing else to compare
    assert calls.count((POOL.key, 1)) == 1  # never measured: once
    assert calls.count((other.key, 2)) == 3  # a candidate and the default, side by side in every round


def test_switching_to_wal_waits_for_another_process_instead_of_failing():
    # SQLite does not wait on its busy handler to change the journal mode: a second tuning run opening a new
    # database while the first one sets it up saw "database is locked" at once (seen in CI); it is retried now
    from compiler.records import _use_wal

    class Busy:
        def __init__(self, failures):
            self.failures, self.calls = failures, []

        def execute(self, sql):
            self.calls.append(sql)
            if sql == "PRAGMA journal_mode = WAL" and self.failures:
                self.failures -= 1
                raise sqlite3.OperationalError("database is locked")
            return self

        def fetchone(self):
            return ("delete",)

    conn = Busy(failures=3)
    _use_wal(conn)
    assert conn.calls.count("PRAGMA journal_mode = WAL") == 4
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        class Broken(Busy):
            def execute(self, sql):
                if sql == "PRAGMA journal_mode = WAL":
                    raise sqlite3.OperationalError("disk I/O error")  # not a lock: raised at once
                return self
        _use_wal(Broken(0))

"""bench.tuning_curve's arithmetic: a run's records cut at a time, and the share of a reference gain."""
from __future__ import annotations

import sqlite3
from collections import namedtuple

import pytest

from compiler.records import RecordStore
from compiler.schedule import Annotate, Schedule, Split
from relayish_tools.bench.tuning_curve import cut_records, gain

FakeTask = namedtuple("FakeTask", "key name")
CONV = FakeTask("k_conv", "fused_conv2d_relu")
HOST = {"triple": "x86_64-unknown-linux-gnu", "cpu": "znver4", "features": "+avx512f,+avx2"}


def sched(factor: int) -> Schedule:
    return Schedule((Split("conv", "i", (factor,)), Annotate("conv", "i.0", "parallel")))


def test_cut_records_keeps_what_was_measured_by_then(tmp_path):
    db = str(tmp_path / "run.db")
    with RecordStore(db, run_id="run") as store:
        store.add_many([(CONV, HOST, sched(2), [3e-3], None)], measured_at=1000.0)
        store.add_many([(CONV, HOST, sched(4), [1e-3], None)], measured_at=1060.0)  # the best, a minute later
        store.add_verdict(CONV.key, HOST, sched(4), 1e-3, 3e-3)
    early, late = str(tmp_path / "early.db"), str(tmp_path / "late.db")
    assert cut_records(db, 1030.0, early) == 1
    assert cut_records(db, 1060.0, late) == 2
    with RecordStore(early) as store:
        assert store.best(CONV.key, HOST) == sched(2)
    with RecordStore(late) as store:
        assert store.best(CONV.key, HOST) == sched(4)
        assert store.count() == 2
    with RecordStore(db) as store:  # the run's own database is untouched
        assert store.count() == 2
    for path, verdicts in ((db, 1), (early, 0), (late, 0)):  # a cut has no model-check verdicts
        with sqlite3.connect(path) as con:
            assert con.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == verdicts


@pytest.mark.parametrize("x, expected", [(10.0, 0.0), (6.0, 1.0), (8.0, 0.5), (11.0, -0.25), (5.0, 1.25)])
def test_gain_is_the_share_of_the_reference_gain(x, expected):
    assert gain(10.0, x, 6.0) == pytest.approx(expected)


def test_gain_without_a_reference_gain_is_none():
    assert gain(10.0, 9.0, 10.0) is None
    assert gain(10.0, 9.0, 11.0) is None
    assert gain(10.0, 9.0, 9.6) is None  # 4% of the untuned time: noise, not a gain to share
    assert gain(10.0, 9.0, 9.5) == pytest.approx(2.0)


def test_reusing_runs_whose_databases_are_gone_is_refused_naming_them(tmp_path):
    from relayish_tools.bench.tuning_curve import curve
    runs = [{"start": "cold", "db": str(tmp_path / "gone.db"), "started_at": 0.0, "wall_s": 60.0, "trials": 1},
            {"start": "pretrained", "db": str(tmp_path / "gone2.db"), "started_at": 0.0, "wall_s": 60.0, "trials": 1}]
    with pytest.raises(ValueError, match="gone.db"):
        curve("m.onnx", 60.0, [30.0], str(tmp_path), 1, 1, False, reuse=runs)


def test_retune_without_runs_to_reuse_is_refused(capsys):
    from relayish_tools.bench.tuning_curve import main
    with pytest.raises(SystemExit) as exit_:
        main(["m.onnx", "--retune", "pretrained"])
    assert exit_.value.code == 2 and "--retune needs --reuse" in capsys.readouterr().err


def test_reusing_runs_retunes_only_the_starts_asked_and_needs_only_the_others_databases(tmp_path, monkeypatch):
    """--reuse with --retune pretrained: the cold run's database must be there, the pretrained one's need not."""
    from relayish_tools.bench import tuning_curve
    tuned = []

    def fake_tune_run(model, db, start, *args, **kwargs):
        tuned.append(start)
        raise RuntimeError("tuned")  # enough: what is tuned, and that the check of databases passed

    monkeypatch.setattr(tuning_curve, "tune_run", fake_tune_run)
    monkeypatch.setattr("tuning.zero_shot.predict_schedules", lambda *a, **k: None)
    cold_db = tmp_path / "cold.db"
    cold_db.write_bytes(b"")
    runs = [{"start": "cold", "db": str(cold_db), "started_at": 0.0, "wall_s": 60.0, "trials": 1},
            {"start": "pretrained", "db": str(tmp_path / "gone.db"), "started_at": 0.0, "wall_s": 60.0, "trials": 1}]
    with pytest.raises(RuntimeError, match="tuned"):
        tuning_curve.curve("m.onnx", 60.0, [30.0], str(tmp_path), 1, 1, False, reuse=runs, retune=("pretrained",))
    assert tuned == ["pretrained"]

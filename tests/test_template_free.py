"""bench.template_free on a tiny model: it measures the hand-written level, tunes from the naive loop nests and
times the three builds end to end (no timing assertions: the tuned estimate includes the naive program's own
measurement, so it cannot exceed the naive one)."""
import importlib.util
import json
import math

import onnx
import pytest

from relayish_tools.bench.report_docs import BENCHMARKS, render_section
from relayish_tools.bench.template_free import main
from test_compare import conv_dense_model
from tuning.tune import model_tasks, tune_model


def test_template_free_run_reports_all_three_builds(tmp_path):
    model = str(tmp_path / "conv_dense.onnx")
    onnx.save(conv_dense_model(), model)
    out = tmp_path / "tf.json"
    plot = importlib.util.find_spec("matplotlib") is not None  # an optional extra ('.[plot]')
    trials = 2 * len(model_tasks(model))  # a round of 2 programs per task: the naive estimate is complete
    assert main([model, "--trials", str(trials), "--records", str(tmp_path / "naive.db"), "--repeat", "3", "--json", str(out)]
                + (["--plot", str(tmp_path / "tf.png")] if plot else []),
                params={"batch_size": 2, "final_remeasure": 0}) == 0
    report = json.loads(out.read_text())
    assert set(report["end_to_end_ms"]) == {"hand-written", "naive", "tuned from naive"}
    assert all(v > 0 and math.isfinite(v) for v in report["end_to_end_ms"].values())
    paired = report["paired_tuned_over_hand_written"]
    assert paired["rounds"] >= 1 and 0 < paired["low"] <= paired["ratio"] <= paired["high"]
    est = report["estimate_ms"]
    assert all(v > 0 and math.isfinite(v) for v in est.values())
    assert est["tuned"] <= est["naive"] and 0 < report["trials"] <= trials and report["curve"]
    assert not plot or (tmp_path / "tf.png").stat().st_size > 0
    assert report["model"] == model and report["command_line"].startswith("python -m relayish_tools.bench.template_free " + model)
    assert report["machine"]["cores"] >= 1 and report["versions"]["onnxruntime"]
    bench = next(b for b in BENCHMARKS if b.name == "template_free")
    assert "| tuned from naive | " in render_section(bench, report, "template_free.json", "tf")


def test_retime_times_earlier_runs_records_side_by_side(tmp_path, capsys):
    """--retime tunes nothing: the hand-written model and one build per database, timed together, each with its
    paired ratio; without --records or --retime, or with a database that is not there or a file that is not
    one, it stops with a usage error naming it."""
    model, db = str(tmp_path / "conv_dense.onnx"), str(tmp_path / "naive.db")
    onnx.save(conv_dense_model(), model)
    tune_model(model, db, trials=len(model_tasks(model)), start="naive", check_model=False, progress=False,
               params={"batch_size": 1, "final_remeasure": 0})
    assert main([model, "--retime", db, db, "--repeat", "10"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("0: ", "1: "))]
    assert len(rows) == 2 and all(db in r and "x the hand-written model (paired" in r for r in rows)
    with pytest.raises(SystemExit):
        main([model])  # neither --records nor --retime
    with pytest.raises(SystemExit):
        main([model, "--retime", db, str(tmp_path / "missing.db")])
    assert "no records database at " + str(tmp_path / "missing.db") in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([model, "--retime", model])  # a file, but not a records database
    assert "--retime: " in (err := capsys.readouterr().err) and "not a tuning records database" in err

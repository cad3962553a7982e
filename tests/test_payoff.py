"""bench.payoff on a tiny model: it tunes, times untuned / tuned / onnxruntime, keeps each row in payoff.json and
skips a model already measured (a suite run spans sessions). No timing assertions: the machine is shared."""
import json
import math

import onnx
import pytest

import relayish_tools.bench.payoff as payoff
from relayish_tools.bench.report_docs import BENCHMARKS, render_section
from test_compare import conv_dense_model
from tuning.tune import model_tasks

SMALL = {"batch_size": 2, "final_remeasure": 0}


def test_payoff_tunes_times_and_resumes(tmp_path, monkeypatch):
    suite, out = tmp_path / "suite", tmp_path / "payoff"
    suite.mkdir()
    onnx.save(conv_dense_model(), str(suite / "tiny.onnx"))
    tasks = len(model_tasks(str(suite / "tiny.onnx")))
    # a round of 2 programs per task measures every task (a complete estimate); the 5 minutes are never reached
    args = [str(suite), "--out", str(out), "--trials", str(2 * tasks), "--repeat", "3", "--warmup", "1"]
    assert payoff.main(args, params=SMALL) == 0
    rows = json.loads((out / "payoff.json").read_text())
    assert [r["model"] for r in rows] == ["tiny"]
    row = rows[0]
    assert row["agree"] and row["max_rel_error"] < 1e-4
    assert row["trials"] > 0 and row["tasks"] == tasks and (out / "tiny.db").stat().st_size > 0
    for key in ("untuned_ms", "tuned_ms", "onnxruntime_ms", "estimated_ms"):
        assert row[key] > 0 and math.isfinite(row[key]), key
    assert row["kept"] + row["reverted"] <= row["tasks"]
    # per task: the tuner's figures beside the model check's, to see where the estimate and the model disagree
    assert len(row["per_task"]) == tasks and sum(t["kept"] for t in row["per_task"]) == row["kept"]
    for t in row["per_task"]:
        assert t["trials"] > 0 and 0 < t["best_ms"] <= t["default_ms"], t
        assert t["in_model_untuned_ms"] > 0 and t["in_model_tuned_ms"] > 0, t
    assert row["model_check"]["untuned_ms"] > 0 and isinstance(row["model_check"]["all_reverted"], bool)
    assert row["model_check"]["paired_ratio"]["rounds"] > 0
    assert set(row["paired"]) == {"tuned/untuned", "tuned/ort", "untuned/ort"}
    assert all(p["low"] <= p["ratio"] <= p["high"] for p in row["paired"].values())
    assert row["command_line"] == "python -m relayish_tools.bench.payoff " + " ".join(args) and row["machine"]["cpu"]
    assert row["date"][:2] == "20" and row["versions"]["relayish"]
    section = render_section(next(b for b in BENCHMARKS if b.name == "payoff"), rows, "payoff.json", "payoff")
    assert "| tiny | " in section and "`python -m relayish_tools.bench.payoff " in section  # docs/benchmarks.md's table
    table = payoff.format_table(rows)
    assert f"{row['paired']['tuned/untuned']['ratio']:.3f} [" in table and "paired" in table.splitlines()[0]

    def must_not_tune(*a, **k):
        raise AssertionError("a model already in payoff.json was tuned again")

    monkeypatch.setattr(payoff, "payoff_row", must_not_tune)
    assert payoff.main(args, params=SMALL) == 0
    assert json.loads((out / "payoff.json").read_text()) == rows
    with pytest.raises(AssertionError, match="tuned again"):
        payoff.main(args + ["--force"], params=SMALL)


def test_payoff_refuses_a_nonpositive_budget(tmp_path, capsys):
    with pytest.raises(SystemExit):
        payoff.main([str(tmp_path), "--out", str(tmp_path / "o"), "--minutes", "0"])
    assert "--minutes must be positive" in capsys.readouterr().err

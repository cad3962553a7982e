"""python -m relayish_tools.bench.rnn: one-node recurrent models that onnx accepts, and a run over a tiny grid that prints its
table and writes its JSON (timings themselves are the benchmark's, not a test's)."""
from __future__ import annotations

import json

import onnx

from relayish_tools.bench import rnn


def test_models_are_valid_and_name_their_shape():
    for op in rnn.GATES:
        case = rnn.rnn_model(op, 5, 2, 7, 16, "bidirectional")
        onnx.checker.check_model(case.model, full_check=True)
        assert case.shape == f"{op} T=5 B=2 I=7 H=16 bidirectional" and case.feeds["x"].shape == (5, 2, 7)
        assert len(case.model.graph.output) == (3 if op == "LSTM" else 2)


def test_a_run_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "rnn.json"
    code = rnn.main(["--ops", "LSTM,GRU", "--seq", "3", "--batch", "2", "--hidden", "17", "--directions", "reverse",
                     "--repeat", "2", "--warmup", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "LSTM T=3 B=2 I=17 H=17 reverse" in printed and "GRU   geomean" in printed
    report = json.loads(out.read_text())
    assert report["benchmark"] == "rnn" and len(report["cases"]) == 2
    assert all(c["ratio"] > 0 and c["max_rel_error"] <= 1e-4 for c in report["cases"])

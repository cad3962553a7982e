"""python -m relayish_tools.bench.nms: its one-node models are valid, and a run over a tiny grid checks ours equal
to onnxruntime's indices, prints its table and writes its JSON (timings themselves are the benchmark's)."""
from __future__ import annotations

import json

import onnx

from relayish_tools.bench import nms


def test_the_case_is_valid_and_keeps_about_the_fraction_asked():
    model, feed = nms.nms_case(2000, 3, 0.1, 100)
    onnx.checker.check_model(model, full_check=True)
    assert feed["boxes"].shape == (1, 2000, 4) and feed["scores"].shape == (1, 3, 2000)
    above = (feed["scores"] > nms.SCORE).mean()
    assert 0.08 < above < 0.12, above


def test_a_run_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "nms.json"
    code = nms.main(["--boxes", "60", "--classes", "2", "--fraction", "0.3", "--max-output", "5", "--repeat", "2",
                     "--warmup", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "N=60 C=2 above 0.3" in printed and "geomean" in printed
    report = json.loads(out.read_text())
    (row,) = report["cases"]
    assert row["ratio"] > 0 and 0 < row["kept"] <= 10 and report["command_line"].endswith("--json " + str(out))

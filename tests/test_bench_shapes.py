"""python -m relayish_tools.bench.shapes: seeded draws of realistic shapes per op class, one-node models that onnx and onnxruntime
accept, and a run that writes its table and JSON (timings themselves are the benchmark's, not a test's)."""
from __future__ import annotations

import json

import onnx
import pytest

from relayish_tools.bench import shapes


def test_draws_are_seeded_and_per_class():
    a = [c.shape for c in shapes.draw_cases(3, 2)]
    assert a == [c.shape for c in shapes.draw_cases(3, 2)]
    assert a != [c.shape for c in shapes.draw_cases(4, 2)]
    # a class's shapes do not depend on which other classes are drawn
    only = [c.shape for c in shapes.draw_cases(3, 2, ["dense"])]
    assert only == [c.shape for c in shapes.draw_cases(3, 2) if c.cls == "dense"]
    assert {c.cls for c in shapes.draw_cases(0, 1)} == set(shapes.CLASSES)


@pytest.mark.parametrize("seed", [0, 1])
def test_every_drawn_model_is_valid_and_within_the_caps(seed):
    for case in shapes.draw_cases(seed, 3):
        onnx.checker.check_model(case.model, full_check=True)
        assert case.flops <= 2 * shapes.MAX_FLOPS, case.shape
        for value in case.feeds.values():
            assert value.size <= shapes.MAX_ELEMENTS, case.shape


def test_channel_counts_include_odd_and_prime_ones():
    import numpy as np
    rng = np.random.default_rng(0)
    drawn = [shapes.channels(rng) for _ in range(300)]
    assert any(c in shapes.PRIMES and c > 16 for c in drawn)
    assert any(c in shapes.ROUND_CHANNELS for c in drawn)
    assert min(drawn) >= 1 and max(drawn) <= 2048


def test_a_run_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "shapes.json"
    code = shapes.main(["--n", "1", "--classes", "dense,softmax", "--repeat", "2", "--warmup", "1",
                        "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "geomean" in printed and "dense" in printed and "softmax" in printed
    report = json.loads(out.read_text())
    assert report["benchmark"] == "shapes" and len(report["cases"]) == 2
    assert all(c["ratio"] > 0 and c["max_rel_error"] <= shapes.TOLERANCE for c in report["cases"])
    assert [s["class"] for s in report["summary"]] == ["dense", "softmax", "all"]
    assert report["machine"] and report["versions"]["onnxruntime"]

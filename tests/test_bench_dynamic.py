"""python -m relayish_tools.bench.dynamic: a tiny CNN over a free batch, its table and JSON (the timings themselves
are the benchmark's, not a test's), and the free-dim rewrite it applies to a model."""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from relayish_tools.bench import dynamic


def tiny_cnn(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 6, 6))], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_free_dims_become_dim_params():
    model = onnx.load_from_string(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4))])).SerializeToString())
    free = dynamic.with_free_dims(model, {"x": {0: "batch"}, "y": {0: "batch"}})
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in (free.graph.input[0],
                                                                                         free.graph.output[0])]
    assert dims == [["batch", 4], ["batch", 4]] and model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1


def test_a_run_prints_the_table_and_writes_json(tmp_path, capsys):
    path, out = tmp_path / "tiny.onnx", tmp_path / "dynamic.json"
    tiny_cnn(path)
    code = dynamic.main([str(path), "--batches", "1,3", "--repeat", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "tiny (free batch)" in printed and "generic tier: {'batch': 'batch'" in printed
    report = json.loads(out.read_text())
    rows = report["cases"][0]["rows"]
    assert [r["shape"] for r in rows] == [[1, 3, 6, 6], [3, 3, 6, 6]]
    assert all(r["agree"] and r["first_ms"] > 0 and r["generic_ms"] > 0 and r["specialized_ms"] > 0 for r in rows)
    summary = report["cases"][0]["summary"]
    assert summary["generic_vs_ort"] > 0
    # the session's first call beside a static compile's and onnxruntime's first calls, each over its steady time
    assert rows[0]["static_first_ms"] > 0 and rows[0]["ort_first_ms"] > 0 and "static_first_ms" not in rows[1]
    assert summary["worst_first_vs_steady"] == rows[1]["first_ms"] / rows[1]["generic_ms"]
    assert summary["session_first_vs_steady"] == rows[0]["first_ms"] / rows[0]["generic_ms"]
    assert summary["static_first_vs_steady"] == rows[0]["static_first_ms"] / rows[0]["specialized_ms"]
    assert summary["ort_first_vs_steady"] == rows[0]["ort_first_ms"] / rows[0]["ort_ms"]
    assert "the session's first call / steady" in printed


def test_a_missing_model_is_named(tmp_path, capsys):
    assert dynamic.main([str(tmp_path / "none.onnx")]) == 2
    assert "no such model" in capsys.readouterr().err


def test_check_reports_each_models_generic_tier(tmp_path, capsys):
    tiny_cnn(tmp_path / "tiny.onnx")
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                               helper.make_node("ReduceMean", ["m"], ["y"], axes=[0], keepdims=1)], "mix",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3))], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "mix.onnx"))
    assert dynamic.main(["--check", str(tmp_path), "--json", str(tmp_path / "c.json")]) == 0
    printed = capsys.readouterr().out
    assert "mix                    generic tier (run-time extents)" in printed  # its items are not apart
    assert "tiny                   generic tier (batch 1 item by item)" in printed
    assert "2 of 2 models have a generic tier" in printed
    rows = {r["model"]: r for r in json.loads((tmp_path / "c.json").read_text())["rows"]}
    assert len(rows["tiny"]["first_ms"]) == 3 and rows["tiny"]["max_rel_error"] <= 1e-4
    assert len(rows["mix"]["first_ms"]) == 3 and rows["mix"]["max_rel_error"] <= 1e-4


def test_a_length_case_frees_dim_1_of_every_input_as_one_symbol(tmp_path):
    """Two inputs of one length (ids and a mask, as BERT's): one symbol, so each length is one specialization."""
    table = numpy_helper.from_array(np.random.default_rng(2).standard_normal((100, 4)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axis"], ["mu"]),
             helper.make_node("Mul", ["e", "mu"], ["y"])]
    axis = numpy_helper.from_array(np.array([2], np.int64), "axis")
    graph = helper.make_graph(nodes, "embed", [helper.make_tensor_value_info(n, TensorProto.INT64, (1, 6))
                                               for n in ("ids", "attention_mask")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 6, 4))], [table, axis])
    path = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    case = dynamic.length_case(path, [3, 9])
    assert case["free"] == {"ids": (1, None), "attention_mask": (1, None)}
    rows = dynamic.run_case(case, threads=1, repeat=2, log=lambda line: None)
    assert [r["shape"] for r in rows] == [[1, 3], [1, 9]] and all(r["agree"] for r in rows)
    # no batch, but kernels with run-time extents: the ids index a table, checked per call before any kernel
    assert all(r["generic_ms"] > 0 and r["specialized_ms"] > 0 for r in rows)

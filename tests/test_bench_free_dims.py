"""python -m relayish_tools.bench.free_dims: which dims it frees, the sizes it tries, and a run over a folder whose
models pass, or that onnxruntime runs at no other size (the timings themselves are the benchmark's)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from relayish_tools.bench import free_dims


def conv_model(dims, name="x"):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", [name, "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_with_unbound_dims_frees_those_one_name_at_a_time():
    model = conv_model(("n", 3, "side", "side"))
    groups = free_dims.free_dim_groups(model, {"x": (1, 3, 8, 8)})
    assert [(g["symbol"], g["axes"], g["base"]) for g in groups] == \
        [("n", [("x", 0)], 1), ("side", [("x", 2), ("x", 3)], 8)]
    unnamed = free_dims.free_dim_groups(conv_model((1, 3, "?", "?")), {"x": (1, 3, 8, 9)})
    assert [g["symbol"] for g in unnamed] == ["x.2", "x.3"] and [g["base"] for g in unnamed] == [8, 9]


def test_a_static_model_frees_its_batch_and_spatial_dims():
    groups = free_dims.free_dim_groups(conv_model((1, 3, 8, 10)), {"x": (1, 3, 8, 10)})
    assert [(g["symbol"], g["axes"]) for g in groups] == [("batch", [("x", 0)]), ("dim2_8", [("x", 2)]),
                                                          ("dim3_10", [("x", 3)])]


def test_sizes_tried_are_never_the_base():
    assert free_dims.candidate_sizes(1) == [2, 3, 5]
    sizes = free_dims.candidate_sizes(64)
    assert 64 not in sizes and sizes[:4] == [32, 63, 71, 96] and len(set(sizes)) == len(sizes)


def test_a_folder_run_checks_sizes_never_compiled_for(tmp_path, capsys):
    onnx.save(conv_model((1, 3, 8, 8)), str(tmp_path / "conv.onnx"))
    # a Reshape to a constant shape: onnxruntime runs no other size than the base
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((12, 2)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, 12], np.int64), "shape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                               helper.make_node("MatMul", ["r", "w"], ["y"])], "baked",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2))], [w, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "baked.onnx"))
    out = tmp_path / "free.json"
    assert free_dims.main([str(tmp_path), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    conv = {r["dim"]: r for r in rows if r["model"] == "conv"}
    assert sorted(conv) == ["batch", "dim2_8", "dim3_8"]
    for row in conv.values():
        assert free_dims.row_status(row) == "pass" and len(row["sizes"]) == 3
        assert all(e["size"] != row["base"] and e["max_rel_error"] <= 1e-4 for e in row["sizes"])
    baked = [r for r in rows if r["model"] == "baked"]
    assert baked and all(not r["sizes"] and r["ort_refused"] for r in baked)
    assert "onnxruntime runs none of" in printed and "5 free dims: 3 pass" in printed


def test_a_wrong_answer_fails_the_run(tmp_path, monkeypatch, capsys):
    onnx.save(conv_model((1, 3, 8, 8)), str(tmp_path / "conv.onnx"))
    errors = itertools.cycle([1.0, 1e-9, 1.0])  # per size: ours vs onnxruntime, the static compile's, ours vs it
    monkeypatch.setattr(free_dims, "relative_error", lambda got, want: next(errors))
    assert free_dims.main([str(tmp_path), "--models", "conv"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_a_row_disagreeing_as_its_static_compile_does_is_as_static_else_it_fails():
    def row(*sizes):
        return {"sizes": [dict(size=k, first_ms=1.0, **e) for k, e in enumerate(sizes)]}
    within = {"max_rel_error": 1e-6}
    assert free_dims.row_status(row(within, within)) == "pass"
    same = {"max_rel_error": 1e-2, "static_rel_error": 1e-2, "vs_static": 0.0}
    rounding = {"max_rel_error": 7e-3, "static_rel_error": 6e-3, "vs_static": 5e-3}  # int8 ties, flipped apart
    assert free_dims.row_status(row(within, same, rounding)) == "as static"
    worse = {"max_rel_error": 2e-2, "static_rel_error": 6e-3, "vs_static": 2e-2}
    static_agrees = {"max_rel_error": 1e-3, "static_rel_error": 1e-6, "vs_static": 1e-3}
    assert free_dims.row_status(row(within, worse)) == "fail"
    assert free_dims.row_status(row(static_agrees)) == "fail"
    assert free_dims.row_status(row({"error": "boom"})) == "error"

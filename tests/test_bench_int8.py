"""The int8 benchmarks' kernels (no timing here): bench.peak_int8's loop is vpdpbusd on registers only, and
bench.op_table_int8's engines are built and checked (ours exact, onnxruntime within a step) on small cases."""
from __future__ import annotations

import re

import pytest

from relayish_tools.bench.op_table_int8 import QConv, QMatMul, checked_engines
from relayish_tools.bench.peak_int8 import default_chains, int8_lanes, measure_int8_peak, peak_assembly
from compiler.codegen import vector_width


def test_int8_peak_loop_is_vpdpbusd_on_registers():
    if int8_lanes() is None:
        pytest.skip("the host has no AVX-512 VNNI or AVX-VNNI: there is no vpdpbusd peak to measure")
    chains = default_chains(int8_lanes())
    asm = peak_assembly(chains)
    # label: `chains` vpdpbusd on registers, the counter, a jump back to the label
    loop = re.compile(r"^(\.LBB\w+):.*\n(?:\s*#.*\n)*(?:\s*vpdpbusd\s+%[xyz]mm\d+, %[xyz]mm\d+, %[xyz]mm\d+.*\n){"
                      + str(chains) + r"}\s*\w+\s+[^\n]*\n\s*j\w+\s+\1\b", re.M)
    assert loop.search(asm), asm
    assert measure_int8_peak(1, chains, seconds=1e-4, repeat=1) > 0  # it runs (not a timing)


@pytest.mark.parametrize("case", [QConv("test", 12, 20, 9, 3, 2, 1), QConv("test rgb", 3, 16, 11, 7, 2, 3),
                                  QMatMul("test", 5, 30, 40), QMatMul("test batch 1", 1, 64, 100)],
                         ids=lambda c: c.shape())
def test_int8_op_table_engines_are_checked(case):
    engines, task = checked_engines(case, 2, vector_width())
    assert [e.name for e in engines] == ["ours", "ort"] and any(op.startswith("qnn.") for op in task.ops)


# ---- bench.int8_suite: the int8 suite table (timings not asserted: only what is reported) ----

def _int8_folder(tmp_path):
    """tiny.onnx (a float conv + classifier) and tiny_int8.onnx, its static QDQ quantization by onnxruntime's
    tool, as models/quantized.py makes the suite's."""
    import numpy as np
    from onnx import TensorProto, helper, save_model
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4, 3, 3], rng.standard_normal(288).astype(np.float32) * 0.2)
    fc = helper.make_tensor("fc", TensorProto.FLOAT, [8, 10], rng.standard_normal(80).astype(np.float32))
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["c"], ["r"]),
                               helper.make_node("GlobalAveragePool", ["r"], ["g"]),
                               helper.make_node("Flatten", ["g"], ["f"]),
                               helper.make_node("MatMul", ["f", "fc"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, fc])
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "tiny.onnx"))

    class Feeds:
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)
    quantize_static(str(tmp_path / "tiny.onnx"), str(tmp_path / "tiny_int8.onnx"), Feeds(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def test_int8_suite_table_of_a_folder(tmp_path, capsys):
    import json
    from relayish_tools.bench.int8_suite import float_twin, main
    from relayish_tools.bench.report_docs import BENCHMARKS, render_section
    pytest.importorskip("onnxruntime.quantization")
    _int8_folder(tmp_path)
    assert float_twin("gpt_int8_dynamic") == "gpt" and float_twin("ddddocr_int8") is None
    code = main([str(tmp_path), "--models", "tiny_int8", "--repeat", "2", "--warmup", "1", "--block", "2",
                 "--seeds", "3", "--json", str(tmp_path / "int8.json")])
    out = capsys.readouterr().out
    assert code == 0, out  # within the int8 tolerance of onnxruntime's int8 result
    row = json.loads((tmp_path / "int8.json").read_text())["rows"][0]
    assert row["model"] == "tiny_int8" and row["float_model"] == "tiny.onnx" and row["seeds"] == 3
    assert row["relayish"]["median_ms"] > 0 and row["onnxruntime"]["median_ms"] > 0
    assert 0 <= row["top1_vs_float"] <= 1 and 0 <= row["ort_top1_vs_float"] <= 1 and row["top1_vs_ort"] == 1.0
    report = json.loads((tmp_path / "int8.json").read_text())
    section = render_section(next(b for b in BENCHMARKS if b.name == "int8"), report, "int8.json", "int8")
    assert "| tiny_int8 | " in section and "python -m relayish_tools.bench.int8_suite" in section
    with pytest.raises(SystemExit, match="not built: .*resnet18_int8.onnx"):
        main([str(tmp_path)])

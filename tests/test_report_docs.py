"""The generated pages: docs/benchmarks.md from the bench commands' JSON (bench/report_docs.py) and docs/ops.md from
the registries (bench/ops_doc.py). Built here from small synthetic files: every table prints its figures with the
date, CPU, versions and command of its file, a file missing a field its table needs is refused naming both, and the
committed pages are what the committed data and the code give."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from relayish_tools.bench import ops_doc, report_docs
from relayish_tools.bench.report_docs import BENCHMARKS, ReportError, render_page

REPO = Path(__file__).resolve().parent.parent


def prov(command: str, cpu: str = "AMD EPYC 9B45", date: str = "2031-02-03T04:05:06+0000") -> dict:
    return {"date": date, "command_line": command,
            "machine": {"cpu": "znver5", "cpu_model": cpu, "cores": 2, "load_average": [0.1, 0.2, 0.3],
                        "peak_gflops": None},
            "versions": {"python": "3.12.1", "relayish": "9.8.7", "numpy": "2.0", "llvmlite": "0.44",
                         "onnx": "1.23", "onnxruntime": "1.99.1", "openvino": None}}


def stats(median: float) -> dict:
    return {"median_ms": median, "p90_ms": median * 1.1, "p99_ms": median * 1.2, "min_ms": median * 0.9, "runs": 50}


PAIRED = {"ratio": 0.713, "low": 0.701, "high": 0.744, "rounds": 10}

SYNTHETIC = {
    "quickstart.json": {
        "report_version": 2, "command": {}, **prov("relayish bench models/resnet18.onnx --json q.json"),
        "model": {"path": "models/resnet18.onnx", "inputs": {"input": [1, 3, 224, 224]}, "outputs": {}, "kernels": 25},
        "configuration": {"threads": 2, "timing": {"mode": "steady", "runs": 50, "warmup": 5, "block": 5,
                                                   "idle_gap_ms": 50.0}},
        "engines": [{"name": "relayish", **stats(5.8431)}, {"name": "onnxruntime", **stats(8.1122)}],
        "ratios": {"relayish/onnxruntime": 0.7203}, "paired_ratios": {"relayish/onnxruntime": PAIRED},
        "accuracy": {"tolerance": 1e-4, "passed": True, "outputs": {"logits": {"max_abs": 1e-6, "max_rel": 3.18e-6,
                                                                               "passed": True}}},
        "profile": None},
    "suite.json": {
        "benchmark": "suite", **prov("python -m relayish_tools.bench.suite suite/ --json s.json"),
        "configuration": {"threads": 2, "timing": "steady", "repeat": 30, "warmup": 5, "block": 5},
        "rows": [{"model": "alexnet", "relayish": stats(7.34), "onnxruntime": stats(11.74), "openvino": stats(7.11),
                  "ratio": 0.625, "paired": PAIRED, "openvino_ratio": 0.606, "openvino_paired": PAIRED,
                  "max_rel_error": 1.9e-6, "agree": True},
                 {"model": "gpt", "relayish": stats(0.65), "onnxruntime": stats(0.94), "ratio": 0.69,
                  "paired": PAIRED, "max_rel_error": 4.7e-7, "agree": True},
                 {"model": "broken", "error": "compile: OnnxImportError: bad"}]},
    "wild.json": {
        "benchmark": "suite", **prov("python -m relayish_tools.bench.suite wild/ --json w.json"),
        "configuration": {"threads": 2, "timing": "steady", "repeat": 30, "warmup": 5, "block": 5},
        "rows": [{"model": "ppocr_v6_rec", "relayish": stats(12.56), "onnxruntime": stats(12.62),
                  "openvino": stats(12.46), "ratio": 0.995, "paired": PAIRED, "openvino_ratio": 0.987,
                  "openvino_paired": PAIRED, "max_rel_error": 4.7e-6, "agree": True}]},
    "int8.json": {
        "benchmark": "int8_suite", **prov("python -m relayish_tools.bench.int8_suite int8/ --json i.json"),
        "configuration": {"threads": 2, "timing": "steady", "repeat": 30, "warmup": 5, "block": 5, "seeds": 8},
        "tolerance": 0.05,
        "rows": [{"model": "resnet18_int8", "relayish": stats(5.18), "onnxruntime": stats(6.69),
                  "openvino": stats(5.9), "ratio": 0.774, "paired": PAIRED, "openvino_ratio": 0.881,
                  "openvino_paired": PAIRED, "max_rel_error": 1.7e-2, "agree": True, "top1_vs_float": 1.0,
                  "ort_top1_vs_float": 0.875, "top1_vs_ort": 1.0, "seeds": 8, "float_model": "resnet18.onnx"},
                 {"model": "ddddocr_int8", "relayish": stats(6.87), "onnxruntime": stats(10.59), "ratio": 0.649,
                  "paired": PAIRED, "max_rel_error": 0.2, "agree": False, "top1_vs_float": None,
                  "ort_top1_vs_float": None, "top1_vs_ort": 0.97, "seeds": 8, "float_model": None}]},
    "shapes.json": {
        "benchmark": "shapes", **prov("python -m relayish_tools.bench.shapes --seed 5 --json sh.json"), "seed": 5, "n": 8,
        "threads": 2, "repeat": 30,
        "summary": [{"class": "conv1x1", "cases": 8, "failures": 0, "geomean": 0.912, "p90": 1.104, "worst": 1.21,
                     "worst_shape": "conv1x1 c=17 o=3 9x9 k=1 s1"},
                    {"class": "lstm", "cases": 8, "failures": 1, "geomean": None, "p90": None, "worst": None,
                     "worst_shape": None}],
        "cases": []},
    "rnn.json": {
        "benchmark": "rnn", **prov("python -m relayish_tools.bench.rnn --json r.json"), "threads": 2, "repeat": 30,
        "cases": [{"shape": "LSTM T=8 B=1 I=64 H=64 forward", "ours_ms": 0.0412, "ort_ms": 0.0577, "ratio": 0.714},
                  {"shape": "GRU T=512 B=4 I=64 H=64 forward", "ratio": None, "error": "compile: boom"}]},
    "nms.json": {
        "benchmark": "nms", **prov("python -m relayish_tools.bench.nms --json n.json"), "threads": 2, "repeat": 30,
        "cases": [{"shape": "N=1000 C=80 above 0.1", "kept": 7717, "ours_ms": 1.31, "ort_ms": 1.5, "ratio": 0.873},
                  {"shape": "N=9 C=1 above 0.5", "kept": 3, "ratio": None, "error": "indices differ"}]},
    "dynamic.json": {
        "benchmark": "dynamic", **prov("python -m relayish_tools.bench.dynamic m.onnx --json d.json"), "threads": 2,
        "repeat": 30,
        "cases": [{"model": "cnn (free batch)",
                   "rows": [{"shape": [3, 3, 8, 8], "first_ms": 3.5, "generic_ms": 3.3, "specialized_ms": 3.1,
                             "ort_ms": 4.4, "agree": True, "max_rel_error": 1e-6}],
                   "summary": {"generic_vs_ort": 0.75, "specialized_vs_ort": 0.70, "worst_first_vs_steady": 1.06,
                               "session_first_vs_steady": 2.4, "static_first_vs_steady": 3.5,
                               "ort_first_vs_steady": 3.2}},
                  {"model": "rec (free width)",
                   "rows": [{"shape": [1, 3, 48, 160], "first_ms": 3450.0, "generic_ms": None, "specialized_ms": 8.2,
                             "ort_ms": 9.9, "agree": True, "max_rel_error": 1e-5}],
                   "summary": {"generic_vs_ort": None, "specialized_vs_ort": 0.83, "worst_first_vs_steady": 421.0}}]},
    "zero_shot.json": {
        "benchmark": "zero_shot", **prov("python -m relayish_tools.bench.pretrain zero-shot m.onnx --json z.json"),
        "threads": 2, "repeat": 30,
        "cost_model": {"trained_on": {"programs": 2417, "tasks": 138, "models": ["resnet18", "gpt"],
                                      "held_out": ["crnn"]}},
        "held_out": {"held_out_tasks": 17, "pairwise_accuracy": 0.734},
        "rows": [{"model": "crnn", "tasks": 21, "predicted_tasks": 5, "untuned": stats(9.8765),
                  "zero_shot": stats(9.1234), "onnxruntime": stats(12.345), "zero_shot_vs_untuned": 0.9237}]},
    "payoff.json": [
        {**prov("python -m relayish_tools.bench.payoff suite/ --minutes 15 --out payoff/"), "model": "resnet18", "minutes": 15,
         "trials": 1591, "tasks": 20, "date": "2031-02-01 10:00", "untuned_ms": 6.37, "tuned_ms": 6.67,
         "onnxruntime_ms": 8.71, "paired": {"tuned/untuned": PAIRED, "tuned/ort": PAIRED, "untuned/ort": PAIRED},
         "estimated_ms": 5.9, "kept": 17, "reverted": 1, "max_rel_error": 3e-6, "agree": True},
        {**prov("python -m relayish_tools.bench.payoff suite/ --models gpt --out payoff/", cpu="Intel Xeon 8488C"), "model": "gpt",
         "minutes": 15, "trials": 750, "tasks": 14, "date": "2031-02-02 11:00", "untuned_ms": 3.21, "tuned_ms": 3.22,
         "onnxruntime_ms": 3.32, "paired": {"tuned/untuned": PAIRED}, "estimated_ms": 3.81, "kept": None,
         "reverted": None, "max_rel_error": 4e-7, "agree": True}],
    "template_free.json": {
        "benchmark": "template_free", "model": "models/resnet18.onnx",
        **prov("python -m relayish_tools.bench.template_free models/resnet18.onnx --time-budget 900 --records naive.db"),
        "estimate_ms": {"hand-written": 6.0, "naive": 900.0, "tuned": 5.8},
        "end_to_end_ms": {"hand-written": 6.06, "naive": 950.0, "tuned from naive": 5.92},
        "paired_tuned_over_hand_written": PAIRED, "trials": 1415, "seconds": 901.0,
        "curve": [[20, 30.0, 900.0], [400, 345.2, 6.5], [700, 465.0, 5.99], [1415, 900.0, 5.8]]},
    "build_rate.json": {
        "before": {"benchmark": "build_rate", **prov("python -m relayish_tools.bench.build_rate m.onnx --measure"),
                   "version": "8869de7",
                   "build": {"programs": 144, "programs_per_minute": 145.3, "programs_per_worker_minute": 120.4,
                             "errors": {"build refused": 7, "build timed out after": 1}},
                   "build_measure": {"programs_per_minute": 128.9}},
        "after": {"benchmark": "build_rate", **prov("python -m relayish_tools.bench.build_rate m.onnx --measure"),
                  "version": "abc1234", "build": {"programs": 144, "programs_per_minute": 190.0, "errors": {}}},
        "speedup": {"build": 1.31}, "note": "Before: the branch's base."},
    "tuning_curve_resnet18.json": {
        "benchmark": "tuning_curve", "model": "resnet18", "budget_s": 600.0, "algorithms": False, "start": "naive",
        **prov("python -m relayish_tools.bench.tuning_curve m.onnx --start naive"), "threads": 2, "repeat": 30,
        "cost_model_trained_on": {"models": ["bert", "gpt"]},
        "points": [{"start": "cold", "seconds": 30, "records": 96, "median_ms": 6.69, "gain": 0.95},
                   {"start": "pretrained", "seconds": 601.4, "records": 1746, "median_ms": 4.1, "gain": 0.99}],
        "summary": {"untuned_ms": 64.37, "onnxruntime_ms": 3.36, "cold_end_ms": 3.68, "zero_shot_ms": 61.87,
                    "zero_shot_gain": 0.041, "zero_shot_tasks": "10 of 32", "predict_s": 30.2,
                    "pretrained_reaches_90pct_at_s": 601.4, "hand_written_ms": 3.85},
        "note": "Both curves alike."},
    "free_dims_resnet18.json": {
        "benchmark": "free_dims", **prov("python -m relayish_tools.bench.free_dims suite/"), "tolerance": 1e-4,
        "rows": [{"model": "resnet18", "dim": "batch", "base": 1, "axes": [["input", 0]], "compile_s": 3.0,
                  "sizes": [{"size": 2, "first_ms": 45.2, "max_rel_error": 3.9e-6},
                            {"size": 3, "first_ms": 57.0, "max_rel_error": 3.3e-6}]},
                 {"model": "resnet18", "dim": "dim2_224", "base": 224, "axes": [["input", 2]],
                  "sizes": [{"size": 112, "first_ms": 4448.0, "max_rel_error": 2e-3}]},
                 {"model": "bert", "dim": "dim1_128", "base": 128, "axes": [["input_ids", 1]], "sizes": [],
                  "ort_refused": [64, 127]},
                 {"model": "int8", "dim": "w", "base": 256, "axes": [["x", 3]],
                  "sizes": [{"size": 128, "first_ms": 8530.0, "max_rel_error": 8.3e-3, "static_rel_error": 8.3e-3,
                             "vs_static": 0.0}]}]},
    "tune_compare_resnet18.json": {
        "benchmark": "tune_compare", "model": "models/resnet18.onnx", **prov("relayish tune-compare m --trials 320"),
        "options": {}, "within": 0.05,
        "strategies": [{"name": "autotvm-grid", "start_ms": 12.40, "final_ms": 11.93, "trials": 320, "seconds": 158.0,
                        "failed": 0, "trials_to_within": 0, "seconds_to_within": 0.0, "curve": []},
                       {"name": "ansor", "start_ms": 12.40, "final_ms": 12.00, "trials": 320, "seconds": 227.0,
                        "failed": 1, "trials_to_within": None, "seconds_to_within": None, "curve": []}]},
}


def write(folder: Path, files: dict) -> Path:
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data))
    return folder


def test_every_benchmark_has_a_synthetic_file():
    names = {b.name + ("_resnet18" if b.per_file else "") + ".json" for b in BENCHMARKS}
    assert names == set(SYNTHETIC)


def test_the_page_tabulates_every_file_with_its_provenance(tmp_path):
    page = render_page(write(tmp_path / "data", SYNTHETIC))
    assert "Not measured yet" not in page
    for bench in BENCHMARKS:
        assert f"## {bench.title}" in page
    # figures, formatted, in their tables
    assert "| relayish | 5.84 | 6.43 | 7.01 | 5.26 | 50 |" in page
    assert "**0.72x** by medians, paired 0.71 [0.70-0.74] over 10 rounds; max relative error 3.2e-06" in page
    assert "| alexnet | 7.34 | 11.74 | 7.11 | **0.62** | 0.71 [0.70-0.74] | 0.61 | 0.71 [0.70-0.74] | 1.9e-06 |" in page
    assert "| gpt | 0.650 | 0.940 | not installed | **0.69** |" in page
    assert "| broken | error: compile: OnnxImportError: bad | - | - | - | - | - | - | - |" in page
    assert "| resnet18 | 15 | 1591 | 6.37 | 6.67 | 8.71 | 1.05 | 0.71 [0.70-0.74] | 0.77 | 5.90 | 17 / 1 |" in page
    assert "| resnet18_int8 | 5.18 | 6.69 | 5.90 | **0.77** | 0.71 [0.70-0.74] | 0.88 | 1.7e-02 | 100% / 88% | 100% |" \
        in page
    assert "| ddddocr_int8 | 6.87 | 10.59 | not installed | **0.65** |" in page and "2.0e-01 DISAGREES | - / - | 97% |" \
        in page
    assert "| gpt | 15 | 750 |" in page and "| - | 4.0e-07 |" in page  # no model check: no kept / reverted
    assert "| tuned from naive | 5.92 | 5.80 |" in page and "**0.98x** by medians" in page
    assert "within 1.1x of the hand-written estimate after 345 s (400 programs) and reached it after 465 s (700 programs)" in page
    assert "## AutoTVM, Ansor and MetaSchedule on the same tasks: resnet18" in page
    assert "| ansor | 12.40 | 12.00 | 3.2% | 320 | 227 | never | 1 |" in page
    # every table says where, when, with what and how
    assert page.count("Measured 2031-02-03 on AMD EPYC 9B45 (LLVM: znver5, 2 cores) with python 3.12.1, "
                      "relayish 9.8.7, numpy 2.0, llvmlite 0.44, onnx 1.23, onnxruntime 1.99.1: `") == 13
    assert "`relayish bench models/resnet18.onnx --json q.json`" in page
    assert "- resnet18: measured 2031-02-01 on AMD EPYC 9B45" in page  # payoff: each row its own run
    assert "\n- gpt: measured 2031-02-02 on Intel Xeon 8488C" in page
    assert "openvino None" not in page
    assert "| ppocr_v6_rec | 12.56 | 12.62 | 12.46 | **0.99** |" in page
    assert "| N=1000 C=80 above 0.1 | 7717 | 1.31 | 1.50 | **0.87** |" in page
    assert "| N=9 C=1 above 0.5 | 3 | - | - | failed: indices differ |" in page
    assert "| conv1x1 | 8 | 0 | **0.91** | 1.10 | 1.21 | `conv1x1 c=17 o=3 9x9 k=1 s1` |" in page
    assert "| lstm | 8 | 1 | **-** | - | - | `-` |" in page
    assert "| LSTM T=8 B=1 I=64 H=64 forward | 0.041 | 0.058 | **0.71** |" in page
    assert "| GRU T=512 B=4 I=64 H=64 forward | - | - | failed: compile: boom |" in page
    assert "| crnn | 5 of 21 | 9.88 | 9.12 | 12.35 | **0.92** |" in page
    assert "trained on 2417 measured programs of 138 tasks of resnet18, gpt; held out whole: crnn." in page
    assert "orders 73% of the pairs of measured programs right (random: 50%)" in page
    assert "| cnn (free batch) | 3x3x8x8 | 3.50 | 3.30 (0.75x) | 3.10 (**0.70x**) | 4.40 |" in page
    assert "| rec (free width) | 1x3x48x160 | 3450.0 | - | 8.20 (**0.83x**) | 9.90 |" in page
    assert "|  | geomean | new shapes: worst 421.0x steady | - | **0.83x** |  |" in page
    assert ("|  | geomean | new shapes: worst 1.1x steady; the session's first 2.4x (a static compile's 3.5x, "
            "onnxruntime's 3.2x) | 0.75x | **0.70x** |  |") in page
    assert "| naive loop nests (untuned) | - | - | 64.37 | 0% |" in page
    assert "| zero-shot | 0 (no measurement) | - | 61.87 | **4%** |" in page
    assert "| cold cost model | 30 | 96 | 6.69 | 95% |" in page and "| pretrained cost model | 601 | 1746 | 4.10 | 99% |" \
        in page
    assert "| hand-written schedules (untuned) | - | - | 3.85 | - |" in page
    assert "(untuned 64.37 ms -> 3.68 ms). The pretrained run reaches 90% of that gain at 601 s." in page
    assert "trained on bert, gpt: resnet18 is not among them" in page and "Both curves alike." in page
    assert "| before (8869de7) | 144 | 145 | 129 | 120 | build refused 7, build timed out after 1 |" in page
    assert "| after (abc1234) | 144 | 190 | - | - | none |" in page and "After / before: build x1.31." in page
    assert "| resnet18 | batch (1) | 2, 3 | 4e-06, 3e-06 | 45, 57 | pass |" in page
    assert "|  | dim2_224 (224) | 112 | 2e-03 | 4448 | **fail** |" in page
    assert "| bert | dim1_128 (128) | onnxruntime runs no other size | - | - | **base only** |" in page
    assert "| int8 | w (256) | 128 | 8e-03 | 8530 | **as static** |" in page
    assert "1 of 3 free dims match onnxruntime within 1e-04 at every size tried (1 err as the static" in page


def test_a_benchmark_without_data_names_its_command(tmp_path):
    files = {k: v for k, v in SYNTHETIC.items() if k != "suite.json"}
    page = render_page(write(tmp_path / "data", files))
    suite = next(b for b in BENCHMARKS if b.name == "suite")
    assert page.count("Not measured yet") == 1 and f"Not measured yet: run `{suite.command}`." in page


def _delete(data, path: str):
    *parents, last = path.split(".")
    for key in parents:
        data = data[int(key)] if isinstance(data, list) else data[key]
    del data[int(last) if isinstance(data, list) else last]


@pytest.mark.parametrize("file, path, field", [
    ("quickstart.json", "date", "date"),
    ("quickstart.json", "command_line", "command_line"),
    ("quickstart.json", "machine.cpu_model", "machine.cpu_model"),
    ("quickstart.json", "versions.onnxruntime", "onnxruntime"),
    ("quickstart.json", "paired_ratios.relayish/onnxruntime", "paired_ratios.relayish/onnxruntime"),
    ("quickstart.json", "engines.1.p99_ms", "p99_ms"),
    ("suite.json", "machine", "machine.cpu_model"),
    ("suite.json", "rows.0.openvino_paired", "openvino_paired"),
    ("suite.json", "rows.1.max_rel_error", "max_rel_error"),
    ("suite.json", "configuration.block", "block"),
    ("payoff.json", "1.command_line", "command_line"),
    ("payoff.json", "0.paired", "paired.tuned/untuned"),
    ("payoff.json", "0.kept", "kept"),
    ("template_free.json", "curve", "curve"),
    ("shapes.json", "summary.0.p90", "p90"),
    ("shapes.json", "seed", "seed"),
    ("rnn.json", "cases.0.ort_ms", "ort_ms"),
    ("zero_shot.json", "rows.0.zero_shot", "zero_shot.median_ms"),
    ("zero_shot.json", "cost_model.trained_on", "cost_model.trained_on"),
    ("wild.json", "rows.0.paired", "paired"),
    ("template_free.json", "end_to_end_ms.naive", "end_to_end_ms.naive"),
    ("template_free.json", "versions", "versions"),
    ("tune_compare_resnet18.json", "strategies.0.start_ms", "start_ms"),
    ("tune_compare_resnet18.json", "within", "within"),
])
def test_a_missing_field_is_refused_naming_file_and_field(tmp_path, file, path, field):
    files = copy.deepcopy(SYNTHETIC)
    _delete(files[file], path)
    with pytest.raises(ReportError, match=f"{file}.*missing field '{field}'"):
        render_page(write(tmp_path / "data", files))


def test_malformed_values_and_orphan_files_are_refused(tmp_path):
    files = copy.deepcopy(SYNTHETIC)
    files["suite.json"]["rows"][0]["ratio"] = "fast"
    with pytest.raises(ReportError, match="suite.json rows\\[0\\]: field 'ratio' must be a number"):
        render_page(write(tmp_path / "a", files))
    files = dict(SYNTHETIC, **{"speed.json": {}})
    with pytest.raises(ReportError, match="speed.json: no benchmark of bench/report_docs.py reads it"):
        render_page(write(tmp_path / "b", files))
    (write(tmp_path / "c", {}) / "suite.json").write_text("{not json")
    with pytest.raises(ReportError, match="suite.json: not valid JSON"):
        render_page(tmp_path / "c")


def test_main_writes_and_checks_the_page(tmp_path, capsys):
    data, page = write(tmp_path / "data", SYNTHETIC), tmp_path / "benchmarks.md"
    assert report_docs.main([str(data), "--check", str(page)]) == 1
    assert report_docs.main([str(data), "-o", str(page)]) == 0
    assert report_docs.main([str(data), "--check", str(page)]) == 0
    (data / "suite.json").unlink()
    assert report_docs.main([str(data), "--check", str(page)]) == 1
    assert "python -m relayish_tools.bench.report_docs" in capsys.readouterr().err


def test_committed_benchmarks_page_is_what_docs_data_gives():
    assert render_page(REPO / "docs" / "data") == (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8"), \
        "docs/benchmarks.md is stale: run `python -m relayish_tools.bench.report_docs docs/data -o docs/benchmarks.md`"


def test_committed_ops_page_is_what_the_registries_give():
    page = ops_doc.render_page()
    assert "| Conv | 7 | 1, 11, 22 |" in page and "| nn.conv2d |" in page
    assert page == (REPO / "docs" / "ops.md").read_text(encoding="utf-8"), \
        "docs/ops.md is behind the registries: run `python -m relayish_tools.bench.ops_doc -o docs/ops.md`"


def test_readme_stays_a_reference():
    """Under 25 KB, no dated headings (measurement history goes to docs/history/), every local link resolves."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 25_000, f"README.md is {len(readme.encode())} bytes: move detail to docs/"
    dated = [h for h in readme.splitlines() if h.startswith("#") and re.search(r"\b20\d\d-\d\d-\d\d\b", h)]
    assert not dated, f"dated headings belong in docs/history/: {dated}"
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert "docs/benchmarks.md" in links and "docs/ops.md" in links
    assert [t for t in links if not t.startswith("http") and not (REPO / t).exists()] == []


def test_a_tuning_curve_without_gain_says_so(tmp_path):
    files = copy.deepcopy(SYNTHETIC)
    run = files["tuning_curve_resnet18.json"]
    run["start"] = "hand-written"
    run["summary"].update(untuned_ms=3.14, cold_end_ms=4.22, hand_written_ms=None, pretrained_reaches_90pct_at_s=None)
    for p in run["points"]:
        p["gain"] = None
    page = render_page(write(tmp_path / "data", files))
    assert "Gain: none to share, the cold run ended its 600 s budget no measurably faster than untuned (3.14 ms " \
        "-> 4.22 ms)." in page
    run["summary"].update(cold_end_ms=3.02, min_gain=0.05)  # 4% faster: within the noise
    page = render_page(write(tmp_path / "data", files))
    assert "no measurably faster than untuned (3.14 ms -> 3.02 ms; less than 5% is noise)." in page
    assert "| untuned | - | - | 3.14 | 0% |" in page and "| cold cost model | 30 | 96 | 6.69 | - |" in page
    assert "reaches 90%" not in page and "hand-written schedules (untuned)" not in page

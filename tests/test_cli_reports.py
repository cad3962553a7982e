"""The tvmc-like and report flags of `relayish`: bench --json (validated against a small schema) / --plot /
--timing, run --print-time --repeat --number / --profile, compile --input-shapes, --version. The fake compiler and
fixture library of tests/test_cli.py stand in for the compiler."""
import json
import sys

import pytest

from relayish_tools import cli
import runtime
from relayish_tools.bench import compare
from relayish_tools.bench.report_docs import BENCHMARKS, render_section
from relayish_tools.cli.common import parse_tvmc_shapes

from fixtures_native import have_compiler, probe
from test_cli import fake_compile, libs, onnx_path, run_cli  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(not have_compiler(), reason="needs a C compiler (cc) to build the fixture library")

NUMBER, STRING, BOOL, NULL = (int, float), str, bool, type(None)
STATS = {k: NUMBER for k in ("median_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "p50_ms", "p90_ms", "p95_ms",
                             "p99_ms")}
# The report's schema: a dict maps required keys to their schema, a list [schema] is a list of such items,
# a tuple of types is the allowed types of a leaf, {str: schema} a mapping of any keys to one schema.
REPORT_SCHEMA = {
    "report_version": int, "command": {str: object}, "command_line": STRING, "date": STRING,
    "model": {"path": STRING, "inputs": {str: [int]}, "outputs": {str: [int]}, "kernels": int},
    "configuration": {"threads": int, "timing": {"mode": STRING, "runs": int, "warmup": int, "block": (int, NULL),
                                                  "idle_gap_ms": NUMBER},
                      "layout": STRING, "opt_level": int, "winograd": BOOL, "records": (STRING, NULL), "seed": int},
    "engines": [{"name": STRING, "runs": int, **STATS}],
    "ratios": {"relayish/onnxruntime": NUMBER},
    "paired_ratios": {"relayish/onnxruntime": {"ratio": NUMBER, "low": NUMBER, "high": NUMBER, "rounds": int}},
    "accuracy": {"tolerance": (NUMBER, NULL), "passed": BOOL,
                 "outputs": {str: {"max_abs": (NUMBER, NULL), "max_rel": (NUMBER, NULL), "passed": BOOL}}},
    "machine": {"cpu": STRING, "cpu_model": STRING, "cores": int, "load_average": [NUMBER],
                "peak_gflops": (NUMBER, NULL)},
    "versions": {k: (STRING, NULL) for k in ("relayish", "python", "numpy", "llvmlite", "onnx", "onnxruntime",
                                             "openvino")},
    "profile": ([dict], NULL),
}


def schema_errors(value, schema, where="report") -> list[str]:
    """Where `value` does not follow `schema` (see REPORT_SCHEMA); [] if it does."""
    if schema is object:
        return []
    if isinstance(schema, type):
        schema = (schema,)
    if isinstance(schema, tuple) and all(isinstance(s, type) for s in schema):
        ok = isinstance(value, schema) and not (isinstance(value, bool) and bool not in schema)
        return [] if ok else [f"{where}: expected {' or '.join(s.__name__ for s in schema)}, got {value!r}"]
    if isinstance(schema, tuple):  # alternatives that are not all leaf types
        results = [schema_errors(value, s, where) for s in schema]
        return [] if any(not r for r in results) else results[0]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {value!r}"]
        return [e for i, v in enumerate(value) for e in schema_errors(v, schema[0], f"{where}[{i}]")]
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {value!r}"]
    if list(schema) == [str]:
        return [e for k, v in value.items() for e in schema_errors(v, schema[str], f"{where}.{k}")]
    missing = [f"{where}: missing {k!r}" for k in schema if k not in value]
    return missing + [e for k, s in schema.items() if k in value for e in schema_errors(value[k], s, f"{where}.{k}")]


def test_the_schema_checker_can_fail():
    assert schema_errors({"a": 1}, {"a": int}) == []
    assert schema_errors({"a": True}, {"a": int}) and schema_errors({}, {"a": int})
    assert schema_errors({"x": [1, "2"]}, {"x": [int]}) == ["report.x[1]: expected int, got '2'"]
    assert schema_errors(None, ([dict], NULL)) == [] and schema_errors(3, ([dict], NULL))


def test_bench_json_report_validates(fake_compile, onnx_path, tmp_path, capsys):
    path = tmp_path / "report.json"
    code, out, err = run_cli(capsys, "bench", onnx_path, "--repeat", "12", "--warmup", "1", "--threads", "1",
                             "--block", "5", "--json", str(path))
    assert code == 0, err
    assert f"wrote {path}" in out
    report = json.loads(path.read_text())
    assert schema_errors(report, REPORT_SCHEMA) == []
    assert [e["name"] for e in report["engines"]] == ["relayish", "onnxruntime"]
    assert report["configuration"]["timing"] == {"mode": "steady", "runs": 12, "warmup": 1, "block": 5,
                                                 "idle_gap_ms": 50.0}
    for e in report["engines"]:
        assert e["runs"] == 12 and e["min_ms"] <= e["p50_ms"] == e["median_ms"] <= e["p90_ms"] <= e["p99_ms"]
    ours, ort = report["engines"]
    assert report["ratios"]["relayish/onnxruntime"] == pytest.approx(ours["median_ms"] / ort["median_ms"])
    paired = report["paired_ratios"]["relayish/onnxruntime"]
    assert paired["rounds"] == 3 and paired["low"] <= paired["ratio"] <= paired["high"]  # blocks of 5, 5 and 2
    assert report["accuracy"]["passed"] and set(report["accuracy"]["outputs"]) == {"y", "s"}
    assert report["model"]["inputs"] == {"x": [2, 3], "k": [2]} and report["versions"]["onnxruntime"]
    assert [r["name"] for r in report["profile"]] == ["fused_multiply", "fused_add", "fused_sum_add"]
    assert report["command_line"] == f"relayish bench {onnx_path} --repeat 12 --warmup 1 --threads 1 --block 5 " \
                                     f"--json {path}" and report["date"][:2] == "20"
    assert "argv" not in report["command"]
    section = render_section(next(b for b in BENCHMARKS if b.name == "quickstart"), report, "q.json", "q")
    assert "| relayish | " in section and f"`relayish bench {onnx_path} --repeat 12" in section


def test_bench_strict_timing_says_so(fake_compile, onnx_path, capsys):
    code, out, err = run_cli(capsys, "bench", onnx_path, "--repeat", "3", "--warmup", "0", "--threads", "1",
                             "--timing", "strict")
    assert code == 0, err
    assert out.startswith("threads 1, same inputs; timing strict: 3 alternating runs")


def test_tune_compare_json_carries_the_table_and_its_provenance(onnx_path, tmp_path, capsys, monkeypatch):
    import tuning.compare
    from tuning.compare import StrategyRun

    def fake_tune_compare(model, strategies, trials, out, *args, **kwargs):  # no tuning: two finished runs
        return [StrategyRun(name, f"{out}/{name}.db", [(0, 0.0, 0.013), (trials, 9.0, final)], failed, trials, 9.0)
                for name, final, failed in zip(strategies, (0.0114, 0.0125), (0, 1))]
    monkeypatch.setattr(tuning.compare, "tune_compare", fake_tune_compare)
    path = tmp_path / "cmp.json"
    code, out, err = run_cli(capsys, "tune-compare", onnx_path, "--strategies", "autotvm-grid,ansor", "--trials",
                             "4", "--out", str(tmp_path / "cmp"), "--json", str(path))
    assert code == 0, err
    report = json.loads(path.read_text())
    assert report["command_line"].startswith(f"relayish tune-compare {onnx_path} --strategies autotvm-grid,ansor")
    assert report["options"]["trials"] == 4 and report["within"] == 0.05 and report["versions"]["relayish"]
    grid, ansor = report["strategies"]
    assert grid["name"] == "autotvm-grid" and grid["start_ms"] == 13.0 and grid["final_ms"] == 11.4
    assert grid["trials_to_within"] == 4 and ansor["trials_to_within"] is None and ansor["failed"] == 1


def test_compare_layouts_takes_no_report_flags(onnx_path, capsys):
    for flags in (["--json", "r.json"], ["--plot", "p.png"], ["--timing", "steady"]):
        code, out, err = run_cli(capsys, "bench", onnx_path, "--compare-layouts", *flags)
        assert code == 2 and "--compare-layouts times in strict rotation" in err


def test_compare_with_onnxruntime_in_steady_blocks(libs, onnx_path, monkeypatch):
    module = runtime.load_module(libs["good"])
    order = []
    real_run = module.run
    monkeypatch.setattr(module, "run", lambda names, feed: order.append("ours") or real_run(names, feed))
    result = compare.compare_with_onnxruntime(module, onnx_path, threads=1, repeat=5, warmup=2, block=3,
                                              idle_gap_s=0)
    # correctness check, then per turn: warm-up 2, then blocks of 1 untimed + 3 and 1 untimed + 2 timed runs
    assert order == ["ours"] * (1 + 2 + 4 + 3)
    assert result["timing"] == "steady" and result["ours"]["repeat"] == result["onnxruntime"]["repeat"] == 5


def test_bench_plot_draws_a_png(fake_compile, onnx_path, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    code, out, err = run_cli(capsys, "bench", onnx_path, "--repeat", "3", "--warmup", "0", "--threads", "1",
                             "--plot", str(path))
    assert code == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {path}" in out


def test_bench_plot_without_matplotlib_is_a_clean_error(fake_compile, onnx_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out, err = run_cli(capsys, "bench", onnx_path, "--plot", str(tmp_path / "p.png"))
    assert code == 2 and err == "error: --plot needs matplotlib, an optional extra: pip install -e '.[plot]'\n"
    assert not fake_compile.calls  # refused before compiling


def test_op_class_of_a_kernel():
    from relayish_tools.bench.plot import op_class
    assert op_class(["nn.conv2d_nchwc", "add", "nn.relu"]) == "conv"
    assert op_class(["add", "nn.relu"]) == "elementwise" and op_class(["layout_transform"]) == "layout"
    assert op_class(["fixture_op"]) == "other"


# ---- run: tvmc's timing and the profile ------------------------------------------------------------------------
def test_run_print_time_repeat_number(libs, capsys):
    calls = probe(libs["good"], "fixture_calls")
    code, out, err = run_cli(capsys, "run", libs["good"], "--print-time", "--repeat", "3", "--number", "4")
    assert code == 0, err
    lines = out.splitlines()
    at = lines.index("Execution time summary (3 measurement(s), each the mean of 4 run(s)):")
    assert [h.strip() for h in lines[at + 1].split("(ms)")] == ["mean", "median", "max", "min", "std", ""]
    mean, median, high, low, std = map(float, lines[at + 2].split())
    assert low <= median <= high and low <= mean <= high and std >= 0
    assert probe(libs["good"], "fixture_calls") - calls == 1 + 3 * 4  # the printed run, then 12 timed runs


def test_run_profile(libs, capsys):
    code, out, err = run_cli(capsys, "run", libs["good"], "--profile")
    assert code == 0, err
    assert "Node Name" in out and "fused_sum_add" in out and "Total_time" in out


@pytest.mark.parametrize("flags", [["--repeat", "0"], ["--number", "-1"]])
def test_run_timing_counts_must_be_positive(libs, flags, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", libs["good"], "--print-time", *flags])
    assert "expected an integer >= 1" in capsys.readouterr().err


# ---- compile --input-shapes and --version --------------------------------------------------------------------
def test_parse_tvmc_shapes():
    assert parse_tvmc_shapes("data:[1,3,224,224] k:[2]") == [("data", (1, 3, 224, 224)), ("k", (2,))]
    assert parse_tvmc_shapes("input:0:[1, 3],mask:[]") == [("input:0", (1, 3)), ("mask", ())]
    assert parse_tvmc_shapes("x:[-1,3,?,16:64]") == [("x", (None, 3, None, (16, 64)))]  # free dims
    for bad, message in (("data", "expected NAME:"), ("x:[1] junk", "expected NAME:"), ("x:[1,y]", "a dim: a size"),
                         ("x:[-2]", "a dim: a size"), ("x:[1,,2]", "a dim: a size")):
        with pytest.raises(Exception, match=message):
            parse_tvmc_shapes(bad)


def test_compile_takes_tvmc_input_shapes(fake_compile, onnx_path, tmp_path, capsys):
    out_lib = str(tmp_path / "m.so")
    code, out, err = run_cli(capsys, "compile", onnx_path, "-o", out_lib, "--input-shapes", "x:[2,3] k:[2]")
    assert code == 0, err
    assert fake_compile.calls[-1]["input_shapes"] == {"x": (2, 3), "k": (2,)}
    code, out, err = run_cli(capsys, "compile", onnx_path, "-o", out_lib, "--input-shapes", "x:[2,3]",
                             "--input-shape", "x=2,3")
    assert code == 2 and err == "error: --input-shape given twice for input 'x'\n"


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    name, version = capsys.readouterr().out.split()
    assert name == "relayish" and (version == "unknown" or version[0].isdigit())

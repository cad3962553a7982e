"""The `relayish` command line and the onnxruntime comparison, with compile_model replaced by a fake that returns
the C fixture module (tests/fixtures_native.py) and an ONNX model that computes the same thing."""
import re
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from relayish_tools import cli
import compiler
import runtime
from relayish_tools.bench import compare
from relayish_tools.cli.common import parse_input_shape
from runtime import accuracy, timing

from fixtures_native import build_fixture_library, have_compiler, reference_outputs

pytestmark = pytest.mark.skipif(not have_compiler(), reason="needs a C compiler (cc) to build the fixture library")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """The fixture library, and a wrong build of it (y off by one) to make verification fail."""
    good = build_fixture_library(str(tmp_path_factory.mktemp("good")))
    wrong = build_fixture_library(str(tmp_path_factory.mktemp("wrong")), extra=1.0)
    return {"good": good, "wrong": wrong}


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    """y = x * 2.5 - 1; s = sum(y, axis=1) + float(k): the fixture's model in ONNX."""
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["t"]),
        helper.make_node("Add", ["t", "shift"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["r"], keepdims=0),
        helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["r", "kf"], ["s"]),
    ]
    graph = helper.make_graph(
        nodes, "fixture",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2])],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [2.5]),
         helper.make_tensor("shift", TensorProto.FLOAT, [], [-1.0]),
         helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    return save_model(graph, tmp_path_factory.mktemp("model") / "fixture.onnx")


def save_model(graph, path) -> str:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what the installed onnxruntime reads, whatever onnx writes by default
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture()
def fake_compile(monkeypatch, libs):
    """Install a fake compiler.compile_model; returns the list of its calls. Set .lib to choose the build."""
    calls = []

    def compile_model(model_path_or_proto, *, options):  # the CLI hands over one CompileOptions
        calls.append(dict(model=model_path_or_proto, input_shapes=options.input_shapes, layout=options.layout,
                          opt_level=options.opt_level, records=options.records, num_threads=options.num_threads,
                          winograd=options.winograd, cache=options.cache))
        return runtime.load_module(libs[state.lib])

    state = types.SimpleNamespace(lib="good", calls=calls)
    monkeypatch.setattr(compiler, "compile_model", compile_model, raising=False)
    return state


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- parsing ---------------------------------------------------------------------------------------------------
def test_parse_input_shape():
    assert parse_input_shape("data=1,3,224,224") == ("data", (1, 3, 224, 224))
    assert parse_input_shape("in:0=4") == ("in:0", (4,))
    assert parse_input_shape("x=1,3,48,?") == ("x", (1, 3, 48, None))  # free dims: ?, -1 or a range
    assert parse_input_shape("x=-1,3,16:2048") == ("x", (None, 3, (16, 2048)))
    for bad in ("data", "=1,2", "data=1,x", "data=1,-2", "data=1,,2", "x=1,9:3", "x=1,:3"):
        with pytest.raises(Exception, match="expected NAME=D1,D2"):
            parse_input_shape(bad)


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["compile", "m.onnx"], ["bench", "m.onnx", "--threads", "0"],
                                  ["compile", "m.onnx", "-o", "l.so", "--layout", "NHWC"],
                                  ["compile", "m.onnx", "-o", "l.so", "--input-shape", "x"]])
def test_bad_command_lines_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: relayish" in capsys.readouterr().err


def test_mode_choices_are_the_compilers_enums():
    """The CLI spells the choices of compiler.Layout and compiler.DefaultSchedules itself (it starts without
    loading the compiler): they must stay the enums' values."""
    choices = {}
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    for sub in commands.values():
        for action in sub._actions:
            if action.choices and action.dest in ("layout", "start"):
                choices.setdefault(action.dest, set()).update(action.choices)
    assert choices == {"layout": {m.value for m in compiler.Layout},
                       "start": {m.value for m in compiler.DefaultSchedules}}


def test_tune_needs_a_budget_and_an_existing_model(onnx_path, tmp_path, capsys):
    code, out, err = run_cli(capsys, "tune", onnx_path, "--records", str(tmp_path / "r.db"))
    assert code == 2 and "--trials N or --time-budget S" in err
    code, out, err = run_cli(capsys, "tune", str(tmp_path / "nope.onnx"), "--records", "r.db", "--trials", "3")
    assert code == 2 and "model not found" in err


def test_records_of_a_missing_database_is_a_clean_error(tmp_path, capsys):
    code, out, err = run_cli(capsys, "records", "list", str(tmp_path / "missing.db"))
    assert code == 2 and "not found" in err


# ---- compile ---------------------------------------------------------------------------------------------------
def test_compile_passes_options_and_exports(fake_compile, onnx_path, tmp_path, capsys):
    out_lib = str(tmp_path / "lib" / "m.so")
    code, out, err = run_cli(capsys, "compile", onnx_path, "-o", out_lib, "--input-shape", "x=2,3",
                             "--input-shape", "k=2", "--layout", "NCHW", "--records", "r.db", "--threads", "1",
                             "--no-winograd", "--no-cache")
    assert code == 0, err
    assert fake_compile.calls == [dict(model=onnx_path, input_shapes={"x": (2, 3), "k": (2,)}, layout="NCHW",
                                       opt_level=3, records="r.db", num_threads=1, winograd=False, cache=False)]
    assert f"wrote {out_lib}" in out and "3 kernels" in out
    f = {"x": np.ones((2, 3), np.float32), "k": np.array([1, 2])}
    np.testing.assert_array_equal(runtime.load_module(out_lib).run(["y"], f)[0], reference_outputs(**f)[0])


def test_compile_errors_are_one_clean_line(fake_compile, monkeypatch, onnx_path, tmp_path, capsys):
    code, out, err = run_cli(capsys, "compile", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "m.so"))
    assert code == 2 and err.startswith("error: model file not found: ") and err.count("\n") == 1

    class ShapeError(ValueError):
        pass

    def failing(*args, **kwargs):
        raise ShapeError("node 'conv1' (Conv): input 'W' expected shape (64, 3, 7, 7), got (64, 3, 5, 5)")

    monkeypatch.setattr(compiler, "compile_model", failing)
    code, out, err = run_cli(capsys, "compile", onnx_path, "-o", str(tmp_path / "m.so"))
    assert code == 2 and "Traceback" not in err
    assert err == "error: node 'conv1' (Conv): input 'W' expected shape (64, 3, 7, 7), got (64, 3, 5, 5)\n"
    monkeypatch.delattr(compiler, "compile_model")
    code, out, err = run_cli(capsys, "compile", onnx_path, "-o", str(tmp_path / "m.so"))
    assert code == 2 and err.startswith("error: the compiler is not available yet")


def test_duplicate_input_shape_is_an_error(fake_compile, onnx_path, tmp_path, capsys):
    code, out, err = run_cli(capsys, "compile", onnx_path, "-o", str(tmp_path / "m.so"), "--input-shape", "x=1",
                             "--input-shape", "x=2")
    assert code == 2 and err == "error: --input-shape given twice for input 'x'\n" and not fake_compile.calls


# ---- run -------------------------------------------------------------------------------------------------------
def test_run_a_library_with_inputs_file(libs, tmp_path, capsys):
    f = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "k": np.array([5, 7])}
    np.savez(tmp_path / "in.npz", **f)
    code, out, err = run_cli(capsys, "run", libs["good"], "-i", str(tmp_path / "in.npz"), "-o",
                             str(tmp_path / "out.npz"), "--threads", "1")
    assert code == 0, err
    want_y, want_s = reference_outputs(**f)
    assert f"y: shape (2, 3) float32  min {want_y.min():.6g}  max {want_y.max():.6g}" in out
    assert "s: shape (2,) float32" in out
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(saved["y"], want_y)
    np.testing.assert_allclose(saved["s"], want_s, rtol=1e-6)


def test_run_compiles_a_model_and_uses_seeded_random_inputs(fake_compile, onnx_path, capsys):
    first = run_cli(capsys, "run", onnx_path, "--seed", "3")
    second = run_cli(capsys, "run", onnx_path, "--seed", "3")
    other = run_cli(capsys, "run", onnx_path, "--seed", "4")
    assert first[0] == 0 and first == second and first[1] != other[1]
    assert len(fake_compile.calls) == 3


def test_run_input_errors(libs, tmp_path, capsys):
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 3)), k=np.zeros(2, np.int64))
    code, out, err = run_cli(capsys, "run", libs["good"], "-i", str(tmp_path / "bad.npz"))
    assert code == 2 and err.startswith("error: input 'x' has dtype float64, expected float32")
    code, out, err = run_cli(capsys, "run", str(tmp_path / "nope.so"))
    assert code == 2 and err.startswith("error: compiled library not found:")
    code, out, err = run_cli(capsys, "run", libs["good"], "-i", str(tmp_path / "nope.npz"))
    assert code == 2 and err.startswith("error: inputs file not found:")


# ---- verify and bench ------------------------------------------------------------------------------------------
def test_verify_passes_against_onnxruntime(fake_compile, onnx_path, capsys):
    code, out, err = run_cli(capsys, "verify", onnx_path)
    assert code == 0, out + err
    assert [line.split()[-1] for line in out.splitlines()[1:3]] == ["PASS", "PASS"]
    assert out.splitlines()[-1].startswith("PASS")


def test_verify_fails_with_exit_1_on_a_wrong_library(fake_compile, onnx_path, capsys):
    fake_compile.lib = "wrong"
    code, out, err = run_cli(capsys, "verify", onnx_path)
    assert code == 1
    y_line = next(line for line in out.splitlines() if line.startswith("y "))
    assert y_line.endswith("FAIL") and "1.000e+00" in y_line  # max abs error: the +1 of the wrong build
    assert out.splitlines()[-1].startswith("FAIL")


def test_bench_prints_both_engines_and_the_profile(fake_compile, onnx_path, capsys):
    code, out, err = run_cli(capsys, "bench", onnx_path, "--repeat", "5", "--warmup", "1", "--threads", "1",
                             "--profile")
    assert code == 0, err
    assert out.startswith("threads 1, same inputs; timing steady: blocks of 5 consecutive runs")
    assert "5 timed runs each after 1 warm-up runs" in out.splitlines()[0]
    lines = out.splitlines()
    assert lines[1].split() == ["engine", "median_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms", "std_ms"]
    for engine in ("relayish", "onnxruntime"):
        median, p90, p99, mean, low, high, std = map(float, next(
            line for line in lines if line.startswith(engine + " ")).split()[1:])
        assert low <= median <= p90 <= p99 <= high and std >= 0
    assert "ratio relayish/onnxruntime:" in out and "outputs agree with onnxruntime" in out
    assert "fused_sum_add" in out and "Total_time" in out


def test_compare_with_onnxruntime_alternates_engines(libs, onnx_path, monkeypatch):
    module = runtime.load_module(libs["good"])
    order = []
    real_session = compare.make_ort_session(onnx_path, 1)

    class RecordingSession:
        def get_inputs(self):
            return real_session.get_inputs()

        def get_outputs(self):
            return real_session.get_outputs()

        def run(self, names, feed):
            order.append("ort")
            return real_session.run(names, feed)

    real_run = module.run
    monkeypatch.setattr(module, "run", lambda names, feed: order.append("ours") or real_run(names, feed))
    monkeypatch.setattr(compare, "make_ort_session", lambda path, threads: RecordingSession())
    result = compare.compare_with_onnxruntime(module, onnx_path, threads=1, repeat=4, warmup=2, timing="strict")
    assert order == ["ours", "ort"] * (1 + 2 + 4)  # correctness check, warm-up, timed runs
    assert result["ours"]["repeat"] == result["onnxruntime"]["repeat"] == 4 and module.num_threads == 1
    assert result["ratio"] == pytest.approx(result["ours"]["median_ms"] / result["onnxruntime"]["median_ms"])
    assert all(e["passed"] and e["max_rel"] < 1e-6 for e in result["outputs"].values())


def test_output_error_criterion():
    ref = np.array([1.0, -4.0, 2.0], np.float32)
    e = accuracy.output_error(ref + np.array([0, 2e-4, 0], np.float32), ref)
    assert e["max_abs"] == pytest.approx(2e-4, rel=1e-3) and e["max_rel"] == pytest.approx(5e-5, rel=1e-3)
    assert e["passed"]
    assert not accuracy.output_error(ref + np.array([0, 8e-4, 0], np.float32), ref)["passed"]
    assert not accuracy.output_error(np.array([1.0, np.nan, 2.0], np.float32), ref)["passed"]
    assert not accuracy.output_error(ref[:2], ref)["passed"]
    assert accuracy.output_error(np.zeros(3), np.zeros(3))["passed"]
    # the same infinity agrees; another value where the reference is infinite does not; the scale is the largest
    # finite reference value, so a wrong finite element next to an infinity still fails
    inf = np.array([-np.inf, 1.0, np.inf], np.float32)
    assert accuracy.output_error(inf.copy(), inf)["passed"]
    assert not accuracy.output_error(np.array([np.inf, 1.0, np.inf], np.float32), inf)["passed"]
    assert not accuracy.output_error(np.array([-np.inf, 1.0, 3e38], np.float32), inf)["passed"]
    assert not accuracy.output_error(np.array([-np.inf, 2.0, np.inf], np.float32), inf)["passed"]
    assert accuracy.compare_outputs({}, {"y": ref})["y"]["passed"] is False


def test_an_unloadable_model_is_a_clean_error_for_onnxruntime(fake_compile, tmp_path, capsys):
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    code, out, err = run_cli(capsys, "verify", str(tmp_path / "broken.onnx"))
    assert code == 2 and err.startswith("error: onnxruntime cannot load ") and err.count("\n") == 1


# ---- inspect ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def relu_model(tmp_path_factory):
    """relu(x + x), ops any importer supports."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return save_model(graph, tmp_path_factory.mktemp("relu") / "relu.onnx")


def test_inspect_prints_the_imported_graph(relu_model, capsys):
    code, out, err = run_cli(capsys, "inspect", relu_model, "--input-shape", "x=3,4", "--after", "import")
    assert code == 0, err
    assert "nn.relu(" in out and "3, 4" in out and "Primitive" not in out
    assert "summary (as imported" in out and "kernels (fused groups): none yet" in out


def test_inspect_after_an_unknown_pass_is_an_error(relu_model, capsys):
    code, out, err = run_cli(capsys, "inspect", relu_model, "--input-shape", "x=3,4", "--after", "no_such_pass")
    assert code == 2 and err.startswith("error: unknown pass 'no_such_pass'")
    assert "fold_batch_norm" in err and "fuse" in err and err.count("\n") == 1


# ---- real compiles of a small convolution: inspect, profile, layout comparison -------------------------------
CONV_FLOPS = 2 * 4 * 8 * 8 * 3 * 3 * 3  # 2 * output elements * (input channels * kernel), the conv alone
ELEMENTS = 4 * 8 * 8  # of the output: one FLOP each for the bias add and for the relu


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    """relu(conv3x3(x, w) + b): x 1x3x8x8, 4 output channels, pad 1."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], rng.standard_normal(4).astype(np.float32))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, b])
    return save_model(graph, tmp_path_factory.mktemp("conv") / "conv.onnx")


def test_inspect_summarizes_the_fused_graph(conv_model, capsys):
    code, out, err = run_cli(capsys, "inspect", conv_model)
    assert code == 0, err
    graph, summary = out.split("\nsummary (after the whole pipeline, layout NCHWc, opt level 3):\n")
    assert graph.count("Primitive=1") == 3
    lines = summary.splitlines()
    assert "kernels (fused groups): 3" in lines
    kernels = lines[lines.index("kernels (fused groups): 3") + 1:][:3]
    assert [re.split(r"\s{2,}", k.strip()) for k in kernels] == [
        ["0", "layout_transform", "(1, 1, 8, 8, 3)", "0 FLOP"],
        ["1", "nn.conv2d_nchwc, add, nn.relu", "(1, 1, 8, 8, 4)", f"{(CONV_FLOPS + 2 * ELEMENTS) / 1e3:.3g} kFLOP"],
        ["2", "layout_transform", "(1, 4, 8, 8)", "0 FLOP"]]
    transforms = lines[lines.index("layout transforms: 2") + 1:][:2]
    assert transforms == ["  NCHW -> NCHW3c  reads input %x  in kernel 0",
                          "  NCHW4c -> NCHW  reads nn.relu (kernel 1)  in kernel 2"]
    assert f"total: {(CONV_FLOPS + 2 * ELEMENTS) / 1e3:.3g} kFLOP" in lines
    passes = lines[lines.index("passes (ms):") + 1:]
    assert [p.split()[0] for p in passes] == ["fold_constants", "recognize_patterns", "sink_reshapes",
                                             "fold_batch_norm", "eliminate_identity_ops", "crop_dead_taps",
                                             "alter_layout", "propagate_layout", "fold_constants_2", "fuse",
                                             "fold_constant_kernels"]


def test_inspect_options_change_the_pipeline(conv_model, capsys):
    code, out, err = run_cli(capsys, "inspect", conv_model, "--layout", "NCHW", "--summary-only")
    assert code == 0, err
    assert "fn (" not in out and "layout transforms: 0" in out and "kernels (fused groups): 1" in out
    code, out, err = run_cli(capsys, "inspect", conv_model, "--opt-level", "0", "--summary-only", "--layout", "NCHW")
    assert code == 0 and "kernels (fused groups): 3" in out
    skipped = [line.split()[0] for line in out.splitlines() if line.endswith("skipped (opt level)")]
    assert skipped == ["fold_constants", "recognize_patterns", "sink_reshapes", "crop_dead_taps", "alter_layout",
                       "propagate_layout"]
    code, out, err = run_cli(capsys, "inspect", conv_model, "--after", "alter_layout", "--summary-only")
    assert code == 0 and "none yet" in out and "reads constant" in out  # the weight transform, not folded yet
    assert out.strip().splitlines()[-1].split()[0] == "alter_layout"


def test_profile_rows_of_a_compiled_model(conv_model):
    sess = compiler.compile_model(conv_model)
    rows = sess.profile(repeat=5)
    assert [r["ops"] for r in rows] == [["layout_transform"], ["nn.conv2d_nchwc", "add", "nn.relu"],
                                        ["layout_transform"]]
    assert [tuple(r["output_shape"]) for r in rows] == [(1, 1, 8, 8, 3), (1, 1, 8, 8, 4), (1, 4, 8, 8)]
    assert [r["layout"] for r in rows] == ["NCHW3c", "NCHW4c", "NCHW"]
    assert [r["flops"] for r in rows] == [0, CONV_FLOPS + 2 * ELEMENTS, 0]
    assert all(r["median_ms"] > 0 for r in rows)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    for r in rows:
        assert r["share"] == pytest.approx(r["median_ms"] / sum(q["median_ms"] for q in rows))
        assert r["gflops"] == pytest.approx(r["flops"] / (r["median_ms"] * 1e6))
    table = runtime.format_profile(rows)
    assert "nn.conv2d_nchwc,add,nn.relu" in table and "(1, 1, 8, 8, 4)" in table and "NCHW4c" in table


def test_profile_times_the_right_kernel(tmp_path):
    # a 103 MFLOP convolution between two layout transforms of 16K elements: the rows name the right kernels and
    # FLOPs, and every row is timed. Which row takes longest is a speed fact, not asserted here: on a shared
    # machine a preempted 10 us transform can read longer than the convolution (benchmarks judge speed).
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64, 7, 7],
                           (rng.standard_normal(64 * 64 * 49) * 0.02).astype(np.float32))
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[3, 3, 3, 3])], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 16, 16])], [w])
    sess = compiler.compile_model(save_model(graph, tmp_path / "big.onnx"))
    rows = sess.profile(repeat=20)
    assert [r["ops"] for r in rows] == [["layout_transform"], ["nn.conv2d_nchwc"], ["layout_transform"]]
    assert [r["flops"] for r in rows] == [0, 2 * 64 * 16 * 16 * 64 * 49, 0]
    assert [r["name"] for r in rows] == [k["name"] for k in sess.kernels]  # row i times kernel call i
    assert all(r["median_ms"] > 0 for r in rows) and sum(r["share"] for r in rows) == pytest.approx(1.0)
    total_ms = sum(r["median_ms"] for r in rows)
    for r in rows:
        assert r["share"] == pytest.approx(r["median_ms"] / total_ms)
        assert r["gflops"] == pytest.approx(r["flops"] / (r["median_ms"] * 1e6))


def test_bench_profile_of_a_real_compile(conv_model, capsys):
    code, out, err = run_cli(capsys, "bench", conv_model, "--repeat", "3", "--warmup", "0", "--profile",
                             "--layout", "NCHW")
    assert code == 0, err
    assert "outputs agree with onnxruntime" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Node Name"))
    columns = ["Node Name", "Ops", "Time(us)", "Time(%)", "GFLOPS", "Shape", "Layout"]
    assert re.split(r"\s{2,}", lines[header]) == columns
    name, ops, us, pct, gflops, shape, layout = re.split(r"\s{2,}", lines[header + 2])
    assert (ops, pct, shape, layout) == ("nn.conv2d,add,nn.relu", "100.0", "(1, 4, 8, 8)", "NCHW")
    # GFLOPS from the unrounded time: within the bounds the printed (2-decimal) time and (1-decimal) rate allow
    flops = CONV_FLOPS + 2 * ELEMENTS
    fastest, slowest = flops / ((float(us) - 0.005) * 1e3), flops / ((float(us) + 0.005) * 1e3)
    assert slowest - 0.05 <= float(gflops) <= fastest + 0.05, (us, gflops)


def test_compare_layouts_prints_every_engine_against_onnxruntime(conv_model, capsys):
    code, out, err = run_cli(capsys, "bench", conv_model, "--compare-layouts", "--repeat", "20", "--warmup", "1",
                             "--threads", "1")
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("threads 1, 20 rounds after 1 warm-up rounds")
    assert re.split(r"\s{2,}", lines[1]) == ["engine", "opt", "kernels", "median_ms", "min_ms", "max_ms", "vs ort",
                                             "outputs", "max rel err"]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[2:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("fused NCHWc", "3", "3"), ("fused NCHWc direct", "3", "3"),
                                                  ("fused NCHW", "3", "1"), ("unfused NCHW", "0", "3"),
                                                  ("onnxruntime", "-", "-")]
    medians = [float(r[3]) for r in rows]
    for r, median in zip(rows, medians):
        assert float(r[4]) <= median <= float(r[5])
        # the ratio is of the unrounded medians
        assert r[6].endswith("x") and float(r[6][:-1]) == pytest.approx(median / medians[-1], abs=0.02)
    assert [r[7] for r in rows] == ["ok", "ok", "ok", "ok", "reference"] and rows[-1][8] == "-"
    assert all(float(r[8]) <= 1e-4 for r in rows[:3])


def test_compare_layouts_needs_20_runs(conv_model, capsys):
    code, out, err = run_cli(capsys, "bench", conv_model, "--compare-layouts", "--repeat", "5")
    assert code == 2 and err == "error: --compare-layouts needs --repeat >= 20, got 5\n"


def test_time_alternating_rotates_engines_and_summarizes_each():
    order = []
    engines = [(name, lambda name=name: order.append(name)) for name in ("a", "b", "c")]
    stats = timing.time_alternating(engines, repeat=3, warmup=2, idle_gap_s=0)
    assert order == ["a", "b", "c"] * 5
    assert list(stats) == ["a", "b", "c"] and all(s["repeat"] == 3 for s in stats.values())
    with pytest.raises(ValueError, match="unique"):
        timing.time_alternating([("a", lambda: None), ("a", lambda: None)], repeat=1, warmup=0)


def test_conformance_subcommand_runs_the_selected_cases(capsys):
    assert cli.main(["conformance", "--ops", "Relu", "-k", "test_relu", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "relayish: 1 cases" in out and "pass 1" in out


# ---- free dims: compile to a session folder, run it, bench it size by size -----------------------------------
@pytest.fixture(scope="module")
def free_height_model(tmp_path_factory):
    """conv3x3(x, w), x [1, 3, h, 8] with h a dim_param: a model whose height is free."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "h", 8])], [w])
    return save_model(graph, tmp_path_factory.mktemp("free") / "free.onnx")


def test_compile_with_a_free_dim_writes_a_session_that_run_loads(free_height_model, tmp_path, capsys):
    folder = tmp_path / "session"
    code, out, err = run_cli(capsys, "compile", free_height_model, "--input-shape", "x=1,3,?,8", "-o", str(folder),
                             "--sizes", "h=5", "--no-cache")
    assert code == 0, err
    assert "a session with free dims h (x dim 2)" in out and "1 module(s) kept" in out
    import onnxruntime as ort
    for h, extra in ((5, []), (7, ["--model", free_height_model])):  # 5 was compiled into the folder, 7 is not
        x = np.random.default_rng(h).standard_normal((1, 3, h, 8)).astype(np.float32)
        np.savez(tmp_path / "in.npz", x=x)
        code, out, err = run_cli(capsys, "run", str(folder), "-i", str(tmp_path / "in.npz"), "-o",
                                 str(tmp_path / "o.npz"), *extra)
        assert code == 0, err
        assert f"y: shape (1, 4, {h}, 8) float32" in out
        with np.load(tmp_path / "o.npz") as got:
            want, = ort.InferenceSession(free_height_model).run(None, {"x": x})
            np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)
    code, out, err = run_cli(capsys, "run", str(folder), "-i", str(tmp_path / "in.npz"))  # 7, and no model
    assert code == 2 and "no module for them and no model to compile one" in err
    code, out, err = run_cli(capsys, "run", str(folder))
    assert code == 2 and "free dims ['h']: give inputs of the sizes to run with -i NPZ" in err
    code, out, err = run_cli(capsys, "run", str(tmp_path))
    assert code == 2 and "not a session folder that relayish compile wrote" in err


def test_bench_with_a_free_dim_times_each_size_and_lists_the_modules(free_height_model, capsys):
    code, out, err = run_cli(capsys, "bench", free_height_model, "--input-shape", "x=1,3,?,8", "--sizes", "h=6,11",
                             "--repeat", "3", "--warmup", "0", "--no-cache")
    assert code == 0, err
    assert "free dims: h (x dim 2); generic tier: any h on kernels with run-time extents" in out
    rows = [line for line in out.splitlines() if line.startswith("x [")]
    assert [r.split()[:5] for r in rows] == [["x", "[1,", "3,", "6,", "8]"], ["x", "[1,", "3,", "11,", "8]"]]
    assert all(float(r.split()[-1]) < 1e-4 for r in rows)  # max relative error against onnxruntime
    assert "{'h': 6}: compiled in" in out and "{'h': 11}: compiled in" in out


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "w=6"], "the model's free dims are h (x dim 2): give the sizes of each with --sizes"),
    ([], "the model's free dims are h (x dim 2)"),
    (["--sizes", "h=6", "--json", "r.json"], "with free dims, bench prints a table per size"),
])
def test_bench_with_a_free_dim_needs_its_sizes(free_height_model, capsys, argv, message):
    code, out, err = run_cli(capsys, "bench", free_height_model, "--input-shape", "x=1,3,?,8", "--no-cache", *argv)
    assert code == 2 and message in err


def test_verify_and_sizes_without_free_dims_are_clear_errors(free_height_model, conv_model, capsys):
    code, out, err = run_cli(capsys, "verify", free_height_model, "--input-shape", "x=1,3,?,8")
    assert code == 2 and "verify checks one shape, and the model's dims ['h'] are free" in err
    code, out, err = run_cli(capsys, "bench", conv_model, "--sizes", "h=6")
    assert code == 2 and "--sizes: the model has no free dims" in err

"""The fuzzer: its seeds are valid and match onnxruntime, its mutators keep models parseable and do what they say,
its verdicts classify errors and outputs as documented, its worker pool survives a crash and a hang, and a small
campaign finds no crash, hang, wrong result, unclear error or unjustified acceptance."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import onnx
import pytest

from relayish_tools.fuzz import mutators
from relayish_tools.fuzz.campaign import make_mutant, run_campaign
from relayish_tools.fuzz.runner import Job, run_jobs
from relayish_tools.fuzz.seeds import seed_models
from relayish_tools.fuzz.verdict import Outcome, compare, gap_reason, is_clear_error, judge, nonfinite_disagreement

SEEDS = seed_models()


def test_seeds_match_onnxruntime():
    from compiler import compile_model
    from harness import random_feeds, run_ort
    for name, model in SEEDS.items():
        feeds = random_feeds(model)
        ours = compile_model(model).run(None, feeds)
        assert compare(ours, run_ort(model, feeds)) == "", name


def test_mutants_are_deterministic_and_parseable():
    for index in range(60):
        name, mutant, mutations = make_mutant(7, index)
        again = make_mutant(7, index)
        assert again[0] == name and again[2] == mutations
        assert again[1].SerializeToString() == mutant.SerializeToString()
        assert mutations, "every mutant has at least one mutation"
        onnx.load_from_string(mutant.SerializeToString())


def _mutated(name, mutator, seed=0):
    model = onnx.ModelProto()
    model.CopyFrom(SEEDS[name])
    rng = np.random.default_rng(seed)
    for _ in range(50):
        what = mutator(model, rng)
        if what is not None:
            return model, what
    raise AssertionError(f"{mutator.__name__} never applied to {name}")


def test_mutators_edit_what_they_say():
    model, what = _mutated("depthwise_conv", mutators.auto_pad_with_pads)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}
    assert attrs["pads"] == [1, 1, 1, 1] and attrs["auto_pad"] in (b"VALID", b"SAME_UPPER", b"SAME_LOWER"), what
    model, what = _mutated("matmul_bias", mutators.drop_init)
    assert len(model.graph.initializer) == len(SEEDS["matmul_bias"].graph.initializer) - 1, what
    model, what = _mutated("matmul_bias", mutators.init_dims)
    before = {t.name: list(t.dims) for t in SEEDS["matmul_bias"].graph.initializer}
    assert any(list(t.dims) != before[t.name] for t in model.graph.initializer), what
    model, what = _mutated("residual_add", mutators.opset)
    assert model.opset_import != SEEDS["residual_add"].opset_import or "domain" in what
    # a mutator that does not apply returns None and leaves the model alone
    model = onnx.ModelProto()
    model.CopyFrom(SEEDS["matmul_bias"])
    assert mutators.auto_pad_with_pads(model, np.random.default_rng(0)) is None
    assert model == SEEDS["matmul_bias"]


def test_every_mutator_applies_somewhere():
    for name, fn in mutators.MUTATORS.items():
        assert any(_try(fn, seed) for seed in SEEDS), name


def _try(fn, seed_name):
    try:
        _mutated(seed_name, fn)
        return True
    except AssertionError:
        return False


def _err(error_type, module, message, raised_in=""):
    return Outcome(error_type=error_type, error_module=module, message=message, raised_in=raised_in)


def test_error_clarity():
    named = "<bytes>: node 'Conv_0' (Conv): attribute pads must be 4 ints"
    assert is_clear_error(_err("OnnxImportError", "frontends.onnx", named))
    assert is_clear_error(_err("OpError", "relayish.op", "nn.conv2d: groups=3 must divide data channels 4"))
    assert is_clear_error(_err("ValueError", "builtins", named, raised_in="compiler.build"))
    # bare builtins are unclear whatever they say, and wherever they come from
    assert not is_clear_error(_err("KeyError", "builtins", "'w0'", raised_in="frontends.onnx"))
    assert not is_clear_error(_err("KeyError", "builtins", named, raised_in="frontends.onnx"))
    assert not is_clear_error(_err("IndexError", "builtins", "tuple index out of range", raised_in="compiler.lower"))
    assert not is_clear_error(_err("AssertionError", "builtins", "", raised_in="compiler.schedule"))
    assert not is_clear_error(_err("ValueError", "builtins", "cannot reshape array of size 3 into shape ()",
                                   raised_in="numpy.core.fromnumeric"))
    # our own type without naming anything is unclear too
    assert not is_clear_error(_err("OpError", "relayish.op", "bad"))


def test_verdicts():
    ran = Outcome(outputs=[np.array([1.0, np.nan], np.float32)])
    rejected = _err("OnnxImportError", "frontends.onnx", "<bytes>: node 'a' (Relu): missing input")
    ort_rejected = _err("Fail", "onnxruntime", "[ONNXRuntimeError] : 1 : FAIL : bad")
    assert judge(ran, ran, []).kind == "MATCH"
    assert judge(ran, Outcome(outputs=[np.array([1.0, 0.0], np.float32)]), []).kind == "WRONG"
    assert judge(ran, Outcome(outputs=[np.array([1.001, np.nan], np.float32)]), []).kind == "WRONG"
    assert judge(ran, rejected, []).kind == "GAP"
    assert judge(ort_rejected, rejected, []).kind == "BOTH_REJECT"
    assert judge(ort_rejected, ran, ["opset: opset 7"]).kind == "UNJUSTIFIED"
    assert judge(_err("Fail", "onnxruntime", "padding values must be non-negative"), ran,
                 ["attr_ints: AveragePool_1.kernel_shape = [1, 1]"]).kind == "ORT_REJECTS_WE_RUN"
    assert judge(ran, _err("KeyError", "builtins", "'x'"), []).kind == "UNCLEAR"
    assert judge(ran, Outcome(died="crash: signal 11"), []).kind == "CRASH"
    assert judge(ran, Outcome(died="hang: no answer within 60 s"), []).kind == "HANG"
    assert gap_reason("<bytes>: node 'Conv_3' (Conv): pads (1, 2) has 2 values") == "Conv: pads (…) has N values"


def test_nonfinite_disagreements_are_judged_by_the_onnx_reference():
    # Inf weights times zero padding: NaN in ours and in onnx's reference implementation, +inf in onnxruntime's
    ort = Outcome(outputs=[np.array([np.inf, 1.0], np.float32)])
    ours = Outcome(outputs=[np.array([np.nan, 1.0], np.float32)])
    assert nonfinite_disagreement(ours.outputs, ort.outputs)
    assert not nonfinite_disagreement(ours.outputs, [np.array([np.nan, 2.0], np.float32)])
    assert judge(ort, ours, []).kind == "WRONG"  # no reference: a disagreement is wrong
    ours.reference = [np.array([np.nan, 1.0], np.float32)]
    assert judge(ort, ours, []).kind == "ORT_OFF_REFERENCE"
    ours.reference = [np.array([np.inf, 1.0], np.float32)]  # the reference sides with onnxruntime
    assert judge(ort, ours, []).kind == "WRONG"


def test_compare_nan_and_inf():
    a = np.array([1.0, np.nan, np.inf], np.float32)
    assert compare([a], [a.copy()]) == ""
    assert "NaN" in compare([a], [np.array([1.0, 2.0, np.inf], np.float32)])
    assert "infinities" in compare([a], [np.array([1.0, np.nan, -np.inf], np.float32)])
    assert "shape" in compare([a], [a[:2]])


def _hostile(job):
    if job.model == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if job.model == b"hang":
        time.sleep(3600)


def test_pool_survives_crash_and_hang():
    """A job that segfaults and one that hangs (in relayish's phase) are recorded; the workers are restarted and
    the next jobs still run (the crash and the hang come from the before_ours hook _hostile)."""
    model = SEEDS["matmul_bias"].SerializeToString()
    jobs = [Job(0, model, 0), Job(1, b"crash", 0), Job(2, model, 0), Job(3, b"hang", 0), Job(4, model, 0)]
    results = {}
    t0 = time.monotonic()
    restarts = run_jobs(jobs, lambda job, ort, ours: results.setdefault(job.index, ours), workers=2,
                        timeout_s=20.0, before_ours=_hostile)
    assert restarts == 2 and time.monotonic() - t0 < 120
    assert results[1].died.startswith("crash: signal") and results[3].died.startswith("hang")
    assert all(results[k].ran for k in (0, 2, 4))


def test_small_campaign_is_clean(tmp_path):
    report = run_campaign(150, seed=0, workers=2, out_dir=tmp_path)
    print(report.summary())
    assert report.failed == 0, report.summary()
    assert report.counts["MATCH"] > 10 and report.counts["BOTH_REJECT"] > 10


def _found_cases():
    """Classes of mutants the campaigns found that we ran or failed on unclearly; each now a clear error."""
    from harness import make_model
    w = np.ones((2, 3, 3, 3), np.float32)
    yield "Conv", make_model("Conv", {"x": (1, 3, 6, 6)}, dict(auto_pad="VALID", pads=[1, 1, 1, 1]), 13, {"w": w}), \
        "auto_pad=VALID together with explicit pads"
    yield "MaxPool", make_model("MaxPool", {"x": (1, 2, 6, 6)}, dict(kernel_shape=[2, 2], ceil_mode=2)), \
        "ceil_mode must be 0 or 1, got 2"
    yield "MaxPool", make_model("MaxPool", {"x": (1, 2, 6, 6)}, dict(kernel_shape=[2, 2], strides=[2**31, 1])), \
        "strides .* beyond the int32 range"
    yield "Gemm", make_model("Gemm", {"a": (2, 3), "b": (3, 4)}, dict(transB=3)), "transB must be 0 or 1"
    yield "Clip", make_model("Clip", {"x": (2, 3)}, opset=13, consts={"lo": np.array([0.0, 1.0], np.float32)}), \
        "input 'min' must be a scalar, got shape \\(2,\\)"
    yield "Clip", make_model("Clip", {"x": (2, 3)}, opset=13, consts={"lo": np.array(0, np.int32)}), \
        "input 'min' is int32"
    yield "Reshape", make_model("Reshape", {"x": (2, 3)}, opset=13, consts={"s": np.array([3, 2], np.float64)}), \
        "input 'shape' must be int64, got float64"
    yield "Concat", make_model("Concat", {"a": (1, 2)}, dict(axis=0), 13, consts={None: np.zeros(1)}), \
        "input 1 is empty \\(''\\): Concat's variadic inputs cannot be omitted"
    yield "AveragePool", make_model("AveragePool", {"x": (1, 2, 10, 9)},
                                    dict(kernel_shape=[2**31 - 1, 2], auto_pad="SAME_UPPER", strides=[2, 2])), \
        "a window of 4294967294 taps; at most 16777216"


def test_found_by_fuzzing_now_clear_errors():
    from frontends import OnnxImportError, from_onnx
    for op, model, reason in _found_cases():
        with pytest.raises(OnnxImportError, match=f"node '{op.lower()}_node' \\({op}\\): .*{reason}"):
            from_onnx(model)

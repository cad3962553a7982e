"""The conformance runner itself, with fake cases and engines (no compiling): results in order, a crash or a hang
recorded against the case that caused it and the suite going on in a new worker; the comparison; the grouping."""
import json
import os
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import helper

from relayish_tools.conformance import CaseResult, case_ops, compare, run_cases, select
from relayish_tools.conformance.report import counts, format_report, groups, reason, write_json


def _case(name, *ops):
    nodes = [helper.make_node(op, ["x"], ["x"]) for op in ops or ("Relu",)]
    return SimpleNamespace(name=name, model=SimpleNamespace(graph=SimpleNamespace(node=nodes)))


def _fake_engine(case):
    """pass / wrong by name; 'segv' kills its worker, 'hang' never returns, 'exit' leaves with os._exit."""
    if case.name == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.name == "hang":
        time.sleep(600)
    if case.name == "exit":
        os._exit(3)
    return CaseResult(case.name, "pass" if case.name.startswith("ok") else "wrong", "output 0: values differ")


@pytest.mark.parametrize("workers", [1, 2])
def test_crash_and_hang_are_recorded_and_the_suite_goes_on(workers):
    cases = [_case(n) for n in ("ok1", "segv", "ok2", "hang", "bad", "exit", "ok3")]
    start = time.monotonic()
    results = run_cases(cases, _fake_engine, workers=workers, timeout=1.0)
    assert time.monotonic() - start < 30
    assert [r.name for r in results] == [c.name for c in cases]
    by_name = {r.name: r for r in results}
    assert [by_name[n].status for n in ("ok1", "ok2", "ok3", "bad")] == ["pass", "pass", "pass", "wrong"]
    assert by_name["segv"].status == "crash" and "SIGSEGV" in by_name["segv"].message
    assert by_name["hang"].status == "crash" and "timed out after 1 s" in by_name["hang"].message
    assert by_name["exit"].status == "crash" and "exited with code 3" in by_name["exit"].message
    assert by_name["segv"].ops == ("Relu",)


def test_select_keeps_cases_whose_ops_are_all_given():
    cases = [_case("a", "Relu"), _case("b", "Relu", "Exp"), _case("c", "Conv"), _case("relu_big", "Relu")]
    assert case_ops(cases[1]) == {"Relu", "Exp"}
    assert [c.name for c in select(cases, ["Relu"])] == ["a", "relu_big"]
    assert [c.name for c in select(cases, ["Relu", "Exp"])] == ["a", "b", "relu_big"]
    assert [c.name for c in select(cases, None, ["big", "c"])] == ["c", "relu_big"]


def test_compare_follows_onnx_backend_rules():
    f = np.array([1.0, np.nan, 3.0], np.float32)
    assert compare([f], [f.copy()], 1e-3, 1e-7) is None
    assert compare([f], [np.array([1.0, 2.0, 3.0], np.float32)], 1e-3, 1e-7)  # NaN positions must agree
    assert compare([f], [f * np.float32(1 + 1e-4)], 1e-3, 1e-7) is None  # within rtol
    assert "Mismatched elements: 1 / 3" in compare([f], [f + np.float32([0, 0, 0.1])], 1e-3, 1e-7)
    assert compare([f], [f.astype(np.float64)], 1e-3, 1e-7) == "output 0: dtype float64, expected float32"
    assert compare([f], [f[:2]], 1e-3, 1e-7) == "output 0: shape (2,), expected (3,)"
    assert compare([f], [f, f], 1e-3, 1e-7) == "2 outputs, expected 1"
    i = np.array([1, 2, 3], np.int64)
    assert compare([i], [i + np.array([0, 0, 1])], 1.0, 1.0) == "output 0: 1 of 3 elements differ"  # exact
    assert compare([[f, f]], [[f, f]], 1e-3, 1e-7) is None  # a sequence output


def test_a_16_bit_mismatch_reports_its_distance_in_ulp():
    want = np.array([1.0, 0.75, -3.0, np.inf], np.float16)
    got = want.copy()
    got[1] = np.nextafter(want[1], np.float16(1))  # one ulp at 0.75
    assert compare([want], [got], 1e-5, 0).endswith("(at most 1 ulp of float16)")
    got[2] = want[2] - 3 * np.spacing(want[2])
    assert compare([want], [got], 1e-5, 0).endswith("(at most 3 ulp of float16)")
    assert "ulp" not in compare([want.astype(np.float32)], [got.astype(np.float32)], 1e-5, 0)


def test_failures_group_by_reason_without_names_and_shapes(tmp_path):
    results = [
        CaseResult("t1", "unsupported", "OnnxImportError: <ModelProto t1>: ai.onnx opset 29 is not supported"),
        CaseResult("t2", "unsupported", "OnnxImportError: <ModelProto t2>: ai.onnx opset 29 is not supported"),
        CaseResult("t3", "unsupported", "OnnxImportError: <ModelProto t3>: 2 unsupported op type(s):\n"
                                        "  Foo (ai.onnx v28): 1 node(s), first 'n'\n  Bar (ai.onnx.ml v1): 1 node(s)"),
        CaseResult("t4", "other-error", "OnnxImportError: <ModelProto t4>: node 'n1' (Clip): shape (2, 3) bad 'x'"),
        CaseResult("t5", "pass"), CaseResult("t6", "crash", "worker killed by signal SIGSEGV")]
    assert reason(results[2]) == "unsupported op type(s): Foo, Bar (ai.onnx.ml)"
    assert reason(results[3]) == "OnnxImportError: node (Clip): shape (*) bad '*'"
    assert groups(results)[0] == ("unsupported", "OnnxImportError: ai.onnx opset 29 is not supported", ["t1", "t2"])
    assert counts(results) == {"pass": 1, "wrong": 0, "crash": 1, "unsupported": 3, "other-error": 1}
    text = format_report("relayish", results, 1.0)
    assert "pass 1  wrong 0  crash 1  unsupported 3  other-error 1" in text and "SIGSEGV: t6" in text
    write_json(str(tmp_path / "r.json"), "relayish", results, 1.0)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["counts"]["unsupported"] == 3 and len(report["cases"]) == 6

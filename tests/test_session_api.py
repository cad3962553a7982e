"""The session API against onnxruntime's InferenceSession: the same user code runs on both and sees the same things
(runtime/session.py), except the provider name, which says whose session it is."""
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import runtime
from compiler import compile_model
from runtime.session import NO_VERSION, PROVIDER, RunOptions, RunTerminated


def tiny_model(path, with_metadata: bool = True) -> str:
    """y = relu(x) * 2 and z = flatten(global_average_pool(y)), x ['batch', 3, 4, 4] (a symbolic batch)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y"], ["p"]), helper.make_node("Flatten", ["p"], ["z"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 4, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])], doc_string="graph doc" if with_metadata else "")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if with_metadata:
        model.producer_name, model.domain, model.doc_string, model.model_version = "tests", "ai.test", "doc", 7
        helper.set_model_props(model, {"author": "me", "licence": "MIT"})
    model.ir_version = 8  # what the installed onnxruntime reads
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module", params=[True, False], ids=["metadata", "bare"])
def sessions(request, tmp_path_factory):
    path = tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.onnx", with_metadata=request.param)
    ours = compile_model(path, input_shapes={"x": (2, 3, 4, 4)})
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return ours, theirs


def user_code(sess, run_options_class) -> dict:
    """What an onnxruntime user writes: describe the session, make inputs from its NodeArgs, run it."""
    seen = {}
    seen["inputs"] = [(a.name, a.shape, a.type) for a in sess.get_inputs()]
    seen["outputs"] = [(a.name, a.shape, a.type) for a in sess.get_outputs()]
    meta = sess.get_modelmeta()
    seen["meta"] = {k: getattr(meta, k) for k in ("producer_name", "graph_name", "domain", "description",
                                                  "graph_description", "version", "custom_metadata_map")}
    rng = np.random.default_rng(0)
    feed = {a.name: rng.standard_normal([2 if isinstance(d, str) else d for d in a.shape]).astype(np.float32)
            for a in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    seen["all"] = sess.run(None, feed)
    seen["all_by_name"] = sess.run(names, feed)
    seen["reversed"] = sess.run(names[::-1], feed)
    seen["subset"] = sess.run(["z"], feed)
    options = run_options_class()
    options.logid = "call-7"
    options.log_severity_level = 3
    options.add_run_config_entry("custom.key", "v")
    seen["config"] = options.get_run_config_entry("custom.key")
    seen["with_options"] = sess.run(["y"], feed, options)
    options.terminate = True
    with pytest.raises(Exception, match="(?i)terminate flag") as info:
        sess.run(None, feed, options)
    seen["terminated"] = isinstance(info.value, Exception)
    return seen


def test_the_same_user_code_sees_the_same_session(sessions):
    ours, theirs = sessions
    mine, ref = user_code(ours, RunOptions), user_code(theirs, ort.RunOptions)
    assert mine.keys() == ref.keys()
    for key in ("inputs", "outputs", "meta", "config", "terminated"):
        assert mine[key] == ref[key], key
    for key in ("all", "all_by_name", "reversed", "subset", "with_options"):
        assert [a.shape for a in mine[key]] == [a.shape for a in ref[key]], key
        for a, b in zip(mine[key], ref[key]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_what_the_session_reports(sessions):
    ours, _ = sessions
    assert [str(a) for a in ours.get_inputs()] == ["NodeArg(name='x', type='tensor(float)', shape=['batch', 3, 4, 4])"]
    assert ours.get_providers() == [PROVIDER]
    assert ours.input_shapes == {"x": (2, 3, 4, 4)}  # what run takes: the dims bound at compile time
    if ours.get_modelmeta().producer_name:
        assert ours.get_modelmeta().custom_metadata_map == {"author": "me", "licence": "MIT"}
    else:
        assert ours.get_modelmeta().version == NO_VERSION


def test_onnxruntime_run_options_work_on_our_session(sessions):
    ours, _ = sessions
    options = ort.RunOptions()
    feed = ours.random_inputs()
    np.testing.assert_array_equal(ours.run(["z"], feed, options)[0], ours.run(["z"], feed)[0])
    options.terminate = True
    with pytest.raises(RunTerminated, match="terminate flag"):
        ours.run(None, feed, options)


def test_errors_carry_the_log_tag(sessions):
    ours, _ = sessions
    with pytest.raises(ValueError, match=r"^\[req-1\] unknown output\(s\) 'nope'"):
        ours.run(["nope"], ours.random_inputs(), RunOptions(logid="req-1"))
    with pytest.raises(ValueError, match=r"^\[req-2\] input 'x' has shape"):
        ours.run(None, {"x": np.zeros((1, 3, 4, 4), np.float32)}, RunOptions(logid="req-2"))


def test_terminate_set_while_a_call_waits_for_a_workspace(sessions):
    ours, _ = sessions
    limit, ours.max_concurrent_runs = ours.max_concurrent_runs, 1
    options, errors = RunOptions(), []
    try:
        with ours._workspaces.slot():  # the only workspace is taken: the call below waits for it
            worker = threading.Thread(target=lambda: _run_catching(ours, options, errors))
            worker.start()
            time.sleep(0.2)  # ordering only: let the call reach the wait before the flag is set
            options.terminate = True
        worker.join(10)
    finally:
        ours.max_concurrent_runs = limit
    assert not worker.is_alive() and len(errors) == 1 and isinstance(errors[0], RunTerminated)


def _run_catching(sess, options, errors):
    try:
        sess.run(None, sess.random_inputs(), options)
    except Exception as e:  # noqa: BLE001 - the test inspects it
        errors.append(e)


def test_exported_library_keeps_the_session_api(sessions, tmp_path):
    ours, _ = sessions
    loaded = runtime.load_module(ours.export_library(str(tmp_path / "tiny.so")))
    assert loaded.get_inputs() == ours.get_inputs() and loaded.get_outputs() == ours.get_outputs()
    assert loaded.get_modelmeta() == ours.get_modelmeta()


def test_a_malformed_source_model_is_refused(sessions):
    ours, _ = sessions
    for bad in ({"input_dims": {"x": [1.5]}}, {"version": "7"}, {"custom_metadata_map": {"a": 1}}, [1]):
        with pytest.raises(runtime.MetadataError, match="source_model"):
            runtime.Module(ours.lib_path, dict(ours.meta, source_model=bad))


def test_a_library_without_source_model_reports_compiled_shapes(sessions):
    ours, _ = sessions
    meta = {k: v for k, v in ours.meta.items() if k != "source_model"}
    plain = runtime.Module(ours.lib_path, meta)
    assert [a.shape for a in plain.get_inputs()] == [[2, 3, 4, 4]]
    assert plain.get_modelmeta() == runtime.ModelMetadata()

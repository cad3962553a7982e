"""compile_model on a model whose shapes come from the values of graph inputs: a ValueSpecializedSession that
compiles once per distinct value (compiler/specialize.py), checked against onnxruntime."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from compiler import specialize
from compiler.specialize import ValueSpecializedSession
from frontends import OnnxImportError
from harness import run_ort
from runtime import Module


def reshape_model():
    """y = reshape(x, s) + 1 with the shape s a graph input."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Add", ["r", "one"], ["y"])]
    graph = helper.make_graph(
        nodes, "reshape_by_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4)),
         helper.make_tensor_value_info("s", TensorProto.INT64, (2,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
        [helper.make_tensor("one", TensorProto.FLOAT, (), [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_a_shape_input_compiles_per_value_and_matches_onnxruntime():
    model = reshape_model()
    sess = compile_model(model)
    assert isinstance(sess, ValueSpecializedSession) and sess.value_inputs == ("s",)
    for shape in ([4, 6], [-1, 2], [24, 1], [4, 6]):
        feed = {"x": X, "s": np.array(shape, np.int64)}
        ours, = sess.run(None, feed)
        ref, = run_ort(model, feed)
        np.testing.assert_array_equal(ours, ref)
    assert sess.specializations == 3  # [4, 6] twice: compiled once


def test_the_session_describes_the_model_as_onnxruntime_does():
    sess = compile_model(reshape_model())
    assert [(a.name, a.shape, a.type) for a in sess.get_inputs()] == [("x", [2, 3, 4], "tensor(float)"),
                                                                      ("s", [2], "tensor(int64)")]
    assert [(a.name, a.shape, a.type) for a in sess.get_outputs()] == [("y", ["a", "b"], "tensor(float)")]
    assert sess.get_modelmeta().graph_name == "reshape_by_input"
    with pytest.raises(AttributeError, match=r"specialization\(\{name: value"):
        sess.benchmark()


def test_input_values_bind_inputs_as_constants():
    module = compile_model(reshape_model(), input_values={"s": np.array([6, 4], np.int64)})
    assert isinstance(module, Module) and [a.name for a in module.get_inputs()] == ["x"]
    np.testing.assert_array_equal(module.run(None, {"x": X})[0], X.reshape(6, 4) + 1)
    with pytest.raises(OnnxImportError, match=r"input_values\['s'\] is int32 of shape \(2,\), expected int64"):
        compile_model(reshape_model(), input_values={"s": np.array([6, 4], np.int32)})


def test_bad_values_give_clear_errors():
    sess = compile_model(reshape_model())
    with pytest.raises(OnnxImportError, match=r"cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, 5\)"):
        sess.run(None, {"x": X, "s": np.array([5, 5], np.int64)})
    with pytest.raises(ValueError, match="input 's' has dtype int32, expected int64"):
        sess.run(None, {"x": X, "s": np.array([4, 6], np.int32)})
    with pytest.raises(ValueError, match=r"missing input\(s\) \['s'\]"):
        sess.run(None, {"x": X})


def test_a_large_value_input_is_not_specialized_on(monkeypatch):
    monkeypatch.setattr(specialize, "MAX_VALUE_ELEMENTS", 1)
    sess = compile_model(reshape_model())
    with pytest.raises(OnnxImportError, match="compiles per value of small inputs only"):
        sess.run(None, {"x": X, "s": np.array([4, 6], np.int64)})


def test_kept_specializations_are_bounded(monkeypatch):
    monkeypatch.setattr(specialize, "MAX_SPECIALIZATIONS", 2)
    sess = compile_model(reshape_model())
    for shape in ([4, 6], [6, 4], [3, 8], [8, 3]):
        sess.run(None, {"x": X, "s": np.array(shape, np.int64)})
    assert sess.specializations == 2


def test_concurrent_runs_with_different_values_get_their_own_answers():
    sess = compile_model(reshape_model())
    shapes = [[4, 6], [6, 4], [2, 12], [12, 2]]
    errors = []

    def worker(k):
        try:
            for i in range(6):
                shape = shapes[(k + i) % len(shapes)]
                y, = sess.run(None, {"x": X, "s": np.array(shape, np.int64)})
                np.testing.assert_array_equal(y, X.reshape(shape) + 1)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sess.specializations == 4

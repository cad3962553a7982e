"""Model files with external data: a location that is absolute, contains `..`, is a symlink or a hardlink, or
resolves outside the model's folder is refused before any data file is opened; so are bad offsets and lengths, and
external references in a model given as bytes or a ModelProto. A well-formed one loads and matches onnxruntime."""
from __future__ import annotations

import builtins
import io
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from frontends import OnnxImportError, from_onnx
from frontends.onnx import load_model
from relayish.interp import evaluate

WEIGHT = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def _model_with_external(folder: Path, location: str, offset=None, length=None, write_data=True) -> Path:
    """folder/model.onnx: y = x @ w with w stored externally at `location` (written as folder/weights.bin unless
    location points elsewhere and write_data is False)."""
    w = numpy_helper.from_array(WEIGHT, "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            w.external_data.add(key=key, value=str(value))
    if write_data:
        (folder / "weights.bin").write_bytes(WEIGHT.tobytes())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def no_data_open(monkeypatch):
    """Call it once the files are written: from then on, opening a data file fails the test (the refusal must
    come before any data file is opened)."""
    def arm():
        def guard(opener):
            def wrapped(file, *args, **kwargs):
                if any(name in str(file) for name in ("weights", "secret", ".bin")):
                    raise AssertionError(f"{file} was opened before the model was refused")
                return opener(file, *args, **kwargs)
            return wrapped
        for module, name in ((builtins, "open"), (io, "open"), (os, "open")):
            monkeypatch.setattr(module, name, guard(getattr(module, name)))
    return arm


def test_relative_location_loads_and_runs(tmp_path):
    path = _model_with_external(tmp_path, "weights.bin", offset=0, length=WEIGHT.nbytes)
    x = np.ones((2, 3), np.float32)
    y, = evaluate(from_onnx(path), {"x": x})
    np.testing.assert_allclose(y, x @ WEIGHT, rtol=1e-6)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "w.bin").write_bytes(b"\0" * 8 + WEIGHT.tobytes())
    path = _model_with_external(tmp_path, "sub/w.bin", offset=8, write_data=False)
    y, = evaluate(from_onnx(path), {"x": x})
    np.testing.assert_allclose(y, x @ WEIGHT, rtol=1e-6)


@pytest.mark.parametrize("make_location,reason", [
    (lambda d: str(d / "weights.bin"), "relative path"),
    (lambda d: "../secret.bin", "contains '..'"),
    (lambda d: "sub/../weights.bin", "contains '..'"),
    (lambda d: "sub\\weights.bin", "relative path"),
    (lambda d: "missing.bin", "does not exist"),
])
def test_bad_locations_refused_before_open(tmp_path, no_data_open, make_location, reason):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(WEIGHT.tobytes())
    (folder / "sub").mkdir()
    path = _model_with_external(folder, make_location(folder), write_data=False)
    no_data_open()
    with pytest.raises(OnnxImportError, match=reason) as e:
        from_onnx(path)
    assert "initializer 'w'" in str(e.value)


def test_symlinks_refused(tmp_path, no_data_open):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(WEIGHT.tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "link.bin").symlink_to(outside)
    (folder / "linked_dir").symlink_to(tmp_path, target_is_directory=True)
    to_file = _model_with_external(folder, "link.bin", write_data=False).read_bytes()
    to_dir = _model_with_external(folder, "linked_dir/secret.bin", write_data=False).read_bytes()
    no_data_open()
    for model in (to_file, to_dir):
        (folder / "model.onnx").write_bytes(model)
        with pytest.raises(OnnxImportError, match="is a symlink"):
            from_onnx(folder / "model.onnx")


def test_hardlink_refused(tmp_path, no_data_open):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(WEIGHT.tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    os.link(outside, folder / "hard.bin")
    path = _model_with_external(folder, "hard.bin", write_data=False)
    no_data_open()
    with pytest.raises(OnnxImportError, match="2 hard links"):
        from_onnx(path)


@pytest.mark.parametrize("offset,length,reason", [
    (4, None, "needs bytes 4 to 52, but the file has 48"),
    (0, 40, "length 40 bytes, but dims"),
    (-1, None, "offset -1 is negative"),
    ("abc", None, "offset 'abc' is not an integer"),
])
def test_bad_offset_or_length_refused(tmp_path, offset, length, reason):
    with pytest.raises(OnnxImportError, match=reason):
        from_onnx(_model_with_external(tmp_path, "weights.bin", offset=offset, length=length))


def test_huge_declared_tensor_fails_fast(tmp_path):
    path = _model_with_external(tmp_path, "weights.bin")
    model = onnx.load(str(path), load_external_data=False)
    model.graph.initializer[0].dims[:] = [1 << 20, 1 << 20]
    path.write_bytes(model.SerializeToString())
    with pytest.raises(OnnxImportError, match="more than the .* bytes any tensor may have"):
        from_onnx(path)


def test_external_refs_from_bytes_or_proto_refused(tmp_path, no_data_open):
    path = _model_with_external(tmp_path, "weights.bin")
    data = path.read_bytes()
    no_data_open()
    with pytest.raises(OnnxImportError, match="no folder to read them from"):
        from_onnx(data)
    with pytest.raises(OnnxImportError, match="no folder to read them from"):
        load_model(onnx.load_from_string(data))


# ---- tensors inside the model file: data that disagrees with dims, sizes beyond the limits ----

def _matmul_model(w: TensorProto, x_shape=(2, 3)) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("mutate,reason", [
    (lambda w: setattr(w, "raw_data", w.raw_data[:-4]), "raw data has 44 bytes, but dims \\(3, 4\\) of float32 "
                                                        "need 48"),
    (lambda w: w.dims.__setitem__(slice(None), [3, 5]), "raw data has 48 bytes, but dims \\(3, 5\\)"),
    (lambda w: setattr(w, "data_type", TensorProto.DOUBLE), "raw data has 48 bytes, but dims \\(3, 4\\) of float64"),
    (lambda w: w.dims.__setitem__(slice(None), [1 << 40, 4]), "more than the 2147483647"),
    (lambda w: setattr(w, "data_type", TensorProto.STRING), "unsupported data type STRING"),
])
def test_initializer_data_disagreeing_with_dims_names_it(mutate, reason):
    w = numpy_helper.from_array(WEIGHT, "w")
    mutate(w)
    with pytest.raises(OnnxImportError, match=f"initializer 'w'.*{reason}"):
        from_onnx(_matmul_model(w).SerializeToString())


def test_graph_input_size_limits():
    model = _matmul_model(numpy_helper.from_array(WEIGHT, "w"), (2, 1 << 31))
    with pytest.raises(OnnxImportError, match="input 'x'.*more than the"):
        from_onnx(model.SerializeToString())


def test_constant_of_shape_too_large_fails_fast():
    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "s")
    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(OnnxImportError, match="'fill'.*more than the 2147483647"):
        from_onnx(model.SerializeToString())

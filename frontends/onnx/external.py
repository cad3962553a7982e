"""Tensors of an ONNX model whose data lives outside the model file ("external data"), read under our own rules.

A tensor with `data_location = EXTERNAL` names its bytes by `location` (a path relative to the model file's
folder), `offset` and `length`. onnx's own checks on these changed across versions (older ones followed absolute
paths and `..`), so we do not rely on them: every external tensor of the model is checked **before any data
file is opened**, and the model is refused (ExternalDataError naming the tensor and the reason) unless
- `location` is a relative path with no `..` component, no backslash and no NUL;
- every path component under the model's folder exists and is not a symlink, the file is a regular file with
  exactly one hard link (a hardlink could make a file elsewhere look local), and the resolved path is inside the
  model's folder;
- `offset` and `length` are non-negative integers, the tensor's dims and dtype give its byte size, `length` (if
  given) equals it, and offset + size fits in the file.
Then each file is opened with O_NOFOLLOW, checked to be the file that was inspected, and read; the tensors get
their bytes as raw_data and no longer refer to any file.

A model given as bytes or as a ModelProto has no folder: external references in it are refused.

`external_data_locations` lists the files a model's bytes refer to, for the compile cache's key
(compiler/cache.py).
"""
from __future__ import annotations

import math
import os
import stat
from pathlib import Path, PurePosixPath

import onnx
from onnx import TensorProto, helper
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

MAX_TENSOR_BYTES = 1 << 36  # 64 GiB: no tensor of a model we can compile is larger


class ExternalDataError(ValueError):
    """A tensor's external data is refused or unreadable; the message names the tensor."""


def external_tensors(model: onnx.ModelProto) -> list[tuple[TensorProto, str]]:
    """(tensor, description) of every tensor with external data: initializers, sparse initializers and tensor
    attributes of nodes, in subgraphs too."""
    found: list[tuple[TensorProto, str]] = []

    def graph(g: onnx.GraphProto):
        for t in g.initializer:
            found.append((t, f"initializer {t.name!r}"))
        for s in g.sparse_initializer:
            found.extend([(s.values, f"sparse initializer {s.values.name!r} (values)"),
                          (s.indices, f"sparse initializer {s.values.name!r} (indices)")])
        for node in g.node:
            for a in node.attribute:
                where = f"attribute {a.name!r} of node {node.name or node.op_type!r}"
                if a.HasField("t"):
                    found.append((a.t, where))
                found.extend((t, where) for t in a.tensors)
                if a.HasField("g"):
                    graph(a.g)
                for sub in a.graphs:
                    graph(sub)

    graph(model.graph)
    return [(t, where) for t, where in found if t.data_location == TensorProto.EXTERNAL]


def refuse_external_data(model: onnx.ModelProto):
    """A model without a folder (bytes, ModelProto) may not refer to external data."""
    tensors = external_tensors(model)
    if tensors:
        names = ", ".join(where for _, where in tensors[:3]) + (" ..." if len(tensors) > 3 else "")
        raise ExternalDataError(f"{len(tensors)} tensor(s) keep their data in external files ({names}), but a "
                                f"model given as bytes or a ModelProto has no folder to read them from: pass the "
                                f"model's file path instead")


def load_external_data(model: onnx.ModelProto, model_path: Path):
    """Check every external tensor (module docstring), then read them all into raw_data."""
    folder = model_path.parent
    plans = [(t, where, _checked_plan(t, where, folder)) for t, where in external_tensors(model)]
    for tensor, where, (path, st, offset, size) in plans:
        tensor.raw_data = _read(path, st, offset, size, where)
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


def _checked_plan(tensor: TensorProto, where: str, folder: Path) -> tuple[Path, os.stat_result, int, int]:
    """(file path, its lstat, offset, byte size) after every check that needs no open file."""
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    label = f"{where}: external data location {location!r}"
    if not location:
        raise ExternalDataError(f"{where}: external data without a location")
    if "\\" in location or "\0" in location or os.path.isabs(location) or PurePosixPath(location).is_absolute():
        raise ExternalDataError(f"{label} must be a relative path inside the model's folder")
    parts = PurePosixPath(location).parts
    if ".." in parts:
        raise ExternalDataError(f"{label} contains '..': data must live inside the model's folder")
    path = folder
    for part in parts:
        path = path / part
        try:
            st = os.lstat(path)
        except OSError as e:
            raise ExternalDataError(f"{label}: {path} does not exist ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise ExternalDataError(f"{label}: {path} is a symlink; external data must be plain files")
    if not stat.S_ISREG(st.st_mode):
        raise ExternalDataError(f"{label}: {path} is not a regular file")
    if st.st_nlink > 1:
        raise ExternalDataError(f"{label}: {path} has {st.st_nlink} hard links; external data must be a file "
                                f"with one link")
    if folder.resolve() not in path.resolve().parents:
        raise ExternalDataError(f"{label} resolves outside the model's folder {folder.resolve()}")
    offset = _non_negative_int(info.get("offset", "0"), "offset", label)
    size = tensor_nbytes(tensor, where)
    if "length" in info and _non_negative_int(info["length"], "length", label) != size:
        raise ExternalDataError(f"{label}: length {info['length']} bytes, but dims {tuple(tensor.dims)} of "
                                f"{_dtype_name(tensor)} need {size}")
    if offset + size > st.st_size:
        raise ExternalDataError(f"{label}: needs bytes {offset} to {offset + size}, but the file has "
                                f"{st.st_size} bytes")
    return path, st, offset, size


def _non_negative_int(text: str, what: str, label: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ExternalDataError(f"{label}: {what} {text!r} is not an integer") from None
    if value < 0:
        raise ExternalDataError(f"{label}: {what} {value} is negative")
    return value


def _dtype_name(tensor: TensorProto) -> str:
    return TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() \
        else f"data type {tensor.data_type}"


def tensor_nbytes(tensor: TensorProto, where: str) -> int:
    """Bytes that the tensor's dims and (fixed-size) dtype need; ExternalDataError if unknown or too large."""
    if any(d < 0 for d in tensor.dims):
        raise ExternalDataError(f"{where}: negative dims {tuple(tensor.dims)}")
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        raise ExternalDataError(f"{where}: unsupported data type {tensor.data_type}") from None
    if tensor.data_type == TensorProto.STRING:
        raise ExternalDataError(f"{where}: string tensors are not supported")
    size = math.prod(tensor.dims) * itemsize
    if size > MAX_TENSOR_BYTES:
        raise ExternalDataError(f"{where}: dims {tuple(tensor.dims)} of {_dtype_name(tensor)} need {size} bytes, "
                                f"more than the {MAX_TENSOR_BYTES} bytes any tensor may have")
    return size


def _read(path: Path, st: os.stat_result, offset: int, size: int, where: str) -> bytes:
    """size bytes at offset of the file inspected as `st` (O_NOFOLLOW; refused if it changed since)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise ExternalDataError(f"{where}: cannot open external data file {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(f.fileno())
        if (now.st_dev, now.st_ino, now.st_nlink) != (st.st_dev, st.st_ino, 1) or now.st_size < offset + size:
            raise ExternalDataError(f"{where}: external data file {path} changed while the model was loading")
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise ExternalDataError(f"{where}: read {len(data)} of {size} bytes from {path}")
    return data


def external_data_locations(data: bytes) -> list[str]:
    """The sorted relative paths of the external-data files the model in `data` names; [] if none, or if the bytes
    do not parse (reporting that is from_onnx's job)."""
    try:
        proto = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - any parse failure: not ours to report here
        return []
    return sorted({ExternalDataInfo(t).location for t in _get_all_tensors(proto) if uses_external_data(t)})

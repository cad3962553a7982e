"""The metadata file LIB.so.json that describes a compiled library: the one contract between build and runtime.

Format (FORMAT_VERSION = 1), a JSON object:

    {
      "format_version": 1,
      "inputs":  [{"name": "data", "shape": [1, 3, 224, 224], "dtype": "float32"}, ...],
      "outputs": [{"name": "prob", "shape": [1, 1000], "dtype": "float32"}, ...],
      "workspace_bytes": 1605632,
      "params_bytes": 46758400,
      "params_file": "resnet18.so.params",
      "kernels": [{"name": "fused_conv2d_add_relu_0", "ops": ["nn.conv2d", "add", "nn.relu"],
                   "output_shape": [1, 4, 112, 112, 16], "layout": "NCHW16c", "flops": 236027904}, ...],
      "target": {"triple": "x86_64-unknown-linux-gnu", "cpu": "znver5", "features": "+avx2,+avx512f,+fma,-xop"},
      "compile_info": {... free form: opt level, passes, tuning records used, compile time ...},
      "source_model": {"input_dims": {"data": ["batch", 3, 224, 224]}, "output_dims": {...}, "producer_name": "",
                       "graph_name": "", "domain": "", "description": "", "graph_description": "", "version": null,
                       "custom_metadata_map": {}}
    }

Invariants (checked by `validate_metadata`):
- In memory, a list may also be a tuple (the compiler's shapes are tuples); the JSON file has lists.
- An input entry may have `index_bounds` [lo, hi] (an integer input used as indices into a table): every value v
  passed must satisfy lo <= v < hi; the runtime checks it before native code runs. Or a list of such pairs, one
  per position along the input's last axis (index tuples into several dims, as GatherND's): the value at last
  position t must lie in pair t.
- `inputs` / `outputs` are in ABI order: entry i is `inputs[i]` / `outputs[i]` of `relayish_run`. Names are unique
  within each list; shapes are lists of non-negative ints (static shapes only); dtypes are numpy dtype names.
- An input entry with `index_bounds` may have `index_ignored` c, an int: v == c is allowed too (a loss's
  ignore_index, masked before the values index anything).
- `workspace_bytes`, `params_bytes` are non-negative ints: the sizes of the scratch buffer and of the weights blob.
- `params_file` is a bare file name (no directory part, not absolute, not "." or "..") in the directory holding the
  library; the file holds exactly `params_bytes` raw bytes. It may be omitted, meaning "<library file name>.params".
- `kernels` are in execution order: entry i is `ns_per_kernel[i]` of `relayish_run_profiled`. `flops` counts
  floating point operations (a fused multiply-add is 2).
- `target.features` is LLVM's feature string ("+a,-b", only "+" entries are requirements) or a list of names.
- `sha256` (written by export_library, required by load_module, see runtime.integrity) holds the SHA-256 digests of
  the library file, the weights file and the metadata fields the native code depends on.
- `source_model` (optional, written for an ONNX model; read by runtime.session for the onnxruntime-like session
  API) holds the model's declared dims (ints, dim names or null per dim; null for no shape) and its metadata fields.
- Unknown top-level keys are allowed, so a newer writer can add fields without breaking an older reader; a newer
  `format_version` is refused.
"""
from __future__ import annotations

import json
import os

import numpy as np

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "inputs", "outputs", "workspace_bytes", "params_bytes", "kernels", "target")


class LoadError(ValueError):
    """A compiled library cannot be loaded: a corrupt file, a wrong size, a missing symbol, another CPU."""


class MetadataError(LoadError):
    """The metadata of a compiled library is missing a field or has a malformed one."""


class FileMissingError(LoadError, FileNotFoundError):
    """A file of a compiled library (the .so, its .json or its weights) does not exist."""


def _fail(source: str, what: str, value) -> None:
    raise MetadataError(f"corrupt metadata in {source}: {what}, got {value!r}")


def _is_shape(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_bare_file_name(value) -> bool:
    separators = {"/", "\\"} | ({os.sep, os.altsep} - {None})
    return isinstance(value, str) and value not in ("", ".", "..") and "\0" not in value and \
        not any(sep in value for sep in separators)


def _is_dtype_name(value) -> bool:
    try:
        return isinstance(value, str) and (value == "bfloat16" or np.dtype(value).kind in "biuf")
    except TypeError:
        return False


def _is_bounds_pair(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and \
        all(isinstance(v, int) and not isinstance(v, bool) for v in value) and value[0] <= 0 < value[1]


def _is_index_bounds(value, shape, dtype) -> bool:
    if not (_is_dtype_name(dtype) and dtype.startswith("int") and isinstance(value, (list, tuple)) and value):
        return False
    if _is_bounds_pair(value):
        return True
    return all(_is_bounds_pair(v) for v in value) and _is_shape(shape) and len(shape) > 0 and \
        shape[-1] == len(value)


def _check_tensors(meta: dict, key: str, source: str) -> None:
    entries = meta[key]
    if not isinstance(entries, (list, tuple)):
        _fail(source, f"'{key}' must be a list of {{name, shape, dtype}}", entries)
    seen = set()
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict) or not {"name", "shape", "dtype"} <= entry.keys():
            _fail(source, f"{where} must be an object with name, shape and dtype", entry)
        if not isinstance(entry["name"], str) or entry["name"] in seen:
            _fail(source, f"{where}.name must be a unique string", entry["name"])
        seen.add(entry["name"])
        if not _is_shape(entry["shape"]):
            _fail(source, f"{where}.shape must be a list of non-negative ints", entry["shape"])
        if not _is_dtype_name(entry["dtype"]):
            _fail(source, f"{where}.dtype must be a numeric numpy dtype name", entry["dtype"])
        if "index_bounds" in entry and not _is_index_bounds(entry["index_bounds"], entry["shape"], entry["dtype"]):
            _fail(source, f"{where}.index_bounds must be [lo, hi] ints with lo <= 0 < hi on an integer input, or "
                          f"one such pair per position of its last axis", entry["index_bounds"])


def _check_kernels(meta: dict, source: str) -> None:
    kernels = meta["kernels"]
    if not isinstance(kernels, (list, tuple)):
        _fail(source, "'kernels' must be a list", kernels)
    for i, k in enumerate(kernels):
        if not isinstance(k, dict) or not {"name", "ops", "output_shape", "layout", "flops"} <= k.keys():
            _fail(source, f"kernels[{i}] must be an object with name, ops, output_shape, layout and flops", k)
        if not isinstance(k["ops"], (list, tuple)) or not all(isinstance(op, str) for op in k["ops"]):
            _fail(source, f"kernels[{i}].ops must be a list of op names", k["ops"])
        if not _is_shape(k["output_shape"]):
            _fail(source, f"kernels[{i}].output_shape must be a list of non-negative ints", k["output_shape"])
        if not isinstance(k["flops"], (int, float)) or k["flops"] < 0:
            _fail(source, f"kernels[{i}].flops must be a non-negative number", k["flops"])


def _check_index_ignored(inputs, source: str) -> None:
    for i, entry in enumerate(inputs):
        if "index_ignored" in entry and not ("index_bounds" in entry and isinstance(entry["index_ignored"], int)
                                             and not isinstance(entry["index_ignored"], bool)):
            _fail(source, f"inputs[{i}].index_ignored must be an int, beside index_bounds", entry["index_ignored"])


def validate_metadata(meta, source: str = "<metadata>") -> None:
    """Raise MetadataError (naming `source` and the offending field) unless `meta` follows the format above."""
    if not isinstance(meta, dict):
        _fail(source, "the metadata must be a JSON object", type(meta).__name__)
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise MetadataError(f"corrupt metadata in {source}: missing field(s) {', '.join(missing)}")
    version = meta["format_version"]
    if version != FORMAT_VERSION:
        _fail(source, f"format_version must be {FORMAT_VERSION} (this runtime reads only that)", version)
    _check_tensors(meta, "inputs", source)
    _check_index_ignored(meta["inputs"], source)
    _check_tensors(meta, "outputs", source)
    for key in ("workspace_bytes", "params_bytes"):
        if not _is_count(meta[key]):
            _fail(source, f"'{key}' must be a non-negative int", meta[key])
    if "params_file" in meta and not _is_bare_file_name(meta["params_file"]):
        _fail(source, "'params_file' must be a bare file name in the library's directory (no directory part, "
                      "not absolute, not '..')", meta["params_file"])
    _check_kernels(meta, source)
    target = meta["target"]
    if not isinstance(target, dict) or not isinstance(target.get("triple"), str):
        _fail(source, "'target' must be an object with at least a 'triple' string", target)


def read_metadata(path: str) -> dict:
    """Read and validate the metadata file at `path`; errors name the file."""
    if not os.path.isfile(path):
        raise FileMissingError(f"metadata file not found: {path} (it must sit next to the library)")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MetadataError(f"corrupt metadata in {path}: not valid JSON ({e})") from None
    validate_metadata(meta, path)
    return meta


def dump_metadata(meta: dict, source: str = "<metadata>") -> str:
    """Validate `meta` and return it as indented JSON text (free-form compile_info values that JSON cannot
    represent, like paths, are written as their str())."""
    validate_metadata(meta, source)
    return json.dumps(meta, indent=1, default=str) + "\n"

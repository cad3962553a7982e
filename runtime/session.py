"""What onnxruntime's InferenceSession offers besides `run`, for a compiled Module: NodeArg, ModelMetadata,
RunOptions and the provider name, so that code written against onnxruntime works after replacing the constructor.

    sess.get_inputs()[0].name, .shape, .type      # 'data', ['batch', 3, 224, 224], 'tensor(float)'
    sess.get_modelmeta().producer_name             # from the ONNX model
    sess.run(None, feed, RunOptions(logid="req-7"))

The declared dims and the model's metadata come from the optional metadata field "source_model" (written by the
compiler for an ONNX model, see runtime/metadata.py); a library without it (built from an IRModule, or by an older
compiler) reports its compiled shapes and empty model metadata. A shape keeps the model's symbolic dim names,
like onnxruntime's; `run` still takes only the compiled shape (Module.input_shapes), because dims are bound at
compile time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .metadata import MetadataError

PROVIDER = "RelayishCPUExecutionProvider"
NO_VERSION = 2**63 - 1  # onnxruntime's ModelMetadata.version when the model sets no model_version
META_STRINGS = ("producer_name", "graph_name", "domain", "description", "graph_description")
# numpy dtype name -> onnxruntime's NodeArg.type
ORT_TYPES = {"float32": "tensor(float)", "float64": "tensor(double)", "float16": "tensor(float16)",
             "bfloat16": "tensor(bfloat16)",
             "int8": "tensor(int8)", "int16": "tensor(int16)", "int32": "tensor(int32)", "int64": "tensor(int64)",
             "uint8": "tensor(uint8)", "uint16": "tensor(uint16)", "uint32": "tensor(uint32)",
             "uint64": "tensor(uint64)", "bool": "tensor(bool)"}


class RunTerminated(RuntimeError):
    """run() was called with RunOptions.terminate set (onnxruntime: 'Exiting due to terminate flag')."""


@dataclass(frozen=True)
class NodeArg:
    """One input or output as onnxruntime's NodeArg shows it: shape items are ints, dim names or None."""
    name: str
    shape: list
    type: str

    def __str__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    """onnxruntime's ModelMetadata: the ONNX model's own fields (version NO_VERSION when the model sets none)."""
    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = NO_VERSION
    custom_metadata_map: dict = field(default_factory=dict)


class RunOptions:
    """Per-call settings of `run`, with onnxruntime's RunOptions attributes.

    - terminate: if True when the call starts, run raises RunTerminated before any native code runs. A call in
      progress is one native call and is not interrupted (onnxruntime checks between ops).
    - logid: a tag that run's error messages start with ("[logid] ..."), to tell calls apart.
    - log_severity_level, log_verbosity_level, only_execute_path_to_fetches: accepted and kept; relayish logs
      nothing while running and always computes every output of its single native call.
    - add_run_config_entry / get_run_config_entry: free-form string settings, kept (none is interpreted yet).
    An onnxruntime.RunOptions object may be passed instead: run reads only `terminate` and `logid`.
    """

    def __init__(self, logid: str = "", terminate: bool = False):
        self.logid = logid
        self.terminate = terminate
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"run config entries are strings, got {key!r}: {value!r}")
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise KeyError(f"no run config entry {key!r}")
        return self._config[key]


def check_run_options(run_options) -> str:
    """The log tag of `run_options` ('' if None); raises RunTerminated if its terminate flag is set."""
    if run_options is None:
        return ""
    tag = str(getattr(run_options, "logid", "") or "")
    if getattr(run_options, "terminate", False):
        raise RunTerminated(f"{_prefix(tag)}exiting due to terminate flag being set to true")
    return tag


def _prefix(tag: str) -> str:
    return f"[{tag}] " if tag else ""


def tagged(error: ValueError, tag: str) -> ValueError:
    """The same kind of error with its message prefixed by the run's log tag."""
    return type(error)(f"{_prefix(tag)}{error}") if tag else error


def _check_dims(dims, where: str, source: str) -> None:
    ok = dims is None or (isinstance(dims, list) and all(
        d is None or isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool) and d >= 0) for d in dims))
    if not ok:
        raise MetadataError(f"corrupt metadata in {source}: source_model.{where} must be a list of ints, dim names "
                            f"or nulls, or null, got {dims!r}")


def node_args(specs, declared: dict | None, key: str, source: str) -> list[NodeArg]:
    """NodeArgs of `specs` (TensorSpecs): the declared dims source_model[key][name] where recorded (and not
    null), else the compiled shape."""
    declared = declared or {}
    args = []
    for spec in specs:
        dims = declared.get(spec.name)
        _check_dims(dims, f"{key}[{spec.name!r}]", source)
        shape = list(dims) if dims is not None else list(spec.shape)
        args.append(NodeArg(spec.name, shape, ORT_TYPES.get(spec.dtype.name, f"tensor({spec.dtype})")))
    return args


def model_metadata(source_model: dict | None, source: str) -> ModelMetadata:
    """ModelMetadata from the metadata's "source_model" field (empty fields when there is none)."""
    if source_model is None:
        return ModelMetadata()
    if not isinstance(source_model, dict):
        raise MetadataError(f"corrupt metadata in {source}: source_model must be an object, got {source_model!r}")
    strings = {k: source_model.get(k, "") for k in META_STRINGS}
    custom = source_model.get("custom_metadata_map", {})
    version = source_model.get("version")
    wrong = [k for k, v in strings.items() if not isinstance(v, str)]
    if not isinstance(custom, dict) or not all(isinstance(v, str) for v in custom.values()):
        wrong.append("custom_metadata_map")
    if not (version is None or (isinstance(version, int) and not isinstance(version, bool))):
        wrong.append("version")
    if wrong:
        raise MetadataError(f"corrupt metadata in {source}: source_model field(s) of the wrong type: "
                            f"{', '.join(wrong)}")
    return ModelMetadata(**strings, version=NO_VERSION if version is None else version,
                         custom_metadata_map=dict(custom))

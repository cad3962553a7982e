"""Compiling per value of the inputs that give a model its shapes.

relayish compiles static shapes: a Reshape's shape, a Slice's bounds, a ReduceSum's axes, a Clip's bounds, a
Range's limits must be known when the model is imported. When a model computes such an input from a graph input
(onnx's conformance cases do; so do exporters that pass `axes` or `k` as inputs), compile_model cannot compile it
alone. It returns a ValueSpecializedSession instead: the first `run` with a new value of those inputs compiles the
model with them bound as constants (compile_model(input_values=...)), later runs with the same values reuse that
compilation (the compile cache keeps it across processes too). This is what a JIT's guard does, once per value.

Invariants:
- Only small inputs are specialized on (MAX_VALUE_ELEMENTS): a shape-giving input is a handful of integers; a
  model whose shapes depend on a large tensor's values is refused with the import error that says so.
- A specialization is chosen by the exact bytes, dtype and shape of every value input: a value is never reused
  for another, so results are those of a model compiled for the values given.
- At most MAX_SPECIALIZATIONS compiled modules are kept (least recently used dropped): memory stays bounded
  when the values change from call to call.
- Thread-safe: concurrent runs compile a missing specialization once (others wait for it), then each runs on the
  compiled module, which is itself safe to call from several threads.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from frontends import OnnxImportError
from runtime.session import ORT_TYPES, PROVIDER, ModelMetadata, NodeArg, model_metadata

MAX_VALUE_ELEMENTS = 4096
MAX_SPECIALIZATIONS = 8


class ValueSpecializedSession:
    """A session over a model whose compiled code depends on the values of some inputs (`value_inputs`); `run`
    compiles on first sight of their values. The onnxruntime-like API (run, get_inputs, get_outputs,
    get_modelmeta, get_providers) answers as a compiled Module's does; anything else (benchmark, profile,
    export_library) belongs to one specialization: `specialization(values)`."""

    def __init__(self, model, value_inputs: tuple[str, ...], options, compile_with, described: dict,
                 reason: OnnxImportError):
        """options: the compile's compiler.options.CompileOptions; compile_with(model, options): the compiler
        (compiler.compile.compile_with, handed in: compile.py imports this module, not the other way round)."""
        self._model = model
        self._value_inputs = tuple(sorted(value_inputs))
        self._options = options
        self._compile = compile_with
        self._described = described
        self._reason = reason
        self._modules: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @property
    def value_inputs(self) -> tuple[str, ...]:
        """The graph inputs whose values select the compiled module (grows if a value reveals another one)."""
        return self._value_inputs

    @property
    def specializations(self) -> int:
        """How many compiled modules are kept now."""
        return len(self._modules)

    # ---- onnxruntime's InferenceSession API ----
    def get_inputs(self) -> list[NodeArg]:
        return self._node_args("input")

    def get_outputs(self) -> list[NodeArg]:
        return self._node_args("output")

    def get_modelmeta(self) -> ModelMetadata:
        return model_metadata(self._described, "the model")

    def get_providers(self) -> list[str]:
        return [PROVIDER]

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        missing = [n for n in self._value_inputs if n not in input_feed]
        if missing:
            raise ValueError(f"missing input(s) {missing}: this model is compiled per value of {list(self._value_inputs)}")
        module, bound = self._module_for(input_feed)
        rest = {k: v for k, v in input_feed.items() if k not in bound}
        return module.run(output_names, rest, run_options)

    def specialization(self, input_values: dict):
        """The compiled Module for these values of the value inputs (compiled now if it is not kept)."""
        return self._module_for(input_values)[0]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"{name!r}: this session compiles the model once per value of the input(s) "
                             f"{list(self._value_inputs)} (they give it shapes); ask one compiled module: "
                             f"sess.specialization({{name: value, ...}}).{name}")

    def __repr__(self):
        return (f"ValueSpecializedSession(value_inputs={list(self._value_inputs)}, "
                f"specializations={len(self._modules)})")

    # ---- internals ----
    def _node_args(self, kind: str) -> list[NodeArg]:
        dims, types = self._described[f"{kind}_dims"], self._described[f"{kind}_types"]
        return [NodeArg(name, list(d) if d is not None else None, ORT_TYPES.get(types.get(name) or "", "tensor(?)"))
                for name, d in dims.items()]

    def _values(self, feed: dict, names) -> dict[str, np.ndarray]:
        values = {}
        for name in names:
            array = np.array(feed[name], order="C")  # (np.ascontiguousarray would make a 0-d value 1-d)
            declared = self._described["input_types"].get(name)
            if declared is not None and array.dtype.name != declared:
                raise ValueError(f"input {name!r} has dtype {array.dtype}, expected {declared}")
            if array.size > MAX_VALUE_ELEMENTS:
                raise OnnxImportError(f"{self._reason} (input {name!r} has {array.size} elements: relayish compiles "
                                      f"per value of small inputs only, at most {MAX_VALUE_ELEMENTS})")
            values[name] = array
        return values

    def _module_for(self, feed: dict):
        with self._lock:
            names = set(self._value_inputs)
            while True:
                values = self._values(feed, sorted(names))
                key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in values.items())
                if key in self._modules:
                    self._modules.move_to_end(key)
                    return self._modules[key], values
                try:
                    module = self._compile(self._model, self._options.replace(input_values=values))
                except OnnxImportError as e:
                    more = set(e.needs_values) - names
                    if not more or not more <= set(feed):
                        raise
                    names |= more  # this value revealed another shape-giving input
                    self._value_inputs = tuple(sorted(names))
                    continue
                self._modules[key] = module
                while len(self._modules) > MAX_SPECIALIZATIONS:
                    self._modules.popitem(last=False)
                return module, values

"""The ONNX frontend: an ONNX model -> a relayish IRModule (`from_onnx`).

    importer.py   the importer: loading and checking a model, its graph inputs, one converter call per node
    external.py   tensors whose data lives outside the model file, read under our own rules
    values.py     the values converters read (initializers, constant shape and axes inputs), checked
    registry.py   the converter registry: `@converter("OpType", since=N, domain=...)`, looked up by opset
    builders.py   the relayish expressions converters build, folded at import when their inputs are constants
    versions/     the schema versions reviewed against the converters, per domain
    ops/          the converters, one module per op family

Importing this package registers every converter.
"""
from . import ops  # noqa: F401  (registers the converters)
from .importer import (FOLD_LIMIT, GRAPH_INPUT_DTYPES, MAX_OPSET, MIN_OPSET, OLDEST_OPSET, UNNAMED_DIM,
                       OnnxImportError, SubgraphScope, check_supported, default_opset, describe_model,
                       fold_small_constants, from_onnx, load_model, resolve_converter)
from .external import ExternalDataError
from .registry import Converter, converter, lookup_converter, supported_ops
from .values import ConversionError, RunTimeValueNeeded

__all__ = ["FOLD_LIMIT", "GRAPH_INPUT_DTYPES", "MAX_OPSET", "MIN_OPSET", "OLDEST_OPSET", "UNNAMED_DIM",
           "ConversionError", "Converter", "ExternalDataError", "OnnxImportError", "RunTimeValueNeeded",
           "SubgraphScope", "check_supported", "converter", "default_opset", "describe_model",
           "fold_small_constants", "from_onnx", "load_model", "lookup_converter", "resolve_converter",
           "supported_ops"]

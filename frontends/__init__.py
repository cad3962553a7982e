"""Frontends: model formats -> relayish Modules."""
from . import onnx_ops_unary  # noqa: F401  (registers its converters)
from .onnx import OnnxImportError, from_onnx

__all__ = ["OnnxImportError", "from_onnx"]

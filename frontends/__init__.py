"""Frontends: model formats -> relayish Modules."""
from .onnx import OnnxImportError, from_onnx

__all__ = ["OnnxImportError", "from_onnx"]

"""Frontends: model formats -> relayish Modules. ONNX is the one there is (frontends/onnx/)."""
from .onnx import OnnxImportError, describe_model, from_onnx, load_model

__all__ = ["OnnxImportError", "describe_model", "from_onnx", "load_model"]

"""Frontends: model formats -> relayish Modules."""
from . import onnx_ops_tensor, onnx_ops_unary  # noqa: F401  (register their converters)
from . import onnx_ops_attention  # noqa: F401  (Attention, RMSNormalization, RotaryEmbedding, Swish, SwiGLU)
from . import onnx_ops_movement  # noqa: F401  (Pad, Gather/Scatter Elements and ND, OneHot, Tile...)
from .onnx import OnnxImportError, from_onnx

__all__ = ["OnnxImportError", "from_onnx"]

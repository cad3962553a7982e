"""Frontends: model formats -> relayish Modules."""
from . import onnx_ops_tensor, onnx_ops_unary  # noqa: F401  (register their converters)
from . import onnx_ops_attention  # noqa: F401  (Attention, RMSNormalization, RotaryEmbedding, Swish, SwiGLU)
from . import onnx_ops_quant  # noqa: F401  (Quantize/DequantizeLinear, DynamicQuantizeLinear, losses)
from .onnx import OnnxImportError, from_onnx

__all__ = ["OnnxImportError", "from_onnx"]

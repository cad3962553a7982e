"""Frontends: model formats -> relayish Modules."""
from . import onnx_ops_tensor, onnx_ops_unary  # noqa: F401  (register their converters)
from . import onnx_ops_attention  # noqa: F401  (Attention, RMSNormalization, RotaryEmbedding, Swish, SwiGLU)
from .onnx import OnnxImportError, describe_model, from_onnx, load_model
from . import onnx_ops_movement  # noqa: F401  (Pad, Gather/Scatter Elements and ND, OneHot, Tile...)
from . import onnx_ops_quant  # noqa: F401  (Quantize/DequantizeLinear, DynamicQuantizeLinear, losses)
from . import onnx_ops_misc  # noqa: F401  (TopK, Einsum, If, Loop, NonZero, Compress, Unique...)
from . import onnx_ops_signal  # noqa: F401  (windows, Mel, DFT, STFT, AffineGrid, Col2Im)
from . import onnx_ops_sampling  # noqa: F401  (GridSample, RoiAlign)
from . import onnx_ops_convnd  # noqa: F401  (Conv and pools of every rank, ConvTranspose, normalizations)

__all__ = ["OnnxImportError", "describe_model", "from_onnx", "load_model"]
from . import onnx_ops_resize  # noqa: F401  (Resize, Upsample)
from . import onnx_ops_rnn  # noqa: F401  (RNN, GRU, LSTM: unrolled compositions)
from . import onnx_ops_training  # noqa: F401  (Dropout, BatchNormalization: their training modes)
from . import onnx_ops_caches  # noqa: F401  (LinearAttention, TensorScatter)
from . import onnx_ops_ml  # noqa: F401  (TfIdfVectorizer, the ai.onnx.ml ops)
from . import onnx_ops_attention_flex  # noqa: F401  (FlexAttention, ai.onnx.preview)
from . import onnx_ops_contrib, onnx_ops_contrib_attention  # noqa: F401  (onnxruntime's com.microsoft ops)
from . import onnx_ops_contrib_quant, onnx_ops_contrib_qmatmul  # noqa: F401  (its quantized ops, QLinearConv)

"""The ONNX schema versions reviewed against the converters, one module per domain: a node is imported only through
a reviewed version. default.py: ai.onnx; contrib.py: com.microsoft (onnxruntime's contrib ops) and onnxruntime's own
ai.onnx ops; domains.py: ai.onnx.ml, ai.onnx.preview and ai.onnx.preview.training."""

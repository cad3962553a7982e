"""Integer variants of suite models, made the way users make them: with onnxruntime's own quantization tool.

- static QDQ (`quant_pre_process`, then `quantize_static` with QuantFormat.QDQ): uint8 activations, int8 weights (per output channel with
  per_channel=True), calibrated on seeded random inputs: QuantizeLinear/DequantizeLinear pairs around every
  Conv, MatMul, Gemm, Add, pool and Concat;
- dynamic (`quantize_dynamic`): weights quantized ahead, activations per call by DynamicQuantizeLinear, then
  ConvInteger / MatMulInteger and a float rescale.

The float model is the suite's own builder's (models/suite.py), built into a temporary folder first."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

from ._builder import save

CALIBRATION_SAMPLES = 8


def make_quantized(base: str, mode: str = "static", per_channel: bool = False, **base_options) -> onnx.ModelProto:
    """Suite model `base` built in float (with base_options), then quantized: mode "static" (QDQ) or "dynamic"."""
    from onnxruntime.quantization import QuantFormat, QuantType, quant_pre_process, quantize_dynamic, quantize_static

    from .suite import builder

    if mode not in ("static", "dynamic"):
        raise ValueError(f"mode must be 'static' or 'dynamic', got {mode!r}")
    with tempfile.TemporaryDirectory(prefix="relayish-quantize-") as tmp:
        float_path, path = builder(base)(Path(tmp) / f"{base}.onnx", **base_options), Path(tmp) / "quantized.onnx"
        if mode == "dynamic":
            # uint8 weights: onnxruntime's CPU ConvInteger takes uint8 x uint8 only
            quantize_dynamic(str(float_path), str(path), weight_type=QuantType.QUInt8, per_channel=per_channel)
        else:  # as onnxruntime's documentation asks: shape inference and graph optimization first
            prepared = Path(tmp) / "prepared.onnx"
            quant_pre_process(str(float_path), str(prepared))
            quantize_static(str(prepared), str(path), _Calibration(onnx.load(float_path)),
                            quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, per_channel=per_channel)
        return onnx.load(path)


def build_quantized(path, **options) -> Path:
    """Write make_quantized(**options) to `path` and return the path."""
    return save(path, make_quantized(**options))


class _Calibration:
    """onnxruntime.quantization's CalibrationDataReader: CALIBRATION_SAMPLES seeded normal inputs."""

    def __init__(self, model: onnx.ModelProto):
        rng = np.random.default_rng(0)
        inits = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in inits]
        shapes = {i.name: tuple(d.dim_value or 1 for d in i.type.tensor_type.shape.dim) for i in inputs}
        self._feeds = iter([{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
                            for _ in range(CALIBRATION_SAMPLES)])

    def get_next(self):
        return next(self._feeds, None)

"""The suite's integer variants (models/quantized.py), made by onnxruntime's quantization tool as users make them:
they have the patterns users get, and relayish runs them in agreement with onnxruntime's int8 result."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest

from compiler import compile_model
from models import make_quantized

SMALL = {
    "mobilenet_v2_int8": dict(base="mobilenet_v2", per_channel=True, width_mult=0.5, image_size=64),
    "resnet18_int8_dynamic": dict(base="resnet18", mode="dynamic"),
    "gpt_int8_dynamic": dict(base="gpt", mode="dynamic", seq_len=16, d_model=64, heads=4),
}
PATTERNS = {  # op type -> at least this many nodes
    "mobilenet_v2_int8": {"QuantizeLinear": 20, "DequantizeLinear": 40, "Conv": 20},
    "resnet18_int8_dynamic": {"DynamicQuantizeLinear": 10, "ConvInteger": 20},
    "gpt_int8_dynamic": {"DynamicQuantizeLinear": 4, "MatMulInteger": 8},
}


@pytest.fixture(scope="module", params=sorted(SMALL))
def quantized(request):
    return request.param, make_quantized(**SMALL[request.param])


def feeds(model, rng):
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.integers(0, 1000, shape) if i.type.tensor_type.elem_type == 7 else \
            rng.standard_normal(shape).astype(np.float32)
    return out


def test_the_quantization_tool_wrote_the_patterns_users_get(quantized):
    name, model = quantized
    counts = Counter(n.op_type for n in model.graph.node)
    assert all(counts[op] >= n for op, n in PATTERNS[name].items()), counts


def test_relayish_agrees_with_onnxruntimes_int8_result(quantized):
    """Within a few quantization steps of the output (relayish and onnxruntime may round a tie of an activation's
    quantization differently, as onnxruntime's own fused and unfused paths do), and the same top-1."""
    name, model = quantized
    ref_sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = compile_model(model, cache=False)
    rng = np.random.default_rng(3)
    for _ in range(2):
        feed = feeds(model, rng)
        ours, ref = sess.run(None, feed)[0], ref_sess.run(None, feed)[0]
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() <= 0.1 * np.abs(ref).max(), name
        top_ours, top_ref = ours.reshape(-1, ours.shape[-1]).argmax(-1), ref.reshape(-1, ref.shape[-1]).argmax(-1)
        assert (top_ours == top_ref).mean() >= 0.9, name

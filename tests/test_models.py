"""The reference model builder: topology, validity, calibrated statistics, BN folding."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort


def _run(path, x):
    """Logits of each image of x, one at a time (the models have batch 1)."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


def test_resnet18_topology(resnet18_path, resnet18_folded_path):
    model = onnx.load(str(resnet18_path))
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == 17
    counts = Counter(n.op_type for n in model.graph.node)
    assert counts == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "Add": 8, "MaxPool": 1,
                      "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    assert [i.name for i in model.graph.input] == ["input"] and [o.name for o in model.graph.output] == ["logits"]
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 11_600_000 < params < 11_800_000  # torchvision's resnet18: 11.69 M (+ BN running stats)
    folded = Counter(n.op_type for n in onnx.load(str(resnet18_folded_path)).graph.node)
    assert "BatchNormalization" not in folded and folded["Conv"] == 20


def test_resnet18_logits_are_sane_and_folding_is_exact(resnet18_path, resnet18_folded_path):
    x = np.random.default_rng(5).standard_normal((2, 3, 224, 224)).astype(np.float32)
    logits, folded = _run(resnet18_path, x), _run(resnet18_folded_path, x)
    assert logits.shape == (2, 1000)
    assert 0.3 < logits.std() < 30, logits.std()  # calibrated BN: neither vanishing nor exploding
    assert np.abs(logits[0] - logits[1]).max() > 0.05  # the output depends on the input
    assert np.abs(folded - logits).max() <= 1e-4 * np.abs(logits).max()


def test_resnet18_symbolic_batch_dim(resnet18_dynamic_path):
    dims = onnx.load(str(resnet18_dynamic_path)).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N"
    sess = ort.InferenceSession(str(resnet18_dynamic_path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"input": np.zeros((3, 3, 224, 224), np.float32)})[0].shape == (3, 1000)

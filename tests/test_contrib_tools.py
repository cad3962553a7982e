"""Models as onnxruntime's own tools leave them, built from the suite's builders at small sizes: the transformer
optimizer (onnxruntime.transformers.optimizer, python fusions: opt_level 0) on BERT (opset 17, and 13 where it
writes onnxruntime's own LayerNormalization) and GPT; a session's saved extended-level optimization (FusedConv,
FusedMatMul, Gelu, DynamicQuantizeMatMul, QLinear* fusions of QDQ groups); quantize_dynamic on a CNN, a transformer
and a bidirectional LSTM (DynamicQuantizeLSTM); quantize_static in QDQ and QOperator formats with a calibration
reader; MatMulNBitsQuantizer. Each test asserts that the tool wrote the contrib ops it is about, then compares the
compiled model with onnxruntime (graph optimizations off, i.e. its kernel of each node as written).

Tolerance: float models 1e-4 relative to the output's largest magnitude. Quantized models: the integer paths are
exact (int32 products) and requantize as onnxruntime's kernels do, so they are held to the same 1e-4; where
onnxruntime itself computes a different result with its graph optimizations on (ORT_ENABLE_ALL vs ORT_DISABLE_ALL:
the fused integer kernels against the QDQ float form, up to one quantization step of an output, measured here in
each test) our result must lie within that bound of its unoptimized one.
"""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from harness import relative_error, run_ort
from models._builder import Graph, calibrate, make_model, tensor_info
from models.bert import make_bert
from models.gpt import make_gpt

pytest.importorskip("sympy", reason="onnxruntime's transformer optimizer needs sympy (the test extra)")
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, quantize_dynamic,  # noqa: E402
                                      quantize_static)
from onnxruntime.transformers.optimizer import optimize_model  # noqa: E402

RTOL = 1e-4
BERT = dict(seq_len=8, d_model=32, heads=2, ffn=64, vocab_size=40, layers=1)
GPT = dict(seq_len=8, d_model=32, heads=2, vocab_size=40, layers=1)


def op_types(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def contrib_ops(model) -> set[str]:
    return {op for (domain, op) in op_types(model) if domain == "com.microsoft"}


def compare(path, feeds, rtol=RTOL, own_bound=False):
    """The compiled model against onnxruntime without graph optimizations; with own_bound, the allowed error is
    the larger of rtol and onnxruntime's own optimized-vs-unoptimized difference. Returns the errors."""
    ref = run_ort(str(path), feeds)
    ours = compile_model(str(path)).run(None, feeds)
    bound = rtol
    if own_bound:
        optimized = run_ort(str(path), feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        bound = max(rtol, *(relative_error(o, r) for o, r in zip(optimized, ref)))
    errors = [relative_error(a, r) for a, r in zip(ours, ref)]
    for k, (a, r, err) in enumerate(zip(ours, ref, errors)):
        assert a.shape == r.shape and a.dtype == r.dtype
        assert err <= bound, f"output {k}: relative error {err:.3g} > {bound:.3g}"
    return errors


def bert_feeds(batch=2, seq=8, vocab=40, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq - 3:] = 0  # right padding in the first sequence
    return {"input_ids": rng.integers(0, vocab, (batch, seq)), "attention_mask": mask}


def gpt_feeds(batch=2, seq=8, vocab=40, seed=0):
    return {"input_ids": np.random.default_rng(seed).integers(0, vocab, (batch, seq))}


def optimized_session_model(src, dst, level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED):
    """The model as an onnxruntime session optimizes and saves it (optimized_model_filepath)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
    return onnx.load(str(dst))


# ---- transformer optimizer ----

@pytest.mark.parametrize("decomposed", [False, True])
def test_transformer_optimizer_bert(tmp_path, decomposed):
    src = tmp_path / "bert.onnx"
    onnx.save(make_bert(batch=2, decomposed_layernorm=decomposed, **BERT), src)
    optimized = optimize_model(str(src), model_type="bert", num_heads=2, hidden_size=32, opt_level=0)
    path = tmp_path / "bert_opt.onnx"
    optimized.save_model_to_file(str(path))
    model = onnx.load(str(path))
    assert {"Attention", "SkipLayerNormalization", "BiasGelu"} <= contrib_ops(model)
    if decomposed:  # onnxruntime's own LayerNormalization in an opset-13 model
        assert ("ai.onnx", "LayerNormalization") in op_types(model) and model.opset_import[0].version == 13
    compare(path, bert_feeds())


def test_transformer_optimizer_gpt_and_graph_fusions(tmp_path):
    src = tmp_path / "gpt.onnx"
    onnx.save(make_gpt(batch=2, **GPT), src)
    path = tmp_path / "gpt_opt.onnx"
    optimize_model(str(src), model_type="gpt2", num_heads=2, hidden_size=32, opt_level=0).save_model_to_file(str(path))
    assert {"SkipLayerNormalization", "FastGelu"} <= contrib_ops(onnx.load(str(path)))
    compare(path, gpt_feeds())
    saved = tmp_path / "gpt_ort.onnx"
    assert {"FusedMatMul", "FastGelu"} <= contrib_ops(optimized_session_model(src, saved))
    compare(saved, gpt_feeds())


# ---- a small CNN with every op quantize_static turns into a QLinear op ----

def small_cnn(size=12):
    g = Graph(np.random.default_rng(0))
    x = g.op("Relu", "r1", [g.bn("bn1", g.conv("c1", "input", 3, 16, 3, pad=1), 16)])
    y = g.op("LeakyRelu", "lrelu", [g.conv("c2", x, 16, 16, 3, pad=1)], alpha=0.1)
    x = g.op("Add", "residual", [x, y])
    x = g.op("Mul", "gate", [x, g.op("Sigmoid", "sigmoid", [g.conv("c3", x, 16, 16, 1)])])
    x = g.op("MaxPool", "maxpool", [x], kernel_shape=[2, 2], strides=[2, 2])
    a = g.op("AveragePool", "avgpool", [g.conv("c4", x, 16, 8, 1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    x = g.op("Concat", "concat", [x, a], axis=1)
    x = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "gap", [x])], axis=1)
    g.gemm("fc", x, 24, 10, out="logits")
    calibrate(g, {"input": np.random.default_rng(1).standard_normal((2, 3, size, size)).astype(np.float32)})
    return make_model(g.nodes, g.params, [tensor_info("input", np.float32, [1, 3, size, size])],
                      [tensor_info("logits", np.float32, [1, 10])], "cnn")


def cnn_feeds(seed=0, size=12):
    return {"input": np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)}


class Reader(CalibrationDataReader):
    def __init__(self, feeds):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def test_float_cnn_graph_fusions(tmp_path):
    src = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), src)
    saved = tmp_path / "cnn_ort.onnx"
    assert "FusedConv" in contrib_ops(optimized_session_model(src, saved))
    compare(saved, cnn_feeds())


def test_quantize_dynamic_cnn_and_transformer(tmp_path):
    """ConvInteger/MatMulInteger with constant int8 weights (the path that once failed in nn.matmul_pack), then
    the session's fusions of them into DynamicQuantizeMatMul and MatMulIntegerToFloat."""
    for name, model, feeds in (("cnn", small_cnn(), cnn_feeds()), ("bert", make_bert(batch=2, **BERT), bert_feeds())):
        src, quantized = tmp_path / f"{name}.onnx", tmp_path / f"{name}_qd.onnx"
        onnx.save(model, src)
        quantize_dynamic(str(src), str(quantized))
        ops = {op for _, op in op_types(onnx.load(str(quantized)))}
        assert "MatMulInteger" in ops and ("ConvInteger" in ops or name == "bert")
        compare(quantized, feeds)
        saved = tmp_path / f"{name}_qd_ort.onnx"
        fused = contrib_ops(optimized_session_model(quantized, saved))
        assert "DynamicQuantizeMatMul" in fused and ("MatMulIntegerToFloat" in fused or name == "cnn")
        compare(saved, feeds)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_lstm(tmp_path, per_channel):
    """The bidirectional LSTM quantize_dynamic makes (weights per direction, or per direction and gate unit): at
    the length it is compiled for, and compiled once with the length free (one cell per step that quantizes its
    hidden state: relayish/ops/recurrent.py), run at lengths it was never compiled for. Both forms compute the
    products exactly, so the free length's results are those of a compile at that length, bit for bit."""
    rng = np.random.default_rng(0)
    steps, batch, inputs, hidden = 5, 2, 8, 20
    weights = {"W": rng.uniform(-0.3, 0.3, (2, 4 * hidden, inputs)),
               "R": rng.uniform(-0.3, 0.3, (2, 4 * hidden, hidden)), "B": rng.uniform(-0.1, 0.1, (2, 8 * hidden))}
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden,
                            direction="bidirectional")
    graph = helper.make_graph([node], "lstm", [tensor_info("x", np.float32, ["T", batch, inputs])],
                              [tensor_info("y", np.float32, ["T", 2, batch, hidden]),
                               tensor_info("y_h", np.float32, [2, batch, hidden]),
                               tensor_info("y_c", np.float32, [2, batch, hidden])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    src, quantized = tmp_path / "lstm.onnx", tmp_path / "lstm_qd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), src)
    quantize_dynamic(str(src), str(quantized), per_channel=per_channel)
    model = onnx.load(str(quantized))
    assert "DynamicQuantizeLSTM" in contrib_ops(model)
    scales = {i.name: tuple(i.dims) for i in model.graph.initializer if i.name.endswith("_scale")}
    assert scales["R_scale"] == ((2, 4 * hidden) if per_channel else (2,))
    feeds = {"x": rng.standard_normal((steps, batch, inputs)).astype(np.float32)}
    ref = run_ort(str(quantized), feeds)
    static = compile_model(str(quantized), input_shapes={"x": (steps, batch, inputs)})
    for a, r in zip(static.run(None, feeds), ref):
        assert relative_error(a, r) <= RTOL
    free = compile_model(str(quantized), input_shapes={"x": (None, batch, inputs)}, specialize="never")
    assert free.generic_tier["kind"] == "run-time extents"
    for length in (1, 3, 12):
        x = {"x": rng.standard_normal((length, batch, inputs)).astype(np.float32)}
        ours, ref = free.run(None, x), run_ort(str(quantized), x)
        alone = compile_model(str(quantized), input_shapes={"x": (length, batch, inputs)}).run(None, x)
        for a, r, b in zip(ours, ref, alone):
            assert a.shape == r.shape and relative_error(a, r) <= RTOL
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fmt", [QuantFormat.QOperator, QuantFormat.QDQ])
def test_quantize_static_cnn(tmp_path, fmt):
    src, quantized = tmp_path / "cnn.onnx", tmp_path / "cnn_qs.onnx"
    onnx.save(small_cnn(), src)
    quantize_static(str(src), str(quantized), Reader([cnn_feeds(seed) for seed in range(1, 5)]), quant_format=fmt)
    model = onnx.load(str(quantized))
    if fmt == QuantFormat.QOperator:
        expected = {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
                    "QLinearAveragePool", "QLinearGlobalAveragePool", "QGemm"}
        assert expected <= contrib_ops(model) and ("ai.onnx", "QLinearConv") in op_types(model)
    compare(quantized, cnn_feeds(), own_bound=True)
    saved = tmp_path / "cnn_qs_ort.onnx"
    fused = contrib_ops(optimized_session_model(quantized, saved))
    if fmt == QuantFormat.QDQ:  # QDQ groups fused into onnxruntime's kernels (ORT_ENABLE_ALL also writes the
        assert {"QLinearGlobalAveragePool", "QGemm"} <= fused  # com.microsoft.nchwc layout ops: refused by name)
    compare(saved, cnn_feeds())


@pytest.mark.parametrize("fmt", [QuantFormat.QOperator, QuantFormat.QDQ])
def test_quantize_static_transformer(tmp_path, fmt):
    src, quantized = tmp_path / "bert.onnx", tmp_path / "bert_qs.onnx"
    onnx.save(make_bert(batch=2, **BERT), src)
    quantize_static(str(src), str(quantized), Reader([bert_feeds(seed=s) for s in range(1, 4)]), quant_format=fmt)
    compare(quantized, bert_feeds(), own_bound=True)
    saved = tmp_path / "bert_qs_ort.onnx"
    fused = contrib_ops(optimized_session_model(quantized, saved))
    assert {"QLinearAdd", "QLinearSoftmax"} <= fused
    compare(saved, bert_feeds())


def test_matmul_nbits_quantizer(tmp_path):
    pytest.importorskip("onnx_ir", reason="onnxruntime's MatMulNBitsQuantizer needs onnx-ir (the test extra)")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    quantizer = MatMulNBitsQuantizer(make_gpt(batch=2, **GPT), block_size=16)
    quantizer.process()
    path = tmp_path / "gpt_nbits.onnx"
    quantizer.model.save_model_to_file(str(path))
    assert "MatMulNBits" in contrib_ops(onnx.load(str(path)))
    compare(path, gpt_feeds())

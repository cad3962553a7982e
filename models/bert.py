"""A BERT-style encoder in the form PyTorch's exporter emits for Hugging Face's BertModel (opset 17).

Inputs "input_ids" and "attention_mask", int64 [batch, seq_len] (mask: 1 = attend, 0 = padding); output
"last_hidden_state" float32 [batch, seq_len, d_model]. Embeddings: Gather of the word table by input_ids, plus
Gather of the token-type table by zero ids, plus Gather of the position table (max_positions rows) by ids
0..seq_len-1 (both constant rows sliced to the input's length, read from its Shape, as HF's buffers are), then
LayerNorm (eps 1e-12). The mask becomes an additive bias as HF does it: Unsqueeze (1), Unsqueeze (2), Cast to float,
Sub from 1, Mul by float32's lowest value. Each of `layers` post-LN layers: Q, K, V projections (MatMul + Add),
heads split by Reshape ([0, -1, H, Dh]) + Transpose, softmax(Q K^T / sqrt(Dh) + bias) V, heads merged, output
projection, Add residual, LayerNorm; FFN d_model -> ffn -> d_model with the erf GELU (Div by sqrt 2, Erf, Add 1,
Mul, Mul 0.5), Add residual, LayerNorm.

Defaults: 2 layers, d_model 256, 4 heads, ffn 1024, seq_len 128, vocab 1000 (a toy vocabulary: real BERT has
30522, which only grows the embedding table), batch 1. BERT-base's layer is d_model=768, heads=12, ffn=3072.
decomposed_layernorm=True gives the form older exporters emit at opset 13: each LayerNorm as ReduceMean, Sub, Pow,
ReduceMean, Add eps, Sqrt, Div, Mul, Add; the weights (and so the outputs) are those of the default form.
Weights: see models/_transformer.py.
"""
from __future__ import annotations

import numpy as np
import onnx

from . import _transformer as tf
from ._builder import Graph, make_model, save, tensor_info

LN_EPSILON = 1e-12
TYPE_VOCAB = 2


def _embeddings(g: Graph, vocab_size, max_positions, d_model, decomposed):
    words = tf.embedding(g, "embeddings.word_embeddings", "input_ids", vocab_size, d_model)
    length = tf.sequence_length(g, "input_ids")
    type_ids = tf.leading_positions(g, "embeddings.token_type_ids", g.constant(
        "embeddings.token_type_ids.buffer", np.zeros((1, max_positions)), np.int64), length)
    types = tf.embedding(g, "embeddings.token_type_embeddings", type_ids, TYPE_VOCAB, d_model)
    position_ids = tf.leading_positions(g, "embeddings.position_ids", g.constant(
        "embeddings.position_ids.buffer", np.arange(max_positions)[None], np.int64), length)
    positions = tf.embedding(g, "embeddings.position_embeddings", position_ids, max_positions, d_model)
    x = g.op("Add", "embeddings.add_positions", [g.op("Add", "embeddings.add_types", [words, types]), positions])
    return tf.layer_norm(g, "embeddings.LayerNorm", x, d_model, LN_EPSILON, decomposed)


def _mask_bias(g: Graph):
    """[B, T] int64 mask -> [B, 1, 1, T] float bias: 0 where attended, float32's lowest value where padded."""
    m = g.op("Unsqueeze", "mask.unsqueeze1", ["attention_mask", g.constant("mask.axis1", [1], np.int64)])
    m = g.op("Unsqueeze", "mask.unsqueeze2", [m, g.constant("mask.axis2", [2], np.int64)])
    m = g.op("Cast", "mask.cast", [m], to=onnx.TensorProto.FLOAT)
    m = g.op("Sub", "mask.invert", [g.constant("mask.one", 1.0), m])
    return g.op("Mul", "mask.bias", [m, g.constant("mask.lowest", tf.MASK_VALUE)])


def _layer(g: Graph, name, x, bias, dims, decomposed):
    d_model, heads, ffn = dims
    head_dim = d_model // heads
    heads_shape = [0, -1, heads, head_dim]
    q = tf.split_heads(g, f"{name}.q", tf.linear(g, f"{name}.attention.query", x, d_model, d_model), heads_shape)
    k = tf.split_heads(g, f"{name}.k", tf.linear(g, f"{name}.attention.key", x, d_model, d_model), heads_shape, True)
    v = tf.split_heads(g, f"{name}.v", tf.linear(g, f"{name}.attention.value", x, d_model, d_model), heads_shape)
    context = tf.attention_core(g, f"{name}.attention", q, k, v, head_dim, bias, "add", [0, -1, d_model])
    y = tf.linear(g, f"{name}.attention.output.dense", context, d_model, d_model)
    x = tf.layer_norm(g, f"{name}.attention.output.LayerNorm", g.op("Add", f"{name}.attention.residual", [x, y]),
                      d_model, LN_EPSILON, decomposed)
    y = tf.gelu_erf(g, f"{name}.intermediate.gelu", tf.linear(g, f"{name}.intermediate.dense", x, d_model, ffn))
    y = tf.linear(g, f"{name}.output.dense", y, ffn, d_model)
    return tf.layer_norm(g, f"{name}.output.LayerNorm", g.op("Add", f"{name}.output.residual", [x, y]), d_model,
                         LN_EPSILON, decomposed)


def make_bert(seed: int = 0, batch: int | str = 1, seq_len: int | str = 128, vocab_size: int = 1000, layers: int = 2,
              d_model: int = 256, heads: int = 4, ffn: int = 1024, max_positions: int = 512,
              decomposed_layernorm: bool = False) -> onnx.ModelProto:
    """The BERT-style encoder ModelProto. batch, seq_len: the inputs' declared dims, an int or a symbolic name
    such as "N" (the graph itself runs any batch and any length up to max_positions, as an export with dynamic
    axes does)."""
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    if isinstance(seq_len, int) and seq_len > max_positions:
        raise ValueError(f"seq_len {seq_len} exceeds the {max_positions} position embeddings")
    g = Graph(np.random.default_rng(seed))
    x = _embeddings(g, vocab_size, max_positions, d_model, decomposed_layernorm)
    bias = _mask_bias(g)
    dims = (d_model, heads, ffn)
    for i in range(layers):
        x = _layer(g, f"encoder.layer.{i}", x, bias, dims, decomposed_layernorm)
    g.rename(x, "last_hidden_state")
    model = make_model(g.nodes, g.params, [tensor_info(n, np.int64, [batch, seq_len])
                                           for n in ("input_ids", "attention_mask")],
                       [tensor_info("last_hidden_state", np.float32, [batch, seq_len, d_model])],
                       "bert", opset=13 if decomposed_layernorm else 17)
    onnx.checker.check_model(model)
    return model


def build_bert(path, **options):
    """Write the BERT-style encoder (see make_bert for the options) to `path` and return the path."""
    return save(path, make_bert(**options))

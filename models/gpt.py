"""A GPT-style decoder in the form PyTorch's exporter emits for a Hugging Face GPT-2-like model (opset 17).

Input "input_ids" int64 [batch, seq_len]; output "logits" float32 [batch, seq_len, vocab_size]. Embeddings: Gather
of the token table by input_ids plus Gather of the position table (max_positions rows) by ids 0..seq_len-1 (a
constant row sliced to the input's length, read from its Shape). The causal mask is Trilu (lower) of an all-true
[seq_len, seq_len] boolean (ConstantOfShape), shared by the layers; masked scores are replaced by float32's lowest
value with Where. Each of `layers` pre-LN blocks: LayerNorm (eps 1e-5), one fused QKV projection (MatMul [d, 3d] +
Add) cut by Split (sizes as an input, the opset 13+ form) on the last axis, heads split by Reshape ([0, -1, H, Dh])
+ Transpose, Where(mask, Q K^T / sqrt(Dh), lowest), Softmax, @ V, heads merged, output projection, Add residual;
LayerNorm, MLP d -> 4d -> d with GPT-2's tanh GELU (Pow 3, Mul 0.044715, Add, Mul sqrt(2/pi), Tanh, Add 1, Mul 0.5,
Mul), Add residual. Then the final LayerNorm and the tied output projection: MatMul with Transpose of the token
table (the same initializer the Gather reads).

Defaults: 2 layers, d_model 256, 4 heads, MLP 1024, seq_len 64, vocab 1000 (a toy vocabulary: GPT-2 has 50257),
batch 1. Weights: see models/_transformer.py.
"""
from __future__ import annotations

import numpy as np
import onnx

from . import _transformer as tf
from ._builder import Graph, make_model, save, tensor_info

LN_EPSILON = 1e-5


def _block(g: Graph, name, x, causal, dims):
    d_model, heads = dims
    head_dim = d_model // heads
    heads_shape = [0, -1, heads, head_dim]
    h = tf.layer_norm(g, f"{name}.ln_1", x, d_model, LN_EPSILON)
    qkv = tf.linear(g, f"{name}.attn.c_attn", h, d_model, 3 * d_model)
    sizes = g.constant(f"{name}.attn.split_sizes", [d_model] * 3, np.int64)
    q, k, v = (f"{name}.attn.{part}" for part in "qkv")
    g.nodes.append(onnx.helper.make_node("Split", [qkv, sizes], [q, k, v], name=f"{name}.attn.split", axis=2))
    q = tf.split_heads(g, f"{name}.attn.q", q, heads_shape)
    k = tf.split_heads(g, f"{name}.attn.k", k, heads_shape, key=True)
    v = tf.split_heads(g, f"{name}.attn.v", v, heads_shape)
    context = tf.attention_core(g, f"{name}.attn", q, k, v, head_dim, causal, "where", [0, -1, d_model])
    x = g.op("Add", f"{name}.attn.residual", [x, tf.linear(g, f"{name}.attn.c_proj", context, d_model, d_model)])
    h = tf.layer_norm(g, f"{name}.ln_2", x, d_model, LN_EPSILON)
    h = tf.gelu_tanh(g, f"{name}.mlp.act", tf.linear(g, f"{name}.mlp.c_fc", h, d_model, 4 * d_model))
    return g.op("Add", f"{name}.mlp.residual", [x, tf.linear(g, f"{name}.mlp.c_proj", h, 4 * d_model, d_model)])


def make_gpt(seed: int = 0, batch: int | str = 1, seq_len: int | str = 64, vocab_size: int = 1000, layers: int = 2,
             d_model: int = 256, heads: int = 4, max_positions: int = 512) -> onnx.ModelProto:
    """The GPT-style decoder ModelProto. batch, seq_len: the input's declared dims, an int or a symbolic name such
    as "N" (the graph itself runs any batch and any length up to max_positions, as an export with dynamic axes
    does)."""
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    if isinstance(seq_len, int) and seq_len > max_positions:
        raise ValueError(f"seq_len {seq_len} exceeds the {max_positions} position embeddings")
    g = Graph(np.random.default_rng(seed))
    tokens = tf.embedding(g, "wte", "input_ids", vocab_size, d_model)
    length = tf.sequence_length(g, "input_ids")
    position_ids = tf.leading_positions(g, "position_ids", g.constant(
        "position_ids.buffer", np.arange(max_positions)[None], np.int64), length)
    x = g.op("Add", "embeddings.add", [tokens, tf.embedding(g, "wpe", position_ids, max_positions, d_model)])
    square = g.op("Concat", "causal_mask.shape", [length, length], axis=0)
    ones = g.op("ConstantOfShape", "causal_mask.ones", [square],
                value=onnx.numpy_helper.from_array(np.ones(1, np.bool_)))
    causal = g.op("Trilu", "causal_mask", [ones], upper=0)
    dims = (d_model, heads)
    for i in range(layers):
        x = _block(g, f"h.{i}", x, causal, dims)
    x = tf.layer_norm(g, "ln_f", x, d_model, LN_EPSILON)
    g.op("MatMul", "logits", [x, g.op("Transpose", "lm_head.wte_t", ["wte.weight"], perm=[1, 0])])
    model = make_model(g.nodes, g.params, [tensor_info("input_ids", np.int64, [batch, seq_len])],
                       [tensor_info("logits", np.float32, [batch, seq_len, vocab_size])], "gpt")
    onnx.checker.check_model(model)
    return model


def build_gpt(path, **options):
    """Write the GPT-style decoder (see make_gpt for the options) to `path` and return the path."""
    return save(path, make_gpt(**options))

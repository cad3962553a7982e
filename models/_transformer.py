"""Transformer pieces in the node patterns PyTorch's ONNX exporter (TorchScript, opset 17) emits for Hugging Face
style modules, shared by models/bert.py and models/gpt.py.

Weights are those of freshly constructed PyTorch modules: nn.Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
weight and bias (stored pre-transposed, [in, out], as the exporter stores them), nn.Embedding's N(0, 1); LayerNorm
gamma 1 + N(0, 0.1) and beta N(0, 0.1) so that the affine part is not the identity. Every parameter is drawn from
the graph's generator in construction order, whatever the node form, so two forms of one model with one seed have
the same weights. Small constants (scalars, shapes, axes, position ids) are Constant nodes, as the exporter emits.
"""
from __future__ import annotations

import math

import numpy as np

from ._builder import Graph

MASK_VALUE = float(np.finfo(np.float32).min)  # what HF adds for masked positions (torch.finfo(float32).min)


def linear(g: Graph, name, x, din, dout):
    """MatMul(x, W[din, dout]) then Add(bias, .), the exporter's form of nn.Linear on a 3-D input."""
    bound = 1.0 / math.sqrt(din)
    g.params[f"{name}.weight"] = g.rng.uniform(-bound, bound, (din, dout))
    g.params[f"{name}.bias"] = g.rng.uniform(-bound, bound, dout)
    return g.op("Add", f"{name}.add", [f"{name}.bias", g.op("MatMul", f"{name}.matmul", [x, f"{name}.weight"])])


def embedding(g: Graph, name, ids, rows, dim):
    """Gather(table, ids) from an N(0, 1) table [rows, dim] (the table is the parameter `name`.weight)."""
    g.params[f"{name}.weight"] = g.rng.standard_normal((rows, dim))
    return g.op("Gather", f"{name}.gather", [f"{name}.weight", ids])


def layer_norm(g: Graph, name, x, dim, epsilon, decomposed=False):
    """LayerNormalization over the last axis (opset 17), or the decomposition older exporters emit:
    (x - mean) / sqrt(mean((x - mean)^2) + eps) * gamma + beta with ReduceMean's axes as an attribute."""
    g.params[f"{name}.weight"] = 1.0 + g.rng.normal(0.0, 0.1, dim)
    g.params[f"{name}.bias"] = g.rng.normal(0.0, 0.1, dim)
    if not decomposed:
        return g.op("LayerNormalization", name, [x, f"{name}.weight", f"{name}.bias"], axis=-1, epsilon=epsilon)
    mean = g.op("ReduceMean", f"{name}.mean", [x], axes=[-1], keepdims=1)
    diff = g.op("Sub", f"{name}.sub", [x, mean])
    square = g.op("Pow", f"{name}.pow", [diff, g.constant(f"{name}.two", 2.0)])
    var = g.op("ReduceMean", f"{name}.var", [square], axes=[-1], keepdims=1)
    std = g.op("Sqrt", f"{name}.sqrt", [g.op("Add", f"{name}.add_eps", [var, g.constant(f"{name}.eps", epsilon)])])
    normed = g.op("Div", f"{name}.div", [diff, std])
    return g.op("Add", f"{name}.add", [g.op("Mul", f"{name}.mul", [normed, f"{name}.weight"]), f"{name}.bias"])


def gelu_erf(g: Graph, name, x):
    """x * (erf(x / sqrt 2) + 1) * 0.5: torch's exact GELU as exported at opset 17 (Gelu is opset 20)."""
    erf = g.op("Erf", f"{name}.erf", [g.op("Div", f"{name}.div", [x, g.constant(f"{name}.sqrt2", math.sqrt(2.0))])])
    y = g.op("Mul", f"{name}.mul", [x, g.op("Add", f"{name}.add", [erf, g.constant(f"{name}.one", 1.0)])])
    return g.op("Mul", f"{name}.half", [y, g.constant(f"{name}.half_const", 0.5)])


def gelu_tanh(g: Graph, name, x):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): GPT-2's gelu_new as exported."""
    cube = g.op("Pow", f"{name}.pow", [x, g.constant(f"{name}.three", 3.0)])
    inner = g.op("Add", f"{name}.add", [x, g.op("Mul", f"{name}.mul_c", [g.constant(f"{name}.c", 0.044715), cube])])
    scaled = g.op("Mul", f"{name}.mul_k", [g.constant(f"{name}.k", math.sqrt(2.0 / math.pi)), inner])
    t = g.op("Add", f"{name}.add_one", [g.constant(f"{name}.one", 1.0), g.op("Tanh", f"{name}.tanh", [scaled])])
    return g.op("Mul", f"{name}.mul", [g.op("Mul", f"{name}.half", [g.constant(f"{name}.half_const", 0.5), x]), t])


def sequence_length(g: Graph, ids):
    """[1] int64: dim 1 of `ids` ([B, T]), as the exporter computes `ids.size(1)` (Shape, Gather): the models
    below slice their position ids and build their masks to it, so they run at any length."""
    shape = g.op("Shape", f"{ids}.shape", [ids])
    return g.op("Gather", f"{ids}.seq_len", [shape, g.constant(f"{ids}.seq_axis", [1], np.int64)], axis=0)


def leading_positions(g: Graph, name, table, length):
    """table[:, :length] (Slice): a constant [1, max_positions] row of ids cut to the sequence's length."""
    return g.op("Slice", name, [table, g.constant(f"{name}.starts", [0], np.int64), length,
                                g.constant(f"{name}.axes", [1], np.int64)])


def split_heads(g: Graph, name, x, shape, key=False):
    """[B, T, D] -> Reshape [B, T, H, Dh] -> Transpose to [B, H, T, Dh] (keys: [B, H, Dh, T], ready for Q @ K^T).

    shape: the 4-D target as Reshape's constant ([0, -1, H, Dh]: the batch copied, the length inferred, as the
    exporter writes it for dynamic axes)."""
    y = g.op("Reshape", f"{name}.reshape", [x, g.constant(f"{name}.shape", shape, np.int64)])
    return g.op("Transpose", f"{name}.transpose", [y], perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])


def attention_core(g: Graph, name, q, k, v, head_dim, mask, mask_kind, out_shape):
    """softmax(Q @ K^T / sqrt(Dh) (+ mask)) @ V, heads merged back to [B, T, D] (Transpose, Reshape).

    mask_kind "add": `mask` is an additive bias broadcast over heads and queries (BERT); "where": `mask` is a
    boolean [T, T] tensor, true where attending is allowed, and masked scores become MASK_VALUE (GPT-2)."""
    scores = g.op("MatMul", f"{name}.scores", [q, k])
    scores = g.op("Div", f"{name}.scale", [scores, g.constant(f"{name}.sqrt_dh", math.sqrt(head_dim))])
    if mask_kind == "add":
        scores = g.op("Add", f"{name}.mask", [scores, mask])
    else:
        scores = g.op("Where", f"{name}.mask", [mask, scores, g.constant(f"{name}.mask_value", MASK_VALUE)])
    probs = g.op("Softmax", f"{name}.softmax", [scores], axis=-1)
    context = g.op("Transpose", f"{name}.merge", [g.op("MatMul", f"{name}.context", [probs, v])], perm=[0, 2, 1, 3])
    return g.op("Reshape", f"{name}.reshape", [context, g.constant(f"{name}.shape", out_shape, np.int64)])

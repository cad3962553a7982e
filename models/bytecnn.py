"""A byte-level 1-D convolution text classifier (the small character-level ConvNet of Zhang, Zhao and LeCun 2015
with a byte embedding and a global max), from seeded random weights, in two forms.

Input "input_ids" int64 [B, L] (bytes, 0..255; L = 1024 by default), output "logits" [B, classes], opset 17.
Embedding: Gather of a [256, 32] N(0, 1) table by the ids, Transpose to [B, 32, L]. Six convs of 256 channels
with kernels 7, 7, 3, 3, 3, 3 (no padding, bias, He-normal) each + ReLU, a max pool of 3 (stride 3) after the
first two; a global max over the sequence; Gemm 256 -> 256 + ReLU; Gemm -> classes (4, as AG News's). At L = 1024
the lengths are 1018, 339, 333, 111, 109, 107, 105, 103 (odd, as real inputs make them).

conv2d=False writes it as PyTorch exports Conv1d/MaxPool1d/x.max(-1): Conv and MaxPool on [B, C, L] with 1-D
kernel_shape, pads and strides, and ReduceMax(axes=[2], keepdims=0). conv2d=True writes the same network as older
exporters write Conv1D: Unsqueeze to [B, C, 1, L], Conv and MaxPool with kernels of height 1 (1 x k, 1 x 3),
GlobalMaxPool and Flatten. Both forms draw the same weights in the same order (the 2-D kernels are the 1-D ones
with a unit axis), so for a seed they compute the same function.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, make_model, save, tensor_info

VOCAB = 256
EMBED_DIM = 32
CONVS = ((256, 7, True), (256, 7, True), (256, 3, False), (256, 3, False), (256, 3, False),
         (256, 3, False))  # (channels, kernel, max pool of 3 after it)
POOL = 3


def lengths(seq_len: int) -> list:
    """The sequence length after each conv and each pool."""
    out, length = [], seq_len
    for i, (_, kernel, pool) in enumerate(CONVS):
        length -= kernel - 1
        out.append(length)
        if pool:
            length //= POOL
            out.append(length)
        if length < 1:
            raise ValueError(f"byte CNN: a sequence of {seq_len} is too short for conv{i} and its pools")
    return out


def _conv(g: Graph, name, x, cin, cout, kernel, conv2d):
    """Conv + bias with He-normal weights, [cout, cin, k] (or [cout, cin, 1, k] with conv2d); returns its output."""
    weight = g.rng.standard_normal((cout, cin, kernel)) * np.sqrt(2.0 / (cin * kernel))
    g.params[f"{name}.weight"] = weight[:, :, None, :] if conv2d else weight
    g.params[f"{name}.bias"] = g.rng.normal(0.0, 0.01, cout)
    shape = [1, kernel] if conv2d else [kernel]
    return g.op("Conv", name, [x, f"{name}.weight", f"{name}.bias"], kernel_shape=shape, strides=[1] * len(shape),
                pads=[0] * 2 * len(shape))


def make_bytecnn(seed: int = 0, batch: int | str = 1, seq_len: int = 1024, num_classes: int = 4,
                 conv2d: bool = False, head_width: int = 256) -> onnx.ModelProto:
    """The byte CNN ModelProto (1-D convs, or with conv2d the 2-D form). batch: an int or a symbolic name."""
    lengths(seq_len)  # a clear error for a sequence too short
    if isinstance(batch, str) and batch.isdigit():
        batch = int(batch)
    g = Graph(np.random.default_rng(seed))
    g.params["embedding.weight"] = g.rng.standard_normal((VOCAB, EMBED_DIM))
    x = g.op("Gather", "embedding", ["embedding.weight", "input_ids"], axis=0)  # [B, L, E]
    x = g.op("Transpose", "to_channels", [x], perm=[0, 2, 1])
    if conv2d:
        x = g.op("Unsqueeze", "unsqueeze", [x, g.const("unsqueeze.axes", np.array([2], np.int64))])
    cin = EMBED_DIM
    for i, (cout, kernel, pool) in enumerate(CONVS):
        x, cin = g.op("Relu", f"conv{i}.relu", [_conv(g, f"conv{i}", x, cin, cout, kernel, conv2d)]), cout
        if pool:
            window = [1, POOL] if conv2d else [POOL]
            x = g.op("MaxPool", f"pool{i}", [x], kernel_shape=window, strides=window)
    if conv2d:
        x = g.op("Flatten", "flatten", [g.op("GlobalMaxPool", "global_max", [x])], axis=1)
    else:
        x = g.op("ReduceMax", "global_max", [x], axes=[2], keepdims=0)
    x = g.op("Relu", "fc1.relu", [g.gemm("fc1", x, cin, head_width)])
    g.gemm("fc2", x, head_width, num_classes, out="logits")
    model = make_model(g.nodes, g.params, [tensor_info("input_ids", np.int64, [batch, seq_len])],
                       [tensor_info("logits", np.float32, [batch, num_classes])],
                       "bytecnn_conv2d" if conv2d else "bytecnn")
    onnx.checker.check_model(model)
    return model


def build_bytecnn(path, **options):
    """Write the byte CNN (see make_bytecnn for the options) to `path` and return the path."""
    return save(path, make_bytecnn(**options))

"""A CRNN text-line recognizer (Shi et al. 2015) with PP-OCR's sequence neck and head, from seeded random weights.

Input "input" Bx3x32xW float32 (a text line; W=320 by default), output "probs" B x T x classes float32, opset 17.
Backbone: CRNN's seven-conv VGG stack at half width by default (channels (32, 64, 128, 128, 256, 256, 256); the
paper's is (64, 128, 256, 256, 512, 512, 512)): 3x3 pad-1 convs with bias + ReLU, BN (no conv bias) after the
third, fifth and seventh; 2x2/2 max pools after the first two convs, then two 2x2 max pools of stride (2, 1) and
pad (0, 1) that halve the height and keep the width (+1); the last conv is 2x2 without padding, so 32 rows end
as 1 and W=320 columns as T = W/4 + 1 = 81 time steps. BN statistics are calibrated on real activations.

Neck (PP-OCR's EncoderWithRNN as paddle2onnx / torch.onnx write it): Squeeze the height, Transpose to
[T, B, C], then `lstm_layers` ONNX LSTM nodes (direction=bidirectional, hidden 128, PyTorch's gate order
and U(-1/sqrt(H), 1/sqrt(H)) weights, biases as the 8H input B), each followed by Transpose (0, 2, 1, 3) +
Reshape [T, B, 2H] (the two directions side by side). Head (CTCHead): Transpose to [B, T, 2H], MatMul + Add to
6,625 classes (PP-OCR's Chinese dictionary: 6,623 characters, space and the CTC blank), Softmax on the classes.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, calibrate, calibration_images, make_model, save, tensor_info

HEIGHT = 32
CHANNELS = (32, 64, 128, 128, 256, 256, 256)
BN_AFTER = (2, 4, 6)  # conv indices with BN (and no bias), as CRNN's
POOLS = {0: ((2, 2), (2, 2), (0, 0)), 1: ((2, 2), (2, 2), (0, 0)), 3: ((2, 2), (2, 1), (0, 1)),
         5: ((2, 2), (2, 1), (0, 1))}  # after conv i: (kernel, strides, pads (height, width) on both sides)


def time_steps(width: int) -> int:
    """The sequence length the backbone makes of a W-column line: W/4 after the 2x2/2 pools, +1 per width-padded
    pool, -1 for the 2x2 conv (81 at 320)."""
    return (width // 2) // 2 + 2 - 1


def _backbone(g: Graph, channels):
    x, cin = "input", 3
    for i, cout in enumerate(channels):
        kernel, pad = (2, 0) if i == len(channels) - 1 else (3, 1)
        x = g.conv(f"conv{i}", x, cin, cout, kernel, pad=pad, bias=i not in BN_AFTER)
        if i in BN_AFTER:
            x = g.bn(f"bn{i}", x, cout)
        x, cin = g.op("Relu", f"relu{i}", [x]), cout
        if i in POOLS:
            kernel, strides, (ph, pw) = POOLS[i]
            x = g.op("MaxPool", f"pool{i}", [x], kernel_shape=list(kernel), strides=list(strides),
                     pads=[ph, pw, ph, pw])
    return x, cin


def _lstm(g: Graph, name, x, cin, hidden):
    """One bidirectional LSTM layer on [T, B, cin]; returns its [T, B, 2 * hidden] output."""
    bound = 1.0 / np.sqrt(hidden)
    for param, shape in (("W", (2, 4 * hidden, cin)), ("R", (2, 4 * hidden, hidden)), ("B", (2, 8 * hidden))):
        g.params[f"{name}.{param}"] = g.rng.uniform(-bound, bound, shape)
    y = g.op("LSTM", f"{name}.Y", [x, f"{name}.W", f"{name}.R", f"{name}.B"], direction="bidirectional",
             hidden_size=hidden)
    y = g.op("Transpose", f"{name}.transpose", [y], perm=[0, 2, 1, 3])
    return g.op("Reshape", f"{name}.reshape", [y, g.const(f"{name}.shape", np.array([0, 0, 2 * hidden], np.int64))])


def make_crnn(seed: int = 0, batch: int | str = 1, width: int = 320, num_classes: int = 6625,
              channels: tuple = CHANNELS, hidden: int = 128, lstm_layers: int = 2) -> onnx.ModelProto:
    """The CRNN ModelProto. batch: an int or a symbolic name such as "N"."""
    if len(channels) != 7:
        raise ValueError(f"CRNN has seven convs; got {len(channels)} channel counts")
    if width < 4:
        raise ValueError(f"CRNN needs a line at least 4 columns wide, not {width}")
    if isinstance(batch, str) and batch.isdigit():
        batch = int(batch)
    g = Graph(np.random.default_rng(seed))
    x, cin = _backbone(g, channels)
    x = g.op("Squeeze", "squeeze", [x, g.const("squeeze.axes", np.array([2], np.int64))])  # [B, C, T]
    x = g.op("Transpose", "to_time_major", [x], perm=[2, 0, 1])
    for layer in range(lstm_layers):
        x, cin = _lstm(g, f"lstm{layer}", x, cin, hidden), 2 * hidden
    x = g.op("Transpose", "to_batch_major", [x], perm=[1, 0, 2])
    g.params["head.weight"] = g.rng.standard_normal((cin, num_classes)) / np.sqrt(cin)
    g.params["head.bias"] = g.rng.normal(0.0, 0.01, num_classes)
    x = g.op("Add", "head", [g.op("MatMul", "head.matmul", [x, "head.weight"]), "head.bias"])
    g.op("Softmax", "probs", [x], axis=2)
    if g.batchnorms:
        calibrate(g, {"input": calibration_images(HEIGHT, width)})
    model = make_model(g.nodes, g.params, [tensor_info("input", np.float32, [batch, 3, HEIGHT, width])],
                       [tensor_info("probs", np.float32, [batch, time_steps(width), num_classes])], "crnn")
    onnx.checker.check_model(model)
    return model


def build_crnn(path, **options):
    """Write the CRNN (see make_crnn for the options) to `path` and return the path."""
    return save(path, make_crnn(**options))

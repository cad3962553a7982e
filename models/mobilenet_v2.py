"""MobileNetV2 (torchvision topology) as an ONNX model, built with onnx.helper from seeded random weights.

Stem 3x3/2 conv 32 + BN + ReLU6; seven stages of inverted residual blocks (expansion t, channels c, repeats n,
stride s of the first block, torchvision's table below); each block: 1x1 expand conv + BN + ReLU6 (skipped when
t == 1), 3x3 depthwise conv (group == channels) + BN + ReLU6, 1x1 linear projection + BN, and a residual Add when
stride 1 and in == out channels; 1x1 conv 1280 + BN + ReLU6; global average pool; flatten; Gemm 1280 -> 1000.
ReLU6 is Clip(x, 0, 6) (min/max as inputs, as exporters emit it since opset 11). Channel counts scale with
width_mult and round to multiples of 8 as torchvision's _make_divisible does. BN statistics are calibrated on real
activations (models/_builder.calibrate). Input "input" Bx3xSxS float32, output "logits" BxC, opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, save

SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1))  # (expansion t, channels c, repeats n, first stride s)


def _make_divisible(v, divisor=8):
    """torchvision's rounding of scaled channel counts: nearest multiple of 8, never below 90% of v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn_relu6(g: Graph, name, x, cin, cout, kernel, stride=1, group=1, relu6=True):
    y = g.bn(f"{name}.bn", g.conv(f"{name}.conv", x, cin, cout, kernel, stride, kernel // 2, group), cout)
    return g.op("Clip", f"{name}.relu6", [y, "relu6.min", "relu6.max"]) if relu6 else y


def _inverted_residual(g: Graph, name, x, cin, cout, stride, expand):
    hidden = cin * expand
    y = _conv_bn_relu6(g, f"{name}.expand", x, cin, hidden, 1) if expand != 1 else x
    y = _conv_bn_relu6(g, f"{name}.dw", y, hidden, hidden, 3, stride, group=hidden)
    y = _conv_bn_relu6(g, f"{name}.project", y, hidden, cout, 1, relu6=False)
    return g.op("Add", f"{name}.add", [x, y]) if stride == 1 and cin == cout else y


def make_mobilenet_v2(seed: int = 0, batch: int | str = 1, image_size: int = 224, num_classes: int = 1000,
                      width_mult: float = 1.0) -> onnx.ModelProto:
    """The MobileNetV2 ModelProto. batch: an int or a symbolic name such as "N"."""
    g = Graph(np.random.default_rng(seed))
    g.const("relu6.min", np.float32(0.0))
    g.const("relu6.max", np.float32(6.0))
    cin = _make_divisible(32 * width_mult)
    x = _conv_bn_relu6(g, "features.0", "input", 3, cin, 3, 2)
    index = 1
    for t, c, n, s in SETTINGS:
        cout = _make_divisible(c * width_mult)
        for i in range(n):
            x = _inverted_residual(g, f"features.{index}", x, cin, cout, s if i == 0 else 1, t)
            cin, index = cout, index + 1
    last = _make_divisible(1280 * max(1.0, width_mult))
    x = _conv_bn_relu6(g, f"features.{index}", x, cin, last, 1)
    x = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "avgpool", [x])], axis=1)
    g.gemm("classifier", x, last, num_classes, out="logits")
    return cnn_model(g, "mobilenet_v2", batch, image_size, num_classes)


def build_mobilenet_v2(path, **options):
    """Write MobileNetV2 (see make_mobilenet_v2 for the options) to `path` and return the path."""
    return save(path, make_mobilenet_v2(**options))

"""GoogLeNet (Inception v1; torchvision topology, paper's 5x5 branch) as an ONNX model from seeded random weights.

Every conv is BasicConv2d: conv without bias + BN (eps 1e-3) + ReLU. Stem: 7x7/2 conv 64, 3x3/2 max pool, 1x1
conv 64, 3x3 conv 192, 3x3/2 max pool (all pools ceil mode); nine inception modules (3a, 3b, pool, 4a-4e, 2x2/2
pool, 5a, 5b) with torchvision's channel table; global average pool; flatten; Gemm 1024 -> classes (no auxiliary
classifiers: they are training-only). An inception module concatenates four branches on channels: 1x1; 1x1 -> 3x3;
1x1 -> 5x5 (the paper's; torchvision has a 3x3 there); 3x3/1 max pool -> 1x1. BN statistics are calibrated on real
activations (models/_builder.calibrate). Input "input" Bx3xSxS float32, output "logits" BxC, opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, save

BN_EPSILON = 1e-3
INCEPTIONS = (("3a", 64, 96, 128, 16, 32, 32), ("3b", 128, 128, 192, 32, 96, 64), "maxpool3",
              ("4a", 192, 96, 208, 16, 48, 64), ("4b", 160, 112, 224, 24, 64, 64), ("4c", 128, 128, 256, 24, 64, 64),
              ("4d", 112, 144, 288, 32, 64, 64), ("4e", 256, 160, 320, 32, 128, 128), "maxpool4",
              ("5a", 256, 160, 320, 32, 128, 128), ("5b", 384, 192, 384, 48, 128, 128))
"""(name, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection) channels of each module, or a max pool."""


def _basic_conv(g: Graph, name, x, cin, cout, kernel, stride=1):
    y = g.bn(f"{name}.bn", g.conv(f"{name}.conv", x, cin, cout, kernel, stride, kernel // 2), cout, BN_EPSILON)
    return g.op("Relu", f"{name}.relu", [y])


def _max_pool(g: Graph, name, x, kernel=3, stride=2, pad=0):
    return g.op("MaxPool", name, [x], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4,
                ceil_mode=1)


def _inception(g: Graph, name, x, cin, c1, c3r, c3, c5r, c5, cpool):
    """Four branches concatenated on channels; returns (output, its channels)."""
    b1 = _basic_conv(g, f"{name}.branch1", x, cin, c1, 1)
    b2 = _basic_conv(g, f"{name}.branch2.1", _basic_conv(g, f"{name}.branch2.0", x, cin, c3r, 1), c3r, c3, 3)
    b3 = _basic_conv(g, f"{name}.branch3.1", _basic_conv(g, f"{name}.branch3.0", x, cin, c5r, 1), c5r, c5, 5)
    b4 = _basic_conv(g, f"{name}.branch4.1", _max_pool(g, f"{name}.branch4.0", x, 3, 1, 1), cin, cpool, 1)
    return g.op("Concat", f"{name}.concat", [b1, b2, b3, b4], axis=1), c1 + c3 + c5 + cpool


def make_googlenet(seed: int = 0, batch: int | str = 1, image_size: int = 224,
                   num_classes: int = 1000) -> onnx.ModelProto:
    """The GoogLeNet ModelProto. batch: an int or a symbolic name such as "N"."""
    g = Graph(np.random.default_rng(seed))
    x = _max_pool(g, "maxpool1", _basic_conv(g, "conv1", "input", 3, 64, 7, 2))
    x = _basic_conv(g, "conv3", _basic_conv(g, "conv2", x, 64, 64, 1), 64, 192, 3)
    x, cin = _max_pool(g, "maxpool2", x), 192
    for module in INCEPTIONS:
        if module == "maxpool4":  # torchvision's 2x2/2 pool before the 5x modules
            x = _max_pool(g, module, x, 2, 2)
        elif module == "maxpool3":
            x = _max_pool(g, module, x)
        else:
            x, cin = _inception(g, f"inception{module[0]}", x, cin, *module[1:])
    x = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "avgpool", [x])], axis=1)
    g.gemm("fc", x, cin, num_classes, out="logits")
    return cnn_model(g, "googlenet", batch, image_size, num_classes)


def build_googlenet(path, **options):
    """Write GoogLeNet (see make_googlenet for the options) to `path` and return the path."""
    return save(path, make_googlenet(**options))

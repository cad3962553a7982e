"""SqueezeNet 1.1 (torchvision topology) as an ONNX model, built with onnx.helper from seeded random weights.

3x3/2 conv 64 + ReLU; 3x3/2 max pool (ceil mode); fire modules, each a 1x1 squeeze conv + ReLU feeding a 1x1 and
a 3x3 expand conv (+ ReLU) whose outputs are concatenated on channels, in torchvision's order with a ceil-mode max
pool after the 2nd and 4th; then a 1x1 conv to the classes + ReLU, global average pool and flatten. Every conv has
a bias and there is no BatchNorm (the original has none); He-normal weights keep activations O(1).
Input "input" Bx3xSxS float32, output "logits" BxC (non-negative, as SqueezeNet's are), opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, save

FIRES = ((16, 64), (16, 64), "pool", (32, 128), (32, 128), "pool", (48, 192), (48, 192), (64, 256), (64, 256))
"""(squeeze channels, expand channels per branch) of each fire module, "pool" a 3x3/2 ceil-mode max pool."""


def _fire(g: Graph, name, x, cin, squeeze, expand):
    s = g.op("Relu", f"{name}.squeeze_activation", [g.conv(f"{name}.squeeze", x, cin, squeeze, 1, bias=True)])
    e1 = g.op("Relu", f"{name}.expand1x1_activation", [g.conv(f"{name}.expand1x1", s, squeeze, expand, 1, bias=True)])
    e3 = g.op("Relu", f"{name}.expand3x3_activation",
              [g.conv(f"{name}.expand3x3", s, squeeze, expand, 3, pad=1, bias=True)])
    return g.op("Concat", f"{name}.concat", [e1, e3], axis=1)


def _max_pool(g: Graph, name, x):
    return g.op("MaxPool", name, [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)


def make_squeezenet(seed: int = 0, batch: int | str = 1, image_size: int = 224,
                    num_classes: int = 1000) -> onnx.ModelProto:
    """The SqueezeNet 1.1 ModelProto. batch: an int or a symbolic name such as "N"."""
    g = Graph(np.random.default_rng(seed))
    x = g.op("Relu", "features.1", [g.conv("features.0", "input", 3, 64, 3, 2, bias=True)])
    x, cin = _max_pool(g, "features.2", x), 64
    for i, fire in enumerate(FIRES, start=3):
        if fire == "pool":
            x = _max_pool(g, f"features.{i}", x)
        else:
            x, cin = _fire(g, f"features.{i}", x, cin, *fire), 2 * fire[1]
    x = g.op("Relu", "classifier.2", [g.conv("classifier.1", x, cin, num_classes, 1, bias=True)])
    g.op("Flatten", "logits", [g.op("GlobalAveragePool", "classifier.3", [x])], axis=1)
    return cnn_model(g, "squeezenet1_1", batch, image_size, num_classes)


def build_squeezenet(path, **options):
    """Write SqueezeNet 1.1 (see make_squeezenet for the options) to `path` and return the path."""
    return save(path, make_squeezenet(**options))

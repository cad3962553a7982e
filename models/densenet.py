"""DenseNet (torchvision topology; DenseNet-121 by default) as an ONNX model, built from seeded random weights.

Stem: 7x7/2 conv 64 + BN + ReLU, 3x3/2 max pool (pad 1). Dense blocks of (6, 12, 24, 16) layers: layer i of a
block concatenates the block input and the i earlier layers' outputs on channels (a Concat per layer, as
torchvision's export has; none for a single input), then BN + ReLU + 1x1 conv to bn_size * growth_rate channels,
BN + ReLU + 3x3 conv to growth_rate channels. Between blocks a transition concatenates the block's features, then
BN + ReLU + 1x1 conv halving the channels + 2x2/2 average pool. After the last block: Concat, BN, ReLU, global
average pool, flatten, Gemm to the classes. Convs have no bias. BN statistics are calibrated on real activations
(models/_builder.calibrate). Input "input" Bx3xSxS float32, output "logits" BxC, opset 17.
DenseNet-121: 8.0 M parameters, 2.9 GFLOP per 224x224 image; builds in a few seconds.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, save


def _bn_relu_conv(g: Graph, name, x, cin, cout, kernel):
    y = g.op("Relu", f"{name}.relu", [g.bn(f"{name}.norm", x, cin)])
    return g.conv(f"{name}.conv", y, cin, cout, kernel, pad=kernel // 2)


def _concat(g: Graph, name, features):
    return features[0] if len(features) == 1 else g.op("Concat", name, features, axis=1)


def _dense_block(g: Graph, name, x, cin, layers, growth_rate, bn_size):
    """Returns the block's features (to be concatenated by its consumer) and their total channels."""
    features = [x]
    for i in range(1, layers + 1):
        channels = cin + (i - 1) * growth_rate
        y = _concat(g, f"{name}.denselayer{i}.concat", features)
        y = _bn_relu_conv(g, f"{name}.denselayer{i}.1", y, channels, bn_size * growth_rate, 1)
        features.append(_bn_relu_conv(g, f"{name}.denselayer{i}.2", y, bn_size * growth_rate, growth_rate, 3))
    return features, cin + layers * growth_rate


def make_densenet(seed: int = 0, batch: int | str = 1, image_size: int = 224, num_classes: int = 1000,
                  block_config=(6, 12, 24, 16), growth_rate: int = 32, num_init_features: int = 64,
                  bn_size: int = 4) -> onnx.ModelProto:
    """The DenseNet ModelProto (defaults: DenseNet-121). batch: an int or a symbolic name such as "N"."""
    g = Graph(np.random.default_rng(seed))
    x = g.conv("features.conv0", "input", 3, num_init_features, 7, 2, 3)
    x = g.op("Relu", "features.relu0", [g.bn("features.norm0", x, num_init_features)])
    x = g.op("MaxPool", "features.pool0", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = num_init_features
    for b, layers in enumerate(block_config, start=1):
        features, channels = _dense_block(g, f"features.denseblock{b}", x, channels, layers, growth_rate, bn_size)
        x = _concat(g, f"features.denseblock{b}.concat", features)
        if b < len(block_config):
            x = _bn_relu_conv(g, f"features.transition{b}", x, channels, channels // 2, 1)
            x = g.op("AveragePool", f"features.transition{b}.pool", [x], kernel_shape=[2, 2], strides=[2, 2])
            channels //= 2
    x = g.op("Relu", "features.relu5", [g.bn("features.norm5", x, channels)])
    x = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "avgpool", [x])], axis=1)
    g.gemm("classifier", x, channels, num_classes, out="logits")
    return cnn_model(g, "densenet", batch, image_size, num_classes)


def build_densenet(path, **options):
    """Write DenseNet (see make_densenet for the options) to `path` and return the path."""
    return save(path, make_densenet(**options))

"""AlexNet in its original form (Caffe's bvlc_alexnet, as in the ONNX model zoo) from seeded random weights.

conv1 11x11/4 96 + ReLU + LRN + 3x3/2 max pool; conv2 5x5 pad 2 256 in two groups (group=2) + ReLU + LRN + max
pool; conv3 3x3 384; conv4 3x3 384 group=2; conv5 3x3 256 group=2 + max pool (each conv + ReLU); flatten;
fc6 9216 -> 4096 + ReLU; fc7 4096 -> 4096 + ReLU; fc8 4096 -> classes (dropout is training-only). Max pools are
ceil mode, as Caffe's, which takes a 224x224 input to 6x6x256 = 9216 features. LRN: size 5, alpha 1e-4, beta
0.75, bias 1. Convs and Gemms have biases, there is no BatchNorm (the original has none); He-normal weights keep
activations O(1). classifier_width (4096) sets fc6/fc7's width. 61 M parameters, 244 MB at the defaults.
Input "input" Bx3xSxS float32, output "logits" BxC, opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, out_size, save

CONVS = (("conv1", 96, 11, 4, 0, 1), ("conv2", 256, 5, 1, 2, 2), ("conv3", 384, 3, 1, 1, 1),
         ("conv4", 384, 3, 1, 1, 2), ("conv5", 256, 3, 1, 1, 2))  # (name, channels, kernel, stride, pad, group)
LRN_AFTER = ("conv1", "conv2")
POOL_AFTER = ("conv1", "conv2", "conv5")


def make_alexnet(seed: int = 0, batch: int | str = 1, image_size: int = 224, num_classes: int = 1000,
                 classifier_width: int = 4096) -> onnx.ModelProto:
    """The AlexNet ModelProto. batch: an int or a symbolic name such as "N"."""
    g = Graph(np.random.default_rng(seed))
    x, cin, size = "input", 3, image_size
    for name, cout, kernel, stride, pad, group in CONVS:
        x = g.op("Relu", f"{name}.relu", [g.conv(name, x, cin, cout, kernel, stride, pad, group, bias=True)])
        cin, size = cout, out_size(size, kernel, stride, pad, what=f"AlexNet {name}")
        if name in LRN_AFTER:
            x = g.op("LRN", f"{name}.norm", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)
        if name in POOL_AFTER:
            x = g.op("MaxPool", f"{name}.pool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
            size = out_size(size, 3, 2, ceil=True, what=f"AlexNet {name}.pool")
    x = g.op("Flatten", "flatten", [x], axis=1)
    features = cin * size * size
    x = g.op("Relu", "fc6.relu", [g.gemm("fc6", x, features, classifier_width)])
    x = g.op("Relu", "fc7.relu", [g.gemm("fc7", x, classifier_width, classifier_width)])
    g.gemm("fc8", x, classifier_width, num_classes, out="logits")
    return cnn_model(g, "alexnet", batch, image_size, num_classes)


def build_alexnet(path, **options):
    """Write AlexNet (see make_alexnet for the options) to `path` and return the path."""
    return save(path, make_alexnet(**options))

"""ZFNet-512 as in the ONNX model zoo (Caffe2's zfnet512, converted to ONNX) from seeded random weights.

conv1 7x7/2 96 (no pad) + ReLU + LRN + 3x3/2 max pool; conv2 5x5/2 256 (no pad) + ReLU + LRN + 3x3/2 max pool;
conv3, conv4, conv5 3x3 pad 1, 512 channels each, + ReLU; 3x3/2 max pool; Reshape to (-1, features); fc6 features
-> 4096 + ReLU; fc7 4096 -> 1024 + ReLU; fc8 1024 -> classes; Softmax (the zoo's output is the probabilities).
At 224x224 the maps are 109, 54, 25, 12, 12 and 6: 512 x 6 x 6 = 18,432 features, so fc6 is 4096 x 18432
(75.5 M parameters, 302 MB of the model's 349 MB; 87 M parameters in all, as the zoo's file).

The pools are Caffe2's legacy (Caffe, ceil-mode) pooling, which the converter writes as explicit extra padding at
the end of an axis where the ceil and floor output sizes differ: only the last pool at 224 (12 -> 6, not 5).
LRN as AlexNet's (size 5, alpha 1e-4, beta 0.75, bias 1). Convs and Gemms have biases; no BatchNorm (the original
has none); He-normal weights keep activations O(1). fc6's weight is drawn in float32 (models/_builder.Graph.gemm)
so that building the model stays near 1.5 GB of memory. fc_widths sets fc6/fc7's widths (tests narrow them).
Input "input" Bx3xSxS float32, output "softmax" BxC, opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, out_size, save

CONVS = (("conv1", 96, 7, 2, 0), ("conv2", 256, 5, 2, 0), ("conv3", 512, 3, 1, 1), ("conv4", 512, 3, 1, 1),
         ("conv5", 512, 3, 1, 1))  # (name, channels, kernel, stride, pad)
LRN_AFTER = ("conv1", "conv2")
POOL_AFTER = ("conv1", "conv2", "conv5")
FC_WIDTHS = (4096, 1024)


def legacy_pool_pad(size, kernel=3, stride=2) -> int:
    """The least end padding that makes a floor-mode pool give Caffe's ceil-mode output size (0 or 1 for 3x3/2)."""
    ceil = out_size(size, kernel, stride, ceil=True, what="ZFNet pool")
    return (ceil - 1) * stride + kernel - size if ceil > out_size(size, kernel, stride, what="ZFNet pool") else 0


def features(image_size: int) -> int:
    """The flattened feature count after the last pool (18,432 at 224): fc6's input width."""
    size = image_size
    for name, _, kernel, stride, pad in CONVS:
        size = out_size(size, kernel, stride, pad, what=f"ZFNet {name}")
        if name in POOL_AFTER:
            size = out_size(size + legacy_pool_pad(size), 3, 2, what=f"ZFNet {name} pool")
    return CONVS[-1][1] * size * size


def make_zfnet512(seed: int = 0, batch: int | str = 1, image_size: int = 224, num_classes: int = 1000,
                  fc_widths: tuple = FC_WIDTHS) -> onnx.ModelProto:
    """The ZFNet-512 ModelProto. batch: an int or a symbolic name such as "N"."""
    g = Graph(np.random.default_rng(seed))
    x, cin, size = "input", 3, image_size
    for name, cout, kernel, stride, pad in CONVS:
        x = g.op("Relu", f"{name}.relu", [g.conv(name, x, cin, cout, kernel, stride, pad, bias=True)])
        cin, size = cout, out_size(size, kernel, stride, pad, what=f"ZFNet {name}")
        if name in LRN_AFTER:
            x = g.op("LRN", f"{name}.norm", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)
        if name in POOL_AFTER:
            end = legacy_pool_pad(size)
            x = g.op("MaxPool", f"{name}.pool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, end, end])
            size = out_size(size + end, 3, 2, what=f"ZFNet {name}.pool")
    width = cin * size * size
    assert width == features(image_size)
    x = g.op("Reshape", "flatten", [x, g.const("flatten.shape", np.array([-1, width], np.int64))])
    x = g.op("Relu", "fc6.relu", [g.gemm("fc6", x, width, fc_widths[0], float32=True)])
    x = g.op("Relu", "fc7.relu", [g.gemm("fc7", x, fc_widths[0], fc_widths[1])])
    g.op("Softmax", "softmax", [g.gemm("fc8", x, fc_widths[1], num_classes)], axis=1)
    return cnn_model(g, "zfnet512", batch, image_size, num_classes, output="softmax")


def build_zfnet512(path, **options):
    """Write ZFNet-512 (see make_zfnet512 for the options) to `path` and return the path."""
    return save(path, make_zfnet512(**options))

"""VGG (torchvision topology; VGG-11 with a narrower classifier by default) from seeded random weights.

Stages of 3x3 pad-1 convs (with bias) + ReLU (+ BN before the ReLU with batch_norm=True, torchvision's vgg*_bn),
each stage ending in a 2x2/2 max pool: torchvision's configurations for depth 11, 13, 16 and 19. Then flatten
512 x (S/32)^2 features (25088 at 224: torchvision's 7x7 adaptive pool is then the identity and is left out),
Gemm + ReLU, Gemm + ReLU, Gemm to the classes (dropout is training-only).

Size: torchvision's classifier is 4096 wide, which makes VGG-11 133 M parameters (531 MB), 103 M of them in the
first Gemm. The default classifier_width=1024 keeps the convolutions (the compute: 7.6 GFLOP for VGG-11) and the
classifier's shape but makes the model 37 M parameters (148 MB); classifier_width=4096 gives torchvision's.
Without batch_norm there is no BN (the original has none) and He-normal weights keep activations O(1); with it,
BN statistics are calibrated on real activations. Input "input" Bx3xSxS float32, output "logits" BxC, opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, save

CONFIGS = {11: ((64,), (128,), (256, 256), (512, 512), (512, 512)),
           13: ((64, 64), (128, 128), (256, 256), (512, 512), (512, 512)),
           16: ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)),
           19: ((64, 64), (128, 128), (256,) * 4, (512,) * 4, (512,) * 4)}  # conv channels per stage


def make_vgg(seed: int = 0, batch: int | str = 1, image_size: int = 224, num_classes: int = 1000, depth: int = 11,
             batch_norm: bool = False, classifier_width: int = 1024) -> onnx.ModelProto:
    """The VGG ModelProto (image_size a multiple of 32). batch: an int or a symbolic name such as "N"."""
    if depth not in CONFIGS:
        raise ValueError(f"VGG depth {depth} is not one of {sorted(CONFIGS)}")
    if image_size % 32:
        raise ValueError(f"VGG needs an image size that is a multiple of 32 (five 2x2 pools), not {image_size}")
    g = Graph(np.random.default_rng(seed))
    x, cin, index = "input", 3, 0
    for stage in CONFIGS[depth]:
        for cout in stage:
            y = g.conv(f"features.{index}", x, cin, cout, 3, pad=1, bias=True)
            if batch_norm:
                index += 1
                y = g.bn(f"features.{index}", y, cout)
            x, cin, index = g.op("Relu", f"features.{index + 1}", [y]), cout, index + 2
        x, index = g.op("MaxPool", f"features.{index}", [x], kernel_shape=[2, 2], strides=[2, 2]), index + 1
    x = g.op("Flatten", "flatten", [x], axis=1)
    x = g.op("Relu", "classifier.1", [g.gemm("classifier.0", x, cin * (image_size // 32) ** 2, classifier_width)])
    x = g.op("Relu", "classifier.4", [g.gemm("classifier.3", x, classifier_width, classifier_width)])
    g.gemm("classifier.6", x, classifier_width, num_classes, out="logits")
    return cnn_model(g, f"vgg{depth}{'_bn' if batch_norm else ''}", batch, image_size, num_classes)


def build_vgg(path, **options):
    """Write VGG (see make_vgg for the options) to `path` and return the path."""
    return save(path, make_vgg(**options))

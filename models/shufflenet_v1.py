"""ShuffleNet v1 (Zhang et al. 2017, 1.0x) as an ONNX model, built with onnx.helper from seeded random weights.

Stem 3x3/2 conv 24 + BN + ReLU, 3x3/2 max pool (pad 1); three stages of 4, 8, 4 units with the paper's output
channels for the group count (240/480/960 for groups=3, 272/544/1088 for 4, 384/768/1536 for 8). A unit: grouped
1x1 conv to a quarter of its branch channels + BN + ReLU (ungrouped on the 24-channel stage input, as in the
paper; see bottleneck() for the first unit of groups 4 and 8); channel shuffle as
Reshape [B, g, C/g, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape [B, C, H, W] (batch as 0: copied); 3x3
depthwise conv + BN; grouped 1x1 conv + BN; then ReLU(x + branch) for stride 1, and for the stride-2 first unit of
a stage ReLU(Concat(AveragePool 3x3/2 pad 1 (x), branch)) whose branch makes only out - in channels. Global average
pool, flatten, Gemm to the classes. BN statistics are calibrated on real activations (models/_builder.calibrate).
Input "input" Bx3xSxS float32, output "logits" BxC, opset 17.
"""
from __future__ import annotations

import numpy as np
import onnx

from ._builder import Graph, cnn_model, save

STAGE_CHANNELS = {1: (144, 288, 576), 2: (200, 400, 800), 3: (240, 480, 960), 4: (272, 544, 1088),
                  8: (384, 768, 1536)}
"""The paper's table 1 by group count."""
STAGE_REPEATS = (4, 8, 4)
STEM_CHANNELS = 24


def _channel_shuffle(g: Graph, name, x, channels, groups, size):
    """Reshape -> Transpose -> Reshape: channel c of group k moves to position c * groups + k."""
    g.const(f"{name}.shape5", np.array([0, groups, channels // groups, size, size], np.int64))
    g.const(f"{name}.shape4", np.array([0, channels, size, size], np.int64))
    y = g.op("Reshape", f"{name}.reshape1", [x, f"{name}.shape5"])
    y = g.op("Transpose", f"{name}.transpose", [y], perm=[0, 2, 1, 3, 4])
    return g.op("Reshape", f"{name}.reshape2", [y, f"{name}.shape4"])


def bottleneck(cout, branch_out, groups):
    """The bottleneck width of a unit: a quarter of its branch's output channels, as for groups 1-3 (for the first
    unit of a stage the branch makes cout - cin). For groups 4 and 8 the first unit of stage 2 would get 62 and 90
    channels, which the group count does not divide; it takes a quarter of the stage's output instead (68, 96), as
    the authors' code does for every unit (megvii-model/ShuffleNet-Series, ShuffleNetV1: mid = out // 4)."""
    mid = branch_out // 4
    return mid if mid % groups == 0 else cout // 4


def _unit(g: Graph, name, x, cin, cout, stride, groups, size):
    """One ShuffleNet unit on a `size`x`size` input; returns (output, its size)."""
    branch_out = cout - cin if stride == 2 else cout
    mid = bottleneck(cout, branch_out, groups)
    first_groups = 1 if cin == STEM_CHANNELS else groups
    y = g.conv(f"{name}.gconv1", x, cin, mid, 1, group=first_groups)
    y = g.op("Relu", f"{name}.relu1", [g.bn(f"{name}.bn1", y, mid)])
    y = _channel_shuffle(g, f"{name}.shuffle", y, mid, groups, size)
    out_size = (size - 1) // stride + 1
    y = g.bn(f"{name}.bn2", g.conv(f"{name}.dwconv", y, mid, mid, 3, stride, 1, group=mid), mid)
    y = g.bn(f"{name}.bn3", g.conv(f"{name}.gconv2", y, mid, branch_out, 1, group=groups), branch_out)
    if stride == 1:
        return g.op("Relu", f"{name}.relu", [g.op("Add", f"{name}.add", [x, y])]), out_size
    shortcut = g.op("AveragePool", f"{name}.avgpool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                    count_include_pad=1)
    return g.op("Relu", f"{name}.relu", [g.op("Concat", f"{name}.concat", [shortcut, y], axis=1)]), out_size


def make_shufflenet_v1(seed: int = 0, batch: int | str = 1, image_size: int = 224, num_classes: int = 1000,
                       groups: int = 3) -> onnx.ModelProto:
    """The ShuffleNet v1 ModelProto (groups: 1, 2, 3, 4 or 8). batch: an int or a symbolic name such as "N"."""
    if groups not in STAGE_CHANNELS:
        raise ValueError(f"ShuffleNet v1 has no channel table for groups={groups}; use one of {list(STAGE_CHANNELS)}")
    g = Graph(np.random.default_rng(seed))
    x = g.op("Relu", "stem.relu", [g.bn("stem.bn", g.conv("stem.conv", "input", 3, STEM_CHANNELS, 3, 2, 1),
                                        STEM_CHANNELS)])
    x = g.op("MaxPool", "stem.maxpool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    size = ((image_size - 1) // 2) // 2 + 1  # after the 3x3/2 pad-1 conv and max pool
    cin = STEM_CHANNELS
    for stage, (cout, repeats) in enumerate(zip(STAGE_CHANNELS[groups], STAGE_REPEATS), start=2):
        for i in range(repeats):
            x, size = _unit(g, f"stage{stage}.{i}", x, cin, cout, 2 if i == 0 else 1, groups, size)
            cin = cout
    x = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "avgpool", [x])], axis=1)
    g.gemm("fc", x, cin, num_classes, out="logits")
    return cnn_model(g, f"shufflenet_v1_g{groups}", batch, image_size, num_classes)


def build_shufflenet_v1(path, **options):
    """Write ShuffleNet v1 (see make_shufflenet_v1 for the options) to `path` and return the path."""
    return save(path, make_shufflenet_v1(**options))

"""Convolutions on maps smaller than their window (compiler/passes/simplify.py crop_dead_taps): the kernel taps
that read only padding are cropped at compile time, with the padding shifted so that every output stays where it
was. Three ways in both layouts over strides, dilations, asymmetric pads, groups and 1-D forms; the rule on its
own; and the pass's result (a 3x3 convolution of a 1x1 map becomes a 1x1 one)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.passes import PassContext, run_pipeline
from compiler.passes.simplify import crop_dead_taps, live_taps
from frontends import from_onnx
from harness import make_model, three_way_random
from relayish.expr import post_order

RNG = np.random.default_rng(30)


def conv_model(c, o, size, k, stride=1, pads=None, dilation=1, groups=1):
    """Conv of a (1, c, *size) input (2-D or 1-D by len(size)) with a k-wide window and a bias."""
    dims = len(size)
    pads = [dilation * (k - 1) // 2] * (2 * dims) if pads is None else pads
    consts = {"w": RNG.standard_normal((o, c // groups) + (k,) * dims).astype(np.float32),
              "b": RNG.standard_normal(o).astype(np.float32)}
    attrs = dict(kernel_shape=[k] * dims, strides=[stride] * dims, pads=pads, dilations=[dilation] * dims,
                 group=groups)
    return make_model("Conv", {"x": (1, c) + tuple(size)}, attrs, 17, consts)


def test_live_taps():
    assert live_taps(1, 1, 3, 1, 1, 1) == (1, 2)  # 3x3 on a 1x1 map: the centre tap only
    assert live_taps(2, 2, 3, 1, 1, 1) == (0, 3)  # on a 2x2 map every tap reads a pixel somewhere
    assert live_taps(2, 2, 5, 1, 1, 2) == (1, 4)  # 5x5 on 2x2: the outer ring reads padding only
    assert live_taps(2, 2, 3, 1, 2, 2) == (1, 2)  # dilated 3x3 (a 5x5 span) on 2x2
    assert live_taps(3, 2, 7, 2, 1, 3) == (1, 6)  # 7x7 stride 2 on 3x3
    assert live_taps(5, 5, 3, 1, 1, 1) == (0, 3)


CASES = [  # (c, o, size, k, stride, pads, dilation, groups)
    (32, 24, (1, 1), 3, 1, None, 1, 1),
    (19, 40, (2, 2), 5, 1, None, 1, 1),
    (16, 16, (2, 2), 3, 1, None, 2, 1),
    (12, 20, (3, 3), 7, 2, None, 1, 1),
    (8, 12, (1, 3), 3, 1, [2, 1, 0, 1], 1, 1),  # asymmetric pads: rows cropped, columns kept
    (24, 48, (1, 1), 3, 1, None, 1, 4),  # grouped
    (32, 32, (1, 1), 3, 1, None, 1, 32),  # depthwise
    (7, 9, (2,), 5, 1, None, 1, 1),  # Conv1d over a length of 2
    (10, 6, (4, 4), 3, 1, [3, 3, 3, 3], 1, 1),  # pads wider than the kernel: border outputs are bias only
]


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("case", CASES)
def test_cropped_convolutions_three_ways(case, layout):
    three_way_random(conv_model(*case), layout=layout)


def _convs(mod):
    return [n for n in post_order(mod.main.body) if getattr(n, "op", None) == "nn.conv2d"]


def test_a_3x3_convolution_of_a_1x1_map_becomes_a_1x1_one():
    mod = crop_dead_taps(from_onnx(conv_model(64, 96, (1, 1), 3)))
    conv, = _convs(mod)
    assert conv.args[1].type.shape == (96, 64, 1, 1) and tuple(conv.attrs.padding) == (0, 0, 0, 0)


def test_a_window_that_reads_the_map_everywhere_is_kept():
    before = from_onnx(conv_model(16, 16, (6, 6), 3))
    conv, = _convs(crop_dead_taps(before))
    assert conv.args[1].type.shape[2:] == (3, 3) and tuple(conv.attrs.padding) == (1, 1, 1, 1)


def test_the_pipeline_crops_before_choosing_layouts():
    fused = run_pipeline(from_onnx(conv_model(1024, 384, (1, 1), 3)), PassContext())
    weights = [n for n in post_order(fused.main.body) if hasattr(n, "data") and n.data.size >= 384 * 1024]
    assert weights and all(w.data.size == 384 * 1024 for w in weights)

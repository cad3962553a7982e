"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the convolution and pooling windows
of every spatial rank: 1-D Conv / MaxPool / AveragePool (2-D ops of height 1), 3-D ones (relayish/ops/convnd.py),
global pools of 1-D and 3-D inputs; strides, pads, dilations, groups, auto_pad, ceil_mode, count_include_pad.
Bad nodes give clear errors.

A case: (op type, graph inputs {name: (shape, dtype)}, attributes, opset, initializers {name: array}).
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from relayish.interp import evaluate
from test_compile_movement import make_model
from test_frontend import assert_close, run_ort

F = "float32"


def w(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CONV_1D = [
    ("Conv", {"x": ((2, 3, 11), F)}, {}, 11, {"w": w(4, 3, 3)}),
    ("Conv", {"x": ((1, 4, 12), F)}, {"strides": [2], "pads": [2, 1], "dilations": [2], "group": 2}, 11,
     {"w": w(6, 2, 3), "b": w(6)}),
    ("Conv", {"x": ((1, 3, 10), F)}, {"auto_pad": "SAME_UPPER", "strides": [3]}, 22, {"w": w(2, 3, 4)}),
    ("Conv", {"x": ((1, 3, 10), F)}, {"auto_pad": "SAME_LOWER", "group": 3, "kernel_shape": [4]}, 11,
     {"w": w(3, 1, 4)}),
]

CONV_3D = [
    ("Conv", {"x": ((1, 2, 5, 6, 7), F)}, {}, 11, {"w": w(3, 2, 3, 2, 3)}),
    ("Conv", {"x": ((2, 4, 6, 5, 7), F)}, {"strides": [2, 1, 2], "pads": [1, 0, 2, 0, 1, 1],
                                          "dilations": [1, 2, 1], "group": 2}, 11,
     {"w": w(6, 2, 3, 2, 2), "b": w(6)}),
    ("Conv", {"x": ((1, 3, 5, 5, 6), F)}, {"auto_pad": "SAME_UPPER", "strides": [2, 2, 3]}, 11,
     {"w": w(2, 3, 2, 3, 2)}),
    ("Conv", {"x": ((1, 3, 4, 5, 6), F)}, {"auto_pad": "SAME_LOWER", "group": 3}, 22, {"w": w(3, 1, 2, 2, 2)}),
    ("Conv", {"x": ((1, 2, 4, 5, 6), F)}, {"auto_pad": "VALID"}, 11, {"w": w(4, 2, 1, 1, 1)}),
]

POOLS = [
    ("MaxPool", {"x": ((2, 3, 11), F)}, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, 12, {}),
    ("MaxPool", {"x": ((1, 2, 10), F)}, {"kernel_shape": [3], "dilations": [2], "ceil_mode": 1, "strides": [2]},
     12, {}),
    ("AveragePool", {"x": ((1, 2, 11), F)}, {"kernel_shape": [4], "strides": [3], "pads": [2, 1],
                                             "count_include_pad": 1}, 19, {}),
    ("AveragePool", {"x": ((1, 2, 10), F)}, {"kernel_shape": [3], "auto_pad": "SAME_UPPER", "strides": [2]},
     11, {}),
    ("MaxPool", {"x": ((1, 2, 6, 7, 8), F)}, {"kernel_shape": [2, 3, 2]}, 12, {}),
    ("MaxPool", {"x": ((1, 2, 7, 7, 8), F)}, {"kernel_shape": [3, 2, 3], "strides": [2, 2, 3],
                                              "pads": [1, 0, 1, 1, 1, 2], "dilations": [1, 2, 1],
                                              "ceil_mode": 1}, 12, {}),
    ("MaxPool", {"x": ((1, 1, 5, 6, 7), F)}, {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_LOWER",
                                              "strides": [2, 2, 2]}, 12, {}),
    ("AveragePool", {"x": ((1, 2, 6, 7, 8), F)}, {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2]}, 19, {}),
    ("AveragePool", {"x": ((2, 2, 7, 6, 8), F)}, {"kernel_shape": [3, 3, 2], "strides": [2, 2, 3],
                                                  "pads": [1, 1, 0, 1, 2, 1], "ceil_mode": 1}, 19, {}),
    ("AveragePool", {"x": ((1, 2, 7, 6, 8), F)}, {"kernel_shape": [3, 3, 2], "strides": [2, 1, 3],
                                                  "pads": [1, 1, 0, 1, 2, 1], "dilations": [2, 1, 2],
                                                  "count_include_pad": 1, "ceil_mode": 1}, 19, {}),
    ("AveragePool", {"x": ((1, 2, 5, 6, 7), F)}, {"kernel_shape": [2, 3, 3], "auto_pad": "SAME_UPPER",
                                                  "strides": [2, 2, 2]}, 11, {}),
    ("GlobalAveragePool", {"x": ((2, 3, 9), F)}, {}, 11, {}),
    ("GlobalMaxPool", {"x": ((2, 3, 9), F)}, {}, 11, {}),
    ("GlobalAveragePool", {"x": ((2, 3, 4, 5, 6), F)}, {}, 22, {}),
    ("GlobalMaxPool", {"x": ((2, 3, 4, 5, 6), F)}, {}, 22, {}),
]

CONV_TRANSPOSE = [
    ("ConvTranspose", {"x": ((1, 2, 4, 5), F)}, {}, 11, {"w": w(2, 3, 3, 3)}),
    ("ConvTranspose", {"x": ((2, 4, 4, 3), F)}, {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [2, 1],
                                                "group": 2, "output_padding": [1, 2]}, 11,
     {"w": w(4, 3, 3, 2), "b": w(6)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, 11, {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, 11, {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 3], "output_shape": [6, 10]}, 11,
     {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 3], "output_shape": [6, 10],
                                                "auto_pad": "SAME_UPPER"}, 11, {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [3, 2], "output_shape": [10, 8]}, 11,
     {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4), F)}, {"strides": [2, 2], "auto_pad": "VALID"}, 22, {"w": w(2, 2, 3, 3)}),
    ("ConvTranspose", {"x": ((1, 3, 7), F)}, {"strides": [3], "pads": [1, 2], "dilations": [2], "group": 3}, 11,
     {"w": w(3, 2, 3), "b": w(6)}),
    ("ConvTranspose", {"x": ((1, 2, 3, 4, 3), F)}, {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]}, 11,
     {"w": w(2, 3, 3, 2, 2)}),
]

CASES = CONV_1D + CONV_3D + POOLS + CONV_TRANSPOSE


def case_id(case):
    op, inputs, attrs, opset, consts = case
    shapes = "-".join("x".join(map(str, s)) for s, _ in inputs.values())
    return f"{op}-v{opset}-{shapes}-" + "-".join(f"{k}={v}" for k, v in attrs.items()) + \
        "-" + "-".join(f"{k}{np.shape(v)}" for k, v in consts.items())


def check_three_way(case, seed=0):
    model = make_model(*case)
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(d) for n, (s, d) in case[1].items()}
    interp, = evaluate(from_onnx(model), feeds)
    ref, = run_ort(model, feeds)
    ours, = compile_model(model).run(None, feeds)
    assert ours.dtype == ref.dtype, f"dtype {ours.dtype} != onnxruntime's {ref.dtype}"
    assert_close(ours, ref, "vs onnxruntime")
    assert_close(ours, interp, "vs interpreter")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    check_three_way(case)


@pytest.mark.parametrize("op,inputs,attrs,consts,message", [
    ("Conv", {"x": ((1, 2, 3, 4, 5, 6), F)}, {}, {"w": w(1, 2, 1, 1, 1, 1)}, "takes a 3-D .* or 5-D"),
    ("Conv", {"x": ((1, 2, 8), F)}, {}, {"w": w(1, 2, 3, 3)}, "does not match a 1-D convolution"),
    ("Conv", {"x": ((1, 2, 8), F)}, {"pads": [1, 1, 1]}, {"w": w(1, 2, 3)}, "pads must have 2 values"),
    ("Conv", {"x": ((1, 2, 4, 4, 4), F)}, {"pads": [1, 1, 1, 1]}, {"w": w(1, 2, 3, 3, 3)},
     "pads must have 6 values"),
    ("Conv", {"x": ((1, 2, 4, 4, 4), F)}, {"strides": [1, 1]}, {"w": w(1, 2, 3, 3, 3)}, "must have 3 values"),
    ("Conv", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [3, 3, 2]}, {"w": w(1, 2, 3, 3, 3)},
     "does not match the weight shape"),
    ("Conv", {"x": ((1, 4, 4, 4, 4), F)}, {"group": 3}, {"w": w(3, 1, 1, 1, 1)}, "groups=3 must divide"),
    ("MaxPool", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [2, 2]}, {}, r"does not have 3 values"),
    ("MaxPool", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [2, 2, 2], "pads": [2, 0, 0, 0, 0, 0]}, {},
     "must be smaller than pool_size"),
    ("AveragePool", {"x": ((1, 2, 4, 4, 4), F)}, {"kernel_shape": [2, 2, 6]}, {},
     "padded input width 4 is smaller than the dilated pool width 6"),
    ("AveragePool", {"x": ((1, 2, 4), F)}, {"kernel_shape": [2], "strides": [1, 1]}, {},
     "a 1-D window takes 1 value per attribute"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"pads": [1, 1]}, {"w": w(2, 2, 3, 3)}, "must be 4 values >= 0"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"pads": [3, 3, 3, 3]}, {"w": w(2, 2, 3, 3)}, "leave no output"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"strides": [3, 3], "auto_pad": "SAME_UPPER"},
     {"w": w(2, 2, 1, 1)}, "a kernel shorter than the stride"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"group": 3}, {"w": w(2, 2, 3, 3)}, "groups=3 must divide"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {"strides": [1]}, {"w": w(2, 2, 3, 3)}, "must have 2 values"),
    ("ConvTranspose", {"x": ((1, 2, 4, 4), F)}, {}, {"w": w(2, 2, 3, 3), "b": w(3)}, "does not match 2 output"),
])
def test_bad_nodes_are_refused_clearly(op, inputs, attrs, consts, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(make_model(op, inputs, attrs, 12 if op == "MaxPool" else 11, consts))

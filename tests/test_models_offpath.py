"""The suite models built for the architectures off the fast paths (issue 30, item 7): ShuffleNet v1 with 4 and 8
groups, ZFNet-512, a CRNN text recognizer (bidirectional LSTMs), a byte-level 1-D CNN and its 2-D form. Each, in a
small configuration (the same topology code as the suite's realistic sizes): builds, passes onnx's full check, has
the structure it claims, and compiles to outputs within 1e-4 (relative) of onnxruntime's and the interpreter's."""
from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from harness import assert_close
import models
from compiler import compile_model
from frontends import from_onnx
from models.crnn import time_steps
from models.shufflenet_v1 import bottleneck
from models.suite import SUITE
from models.zfnet512 import features, legacy_pool_pad
from relayish.interp import evaluate
from test_models import attr, convs, producers

SMALL = {  # suite name -> (maker, small options)
    "shufflenet_v1_g4": ("make_shufflenet_v1", dict(groups=4, image_size=64)),
    "shufflenet_v1_g8": ("make_shufflenet_v1", dict(groups=8, image_size=64)),
    # 224x224: the real 512 x 6 x 6 = 18,432 features and the padded last pool; narrow fc6/fc7
    "zfnet512": ("make_zfnet512", dict(fc_widths=(64, 32), num_classes=100)),
    "crnn": ("make_crnn", dict(batch=2, width=64, num_classes=97)),
    "bytecnn": ("make_bytecnn", dict(batch=2, seq_len=160)),
    "bytecnn_conv2d": ("make_bytecnn", dict(batch=2, seq_len=160, conv2d=True)),
}
NO_INTERPRETER = ("zfnet512",)  # 1.4 GMAC of convs at 224: the numpy interpreter would take the test's time


@functools.lru_cache(maxsize=None)
def small_model(name) -> onnx.ModelProto:
    make, options = SMALL[name]
    return getattr(models, make)(**options)


def feeds(model, seed=0):
    """N(0, 1) images, or bytes 0..255 for the byte CNN."""
    rng, out = np.random.default_rng(seed), {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (rng.integers(0, 256, shape) if i.name == "input_ids"
                       else rng.standard_normal(shape).astype(np.float32))
    return out


def ort_run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def check_shufflenet(m, ops, groups, widths, first_bottleneck):
    assert sum(g == groups and w[2:] == [1, 1] for _, w, g in convs(m)) == 31
    assert sum(g == w[0] and w[1] == 1 for _, w, g in convs(m)) == 16  # one depthwise 3x3 per unit
    first, _, _ = convs(m)[1]  # stage 2's first unit: ungrouped 1x1 on the stem's 24 channels
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    assert dims[first.input[1]] == [first_bottleneck, 24, 1, 1]
    assert [dims[f"stage{s}.1.gconv2.weight"][0] for s in (2, 3, 4)] == list(widths)
    assert ops["AveragePool"] == ops["Concat"] == 3 and ops["Transpose"] == 16


def check_shufflenet_v1_g4(m, ops):
    check_shufflenet(m, ops, 4, (272, 544, 1088), 68)


def check_shufflenet_v1_g8(m, ops):
    check_shufflenet(m, ops, 8, (384, 768, 1536), 96)


def check_zfnet512(m, ops):
    assert [(w[0], w[2], attr(n, "strides")) for n, w, _ in convs(m)] == [
        (96, 7, [2, 2]), (256, 5, [2, 2]), (512, 3, [1, 1]), (512, 3, [1, 1]), (512, 3, [1, 1])]
    pools = [attr(n, "pads") for n in m.graph.node if n.op_type == "MaxPool"]
    assert pools == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 1]]  # Caffe's ceil mode on the 12x12 map only
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    assert dims["fc6.weight"] == [64, 18432] and ops["LRN"] == 2 and ops["Softmax"] == 1
    assert [o.name for o in m.graph.output] == ["softmax"]


def check_crnn(m, ops):
    lstms = [n for n in m.graph.node if n.op_type == "LSTM"]
    assert len(lstms) == 2 and ops["BatchNormalization"] == 3 and ops["Conv"] == 7
    assert all(attr(n, "direction") == b"bidirectional" and attr(n, "hidden_size") == 128 for n in lstms)
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    assert dims[lstms[0].input[1]] == [2, 512, 256] and dims[lstms[1].input[1]] == [2, 512, 256]
    out = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    assert out == [2, time_steps(64), 97] == [2, 17, 97] and time_steps(320) == 81
    assert producers(m)["probs"].op_type == "Softmax" and attr(producers(m)["probs"], "axis") == 2


def check_bytecnn(m, ops):
    assert [(attr(n, "kernel_shape"), w[1]) for n, w, _ in convs(m)] == [
        ([7], 32), ([7], 256), ([3], 256), ([3], 256), ([3], 256), ([3], 256)]
    assert ops["MaxPool"] == 2 and ops["ReduceMax"] == 1 and ops["Gather"] == 1 and "Unsqueeze" not in ops


def check_bytecnn_conv2d(m, ops):
    assert [attr(n, "kernel_shape") for n, _, _ in convs(m)] == [[1, 7], [1, 7], [1, 3], [1, 3], [1, 3], [1, 3]]
    assert [attr(n, "kernel_shape") for n in m.graph.node if n.op_type == "MaxPool"] == [[1, 3]] * 2
    assert ops["GlobalMaxPool"] == ops["Unsqueeze"] == 1 and "ReduceMax" not in ops


@pytest.mark.parametrize("name", SMALL)
def test_model_is_valid_and_has_its_structure(name):
    model = small_model(name)
    onnx.checker.check_model(model, full_check=True)
    assert SUITE[name].module == SMALL[name][0].removeprefix("make_")
    globals()[f"check_{name}"](model, Counter(n.op_type for n in model.graph.node))


@pytest.mark.parametrize("name", SMALL)
def test_compiled_model_matches_onnxruntime_and_the_interpreter(name):
    model = small_model(name)
    compiled = compile_model(model)
    a, b = feeds(model, 1), feeds(model, 2)
    ref = ort_run(model, a)
    assert np.isfinite(ref).all() and np.abs(ref - ort_run(model, b)).max() > 0.01 * np.abs(ref).max()
    ours = compiled.run(None, a)[0]
    assert_close(ours, ref, f"{name} vs onnxruntime")
    if name not in NO_INTERPRETER:
        assert_close(ours, evaluate(from_onnx(model), a)[0], f"{name} vs the interpreter")


def test_zfnet_flatten_size_and_caffe_pools():
    assert features(224) == 18432 and features(96) == 512 * 2 * 2
    assert [legacy_pool_pad(n) for n in (109, 25, 12, 13)] == [0, 0, 1, 0]  # 109 -> 54, 25 -> 12, 12 -> 6, 13 -> 6


def test_shufflenet_bottlenecks_divide_by_the_groups():
    for groups, widths in ((3, (240, 480, 960)), (4, (272, 544, 1088)), (8, (384, 768, 1536))):
        cin = 24
        for cout in widths:
            for branch in (cout - cin, cout):  # the stride-2 first unit, then the others
                assert bottleneck(cout, branch, groups) % groups == 0
            cin = cout
    assert bottleneck(240, 216, 3) == 54  # groups 3 keeps a quarter of the branch (the model is unchanged)


def test_byte_cnn_forms_compute_the_same_function():
    one, two = small_model("bytecnn"), small_model("bytecnn_conv2d")
    x = feeds(one, 3)
    assert_close(ort_run(two, x), ort_run(one, x), "the 2-D form vs the 1-D form")

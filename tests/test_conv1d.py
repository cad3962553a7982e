"""1-D convolutions (issue 30, item 4): Conv1d on (N, C, L) and the 2-D forms with a spatial extent of 1,
(N, C, L, 1) and (N, C, 1, L).

Numerics three ways in both layouts; structure: a Conv1d network stays 4-D and blocked between its convolutions
(compiler/passes/reshapes.py sinks the frontend's reshapes), its batch norms fold into the convolutions, and the
register tile of an (N, C, L, 1) convolution runs its columns along L (default_schedule.column_axis)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.default_schedule import column_axis, default_schedule
from compiler.passes import PassContext, run_pipeline
from compiler.schedule import Split
from compiler.summary import summarize
from compiler.task import extract_tasks
from frontends import from_onnx
from harness import make_model, three_way_random
from test_odd_channels import Net


def conv1d(n: Net, x, cin, cout, k, stride=1, dilation=1, bias=True):
    w = (n.rng.standard_normal((cout, cin, k)) * np.sqrt(2.0 / (cin * k))).astype(np.float32)
    inputs = [x, n.const(w)] + ([n.const(n.rng.normal(0, 0.1, cout).astype(np.float32))] if bias else [])
    pad = dilation * (k - 1) // 2
    return n.op("Conv", inputs, kernel_shape=[k], strides=[stride], dilations=[dilation], pads=[pad, pad])


def batch_norm1d(n: Net, x, channels):
    params = [n.rng.uniform(0.5, 1.5, channels), n.rng.normal(0, 0.1, channels), n.rng.normal(0, 0.1, channels),
              n.rng.uniform(0.5, 1.5, channels)]
    return n.op("BatchNormalization", [x] + [n.const(p.astype(np.float32)) for p in params])


def conv1d_net(length=60):
    """Conv1d 16 -> 24 (k 7) + BatchNorm1d + ReLU, MaxPool1d 3, Conv1d 24 -> 24 (k 3, dilation 2) + residual
    add + ReLU, Conv1d 24 -> 17 (k 5, stride 2) + ReLU; outputs: the last value and its max over the length."""
    n = Net(11)
    a = n.op("Relu", [batch_norm1d(n, conv1d(n, "x", 16, 24, 7, bias=False), 24)])
    p = n.op("MaxPool", [a], kernel_shape=[3], strides=[3])
    b = n.op("Relu", [n.op("Add", [p, conv1d(n, p, 24, 24, 3, dilation=2)])])
    c = n.op("Relu", [conv1d(n, b, 24, 17, 5, stride=2)])
    return n.model({"x": (1, 16, length)}, [c, n.op("ReduceMax", [c], axes=[2], keepdims=0)])


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_conv1d_network(layout):
    three_way_random(conv1d_net(), layout=layout)


def test_conv1d_network_stays_blocked():
    """Two layout transforms: the input in, the last relu out; no reshape between the convolutions, the batch norm
    folded into the first convolution."""
    summary = summarize(run_pipeline(from_onnx(conv1d_net()), PassContext(vector_width=16)))
    assert len(summary["layout_transforms"]) == 2
    kernels = [k["ops"] for k in summary["kernels"]]
    assert sum(k[0] == "nn.conv2d_nchwc" for k in kernels) == 3
    assert all("layout_transform" in k for k in kernels if "reshape" in k)  # only the input's and the output's
    assert not {"nn.batch_norm", "multiply"} & set(summary["ops"])


# (input shape, weight shape, attrs): 2-D convolutions with one spatial extent of 1
FORMS = [
    ((1, 24, 50, 1), (40, 24, 5, 1), dict(pads=[2, 0, 2, 0])),
    ((1, 24, 50, 1), (40, 24, 3, 1), dict(pads=[2, 0, 2, 0], dilations=[2, 1], strides=[2, 1])),
    ((1, 24, 1, 50), (40, 24, 1, 5), dict(pads=[0, 2, 0, 2])),
    ((1, 17, 1, 37), (13, 17, 1, 3), dict(pads=[0, 1, 0, 1], strides=[1, 3])),
    ((1, 17, 37, 1), (13, 17, 7, 1), dict(pads=[3, 0, 3, 0])),
]


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f[0][2]}x{f[0][3]}k{f[1][2]}x{f[1][3]}c{f[0][1]}o{f[1][0]}")
def test_unit_extent_convolutions(form, layout):
    shape, wshape, attrs = form
    rng = np.random.default_rng(sum(shape))
    consts = {"w": rng.standard_normal(wshape).astype(np.float32), "b": rng.standard_normal(wshape[0]).astype(np.float32)}
    model = make_model("Conv", {"x": shape}, dict(attrs, kernel_shape=list(wshape[2:])), 17, consts)
    three_way_random(model, layout=layout)


def test_columns_run_along_the_long_axis():
    """An (N, C, L, 1) convolution's register tile splits L into columns (it would take 1 column along W = 1),
    as an (N, C, 1, L) one splits W."""
    assert column_axis({"n": 1, "o": 4, "y": 512, "x": 1, "i": 16}, ["n", "o", "y", "x", "i"]) == 2
    assert column_axis({"n": 1, "o": 4, "y": 1, "x": 512, "i": 16}, ["n", "o", "y", "x", "i"]) == 3
    assert column_axis({"n": 1, "o": 4, "y": 1, "x": 1, "i": 16}, ["n", "o", "y", "x", "i"]) == 3
    for shape, kernel in (((1, 64, 512, 1), [3, 1]), ((1, 64, 1, 512), [1, 3])):
        pads = [1, 0, 1, 0] if kernel[0] == 3 else [0, 1, 0, 1]
        w = np.zeros((64, 64, *kernel), np.float32)
        fused = run_pipeline(from_onnx(make_model("Conv", {"x": shape}, dict(kernel_shape=kernel, pads=pads), 17,
                                                  {"w": w})), PassContext(vector_width=16))
        task = next(t for t in extract_tasks(fused) if t.ops[0] == "nn.conv2d_nchwc")
        state = task.initial_state()
        out = state.stages[-1]
        long_axis = out.leaves[2 if kernel[0] == 3 else 3].name
        splits = [s for s in default_schedule(state, 16).steps if isinstance(s, Split) and s.stage == out.name]
        assert any(s.iter == long_axis and s.lengths[0] >= 4 for s in splits), splits

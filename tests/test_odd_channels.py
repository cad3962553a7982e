"""Convolutions whose channel counts are not the vector's (issue 30): odd and prime channel counts (3, 13, 17, 24,
68, 136, 1000), grouped convolutions with fewer channels per group than a vector (5, 17, 34), ShuffleNet v1 stacks
with 4 and 8 groups, NaN and Inf through padded channels.

Numerics three ways (compiled vs the numpy interpreter vs onnxruntime) in both layouts; structure: the channel maps
(compiler/passes/channel_maps.py), no layout_transform between convolutions, one block size."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.passes import PassContext, run_pipeline
from compiler.passes.channel_maps import ChannelMap, channel_maps, group_map, network_block, plain_map
from compiler.summary import summarize
from frontends import from_onnx
from relayish.expr import post_order
from harness import three_way_random, with_output_shapes
from test_models import session


class Net:
    """A small ONNX graph: nodes in order, seeded weights (He-normal, so activations stay O(1))."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], {}, 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def const(self, value) -> str:
        name = self.name("c")
        self.inits[name] = np.asarray(value)
        return name

    def op(self, op_type: str, inputs: list, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x, cin, cout, k=1, stride=1, dilation=1, group=1, bias=True, pad=None) -> str:
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))
        inputs = [x, self.const(w.astype(np.float32))]
        if bias:
            inputs.append(self.const(self.rng.normal(0, 0.1, cout).astype(np.float32)))
        pad = dilation * (k - 1) // 2 if pad is None else pad
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride] * 2, dilations=[dilation] * 2,
                       pads=[pad] * 4, group=group)

    def affine(self, x, channels) -> str:
        """x * scale + shift per channel (a batch norm as fold_batch_norm leaves it between a conv and a relu)."""
        scale = self.const(self.rng.uniform(0.5, 1.5, (channels, 1, 1)).astype(np.float32))
        shift = self.const(self.rng.normal(0, 0.1, (channels, 1, 1)).astype(np.float32))
        return self.op("Add", [self.op("Mul", [x, scale]), shift])

    def shuffle(self, x, channels, groups, size) -> str:
        """ShuffleNet's channel shuffle as exported: Reshape -> Transpose -> Reshape."""
        y = self.op("Reshape", [x, self.const(np.array([0, groups, channels // groups, size, size], np.int64))])
        y = self.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return self.op("Reshape", [y, self.const(np.array([0, channels, size, size], np.int64))])

    def model(self, inputs: dict, outputs: list):
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


# ---------------------------------------------------------------------------------------------- odd counts

def odd_channel_net(c_in=3, a=17, b=13, c=68, d=136, e=24, f=1000, size=11):
    """Ungrouped convolutions of odd and prime widths: a 3x3 stem, a dilated 3x3 with a residual add, a 1x1 whose
    output is concatenated with its input, a strided 3x3, 1x1s widening and narrowing, a 1000-class 1x1 head read
    by a global pool; two outputs."""
    n = Net(1)
    x = n.op("Relu", [n.conv("x", c_in, a, 3)])
    y = n.op("Relu", [n.op("Add", [x, n.conv(x, a, a, 3, dilation=2)])])
    cat = n.op("Concat", [y, n.op("Relu", [n.conv(y, a, b)])], axis=1)
    z = n.op("Relu", [n.affine(n.conv(cat, a + b, c, 3, stride=2, bias=False), c)])
    z = n.op("Relu", [n.conv(n.op("Relu", [n.conv(z, c, d)]), d, e)])
    head = n.op("GlobalAveragePool", [n.conv(z, e, f)])
    return n.model({"x": (1, c_in, size, size)}, [z, head])


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("widths", [dict(), dict(c_in=5, a=7, b=11, c=31, d=37, e=19, f=29)], ids=["suite", "primes"])
def test_odd_channel_counts(widths, layout):
    three_way_random(odd_channel_net(**widths), layout=layout)


# ---------------------------------------------------------------------------------------------- grouped

def shuffle_stack(groups=4, widths=(272, 544), mid_ratio=4, size=16, stem=24):
    """A ShuffleNet v1 stack as PyTorch exports it (BN folded to a per-channel affine) on a size x size image: a
    3x3/2 stem, then per width a stride-2 unit (avg-pool shortcut concatenated with the branch) and a stride-1 unit
    (residual add). A unit: grouped 1x1 (ungrouped on the stem's output) + affine + relu, channel shuffle,
    depthwise 3x3 + affine, grouped 1x1 + affine. With 4 groups and widths 272, 544: 17 and 34 channels per group
    in the bottlenecks, 62 and 68 per group in the branches. Outputs: the global pool and the last unit's value."""
    n = Net(2)
    x = n.op("Relu", [n.affine(n.conv("x", 3, stem, 3, stride=2, bias=False), stem)])
    cin, spatial = stem, (size - 1) // 2 + 1
    for width in widths:
        for stride in (2, 1):
            out = width - cin if stride == 2 else width
            mid = width // mid_ratio
            mid -= mid % groups
            h = n.op("Relu", [n.affine(n.conv(x, cin, mid, group=1 if cin == stem else groups, bias=False), mid)])
            h = n.shuffle(h, mid, groups, spatial)
            h = n.affine(n.conv(h, mid, mid, 3, stride=stride, group=mid, bias=False), mid)
            h = n.affine(n.conv(h, mid, out, group=groups, bias=False), out)
            if stride == 2:
                pool = n.op("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
                x = n.op("Relu", [n.op("Concat", [pool, h], axis=1)])
            else:
                x = n.op("Relu", [n.op("Add", [x, h])])
            cin, spatial = width, (spatial - 1) // stride + 1
    return n.model({"x": (1, 3, size, size)}, [n.op("GlobalAveragePool", [x]), x])


def grouped_window_net(groups=4, per_group=17, size=9):
    """Grouped 3x3 convolutions with `per_group` channels per group: strided, dilated, a residual add between
    two of them and a concatenation of two grouped outputs read by a third grouped convolution."""
    n = Net(3)
    c = groups * per_group
    x = n.op("Relu", [n.conv("x", 8, c, 3)])
    a = n.conv(x, c, c, 3, group=groups)
    b = n.op("Relu", [n.op("Add", [x, n.conv(a, c, c, 3, dilation=2, group=groups)])])
    s = n.conv(b, c, c, 3, stride=2, group=groups)
    t = n.conv(n.op("MaxPool", [b], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4), c, c, 1, group=groups)
    cat = n.op("Concat", [s, t], axis=1)
    return n.model({"x": (1, 8, size, size)}, [n.conv(cat, 2 * c, 2 * c, 3, stride=2, dilation=2, group=groups)])


STACKS = {"g4": dict(groups=4), "g8": dict(groups=8, widths=(384, 768)), "g3": dict(groups=3, widths=(240, 480)),
          "g8_5": dict(groups=8, widths=(176, 352), mid_ratio=4)}  # g8_5: 5 channels per group in the bottleneck


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("stack", STACKS)
def test_shuffle_stacks(stack, layout):
    three_way_random(shuffle_stack(**STACKS[stack]), layout=layout)


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("per_group", [17, 34, 5])
def test_grouped_windows(per_group, layout):
    three_way_random(grouped_window_net(per_group=per_group), layout=layout)


def fused(model):
    return run_pipeline(from_onnx(model), PassContext(vector_width=16))


@pytest.mark.parametrize("stack", ["g4", "g8"])
def test_shuffle_stack_keeps_one_blocked_layout(stack):
    """No layout_transform but the input's and the outputs' (the global pool's result and the stack's output go
    back to NCHW, from one kernel), every convolution, shuffle and concatenation in blocks of 8: the bottleneck's
    17 (g4) or 12 (g8) channels per group padded to 24 / 16, no block of 1 or 2 channels."""
    summary = summarize(fused(shuffle_stack(**STACKS[stack])))
    transforms = summary["layout_transforms"]
    assert [t["src"] for t in transforms][:1] == ["NCHW"] and len(transforms) <= 3
    assert all(t["reads"].startswith(("input", "nn.global_avg_pool2d", "nn.relu")) for t in transforms)
    blocks = {k["output_shape"][-1] for k in summary["kernels"]
              if len(k["output_shape"]) == 5 and k["ops"][0] != "layout_transform"}
    assert blocks == {8}
    ops = summary["ops"]
    assert ops["nn.channel_shuffle"] == 4 and ops["nn.concat_blocked"] == 2
    assert not {"nn.conv2d", "nn.pad_channels", "nn.unpad_channels", "reshape", "transpose"} & set(ops)


def test_channel_gathers_vectorize_their_lanes():
    """A blocked shuffle or concatenation reads each lane's channel through division and remainder (the groups'
    padding): its default schedule still vectorizes the lanes (each loaded on its own), so that the index
    arithmetic runs once per vector; ShuffleNet v1's shuffle over 56x56 went from 405 to 51 us. Their results:
    test_shuffle_stacks."""
    from compiler.default_schedule import default_schedule
    from compiler.task import extract_tasks
    tasks = [t for t in extract_tasks(fused(shuffle_stack(**STACKS["g4"])))
             if any(name in t.name for name in ("channel_shuffle", "concat_blocked"))]
    assert len(tasks) >= 2
    for task in tasks:
        state = default_schedule(task.initial_state()).apply(task.initial_state())
        gathers = [st for st in state.stages if st.op.name in ("channel_shuffle", "concat_blocked")]
        assert gathers and all(st.leaves[-1].annotation == "vectorize" for st in gathers if st.loc.is_root), \
            task.name


def test_channel_maps_of_a_shuffle_stack():
    """The values between ShuffleNet g4's grouped convolutions: 68 = 4 x 17 padded to 4 x 24, 136 = 4 x 34 to
    4 x 40, 248 = 4 x 62 to 4 x 64, the residual 272 = 4 x 68 to 4 x 72, 544 = 4 x 136 unpadded; all in blocks of 8
    once the network takes one block (network_block); the stem's 24 channels have no map (whole blocks of 8)."""
    mod = from_onnx(shuffle_stack(groups=4))
    maps = set(channel_maps(mod, 16, 16).values())
    assert network_block(channel_maps(mod, 16, 16), 16, 16) == 8
    assert maps >= {ChannelMap(4, 17, 24, 8), ChannelMap(4, 34, 40, 8), ChannelMap(4, 68, 72, 8)}
    narrowed = set(channel_maps(mod, 8, 16).values())
    assert narrowed == {ChannelMap(4, 17, 24, 8), ChannelMap(4, 34, 40, 8), ChannelMap(4, 62, 64, 8),
                        ChannelMap(4, 68, 72, 8), ChannelMap(4, 136, 136, 8),
                        ChannelMap(1, 68, 72, 8)}  # the ungrouped first 1x1's output: padded at its end


@pytest.mark.parametrize("channels,groups,expected", [
    (68, 4, (17, 24, 8)),  # 17 per group: padded to 3 blocks of 8 (blocks of 16 would pad to 32)
    (136, 4, (34, 40, 8)),
    (272, 4, (68, 72, 8)),  # 68: 9 blocks of 8 instead of 17 of 4
    (240, 3, (80, 80, 16)),  # a whole number of vectors: unpadded
    (544, 4, (136, 136, 8)),
    (60, 3, (20, 24, 8)),  # 20: 3 blocks of 8 instead of 5 of 4
    (128, 32, (4, 4, 4)),  # ResNeXt's 4 per group: one block of 4 either way, kept unpadded
    (40, 8, (5, 8, 8)),
    (96, 8, (12, 16, 16)),  # 12: padded to one vector of 16 (as few channels as 2 blocks of 8)
])
def test_group_map(channels, groups, expected):
    assert group_map(channels, groups, 16, 16) == ChannelMap(groups, *expected)


# ---------------------------------------------------------------------------------------------- NaN and Inf

def test_padded_channels_keep_nan_and_inf_where_onnxruntime_has_them():
    """A NaN and an Inf in the input of a ShuffleNet g4 stack: the padded channels (0 x Inf would be NaN there)
    must not spread them to outputs that onnxruntime keeps finite, nor turn an Inf into a NaN; zero weights never
    read a non-finite padding (nn.zero_channel_padding). Checked per element of the stack's spatial output: NaN,
    +Inf, -Inf and finite where onnxruntime has them, finite values close."""
    model = shuffle_stack(groups=4, size=64)
    x = np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32)
    x[0, 1, 3, 5] = np.nan
    x[0, 2, 50, 40] = np.inf
    x[0, 0, 60, 4] = -np.inf
    ref = session(model).run(None, {"x": x})[1]
    ours = compile_model(model).run(None, {"x": x})[1]
    assert np.isnan(ref).any() and np.isfinite(ref).mean() > 0.25  # the test means something
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(ours), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-4, atol=1e-4 * np.abs(ref[finite]).max())


def test_a_padded_channel_never_holds_zero_times_inf():
    """An Inf pixel reaches a grouped convolution whose weights are all negative: its real outputs are -Inf and
    the relu after it makes them 0, so onnxruntime's next grouped convolution sees only finite values there. Its
    padded outputs computed 0 x Inf = NaN, which the next convolution's zero weights would spread to every output
    of that pixel (0 x NaN = NaN): nn.zero_channel_padding keeps them 0."""
    n = Net(5)
    h = n.op("Conv", ["x", n.const(np.abs(n.rng.standard_normal((68, 8, 1, 1))).astype(np.float32))])
    w = -np.abs(n.rng.standard_normal((68, 17, 1, 1))).astype(np.float32)
    z = n.op("Relu", [n.op("Conv", [h, n.const(w)], group=4)])
    y = n.conv(z, 68, 68, 3, group=4)
    model = n.model({"x": (1, 8, 6, 6)}, [y])
    x = np.abs(np.random.default_rng(8).standard_normal((1, 8, 6, 6))).astype(np.float32)
    x[0, 0, 2, 3] = np.inf
    ref, = session(model).run(None, {"x": x})
    assert np.isfinite(ref).all()
    ours, = compile_model(model).run(None, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("channels,expected", [
    (24, (32, 16)),  # narrow: whole vectors when that wastes at most a third (MobileNetV2)
    (20, (24, 8)),  # else whole half vectors
    (17, (24, 8)), (13, (16, 16)), (5, (8, 8)), (3, (8, 8)),  # primes: blocks of 1 otherwise
    (68, (80, 16)), (1000, (1024, 16)), (200, (208, 16)), (136, (144, 16)),  # wide: pairs, else vectors
    (48, None), (96, None), (2048, None),  # whole vectors already
])
def test_plain_map(channels, expected):
    m = plain_map(channels, 16, 16)
    assert (m if m is None else (m.padded, m.block)) == expected


def test_odd_channel_net_keeps_one_blocked_layout():
    """Every value of the odd-channel network in whole blocks (no block of 1 for 17 or 13 channels), no
    layout_transform but the input's and the two outputs'."""
    summary = summarize(fused(odd_channel_net()))
    assert len(summary["layout_transforms"]) == 3
    blocks = {k["output_shape"][-1] for k in summary["kernels"] if k["ops"][0] == "nn.conv2d_nchwc"}
    assert blocks <= {8, 16}


def concat_of_padded_halves(c_in=16, half=24, size=9):
    """Two convolutions of 24 outputs (each padded to 32) concatenated into 48 (3 blocks of 16), then a 3x3 over
    the 48: the shape of PP-OCRv6's detector stem."""
    n = Net(3)
    x = n.op("Relu", [n.conv("x", c_in, c_in, 3)])
    cat = n.op("Concat", [n.op("Relu", [n.conv(x, c_in, half)]), n.op("Relu", [n.conv(x, c_in, half, 3)])], axis=1)
    return n.model({"x": (1, c_in, size, size)}, [n.conv(cat, 2 * half, 16, 3)])


def test_a_concat_of_padded_parts_keeps_their_padding():
    """Its value is 2 groups of 24 channels padded to 32 (passes/channel_maps.py _concat_of_padded_parts): the
    concatenation copies whole blocks, no lane read through a select on its channel."""
    model = concat_of_padded_halves()
    mod = from_onnx(model)
    maps = channel_maps(mod, 16, 16)
    concat = next(n for n in post_order(mod.main.body) if getattr(n, "op", None) == "concatenate")
    assert maps[id(concat)] == ChannelMap(2, 24, 32, 16)
    three_way_random(model)


def fpn_neck(width=24, size=16):
    """A detector's neck: three scales of `width` channels (padded to 32), each coarser one upsampled (Resize,
    nearest) and added to the finer, a squeeze-and-excitation vector (1, C, 1, 1) scaling the finest, the three
    concatenated at the finest scale, then a 3x3: the shape of PP-OCRv6's detector."""
    n = Net(5)

    def up(v, k):
        return n.op("Resize", [v, "", n.const(np.array([1, 1, k, k], np.float32))], mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    a = n.op("Relu", [n.conv("x", 8, width, 3)])
    b = n.op("Relu", [n.conv(a, width, width, 3, stride=2)])
    c = n.op("Relu", [n.conv(b, width, width, 3, stride=2)])
    d = n.op("Add", [b, up(c, 2)])
    e = n.op("Add", [a, up(d, 2)])
    se = n.op("Sigmoid", [n.conv(n.op("GlobalAveragePool", [e]), width, width)])
    cat = n.op("Concat", [n.op("Mul", [e, se]), up(d, 2), up(c, 4)], axis=1)
    return n.model({"x": (1, 8, size, size)}, [n.conv(cat, 3 * width, 16, 3)])


def test_an_fpn_neck_stays_blocked():
    """Resize of the spatial axes, a per-channel vector times a map and the concatenation of the upsampled scales
    run blocked (passes/propagate.py _resize_blocked, _spatial_broadcast): no layout_transform but the input's and
    the output's, the concatenation copies whole blocks of the parts' padding (2 x 24 -> 3 x 32)."""
    model = fpn_neck()
    summary = summarize(fused(model))
    assert [t["reads"].split()[0] for t in summary["layout_transforms"]][:1] == ["input"]
    assert len(summary["layout_transforms"]) == 2
    assert summary["ops"]["nn.concat_blocked"] == 1 and "concatenate" not in summary["ops"]
    three_way_random(model)
    three_way_random(model, layout="NCHW")


@pytest.mark.parametrize("op, attrs, channels, size", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 247, 33),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 170, 40),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, 256, 32),
], ids=["max-3x3s2-pad", "avg-3x3s2-pad", "max-2x2s2"])
def test_a_strided_pool_of_a_graph_input_stays_nchw(op, attrs, channels, size):
    """A pool of a graph input of 1 MiB or more with stride 2 along its rows runs in NCHW (channel_maps.
    is_window_pool), no layout transform in or out: stride-2 rows are two vector loads and a shuffle, padding
    masked lanes. (A smaller input is blocked: test_models and the conformance cases run that path.)"""
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, channels, size, size])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    summary = summarize(fused(model))
    assert not summary["layout_transforms"], summary["layout_transforms"]
    three_way_random(model)

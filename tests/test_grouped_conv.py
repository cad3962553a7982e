"""Grouped and depthwise convolutions, channel shuffle and channel concatenation in the blocked layout.

Numerics: every conv variant compiled in both layouts against onnxruntime and the numpy interpreter; the blocked
ops' computes against their references. Structure: alter_layout gives every convolution a blocked form, and the
mobile networks keep no layout_transform between their convolutions. End to end: every CNN of the model suite
(small configurations) matches onnxruntime within 1e-4."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import compile_model
from compiler.default_schedule import default_schedule
from compiler.passes import PassContext, run_pipeline
from compiler.passes.channel_maps import MIN_GROUP_REDUCTION_OF_AN_INPUT
from compiler.passes.layout import MIN_OUTPUT_BLOCK, group_block
from compiler.schedule import Annotate
from compiler.summary import summarize
from compiler.task import extract_tasks
from frontends import from_onnx
from harness import assert_close, make_model, three_way_random
from relayish import Constant, Function, IRModule, TensorType, Var, call, get_op, te
from relayish.interp import evaluate
from relayish.expr import post_order
from te_eval import evaluate_te
from test_models import CNNS, feeds, session, small_model

# (input shape, output channels, group, kernel, strides, pads, dilations)
CONVS = [
    ((1, 32, 9, 9), 32, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # depthwise, as in MobileNet
    ((1, 24, 11, 10), 24, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # depthwise /2, 24 channels (block 8)
    ((1, 20, 9, 9), 20, 20, (5, 5), (1, 1), (2, 1, 2, 3), (1, 1)),  # depthwise 5x5, asymmetric pads, block 4
    ((1, 48, 12, 12), 48, 48, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # depthwise dilated
    ((1, 16, 8, 8), 32, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # channel multiplier 2 (grouped, 1 in)
    ((1, 64, 7, 7), 64, 2, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # groups 2
    ((1, 60, 8, 8), 240, 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # ShuffleNet g=3: 20 per group
    ((1, 240, 6, 6), 60, 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 9, 10, 10), 12, 3, (3, 3), (3, 3), (0, 1, 2, 0), (1, 1)),  # 3 per group, stride 3
    ((1, 32, 9, 9), 64, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # groups 4
    ((1, 64, 9, 9), 64, 8, (3, 3), (2, 2), (1, 1, 1, 1), (2, 2)),  # groups 8, stride 2, dilated
    ((1, 64, 6, 6), 64, 32, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # groups 32
    ((1, 267, 20, 21), 6, 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 89 in, 2 out per group: NCHW
    ((1, 12, 9, 9), 3, 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # 1 out per group, strided: NCHW
    ((1, 8, 20, 21), 104, 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 1 in, 13 out per group: NCHW
    ((1, 129, 9, 9), 129, 129, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # depthwise, 129 = 3 x 43: padded to 136
    ((1, 15, 11, 11), 15, 15, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # depthwise, 15: padded to 16
    ((1, 32, 13, 13), 304, 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 2 in, 19 out per group: NCHW
    ((1, 128, 11, 13), 192, 32, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 4 in, 6 out per group, the input: NCHW
    ((1, 515, 6, 5), 2, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 2 outputs of the graph's input: NCHW
    ((1, 96, 15, 15), 64, 2, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # AlexNet's grouped 5x5
    ((1, 3, 23, 23), 16, 1, (11, 11), (4, 4), (2, 2, 2, 2), (1, 1)),  # AlexNet's first conv
    ((1, 3, 16, 16), 8, 1, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
]


def conv_id(case):
    shape, cout, group, kernel, strides, pads, dilations = case
    return f"c{shape[1]}o{cout}g{group}k{kernel[0]}x{kernel[1]}s{strides[0]}p{''.join(map(str, pads))}d{dilations[0]}"


def conv_model(case, activation=None):
    """Conv + bias (+ activation) on a random input: one graph for both layouts."""
    shape, cout, group, kernel, strides, pads, dilations = case
    rng = np.random.default_rng(sum(shape) + cout + group)
    consts = {"w": rng.standard_normal((cout, shape[1] // group) + kernel).astype(np.float32),
              "b": rng.standard_normal(cout).astype(np.float32)}
    return make_model("Conv", {"x": shape}, dict(kernel_shape=list(kernel), strides=list(strides), pads=list(pads),
                                                 dilations=list(dilations), group=group), 17, consts)


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("case", CONVS, ids=conv_id)
def test_conv_variant(case, layout):
    three_way_random(conv_model(case), layout=layout)


def blocked_ops(onnx_model) -> dict:
    fused = run_pipeline(from_onnx(onnx_model), PassContext())
    return summarize(fused)["ops"]


@pytest.mark.parametrize("case", CONVS, ids=conv_id)
def test_every_conv_is_blocked(case):
    """No convolution stays NCHW: depthwise -> depthwise_conv2d_nchwc, any other group count -> conv2d_nchwc;
    except one with 1 or 2 output channels per group (blocks of 1 or 2 lanes) or 1 to 4 input channels per group
    (1x1, reading the graph's input: a few FMAs per output vector), which runs its vectors along the width in NCHW
    (layout.MIN_OUTPUT_BLOCK: 4-6x faster on maps of 7x7 to 56x56; channel_maps.MIN_GROUP_REDUCTION_OF_AN_INPUT)."""
    ops = blocked_ops(conv_model(case))
    shape, cout, group, kernel = case[:4]
    depthwise = group == shape[1] == cout
    few_products = group > 1 and shape[1] // group * kernel[0] * kernel[1] < MIN_GROUP_REDUCTION_OF_AN_INPUT
    if not depthwise and (cout // group < MIN_OUTPUT_BLOCK or few_products):
        assert ops.get("nn.conv2d") == 1 and "nn.conv2d_nchwc" not in ops
        return
    assert "nn.conv2d" not in ops
    assert ops.get("nn.depthwise_conv2d_nchwc" if depthwise else "nn.conv2d_nchwc") == 1


def test_group_block_divides_the_group():
    assert group_block(80, 240, 16) == 16 and group_block(20, 60, 16) == 4 and group_block(3, 9, 16) == 3
    assert group_block(1, 16, 16) == 1 and group_block(48, 96, 16) == 16 and group_block(72, 216, 16) == 8


# ---------------------------------------------------------------------------------------------- the ops


def _check_compute(op, shapes, **attrs):
    """The op's compute (te evaluator) against its reference (interpreter)."""
    params = [Var(f"x{k}", TensorType(s)) for k, s in enumerate(shapes)]
    node = call(op, *params, **attrs)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ref, = evaluate(Function(params, node), arrays)
    holders = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    got, = evaluate_te(get_op(op).compute(holders, node.attrs, node.type), dict(zip(holders, arrays)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    return ref, arrays


def to_nchw(x):
    return x.transpose(0, 1, 4, 2, 3).reshape(x.shape[0], -1, *x.shape[2:4])


def test_grouped_conv2d_nchwc_matches_the_nchw_reference():
    ref, (x, w) = _check_compute("nn.conv2d_nchwc", [(1, 6, 5, 5, 4), (6, 2, 3, 3, 4, 4)], groups=3,
                                 padding=(1, 0, 1, 2), strides=(1, 1), dilation=(1, 1))
    w_oihw = w.transpose(0, 5, 1, 4, 2, 3).reshape(24, 8, 3, 3)
    nchw, = evaluate(call("nn.conv2d", Var("x", TensorType((1, 24, 5, 5))), Var("w", TensorType((24, 8, 3, 3))),
                          groups=3, padding=(1, 0, 1, 2)), [to_nchw(x), w_oihw])
    np.testing.assert_allclose(to_nchw(ref), nchw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_padding_is_buffered_at_stride_1_and_inline_when_strided(stride):
    """A stride-1 window reads each padded pixel 9 times: its padding is its own stage (a buffer, no select in
    the inner loop); a strided one reads it inline (test_conv_variant checks both three ways)."""
    from compiler.default_schedule import keeps_buffer
    x = Var("x", TensorType((1, 32, 9, 9)))
    w = np.random.default_rng(3).standard_normal((32, 1, 3, 3)).astype(np.float32)
    body = call("nn.relu", call("nn.conv2d", x, Constant(w), padding=(1, 1, 1, 1), groups=32, strides=(stride,) * 2))
    fused = run_pipeline(IRModule(Function([x], body)), PassContext(vector_width=8))
    task, = [t for t in extract_tasks(fused) if t.ops[0] == "nn.depthwise_conv2d_nchwc"]
    state = task.initial_state()
    pad, = [st for st in state.stages if st.op.tag == "pad"]
    assert keeps_buffer(state, pad) == (stride == 1)


def test_depthwise_conv2d_nchwc_matches_the_nchw_reference():
    ref, (x, w) = _check_compute("nn.depthwise_conv2d_nchwc", [(1, 3, 7, 6, 8), (3, 1, 3, 3, 8)],
                                 strides=(2, 1), padding=(1, 1, 0, 2), dilation=(1, 2))
    w_oihw = w.transpose(0, 4, 1, 2, 3).reshape(24, 1, 3, 3)
    nchw, = evaluate(call("nn.conv2d", Var("x", TensorType((1, 24, 7, 6))), Var("w", TensorType((24, 1, 3, 3))),
                          groups=24, strides=(2, 1), padding=(1, 1, 0, 2), dilation=(1, 2)), [to_nchw(x), w_oihw])
    np.testing.assert_allclose(to_nchw(ref), nchw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout,shape", [("NCHW", (2, 12, 3, 4)), ("NCHW4c", (1, 3, 3, 4, 4)),
                                          ("NCHW3c", (1, 4, 2, 2, 3))])
def test_channel_shuffle_is_reshape_transpose_reshape(layout, shape):
    ref, (x,) = _check_compute("nn.channel_shuffle", [shape], groups=3, layout=layout)
    x4, r4 = (x, ref) if x.ndim == 4 else (to_nchw(x), to_nchw(ref))
    n, c, h, w = x4.shape
    np.testing.assert_array_equal(r4, x4.reshape(n, 3, c // 3, h, w).transpose(0, 2, 1, 3, 4).reshape(x4.shape))


@pytest.mark.parametrize("shapes,block", [([(1, 3, 2, 2, 8), (1, 27, 2, 2, 8)], 16),  # ShuffleNet: 24 + 216
                                          ([(1, 2, 3, 3, 16), (1, 1, 3, 3, 16)], 16),  # aligned
                                          ([(1, 5, 2, 3, 3), (1, 2, 2, 3, 4), (1, 1, 2, 3, 8)], 31)])
def test_concat_blocked_is_a_channel_concat(shapes, block):
    ref, xs = _check_compute("nn.concat_blocked", shapes, block=block)
    np.testing.assert_array_equal(to_nchw(ref), np.concatenate([to_nchw(x) for x in xs], axis=1))


# ---------------------------------------------------------------------------------------------- networks


def shuffle_unit(channels=48, groups=3, size=6):
    """x = a 1x1 stem conv; gconv 1x1 + relu -> channel shuffle (reshape, transpose, reshape) -> depthwise 3x3 ->
    gconv 1x1, + x, relu; then concatenated with a grouped conv of its average pool (as ShuffleNet's units)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    mid = channels // 4
    inits = {"w0": (channels, channels, 1, 1), "w1": (mid, channels // groups, 1, 1), "w2": (mid, 1, 3, 3), "w3": (channels, mid // groups, 1, 1)}
    inits = {k: rng.standard_normal(s).astype(np.float32) for k, s in inits.items()}
    inits["s5"] = np.array([1, groups, mid // groups, size, size], np.int64)
    inits["s4"] = np.array([1, mid, size, size], np.int64)
    node = helper.make_node
    nodes = [node("Conv", ["x0", "w0"], ["x"]), node("Conv", ["x", "w1"], ["a"], group=groups), node("Relu", ["a"], ["b"]),
             node("Reshape", ["b", "s5"], ["c"]), node("Transpose", ["c"], ["d"], perm=[0, 2, 1, 3, 4]),
             node("Reshape", ["d", "s4"], ["e"]), node("Conv", ["e", "w2"], ["f"], group=mid, pads=[1, 1, 1, 1]),
             node("Conv", ["f", "w3"], ["g"], group=groups), node("Add", ["x", "g"], ["h"]),
             node("Relu", ["h"], ["i"]), node("AveragePool", ["i"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Conv", ["p", "w1"], ["q"], group=groups), node("Concat", ["p", "q"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "unit", [helper.make_tensor_value_info("x0", TensorProto.FLOAT,
                                                                            (1, channels, size, size))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2 * channels, size, size))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def padded_head(channels=200, size=7):
    """Two convolutions of `channels` outputs (not a multiple of 16, so padded to whole 16-channel blocks), each
    + bias, the first + relu, added, divided by a per-channel constant, max-pooled; read by a third convolution
    (which must see the cropped channels only) and by a global average pool (SqueezeNet's classifier)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    inits = {"w0": (channels, 32, 1, 1), "b0": (channels,), "w1": (channels, 32, 3, 3), "b1": (channels,),
             "d": (channels, 1, 1), "w2": (16, channels, 1, 1)}
    inits = {k: rng.standard_normal(s).astype(np.float32) for k, s in inits.items()}
    node = helper.make_node
    nodes = [node("Conv", ["x", "w0", "b0"], ["a"]), node("Relu", ["a"], ["r"]),
             node("Conv", ["x", "w1", "b1"], ["b"], pads=[1, 1, 1, 1]), node("Add", ["r", "b"], ["s"]),
             node("Div", ["s", "d"], ["t"]), node("MaxPool", ["t"], ["p"], kernel_shape=[2, 2]),
             node("Conv", ["p", "w2"], ["y"]), node("GlobalAveragePool", ["p"], ["g"])]
    out = size - 1
    graph = helper.make_graph(nodes, "padded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, size, size))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 16, out, out)),
                               helper.make_tensor_value_info("g", TensorProto.FLOAT, (1, channels, 1, 1))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_padded_convolutions(layout):
    three_way_random(padded_head(), layout=layout)


def test_wide_convolutions_are_padded_to_whole_vectors():
    """200 output channels take 13 blocks of 16 (208 channels) instead of 25 blocks of 8; the relu, residual add,
    per-channel division and pool run on the padded blocks, the third convolution reads them with zero weights for
    the padding, and the padding is dropped where the value goes back to NCHW, after the global pool. A narrow
    convolution (24 channels) keeps its 8-channel blocks."""
    fused = run_pipeline(from_onnx(padded_head()), PassContext(winograd=False))
    convs = [k for k in extract_tasks(fused) if k.ops[0] == "nn.conv2d_nchwc"]
    assert sorted(k.outputs[0].shape[1:] for k in convs)[-2:] == [(13, 7, 7, 16), (13, 7, 7, 16)]
    ops = summarize(fused)["ops"]
    assert ops["nn.unpad_channels"] == 1 and "nn.conv2d" not in ops and "divide" in ops and "strided_slice" not in ops
    narrow = run_pipeline(from_onnx(padded_head(channels=24)), PassContext(winograd=False))
    assert "strided_slice" not in summarize(narrow)["ops"]


def test_an_odd_count_of_wide_blocks_is_padded_to_pairs():
    """136 output channels on 8-lane vectors are 17 blocks: padded to 18 (144 channels, 6% more work) so that the
    register tile can pair output blocks; the model still matches onnxruntime on the host's own vectors."""
    fused = run_pipeline(from_onnx(padded_head(channels=136)), PassContext(winograd=False, vector_width=8))
    convs = [k for k in extract_tasks(fused) if k.ops[0] == "nn.conv2d_nchwc"]
    assert sorted(k.outputs[0].shape[1:] for k in convs)[-2:] == [(18, 7, 7, 8), (18, 7, 7, 8)]
    three_way_random(padded_head(channels=136))


def narrow_bottleneck(size=9):
    """MobileNetV2's narrow stage: a 1x1 projection to 24 channels (+ bias), an expansion 24 -> 96 (+ bias,
    relu6), a projection back to 24, the residual add of the two 24-channel values, then a 3x3 stride-2
    convolution reading the sum. Only convolutions read the 24-channel values."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    shapes = {"w0": (24, 32, 1, 1), "b0": (24,), "w1": (96, 24, 1, 1), "b1": (96,), "w2": (24, 96, 1, 1),
              "b2": (24,), "w3": (32, 24, 3, 3), "lo": (), "hi": ()}
    inits = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}
    inits["lo"], inits["hi"] = np.float32(0), np.float32(6)
    node = helper.make_node
    nodes = [node("Conv", ["x", "w0", "b0"], ["a"]), node("Conv", ["a", "w1", "b1"], ["c"]),
             node("Clip", ["c", "lo", "hi"], ["d"]), node("Conv", ["d", "w2", "b2"], ["e"]),
             node("Add", ["a", "e"], ["s"]),
             node("Conv", ["s", "w3"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    out = (size + 1) // 2
    graph = helper.make_graph(nodes, "narrow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, size, size))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 32, out, out))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_narrow_padded_convolutions(layout):
    three_way_random(narrow_bottleneck(), layout=layout)


def test_narrow_convolutions_read_by_convolutions_are_padded():
    """The 24-channel values take 2 blocks of 16 (32 channels, the last 8 zero-weight padding) instead of 3 blocks
    of 8; the convolutions reading them take zero weights for the padding, so no crop and no transform is left
    between the convolutions."""
    fused = run_pipeline(from_onnx(narrow_bottleneck()), PassContext())
    convs = sorted(k.outputs[0].shape[1:] for k in extract_tasks(fused) if k.ops[0] == "nn.conv2d_nchwc")
    assert convs == [(2, 5, 5, 16), (2, 9, 9, 16), (2, 9, 9, 16), (6, 9, 9, 16)]
    ops = summarize(fused)["ops"]
    assert "strided_slice" not in ops and ops["layout_transform"] == 2  # the input in, the output out


def sliced_conv_with_inf():
    """A convolution of 32 channels whose last 8 overflow to Inf, a Slice keeping the first 24, and a
    convolution reading them: the slice drops real channels (not padding), which must not be read, even with
    zero weights (0 x Inf is NaN)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((32, 16, 1, 1)).astype(np.float32)
    w0[24:] = 3e38
    inits = {"w0": w0, "w1": rng.standard_normal((16, 24, 1, 1)).astype(np.float32),
             "starts": np.array([0], np.int64), "ends": np.array([24], np.int64), "axes": np.array([1], np.int64)}
    node = helper.make_node
    nodes = [node("Conv", ["x", "w0"], ["a"]), node("Slice", ["a", "starts", "ends", "axes"], ["b"]),
             node("Conv", ["b", "w1"], ["y"])]
    graph = helper.make_graph(nodes, "sliced", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, 5, 5))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 16, 5, 5))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_slice_of_real_channels_is_not_read_as_padding():
    model = sliced_conv_with_inf()
    x = np.abs(np.random.default_rng(5).standard_normal((1, 16, 5, 5))).astype(np.float32) + 1
    ours, = compile_model(model).run(None, {"x": x})
    ref, = session(model).run(None, {"x": x})
    assert np.isfinite(ref).all() and np.isfinite(ours).all()
    assert_close(ours, ref, "sliced conv vs onnxruntime")


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_shuffle_unit(layout):
    three_way_random(shuffle_unit(), layout=layout)


def test_shuffle_unit_stays_blocked():
    ops = blocked_ops(shuffle_unit())
    assert ops["layout_transform"] == 2  # the input in, the output out
    assert ops["nn.channel_shuffle"] == 1 and ops["nn.concat_blocked"] == 1
    assert not {"reshape", "transpose", "concatenate", "nn.conv2d"} & set(ops)


@pytest.mark.parametrize("name", ["mobilenet_v2", "shufflenet_v1"])
def test_mobile_networks_have_no_transform_between_convolutions(name):
    """Every layout_transform of the compiled graph is the input's or the classifier's: none reads or feeds a
    convolution's block."""
    fused = run_pipeline(from_onnx(small_model(name)), PassContext())
    summary = summarize(fused)
    transforms = summary["layout_transforms"]
    blocked = transforms[1]["src"]  # NCHW16c, or NCHW8c where groups are padded (ShuffleNet: network_block)
    assert [(t["src"], t["reads"]) for t in transforms] == [("NCHW", "input %input"), (blocked, transforms[1]["reads"])]
    assert blocked == ("NCHW8c" if name == "shufflenet_v1" else "NCHW16c")
    assert transforms[1]["reads"].startswith("nn.global_avg_pool2d")
    kernels = [k["ops"] for k in summary["kernels"]]
    assert not any("nn.conv2d" in k for k in kernels)
    assert sum(k[0] == "nn.depthwise_conv2d_nchwc" for k in kernels) > 0


@pytest.mark.parametrize("name", CNNS)
def test_suite_cnn_matches_onnxruntime(name):
    model = small_model(name)
    inputs = feeds(model)
    ref = session(model).run(None, inputs)
    ours = compile_model(model).run(None, inputs)
    for a, b in zip(ours, ref):
        assert_close(a, b, name)


def test_default_schedule_of_a_depthwise_task():
    """Vectorized over the 16-lane channel block, a register tile of output columns, parallel over channel
    blocks x rows (x column tiles)."""
    x = Var("x", TensorType((1, 64, 14, 14)))
    w = np.ones((64, 1, 3, 3), np.float32)
    body = call("nn.relu", call("nn.conv2d", x, Constant(w), padding=(1, 1, 1, 1), groups=64))
    fused = run_pipeline(IRModule(Function([x], body)), PassContext())
    task, = [t for t in extract_tasks(fused) if t.ops[0] == "nn.depthwise_conv2d_nchwc"]
    annotations = {(s.stage, s.iter, s.annotation) for s in default_schedule(task.initial_state()).steps
                   if isinstance(s, Annotate)}
    out = task.outputs[0].op.name
    assert {(out, "m", "vectorize"), (out, "l.1", "unroll"), (out, "i@j@k@l.0", "parallel")} <= annotations


@pytest.mark.parametrize("channels, block", [(129, 8), (15, 16), (48, 16), (24, 16)])
def test_a_depthwise_convolution_of_odd_channels_runs_in_whole_vectors(channels, block):
    """A depthwise convolution's channels are padded at their end like those of the values ungrouped
    convolutions write (channel_maps.plain_map): 129 channels in blocks of 3 lanes ran at 6 GFLOP/s, as 136 in
    blocks of 8 at 125 (Zen 4)."""
    case = ((1, channels, 9, 9), channels, channels, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    blocked = run_pipeline(from_onnx(conv_model(case)), PassContext(), stop_after="propagate_layout")
    calls = [n for n in post_order(blocked.main.body) if getattr(n, "op", None) == "nn.depthwise_conv2d_nchwc"]
    assert calls and all(c.type.shape[-1] == block for c in calls)


def test_a_grouped_convolution_reads_a_graph_input_in_blocks_of_its_groups():
    """9 -> 384 channels in 3 groups: its input (a graph input, which nothing blocked writes) is read in blocks of
    3, as it is, not padded to 8 per group (2.7x the products; 800 -> 295 us over 43x43). A group of 9 channels
    is still padded (to 16: faster than blocks of 3 there)."""
    def input_layouts(c, o, g):
        case = ((1, c, 12, 12), o, g, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
        blocked = run_pipeline(from_onnx(conv_model(case)), PassContext(), stop_after="propagate_layout")
        conv, = [n for n in post_order(blocked.main.body) if getattr(n, "op", None) == "nn.conv2d_nchwc"]
        return conv.args[0].type.shape
    assert input_layouts(9, 384, 3) == (1, 3, 12, 12, 3)
    assert input_layouts(36, 68, 4)[1] * input_layouts(36, 68, 4)[4] == 64  # 4 groups of 9 padded to 16
    for c, o, g in ((9, 384, 3), (6, 90, 2)):
        three_way_random(conv_model(((1, c, 12, 12), o, g, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))))

"""Every op: its compute definition matches its numpy reference over a grid of shapes and attributes; the
references of the ONNX-defined ops match onnxruntime; bad inputs raise an OpError that names the problem."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

from relayish import OpError, TensorType, Var, call, get_op, list_ops, te
from relayish.interp import evaluate_one
from te_eval import evaluate_te

LEAD_OPS = {"nn.conv2d_nchwc", "layout_transform", "nn.dense_pack"}  # declared and tested by the lead
STEPPED_OPS = {"nn.recurrent_scan"}  # no compute: their kernel is one step (compiler/task.py scan_step)
# no compute: their kernels are loop IR written by hand (compiler/sequential.py)
HAND_WRITTEN_OPS = {"nonzero", "slice_to_count", "non_max_suppression", "unique_positions"}


def _inputs(shapes, seed, positive=()):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for k in positive:
        arrays[k] = np.abs(arrays[k]) + np.float32(0.5)
    return arrays


def check_op(op, shapes, attrs=None, positive=(), seed=0, rtol=1e-5):
    """Build the call (runs the shape rule), then compare ref (through the interpreter), compute (through the te
    evaluator) and the declared type. Returns the reference output."""
    attrs = attrs or {}
    params = [Var(f"x{k}", TensorType(s)) for k, s in enumerate(shapes)]
    node = call(op, *params, **attrs)
    arrays = _inputs(shapes, seed, positive)
    ref = evaluate_one(node, arrays)
    placeholders = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    out = get_op(op).compute(placeholders, node.attrs, node.type)
    got, = evaluate_te(out, dict(zip(placeholders, arrays)))
    assert got.shape == ref.shape == node.type.shape
    assert got.dtype == ref.dtype == np.dtype(node.type.dtype)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, float(np.abs(ref).max(initial=0))))
    return ref, arrays, node


def ort_run(op_type, arrays, opset=19, **attrs):
    """Run one ONNX node on onnxruntime (the truth for ONNX-defined semantics)."""
    import onnxruntime as ort
    names = [f"in{k}" for k in range(len(arrays))]
    node = helper.make_node(op_type, names, ["out"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(names, arrays)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ceil_mode shapes differ from ONNX shape inference; ORT warns, we know
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, arrays)))[0]


def naive_conv2d(x, w, strides, padding, dilation, groups):
    """Brute-force loops straight from the definition, an independent check of the reference."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for b, oc, y, xx, ic, ky, kx in itertools.product(range(n), range(o), range(oh), range(ow), range(cg),
                                                      range(kh), range(kw)):
        iy, ix = y * sh + ky * dh - pt, xx * sw + kx * dw - pl
        if 0 <= iy < h and 0 <= ix < wd:
            out[b, oc, y, xx] += x[b, oc // (o // groups) * cg + ic, iy, ix] * w[oc, ic, ky, kx]
    return out


# ---------------------------------------------------------------------------------------------- conv2d

CONV_GROUPS = [((1, 4, 7, 6), (6, 4, 3, 3), 1), ((2, 4, 6, 7), (6, 2, 3, 2), 2), ((1, 4, 6, 6), (4, 1, 3, 3), 4),
               ((1, 3, 5, 5), (6, 1, 3, 3), 3), ((1, 3, 5, 4), (2, 3, 1, 1), 1)]


@pytest.mark.parametrize("xs,ws,groups", CONV_GROUPS)
@pytest.mark.parametrize("strides", [(1, 1), (2, 1), (2, 2)])
@pytest.mark.parametrize("padding", [(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 2, 0)])
@pytest.mark.parametrize("dilation", [(1, 1), (2, 1)])
def test_conv2d(xs, ws, groups, strides, padding, dilation):
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    ref, (x, w), _ = check_op("nn.conv2d", [xs, ws], attrs)
    np.testing.assert_allclose(ref, naive_conv2d(x, w, **attrs), rtol=1e-5, atol=1e-5)


def test_conv2d_pad_stage_only_when_padded():
    x, w = te.placeholder((1, 2, 5, 5), name="x"), te.placeholder((3, 2, 3, 3), name="w")
    for padding, stages in [((0, 0, 0, 0), ["x", "w", "conv2d"]), ((1, 0, 0, 0), ["x", "pad", "w", "conv2d"])]:
        node = call("nn.conv2d", Var("x", TensorType(x.shape)), Var("w", TensorType(w.shape)), padding=padding)
        out = get_op("nn.conv2d").compute([x, w], node.attrs, node.type)
        assert [t.name for t in te.stage_dag([out])] == stages
        assert out.op.tag == "conv2d" and [a.name for a in out.op.reduce_axes] == ["rc", "ry", "rx"]


def test_conv2d_matches_onnxruntime():
    x, w = _inputs([(1, 4, 7, 6), (6, 2, 3, 3)], seed=1)
    attrs = dict(strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    ours = get_op("nn.conv2d").ref(x, w, **attrs)
    theirs = ort_run("Conv", [x, w], strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2], group=2)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)

# ---------------------------------------------------------------------------------------------- pooling


def _pool_cases():
    for k, s, p, d, ceil in itertools.product([(2, 2), (3, 3), (3, 2)], [(1, 1), (2, 2), (3, 2)],
                                              [(0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 0, 1)], [(1, 1), (2, 1)],
                                              [False, True]):
        if max(p[0], p[2]) < k[0] and max(p[1], p[3]) < k[1]:
            yield k, s, p, d, ceil


POOL_CASES = list(_pool_cases())


@pytest.mark.parametrize("pool_size,strides,padding,dilation,ceil_mode", POOL_CASES)
def test_max_pool2d(pool_size, strides, padding, dilation, ceil_mode):
    attrs = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    ref, (x,), _ = check_op("nn.max_pool2d", [(1, 2, 7, 8)], attrs)
    theirs = ort_run("MaxPool", [x], kernel_shape=list(pool_size), strides=list(strides), pads=list(padding),
                     dilations=list(dilation), ceil_mode=int(ceil_mode))
    np.testing.assert_array_equal(ref, theirs)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("pool_size,strides,padding,dilation,ceil_mode", POOL_CASES)
def test_avg_pool2d(pool_size, strides, padding, dilation, ceil_mode, count_include_pad):
    attrs = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                 count_include_pad=count_include_pad)
    ref, (x,), _ = check_op("nn.avg_pool2d", [(1, 2, 7, 8)], attrs)
    theirs = ort_run("AveragePool", [x], kernel_shape=list(pool_size), strides=list(strides), pads=list(padding),
                     dilations=list(dilation), ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))
    np.testing.assert_allclose(ref, theirs, rtol=1e-5, atol=1e-6)


def test_pool_ceil_mode_drops_window_starting_in_trailing_padding():
    # 4 + 1 + 1 - 2 = 4, ceil(4 / 3) + 1 = 3 windows, but the third would start at 6 >= 4 + 1: dropped
    node = call("nn.max_pool2d", Var("x", TensorType((1, 1, 4, 4))), pool_size=(2, 2), strides=(3, 3),
                padding=(1, 1, 1, 1), ceil_mode=True)
    assert node.type.shape == (1, 1, 2, 2)


def test_global_avg_pool2d():
    ref, (x,), _ = check_op("nn.global_avg_pool2d", [(2, 3, 5, 4)])
    np.testing.assert_allclose(ref, ort_run("GlobalAveragePool", [x]), rtol=1e-5, atol=1e-6)

# ---------------------------------------------------------------------------------------------- dense, matmul


def test_dense():
    ref, (x, w), node = check_op("nn.dense", [(3, 5), (4, 5)])
    np.testing.assert_allclose(ref, x @ w.T, rtol=1e-6)


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                                 ((2, 3, 4), (4, 5)), ((4,), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                 ((1, 3, 4), (2, 4, 5)), ((2, 3, 4), (4,))])
def test_matmul(a, b):
    ref, (x, y), _ = check_op("nn.matmul", [a, b])
    np.testing.assert_allclose(ref, np.matmul(x.astype(np.float64), y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("a,k,n,block", [((3, 4), 4, 8, 8), ((2, 3, 5), 5, 32, 16), ((2, 1, 3, 4), 4, 12, 4)])
def test_matmul_pack(a, k, n, block):
    """x @ W with W packed in column blocks as layout.py packs a constant weight."""
    from relayish.ops.matmul_pack import pack_weight
    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n)).astype(np.float32)
    ref, (x, wp), _ = check_op("nn.matmul_pack", [a, (n // block, k, block)])
    np.testing.assert_allclose(ref, np.matmul(x, wp.transpose(1, 0, 2).reshape(k, n)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pack_weight(w, block).transpose(1, 0, 2).reshape(k, n), w)

# ---------------------------------------------------------------------------------------------- softmax, lrn, bn


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((2, 3, 4), -1), ((2, 3, 4), 0), ((2, 3, 4), 1),
                                        ((2, 3, 32), -1), ((3, 24), 1)])  # the row form: 16 and 8 lanes
def test_softmax(shape, axis):
    ref, (x,), _ = check_op("nn.softmax", [shape], dict(axis=axis))
    np.testing.assert_allclose(ref, ort_run("Softmax", [x], axis=axis), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 32), -1)])
def test_log_softmax(shape, axis):
    ref, (x,), _ = check_op("nn.log_softmax", [shape], dict(axis=axis))
    np.testing.assert_allclose(ref, ort_run("LogSoftmax", [x], axis=axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn(size):
    attrs = dict(size=size, alpha=0.3, beta=0.75, bias=2.0)
    ref, (x,), _ = check_op("nn.lrn", [(2, 6, 3, 3)], attrs)
    # the ONNX spec: channels c - floor((size-1)/2) .. c + ceil((size-1)/2), clipped to the input
    c = x.shape[1]
    square_sum = np.stack([(x[:, max(0, k - (size - 1) // 2): min(c, k + size // 2 + 1)] ** 2).sum(axis=1)
                           for k in range(c)], axis=1)
    spec = x / (2.0 + 0.3 / size * square_sum) ** 0.75
    np.testing.assert_allclose(ref, spec, rtol=1e-5, atol=1e-6)
    if size % 2:  # onnxruntime only accepts odd sizes (and onnx.reference's LRN loops over the batch: wrong)
        np.testing.assert_allclose(ref, ort_run("LRN", [x], **attrs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 4), 1), ((3, 4), 1), ((2, 5, 3), -2), ((4,), 0)])
def test_batch_norm(shape, axis):
    c = shape[axis]
    ref, arrays, _ = check_op("nn.batch_norm", [shape, (c,), (c,), (c,), (c,)], dict(axis=axis, epsilon=1e-3),
                              positive=(4,))
    if axis == 1 and len(shape) == 4:
        theirs = ort_run("BatchNormalization", arrays, opset=15, epsilon=1e-3)
        np.testing.assert_allclose(ref, theirs, rtol=1e-5, atol=1e-5)

# ---------------------------------------------------------------------------------------------- elementwise


@pytest.mark.parametrize("op", ["nn.relu", "sigmoid", "tanh", "exp", "negative", "copy", "sqrt"])
def test_unary(op):
    check_op(op, [(2, 3, 4)], positive=(0,) if op == "sqrt" else ())


def test_unary_with_attrs():
    check_op("nn.leaky_relu", [(3, 4)], dict(alpha=0.2))
    check_op("clip", [(3, 4)], dict(a_min=-0.5, a_max=0.25))
    ref, arrays, _ = check_op("hard_sigmoid", [(3, 4)], dict(alpha=0.3, beta=0.4))
    np.testing.assert_allclose(ref, ort_run("HardSigmoid", arrays, alpha=0.3, beta=0.4), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op,attrs,onnx", [
    ("floor", {}, "Floor"), ("ceil", {}, "Ceil"), ("round", {}, "Round"), ("sign", {}, "Sign"),
    ("nn.elu", {"alpha": 0.5}, "Elu"), ("nn.selu", {"alpha": 1.5, "gamma": 1.1}, "Selu"),
    ("nn.celu", {"alpha": 2.0}, "Celu"), ("nn.softplus", {}, "Softplus"), ("nn.softsign", {}, "Softsign"),
    ("nn.hard_swish", {}, "HardSwish"), ("nn.mish", {}, "Mish"),
    ("nn.thresholded_relu", {"alpha": 0.3}, "ThresholdedRelu"),
    ("nn.shrink", {"lambd": 0.4, "bias": 0.1}, "Shrink"), ("sinh", {}, "Sinh"), ("cosh", {}, "Cosh"),
    ("asinh", {}, "Asinh")])
def test_unary_long_tail(op, attrs, onnx):
    ref, arrays, _ = check_op(op, [(3, 4, 5)], attrs, rtol=1e-5)
    np.testing.assert_allclose(ref, ort_run(onnx, arrays, opset=18, **attrs), rtol=1e-5, atol=1e-6)


def _te_unary(op, x):
    placeholder = te.placeholder(x.shape, name="x")
    node = call(op, Var("x", TensorType(x.shape)))
    got, = evaluate_te(get_op(op).compute([placeholder], node.attrs, node.type), {placeholder: x})
    return got


@pytest.mark.parametrize("op,onnx,x", [("acosh", "Acosh", [1.0, 1.001, 1.5, 3.0, 1e3, 1e6]),
                                       ("atanh", "Atanh", [-0.999, -0.5, -1e-3, 0.0, 0.25, 0.9])])
def test_inverse_hyperbolic_on_their_domain(op, onnx, x):
    x = np.array(x, np.float32)
    ref = evaluate_one(call(op, Var("x", TensorType(x.shape))), [x])
    np.testing.assert_allclose(_te_unary(op, x), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref, ort_run(onnx, [x], opset=18), rtol=1e-6, atol=1e-7)


def test_prelu_slope_broadcasts():
    ref, arrays, _ = check_op("nn.prelu", [(2, 3, 4, 5), (3, 1, 1)])
    np.testing.assert_allclose(ref, ort_run("PRelu", arrays, opset=16), rtol=1e-6, atol=1e-7)


def test_round_ties_to_even_and_large_values():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, 8388609.0, -8388609.0, 3e9], np.float32)
    np.testing.assert_array_equal(_te_unary("round", x), np.round(x))


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
@pytest.mark.parametrize("a,b", [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 2))])
def test_binary_broadcast(op, a, b):
    check_op(op, [a, b], positive=(1,) if op == "divide" else ())

# ---------------------------------------------------------------------------------------------- data movement


@pytest.mark.parametrize("src,dst", [((2, 3, 4), (6, 4)), ((2, 3, 4), (4, 6)), ((2, 3, 4), (24,)),
                                     ((1, 6, 1, 1), (1, 6)), ((6,), (1, 2, 3, 1)), ((2, 3, 4, 5), (6, 20)),
                                     ((4, 6), (3, 8)), ((2, 1, 3), (3, 2))])
def test_reshape(src, dst):
    ref, (x,), _ = check_op("reshape", [src], dict(newshape=dst))
    np.testing.assert_array_equal(ref, x.reshape(dst))


@pytest.mark.parametrize("shape,axes", [((2, 3), None), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4, 5), (0, 2, 3, 1)),
                                        ((2, 3, 4), (-1, 0, 1))])
def test_transpose(shape, axes):
    ref, (x,), _ = check_op("transpose", [shape], dict(axes=axes))
    np.testing.assert_array_equal(ref, np.transpose(x, axes))


@pytest.mark.parametrize("shapes,axis", [([(2, 3)], 0), ([(2, 3), (4, 3)], 0), ([(2, 1, 4), (2, 3, 4), (2, 2, 4)], 1),
                                         ([(2, 3), (2, 2)], -1)])
def test_concatenate(shapes, axis):
    ref, arrays, _ = check_op("concatenate", shapes, dict(axis=axis))
    np.testing.assert_array_equal(ref, np.concatenate(arrays, axis=axis))


# ---------------------------------------------------------------------------------------------- winograd


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_weight_transform(m):
    check_op("nn.winograd_weight_transform", [(2, 1, 3, 3, 4, 8)], dict(tile_size=m))


@pytest.mark.parametrize("m,size,padding", [(2, (6, 6), (1, 1, 1, 1)), (4, (7, 5), (1, 1, 1, 1)),
                                            (4, (9, 6), (0, 1, 2, 0))])
def test_conv2d_winograd_nchwc(m, size, padding):
    """The compute (transforms as selects) matches the reference (tiles and einsums in float64), and both match
    the direct convolution of the untransformed weight."""
    from relayish.ops.layout import _cn_ref
    from relayish.ops.winograd import _wt_ref
    h, w = size
    shapes = [(1, 2, h, w, 4), (m + 2, m + 2, 3, 2, 4, 8)]
    ref, (x, _), node = check_op("nn.conv2d_winograd_nchwc", shapes, dict(tile_size=m, padding=padding))
    weight = np.random.default_rng(1).standard_normal((3, 2, 3, 3, 4, 8)).astype(np.float32)
    direct = _cn_ref(x, weight, (1, 1), padding, (1, 1))
    got = evaluate_one(call("nn.conv2d_winograd_nchwc", Var("x", TensorType(x.shape)),
                            Var("u", TensorType(shapes[1])), tile_size=m, padding=padding),
                       [x, _wt_ref(weight, m)])
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5 * float(np.abs(direct).max()))


def test_winograd_bad_inputs():
    u = Var("u", TensorType((6, 6, 3, 2, 4, 8)))
    with pytest.raises(OpError, match="tile_size must be one of"):
        call("nn.conv2d_winograd_nchwc", Var("x", TensorType((1, 2, 6, 6, 4))), u, tile_size=3)
    with pytest.raises(OpError, match=r"does not start with \(4, 4\) for tile 2"):
        call("nn.conv2d_winograd_nchwc", Var("x", TensorType((1, 2, 6, 6, 4))), u, tile_size=2)
    with pytest.raises(OpError, match="weight blocks .* do not match data blocks"):
        call("nn.conv2d_winograd_nchwc", Var("x", TensorType((1, 3, 6, 6, 4))), u, tile_size=4)
    with pytest.raises(OpError, match="kernel must be 3x3"):
        call("nn.winograd_weight_transform", Var("w", TensorType((3, 2, 5, 5, 4, 8))), tile_size=4)


@pytest.mark.parametrize("strides,padding,dilation", [((1, 1), (1, 1, 1, 1), (1, 1)), ((2, 1), (0, 2, 1, 0), (1, 2)),
                                                     ((3, 3), (0, 0, 0, 0), (2, 1))])
def test_blocked_mobile_ops(strides, padding, dilation):
    """The sweep of relayish/ops/blocked.py (tests/test_grouped_conv.py checks them against the NCHW ops)."""
    window = dict(strides=strides, padding=padding, dilation=dilation)
    check_op("nn.depthwise_conv2d_nchwc", [(1, 2, 9, 8, 8), (2, 1, 3, 3, 8)], window)
    check_op("nn.conv2d_nchwc", [(1, 6, 9, 8, 4), (4, 3, 3, 2, 4, 8)], dict(window, groups=2))
    check_op("nn.channel_shuffle", [(1, 3, 4, 5, 8)], {"groups": 4, "layout": "NCHW8c"})
    check_op("nn.channel_shuffle", [(2, 6, 3, 2)], {"groups": 2})
    check_op("nn.concat_blocked", [(1, 3, 2, 2, 8), (1, 9, 2, 2, 4)], {"block": 12})


def test_channel_padding_ops():
    """relayish/ops/channel_pad.py: padding each of 4 groups of 5 channels to 8 and dropping it again is the
    identity; the padding is zeros, at the end of every group; zeroing a blocked value's padding keeps the rest."""
    padded, (x,), _ = check_op("nn.pad_channels", [(2, 20, 3, 2)], {"groups": 4, "padded": 8})
    assert padded.shape == (2, 32, 3, 2) and not padded.reshape(2, 4, 8, 6)[:, :, 5:].any()
    np.testing.assert_array_equal(padded.reshape(2, 4, 8, 6)[:, :, :5], x.reshape(2, 4, 5, 6))
    back, (p,), _ = check_op("nn.unpad_channels", [(2, 32, 3, 2)], {"groups": 4, "channels": 5})
    np.testing.assert_array_equal(back, p.reshape(2, 4, 8, 6)[:, :, :5].reshape(2, 20, 3, 2))
    check_op("nn.pad_channels", [(1, 6, 7)], {"groups": 1, "padded": 16})
    zeroed, (z,), _ = check_op("nn.zero_channel_padding", [(1, 4, 2, 3, 8)], {"groups": 2, "channels": 13})
    nchw = zeroed.transpose(0, 1, 4, 2, 3).reshape(1, 2, 16, 2, 3)
    assert not nchw[:, :, 13:].any()
    np.testing.assert_array_equal(nchw[:, :, :13], z.transpose(0, 1, 4, 2, 3).reshape(1, 2, 16, 2, 3)[:, :, :13])
    # the gathers read and write padded values: a shuffle of 4 groups of 5 (padded to 8, blocks of 4) into 2
    # groups of 10 padded to 16 in blocks of 8; a concatenation of a padded and a plain input into a padded output
    check_op("nn.channel_shuffle", [(1, 8, 3, 2, 4)], {"groups": 5, "layout": "NCHW4c", "in_map": (4, 5, 8),
                                                       "out_map": (2, 10, 16), "out_layout": "NCHW8c"})
    check_op("nn.channel_shuffle", [(1, 24, 3, 2)], {"groups": 4, "in_map": (1, 20, 24), "out_layout": "NCHW4c"})
    check_op("nn.concat_blocked", [(1, 8, 2, 3, 4), (1, 3, 2, 3, 4)],
             {"block": 8, "in_maps": ((4, 5, 8), ()), "out_map": (4, 8, 8)})
    with pytest.raises(OpError, match=r"out_map \(3, 8, 8\) does not hold the 32 concatenated channels"):
        call("nn.concat_blocked", Var("x", TensorType((1, 8, 2, 3, 4))), block=8, out_map=(3, 8, 8))
    with pytest.raises(OpError, match=r"in_map \(4, 5, 6\) does not describe 32 physical channels"):
        call("nn.channel_shuffle", Var("x", TensorType((1, 8, 2, 3, 4))), groups=4, layout="NCHW4c", in_map=(4, 5, 6))
    with pytest.raises(OpError, match="padded=3 is less than the 5 channels per group"):
        call("nn.pad_channels", Var("x", TensorType((1, 20, 2, 2))), groups=4, padded=3)
    with pytest.raises(OpError, match="groups=3 must divide the 32 input channels"):
        call("nn.unpad_channels", Var("x", TensorType((1, 32, 2, 2))), groups=3, channels=5)


def test_blocked_mobile_ops_bad_inputs():
    x = Var("x", TensorType((1, 2, 6, 6, 8)))
    with pytest.raises(OpError, match=r"is not \[C/b, 1, KH, KW, b\]"):
        call("nn.depthwise_conv2d_nchwc", x, Var("w", TensorType((2, 1, 3, 3, 4))))
    with pytest.raises(OpError, match="groups=3 must divide the 4 output channel blocks"):
        call("nn.conv2d_nchwc", x, Var("w", TensorType((4, 1, 1, 1, 8, 8))), groups=3)
    with pytest.raises(OpError, match="groups=3 must divide the 16 channels"):
        call("nn.channel_shuffle", x, groups=3, layout="NCHW8c")
    with pytest.raises(OpError, match="block 5 does not divide the 24 concatenated channels"):
        call("nn.concat_blocked", x, Var("y", TensorType((1, 2, 6, 6, 4))), block=5)


def test_every_op_is_swept():
    """A new op must come with a compute and a sweep (the tests of this file and test_ops_tail.py name every op they
    cover)."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    source = "".join(open(os.path.join(here, f), encoding="utf-8").read() for f in ("test_ops.py", "test_ops_tail.py"))
    for op in set(list_ops()) - LEAD_OPS:
        assert get_op(op).compute is not None or op in STEPPED_OPS | HAND_WRITTEN_OPS, op
        assert f'"{op}"' in source, f"{op} has no test in test_ops.py or test_ops_tail.py"

# ---------------------------------------------------------------------------------------------- flops


def test_flops():
    def flops(op, shapes, **attrs):
        node = call(op, *[Var("v", TensorType(s)) for s in shapes], **attrs)
        return get_op(op).flops([a.type for a in node.args], node.attrs, node.type)
    # N * O * OH * OW * (C/g * KH * KW) multiply-adds
    assert flops("nn.conv2d", [(1, 4, 8, 8), (6, 2, 3, 3)], padding=(1, 1, 1, 1), groups=2) == 2 * 6 * 64 * 18
    assert flops("nn.dense", [(3, 5), (4, 5)]) == 2 * 3 * 4 * 5
    assert flops("nn.matmul", [(2, 3, 5), (5,)]) == 2 * 6 * 5
    assert flops("nn.max_pool2d", [(1, 2, 4, 4)], pool_size=(2, 2), strides=(2, 2)) == 8 * 4

# ---------------------------------------------------------------------------------------------- errors


BAD = [
    ("nn.conv2d", [(1, 3, 8, 8), (4, 4, 3, 3)], {},
     r"nn\.conv2d: weight has 4 input channels per group but data has 3 channels \(groups=1\)"),
    ("nn.conv2d", [(1, 4, 8, 8), (6, 2, 3, 3)], dict(groups=3), r"groups=3 must divide data channels 4"),
    ("nn.conv2d", [(1, 3, 8), (4, 3, 3, 3)], {}, r"nn\.conv2d: data must be 4-D, got shape \(1, 3, 8\)"),
    ("nn.conv2d", [(1, 3, 2, 8), (4, 3, 3, 3)], {}, r"padded input height 2 is smaller than the dilated kernel"),
    ("nn.conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], dict(strides=(1, 1, 1)), r"strides must be 2 ints"),
    ("nn.conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], dict(padding=(1, 1)), r"padding must be 4 ints"),
    ("nn.conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], dict(strides=(0, 1)), r"strides must be >= 1"),
    ("nn.conv2d", [(1, 3, 8, 8)], {}, r"nn\.conv2d: expected 2 inputs, got 1"),
    ("nn.max_pool2d", [(1, 3, 8, 8)], {}, r"attribute 'pool_size' is required"),
    ("nn.max_pool2d", [(1, 3, 8, 8)], dict(pool_size=(2, 2), padding=(2, 0, 0, 0)),
     r"padding \(2, 0, 0, 0\) must be smaller than pool_size"),
    ("nn.avg_pool2d", [(1, 3, 2, 8)], dict(pool_size=(3, 3)), r"padded input height 2 is smaller"),
    ("nn.dense", [(3, 5), (4, 6)], {}, r"nn\.dense: data has 5 features .* weight expects 6"),
    ("nn.matmul", [(3, 4), (5, 6)], {}, r"nn\.matmul: a has 4 columns \(shape \(3, 4\)\) but b has 5 rows"),
    ("nn.matmul", [(2, 3, 4), (3, 4, 5)], {}, r"nn\.matmul: shapes \(2,\) and \(3,\) do not broadcast"),
    ("nn.matmul_pack", [(3, 4), (2, 5, 8)], {}, r"nn\.matmul_pack: data \(3, 4\) has K=4 but the weight"),
    ("nn.matmul_pack", [(4,), (2, 4, 8)], {}, r"nn\.matmul_pack: data must be at least 2-D"),
    ("nn.softmax", [(2, 3)], dict(axis=2), r"nn\.softmax: axis 2 out of range for a 2-D input"),
    ("nn.lrn", [(2, 3, 4, 4)], dict(size=0), r"nn\.lrn: size must be >= 1"),
    ("nn.batch_norm", [(2, 3, 4, 4), (3,), (3,), (4,), (3,)], {},
     r"nn\.batch_norm: mean must have shape \(3,\) .* got \(4,\)"),
    ("reshape", [(2, 3)], dict(newshape=(4, 2)), r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\)"),
    ("reshape", [(2, 3)], dict(newshape=(-1, 2)), r"reshape: newshape \(-1, 2\) must be fully resolved"),
    ("transpose", [(2, 3, 4)], dict(axes=(0, 0, 1)), r"transpose: axes \(0, 0, 1\) is not a permutation"),
    ("transpose", [(2, 3, 4)], dict(axes=(0, 1)), r"is not a permutation of the 3 axes"),
    ("concatenate", [(2, 3), (2, 4)], dict(axis=0), r"concatenate: input 1 has shape \(2, 4\) .* dim 1"),
    ("concatenate", [(2, 3), (2, 3, 1)], dict(axis=0), r"concatenate: input 1 has rank 3"),
    ("concatenate", [], dict(axis=0), r"concatenate: needs at least one input"),
    ("add", [(2, 3), (4,)], {}, r"add: shapes \(2, 3\) and \(4,\) do not broadcast"),
]


@pytest.mark.parametrize("op,shapes,attrs,message", BAD)
def test_bad_input_raises_op_error(op, shapes, attrs, message):
    with pytest.raises(OpError, match=message):
        call(op, *[Var(f"x{k}", TensorType(s)) for k, s in enumerate(shapes)], **attrs)


def test_dtype_mismatch_is_named():
    with pytest.raises(OpError, match=r"nn\.dense: inputs have different dtypes"):
        call("nn.dense", Var("x", TensorType((2, 3))), Var("w", TensorType((4, 3), "float64")))


def test_te_evaluator_rejects_out_of_bounds_reads_even_in_unselected_arms():
    """The property the sweeps above rely on: compute definitions never read out of bounds."""
    x = te.placeholder((4,), name="x")
    unguarded = te.compute((5,), lambda i: te.select(i < 4, x[i], 0.0), name="bad_pad")
    with pytest.raises(IndexError, match=r"read of x dim 0 \(extent 4\) at indices \[0, 4\]"):
        evaluate_te(unguarded, {x: np.zeros(4, np.float32)})

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
    """A new op must come with a compute and a sweep above (this file's tests name every op they cover)."""
    import inspect
    import sys
    source = inspect.getsource(sys.modules[__name__])
    for op in set(list_ops()) - LEAD_OPS:
        assert get_op(op).compute is not None, op
        assert f'"{op}"' in source, f"{op} has no test in test_ops.py"

# ---------------------------------------------------------------------------------------------- typed ops
# Ops over int64 and bool tensors too: (op, [(shape, dtype)], attrs). Broadcasts and negative axes included.

def _typed_inputs(specs, seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in specs:
        if dtype == "float32":
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        elif dtype == "bool":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        else:  # ints in [-3, 3] without 0 (divisors, indices of a table of >= 3 rows)
            arrays.append(np.where(rng.integers(0, 2, shape) == 1, 1, -1) * rng.integers(1, 4, shape).astype(dtype))
    return arrays


def check_typed(op, specs, attrs=None, seed=0, rtol=1e-5):
    """check_op for inputs of any dtype: reference (interpreter) vs compute (te evaluator) vs declared type."""
    params = [Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)]
    node = call(op, *params, **(attrs or {}))
    arrays = _typed_inputs(specs, seed)
    ref = evaluate_one(node, arrays)
    placeholders = [te.placeholder(s, d, name=f"x{k}") for k, (s, d) in enumerate(specs)]
    got, = evaluate_te(get_op(op).compute(placeholders, node.attrs, node.type), dict(zip(placeholders, arrays)))
    assert got.shape == ref.shape == node.type.shape
    assert got.dtype == ref.dtype == np.dtype(node.type.dtype)
    if ref.dtype.kind == "f":
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, float(np.abs(ref).max(initial=0))))
    else:
        np.testing.assert_array_equal(got, ref)


F, I, B = "float32", "int64", "bool"
TYPED = [
    ("take", [((4, 3), F), ((2, 5), I)], {"axis": 0}), ("take", [((2, 4), F), ((3,), I)], {"axis": -1}),
    ("strided_slice", [((6, 7), F)], {"begin": (-1, 1), "end": (-100, 6), "strides": (-2, 2), "axes": (0, -1)}),
    ("strided_slice", [((6, 7), I)], {"begin": (2,), "end": (5,)}),
    ("broadcast_to", [((3, 1), I)], {"shape": (2, 3, 4)}),
    ("where", [((3, 1), B), ((1, 4), F), ((4,), F)], {}), ("where", [((2, 3), B), ((2, 3), I), ((3,), I)], {}),
    ("cast", [((2, 3), F)], {"dtype": "int64"}), ("cast", [((2, 3), I)], {"dtype": "float32"}),
    ("cast", [((2, 3), F)], {"dtype": "bool"}), ("cast", [((2, 3), B)], {"dtype": "float32"}),
    ("trilu", [((2, 4, 5), F)], {"upper": 0, "k": 1}), ("trilu", [((4, 5), I)], {"upper": 1, "k": -1}),
    ("abs", [((2, 3), F)], {}), ("abs", [((2, 3), I)], {}), ("erf", [((2, 3), F)], {}),
    ("reciprocal", [((2, 3), F)], {}), ("power", [((2, 3), I), ((3,), I)], {}),
    ("mod", [((2, 3), I), ((3,), I)], {"fmod": 0}), ("mod", [((2, 3), I), ((2, 1), I)], {"fmod": 1}),
    ("mod", [((2, 3), F), ((3,), F)], {"fmod": 1}),
    ("equal", [((2, 3), I), ((3,), I)], {}), ("less", [((2, 3), F), ((2, 1), F)], {}),
    ("greater", [((2, 3), I), ((1,), I)], {}), ("less_equal", [((2, 3), I), ((3,), I)], {}),
    ("greater_equal", [((2, 3), F), ((3,), F)], {}), ("logical_not", [((2, 3), B)], {}),
    ("logical_and", [((2, 3), B), ((3,), B)], {}), ("logical_or", [((2, 3), B), ((2, 1), B)], {}),
    ("logical_xor", [((2, 3), B), ((3,), B)], {}),
    ("sum", [((2, 3, 4), F)], {"axes": (-1, 0), "keepdims": False}), ("sum", [((2, 3, 4), I)], {}),
    ("mean", [((2, 3, 4), F)], {"axes": (1,)}), ("max", [((2, 3, 4), F)], {"axes": (-2,), "keepdims": False}),
    ("max", [((2, 3), B)], {"axes": (1,)}), ("min", [((2, 3, 4), I)], {"axes": (0, 2)}),
    ("prod", [((2, 3, 4), F)], {"axes": (-1, 0), "keepdims": False}), ("prod", [((2, 3, 4), I)], {"axes": (1,)}),
    ("argmax", [((2, 3, 4), F)], {"axis": -1, "keepdims": False}),
    ("argmax", [((3, 5), I)], {"axis": 0, "select_last_index": True}),  # ints in [-3, 3]: ties
    ("argmin", [((3, 5), I)], {"axis": 1}),
    ("argmin", [((2, 3, 4), I)], {"axis": -2, "keepdims": False, "select_last_index": True}),
    ("cumsum", [((3, 5), F)], {"axis": 1}), ("cumsum", [((3, 5), I)], {"axis": 0, "exclusive": True, "reverse": True}),
    ("cumprod", [((3, 5), F)], {"axis": -1, "reverse": True}),
    ("cumprod", [((3, 5), I)], {"axis": 0, "exclusive": True}),
    ("cumsum", [((2, 70), F)], {"axis": 1, "exclusive": True, "reverse": True}),  # long axes: in blocks
    ("cumsum", [((100, 2), I)], {"axis": 0}), ("cumprod", [((65, 2), F)], {"axis": 0, "reverse": True}),
    ("nn.layer_norm", [((2, 3, 8), F), ((8,), F), ((8,), F)], {"axis": -1, "epsilon": 1e-5}),
    ("nn.layer_norm", [((2, 3, 8), F), ((3, 1), F), ((8,), F)], {"axis": 1, "epsilon": 1e-3}),
    ("nn.layer_norm", [((2, 3, 32), F), ((32,), F), ((32,), F)], {"axis": -1, "epsilon": 1e-5}),  # row form
    ("nn.gelu", [((3, 7), F)], {}), ("nn.gelu", [((3, 7), F)], {"approximate": "tanh"}),
]


@pytest.mark.parametrize("op,specs,attrs", TYPED, ids=lambda v: str(v))
def test_typed_op(op, specs, attrs):
    check_typed(op, specs, attrs)


# ---- elementwise long tail (conf-elemwise): trigonometry, isnan / isinf, bitwise ops of every integer width
ELEMWISE_TAIL_FLOAT = [1.0, -0.5, 0.0, 0.9999, -1.0, 1.5, 3.0, -100.0, 1e7, np.nan, np.inf, -np.inf]


@pytest.mark.parametrize("op,attrs", [("sin", {}), ("cos", {}), ("tan", {}), ("asin", {}), ("acos", {}),
                                      ("atan", {}), ("isnan", {}), ("isinf", {}), ("isinf", {"detect_negative": 0}),
                                      ("isinf", {"detect_positive": 0}),
                                      ("isinf", {"detect_negative": 0, "detect_positive": 0})])
def test_elemwise_tail_float(op, attrs):
    x = np.array(ELEMWISE_TAIL_FLOAT, np.float32)
    node = call(op, Var("x", TensorType(x.shape)), **attrs)
    ref = evaluate_one(node, [x])
    placeholder = te.placeholder(x.shape, name="x")
    with np.errstate(invalid="ignore"):
        got, = evaluate_te(get_op(op).compute([placeholder], node.attrs, node.type), {placeholder: x})
    assert got.dtype == ref.dtype == np.dtype(node.type.dtype)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op,specs,attrs", [
    ("bitwise_not", [((2, 3), "int32")], {}), ("bitwise_not", [((2, 3), "uint16")], {}),
    ("bitwise_and", [((2, 3), "uint8"), ((3,), "uint8")], {}), ("bitwise_or", [((2, 3), "int16"), ((2, 1), "int16")], {}),
    ("bitwise_xor", [((2, 3), I), ((3,), I)], {}),
    ("bit_shift", [((2, 3), "uint32"), ((3,), "uint32")], {"direction": "LEFT"}),
    ("bit_shift", [((2, 3), "int8"), ((2, 3), "int8")], {"direction": "RIGHT"}),  # negative amounts: the sign fill
    ("bit_shift", [((2, 3), "int64"), ((2, 3), "int64")], {"direction": "LEFT"}),
], ids=lambda v: str(v))
def test_elemwise_tail_bitwise(op, specs, attrs):
    check_typed(op, specs, attrs)


def test_elemwise_tail_refuses_wrong_dtypes():
    with pytest.raises(OpError, match="sin: input must be a float tensor, got int32"):
        call("sin", Var("x", TensorType((2,), "int32")))
    with pytest.raises(OpError, match="bitwise_and: inputs must be int8 or"):
        call("bitwise_and", Var("a", TensorType((2,))), Var("b", TensorType((2,))))
    with pytest.raises(OpError, match="bitwise_not: input must be an integer tensor"):
        call("bitwise_not", Var("a", TensorType((2,), "bool")))
    with pytest.raises(OpError, match="attribute 'direction' is required"):
        call("bit_shift", Var("a", TensorType((2,), "uint8")), Var("b", TensorType((2,), "uint8")))


def test_power_of_floats():
    check_op("power", [(2, 3), (3,)], positive=(0,))


def test_log():
    check_op("log", [(2, 3)], positive=(0,))


def test_take_reference_refuses_an_index_out_of_range():
    with pytest.raises(IndexError, match=r"index 4 out of range \[-4, 4\)"):
        evaluate_one(call("take", Var("t", TensorType((4, 2))), Var("i", TensorType((1,), "int64"))),
                     [np.zeros((4, 2), np.float32), np.array([4])])

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

# ---------------------------------------------------------------------------------------------- data movement
# pad in every mode with negative pads; gathers and scatters (every reduction, duplicate indices: the typed
# inputs' ints are in [-3, 3]); one_hot

MOVEMENT = [
    ("pad", [((3, 4), F)], {"pads": (1, -1, 2, 3), "value": 2.0}),
    ("pad", [((3, 4), I)], {"pads": (2, 1, -1, 5), "mode": "reflect"}),
    ("pad", [((3, 4), F)], {"pads": (2, 1, 3, 5), "mode": "edge"}),
    ("pad", [((3, 4), I)], {"pads": (-1, 7, 4, 1), "mode": "wrap"}),
    ("pad", [((1, 3), F)], {"pads": (2, 0, 1, 1), "mode": "edge"}),  # an axis of one element
    ("pad", [((4, 3), F)], {"pads": (-3, 1, 2, 0), "mode": "wrap"}), ("pad", [((4, 3), F)], {"pads": (-3, 1, 2, -1)}),
    ("gather_elements", [((4, 4), F), ((2, 4), I)], {"axis": 0}),
    ("gather_elements", [((3, 4), I), ((3, 5), I)], {"axis": -1}),
    ("gather_nd", [((4, 4, 5), F), ((2, 2), I)], {}),
    ("gather_nd", [((3, 4, 5), F), ((3, 2, 1), I)], {"batch_dims": 1}),
    ("scatter_elements", [((4, 4), F), ((3, 4), I), ((3, 4), F)], {"axis": 0}),
    ("scatter_elements", [((3, 4), F), ((2, 5), I), ((2, 5), F)], {"axis": -1, "reduction": "add"}),
    ("scatter_elements", [((4, 3), F), ((5, 2), I), ((5, 2), F)], {"axis": 0, "reduction": "mul"}),
    ("scatter_elements", [((4, 3), I), ((5, 3), I), ((5, 3), I)], {"axis": 0, "reduction": "max"}),
    ("scatter_elements", [((4, 3), F), ((5, 3), I), ((5, 3), F)], {"axis": 0, "reduction": "min"}),
    ("scatter_nd", [((4, 5), F), ((3, 1), I), ((3, 5), F)], {}),
    ("scatter_nd", [((4, 4, 2), F), ((2, 3, 2), I), ((2, 3, 2), F)], {"reduction": "add"}),
    ("scatter_nd", [((4, 4), F), ((5, 2), I), ((5,), F)], {"reduction": "mul"}),
    ("scatter_nd", [((4, 4), I), ((5, 2), I), ((5,), I)], {"reduction": "max"}),
    ("scatter_nd", [((4, 4), F), ((5, 2), I), ((5,), F)], {"reduction": "min"}),
    ("one_hot", [((2, 3), I), ((2,), F)], {"depth": 4, "axis": 1}),
    ("one_hot", [((2, 3), I), ((2,), I)], {"depth": 2, "axis": -1}),
]


@pytest.mark.parametrize("op,specs,attrs", MOVEMENT, ids=lambda v: str(v))
def test_movement_op(op, specs, attrs):
    check_typed(op, specs, attrs)


@pytest.mark.parametrize("op,specs,attrs,message", [
    ("pad", [((2, 3), F)], {"pads": (1, 2)}, r"pad: pads must have 2 values per axis"),
    ("pad", [((2, 3), F)], {"pads": (0, 0, 0, 0), "mode": "mirror"}, r"pad: mode must be one of"),
    ("gather_elements", [((2, 3), F), ((2, 3), F)], {}, r"gather_elements: indices must be int64 or int32"),
    ("gather_elements", [((2, 3), F), ((2, 4), I)], {}, r"indices \(2, 4\) exceed data \(2, 3\) in dim 1"),
    ("gather_nd", [((2, 3), F), ((2, 3), I)], {}, r"gather_nd: the last dim of indices \(2, 3\) must be in"),
    ("scatter_elements", [((2, 3), F), ((2, 3), I), ((2, 2), F)], {}, r"updates \(2, 2\) float32 must have"),
    ("scatter_nd", [((2, 3), F), ((2, 1), I), ((2, 3), F)], {"reduction": "sum"}, r"reduction must be one of"),
    ("one_hot", [((2,), I), ((3,), F)], {"depth": 2}, r"one_hot: values must be \[off_value, on_value\]"),
])
def test_movement_bad_input_raises_op_error(op, specs, attrs, message):
    with pytest.raises(OpError, match=message):
        call(op, *[Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)], **attrs)


def test_movement_references_refuse_indices_out_of_range():
    with pytest.raises(IndexError, match=r"gather_elements: index 3 out of range \[-3, 3\) of axis 0"):
        get_op("gather_elements").ref(np.zeros((3, 2)), np.array([[3, 0]]), axis=0)
    with pytest.raises(IndexError, match=r"scatter_nd: index -3 out of range \[-2, 2\) of dim 0"):
        get_op("scatter_nd").ref(np.zeros((2, 2)), np.array([[-3]]), np.zeros((1, 2)), reduction="none")

# ---------------------------------------------------------------------------------------------- resize (conf-resize)
# every mode and coordinate transformation, up and down, a subset of axes, int data in nearest mode

RESIZE = [
    ("resize", [((1, 2, 3, 4), F)], {"sizes": (1, 2, 6, 8), "scales": (1, 1, 2, 2)}),
    ("resize", [((1, 1, 5, 4), I)], {"sizes": (1, 1, 3, 7), "scales": (1, 1, 0.6, 1.75), "nearest_mode": "ceil",
                                     "coordinate_transformation_mode": "asymmetric"}),
    ("resize", [((2, 3, 4), F)], {"sizes": (2, 5, 7), "scales": (1, 5 / 3, 7 / 4), "mode": "linear",
                                  "coordinate_transformation_mode": "align_corners"}),
    ("resize", [((1, 1, 4, 4), F)], {"sizes": (1, 1, 3, 3), "scales": (1, 1, 0.75, 0.75), "mode": "cubic",
                                     "exclude_outside": 1, "cubic_coeff_a": -0.5}),
    ("resize", [((1, 1, 8, 8), F)], {"sizes": (1, 1, 3, 5), "scales": (1, 1, 0.375, 0.625), "mode": "linear",
                                     "antialias": 1, "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("resize", [((1, 1, 6, 6), F)], {"sizes": (1, 1, 4, 4), "scales": (1, 1, 0.7, 0.7), "mode": "cubic",
                                     "antialias": 1, "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ("resize", [((1, 1, 4, 4), F)], {"sizes": (1, 1, 3, 3), "scales": (1, 1, 0.75, 0.75), "mode": "linear",
                                     "coordinate_transformation_mode": "tf_crop_and_resize",
                                     "roi": (0, 0, -0.2, 0.4, 1, 1, 0.6, 1.3), "extrapolation_value": 7.0}),
    ("resize", [((3, 5), I)], {"sizes": (3, 4), "scales": (1, 0.8), "coordinate_transformation_mode":
                               "tf_crop_and_resize", "roi": (0, 0.1, 1, 1.2), "extrapolation_value": -2.0}),
]


@pytest.mark.parametrize("op,specs,attrs", RESIZE, ids=lambda v: str(v))
def test_resize_op(op, specs, attrs):
    check_typed(op, specs, attrs)


@pytest.mark.parametrize("specs,attrs,message", [
    ([((2, 3), F)], {"sizes": (4, 6), "scales": (2.0,)}, r"resize: sizes .* one value per dim"),
    ([((2, 3), F)], {"sizes": (4, 6), "scales": (2, 2), "mode": "area"}, r"resize: mode must be one of"),
    ([((2, 3), I)], {"sizes": (4, 6), "scales": (2, 2), "mode": "linear"}, r"linear mode needs a float input"),
    ([((2, 100), F)], {"sizes": (2, 1), "scales": (1, 0.01), "mode": "cubic", "antialias": 1},
     r"resize: 400 taps per output element"),
])
def test_resize_bad_input_raises_op_error(specs, attrs, message):
    with pytest.raises(OpError, match=message):
        call("resize", *[Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)], **attrs)
# ---- convolution and pooling of every rank (conf-convnd): 3-D windows over NCDHW

CONVND = [
    ("nn.conv3d", [(1, 2, 5, 6, 4), (3, 2, 2, 3, 2)], {}),
    ("nn.conv3d", [(1, 4, 6, 5, 7), (6, 2, 3, 2, 2)], {"strides": (2, 1, 2), "padding": (1, 0, 2, 0, 1, 1),
                                                      "dilation": (1, 2, 1), "groups": 2}),
    ("nn.max_pool3d", [(1, 2, 7, 6, 8)], {"pool_size": (3, 2, 3), "strides": (2, 2, 3),
                                          "padding": (1, 0, 1, 1, 1, 2), "dilation": (1, 2, 1), "ceil_mode": True}),
    ("nn.avg_pool3d", [(1, 2, 6, 7, 8)], {"pool_size": (2, 3, 2), "strides": (2, 2, 2)}),
    ("nn.avg_pool3d", [(1, 2, 7, 6, 8)], {"pool_size": (3, 3, 2), "strides": (2, 1, 3), "padding": (1, 1, 0, 1, 2, 1),
                                          "dilation": (2, 1, 2), "ceil_mode": True, "count_include_pad": True}),
    ("nn.conv_transpose", [(1, 4, 3, 4), (4, 3, 3, 2)], {"strides": (2, 3), "dilation": (1, 2), "pad_begin": (1, 0),
                                                        "output_size": (7, 12), "groups": 2}),
    ("nn.conv_transpose", [(2, 2, 5), (2, 3, 3)], {"strides": (2,), "dilation": (1,), "pad_begin": (0,),
                                                  "output_size": (13,)}),
    ("nn.conv_transpose", [(1, 2, 3, 2, 3), (2, 2, 2, 2, 3)], {"strides": (1, 2, 2), "dilation": (2, 1, 1),
                                                              "pad_begin": (1, 0, 2), "output_size": (4, 4, 6)}),
]


@pytest.mark.parametrize("op,shapes,attrs", CONVND, ids=lambda v: str(v))
def test_convnd_op(op, shapes, attrs):
    check_op(op, shapes, attrs)


def test_integer_max_pool3d():
    check_typed("nn.max_pool3d", [((1, 2, 3, 5, 6), I)], {"pool_size": (1, 2, 3), "padding": (0, 1, 1, 0, 1, 2),
                                                          "strides": (1, 2, 2), "ceil_mode": True})


def test_max_pool3d_argmax():
    window = {"pool_size": (2, 2, 3), "padding": (1, 1, 1, 0, 1, 2), "strides": (1, 2, 2), "ceil_mode": True}
    check_op("nn.max_pool3d_argmax", [(2, 3, 3, 5, 6)], window)
    check_op("nn.max_pool3d_argmax", [(1, 2, 1, 5, 6)], {"pool_size": (1, 3, 3), "padding": (0, 1, 1, 0, 1, 1),
                                                         "storage_order": 1})
    check_typed("nn.max_pool3d_argmax", [((1, 2, 3, 5, 6), I)], window)  # ints in [-3, 3]: many ties

"""Graph passes, in before()/expected() form: each test builds a small graph, runs one pass (or the pipeline up to
one), and compares the result with a graph built by hand, by structural equality (alpha-equivalence for fused
functions, constants by value). A mismatch prints both graphs.

Fusion: conv+bias+relu, the residual diamond, injective chains, reductions, the max_ops limit, opaque ops.
Layout: transforms cancel between convolutions, stay blocked through add/relu/pools, per-channel constants get
blocked, inverse pairs cancel, layout="NCHW" adds none. Batch norm: folded into the conv before it, else affine.
ResNet-18: one kernel per convolution with its bias, residual add and relu, transforms only at the two ends.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from compiler.summary import summarize
from compiler.passes import PassContext, run_pipeline
from compiler.passes.fuse import fuse_ops
from compiler.passes.layout import alter_layout, propagate_layout
from compiler.passes.rewrite import ANY, CONST, Pat
from compiler.passes.simplify import eliminate_identity_ops, fold_batch_norm
from frontends import from_onnx
from relayish import Call, Constant, Function, IRModule, Pattern, TensorType, Tuple, Var, call, get_op
from relayish.expr import post_order

RNG = np.random.default_rng(0)
VW = 8  # vector width of the layout tests: 8 channels make one block


def const(*shape) -> Constant:
    return Constant(RNG.standard_normal(shape).astype(np.float32))


def module(params, body) -> IRModule:
    return IRModule(Function(params, body))


def primitive(params, body) -> Function:
    return Function(params, body, {"Primitive": 1})


def kernel(body_fn, *args) -> Call:
    """A call of the primitive function body_fn(p0, p1, ...), with one parameter per argument (in order)."""
    params = [Var(f"p{i}", a.type) for i, a in enumerate(args)]
    return Call(primitive(params, body_fn(*params)), args)


def assert_same(actual: IRModule, expected: IRModule):
    assert actual == expected, (f"\n--- actual\n{actual.astext(show_types=False)}\n"
                                f"--- expected\n{expected.astext(show_types=False)}")


def kernels_of(mod: IRModule) -> list[list[str]]:
    return [k["ops"] for k in summarize(mod)["kernels"]]


def conv(x, w, **attrs):
    return call("nn.conv2d", x, w, **attrs)


def lt(x, src, dst):
    return call("layout_transform", x, src_layout=src, dst_layout=dst)


X = TensorType((1, 8, 6, 6))

# ============================================================================================== fusion


def test_conv_bias_relu_is_one_kernel():
    x, w, b = Var("x", X), const(8, 8, 3, 3), const(8, 1, 1)
    before = module([x], call("nn.relu", call("add", conv(x, w, padding=(1, 1, 1, 1)), b)))
    expected = module([x], kernel(lambda p0, p1, p2: call("nn.relu", call("add", conv(p0, p1, padding=(1, 1, 1, 1)),
                                                                            p2)), x, w, b))
    assert_same(fuse_ops(before), expected)


def residual_block():
    """relu(x) -> conv+bias+relu -> conv+bias -> + relu(x) -> relu: a diamond from the first relu to the add."""
    x = Var("x", X)
    w1, b1, w2, b2 = const(8, 8, 3, 3), const(8, 1, 1), const(8, 8, 3, 3), const(8, 1, 1)
    r = call("nn.relu", x)
    c1 = call("nn.relu", call("add", conv(r, w1, padding=(1, 1, 1, 1)), b1))
    c2 = call("add", conv(c1, w2, padding=(1, 1, 1, 1)), b2)
    return x, (w1, b1, w2, b2), module([x], call("nn.relu", call("add", c2, r)))


def test_residual_diamond():
    # the relu before the block is post-dominated by the residual add, but the path through the convolutions is
    # not elementwise: it stays alone. The residual add and the final relu join the second conv's kernel.
    x, (w1, b1, w2, b2), before = residual_block()
    pad = dict(padding=(1, 1, 1, 1))
    r = kernel(lambda p: call("nn.relu", p), x)
    c1 = kernel(lambda p0, p1, p2: call("nn.relu", call("add", conv(p0, p1, **pad), p2)), r, w1, b1)
    out = kernel(lambda p0, p1, p2, p3: call("nn.relu", call("add", call("add", conv(p0, p1, **pad), p2), p3)),
                 c1, w2, b2, r)
    assert_same(fuse_ops(before), module([x], out))


def test_injective_chain_is_one_kernel_that_stops_before_a_conv():
    x, w = Var("x", TensorType((1, 8, 36))), const(4, 8, 3, 3)
    chain = call("exp", call("transpose", call("reshape", x, newshape=(1, 6, 6, 8)), axes=(0, 3, 1, 2)))
    before = module([x], conv(call("add", chain, Constant(np.float32(1.0))), w))
    got = fuse_ops(before)
    assert kernels_of(got) == [["reshape", "transpose", "exp", "add"], ["nn.conv2d"]]
    one = Constant(np.float32(1.0))
    first = kernel(lambda p: call("add", call("exp", call("transpose", call("reshape", p, newshape=(1, 6, 6, 8)),
                                                          axes=(0, 3, 1, 2))), one), x)
    assert_same(got, module([x], kernel(lambda p0, p1: conv(p0, p1), first, w)))


def test_reduction_absorbs_its_elementwise_inputs(monkeypatch):
    # the COMM_REDUCE rule of fuse.py, on global_avg_pool2d declared a reduction (it reads each input once, so
    # inlining its producers costs nothing)
    monkeypatch.setattr(get_op("nn.global_avg_pool2d"), "pattern", Pattern.COMM_REDUCE)
    x, s = Var("x", X), const(8, 1, 1)
    before = module([x], call("nn.global_avg_pool2d", call("nn.relu", call("multiply", x, s))))
    expected = module([x], kernel(lambda p0, p1: call("nn.global_avg_pool2d",
                                                      call("nn.relu", call("multiply", p0, p1))), x, s))
    assert_same(fuse_ops(before), expected)


def test_global_pool_as_registered_absorbs_its_elementwise_inputs():
    x = Var("x", X)
    before = module([x], call("nn.global_avg_pool2d", call("nn.relu", x)))
    assert kernels_of(fuse_ops(before)) == [["nn.relu", "nn.global_avg_pool2d"]]


def test_max_ops_limits_group_size():
    x = Var("x", X)
    y = x
    for _ in range(5):
        y = call("nn.relu", y)
    before = module([x], y)
    assert kernels_of(fuse_ops(before, max_ops=32)) == [["nn.relu"] * 5]
    assert kernels_of(fuse_ops(before, max_ops=2)) == [["nn.relu"] * 2, ["nn.relu"] * 2, ["nn.relu"]]
    assert kernels_of(fuse_ops(before, max_ops=1)) == [["nn.relu"]] * 5
    relu2 = lambda p: call("nn.relu", call("nn.relu", p))  # noqa: E731
    first = kernel(relu2, x)
    expected = module([x], kernel(lambda p: call("nn.relu", p), kernel(relu2, first)))
    assert_same(fuse_ops(before, max_ops=2), expected)


def test_opaque_ops_stay_alone():
    x = Var("x", TensorType((2, 8)))
    y = call("exp", call("nn.softmax", call("add", x, const(8)), axis=1))
    got = fuse_ops(module([x], y))
    assert kernels_of(got) == [["add"], ["nn.softmax"], ["exp"]]
    z = Var("z", X)
    lrn = call("nn.relu", call("nn.lrn", call("nn.relu", z), size=3))
    assert kernels_of(fuse_ops(module([z], lrn))) == [["nn.relu"], ["nn.lrn"], ["nn.relu"]]


def test_a_model_output_ends_its_group():
    # relu(x) is returned and also read by exp: fusing it into exp's kernel would hide it from the output
    x = Var("x", X)
    r = call("nn.relu", x)
    got = fuse_ops(module([x], Tuple([r, call("exp", r)])))
    assert kernels_of(got) == [["nn.relu"], ["exp"]]


def test_no_fusion_makes_one_kernel_per_op():
    _, _, before = residual_block()
    got = fuse_ops(before, fuse=False)
    ops = [n.op for n in post_order(before.main.body) if isinstance(n, Call)]
    assert kernels_of(got) == [[op] for op in ops]


# ============================================================================================== layout


def to_blocked(mod: IRModule) -> IRModule:
    return propagate_layout(alter_layout(mod, VW))


def blocked_conv(x, w, **attrs):
    """conv2d_nchwc of an already blocked x, with w's OIHW -> OIHW8i8o transform (folded later)."""
    attrs = dict(dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)), **attrs)
    return call("nn.conv2d_nchwc", x, lt(w, "OIHW", "OIHW8i8o"), **attrs)


def test_conv_relu_conv_cancels_the_transforms_between_them():
    x, w1, w2 = Var("x", X), const(8, 8, 3, 3), const(8, 8, 3, 3)
    before = module([x], conv(call("nn.relu", conv(x, w1, padding=(1, 1, 1, 1))), w2))
    inner = call("nn.relu", blocked_conv(lt(x, "NCHW", "NCHW8c"), w1, padding=(1, 1, 1, 1)))
    expected = module([x], lt(blocked_conv(inner, w2), "NCHW8c", "NCHW"))
    assert_same(to_blocked(before), expected)


def test_add_of_two_blocked_values_stays_blocked():
    x, w1, w2 = Var("x", X), const(8, 8, 3, 3), const(8, 8, 1, 1)
    before = module([x], call("nn.relu", call("add", conv(x, w1, padding=(1, 1, 1, 1)), conv(x, w2))))
    a = blocked_conv(lt(x, "NCHW", "NCHW8c"), w1, padding=(1, 1, 1, 1))
    b = blocked_conv(lt(x, "NCHW", "NCHW8c"), w2)
    expected = module([x], lt(call("nn.relu", call("add", a, b)), "NCHW8c", "NCHW"))
    assert_same(to_blocked(before), expected)


def test_per_channel_constant_gets_blocked_and_others_do_not():
    x, w = Var("x", TensorType((1, 8, 6, 6))), const(16, 8, 1, 1)
    bias = np.arange(16, dtype=np.float32).reshape(16, 1, 1)
    before = module([x], call("multiply", call("add", conv(x, w), Constant(bias)), Constant(np.float32(2.0))))
    blocked_bias = Constant(bias.reshape(1, 2, 8, 1, 1).transpose(0, 1, 3, 4, 2))  # (1, C/8, 1, 1, 8)
    body = call("add", call("nn.conv2d_nchwc", lt(x, "NCHW", "NCHW8c"), lt(w, "OIHW", "OIHW8i8o")), blocked_bias)
    expected = module([x], lt(call("multiply", body, Constant(np.float32(2.0))), "NCHW8c", "NCHW"))
    assert_same(to_blocked(before), expected)
    # a constant that varies along W is not per-channel: the add happens after the transform back to NCHW
    along_w = const(1, 1, 6)
    got = to_blocked(module([x], call("add", conv(x, w), along_w)))
    assert got.main.body.op == "add" and got.main.body.args[0].op == "layout_transform"


def test_constant_first_operand_gets_blocked_too():
    x, w = Var("x", TensorType((1, 8, 6, 6))), const(16, 8, 1, 1)
    scale = np.arange(16, dtype=np.float32).reshape(16, 1, 1)
    before = module([x], call("multiply", Constant(scale), conv(x, w)))
    blocked = Constant(scale.reshape(1, 2, 8, 1, 1).transpose(0, 1, 3, 4, 2))
    body = call("nn.conv2d_nchwc", lt(x, "NCHW", "NCHW8c"), lt(w, "OIHW", "OIHW8i8o"))
    assert_same(to_blocked(before), module([x], lt(call("multiply", blocked, body), "NCHW8c", "NCHW")))


def test_pattern_rows_match_op_and_arguments():
    x, c = Var("x", TensorType((2, 3))), Constant(np.ones(3, np.float32))
    assert Pat("add", (ANY, CONST)).match(call("add", x, c)) == (x, c)
    assert Pat("add", (ANY, CONST)).match(call("add", c, x)) is None  # x is not a Constant
    assert Pat("add", (ANY,)).match(call("add", x, c)) is None  # arity
    assert Pat("multiply", (ANY, CONST)).match(call("add", x, c)) is None
    assert Pat(lambda opdef: opdef.pattern == Pattern.ELEMWISE).match(call("exp", x)) == ()


def test_pools_read_the_blocked_layout():
    x, w = Var("x", X), const(8, 8, 3, 3)
    pooled = call("nn.max_pool2d", conv(x, w, padding=(1, 1, 1, 1)), pool_size=(2, 2), strides=(2, 2))
    before = module([x], call("nn.global_avg_pool2d", pooled))
    c = blocked_conv(lt(x, "NCHW", "NCHW8c"), w, padding=(1, 1, 1, 1))
    p = call("nn.max_pool2d", c, pool_size=(2, 2), strides=(2, 2), layout="NCHW8c")
    expected = module([x], lt(call("nn.global_avg_pool2d", p, layout="NCHW8c"), "NCHW8c", "NCHW"))
    assert_same(to_blocked(before), expected)


def test_a_transform_and_its_inverse_cancel():
    x = Var("x", X)
    assert_same(propagate_layout(module([x], call("nn.relu", lt(lt(x, "NCHW", "NCHW4c"), "NCHW4c", "NCHW")))),
                module([x], call("nn.relu", x)))
    # A -> B -> C becomes A -> C
    y = Var("y", TensorType((1, 2, 6, 6, 4)))
    got = propagate_layout(module([y], lt(lt(y, "NCHW4c", "NCHW"), "NCHW", "NCHW8c")))
    assert_same(got, module([y], lt(y, "NCHW4c", "NCHW8c")))


def test_a_value_read_by_two_convolutions_is_transformed_once():
    x, w1, w2 = Var("x", X), const(8, 8, 3, 3), const(8, 8, 1, 1)
    before = module([x], call("add", conv(x, w1, padding=(1, 1, 1, 1)), conv(x, w2)))
    got = summarize(run_pipeline(before, PassContext(vector_width=VW)))
    assert [t["reads"] for t in got["layout_transforms"] if t["dst"] == "NCHW8c"] == ["input %x"]


@pytest.mark.parametrize("layout, opt_level", [("NCHW", 3), ("NCHWc", 1)])
def test_no_transforms_in_nchw_or_below_opt_level_2(layout, opt_level):
    _, _, before = residual_block()
    got = run_pipeline(before, PassContext(opt_level=opt_level, layout=layout, vector_width=VW))
    assert "layout_transform" not in summarize(got)["ops"]
    assert summarize(got)["ops"]["nn.conv2d"] == 2


def test_full_pipeline_folds_the_weight_transforms():
    _, _, before = residual_block()
    got = summarize(run_pipeline(before, PassContext(vector_width=VW)))
    # left: the input into the blocked layout, and the first conv's output back for the NCHW residual add
    assert [(t["src"], t["dst"]) for t in got["layout_transforms"]] == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    assert all(t["reads"] != "constant" for t in got["layout_transforms"])


# ============================================================================================== batch norm


def bn_params(c):
    gamma, beta, mean = (RNG.standard_normal(c).astype(np.float32) for _ in range(3))
    var = RNG.uniform(0.5, 2.0, c).astype(np.float32)
    return gamma, beta, mean, var


def affine(gamma, beta, mean, var, eps=1e-5):
    """The (scale, shift) of an inference batch norm, computed as the pass does (float64, then float32)."""
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    shift = beta.astype(np.float64) - mean.astype(np.float64) * scale
    return scale.astype(np.float32), shift.astype(np.float32)


def batch_norm(x, params):
    return call("nn.batch_norm", x, *(Constant(p) for p in params))


def test_batch_norm_folds_into_the_conv_before_it():
    x, w, params = Var("x", X), const(8, 8, 3, 3), bn_params(8)
    before = module([x], call("nn.relu", batch_norm(conv(x, w, padding=(1, 1, 1, 1)), params)))
    scale, shift = affine(*params)
    w_scaled = Constant(w.data * scale.reshape(-1, 1, 1, 1))
    expected = module([x], call("nn.relu", call("add", conv(x, w_scaled, padding=(1, 1, 1, 1)),
                                                Constant(shift.reshape(-1, 1, 1)))))
    assert_same(fold_batch_norm(before), expected)


def test_batch_norm_after_conv_bias_merges_the_biases():
    x, w, b, params = Var("x", X), const(8, 8, 1, 1), const(8, 1, 1), bn_params(8)
    before = module([x], batch_norm(call("add", conv(x, w), b), params))
    scale, shift = affine(*params)
    s = scale.reshape(-1, 1, 1)
    expected = module([x], call("add", conv(x, Constant(w.data * scale.reshape(-1, 1, 1, 1))),
                                Constant(b.data * s + shift.reshape(-1, 1, 1))))
    assert_same(fold_batch_norm(before), expected)


def test_batch_norm_without_conv_becomes_multiply_add():
    x, params = Var("x", X), bn_params(8)
    scale, shift = affine(*params)
    expected = module([x], call("add", call("multiply", x, Constant(scale.reshape(-1, 1, 1))),
                                Constant(shift.reshape(-1, 1, 1))))
    assert_same(fold_batch_norm(module([x], batch_norm(x, params))), expected)


def test_batch_norm_of_a_shared_conv_does_not_scale_its_weights():
    # the conv's output is also returned: scaling its weights would change that output
    x, w, params = Var("x", X), const(8, 8, 1, 1), bn_params(8)
    c = conv(x, w)
    got = fold_batch_norm(module([x], Tuple([batch_norm(c, params), c])))
    scale, shift = affine(*params)
    expected = module([x], Tuple([call("add", call("multiply", c, Constant(scale.reshape(-1, 1, 1))),
                                       Constant(shift.reshape(-1, 1, 1))), c]))
    assert_same(got, expected)


def test_an_integer_zero_point_term_and_bias_merge_into_one_add():
    """(x - c1) + c2 -> x + (c2 - c1) for int32 (exact, wrapping: an integer product's zero-point term and its
    bias); the float form keeps both ops (x - c1 + c2 rounds twice)."""
    c1, c2 = (Constant(np.array([[[7]], [[-3]]], np.int32)), Constant(np.array([[[2]], [[2**31 - 1]]], np.int32)))
    x = Var("x", TensorType((1, 2, 3, 3), "int32"))
    expected = module([x], call("add", x, Constant(np.array([[[-5]], [[2**31 - 1 + 3 - 2**32]]], np.int32))))
    assert_same(fold_batch_norm(module([x], call("add", call("subtract", x, c1), c2))), expected)
    xf, f1, f2 = Var("x", TensorType((1, 2, 3, 3))), const(2, 1, 1), const(2, 1, 1)
    kept = module([xf], call("add", call("subtract", xf, f1), f2))
    assert_same(fold_batch_norm(kept), kept)


# ============================================================================================== identity ops


def test_identity_ops_are_dropped_and_reshapes_merged():
    x = Var("x", TensorType((2, 3, 4)))
    before = module([x], call("exp", call("reshape", call("copy", x), newshape=(2, 3, 4))))
    assert_same(eliminate_identity_ops(before), module([x], call("exp", x)))
    chained = module([x], call("reshape", call("reshape", x, newshape=(6, 4)), newshape=(4, 6)))
    assert_same(eliminate_identity_ops(chained), module([x], call("reshape", x, newshape=(4, 6))))


# ============================================================================================== ResNet-18


@pytest.fixture(scope="module")
def resnet18(resnet18_path):
    model = onnx.load(str(resnet18_path))
    fused = run_pipeline(from_onnx(model), PassContext(vector_width=16))
    return summarize(fused), model


ELEMENTWISE = {"add", "multiply", "nn.relu", "clip"}


def test_resnet18_one_kernel_per_convolution(resnet18):
    summary, model = resnet18
    n_conv = sum(node.op_type == "Conv" for node in model.graph.node)
    assert n_conv == 20
    convs = ("nn.conv2d_nchwc", "nn.conv2d_winograd_nchwc")
    conv_kernels = [k["ops"] for k in summary["kernels"] if k["ops"][0] in convs]
    assert len(conv_kernels) == n_conv
    # Winograd takes the 3x3 stride-1 convolutions of the 56x56 (4), 28x28 (3: the stage's first is strided) and
    # 14x14 (3) stages; the 7x7 stage keeps direct ones (too few tiles, see passes/layout.py winograd_tile)
    assert sum(ops[0] == "nn.conv2d_winograd_nchwc" for ops in conv_kernels) == 4 + 3 + 3
    conv_kernels = [["nn.conv2d_nchwc"] + ops[1:] for ops in conv_kernels]
    allowed = (["nn.conv2d_nchwc", "add"],  # 1x1 shortcut: conv + bias
               ["nn.conv2d_nchwc", "add", "nn.relu"],  # conv + bias + relu
               ["nn.conv2d_nchwc", "add", "add", "nn.relu"])  # + residual add + relu
    assert all(ops in allowed for ops in conv_kernels), conv_kernels
    assert sum(ops == list(allowed[2]) for ops in conv_kernels) == 8  # two blocks per stage, four stages
    assert sum(ops == list(allowed[0]) for ops in conv_kernels) == 3  # stages 2-4 downsample
    # every relu and every add of the network is inside a conv (or the dense) kernel
    assert summary["ops"]["nn.relu"] == sum(ops.count("nn.relu") for ops in conv_kernels) == 17
    standalone = [k["ops"] for k in summary["kernels"] if set(k["ops"]) <= ELEMENTWISE]
    assert standalone == []
    assert summary["ops"].get("nn.batch_norm", 0) == 0


def test_resnet18_layout_transforms_only_at_the_input_and_after_the_global_pool(resnet18):
    summary, _ = resnet18
    transforms = [(t["src"], t["dst"], t["reads"].split(" (kernel")[0]) for t in summary["layout_transforms"]]
    assert transforms == [("NCHW", "NCHW3c", "input %input"), ("NCHW16c", "NCHW", "nn.global_avg_pool2d")]
    pools = [k["ops"] for k in summary["kernels"] if any("pool" in op for op in k["ops"])]
    assert pools == [["nn.max_pool2d"], ["nn.global_avg_pool2d"]]

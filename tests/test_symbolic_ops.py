"""Ops over dims known only at run time (size variables), family by family.

Type inference: an op's shape rule given a size variable n gives an expression in n that, evaluated at a size,
equals the rule's static result at that size (checked at several sizes). Compute: the op's te compute over the
size variable, scheduled once (the default schedule of the same computation at a typical size, replayed) and
built once, runs at sizes it was never built for and matches the op's numpy reference through the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.arith import evaluate
from compiler.codegen import build_library, vector_width
from compiler.run_time_schedule import default_schedule_for_sizes
from compiler.lower import LoweringError, lower, size_vars
from compiler.schedule import initial_state
from relayish import OpError, TensorType, Var, call, get_op, te
from relayish.interp import evaluate_one

from codegen_kernels import Lib

N = "n"  # where a shape below holds the size variable
HINT = 97
SIZES = (2, 6, 33)

# (family, op, input shapes with N, attrs)
CASES = [
    ("elementwise", "nn.relu", [(N, 7)], {}),
    ("elementwise", "exp", [(N, 3)], {}),
    ("elementwise", "erf", [(N,)], {}),
    ("elementwise", "sqrt", [(N, 4)], {}),
    ("broadcast", "add", [(1, N, 8), (8,)], {}),
    ("broadcast", "multiply", [(N, 1), (1, 5)], {}),
    ("broadcast", "power", [(N, 4), (1,)], {}),
    ("matmul", "nn.dense", [(N, 16), (8, 16)], {}),
    ("matmul", "nn.matmul", [(2, N, 16), (16, 8)], {}),
    ("conv", "nn.conv2d", [(1, 4, N, 9), (8, 4, 1, 1)], {}),
    ("conv", "nn.conv2d_nchwc", [(1, 2, 12, N, 8), (2, 2, 3, 3, 8, 8)], {"padding": (1, 1, 1, 1),
                                                                          "strides": (2, 2)}),
    ("conv", "nn.conv2d_nchwc", [(1, 1, N, 20, 8), (2, 1, 3, 3, 8, 8)], {"padding": (1, 1, 1, 1)}),
    ("pool", "nn.max_pool2d", [(1, 3, 8, N)], {"pool_size": (2, 2), "strides": (2, 2)}),
    ("pool", "nn.avg_pool2d", [(1, 3, 8, N)], {"pool_size": (3, 3), "padding": (1, 1, 1, 1)}),
    ("pool", "nn.global_avg_pool2d", [(1, 3, 8, N)], {}),
    ("pool", "nn.max_pool2d", [(1, 3, 9, N)], {"pool_size": (2, 2), "strides": (2, 2), "ceil_mode": True}),
    ("pool", "nn.avg_pool2d", [(1, 3, 9, N)], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1),
                                               "ceil_mode": True}),
    ("reduce", "mean", [(1, N, 16)], {"axes": (-1,), "keepdims": True}),
    ("reduce", "sum", [(1, N, 16)], {"axes": (1,), "keepdims": False}),
    ("rows", "nn.softmax", [(2, N)], {"axis": -1}),
    ("rows", "nn.softmax", [(N, 19)], {"axis": -1}),
    ("rows", "nn.layer_norm", [(1, N, 16), (16,), (16,)], {}),
    ("movement", "transpose", [(1, N, 16)], {"axes": (0, 2, 1)}),
    ("movement", "concatenate", [(1, N, 16), (1, N, 8)], {"axis": 2}),
]
IDS = [f"{family}-{op}-{k}" for k, (family, op, _, _) in enumerate(CASES)]
POSITIVE = {"sqrt", "power"}  # ops fed positive inputs


def shapes_at(shapes, n):
    return [tuple(n if d == N else d for d in s) for s in shapes]


def typed_call(op, shapes, attrs):
    return call(op, *[Var(f"x{k}", TensorType(s)) for k, s in enumerate(shapes)], **attrs)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_shape_rule_over_a_size_variable_agrees_with_the_static_rule(case):
    _, op, shapes, attrs = case
    n = te.size_var("n")
    out = typed_call(op, shapes_at(shapes, n), attrs).type
    for size in SIZES:
        static = typed_call(op, shapes_at(shapes, size), attrs).type
        assert tuple(evaluate(d, {n: size}) for d in out.shape) == static.shape, f"{op} at n={size}"
        assert out.dtype == static.dtype


def generic_kernel(op, shapes, attrs, name):
    n = te.size_var("n")
    node = typed_call(op, shapes_at(shapes, n), attrs)
    inputs = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes_at(shapes, n))]
    state = initial_state([get_op(op).compute(inputs, node.attrs, node.type)], inputs)
    sched = default_schedule_for_sizes(state, {n: HINT}, vector_width())
    return lower(sched.apply(state), name)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    funcs = [generic_kernel(op, shapes, attrs, f"k{k}") for k, (_, op, shapes, attrs) in enumerate(CASES)]
    return Lib(build_library(funcs, None, str(tmp_path_factory.mktemp("symbolic") / "ops.so"))), funcs


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_one_kernel_runs_sizes_it_was_not_built_for(kernels, k):
    lib, funcs = kernels
    _, op, shapes, attrs = CASES[k]
    func = funcs[k]
    assert func.attrs["size_vars"] == ("n",)
    n_in, n_out = func.attrs["num_inputs"], func.attrs["num_outputs"]
    for size in SIZES:
        rng = np.random.default_rng(size)
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes_at(shapes, size)]
        if op in POSITIVE:
            arrays = [np.abs(a) + np.float32(0.5) for a in arrays]
        want = evaluate_one(typed_call(op, shapes_at(shapes, size), attrs), arrays)
        values = {v: size for v in size_vars(func.params)}
        scratch = [np.zeros(max(1, evaluate(p.size, values)), np.float32) for p in func.params[n_in + n_out:-1]]
        out = np.full(want.shape, np.nan, np.float32)
        got = lib.call(func.name, *arrays, out, *scratch, np.array([size], np.int32))[n_in]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{op} at n={size}")


def test_a_dim_that_cannot_be_shown_to_broadcast_is_refused():
    n, m = te.size_var("n"), te.size_var("m")
    with pytest.raises(OpError, match="cannot be shown equal before run time"):
        typed_call("add", [(n, 4), (m, 4)], {})
    assert typed_call("add", [(n, 4), (1, 4)], {}).type.shape == (n, 4)


def test_pooling_in_ceil_mode_that_may_drop_its_last_window_is_refused():
    with pytest.raises(OpError, match="ceil mode over a dim known only at run time"):
        typed_call("nn.max_pool2d", [(1, 3, 8, te.size_var("n"))], {"pool_size": (1, 1), "strides": (2, 2),
                                                                     "ceil_mode": True})


def test_a_schedule_that_buffers_a_whole_run_time_row_is_refused_clearly():
    """The plain NCHW convolution's default schedule keeps a whole output row in a local buffer: over a row of
    run-time length that buffer would have no size, which lowering says (models run the blocked convolution)."""
    with pytest.raises(LoweringError, match="known only at run time"):
        generic_kernel("nn.conv2d", [(1, 3, 12, N), (8, 3, 3, 3)], {"padding": (1, 1, 1, 1), "strides": (2, 2)},
                       "refused")


def test_bind_sizes_gives_a_static_twin_with_the_same_stages():
    n = te.size_var("n")
    x = te.placeholder((n, 19), name="x")
    out = get_op("nn.softmax").compute([x], typed_call("nn.softmax", [(n, 19)], {"axis": -1}).attrs,
                                       TensorType((n, 19)))
    twin = te.bind_sizes([out], {n: 5})
    assert twin[id(out)].shape == (5, 19) and twin[id(x)].shape == (5, 19)
    assert [t.name for t in te.stage_dag([out])] == [t.name for t in te.stage_dag([twin[id(out)]])]


def test_canonical_dims_keep_their_values_and_make_equal_sizes_equal():
    """relayish/dims.py: every rewrite is exact on integers (checked at many sizes, negative ones too), and the
    two paths of a residual block to one size give one expression."""
    from relayish.dims import canonical
    h, w = te.size_var("h"), te.size_var("w")
    exprs = [(((h + 2) - 3) // 2) + 1, ((h * 4 + w * 8 + 5) // 4) % 3 + (h + 1) * (w - 2), (h * 6 + 7) // 3 - (w % 5) * 2,
             ((h + 6 - 6 - 1) // 2 + 1 + 2 - 2 - 1) // 2 + 1, (h - w) * (h + w) - h * h, te.max_(h, w) // 2 + 0 * w]
    rng = np.random.default_rng(0)
    for e in exprs:
        c = canonical(e)
        for vh, vw in rng.integers(-40, 60, size=(200, 2)):
            assert evaluate(c, {h: int(vh), w: int(vw)}) == evaluate(e, {h: int(vh), w: int(vw)}), te.expr_str(e)
    assert canonical((((h + 2) - 3) // 2) + 1) == canonical(((h - 1) // 2) + 1)
    assert canonical((h - w) * (h + w) - h * h) == canonical(0 - w * w)
    assert canonical(h - h + 3) == 3 and TensorType((1, (h + 2) - 2)).shape == (1, h)

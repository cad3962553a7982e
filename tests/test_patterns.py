"""compiler/passes/patterns.py: the decompositions exporters emit become layer_norm / gelu (structure), the
result equals the decomposed graph's (numerics), and near misses stay as they are."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from compiler.passes.patterns import recognize_patterns
from relayish import Call, Function, IRModule, TensorType, Var, call, const
from relayish.expr import post_order
from relayish.interp import evaluate_one

X_TYPE = TensorType((3, 4, 8))


def ops_of(mod):
    return Counter(n.op for n in post_order(mod.main.body) if isinstance(n, Call))


def module(fn):
    x = Var("x", X_TYPE)
    return IRModule(Function([x], fn(x)))


def decomposed_ln(x, axes=(-1,), eps=1e-5, square=lambda d: call("power", d, const(2.0)), affine=True):
    mean = call("mean", x, axes=axes, keepdims=True)
    diff = call("subtract", x, mean)
    var = call("mean", square(diff), axes=axes, keepdims=True)
    y = call("divide", diff, call("sqrt", call("add", var, const(eps))))
    if not affine:
        return y
    rng = np.random.default_rng(0)
    gamma = const(rng.standard_normal(8).astype(np.float32))
    beta = const(rng.standard_normal(8).astype(np.float32))
    return call("add", call("multiply", y, gamma), beta)


def gelu_erf(x, order=0, half=0.5):
    erf = call("erf", call("divide", x, const(math.sqrt(2.0))) if order == 0 else
               call("multiply", const(1 / math.sqrt(2.0)), x))
    one_plus = call("add", erf, const(1.0)) if order == 0 else call("add", const(1.0), erf)
    if order == 0:
        return call("multiply", call("multiply", x, one_plus), const(half))
    return call("multiply", call("multiply", const(half), x), one_plus)


def gelu_tanh(x, cube=lambda x: call("power", x, const(3.0))):
    inner = call("add", x, call("multiply", const(0.044715), cube(x)))
    t = call("tanh", call("multiply", const(math.sqrt(2 / math.pi)), inner))
    return call("multiply", call("multiply", const(0.5), x), call("add", const(1.0), t))


CASES = {
    "layer_norm": (lambda x: decomposed_ln(x), {"nn.layer_norm": 1}),
    "layer_norm_square_by_multiply": (lambda x: decomposed_ln(x, square=lambda d: call("multiply", d, d)),
                                      {"nn.layer_norm": 1}),
    "layer_norm_two_axes": (lambda x: decomposed_ln(x, axes=(1, 2), affine=False), {"nn.layer_norm": 1}),
    "layer_norm_no_affine": (lambda x: decomposed_ln(x, affine=False), {"nn.layer_norm": 1}),
    "gelu_erf": (gelu_erf, {"nn.gelu": 1}),
    "gelu_erf_other_order": (lambda x: gelu_erf(x, 1), {"nn.gelu": 1}),
    "gelu_tanh": (gelu_tanh, {"nn.gelu": 1}),
    "gelu_tanh_cube_by_multiply": (lambda x: gelu_tanh(x, lambda x: call("multiply", call("multiply", x, x), x)),
                                   {"nn.gelu": 1}),
    "square": (lambda x: call("power", x, const(2.0)), {"multiply": 1}),
    "cube": (lambda x: call("power", x, const(3.0)), {"multiply": 2}),
    # near misses: not the pattern, left alone (but still simplified where a rule applies)
    "mean_over_a_leading_axis": (lambda x: decomposed_ln(x, axes=(0,), affine=False), {"mean": 2, "divide": 1}),
    "gelu_with_wrong_half": (lambda x: gelu_erf(x, half=0.4), {"erf": 1, "nn.gelu": 0}),
    "other_power": (lambda x: call("power", x, const(4.0)), {"power": 1}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recognized_and_equal(name):
    build, expected = CASES[name]
    before = module(build)
    after = recognize_patterns(before)
    counts = ops_of(after)
    for op, n in expected.items():
        assert counts[op] == n, f"{name}: {dict(counts)}"
    x = np.random.default_rng(1).standard_normal(X_TYPE.shape).astype(np.float32)
    want, got = evaluate_one(before, [x]), evaluate_one(after, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_recognized_forms_are_single_ops():
    assert sum(ops_of(recognize_patterns(module(decomposed_ln))).values()) == 1
    assert sum(ops_of(recognize_patterns(module(gelu_tanh))).values()) == 1

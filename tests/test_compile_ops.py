"""Three-way numerics of compiled single-op models: compiled module vs the numpy interpreter vs onnxruntime,
over grids of attributes (strides, pads, groups, dilations, ceil_mode, broadcasts, opsets), in both layouts."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import compile_model
from frontends import from_onnx
from harness import assert_close, case_id, make_model, random_feeds, run_ort, three_way_random
from relayish.interp import evaluate
from test_frontend import BROADCASTS, CONV_CASES, GEMM_CASES, POOL_CASES, conv_model


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("case", CONV_CASES, ids=case_id)
def test_conv(case, layout):
    three_way_random(conv_model(case, 11), layout=layout)


def test_conv_wide_channels_blocked():
    rng = np.random.default_rng(3)
    consts = {"w": rng.standard_normal((32, 16, 3, 3)).astype(np.float32),
              "b": rng.standard_normal(32).astype(np.float32)}
    model = make_model("Conv", {"x": (1, 16, 13, 11)}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 17, consts)
    three_way_random(model)


@pytest.mark.parametrize("case", POOL_CASES, ids=case_id)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool(case, op):
    three_way_random(make_model(op, {"x": (2, 3, 9, 10)}, case, 19))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    three_way_random(make_model(op, {"x": (2, 5, 6, 7)}))


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary(op, shapes):
    three_way_random(make_model(op, {"a": shapes[0], "b": shapes[1]}), positive=op == "Div")


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}),
                                      ("Exp", {}), ("Clip", {"min": -0.5, "max": 0.7}),
                                      ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSigmoid", {})])
def test_unary(op, attrs):
    opset = 7 if op == "Clip" else 17
    three_way_random(make_model(op, {"x": (2, 3, 4, 5)}, attrs, opset))


@pytest.mark.parametrize("op,attrs", [("Floor", {}), ("Ceil", {}), ("Round", {}), ("Sign", {}), ("Elu", {"alpha": 0.5}),
                                      ("Selu", {}), ("Celu", {"alpha": 2.0}), ("Softplus", {}), ("Softsign", {}),
                                      ("HardSwish", {}), ("Mish", {}), ("ThresholdedRelu", {"alpha": 0.3}),
                                      ("Shrink", {"lambd": 0.4, "bias": 0.1}), ("Sinh", {}), ("Cosh", {}),
                                      ("Asinh", {})])
def test_unary_long_tail(op, attrs):
    three_way_random(make_model(op, {"x": (2, 3, 4, 5)}, attrs, 18))


def test_prelu_broadcast_slope():
    three_way_random(make_model("PRelu", {"x": (2, 3, 4, 5), "slope": (3, 1, 1)}, opset=16))


def test_sum_variadic():
    three_way_random(make_model("Sum", {"a": (2, 3, 4), "b": (4,), "c": (3, 1)}, opset=13))


@pytest.mark.parametrize("b_const", [True, False])
@pytest.mark.parametrize("case", GEMM_CASES, ids=case_id)
def test_gemm(case, b_const):
    case = dict(case)
    c_shape = case.pop("c", (4, 6))
    rng = np.random.default_rng(4)
    a_shape = (5, 4) if case.get("transA") else (4, 5)
    b_shape = (6, 5) if case.get("transB") else (5, 6)
    inputs, consts = {"a": a_shape}, {}
    if b_const:
        consts["b"] = rng.standard_normal(b_shape).astype(np.float32)
    else:
        inputs["b"] = b_shape
    if c_shape is not None:
        consts["c"] = rng.standard_normal(c_shape).astype(np.float32)
    three_way_random(make_model("Gemm", inputs, case, 13, consts))


@pytest.mark.parametrize("shapes", [((4, 5), (5, 6)), ((2, 4, 5), (5, 6)), ((2, 1, 4, 5), (3, 5, 6)), ((5,), (5, 3))],
                         ids=str)
def test_matmul(shapes):
    three_way_random(make_model("MatMul", {"a": shapes[0], "b": shapes[1]}))


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (13, 1), (13, -1)])
def test_softmax(opset, axis):
    three_way_random(make_model("Softmax", {"x": (2, 3, 5)}, {"axis": axis}, opset))


def test_lrn():
    three_way_random(make_model("LRN", {"x": (1, 6, 5, 5)}, dict(size=3, alpha=1e-2, beta=0.75, bias=1.0)),
                     positive=True)


@pytest.mark.parametrize("perm", [None, (0, 2, 3, 1)], ids=str)
def test_transpose(perm):
    three_way_random(make_model("Transpose", {"x": (2, 3, 4, 5)}, {"perm": list(perm)} if perm else {}))


def test_concat_flatten_reshape():
    three_way_random(make_model("Concat", {"a": (2, 3, 4), "b": (2, 5, 4)}, {"axis": 1}))
    three_way_random(make_model("Flatten", {"x": (2, 3, 4, 5)}, {"axis": 2}, 13))
    three_way_random(make_model("Reshape", {"x": (2, 3, 4)}, opset=13, consts={"s": np.array([4, -1], np.int64)}))


def test_unfused_opt_level_0_matches():
    rng = np.random.default_rng(5)
    consts = {"w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32)}
    three_way_random(make_model("Conv", {"x": (1, 4, 8, 8)}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 13, consts),
           opt_level=0)


# ---- NaN and Inf: propagated as onnxruntime propagates them, op by op ----

def special_feeds(model, seed=0, all_nan=False):
    """random_feeds with ~20% NaN, ~5% +inf and ~5% -inf at seeded positions (or every element NaN)."""
    feeds = random_feeds(model, seed)
    rng = np.random.default_rng(seed + 100)
    for x in feeds.values():
        u = rng.random(x.shape)
        x[u < 0.2] = np.nan
        x[(u >= 0.2) & (u < 0.25)] = np.inf
        x[(u >= 0.25) & (u < 0.3)] = -np.inf
        if all_nan:
            x[...] = np.nan
    return feeds


def assert_same_specials(ours, ref, what, nan_superset=False):
    """NaN at the same positions (or, if nan_superset, at least where ref has one), +-inf at the same positions,
    finite values within the usual tolerance."""
    assert ours.shape == ref.shape, what
    nan_ours, nan_ref = np.isnan(ours), np.isnan(ref)
    if nan_superset:
        assert not (nan_ref & ~nan_ours).any(), f"{what}: NaN dropped where onnxruntime has one"
    else:
        assert np.array_equal(nan_ours, nan_ref), \
            f"{what}: {nan_ours.sum()} NaN where onnxruntime has {nan_ref.sum()} (positions differ)"
    both = ~nan_ours & ~nan_ref
    assert np.array_equal(np.isinf(ours) & both, np.isinf(ref) & both), f"{what}: inf positions differ"
    assert np.array_equal(ours[np.isinf(ours) & both], ref[np.isinf(ref) & both]), f"{what}: inf signs differ"
    finite = both & np.isfinite(ref)
    assert_close(ours[finite], ref[finite], what)


def check_specials(model, seed=0, nan_superset=False):
    """Compiled module vs onnxruntime (and vs the interpreter, always exactly) on NaN/Inf feeds and all-NaN feeds."""
    sess = compile_model(model)
    module = from_onnx(model)
    for all_nan in (False, True):
        feeds = special_feeds(model, seed, all_nan)
        ours = sess.run(None, feeds)
        for name, a, b, c in zip(sess.output_names, ours, evaluate(module, feeds), run_ort(model, feeds)):
            assert_same_specials(a, b, f"{name} vs interpreter (all_nan={all_nan})")
            assert_same_specials(a, c, f"{name} vs onnxruntime (all_nan={all_nan})", nan_superset)


@pytest.mark.parametrize("op,attrs,opset", [
    ("Relu", {}, 17), ("LeakyRelu", {"alpha": 0.2}, 17), ("Sigmoid", {}, 17), ("Tanh", {}, 17), ("Exp", {}, 17),
    ("Clip", {"min": -0.5, "max": 0.7}, 7), ("HardSigmoid", {}, 17), ("Softmax", {"axis": -1}, 13),
    ("GlobalAveragePool", {}, 17), ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 17)])
def test_unary_nan_inf(op, attrs, opset):
    check_specials(make_model(op, {"x": (2, 3, 5, 7)}, attrs, opset))


@pytest.mark.parametrize("op", ["Max", "Min", "Add", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,))], ids=str)
def test_binary_nan_inf(op, shapes):
    check_specials(make_model(op, {"a": shapes[0], "b": shapes[1]}, opset=13))


def test_max_with_nan_constant():
    """A NaN in a constant operand propagates too, in either operand position."""
    c = np.array([0.0, np.nan, 1.0, -np.inf], np.float32)
    check_specials(make_model("Max", {"x": (3, 4)}, consts={"c": c}, opset=13))
    check_specials(make_model("Min", {"x": (3, 4)}, consts={"c": c}, opset=13))


@pytest.mark.parametrize("case", [dict(kernel_shape=[1, 1]), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                                  dict(kernel_shape=[3, 3], strides=[2, 2], group=2)], ids=case_id)
def test_conv_gemm_matmul_nan_inf(case):
    rng = np.random.default_rng(2)
    k = case["kernel_shape"][0]
    consts = {"w": rng.standard_normal((6, 4 // case.get("group", 1), k, k)).astype(np.float32),
              "b": rng.standard_normal(6).astype(np.float32)}
    check_specials(make_model("Conv", {"x": (1, 4, 7, 6)}, case, 13, consts))
    check_specials(make_model("Gemm", {"a": (3, 5)}, {"transB": 1}, 13,
                              {"b": rng.standard_normal((4, 5)).astype(np.float32)}))
    check_specials(make_model("MatMul", {"a": (2, 3, 5), "b": (5, 4)}))


@pytest.mark.parametrize("case", POOL_CASES[:4] + [dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
                         ids=case_id)
def test_max_pool_nan_inf(case):
    """Max pools give NaN for a window holding any NaN (numpy's max, the ONNX reference). onnxruntime's MLAS kernel
    keeps a NaN only at some window positions (e.g. the last of 4 taps and the 8th of 9, not the 9th), so against
    it the check is that every NaN of onnxruntime is one of ours, all-NaN windows included."""
    check_specials(make_model("MaxPool", {"x": (2, 3, 9, 10)}, case, 19), nan_superset=True)
    check_specials(make_model("GlobalMaxPool", {"x": (2, 3, 5, 6)}), nan_superset=True)

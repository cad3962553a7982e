"""Integer products of quantized models (relayish/ops/qnn.py, frontends/onnx/ops/integer.py): ConvInteger and
MatMulInteger over every mix of uint8 / int8 operands, zero points absent, per tensor, per output channel and per
row, odd shapes, groups, strides, padding and dilation; compiled vs the numpy interpreter vs onnxruntime (onnx's
reference where onnxruntime has no kernel for the types). int32 results must be equal: the products are exact.
The import's form (uint8 data x int8 weights, only the zero-point terms that are not zero) is checked too."""
from __future__ import annotations

import numpy as np
import pytest

from frontends import from_onnx
from harness import case_id, node_model, run_ort_or_none, run_reference, three_way
from relayish.expr import Call, post_order

I32, U8, I8 = np.int32, np.uint8, np.int8
NAMES = {U8: "u8", I8: "s8"}


def q(rng, dtype, *shape):
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, shape).astype(dtype)


def ort_or_onnx(model, feeds):
    """onnxruntime, or onnx's reference for the type mixes onnxruntime has no kernel for."""
    out = run_ort_or_none(model, feeds)
    return out if out is not None else run_reference(model, feeds)


def conv_id(case):
    x, w, xz, wz, attrs, xs, ws = case
    return case_id((f"{NAMES[x]}x{NAMES[w]}", f"xz={xz}", f"wz={wz}", attrs, xs, ws))


def matmul_id(case):
    a, sa, b, sb, const, az, bz = case
    return case_id((f"{NAMES[a]}x{NAMES[b]}", sa, sb, "const" if const else "input", f"az={az}", f"bz={bz}"))


def calls(model) -> list[str]:
    return [n.op for n in post_order(from_onnx(model).main.body) if isinstance(n, Call)]


# ---- ConvInteger ----

CONV_CASES = [
    # (x dtype, w dtype, x zero point, w zero point: None, "scalar" or "channel", attrs, x shape, w shape)
    (U8, I8, 131, None, dict(pads=[1, 1, 1, 1]), (1, 16, 9, 11), (24, 16, 3, 3)),
    (U8, I8, 7, "scalar", dict(strides=[2, 2], pads=[1, 0, 2, 1]), (2, 5, 10, 9), (6, 5, 3, 3)),
    (U8, U8, 200, "channel", dict(pads=[2, 2, 2, 2], dilations=[2, 1]), (1, 8, 8, 7), (12, 8, 3, 2)),
    (I8, I8, -3, "channel", dict(group=2, pads=[1, 1, 1, 1]), (1, 12, 6, 7), (10, 6, 3, 3)),
    (I8, U8, None, "scalar", dict(), (1, 3, 5, 5), (4, 3, 1, 1)),
    (U8, I8, None, None, dict(group=3, strides=[1, 2]), (1, 9, 7, 8), (9, 3, 2, 3)),
]


def _zero_point(rng, kind, dtype, channels):
    if kind is None:
        return None
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, () if kind == "scalar" else (channels,)).astype(dtype)


@pytest.mark.parametrize("case", CONV_CASES, ids=conv_id)
def test_conv_integer_three_way(case):
    x_dtype, w_dtype, x_zp, w_zp, attrs, x_shape, w_shape = case
    rng = np.random.default_rng(1)
    inputs = [("x", x_dtype, list(x_shape)), ("w", q(rng, w_dtype, *w_shape)),
              ("xz", x_dtype(x_zp)) if x_zp is not None else None]
    wz = _zero_point(rng, w_zp, w_dtype, w_shape[0])
    if wz is not None:
        inputs = (inputs if inputs[-1] is not None else inputs[:-1] + [None]) + [("wz", wz)]
    while inputs[-1] is None:
        inputs.pop()
    model = node_model("ConvInteger", inputs, outputs=[("y", I32)], attrs=attrs, domain="")
    three_way(model, {"x": q(rng, x_dtype, *x_shape)}, reference=ort_or_onnx)


def test_conv_integer_with_a_run_time_weight():
    rng = np.random.default_rng(2)
    model = node_model("ConvInteger", [("x", U8, [1, 4, 6, 6]), ("w", I8, [5, 4, 3, 3]), ("xz", U8(9)),
                                       ("wz", I8(-2))], outputs=[("y", I32)], attrs=dict(pads=[1, 1, 1, 1]),
                       domain="")
    three_way(model, {"x": q(rng, U8, 1, 4, 6, 6), "w": q(rng, I8, 5, 4, 3, 3)}, reference=run_reference)


def test_symmetric_int8_weights_import_as_one_uint8_product():
    """quantize_dynamic's form (uint8 data, int8 weights of zero point 0): one qnn.conv2d on the uint8 input, and
    only the data zero point's term after it (folded: both are constants here); int8 data is flipped to uint8 by
    one xor."""
    w = np.ones((4, 3, 3, 3), I8)
    model = node_model("ConvInteger", [("x", U8, [1, 3, 5, 5]), ("w", w), ("xz", U8(3)), ("wz", I8(0))],
                       outputs=[("y", I32)], domain="")
    assert calls(model) == ["qnn.conv2d", "subtract"]  # minus the constant zx * (sum of each channel's weights)
    model = node_model("ConvInteger", [("x", I8, [1, 3, 5, 5]), ("w", w)], outputs=[("y", I32)], domain="")
    ops = calls(model)
    assert ops[:2] == ["bitwise_xor", "bitcast"] and ops.count("qnn.conv2d") == 1, ops


# ---- MatMulInteger ----

MATMUL_CASES = [
    # (a dtype, a shape, b dtype, b shape, b constant, a zero point: None/"scalar"/"row", b zero point)
    (U8, (2, 5, 24), I8, (24, 40), True, "scalar", None),
    (U8, (7, 13), U8, (13, 9), True, "row", "column"),
    (I8, (3, 4, 10), I8, (10, 6), True, "scalar", "scalar"),
    (I8, (11,), U8, (11, 5), True, None, "column"),
    (U8, (2, 3, 8), I8, (2, 8, 5), False, "scalar", "scalar"),
    (U8, (4, 9), U8, (9,), True, "row", "scalar"),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=matmul_id)
def test_matmul_integer_three_way(case):
    a_dtype, a_shape, b_dtype, b_shape, b_const, a_zp, b_zp = case
    rng = np.random.default_rng(3)
    b = q(rng, b_dtype, *b_shape)
    rows, cols = (a_shape[-2] if len(a_shape) > 1 else 1), (b_shape[-1] if len(b_shape) > 1 else 1)
    az = None if a_zp is None else _zero_point(rng, "scalar" if a_zp == "scalar" else "channel", a_dtype, rows)
    bz = None if b_zp is None else _zero_point(rng, "scalar" if b_zp == "scalar" else "channel", b_dtype, cols)
    inputs = [("a", a_dtype, list(a_shape)), ("b", b) if b_const else ("b", b_dtype, list(b_shape)),
              ("az", az) if az is not None else None, ("bz", bz) if bz is not None else None]
    while inputs[-1] is None:
        inputs.pop()
    feeds = {"a": q(rng, a_dtype, *a_shape)}
    if not b_const:
        feeds["b"] = b
    def per_row(model, feeds):  # neither onnxruntime nor onnx's reference takes a per-row zero point (the spec does)
        a = feeds["a"].astype(np.int64) - az.astype(np.int64)[:, None]
        return [(a @ (b.astype(np.int64) - (0 if bz is None else bz.astype(np.int64)))).astype(I32)]
    three_way(node_model("MatMulInteger", inputs, outputs=[("y", I32)], domain=""), feeds,
              reference=per_row if a_zp == "row" else ort_or_onnx)

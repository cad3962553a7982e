"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the elementwise long tail: Sin, Cos,
Tan, Asin, Acos, Atan (float32 / float64 / float16, edge values: signed zeros, multiples of pi/2, huge arguments,
denormals, NaN, infinities, outside [-1, 1]), IsNaN and IsInf (each detect_* combination), BitwiseAnd / Or / Xor /
Not of every integer width, and BitShift (LEFT / RIGHT, unsigned at opset 11+, signed at opset 28, amounts out of
range). Floats are compared in ulps of the result's dtype with the NaN pattern equal; integers and bools exactly.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from compiler import compile_model
from frontends import from_onnx
from harness import compiled_and_interpreted, edge_values, elem, run_ort_or_none, with_output_shapes
from relayish.interp import evaluate
from test_compile_dtypes import INTS

TRIG = ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan"]
OUT = helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)  # typed by shape inference
NUMPY = {"Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan}


def model_of(op: str, inputs: dict, shape=(4, 37), opset=21, **attrs):
    """One node `op` over graph inputs {name: dtype} of one shape (37: vector loops get a tail)."""
    graph = helper.make_graph([helper.make_node(op, list(inputs), ["y"], **attrs)], op,
                              [helper.make_tensor_value_info(n, elem(d), shape) for n, d in inputs.items()], [OUT])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def run_three(model, feeds):
    """(compiled, interpreted, onnxruntime's or None where it has no kernel, opset or feed type for the model)."""
    (ours,), (interp,) = compiled_and_interpreted(model, feeds)
    if any(v.dtype.name == "bfloat16" for v in feeds.values()):  # onnxruntime's Python API cannot feed it
        return ours, interp, None
    try:
        ref, = run_ort_or_none(model, feeds) or [None]
    except Exception as e:  # an opset onnxruntime does not know yet (BitShift-28)
        if "opset" not in str(e).lower():
            raise
        ref = None
    return ours, interp, ref


def ulp_distance(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| in units of the spacing of ref's dtype at ref; NaN patterns must agree, infinities match."""
    assert np.array_equal(np.isnan(got), np.isnan(ref)), "NaN pattern differs"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    ok = ~np.isnan(r)
    assert np.array_equal(g[ok & np.isinf(r)], r[ok & np.isinf(r)]), "infinities differ"
    finite = ok & np.isfinite(r)
    spacing = np.spacing(np.abs(ref[finite])).astype(np.float64)
    spacing = np.maximum(spacing, np.finfo(ref.dtype).smallest_subnormal)
    return float(np.max(np.abs(g[finite] - r[finite]) / spacing, initial=0.0))


def trig_inputs(op: str, dtype: str, shape=(4, 37)) -> np.ndarray:
    rng = np.random.default_rng(3)
    if op in ("Asin", "Acos"):
        x = rng.uniform(-1.05, 1.05, shape)
        edges = [-1.0, 1.0, 0.0, -0.0, 0.5, -0.5, 0.9999999, -0.9999999, 1.5, -2.0, 1e-40, np.nan, np.inf]
    else:
        x = rng.standard_normal(shape) * 4
        pi = np.pi
        edges = [0.0, -0.0, pi / 2, -pi / 2, pi, 3 * pi / 2, 2 * pi, 1e-40, -1e-6, 1e5, -1e5, 524287.9, 524288.0,
                 1e10, -3e20, 3.4e38, -3.4e38, 1e4 * pi, np.nan, np.inf, -np.inf]
        if dtype == "float16":
            edges = [e for e in edges if not np.isfinite(e) or abs(e) < 6e4]
    x.reshape(-1)[:len(edges)] = edges
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", TRIG)
def test_trigonometry(op, dtype):
    x = trig_inputs(op, dtype)
    ours, interp, ref = run_three(model_of(op, {"x": dtype}), {"x": x})
    assert ours.dtype == np.dtype(dtype)
    if dtype == "float64":  # computed in double to ~1e-11 (not float64 precision); sin / cos / tan of
        # |x| >= 2^19 reduce x rounded to float32 (compiler/codegen/trig.py): compared where that is exact
        exact = (np.abs(x) < 2**19) | (x.astype(np.float32).astype(np.float64) == x) | ~np.isfinite(x)
        assert np.array_equal(np.isnan(ours), np.isnan(interp))
        ok = exact & ~np.isnan(interp)
        rel = np.abs(ours[ok] - interp[ok]) / np.maximum(np.abs(interp[ok]), 1e-300)
        assert np.nanmax(np.where(np.isinf(interp[ok]), 0, rel)) <= 1e-10
    else:  # the interpreter rounds the float64 value once; so do we, from double (float16: through float32)
        assert ulp_distance(ours, interp) <= 0.51
    if ref is not None and dtype != "float64":  # onnxruntime's are within a few ulps below 1e5
        finite = np.isfinite(x) & (np.abs(x.astype(np.float64)) < 1e5)
        assert ulp_distance(ours[finite], ref[finite]) <= 4
        assert np.array_equal(np.isnan(ours), np.isnan(ref))
    elif ref is not None:
        np.testing.assert_allclose(ours[np.abs(x) < 1e5], ref[np.abs(x) < 1e5], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("op", ["Sin", "Cos", "Tan"])
def test_trigonometry_of_every_float32_exponent(op):
    """Arguments from 1e-40 to 3.4e38: Cody-Waite reduction below 2^19, Payne-Hanek above; <= 0.51 ulp."""
    rng = np.random.default_rng(5)
    x = (10 ** rng.uniform(-40, 38.5, 4096) * rng.choice([-1, 1], 4096)).astype(np.float32).reshape(64, 64)
    ours = compile_model(model_of(op, {"x": "float32"}, shape=(64, 64))).run(None, {"x": x})[0]
    assert ulp_distance(ours, NUMPY[op](x.astype(np.float64)).astype(np.float32)) <= 1.0
    err = np.abs(ours.astype(np.float64) - NUMPY[op](x.astype(np.float64)))
    assert np.max(err / np.spacing(np.abs(ours))) <= 0.51


def test_odd_functions_keep_the_sign_of_zero():
    x = np.array([[0.0, -0.0]], np.float32)
    for op in ("Sin", "Tan", "Asin", "Atan"):
        ours = compile_model(model_of(op, {"x": "float32"}, shape=(1, 2))).run(None, {"x": x})[0]
        np.testing.assert_array_equal(np.signbit(ours), [[False, True]], err_msg=op)


def test_fused_trigonometry():
    """sin(x) * cos(x) + atan(x) - tan(x): one fused elementwise kernel."""
    nodes = [helper.make_node("Sin", ["x"], ["s"]), helper.make_node("Cos", ["x"], ["c"]),
             helper.make_node("Mul", ["s", "c"], ["sc"]), helper.make_node("Atan", ["x"], ["a"]),
             helper.make_node("Add", ["sc", "a"], ["t"]), helper.make_node("Tan", ["x"], ["tn"]),
             helper.make_node("Sub", ["t", "tn"], ["y"])]
    graph = helper.make_graph(nodes, "trig", [helper.make_tensor_value_info("x", elem("float32"), (3, 53))], [OUT])
    model = with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    x = np.random.default_rng(9).uniform(-1.4, 1.4, (3, 53)).astype(np.float32)
    ours, interp, ref = run_three(model, {"x": x})
    np.testing.assert_allclose(ours, interp, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- IsNaN, IsInf

def special_floats(dtype: str) -> np.ndarray:
    x = np.random.default_rng(4).standard_normal((4, 37)) * 1e3
    x.reshape(-1)[:8] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, -1e-40]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_isnan(dtype):
    x = special_floats(dtype)
    ours, interp, ref = run_three(model_of("IsNaN", {"x": dtype}), {"x": x})
    assert ours.dtype == bool
    expected = np.isnan(x.astype(np.float64))
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(interp, expected)
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("detect", [(1, 1), (1, 0), (0, 1), (0, 0)], ids=lambda d: f"neg{d[0]}-pos{d[1]}")
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_isinf(dtype, detect):
    x = special_floats(dtype)
    negative, positive = detect
    ours, interp, ref = run_three(model_of("IsInf", {"x": dtype}, detect_negative=negative,
                                           detect_positive=positive), {"x": x})
    x64 = x.astype(np.float64)
    expected = (np.isneginf(x64) & bool(negative)) | (np.isposinf(x64) & bool(positive))
    assert ours.dtype == bool
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(interp, expected)
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


# ---------------------------------------------------------------------------------------------- bitwise

def int_inputs(dtype: str, shape_a=(4, 37), shape_b=(37,), seed=0):
    """Edge values (min, max, 0, 1, ...) then random ones of the dtype."""
    info, rng = np.iinfo(dtype), np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, shape_a, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, shape_b, dtype=dtype, endpoint=True)
    edges = edge_values(dtype)
    a.reshape(-1)[:len(edges)] = edges
    b.reshape(-1)[:] = np.resize(np.roll(edges, 3), b.size)
    return a, b


def bitwise_model(op, dtype, shape_a=(4, 37), shape_b=(37,), opset=21, **attrs):
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"], **attrs)], op,
                              [helper.make_tensor_value_info("a", elem(dtype), shape_a),
                               helper.make_tensor_value_info("b", elem(dtype), shape_b)], [OUT])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary(op, dtype):
    a, b = int_inputs(dtype)
    ours, interp, ref = run_three(bitwise_model(op, dtype), {"a": a, "b": b})
    expected = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}[op](a, b)
    assert ours.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(interp, expected)
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("dtype", INTS)
def test_bitwise_not(dtype):
    a, _ = int_inputs(dtype)
    ours, interp, ref = run_three(model_of("BitwiseNot", {"a": dtype}), {"a": a})
    np.testing.assert_array_equal(ours, np.invert(a))
    np.testing.assert_array_equal(interp, np.invert(a))
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


def shift_amounts(dtype: str, shape, in_range: bool, seed=1) -> np.ndarray:
    bits = np.dtype(dtype).itemsize * 8
    rng = np.random.default_rng(seed)
    y = rng.integers(0, bits, shape).astype(dtype)
    if not in_range:  # out of range too: bits, bits + 1, the dtype's max and (signed) negative amounts
        extra = [bits, bits + 1, np.iinfo(dtype).max] + ([-1, -bits, np.iinfo(dtype).min] if dtype[0] == "i" else [])
        y.reshape(-1)[:len(extra)] = extra
    return y.astype(dtype)


def shift_reference(x, y, direction):
    """Python integers: every bit of x shifted; then wrapped to the dtype."""
    bits = x.dtype.itemsize * 8
    x, y = np.broadcast_arrays(x, y)
    out = []
    for a, s in zip(x.ravel().tolist(), y.ravel().tolist()):
        if not 0 <= s < bits:
            out.append(-1 if direction == "RIGHT" and a < 0 else 0)
        else:
            out.append(a << s if direction == "LEFT" else a >> s)
    wrapped = [v & ((1 << bits) - 1) for v in out]
    return np.array(wrapped, np.dtype(f"u{x.dtype.itemsize}")).view(x.dtype).reshape(x.shape)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_bit_shift_unsigned(dtype, direction):
    """Opset 11 (unsigned): amounts in range agree with onnxruntime; out of range, 0 (opset 28's rule)."""
    x, _ = int_inputs(dtype, shape_b=(1,))
    for in_range in (True, False):
        y = shift_amounts(dtype, (37,), in_range)
        ours, interp, ref = run_three(bitwise_model("BitShift", dtype, opset=11, direction=direction),
                                      {"a": x, "b": y})
        expected = shift_reference(x, y, direction)
        np.testing.assert_array_equal(ours, expected)
        np.testing.assert_array_equal(interp, expected)
        if ref is not None and in_range:
            np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_bit_shift_signed(dtype, direction):
    """Opset 28: arithmetic right shift; negative or too large amounts give the sign fill (RIGHT) or 0."""
    x, _ = int_inputs(dtype, shape_b=(1,))
    y = shift_amounts(dtype, (4, 37), in_range=False)
    ours, interp, ref = run_three(bitwise_model("BitShift", dtype, shape_b=(4, 37), opset=28, direction=direction),
                                  {"a": x, "b": y})
    expected = shift_reference(x, y, direction)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(interp, expected)
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


def test_bit_shift_of_constants_is_folded():
    graph = helper.make_graph(
        [helper.make_node("BitShift", ["c", "s"], ["y"], direction="LEFT")], "fold", [], [OUT],
        [helper.make_tensor("c", elem("uint32"), (3,), [1, 2, 3]), helper.make_tensor("s", elem("uint32"), (3,),
                                                                                     [4, 31, 32])])
    model = with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    np.testing.assert_array_equal(evaluate(from_onnx(model))[0], np.array([16, 0, 0], np.uint32))


def test_bad_direction_is_refused():
    from frontends import OnnxImportError
    with pytest.raises(OnnxImportError, match="direction must be 'LEFT' or 'RIGHT', got 'UP'"):
        from_onnx(bitwise_model("BitShift", "uint8", opset=11, direction="UP"))


def test_trigonometry_of_integers_is_refused():
    from frontends import OnnxImportError
    with pytest.raises(OnnxImportError, match="sin: input must be a float tensor, got int32"):
        from_onnx(model_of("Sin", {"x": "int32"}))


def test_pi_constants_of_the_reductions():
    """The derived constants against published hex digits of pi and 2/pi; the Cody-Waite split is exact where
    it must be (33 significant bits in each of the first two parts)."""
    from compiler.codegen import trig as I
    pi_hex = "3243F6A8885A308D313198A2E03707344A4093822299F31D0082EFA98EC4E6C89452821E638D01377BE5466CF34E90C6CC0AC"
    assert I._pi_scaled(400) >> (400 - 4 * (len(pi_hex) - 1)) == int(pi_hex, 16)
    two_over_pi_hex = "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561B7246E3A424DD2E006492EEA09D1921C"
    bits = int(two_over_pi_hex, 16)  # 2/pi * 2^(4 * len)
    for j in range(-1, 22):
        shift = 4 * len(two_over_pi_hex) - (8 * j + 30)
        assert I.two_over_pi_word(j) == (bits >> shift) & 0xFFFFFFFF, j
    for part in (I.PIO2_1, I.PIO2_2):
        mantissa, _ = np.frexp(part)
        assert float(mantissa * 2**33).is_integer()
    from fractions import Fraction
    half_pi = Fraction(int(pi_hex, 16), 2 * 16 ** (len(pi_hex) - 1))
    assert abs(sum(Fraction(p) for p in (I.PIO2_1, I.PIO2_2, I.PIO2_3)) - half_pi) < Fraction(1, 2**115)

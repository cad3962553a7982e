"""Tensor dtypes end to end (issue 12, item 2): one-node models whose graph inputs and outputs are each int/uint
width, float16, bfloat16 and float64, compiled and compared with the numpy interpreter (the op references) and,
where onnxruntime has a kernel for the dtype, with onnxruntime.

Integer arithmetic wraps as numpy does; unsigned values above the signed range compare, divide and convert as
unsigned; a run-time divisor of 0, or INT_MIN / -1, gives a value and never traps; float16 / bfloat16 round to
nearest even (bit-exact against numpy / ml_dtypes); float64 is computed in double (bit-exact).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from compiler import compile_model
from harness import bits, compiled_and_interpreted, edge_values, elem, run_ort_or_none
from relayish.types import DTYPES, numpy_dtype

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]


def one_node(op: str, inputs: dict, out_dtype: str, shape=(8,), opset=21, **attrs):
    """A model of one node `op` over graph inputs {name: dtype} of one shape."""
    graph = helper.make_graph([helper.make_node(op, list(inputs), ["y"], **attrs)], op,
                              [helper.make_tensor_value_info(n, elem(d), shape) for n, d in inputs.items()],
                              [helper.make_tensor_value_info("y", elem(out_dtype), shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Max", "Min", "Div", "Mod"])
@pytest.mark.parametrize("dtype", INTS)
def test_integer_arithmetic_wraps(op, dtype):
    a, b = edge_values(dtype), np.roll(edge_values(dtype), 5)
    if op in ("Div", "Mod"):  # no zero divisor and no INT_MIN / -1 here (onnxruntime traps on them)
        b = np.where((b == 0) | (b == -1 if dtype[0] == "i" else False), 3, b).astype(dtype)
    model = one_node(op, {"a": dtype, "b": dtype}, dtype, shape=(16,))
    feeds = {"a": a, "b": b}
    (ours,), (interp,) = compiled_and_interpreted(model, feeds)
    assert ours.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours, interp)
    ref, = run_ort_or_none(model, feeds) or [None]
    if ref is not None:
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_by_zero_and_minus_one_never_traps(dtype):
    info = np.iinfo(dtype)
    a = np.array([7, info.min, info.max, 5, info.min, 0, info.max, 9], dtype)
    b = np.array([0, 0, 0, 2, info.max, 3, 1, 4], dtype)
    if dtype[0] == "i":
        b[[4, 6]] = -1
    for op in ("Div", "Mod"):
        (ours,), (interp,) = compiled_and_interpreted(one_node(op, {"a": dtype, "b": dtype}, dtype), {"a": a, "b": b})
        np.testing.assert_array_equal(ours, interp, err_msg=op)
        assert not ours[:3].any(), f"{op}: a divisor of 0 gives 0"


@pytest.mark.parametrize("op, ref", [("Less", np.less), ("Greater", np.greater), ("LessOrEqual", np.less_equal),
                                     ("Equal", np.equal)])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64", "int8", "int16"])
def test_comparisons_see_the_sign_of_the_dtype(op, ref, dtype):
    a, b = edge_values(dtype), np.roll(edge_values(dtype), 3)
    (ours,), (interp,) = compiled_and_interpreted(one_node(op, {"a": dtype, "b": dtype}, "bool", shape=(16,)),
                                            {"a": a, "b": b})
    np.testing.assert_array_equal(ours, ref(a, b))
    np.testing.assert_array_equal(interp, ref(a, b))


def _float_probes() -> np.ndarray:
    """float32 values at the rounding boundaries of float16 and bfloat16 (ties to even both ways), their
    overflow and underflow, signed zeros, infinities and NaN, and random values."""
    ties = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11 + 2.0**-20]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 70000.0, 3.4e38, 2.0**-25, 2.0**-24, 1e-40]
    rand = np.random.default_rng(3).standard_normal(13) * 100
    values = np.array(ties + [-t for t in ties] + special + list(rand), np.float32)
    return values


@pytest.mark.parametrize("dst", ["float16", "bfloat16"])
def test_cast_to_half_types_rounds_to_nearest_even(dst):
    x = _float_probes()
    (ours,), _ = compiled_and_interpreted(one_node("Cast", {"a": "float32"}, dst, shape=x.shape, to=elem(dst)),
                                       {"a": x})
    with np.errstate(over="ignore"):
        ref = x.astype(numpy_dtype(dst))
    np.testing.assert_array_equal(bits(ours), bits(ref))


def test_float64_to_float16_rounds_once():
    # doubles a hair off float16 ties: going through float32 rounded to nearest would land on the tie and round
    # to even; numpy rounds the double once, and so must we (float32 rounded to odd in between)
    base = np.random.default_rng(4).integers(1024, 2048, 64).astype(np.float64)
    x = np.concatenate([(base + 0.5) * 2.0**-10 + d for d in (1e-12, -1e-12, 0.0)] +
                       [np.array([np.nan, np.inf, -np.inf, -0.0, 1e300, 1e-300, 65519.99, 65520.0])])
    (ours,), _ = compiled_and_interpreted(one_node("Cast", {"a": "float64"}, "float16", shape=x.shape,
                                                to=elem("float16")), {"a": x})
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(bits(ours), bits(x.astype(np.float16)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_sums_accumulate_in_float32_and_fused_ops_round_between(dtype):
    # (a * 3) @ b over k = 512 with the multiply fused into the matmul: a 16-bit accumulator would be off by
    # many ulp; the product a * 3 must round to 16 bits before it is summed, as when it is stored
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 512)).astype(numpy_dtype(dtype))
    b = rng.standard_normal((512, 8)).astype(numpy_dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "three"], ["a3"]), helper.make_node("MatMul", ["a3", "b"], ["y"])], "mm",
        [helper.make_tensor_value_info("a", elem(dtype), (4, 512)), helper.make_tensor_value_info("b", elem(dtype), (512, 8))],
        [helper.make_tensor_value_info("y", elem(dtype), (4, 8))],
        [helper.make_tensor("three", elem(dtype), (), np.array(3.0, numpy_dtype(dtype)).reshape(()).tobytes(), raw=True)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    ours = compile_model(model).run(None, {"a": a, "b": b})[0]
    a3 = (a.astype(np.float32) * 3).astype(numpy_dtype(dtype)).astype(np.float32)
    ref = (a3.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(numpy_dtype(dtype))
    # float32 accumulation rounds a little differently from float64's: equal, or one ulp apart
    step = np.abs(ref.astype(np.float32)) * 2.0 ** -(10 if dtype == "float16" else 7)
    assert np.all(np.abs(ours.astype(np.float32) - ref.astype(np.float32)) <= step)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Max"])
def test_half_types_compute_in_float32_and_round_once(op, dtype):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(64).astype(numpy_dtype(dtype)) for _ in range(2))
    model = one_node(op, {"a": dtype, "b": dtype}, dtype, shape=(64,))
    (ours,), (interp,) = compiled_and_interpreted(model, {"a": a, "b": b})
    ref = getattr(np, {"Add": "add", "Mul": "multiply", "Div": "divide", "Max": "maximum"}[op])(
        a.astype(np.float32), b.astype(np.float32)).astype(numpy_dtype(dtype))
    np.testing.assert_array_equal(bits(ours), bits(ref))
    np.testing.assert_array_equal(bits(ours), bits(interp))


def test_float64_is_computed_in_double():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(64), rng.standard_normal(64) + 3.0
    for op, ref in [("Add", a + b), ("Sub", a - b), ("Mul", a * b), ("Div", a / b)]:
        (ours,), _ = compiled_and_interpreted(one_node(op, {"a": "float64", "b": "float64"}, "float64", shape=(64,)),
                                           {"a": a, "b": b})
        np.testing.assert_array_equal(ours, ref, err_msg=op)
    small = np.full(64, 1e-300)  # below float32's range: float32 arithmetic would give 0 or inf
    (ours,), _ = compiled_and_interpreted(one_node("Mul", {"a": "float64", "b": "float64"}, "float64", shape=(64,)),
                                       {"a": small, "b": small + 1.0})
    np.testing.assert_array_equal(ours, small * (small + 1.0))


def _cast_source(src: str, dst: str) -> np.ndarray:
    """Values of src that dst represents (ints in the common range, floats integral when dst is an int)."""
    rng = np.random.default_rng(5)
    if src == "bool":
        return rng.integers(0, 2, 16).astype(bool)
    lo, hi = -100, 100
    if src.startswith("uint") or dst.startswith("uint"):
        lo = 0
    values = rng.integers(lo, hi, 16)
    if src.startswith(("float", "bfloat")) and not dst.startswith(("int", "uint")):
        values = values + rng.random(16)
    return values.astype(numpy_dtype(src))


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_cast_between_all_dtypes(src, dst):
    x = _cast_source(src, dst)
    model = one_node("Cast", {"a": src}, dst, shape=(16,), to=elem(dst))
    (ours,), (interp,) = compiled_and_interpreted(model, {"a": x})
    assert ours.dtype == numpy_dtype(dst)
    np.testing.assert_array_equal(bits(ours) if ours.dtype.kind != "b" else ours,
                                  bits(x.astype(numpy_dtype(dst))) if ours.dtype.kind != "b" else x.astype(bool))
    np.testing.assert_array_equal(ours.astype(np.float64), interp.astype(np.float64))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint64", "float16", "bfloat16", "float64"])
def test_reductions_and_constants_of_other_dtypes(dtype):
    # a constant of the dtype (an initializer) and a reduction (identity of the dtype: uint max has no -inf)
    x = np.arange(12).reshape(3, 4).astype(numpy_dtype(dtype))
    c = np.array([1, 2, 3, 4], numpy_dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["s"]), helper.make_node("ReduceMax", ["s"], ["y"], keepdims=0)], "r",
        [helper.make_tensor_value_info("x", elem(dtype), (3, 4))], [helper.make_tensor_value_info("y", elem(dtype), (4,))],
        [helper.make_tensor("c", elem(dtype), (4,), c.tobytes(), raw=True),
         helper.make_tensor("axes", elem("int64"), (1,), [0])])
    graph.node[1].input.append("axes")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (ours,), (interp,) = compiled_and_interpreted(model, {"x": x})
    np.testing.assert_array_equal(bits(ours), bits((x + c).max(axis=0)))
    np.testing.assert_array_equal(bits(interp), bits(ours))


@pytest.mark.parametrize("dtype, spelled", [("float16", "np.float16"), ("bfloat16", "ml_dtypes.bfloat16"),
                                            ("uint32", "np.uint32")])
def test_inputs_of_another_dtype_are_refused_naming_the_dtype(dtype, spelled):
    sess = compile_model(one_node("Neg" if dtype != "uint32" else "Identity", {"a": dtype}, dtype))
    assert sess.get_inputs()[0].type == f"tensor({dtype})"
    with pytest.raises(ValueError, match=f"has dtype float32, expected {dtype} .*astype\\({spelled}\\)"):
        sess.run(None, {"a": np.zeros(8, np.float32)})


@pytest.mark.parametrize("dst", ["uint8", "int8", "int16", "uint16"])
def test_a_clamped_float_casts_to_a_narrow_int_through_int32(dst):
    """Clip to the integer type's range, then Cast (every requantization's end): the conversion goes through int32
    (vcvttps2dq + a narrowing move) instead of int64 (compiler/codegen/emit_expr.py _within_int32), with numpy's
    result: values past the bounds saturate, fractions truncate toward zero."""
    from compiler.codegen import emit_assembly
    from compiler.default_schedule import default_schedule
    from compiler.lower import lower
    from compiler.task import extract_tasks
    from compiler.passes import PassContext, run_pipeline
    from frontends import from_onnx
    info = np.iinfo(numpy_dtype(dst))
    lo, hi = helper.make_tensor("lo", 1, [], [float(info.min)]), helper.make_tensor("hi", 1, [], [float(info.max)])
    graph = helper.make_graph([helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
                               helper.make_node("Cast", ["c"], ["y"], to=elem(dst))], "clip_cast",
                              [helper.make_tensor_value_info("x", elem("float32"), [64])],
                              [helper.make_tensor_value_info("y", elem(dst), [64])], [lo, hi])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(2).uniform(-1.5 * 2 ** 16, 1.5 * 2 ** 16, 64).astype(np.float32)
    x[:6] = [0.5, -0.5, 2.99, -2.99, 1e30, -1e30]
    (ours,), _ = compiled_and_interpreted(model, {"x": x})
    np.testing.assert_array_equal(ours, np.clip(x, info.min, info.max).astype(numpy_dtype(dst)))
    task, = extract_tasks(run_pipeline(from_onnx(model), PassContext()))
    asm = emit_assembly([lower(default_schedule(task.initial_state()).apply(task.initial_state()), "k")])
    assert "cvttps2dq" in asm and "cvttps2qq" not in asm

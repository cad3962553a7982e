"""The numpy interpreter (the oracle of every other test) and the text printer."""
from __future__ import annotations

import numpy as np
import pytest

from relayish import (Attrs, Call, Constant, Function, IRModule, TensorType, Tuple, TupleGetItem, Var, astext, call,
                      get_op)
from relayish.interp import evaluate, evaluate_one

RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _primitive(params, body):
    return Function(params, body, Attrs(Primitive=1))


def conv_block():
    """x -> conv(w) -> + bias -> relu; returns (module, x array, w array, bias array)."""
    w, b = _rand(4, 3, 3, 3), _rand(4, 1, 1)
    x = Var("x", TensorType((1, 3, 6, 6)))
    conv = call("nn.conv2d", x, Constant(w), strides=(2, 2), padding=(1, 1, 1, 1))
    out = call("nn.relu", call("add", conv, Constant(b)))
    return IRModule(Function([x], Tuple([out, conv]))), _rand(1, 3, 6, 6), w, b


def fused_conv_block(module, b):
    """The same computation as conv_block's module with bias+relu fused into a primitive Function."""
    x = module.main.params[0]
    conv = module.main.body.fields[1]
    p0, p1 = Var("p0", conv.type), Var("p1", TensorType(b.shape))
    fn = _primitive([p0, p1], call("nn.relu", call("add", p0, p1)))
    return IRModule(Function([x], Tuple([Call(fn, (conv, Constant(b))), conv])))


# ---------------------------------------------------------------------------------------------- interpreter


def test_evaluate_module_matches_numpy():
    module, x, w, b = conv_block()
    out, conv = evaluate(module, {"x": x})
    expected_conv = get_op("nn.conv2d").ref(x, w, strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    np.testing.assert_allclose(conv, expected_conv, rtol=1e-6)
    np.testing.assert_allclose(out, np.maximum(expected_conv + b, 0), rtol=1e-6)
    assert out.dtype == np.float32 and out.shape == (1, 4, 3, 3)


def test_inputs_by_list_and_by_dict_agree():
    module, x, _, _ = conv_block()
    by_dict, by_list = evaluate(module, {"x": x}), evaluate(module, [x])
    for a, b in zip(by_dict, by_list):
        np.testing.assert_array_equal(a, b)


def test_fused_function_equals_unfused():
    module, x, _, b = conv_block()
    fused = fused_conv_block(module, b)
    for a, b in zip(evaluate(module, [x]), evaluate(fused, [x])):
        np.testing.assert_array_equal(a, b)


def test_nested_primitive_function_and_tuples():
    x = Var("x", TensorType((2, 3)))
    q = Var("q", TensorType((2, 3)))
    inner = _primitive([q], call("exp", q))
    p = Var("p", TensorType((2, 3)))
    outer = _primitive([p], call("negative", Call(inner, (p,))))
    pair = Tuple([Call(outer, (x,)), x])
    body = call("add", TupleGetItem(pair, 0), TupleGetItem(pair, 1))
    xv = _rand(2, 3)
    np.testing.assert_allclose(evaluate_one(Function([x], body), [xv]), -np.exp(xv) + xv, rtol=1e-6)


def test_shared_node_is_evaluated_once(monkeypatch):
    relu = get_op("nn.relu")
    calls = []
    original = relu.ref
    monkeypatch.setattr(relu, "ref", lambda x: calls.append(1) or original(x))
    x = Var("x", TensorType((4,)))
    r = call("nn.relu", x)
    body = call("multiply", call("add", r, r), r)
    xv = _rand(4)
    np.testing.assert_allclose(evaluate_one(body, {"x": xv}), 2 * np.maximum(xv, 0) ** 2, rtol=1e-6)
    assert len(calls) == 1


def test_deep_graph_with_long_skip_connection():
    """Iterative evaluation (no recursion limit); a value used far later survives the freeing of intermediates."""
    x = Var("x", TensorType((3,)))
    y = x
    for _ in range(3000):
        y = call("add", y, Constant(np.ones(3, np.float32)))
    body = call("subtract", y, x)
    np.testing.assert_allclose(evaluate_one(body, [_rand(3)]), np.full(3, 3000.0), rtol=1e-6)


def test_bad_inputs_are_named():
    module, x, _, _ = conv_block()
    with pytest.raises(ValueError, match=r"missing input\(s\) \['x'\]"):
        evaluate(module, {"y": x})
    with pytest.raises(ValueError, match=r"input 'x' expects shape \(1, 3, 6, 6\), got \(1, 3, 5, 5\)"):
        evaluate(module, [x[:, :, :5, :5]])
    with pytest.raises(ValueError, match=r"expected 1 inputs \['x'\], got 2"):
        evaluate(module, [x, x])


def test_reference_with_wrong_shape_is_caught(monkeypatch):
    monkeypatch.setattr(get_op("nn.relu"), "ref", lambda x: x[:1])
    x = Var("x", TensorType((3,)))
    with pytest.raises(AssertionError, match=r"nn\.relu: reference returned shape \(1,\), but the shape rule "
                                             r"declared \(3,\)"):
        evaluate(Function([x], call("nn.relu", x)), [_rand(3)])

# ---------------------------------------------------------------------------------------------- printer


def test_call_line_has_args_attrs_and_type():
    module, *_ = conv_block()
    lines = astext(module.main).splitlines()
    assert lines[0] == ("fn (%x: Tensor[(1, 3, 6, 6), float32]) -> (Tensor[(1, 4, 3, 3), float32], "
                        "Tensor[(1, 4, 3, 3), float32]) {")
    assert lines[1] == ("  %0 = nn.conv2d(%x, meta[Constant][0] /* (4, 3, 3, 3) */, strides=[2, 2], "
                        "padding=[1, 1, 1, 1], dilation=[1, 1], groups=1) /* ty=Tensor[(1, 4, 3, 3), float32] */;")
    assert lines[2] == "  %1 = add(%0, meta[Constant][1] /* (4, 1, 1) */) /* ty=Tensor[(1, 4, 3, 3), float32] */;"
    assert lines[-2:] == ["  (%2, %0)", "}"]


def test_fused_function_printed_nested_and_called():
    module, _, _, b = conv_block()
    fused = fused_conv_block(module, b)
    text = astext(fused.main)
    lines = text.splitlines()
    fn_line = next(k for k, line in enumerate(lines) if "= fn (" in line)
    assert lines[fn_line].startswith("  %1 = fn (%p0: Tensor[(1, 4, 3, 3), float32], %p1: Tensor[(4, 1, 1), "
                                     "float32], Primitive=1) -> Tensor[(1, 4, 3, 3), float32] {")
    assert lines[fn_line + 1].startswith("    %2 = add(%p0, %p1)")
    assert lines[fn_line + 2].startswith("    nn.relu(%2)")
    assert lines[fn_line + 3] == "  };"
    assert lines[fn_line + 4].startswith("  %3 = %1(%0, meta[Constant][1] /* (4, 1, 1) */)")


def test_shared_nodes_printed_once_and_text_is_stable():
    x = Var("x", TensorType((4,)))
    r = call("nn.relu", x)
    body = call("multiply", call("add", r, r), r)
    text = astext(body)
    assert text.count("nn.relu(") == 1
    assert text.splitlines()[-1] == "multiply(%1, %0) /* ty=Tensor[(4), float32] */"
    assert astext(body) == text == str(body)


def test_distinct_vars_with_one_name_get_distinct_names():
    a, b = Var("x", TensorType((2,))), Var("x", TensorType((2,)))
    assert astext(call("add", a, b)) == "add(%x, %x_1) /* ty=Tensor[(2), float32] */"


def test_tuple_get_item_and_module_outputs():
    x = Var("x", TensorType((2,)))
    t = Tuple([call("exp", x), x])
    module = IRModule(Function([x], Tuple([TupleGetItem(t, 0), call("sqrt", x)])), output_names=("a", "b"))
    text = module.astext()
    assert "%1 = (%0, %x);" in text
    assert "%2 = %1.0 /* ty=Tensor[(2), float32] */;" in text
    assert text.endswith("/* outputs: a, b */")

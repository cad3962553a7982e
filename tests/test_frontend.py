"""The ONNX importer: every supported op over a grid of attributes and opsets, imported and evaluated with the
numpy interpreter, against onnxruntime (max|a-b| / max|ref| <= 1e-4); the reference ResNet-18 models. The
importer's errors: test_frontend_errors.py."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from frontends import OnnxImportError, from_onnx
from harness import assert_close, case_id, make_model, random_feeds, run_ort, with_output_shapes
from relayish import Constant, IRModule, Tuple
from relayish.interp import evaluate


# ---- helpers ----

def check(model, positive=False, seed=0):
    """Import, evaluate with the interpreter and compare every output with onnxruntime's. Returns the IRModule."""
    onnx.checker.check_model(model)
    feeds = random_feeds(model, seed, positive)
    module = from_onnx(model)
    ours = evaluate(module, feeds)
    refs = run_ort(model, feeds)
    assert len(ours) == len(refs)
    for name, a, b in zip(module.output_names, ours, refs):
        assert_close(a, b, name)
    return module


# ---- elementwise ----

@pytest.mark.parametrize("opset", [7, 13, 21])
@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}),
                                      ("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Neg", {}), ("Identity", {})])
def test_unary(op, attrs, opset):
    check(make_model(op, {"x": (2, 3, 4, 5)}, attrs, opset))


def test_sqrt():
    check(make_model("Sqrt", {"x": (3, 7)}), positive=True)


@pytest.mark.parametrize("opset,attrs", [(7, {"min": -0.5, "max": 0.7}), (7, {"min": 0.0}), (7, {"max": 0.3}),
                                         (7, {})])
def test_clip_attrs(opset, attrs):
    check(make_model("Clip", {"x": (2, 3, 4)}, attrs, opset))


@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("bounds", [(-0.5, 0.7), (0.0, None), (None, 0.3), (None, None)])
def test_clip_inputs(opset, bounds):
    lo, hi = bounds
    consts = {}
    if lo is not None or hi is not None:
        consts["min" if lo is not None else None] = np.float32(lo if lo is not None else 0)
    if hi is not None:
        consts["max"] = np.float32(hi)
    check(make_model("Clip", {"x": (2, 3, 4)}, opset=opset, consts=consts))


BROADCASTS = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (3, 1, 5)), ((2, 3, 4, 5), ()),
              ((2, 1, 4, 1), (3, 1, 5)), ((1,), (2, 3))]


@pytest.mark.parametrize("opset", [7, 14])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary(op, shapes, opset):
    check(make_model(op, {"a": shapes[0], "b": shapes[1]}, opset=opset), positive=op == "Div")


@pytest.mark.parametrize("op", ["Add", "Mul", "Div"])
def test_binary_with_constant(op):
    check(make_model(op, {"a": (2, 3, 4, 5)}, consts={"b": np.linspace(0.5, 2, 5, dtype=np.float32)}))


@pytest.mark.parametrize("opset,shapes", [(7, [(2, 3)]), (7, [(2, 3)] * 3), (8, [(2, 3, 4), (4,), (3, 1)]),
                                          (13, [(2, 3), (1, 3)])], ids=str)
@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic(op, opset, shapes):
    check(make_model(op, {f"x{i}": s for i, s in enumerate(shapes)}, opset=opset))


# ---- conv ----

CONV_CASES = [
    dict(),
    dict(strides=[2, 2]),
    dict(pads=[1, 1, 1, 1]),
    dict(pads=[0, 1, 2, 1], strides=[2, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="SAME_UPPER", kernel=(2, 2)),
    dict(auto_pad="SAME_LOWER", kernel=(2, 4)),
    dict(auto_pad="VALID", strides=[2, 3]),
    dict(dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(dilations=[2, 1], pads=[2, 0, 1, 1]),  # (onnxruntime rejects dilations with SAME_*)
    dict(group=2),
    dict(group=4, cout=8, pads=[1, 1, 1, 1]),  # depthwise, multiplier 2
    dict(kernel=(1, 1), strides=[2, 2]),
    dict(kernel=(3, 2), bias=False),
]


def conv_model(case: dict, opset: int):
    """A one-Conv model of a CONV_CASES entry (kernel, cout, bias and group have defaults) on a 2x4x9x10 input."""
    case = dict(case)
    kh, kw = case.pop("kernel", (3, 3))
    cout, bias, group = case.pop("cout", 6), case.pop("bias", True), case.get("group", 1)
    rng = np.random.default_rng(1)
    consts = {"w": rng.standard_normal((cout, 4 // group, kh, kw)).astype(np.float32)}
    if bias:
        consts["b"] = rng.standard_normal(cout).astype(np.float32)
    return make_model("Conv", {"x": (2, 4, 9, 10)}, dict(case, kernel_shape=[kh, kw]), opset, consts)


@pytest.mark.parametrize("opset", [7, 11, 21])
@pytest.mark.parametrize("case", CONV_CASES, ids=case_id)
def test_conv(case, opset):
    check(conv_model(case, opset))


def test_conv_weight_as_input():
    check(make_model("Conv", {"x": (1, 3, 8, 8), "w": (5, 3, 3, 3), "b": (5,)}, {"pads": [1, 1, 1, 1]}))


# ---- batch norm, pooling ----

@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (4, 3)], ids=str)
def test_batch_norm(opset, shape):
    rng = np.random.default_rng(2)
    c = shape[1]
    consts = {"scale": rng.uniform(0.5, 1.5, c), "b": rng.standard_normal(c), "mean": rng.standard_normal(c),
              "var": rng.uniform(0.5, 2, c)}
    check(make_model("BatchNormalization", {"x": shape}, {"epsilon": 1e-3}, opset,
                     {k: v.astype(np.float32) for k, v in consts.items()}))


POOL_CASES = [
    dict(kernel_shape=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 0, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2], strides=[3, 3], ceil_mode=1),
    dict(kernel_shape=[2, 2], dilations=[2, 2]),
    dict(kernel_shape=[2, 3], dilations=[2, 1], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
]


def _pool_opsets(case, first_with_dilations):
    needs = first_with_dilations if "dilations" in case else 10 if "ceil_mode" in case else 7
    return [o for o in (7, 10, 12, 19, 21) if o >= needs]


@pytest.mark.parametrize("case,opset", [(c, o) for c in POOL_CASES for o in _pool_opsets(c, 10)],
                         ids=lambda v: case_id(v) if isinstance(v, dict) else f"opset{v}")
def test_max_pool(case, opset):
    check(make_model("MaxPool", {"x": (2, 3, 9, 10)}, case, opset))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case,opset", [(c, o) for c in POOL_CASES for o in _pool_opsets(c, 19)],
                         ids=lambda v: case_id(v) if isinstance(v, dict) else f"opset{v}")
def test_avg_pool(case, opset, count_include_pad):
    check(make_model("AveragePool", {"x": (2, 3, 9, 10)}, dict(case, count_include_pad=count_include_pad), opset))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    check(make_model(op, {"x": (2, 5, 7, 6)}))


def test_max_pool_indices_output():  # more in test_compile_convnd.py
    model = make_model("MaxPool", {"x": (1, 2, 4, 4)}, {"kernel_shape": [2, 2]}, n_outputs=2)
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    check(model)


@pytest.mark.parametrize("attrs", [dict(size=3), dict(size=5, alpha=1e-2, beta=0.5, bias=2.0)],
                         ids=case_id)
def test_lrn(attrs):
    check(make_model("LRN", {"x": (2, 7, 4, 5)}, attrs))


# ---- dense, matmul, softmax ----

GEMM_CASES = [dict(), dict(transB=1), dict(transA=1), dict(transA=1, transB=1), dict(alpha=0.5, beta=2.0),
              dict(c=(6,)), dict(c=(1, 6)), dict(c=(4, 6)), dict(c=(), beta=0.5), dict(c=None),
              dict(c=None, alpha=3.0, transB=1)]


@pytest.mark.parametrize("b_const", [True, False])
@pytest.mark.parametrize("case,opset", [(c, o) for c in GEMM_CASES for o in (7, 11, 13)
                                        if o >= 11 or c.get("c", ()) is not None],  # C is optional from 11
                         ids=lambda v: case_id(v) if isinstance(v, dict) else f"opset{v}")
def test_gemm(case, opset, b_const):
    case = dict(case)
    c_shape = case.pop("c", (4, 6))
    rng = np.random.default_rng(3)
    a_shape = (5, 4) if case.get("transA") else (4, 5)
    b_shape = (6, 5) if case.get("transB") else (5, 6)
    b = rng.standard_normal(b_shape).astype(np.float32)
    inputs, consts = {"a": a_shape}, {}
    if b_const:
        consts["b"] = b
    else:
        inputs["b"] = b_shape
    if c_shape is not None:
        consts["c"] = rng.standard_normal(c_shape).astype(np.float32)
    check(make_model("Gemm", inputs, case, opset, consts))


@pytest.mark.parametrize("shapes", [((4, 5), (5, 6)), ((2, 4, 5), (5, 6)), ((2, 1, 4, 5), (3, 5, 6)),
                                    ((5,), (5, 6)), ((4, 5), (5,)), ((5,), (5,)), ((2, 4, 5), (5,))], ids=str)
def test_matmul(shapes):
    check(make_model("MatMul", {"a": shapes[0], "b": shapes[1]}))


@pytest.mark.parametrize("opset,axis", [(7, None), (7, 0), (7, 2), (11, -1), (11, -3), (13, None), (13, 1),
                                        (13, -2), (21, 2)])
def test_softmax(opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    check(make_model("Softmax", {"x": (2, 3, 4, 5)}, attrs, opset))


# ---- data movement ----

@pytest.mark.parametrize("opset,axis", [(9, None), (9, 0), (9, 3), (11, -1), (13, -4), (21, 2), (21, 4)])
def test_flatten(opset, axis):
    check(make_model("Flatten", {"x": (2, 3, 4, 5)}, {} if axis is None else {"axis": axis}, opset))


@pytest.mark.parametrize("opset,shape,allowzero", [
    (7, (6, 20), 0), (7, (0, -1), 0), (13, (-1,), 0), (13, (2, 0, 4, 5, 1), 0), (14, (2, 3, 20), 1),
    (14, (0, 3, -1), 0), (21, (5, -1, 4, 1), 0)], ids=str)
def test_reshape(opset, shape, allowzero):
    attrs = {"allowzero": allowzero} if opset >= 14 else {}
    check(make_model("Reshape", {"x": (2, 3, 4, 5)}, attrs, opset, {"shape": np.array(shape, np.int64)}))


@pytest.mark.parametrize("perm", [None, (0, 2, 3, 1), (3, 1, 0, 2)], ids=str)
def test_transpose(perm):
    check(make_model("Transpose", {"x": (2, 3, 4, 5)}, {} if perm is None else {"perm": list(perm)}))


@pytest.mark.parametrize("opset,axes", [(7, None), (7, (1,)), (11, (-1, 1)), (13, None), (13, (1, 3)),
                                        (21, (-3,))], ids=str)
def test_squeeze(opset, axes):
    if axes is None:
        attrs, consts = {}, {}
    elif opset < 13:
        attrs, consts = {"axes": list(axes)}, {}
    else:
        attrs, consts = {}, {"axes": np.array(axes, np.int64)}
    check(make_model("Squeeze", {"x": (2, 1, 4, 1)}, attrs, opset, consts))


@pytest.mark.parametrize("opset,axes", [(7, (0,)), (7, (1, 4)), (11, (-1,)), (13, (0, 2)), (21, (-1, 0))],
                         ids=str)
def test_unsqueeze(opset, axes):
    attrs, consts = ({"axes": list(axes)}, {}) if opset < 13 else ({}, {"axes": np.array(axes, np.int64)})
    check(make_model("Unsqueeze", {"x": (2, 3, 4)}, attrs, opset, consts))


@pytest.mark.parametrize("opset,axis,n", [(7, 1, 2), (7, 0, 3), (11, -1, 2), (13, 2, 1), (21, -3, 3)])
def test_concat(opset, axis, n):
    check(make_model("Concat", {f"x{i}": (2, 3, 4) for i in range(n)}, {"axis": axis}, opset))


def test_concat_with_constant():
    c = np.arange(2 * 2 * 4, dtype=np.float32).reshape(2, 2, 4)
    check(make_model("Concat", {"x": (2, 3, 4)}, {"axis": 1}, consts={"c": c}))


# ---- dropout, constants, shape arithmetic ----

@pytest.mark.parametrize("opset,consts,attrs", [(7, {}, {"ratio": 0.3}), (10, {}, {}),
                                                (12, {"ratio": np.float32(0.2)}, {}),
                                                (13, {"ratio": np.float32(0.5), "training_mode": np.bool_(False)},
                                                 {"seed": 3})], ids=str)
def test_dropout(opset, consts, attrs):
    check(make_model("Dropout", {"x": (3, 4)}, attrs, opset, consts))


def test_dropout_mask_before_opset_12_is_rejected():
    with pytest.raises(OnnxImportError, match=r"'dropout_node' \(Dropout\): output 1"):
        from_onnx(make_model("Dropout", {"x": (3, 4)}, opset=11, n_outputs=2))


@pytest.mark.parametrize("attr", [
    {"value": numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))},
    {"value_float": 1.5}, {"value_floats": [1.0, 2.0, 3.0, 4.0]}], ids=lambda a: next(iter(a)))
def test_constant(attr):
    const_node = helper.make_node("Constant", [], ["c"], name="const", **attr)
    check(make_model("Add", {"x": (3, 4)}, opset=13, produced=["c"], extra_nodes=[const_node]))


def test_constant_ints_as_reshape_shape():
    const_node = helper.make_node("Constant", [], ["shape"], name="const", value_ints=[4, -1])
    check(make_model("Reshape", {"x": (2, 3, 4)}, opset=13, produced=["shape"], extra_nodes=[const_node]))


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32)], ids=["default", "2.5"])
def test_constant_of_shape(value):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    shape = helper.make_node("Constant", [], ["shape"], name="shape", value_ints=[2, 3])
    fill = helper.make_node("ConstantOfShape", ["shape"], ["fill"], name="fill", **attrs)
    module = check(make_model("Add", {"x": (2, 3)}, opset=13, produced=["fill"], extra_nodes=[shape, fill]))
    assert "Constant" in {type(a).__name__ for a in module.main.body.args}


def test_shape_arithmetic_is_folded():
    """PyTorch's flatten: Shape -> Gather -> Unsqueeze -> Concat -> Reshape; all but the Reshape fold away."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "minus_one"], ["newshape"], name="concat", axis=0),
             helper.make_node("Cast", ["newshape"], ["newshape64"], name="cast", to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "newshape64"], ["y"], name="reshape")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    graph = helper.make_graph(nodes, "flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    module = check(with_output_shapes(model))
    assert module.main.body.op == "reshape" and module.main.body.type.shape == (2, 12)


def test_any_op_over_small_constants_is_folded():
    """onnx's LayerNormalization body: Shape -> Size -> Neg(axis) -> ConstantOfShape -> Concat -> Reshape; Neg and
    Size have no folding of their own, the importer evaluates every small constant computation."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "axis"], ["prefix"]),
             helper.make_node("Neg", ["axis"], ["count"]),
             helper.make_node("ConstantOfShape", ["count"], ["suffix"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Concat", ["prefix", "suffix"], ["newshape"], axis=0),
             helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Reshape", ["m", "newshape"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "axis")]
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    module = check(with_output_shapes(model))
    assert module.main.body.type.shape == (2, 3, 1)


def test_two_outputs_make_a_tuple():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["x"], ["n"], name="neg")]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("n", "r")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    module = check(with_output_shapes(model))
    assert isinstance(module.main.body, Tuple) and module.output_names == ("n", "r")
    assert module.input_names == ("x",)


def test_outputs_declared_without_a_shape_import_as_onnxruntime_runs_them():
    """A graph output of unknown rank (its type has no shape field at all): onnx's checker refuses the model,
    onnxruntime runs it; so does the importer, with the shapes it infers."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["x"], ["s"], axis=0)]
    graph = helper.make_graph(nodes, "shapeless", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("r", "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    module = from_onnx(model)
    assert [f.type.shape for f in module.main.body.fields] == [(2, 3), (2, 3)]
    feeds = random_feeds(model, 0, False)
    for ours, ref in zip(evaluate(module, feeds), run_ort(model, feeds)):
        assert_close(ours, ref)


def test_initializers_are_constants_not_params():
    model = make_model("Add", {"x": (2, 3)}, consts={"b": np.ones(3, np.float32)})
    model.graph.input.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, (3,)))  # IR < 4 style
    module = check(model)
    assert module.input_names == ("x",)
    assert isinstance(module.main.body.args[1], Constant)


# ---- the reference models ----

def _image(batch=1, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, 224, 224)).astype(np.float32)


@pytest.mark.parametrize("variant", ["resnet18_path", "resnet18_folded_path"])
def test_resnet18_matches_onnxruntime(variant, request):
    path = request.getfixturevalue(variant)
    model = onnx.load(str(path))
    module = from_onnx(path)
    x = _image()
    ours, = evaluate(module, {"input": x})
    ref, = run_ort(model, {"input": x})
    assert_close(ours, ref, variant)
    assert ref.std() > 0.1 and np.abs(ref).max() < 100  # a sane spread: not all ~0, not exploding
    ops = {n.op for n in _calls(module)}
    assert ("nn.batch_norm" in ops) == (variant == "resnet18_path")


def _calls(module: IRModule):
    from relayish import Call, post_order
    return [n for n in post_order(module.main.body) if isinstance(n, Call)]


def test_resnet18_symbolic_batch(resnet18_dynamic_path):
    assert from_onnx(resnet18_dynamic_path).main.params[0].type.shape == (1, 3, 224, 224)  # unbound N -> 1
    module = from_onnx(resnet18_dynamic_path, input_shapes={"input": (2, 3, 224, 224)})
    assert module.main.body.type.shape == (2, 1000)
    x = _image(batch=2, seed=1)
    ours, = evaluate(module, {"input": x})
    ref, = run_ort(onnx.load(str(resnet18_dynamic_path)), {"input": x})
    assert_close(ours, ref, "resnet18 N=2")

"""The ONNX importer's errors: a model it cannot or must not import is refused with an OnnxImportError that names
the problem (which op, which node, which input, what was expected), never a traceback from deep inside."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from frontends import OnnxImportError, from_onnx
from harness import make_model, with_output_shapes



def test_unsupported_ops_are_listed_in_one_error():
    nodes = [helper.make_node("Bernoulli", ["x"], ["h"], name="bernoulli_a"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Bernoulli", ["r"], ["h2"], name="bernoulli_b"),
             helper.make_node("Multinomial", ["h2"], ["d"], name="multinomial"),
             helper.make_node("MyOp", ["d"], ["y"], name="custom", domain="com.example")]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid("com.example", 2)])
    with pytest.raises(OnnxImportError) as info:
        from_onnx(with_output_shapes(model))
    msg = str(info.value)
    assert "3 unsupported op type(s)" in msg
    assert "Bernoulli (ai.onnx v17): 2 node(s), first 'bernoulli_a'" in msg
    assert "Multinomial (ai.onnx v17): 1 node(s), first 'multinomial'" in msg
    assert "MyOp (com.example v2): 1 node(s), first 'custom'" in msg
    assert "Relu" not in msg and "bernoulli_b" not in msg


def test_unnamed_unsupported_node_is_named_by_its_output():
    nodes = [helper.make_node("Multinomial", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "anon", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    expected = r"Multinomial \(ai.onnx v13\): 1 node\(s\), first #0 \(unnamed, output 'y'\)"
    with pytest.raises(OnnxImportError, match=expected):
        from_onnx(with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                                       ir_version=7)))


def test_opset_below_7_imports_only_the_schemas_reviewed_at_7_or_later():
    from_onnx(make_model("Relu", {"x": (3,)}, opset=6))  # Relu-6 is still Relu at opset 7 to 12
    with pytest.raises(OnnxImportError, match=r"Relu \(ai.onnx v5\): 1 node\(s\), first 'relu_node'; schema Relu-1 "
                                              r"has not been reviewed \(reviewed: 6, 13, 14\); a model of opset 5 "
                                              r"imports only ops whose schema there is also in effect at opset 7"):
        from_onnx(make_model("Relu", {"x": (3,)}, opset=5))


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "garbage", "text", "truncated", "unchecked"])
def test_invalid_files(tmp_path, kind):
    good = make_model("Conv", {"x": (1, 3, 8, 8)}, consts={"w": np.ones((4, 3, 3, 3), np.float32)})
    data = good.SerializeToString()
    good.graph.node[0].input[0] = "undefined"  # parses, but onnx.checker rejects it
    unchecked = good.SerializeToString()
    path = {
        "missing": lambda: tmp_path / "nope.onnx",
        "directory": lambda: tmp_path,
        "empty": lambda: _write(tmp_path / "empty.onnx", b""),
        "garbage": lambda: _write(tmp_path / "garbage.onnx", np.random.default_rng(0).bytes(1000)),
        "text": lambda: _write(tmp_path / "text.onnx", b"this is not a model\n" * 10),
        "truncated": lambda: _write(tmp_path / "truncated.onnx", data[: len(data) * 2 // 3]),
        "unchecked": lambda: _write(tmp_path / "unchecked.onnx", unchecked),
    }[kind]()
    with pytest.raises(OnnxImportError) as info:
        from_onnx(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    assert {"missing": "no such file", "directory": "not a file", "empty": "empty file",
            "unchecked": "not a valid ONNX model: Nodes in a graph must be topologically sorted, however input "
                         "'undefined'"}.get(kind, "not a valid ONNX model") in msg


def test_truncated_resnet18(tmp_path, resnet18_path):
    data = resnet18_path.read_bytes()
    for cut in (len(data) // 2, len(data) - 7):
        path = _write(tmp_path / f"cut{cut}.onnx", data[:cut])
        with pytest.raises(OnnxImportError, match=f"^{path}: not a valid ONNX model"):
            from_onnx(path)


@pytest.mark.parametrize("shapes,pattern", [
    ({"y": (1, 3, 8, 8)}, r"unknown input\(s\) \['y'\]; model inputs: \['x'\]"),
    ({"x": (1, 3, 8)}, r"has rank 3, but model input 'x' has rank 4 \('N', 3, 8, 8\)"),
    ({"x": (1, 4, 8, 8)}, r"dim 1 must be 3"),
    ({"x": (-1, 3, 8, 8)}, r"dims must be non-negative ints"),
])
def test_bad_input_shapes(shapes, pattern):
    with pytest.raises(OnnxImportError, match=pattern):
        from_onnx(make_model("Relu", {"x": ("N", 3, 8, 8)}), input_shapes=shapes)


def test_symbolic_dims_are_bound_across_inputs():
    model = make_model("Add", {"a": ("N", 3), "b": ("N", 3)})
    assert from_onnx(model).main.body.type.shape == (1, 3)
    module = from_onnx(model, input_shapes={"a": (2, 3)})
    assert [p.type.shape for p in module.main.params] == [(2, 3), (2, 3)]
    with pytest.raises(OnnxImportError, match="binds dim 'N' to both 2 and 5"):
        from_onnx(model, input_shapes={"a": (2, 3), "b": (5, 3)})


def test_unsupported_input_dtype_is_rejected():
    graph = helper.make_graph([helper.make_node("Identity", ["i"], ["o"])], "float8s",
                              [helper.make_tensor_value_info("i", TensorProto.FLOAT8E4M3FN, (3,))],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT8E4M3FN, None)])
    with pytest.raises(OnnxImportError, match=r"input 'i' has dtype float8_e4m3fn, which is not supported as a "
                                              r"graph input \(supported: float32, float64, float16, bfloat16, int64, "):
        from_onnx(with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])))


def test_converter_errors_name_the_node():
    with pytest.raises(OnnxImportError, match=r"node 'reshape_node' \(Reshape\): input 'shape' must be a constant"):
        from_onnx(make_model("Reshape", {"x": (2, 3), "s": (2,)}, opset=13))
    with pytest.raises(OnnxImportError, match=r"node 'add_node' \(Add\): .*do not broadcast"):
        from_onnx(make_model("Add", {"a": (2, 3), "b": (4,)}))
    with pytest.raises(OnnxImportError, match=r"node 'conv_node' \(Conv\): Conv takes a 3-D \(N, C, L\)"):
        from_onnx(make_model("Conv", {"x": (1, 3, 2, 2, 2, 8)}, consts={"w": np.ones((4, 3, 1, 1, 1, 3), np.float32)}))
    with pytest.raises(OnnxImportError, match=r"'reshape_node' \(Reshape\): cannot reshape \(2, 3\)"):
        from_onnx(make_model("Reshape", {"x": (2, 3)}, consts={"shape": np.array([4, -1], np.int64)}))
    with pytest.raises(OnnxImportError, match=r"'squeeze_node' \(Squeeze\): cannot squeeze axis 1 of size 3"):
        from_onnx(make_model("Squeeze", {"x": (2, 3)}, consts={"axes": np.array([1], np.int64)}))


@pytest.mark.parametrize("op_type, attrs", [("AveragePool", dict(kernel_shape=[2, 2], strides=[0, 0])),
                                            ("MaxPool", dict(kernel_shape=[2, 2], strides=[1, 0])),
                                            ("Conv", dict(kernel_shape=[3, 3], dilations=[0, 1]))])
def test_a_window_of_zero_stride_or_dilation_is_a_named_error(op_type, attrs):
    """Found by the fuzzer on the Zen 5 session (seed 29): strides (0, 0) reached a division in the padding
    arithmetic and left a ZeroDivisionError."""
    consts = {"w": np.ones((2, 3, 3, 3), np.float32)} if op_type == "Conv" else None
    model = make_model(op_type, {"x": (1, 3, 8, 8)}, attrs, consts=consts)
    name = "strides" if "strides" in attrs else "dilations"
    with pytest.raises(OnnxImportError, match=rf"{op_type.lower()}_node' \({op_type}\): attribute {name} .* must be >= 1"):
        from_onnx(model)


def test_gemm_bias_must_broadcast_one_way_to_the_product():
    """C of shape (5, 1) for a (1, 5) product: onnxruntime refuses it (unidirectional broadcasting); we ran it
    (fuzzer, seed 29). A (5,) or (1, 5) bias stays fine."""
    a = {"a": (1, 4)}
    with pytest.raises(OnnxImportError, match=r"Gemm\): input C of shape \(5, 1\) does not broadcast to .*\(1, 5\)"):
        from_onnx(make_model("Gemm", a, consts={"b": np.ones((4, 5), np.float32), "c": np.ones((5, 1), np.float32)}))
    for shape in ((5,), (1, 5), (1, 1)):
        from_onnx(make_model("Gemm", a, consts={"b": np.ones((4, 5), np.float32), "c": np.ones(shape, np.float32)}))


def test_a_graph_without_outputs_is_refused():
    """onnxruntime refuses an empty graph; a graph with nodes but no outputs computes nothing either."""
    empty = helper.make_model(helper.make_graph([], "empty", [], []), opset_imports=[helper.make_opsetid("", 17)])
    relu = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "no_outputs",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2,))], [])
    for model in (empty, helper.make_model(relu, opset_imports=[helper.make_opsetid("", 17)])):
        with pytest.raises(OnnxImportError, match="the graph declares no outputs"):
            from_onnx(model)


def _constant_op_model(op_type: str, inputs: dict) -> object:
    """A one-node model whose inputs are initializers (name -> array)."""
    inits = [helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape, a.reshape(-1).tolist())
             for n, a in inputs.items()]
    graph = helper.make_graph([helper.make_node(op_type, list(inputs), ["y"], name="big")], "big", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op_type, inputs, pattern", [
    ("Range", {"a": np.float32(0), "b": np.float32(4e9), "c": np.float32(1)},
     r"node 'big' \(Range\): the range from 0.0 to 4000000000.0 by 1.0 has shape \(4000000000,\): 4000000000 elements"),
    ("Range", {"a": np.int64(0), "b": np.int64(2 ** 40), "c": np.int64(3)}, r"366503875926 elements"),
    ("Range", {"a": np.float32(0), "b": np.float32(1), "c": np.float32(0)}, r"\(Range\): delta is 0"),
    ("Range", {"a": np.float32(0), "b": np.float32(np.inf), "c": np.float32(1)}, r"has no finite length"),
    ("Tile", {"x": np.ones((2, 2), np.float32), "r": np.array([2 ** 20, 2 ** 20], np.int64)},
     r"\(Tile\): the output has shape \(2097152, 2097152\)"),
])
def test_constant_folding_checks_the_size_before_it_allocates(op_type, inputs, pattern):
    """Computed at import from constants, an oversized result is a named error, not numpy's MemoryError."""
    model = _constant_op_model(op_type, {k: np.asarray(v) for k, v in inputs.items()})
    with pytest.raises(OnnxImportError, match=pattern):
        from_onnx(model)

"""Zero-size tensors: what exporters write (a shape sliced to nothing and concatenated into a Reshape target, a Split
with an empty part, a Slice whose start passes its end, an empty batch) compiles and runs as onnxruntime does, three
ways (compiled vs the numpy interpreter vs onnxruntime). A zero-size value's content is known at import (it has no
element), so it is an empty constant there and never reaches a kernel; an empty graph input is still an input of
the module, an empty output still an output."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness import three_way, with_output_shapes
from runtime import load_module

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs: dict, outputs: list, inits: dict | None = None, opset=17):
    """inputs: name -> shape (float32; a str dim is symbolic); outputs: names (shapes left to inference)."""
    graph = helper.make_graph(nodes, "zero", [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def assert_allclose(ours, ref, what):
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6, err_msg=what)


def check3(m, feeds: dict, input_shapes=None):
    """harness.three_way within rtol 1e-5 and atol 1e-6: (the compiled session, its outputs)."""
    runs = three_way(m, feeds, close=assert_allclose, input_shapes=input_shapes)
    return runs.session, runs.compiled


def rand(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)


def test_a_shape_sliced_to_nothing_and_concatenated_into_a_reshape_target():
    """PyTorch's exporter: shape[0:1] ++ shape[2:2] (empty) ++ [-1] -> Reshape (a TransformerEncoder's heads)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["lead"]),
             helper.make_node("Slice", ["s", "two", "two"], ["none"]),
             helper.make_node("Concat", ["lead", "none", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = {"zero": np.array([0]), "one": np.array([1]), "two": np.array([2]), "minus1": np.array([-1])}
    _, (y,) = check3(model(nodes, {"x": (2, 3, 4)}, ["y"], inits), {"x": rand(2, 3, 4)})
    assert y.shape == (2, 12)


def test_a_split_with_an_empty_part_and_an_empty_graph_output():
    nodes = [helper.make_node("Split", ["x", "parts"], ["a", "b"], axis=1),
             helper.make_node("Relu", ["a"], ["y0"]),
             helper.make_node("Mul", ["b", "b"], ["y1"])]
    sess, (y0, y1) = check3(model(nodes, {"x": (4, 6)}, ["y0", "y1"], {"parts": np.array([0, 6])}),
                            {"x": rand(4, 6)})
    assert y0.shape == (4, 0) and y1.shape == (4, 6)


def test_a_slice_whose_start_passes_its_end_and_an_empty_output_through_export(tmp_path):
    nodes = [helper.make_node("Slice", ["x", "start", "end"], ["y"]), helper.make_node("Sigmoid", ["x"], ["z"])]
    m = model(nodes, {"x": (5, 3)}, ["y", "z"], {"start": np.array([4]), "end": np.array([2])})
    sess, (y, z) = check3(m, {"x": rand(5, 3)})
    assert y.shape == (0, 3)
    path = str(tmp_path / "empty_out.so")
    sess.export_library(path)
    again = load_module(path).run(None, {"x": rand(5, 3)})
    assert again[0].shape == (0, 3) and again[0].dtype == np.float32
    np.testing.assert_array_equal(again[1], z)


@pytest.mark.parametrize("op", ["conv", "matmul", "softmax"])
def test_an_empty_batch_runs_through_a_network(op):
    """input_shapes gives the symbolic batch 0: the module takes (0, ...) and gives (0, ...), as onnxruntime."""
    rng = np.random.default_rng(3)
    if op == "conv":
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["y"])]
        inits = {"w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "b": np.ones(8, np.float32)}
        shape = ("N", 3, 6, 6)
    elif op == "matmul":
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        inits, shape = {"w": rng.standard_normal((16, 5)).astype(np.float32)}, ("N", 7, 16)
    else:
        nodes, inits, shape = [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {}, ("N", 40)
    m = model(nodes, {"x": shape}, ["y"], inits)
    concrete = (0,) + shape[1:]
    _, (y,) = check3(m, {"x": np.zeros(concrete, np.float32)}, {"x": concrete})
    assert y.shape[0] == 0


@pytest.mark.parametrize("op, expected", [("ReduceSum", 0.0), ("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_reducing_an_empty_axis_gives_the_identity(op, expected):
    """ONNX (opset 18): the reduction of an empty set is the combiner's identity."""
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)]
    m = model(nodes, {"x": (3, 0)}, ["y"], {"axes": np.array([1])}, opset=18)
    _, (y,) = check3(m, {"x": np.zeros((3, 0), np.float32)})
    np.testing.assert_array_equal(y, np.full(3, expected, np.float32))


@pytest.mark.parametrize("case", ["topk k=0", "nonzero of zeros", "compress of nothing", "tile by 0",
                                  "resize to an empty dim", "concat with an empty input"])
def test_ops_whose_result_is_empty(case):
    x = rand(2, 4)
    if case == "topk k=0":
        nodes, inits = [helper.make_node("TopK", ["x", "k"], ["y", "i"])], {"k": np.array([0])}
        outs = ["y"]
    elif case == "nonzero of zeros":
        nodes = [helper.make_node("NonZero", ["z"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=F)]
        inits, outs = {"z": np.zeros(5, np.float32)}, ["y"]
    elif case == "compress of nothing":
        nodes = [helper.make_node("Compress", ["x", "c"], ["y"], axis=1)]
        inits, outs = {"c": np.zeros(4, bool)}, ["y"]
    elif case == "tile by 0":
        nodes, inits, outs = [helper.make_node("Tile", ["x", "r"], ["y"])], {"r": np.array([0, 2])}, ["y"]
    elif case == "resize to an empty dim":
        x = rand(1, 1, 2, 4)
        nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
        inits, outs = {"scales": np.array([1, 1, 0.2, 1], np.float32)}, ["y"]
    else:
        nodes = [helper.make_node("Concat", ["x", "e"], ["y"], axis=0)]
        inits, outs = {"e": np.zeros((0, 4), np.float32)}, ["y"]
    _, got = check3(model(nodes, {"x": x.shape}, outs, inits), {"x": x})
    assert (got[0].size == 0) == (case != "concat with an empty input")


def test_a_zero_size_input_is_checked_but_not_read():
    m = model([helper.make_node("Shape", ["e"], ["s"]), helper.make_node("Cast", ["s"], ["sf"], to=F),
               helper.make_node("Add", ["x", "sf"], ["y"])], {"x": (2,), "e": (0, 2)}, ["y"])
    sess, (y,) = check3(m, {"x": rand(2), "e": np.zeros((0, 2), np.float32)})
    np.testing.assert_array_equal(y, rand(2) + np.array([0, 2], np.float32))
    with pytest.raises(ValueError, match=r"'e' has shape \(1, 2\), expected \(0, 2\)"):
        sess.run(None, {"x": rand(2), "e": np.zeros((1, 2), np.float32)})

"""Constant work is done once: whatever path a weight takes to its kernel (Gemm with or without transB, MatMul
with its weight behind Reshape/Transpose/Flatten, a Cast, a DequantizeLinear of an int8 weight, a weight over
the old 2^26-element folding limit), the compiled module has no kernel that reads only constants
(compiler/passes/constants.py), and still computes what onnxruntime does. The check itself names what breaks it."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.passes import PassContext, run_pipeline
from compiler.passes import constants as const_pass
from compiler.passes import simplify
from frontends import from_onnx
from harness import with_output_shapes
from relayish import Call, Constant, Function, IRModule, TensorType, Var

RNG = np.random.default_rng(5)


def _model(nodes, inputs: dict, inits: dict, opset=17):
    graph = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                 for n, s in inputs.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _weight(*shape):
    return (RNG.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


WEIGHT_PATHS = {
    "gemm transB=1": _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], {"x": (3, 40)},
                            {"w": _weight(24, 40), "b": _weight(24)}),
    "gemm transB=0": _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], {"x": (3, 40)},
                            {"w": _weight(40, 24), "b": _weight(24)}),
    "matmul behind reshape": _model(
        [helper.make_node("Reshape", ["w", "s"], ["w2"]), helper.make_node("MatMul", ["x", "w2"], ["y"])],
        {"x": (2, 5, 40)}, {"w": _weight(4, 10, 24), "s": np.array([40, 24], np.int64)}),
    "matmul behind transpose": _model(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["y"])],
        {"x": (2, 5, 40)}, {"w": _weight(24, 40)}),
    "matmul behind flatten": _model(
        [helper.make_node("Flatten", ["w"], ["wf"], axis=1), helper.make_node("MatMul", ["x", "wf"], ["y"])],
        {"x": (6, 40)}, {"w": _weight(40, 4, 6)}),
    "cast of a float16 weight": _model(
        [helper.make_node("Cast", ["w"], ["wc"], to=TensorProto.FLOAT), helper.make_node("MatMul", ["x", "wc"], ["y"])],
        {"x": (6, 40)}, {"w": _weight(40, 24).astype(np.float16)}),
    "dequantized int8 weight": _model(
        [helper.make_node("DequantizeLinear", ["wq", "scale", "zero"], ["w"], axis=0),
         helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        {"x": (1, 8, 9, 9)}, {"wq": RNG.integers(-128, 127, (16, 8, 3, 3), dtype=np.int8),
                              "scale": np.full(16, 0.02, np.float32), "zero": np.zeros(16, np.int8)}),
    "weight expanded from a row": _model(
        [helper.make_node("Expand", ["w", "s"], ["we"]), helper.make_node("Add", ["x", "we"], ["y"])],
        {"x": (6, 40)}, {"w": _weight(1, 40), "s": np.array([6, 40], np.int64)}),
}


@pytest.mark.parametrize("name", list(WEIGHT_PATHS))
def test_no_kernel_reads_only_constants_whatever_path_the_weight_takes(name):
    model = WEIGHT_PATHS[name]
    fused = run_pipeline(from_onnx(model), PassContext())
    assert const_pass.constant_kernels(fused) == []
    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    got, = compile_model(model).run(None, feeds)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_a_weight_over_the_old_folding_limit_is_packed_at_compile_time(monkeypatch):
    """The fold had a size limit (2^26 elements, under ZFNet's 4096 x 18432 fc6): its packing ran on every call.
    Here the limit's role is played by a small expansion threshold, which a plain transpose never crosses."""
    monkeypatch.setattr(simplify, "EXPANSION_MIN_BYTES", 1024)
    model = WEIGHT_PATHS["gemm transB=0"]
    fused = run_pipeline(from_onnx(model), PassContext())
    assert const_pass.constant_kernels(fused) == []
    assert not any(isinstance(n, Call) and "layout_transform" in str(n.op) for n in _calls(fused))


def _calls(fused):
    from relayish.expr import post_order
    return [n for n in post_order(fused.main.body) if isinstance(n, Call)]


def test_an_expansion_stays_a_computation():
    """A row broadcast to a result many times its size is not stored: computed per call, the check allows it."""
    row = np.ones((1, 4), np.float32)
    assert simplify.expands(TensorType((1 << 22, 4), "float32"), [row])
    assert not simplify.expands(TensorType((1 << 22, 4), "float32"), [np.ones((1 << 22, 4), np.float32)])
    assert not simplify.expands(TensorType((16, 4), "float32"), [row])  # small: folded


def test_the_check_names_a_kernel_that_reads_only_constants(monkeypatch):
    p = Var("p0", TensorType((4, 8), "float32"))
    kernel = Function((p,), Call("transpose", (p,), {"axes": (1, 0)}), {"Primitive": 1})
    body = Call(kernel, (Constant(np.ones((4, 8), np.float32)),))
    fused = IRModule(Function((), body))
    assert const_pass.constant_kernels(fused) == ["transpose -> Tensor[(8, 4), float32]"] or \
        const_pass.constant_kernels(fused)[0].startswith("transpose -> ")
    monkeypatch.setenv(const_pass.INVARIANTS_ENV, "1")
    with pytest.raises(const_pass.InvariantError, match=r"1 kernel\(s\) read only constants.*transpose"):
        const_pass.check_constant_kernels(fused)
    monkeypatch.delenv(const_pass.INVARIANTS_ENV)
    const_pass.check_constant_kernels(fused)  # off: silent (the kernel computes the right values per call)
    folded = const_pass.fold_constant_kernels(fused)
    assert isinstance(folded.main.body, Constant)
    np.testing.assert_array_equal(folded.main.body.data, np.ones((8, 4), np.float32))

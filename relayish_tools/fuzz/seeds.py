"""The seed models the fuzzer mutates: small valid models, one per family of the ops relayish compiles.

Each seed is built with onnx.helper, seeded weights, opset 13, IR version 8, and graph outputs whose shapes come
from onnx's shape inference (the checker wants them). All are valid: onnxruntime and relayish run each one and
agree (tests/test_fuzz.py checks it), so every difference the fuzzer finds comes from a mutation.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


class _Builder:
    """Nodes, initializers and inputs of one graph, with seeded weights."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []

    def input(self, name: str, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def weight(self, name: str, shape, scale: float = 0.5, dtype=np.float32, values=None) -> str:
        data = values if values is not None else self.rng.standard_normal(shape) * scale
        self.inits.append(numpy_helper.from_array(np.asarray(data, dtype=dtype), name))
        return name

    def node(self, op: str, inputs, **attrs) -> str:
        out = f"{op.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op}_{len(self.nodes)}", **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, group: int = 1, **attrs) -> str:
        w = self.weight(f"w{len(self.inits)}", (cout, cin // group, k, k))
        b = self.weight(f"b{len(self.inits)}", (cout,))
        return self.node("Conv", [x, w, b], kernel_shape=[k, k], group=group, **attrs)

    def model(self, *outputs: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
        inferred = onnx.shape_inference.infer_shapes(model)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        onnx.checker.check_model(model)
        return model


def conv_bn_relu_pool_gemm() -> onnx.ModelProto:
    g = _Builder("conv_bn_relu_pool_gemm", 1)
    y = g.conv(g.input("x", (1, 3, 8, 8)), 3, 4, pads=[1, 1, 1, 1])
    bn = [g.weight("gamma", (4,)), g.weight("beta", (4,)), g.weight("mean", (4,)),
          g.weight("var", (4,), values=np.abs(g.rng.standard_normal(4)) + 0.5)]
    y = g.node("Relu", [g.node("BatchNormalization", [y, *bn], epsilon=1e-5)])
    y = g.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = g.node("Flatten", [y], axis=1)
    return g.model(g.node("Gemm", [y, g.weight("fc", (5, 64)), g.weight("fc_b", (5,))], transB=1))


def residual_add() -> onnx.ModelProto:
    g = _Builder("residual_add", 2)
    x = g.input("x", (1, 4, 6, 6))
    y = g.conv(g.node("Relu", [g.conv(x, 4, 4, pads=[1, 1, 1, 1])]), 4, 4, pads=[1, 1, 1, 1])
    return g.model(g.node("Relu", [g.node("Add", [y, x])]))


def concat_branches() -> onnx.ModelProto:
    g = _Builder("concat_branches", 3)
    x = g.input("x", (1, 3, 7, 7))
    a = g.conv(x, 3, 2, k=1)
    b = g.conv(x, 3, 3, k=3, pads=[1, 1, 1, 1])
    y = g.node("Concat", [a, b], axis=1)
    return g.model(g.node("AveragePool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))


def depthwise_conv() -> onnx.ModelProto:
    g = _Builder("depthwise_conv", 4)
    y = g.conv(g.input("x", (1, 6, 9, 9)), 6, 6, group=6, strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.node("Clip", [y, g.weight("lo", (), values=0.0), g.weight("hi", (), values=6.0)])
    return g.model(g.node("GlobalAveragePool", [y]))


def reshape_transpose_softmax() -> onnx.ModelProto:
    g = _Builder("reshape_transpose_softmax", 5)
    x = g.input("x", (2, 3, 4))
    y = g.node("Reshape", [x, g.weight("shape", (3,), dtype=np.int64, values=[2, 4, 3])])
    y = g.node("Transpose", [y], perm=[0, 2, 1])
    return g.model(g.node("Softmax", [y], axis=-1))


def matmul_bias() -> onnx.ModelProto:
    g = _Builder("matmul_bias", 6)
    x = g.input("x", (2, 4, 5))
    y = g.node("MatMul", [x, g.weight("w", (5, 3))])
    y = g.node("Add", [y, g.weight("bias", (3,))])
    return g.model(g.node("Sigmoid", [y]))


def pool_variety() -> onnx.ModelProto:
    g = _Builder("pool_variety", 7)
    x = g.input("x", (1, 2, 10, 9))
    a = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    b = g.node("LeakyRelu", [g.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_UPPER")],
               alpha=0.1)
    return g.model(g.node("GlobalMaxPool", [a]), b)


SEEDS = {fn.__name__: fn for fn in (conv_bn_relu_pool_gemm, residual_add, concat_branches, depthwise_conv,
                                    reshape_transpose_softmax, matmul_bias, pool_variety)}


def seed_models() -> dict[str, onnx.ModelProto]:
    """name -> a fresh ModelProto of every seed."""
    return {name: fn() for name, fn in SEEDS.items()}

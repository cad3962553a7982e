"""QDQ groups of a statically quantized model as the integer ops they stand for, before conversion.

onnxruntime's quantize_static (QuantFormat.QDQ) writes a quantized convolution as float ops between quantize /
dequantize pairs:

    DequantizeLinear(xq) -> Conv(., DequantizeLinear(wq), DequantizeLinear(bq)) -> QuantizeLinear -> yq

and onnxruntime's graph optimizer runs each such group as one integer kernel (its QDQ transformer). Imported as
written, the group would be float arithmetic; `fuse_qdq` rewrites it first, on the ONNX graph where the integer
weights are still there, into the quantized op with the same inputs, whose converter builds the integer product
(frontends/onnx/ops/integer.py) with its requantization in the epilogue, uint8/int8 tensors between such ops:

    Conv   -> QLinearConv          (x per tensor; w int8/uint8, per tensor or per output channel; int32 bias)
    MatMul -> QLinearMatMul        (b constant, per tensor or per column), or MatMulIntegerToFloat without Q
    Gemm   -> QGemm (com.microsoft) (B constant; with or without the QuantizeLinear, float output then)
    MaxPool -> MaxPool of the quantized tensor (the same scale and zero point on both sides)

A group is fused only when it means exactly that: per-tensor activation parameters, constant integer weights,
a bias quantized with scale x_scale * w_scale and zero point 0 (as the quantizer writes it), and a QuantizeLinear
that is the product's only reader. Everything else (Add, pools, concatenations between the QDQ pairs) stays
float between its DequantizeLinear and QuantizeLinear: the float ops where the model leaves int8.

Numerics: the fused product is exact (int32) and requantized once, as onnxruntime's fused kernels do; the unfused
QDQ form sums float products and can land one quantization step away at a rounding boundary, as onnxruntime's own
optimized and unoptimized sessions differ (tests/test_qnn.py measures it on a quantized ResNet-18).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

CONTRIB = "com.microsoft"
_DEFAULT = ("", "ai.onnx")
Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


class _Graph:
    """Lookups over one graph: producers, readers, initializer values, graph outputs."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output}
        self.readers: dict[str, list] = defaultdict(list)
        for n in graph.node:
            for i in n.input:
                self.readers[i].append(n)
        self.inits = {t.name: t for t in graph.initializer}
        self.outputs = {o.name for o in graph.output}
        self.new_inits: list = []
        self._arrays: dict = {}

    def array(self, name: str) -> np.ndarray | None:
        if name not in self.inits:
            return None
        if name not in self._arrays:
            self._arrays[name] = numpy_helper.to_array(self.inits[name])
        return self._arrays[name]

    def zero(self, dtype, like: str) -> str:
        """The name of a new 0-d initializer 0 of dtype (an omitted zero point)."""
        name = f"{like}_qdq_zero_point"
        while name in self.inits or name in self.producer:
            name += "_"
        tensor = numpy_helper.from_array(np.zeros((), dtype), name)
        self.inits[name] = tensor
        self.new_inits.append(tensor)
        return name

    def dq(self, name: str):
        """The DequantizeLinear node producing `name` (default domain, no blocks), else None."""
        node = self.producer.get(name)
        if node is None or node.op_type != "DequantizeLinear" or node.domain not in _DEFAULT or \
                _attr(node, "block_size", 0):
            return None
        return node

    def only_reader_q(self, name: str):
        """The QuantizeLinear that is `name`'s only reader (name not a graph output), else None."""
        readers = self.readers.get(name, [])
        if name in self.outputs or len(readers) != 1:
            return None
        q = readers[0]
        return q if q.op_type == "QuantizeLinear" and q.domain in _DEFAULT and q.input[0] == name else None


def _attr(node, name, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _input(node, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def _activation(g: _Graph, dq) -> tuple[str, str, str] | None:
    """(x, scale, zero point) of a per-tensor DequantizeLinear of 8-bit activations (its zero point given: it
    says the type)."""
    s, z = g.array(_input(dq, 1)), g.array(_input(dq, 2))
    if s is None or z is None or s.size != 1 or z.size != 1 or z.dtype not in Q8 or s.dtype != np.float32 or \
            dq.input[0] in g.inits:
        return None
    return dq.input[0], dq.input[1], dq.input[2]


def _weight(g: _Graph, dq, axis: int, ndim: int) -> tuple[str, str, str, np.ndarray] | None:
    """(w, scale, zero point, scale values) of a DequantizeLinear of constant 8-bit weights of rank ndim, per
    tensor or per channel along `axis`; a missing zero point becomes a new 0."""
    w, s = g.array(dq.input[0]), g.array(_input(dq, 1))
    if w is None or s is None or w.dtype not in Q8 or w.ndim != ndim or s.dtype != np.float32:
        return None
    z = g.array(_input(dq, 2)) if _input(dq, 2) else None
    if _input(dq, 2) and (z is None or z.dtype != w.dtype or z.size != s.size):
        return None
    if s.size != 1 and (s.ndim != 1 or _attr(dq, "axis", 1) % ndim != axis or s.size != w.shape[axis]):
        return None
    zp = dq.input[2] if _input(dq, 2) else g.zero(w.dtype, dq.input[0])
    return dq.input[0], dq.input[1], zp, s.reshape(-1)


def _bias(g: _Graph, name: str, scale: np.ndarray, channels: int) -> str | None:
    """The int32 bias behind `name` if a DequantizeLinear makes it from int32 values with zero point 0 and scale
    x_scale * w_scale (`scale`, per channel): the int32 bias of the integer op; None (do not fuse) otherwise."""
    dq = g.dq(name)
    if dq is None:
        return None
    b, s = g.array(dq.input[0]), g.array(_input(dq, 1))
    z = g.array(_input(dq, 2)) if _input(dq, 2) else np.zeros(1, np.int32)
    if b is None or s is None or z is None or b.dtype != np.int32 or b.shape != (channels,) or np.any(z):
        return None
    expected = np.broadcast_to(scale, (channels,))
    if not np.allclose(np.broadcast_to(s.reshape(-1), (channels,)), expected, rtol=1e-6, atol=0):
        return None
    return dq.input[0]


def _output(g: _Graph, node) -> tuple[list, str] | None:
    """([y_scale, y_zero_point], output name) of the QuantizeLinear reading node's output per tensor, else None."""
    q = g.only_reader_q(node.output[0])
    if q is None:
        return None
    s = g.array(_input(q, 1))
    z = g.array(_input(q, 2)) if _input(q, 2) else None
    if s is None or s.size != 1 or s.dtype != np.float32 or (_input(q, 2) and (z is None or z.size != 1 or
                                                                               z.dtype not in Q8)):
        return None
    if _attr(q, "output_dtype", 0) and _input(q, 2) == "":
        return None
    zp = q.input[2] if _input(q, 2) else g.zero(np.uint8, q.output[0])
    return [q.input[1], zp], q


def _conv(g: _Graph, node):
    if len(node.input) < 2:
        return None
    dqx, dqw = g.dq(node.input[0]), g.dq(node.input[1])
    x = _activation(g, dqx) if dqx is not None else None
    w = _weight(g, dqw, 0, 4) if dqw is not None else None
    out = _output(g, node)
    if x is None or w is None or out is None:
        return None
    bias = []
    if _input(node, 2):
        sx = g.array(x[1]).reshape(())
        b = _bias(g, node.input[2], np.float32(sx) * w[3], g.array(w[0]).shape[0])
        if b is None:
            return None
        bias = [b]
    (sy_zy, q) = out
    fused = helper.make_node("QLinearConv", [*x, *w[:3], *sy_zy, *bias], [q.output[0]],
                             name=(node.name or q.output[0]) + "_qlinear")
    fused.attribute.extend(node.attribute)
    return [fused], q


def _gemm(g: _Graph, node):
    if _attr(node, "transA", 0) or len(node.input) < 2:
        return None
    dqa, dqb = g.dq(node.input[0]), g.dq(node.input[1])
    trans_b = _attr(node, "transB", 0)
    a = _activation(g, dqa) if dqa is not None else None
    b = _weight(g, dqb, 0 if trans_b else 1, 2) if dqb is not None else None
    if a is None or b is None:
        return None
    n = g.array(b[0]).shape[0 if trans_b else 1]
    c = ""
    if _input(node, 2):
        if _attr(node, "beta", 1.0) != 1.0:
            return None
        c = _bias(g, node.input[2], np.float32(g.array(a[1]).reshape(())) * b[3], n)
        if c is None:
            return None
    out = _output(g, node)
    y, q = (out[0], out[1]) if out is not None else ([], None)
    inputs = [*a, *b[:3]] + ([c] if c or y else []) + y
    fused = helper.make_node("QGemm", inputs, [q.output[0] if q is not None else node.output[0]],
                             name=(node.name or node.output[0]) + "_qgemm", domain=CONTRIB,
                             alpha=float(_attr(node, "alpha", 1.0)), transB=int(trans_b))
    return [fused], q


def _matmul(g: _Graph, node):
    dqa, dqb = g.dq(node.input[0]), g.dq(node.input[1])
    a = _activation(g, dqa) if dqa is not None else None
    b = _weight(g, dqb, 1, 2) if dqb is not None else None
    if a is None or b is None:
        return None
    out = _output(g, node)
    if out is not None:
        (sy_zy, q) = out
        return [helper.make_node("QLinearMatMul", [*a, *b[:3], *sy_zy], [q.output[0]],
                                 name=(node.name or q.output[0]) + "_qlinear")], q
    fused = helper.make_node("MatMulIntegerToFloat", [a[0], b[0], a[1], b[1], a[2], b[2]], [node.output[0]],
                             name=(node.name or node.output[0]) + "_qmatmul", domain=CONTRIB)
    return [fused], None


def _max_pool(g: _Graph, node):
    """DequantizeLinear -> MaxPool -> QuantizeLinear of the same scale and zero point: MaxPool of the quantized
    tensor (exact: the max commutes with the monotone dequantization, and q(dq(v)) = v)."""
    dq = g.dq(node.input[0])
    x = _activation(g, dq) if dq is not None and len(node.output) == 1 else None
    out = _output(g, node) if x is not None else None
    if out is None or not _input(out[1], 2):
        return None
    (sy, zy), q = out
    if [g.array(x[1]).item(), g.array(x[2]).item(), g.array(x[2]).dtype] != \
            [g.array(sy).item(), g.array(zy).item(), g.array(zy).dtype]:
        return None
    pooled = helper.make_node("MaxPool", [x[0]], [q.output[0]], name=(node.name or q.output[0]) + "_quantized")
    pooled.attribute.extend(node.attribute)
    return [pooled], q


FUSIONS = {"Conv": _conv, "Gemm": _gemm, "MatMul": _matmul, "MaxPool": _max_pool}


def fuse_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its QDQ groups fused (the model itself when it has none): see the module docstring."""
    graph = model.graph
    if not any(n.op_type == "DequantizeLinear" for n in graph.node):
        return model
    g = _Graph(graph)
    replaced: dict[int, list] = {}
    for node in graph.node:
        if node.domain not in _DEFAULT or node.op_type not in FUSIONS:
            continue
        fused = FUSIONS[node.op_type](g, node)
        if fused is not None:
            nodes, q = fused
            replaced[id(node)] = nodes
            if q is not None:
                replaced[id(q)] = []
    if not replaced:
        return model
    nodes = [m for n in graph.node for m in replaced.get(id(n), [n])]
    nodes = _without_dead_dequantize(nodes, {o.name for o in graph.output})
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(g.new_inits)
    if any(n.domain == CONTRIB for n in nodes) and not any(o.domain == CONTRIB for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(CONTRIB, 1))
    return out


def _without_dead_dequantize(nodes: list, outputs: set) -> list:
    """nodes minus the DequantizeLinear nodes nothing reads any more (the fused groups' weights and biases)."""
    read = {i for n in nodes for i in n.input} | outputs
    return [n for n in nodes if not (n.op_type == "DequantizeLinear" and n.output[0] not in read)]

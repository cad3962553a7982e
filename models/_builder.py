"""What every reference model builder shares: a graph under construction, its emission as a ModelProto, and the
calibration of its BatchNorm statistics on real activations.

A `Graph` holds nodes in topological order (each node's name is its first output's name) and named numpy
parameters; nothing becomes an ONNX tensor until `make_model`, so builders can still change parameters (the
calibration does). Float parameters are emitted as float32, integer ones keep their dtype (int64 ids and shapes).
Weights come from the graph's seeded generator in construction order, so a seed fixes the model byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17
IR_VERSIONS = {13: 7, 17: 8}  # the IR version of each opset used; newer IR versions are not read by every onnxruntime
BN_EPSILON = 1e-5
CALIBRATION_BATCH = 2
CALIBRATION_SEED = 20240917  # the image classifiers' BNs are calibrated on fixed noise images, whatever the seed


@dataclass
class Graph:
    """Nodes in topological order plus named parameters (kept as numpy until the graph is emitted)."""
    rng: np.random.Generator
    nodes: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    batchnorms: list = field(default_factory=list)  # names of BN nodes, in topological order

    def op(self, op_type, name, inputs, **attrs):
        """Append one node whose single output is named `name`; returns that name."""
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def const(self, name, value):
        """A parameter that is data, not a weight (shapes, axes, ids, scalars); returns its name."""
        self.params[name] = np.asarray(value)
        return name

    def rename(self, old, new):
        """Rename tensor `old` (and its producer, whose name is its output's) to `new`, e.g. to name a graph output."""
        for n in self.nodes:
            n.input[:] = [new if i == old else i for i in n.input]
            if n.output and n.output[0] == old:
                n.output[0], n.name = new, new
        return new

    def constant(self, name, value, dtype=np.float32):
        """A Constant node holding `value` as `dtype` (how exporters emit scalars, shapes and axes)."""
        tensor = numpy_helper.from_array(np.asarray(value, dtype), name)
        return self.op("Constant", name, [], value=tensor)

    def conv(self, name, x, cin, cout, kernel, stride=1, pad=0, group=1, bias=False):
        """Conv with He-normal weights (fan-in cin/group*k*k); bias, if any, N(0, 0.01). Returns its output."""
        std = np.sqrt(2.0 / (cin // group * kernel * kernel))
        self.params[f"{name}.weight"] = self.rng.standard_normal((cout, cin // group, kernel, kernel)) * std
        inputs = [x, f"{name}.weight"]
        if bias:
            inputs.append(self.const(f"{name}.bias", self.rng.normal(0.0, 0.01, cout)))
        attrs = {"group": group} if group != 1 else {}
        self.nodes.append(helper.make_node(
            "Conv", inputs, [name], name=name, kernel_shape=[kernel, kernel], strides=[stride, stride],
            pads=[pad] * 4, **attrs))
        return name

    def bn(self, name, x, channels, epsilon=BN_EPSILON):
        """BatchNormalization with gamma U(0.5, 1.5), beta N(0, 0.1) and statistics to be calibrated."""
        self.params[f"{name}.weight"] = self.rng.uniform(0.5, 1.5, channels)
        self.params[f"{name}.bias"] = self.rng.normal(0.0, 0.1, channels)
        self.params[f"{name}.running_mean"] = np.zeros(channels)  # calibrated later
        self.params[f"{name}.running_var"] = np.ones(channels)
        self.nodes.append(helper.make_node(
            "BatchNormalization", [x] + [f"{name}.{p}" for p in ("weight", "bias", "running_mean", "running_var")],
            [name], name=name, epsilon=epsilon))
        self.batchnorms.append(name)
        return name

    def gemm(self, name, x, cin, cout, out=None, float32=False):
        """Gemm x @ W^T + b (transB=1, torch's Linear) with He-normal W and N(0, 0.01) bias; output `out`.

        float32: draw W in float32, scaled in place (a quarter of the memory of a float64 draw and its scaled copy,
        for weights of hundreds of MB such as ZFNet's fc6; other values than a float64 draw's)."""
        if float32:
            weight = self.rng.standard_normal((cout, cin), dtype=np.float32)
            weight *= np.float32(np.sqrt(2.0 / cin))
        else:
            weight = self.rng.standard_normal((cout, cin)) * np.sqrt(2.0 / cin)
        self.params[f"{name}.weight"] = weight
        self.params[f"{name}.bias"] = self.rng.normal(0.0, 0.01, cout)
        out = out or name
        self.nodes.append(helper.make_node("Gemm", [x, f"{name}.weight", f"{name}.bias"], [out], name=name, transB=1))
        return out


def out_size(size, kernel, stride=1, pad=0, ceil=False, what="window") -> int:
    """The output extent of a conv/pool window over `size` (pad on both sides); ValueError if it is empty."""
    span = size + 2 * pad - kernel
    out = (-(-span // stride) if ceil else span // stride) + 1
    if span < 0 or out < 1:
        raise ValueError(f"{what}: a {kernel}x{kernel} window does not fit a {size}x{size} input (pad {pad})")
    return out


def tensor_info(name, dtype, shape):
    """A graph input/output declaration; dtype a numpy dtype, shape a list of ints/names or None (unknown)."""
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def make_model(nodes, params, inputs, outputs, name, opset=OPSET) -> onnx.ModelProto:
    """An ONNX model of `nodes` with the `params` they use as initializers (in `params` order).

    inputs/outputs: ValueInfoProtos (see tensor_info)."""
    used = {i for n in nodes for i in n.input}
    inits = [numpy_helper.from_array(_emitted(v), k) for k, v in params.items() if k in used]
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSIONS[opset],
                             producer_name="relayish.models")


def _emitted(value):
    value = np.asarray(value)
    return value.astype(np.float32, copy=False) if value.dtype.kind == "f" else value


def save(path, model: onnx.ModelProto) -> Path:
    """Write `model` to `path` (creating its directory) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def cnn_model(g: Graph, name, batch, image_size, num_classes, output="logits") -> onnx.ModelProto:
    """Calibrate the BNs of an image classifier (input "input" Bx3xSxS, output `output` BxC) and emit it."""
    if isinstance(batch, str) and batch.isdigit():
        batch = int(batch)
    if g.batchnorms:
        calibrate(g, {"input": calibration_images(image_size)})
    model = make_model(g.nodes, g.params, [tensor_info("input", np.float32, [batch, 3, image_size, image_size])],
                       [tensor_info(output, np.float32, [batch, num_classes])], name)
    onnx.checker.check_model(model)
    return model


def calibration_images(image_size, width=None):
    """The CALIBRATION_BATCH x 3 x S x S N(0, 1) images cnn_model calibrates on (the same for every model);
    S x width if a width is given (text-line images)."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    shape = (CALIBRATION_BATCH, 3, image_size, image_size if width is None else width)
    return rng.standard_normal(shape).astype(np.float32)


def calibrate(g: Graph, feeds: dict):
    """Set each BN's running mean/var to the per-channel statistics of its input on `feeds` (NCHW activations).

    BNs are calibrated in rounds: a round takes every BN none of whose upstream BNs is still uncalibrated and runs,
    in onnxruntime, only the nodes not run before that its inputs need, starting from the activations kept from
    earlier rounds (a kept activation is dropped once all its consumers have run). So the whole network runs about
    once, however many BNs it has, and every BN sees the activations of the fully calibrated layers before it."""
    producer = {out: n for n in g.nodes for out in n.output}
    consumers = {}
    for n in g.nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
    upstream = _upstream_batchnorms(g.nodes)
    bn_input = {n.name: n.input[0] for n in g.nodes if n.op_type == "BatchNormalization"}
    known, done, pending = dict(feeds), set(), list(g.batchnorms)
    while pending:
        ready = [bn for bn in pending if not upstream[bn_input[bn]] & set(pending)]
        targets = [bn_input[bn] for bn in ready]
        _run_missing(g, producer, consumers, known, done, targets)
        for bn, t in zip(ready, targets):
            act = known[t].astype(np.float64)
            g.params[f"{bn}.running_mean"] = act.mean(axis=(0, 2, 3))
            g.params[f"{bn}.running_var"] = act.var(axis=(0, 2, 3))
        pending = [bn for bn in pending if bn not in ready]


def _upstream_batchnorms(nodes) -> dict:
    """tensor name -> the names of the BN nodes it depends on, itself included (inputs and parameters: none)."""
    up = {}
    for n in nodes:
        deps = set().union(*(up.get(i, set()) for i in n.input))
        if n.op_type == "BatchNormalization":
            deps.add(n.name)
        for out in n.output:
            up[out] = deps
    return up


def _run_missing(g: Graph, producer, consumers, known: dict, done: set, targets):
    """Run (in onnxruntime) the nodes not yet in `done` that `targets` need, feeding the `known` activations.

    Afterwards `known` holds the targets and every new activation that a node not yet run consumes."""
    import onnxruntime as ort
    needed, stack = {}, [t for t in targets if t not in known]
    while stack:
        t = stack.pop()
        node = producer[t]
        if node.name in needed:
            continue
        needed[node.name] = node
        stack.extend(i for i in node.input if i in producer and i not in known)
    if not needed:
        return
    nodes = [n for n in g.nodes if n.name in needed]  # topological order
    done.update(needed)
    keep = [o for n in nodes for o in n.output if o in targets or any(c not in done for c in consumers.get(o, ()))]
    feeds = {i: known[i] for n in nodes for i in n.input if i in known}
    model = make_model(nodes, g.params, [tensor_info(k, v.dtype, list(v.shape)) for k, v in feeds.items()],
                       [tensor_info(o, np.float32, None) for o in keep], f"{g.nodes[-1].name}.calibration")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    known.update(zip(keep, sess.run(keep, feeds)))
    for k in [k for k in known if k not in targets and all(c in done for c in consumers.get(k, ()))]:
        del known[k]

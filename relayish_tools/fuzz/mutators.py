"""Mutators: small edits of a valid model that keep it a parseable ModelProto (it still serializes and parses)
but may make it invalid, unsupported or hostile.

Each mutator is `fn(model, rng) -> description | None`: it edits `model` in place and says what it did, or
returns None (and leaves the model untouched) when it does not apply (e.g. no node has the attribute it edits).
`mutate(model, rng, count)` applies `count` applicable mutators chosen by `rng` to a copy: a mutant is a pure
function of (seed model, rng state), so (campaign seed, mutant index) reproduces it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

HUGE = (2**31, 2**31 - 1, 2**40, 2**62)
WINDOW_ATTRS = ("kernel_shape", "strides", "pads", "dilations")
INT_ATTRS = ("group", "axis", "ceil_mode", "transA", "transB", "count_include_pad", "allowzero", "keepdims")
OTHER_DTYPES = (TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16, TensorProto.UINT8,
                TensorProto.BOOL, TensorProto.INT8, TensorProto.BFLOAT16)


def _choice(rng: np.random.Generator, items):
    items = list(items)
    return items[int(rng.integers(len(items)))] if items else None


def _int_value(rng: np.random.Generator, current: int | None = None) -> int:
    """A hostile int: zero, negative, huge, off by one, or small."""
    pool = [0, -1, -2, 1, 2, 3, 7, int(rng.integers(-100, 100)), *HUGE, -(2**31)]
    if current is not None:
        pool += [current + 1, current - 1, -current]
    return int(_choice(rng, pool))


def _node_attrs(model, names) -> list[tuple[onnx.NodeProto, AttributeProto]]:
    return [(n, a) for n in model.graph.node for a in n.attribute if a.name in names]


def attr_ints(model, rng) -> str | None:
    """A window attribute or perm: one value hostile, or a list of the wrong length, or empty."""
    found = _node_attrs(model, WINDOW_ATTRS + ("perm",))
    if not found:
        return None
    node, attr = _choice(rng, found)
    values = list(attr.ints)
    kind = int(rng.integers(4))
    if kind == 0 and values:
        values[int(rng.integers(len(values)))] = _int_value(rng)
    elif kind == 1:
        values = values + [_int_value(rng, 1)]
    elif kind == 2:
        values = values[:-1]
    else:
        values = [_int_value(rng)] * len(values)
    del attr.ints[:]
    attr.ints.extend(values)
    return f"{node.name}.{attr.name} = {values}"


def attr_int(model, rng) -> str | None:
    """group, axis, ceil_mode, transA/B...: a hostile int."""
    found = _node_attrs(model, INT_ATTRS)
    if not found:
        return None
    node, attr = _choice(rng, found)
    attr.i = _int_value(rng, attr.i)
    return f"{node.name}.{attr.name} = {attr.i}"


def add_attr(model, rng) -> str | None:
    """An attribute the node's op may not have (or a known one added where absent: axis, group, perm, pads)."""
    node = _choice(rng, model.graph.node)
    name = _choice(rng, ("foo", "axis", "group", "perm", "pads", "dilations", "auto_pad", "alpha", "kernel_shape"))
    if any(a.name == name for a in node.attribute):
        return None
    if name == "auto_pad":
        value = _choice(rng, ("VALID", "SAME_UPPER", "SAME_LOWER", "NOTSET", "BOGUS"))
    elif name in ("perm", "pads", "dilations", "kernel_shape"):
        value = [_int_value(rng) for _ in range(int(rng.integers(0, 5)))] or [1]
    elif name == "alpha":
        value = float(_choice(rng, (0.0, -1.0, np.inf, np.nan, 1e30)))
    else:
        value = _int_value(rng)
    node.attribute.append(helper.make_attribute(name, value))
    return f"{node.name}: added {name} = {value}"


def drop_attr(model, rng) -> str | None:
    node = _choice(rng, [n for n in model.graph.node if n.attribute])
    if node is None:
        return None
    attr = _choice(rng, node.attribute)
    node.attribute.remove(attr)
    return f"{node.name}: dropped {attr.name}"


def auto_pad_with_pads(model, rng) -> str | None:
    """auto_pad != NOTSET together with explicit pads (ONNX forbids it), on a conv or pool."""
    nodes = [n for n in model.graph.node if n.op_type in ("Conv", "MaxPool", "AveragePool")]
    node = _choice(rng, nodes)
    if node is None:
        return None
    mode = _choice(rng, ("VALID", "SAME_UPPER", "SAME_LOWER"))
    for a in [a for a in node.attribute if a.name in ("auto_pad", "pads")]:
        node.attribute.remove(a)
    node.attribute.extend([helper.make_attribute("auto_pad", mode), helper.make_attribute("pads", [1, 1, 1, 1])])
    return f"{node.name}: auto_pad={mode} with pads=[1, 1, 1, 1]"


def init_dims(model, rng) -> str | None:
    """An initializer's dims changed, its data kept (so they disagree), or a dim made huge/zero/negative."""
    init = _choice(rng, model.graph.initializer)
    if init is None:
        return None
    dims = list(init.dims)
    if dims and rng.random() < 0.6:
        dims[int(rng.integers(len(dims)))] = _int_value(rng)
    elif dims and rng.random() < 0.5:
        dims = dims[:-1]
    else:
        dims = dims + [int(_choice(rng, (1, 2)))]
    init.dims[:] = dims
    return f"initializer {init.name}.dims = {dims}"


def init_dtype(model, rng) -> str | None:
    """An initializer's data_type changed, its raw bytes kept."""
    init = _choice(rng, model.graph.initializer)
    if init is None:
        return None
    init.data_type = int(_choice(rng, [t for t in OTHER_DTYPES if t != init.data_type]))
    return f"initializer {init.name}.data_type = {TensorProto.DataType.Name(init.data_type)}"


def init_data(model, rng) -> str | None:
    """An initializer's raw data cut, grown, emptied or given NaN/Inf values."""
    init = _choice(rng, [t for t in model.graph.initializer if t.HasField("raw_data")])
    if init is None:
        return None
    data = init.raw_data
    kind = int(rng.integers(4))
    if kind == 0:
        init.raw_data = data[: int(rng.integers(len(data) + 1))]
    elif kind == 1:
        init.raw_data = data + bytes(int(rng.integers(1, 9)))
    elif kind == 2:
        init.raw_data = b""
    else:
        if init.data_type != TensorProto.FLOAT:
            return None
        whole = len(data) - len(data) % 4  # an earlier edit of this mutant may have cut the data mid-value
        values = np.frombuffer(data[:whole], np.float32).copy()
        values[rng.random(values.shape) < 0.3] = _choice(rng, (np.nan, np.inf, -np.inf))
        init.raw_data = values.tobytes() + data[whole:]
    return f"initializer {init.name}: raw data edit #{kind} ({len(data)} -> {len(init.raw_data)} bytes)"


def drop_init(model, rng) -> str | None:
    init = _choice(rng, model.graph.initializer)
    if init is None:
        return None
    model.graph.initializer.remove(init)
    return f"dropped initializer {init.name}"


def input_shape(model, rng) -> str | None:
    """A graph input's dim set to 0, 1, 2^31, a symbol or unknown; or its rank changed; or its shape dropped."""
    vi = _choice(rng, model.graph.input)
    shape = vi.type.tensor_type.shape
    kind = int(rng.integers(5))
    if kind == 0 and shape.dim:
        dim = shape.dim[int(rng.integers(len(shape.dim)))]
        value = _choice(rng, (0, 1, 2, 2**31, 2**20, -3))
        dim.Clear()
        dim.dim_value = int(value)
        return f"input {vi.name}: a dim = {value}"
    if kind == 1 and shape.dim:
        dim = shape.dim[int(rng.integers(len(shape.dim)))]
        dim.Clear()
        if rng.random() < 0.7:
            dim.dim_param = "N"
        return f"input {vi.name}: a dim made symbolic or unknown"
    if kind == 2 and shape.dim:
        shape.dim.remove(shape.dim[-1])
        return f"input {vi.name}: rank - 1"
    if kind == 3:
        shape.dim.add().dim_value = int(_choice(rng, (1, 2, 3)))
        return f"input {vi.name}: rank + 1"
    vi.type.tensor_type.ClearField("shape")
    return f"input {vi.name}: shape dropped"


def _defined_names(model) -> list[str]:
    names = [i.name for i in model.graph.input] + [t.name for t in model.graph.initializer]
    return names + [o for n in model.graph.node for o in n.output]


def rewire(model, rng) -> str | None:
    """A node input pointed at another tensor (maybe defined later: a cycle or use-before-definition), at a name
    nothing defines, or at nothing ("")."""
    node = _choice(rng, [n for n in model.graph.node if n.input])
    k = int(rng.integers(len(node.input)))
    target = _choice(rng, _defined_names(model) + ["ghost", ""])
    old, node.input[k] = node.input[k], target
    return f"{node.name}.input[{k}]: {old} -> {target!r}"


def extra_input(model, rng) -> str | None:
    """One more node input than the op takes, or one fewer."""
    node = _choice(rng, model.graph.node)
    if rng.random() < 0.5 and node.input:
        node.input.pop()
        return f"{node.name}: last input removed"
    node.input.append(_choice(rng, _defined_names(model)))
    return f"{node.name}: input {node.input[-1]!r} appended"


def duplicate_name(model, rng) -> str | None:
    """A node output, initializer or graph input renamed to a name already in use."""
    names = _defined_names(model)
    kind = int(rng.integers(3))
    if kind == 0:
        node = _choice(rng, model.graph.node)
        node.output[0] = _choice(rng, names)
        return f"{node.name}.output = {node.output[0]!r} (duplicate)"
    if kind == 1 and model.graph.initializer:
        init = _choice(rng, model.graph.initializer)
        init.name = _choice(rng, names)
        return f"initializer renamed {init.name!r} (duplicate)"
    model.graph.input.append(model.graph.input[0])
    return f"graph input {model.graph.input[0].name!r} listed twice"


def opset(model, rng) -> str | None:
    """Another default-domain opset (too old, too new, or just different), or a second domain."""
    if rng.random() < 0.2:
        model.opset_import.append(helper.make_opsetid("com.example", 1))
        node = _choice(rng, model.graph.node)
        node.domain = "com.example"
        return f"{node.name} moved to domain com.example"
    version = int(_choice(rng, (1, 6, 7, 9, 10, 11, 12, 14, 17, 18, 19, 21, 22, 25, 99)))
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = version
    return f"opset {version}"


def op_type(model, rng) -> str | None:
    """A node's op type swapped for another (a different arity or attribute set), or an unknown one."""
    node = _choice(rng, model.graph.node)
    new = _choice(rng, ("Relu", "Sigmoid", "MaxPool", "AveragePool", "Conv", "Add", "MatMul", "Gemm", "Softmax",
                        "Transpose", "Concat", "Identity", "Flatten", "Frobnicate", "GlobalMaxPool", "Max"))
    old, node.op_type = node.op_type, new
    return f"{node.name}: op {old} -> {new}"


def graph_output(model, rng) -> str | None:
    """A graph output renamed to a tensor nothing produces, to a graph input, or removed."""
    out = model.graph.output[0]
    kind = int(rng.integers(3))
    if kind == 0:
        out.name = "nowhere"
    elif kind == 1:
        out.name = model.graph.input[0].name
    elif len(model.graph.output) > 1:
        model.graph.output.remove(out)
    else:
        return None
    return f"graph output edit #{kind}"


MUTATORS: dict[str, Callable] = {fn.__name__: fn for fn in (
    attr_ints, attr_int, add_attr, drop_attr, auto_pad_with_pads, init_dims, init_dtype, init_data, drop_init,
    input_shape, rewire, extra_input, duplicate_name, opset, op_type, graph_output)}


def mutate(model: onnx.ModelProto, rng: np.random.Generator, count: int = 1) -> tuple[onnx.ModelProto, list[str]]:
    """A mutated copy of model and what was done; applies `count` mutators that apply (tries at most 20)."""
    mutant = onnx.ModelProto()
    mutant.CopyFrom(model)
    done: list[str] = []
    for _ in range(20):
        if len(done) == count:
            break
        name = _choice(rng, MUTATORS)
        what = MUTATORS[name](mutant, rng)
        if what is not None:
            done.append(f"{name}: {what}")
    return mutant, done

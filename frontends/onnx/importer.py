"""The ONNX importer: an ONNX model (file, bytes or ModelProto) -> a relayish IRModule.

    module = from_onnx("resnet18.onnx", input_shapes={"input": (4, 3, 224, 224)})

The IRModule's main Function has one parameter per graph input that is not an initializer (named as in ONNX) and
returns the graph outputs (a Tuple if there are several); IRModule.output_names are the ONNX output names.
Initializers become Constants. Default-domain opsets 7 to 28 are supported, and older ones (from 1) for the ops
whose schema there is one of those reviewed (the same schema is in effect from some opset below 7 up to 7 or
later: `Not` has one version, from opset 1); the per-op converters and their opset table live in
frontends/onnx/ops/ (registered in frontends/onnx/registry.py), the schema versions reviewed against them in
frontends/onnx/versions/default.py. Of the other domains, the ai.onnx.ml, ai.onnx.preview and
ai.onnx.preview.training ops of frontends/onnx/versions/domains.py are converted.

Every failure is an OnnxImportError (a ValueError) whose message names the file and, where there is one, the
node (name and op type): an unreadable file, an unsupported op (one error listing every unsupported op type of
the model), a converter that rejects its node, bad input_shapes.
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from relayish import Call, Constant, Expr, Function, IRModule, OpError, TensorType, Tuple, Var, get_op
from relayish.prim_expr import PrimExpr
from relayish.types import numpy_dtype

from . import shape_values
from .qdq import fuse_qdq
from .external import ExternalDataError, load_external_data, refuse_external_data
from .registry import Converter, lookup_converter
from .shape_values import ShapeValue, collecting_checks
from .values import ConversionError, check_tensor_data, checked_elements, data_sized_ops, empty, tensor_array
from .versions.contrib import CONTRIB, ORT_ONNX_DOMAIN, ort_onnx_domain_op, unreviewed_contrib
from .versions.default import unreviewed
from .versions.domains import OTHER_DOMAINS, unreviewed_in_domain

MIN_OPSET, MAX_OPSET = 7, 28  # every schema version in effect at these opsets is reviewed (versions/default.py)
OLDEST_OPSET = 1  # below MIN_OPSET, an op imports if its schema version there is one reviewed
# graph inputs may be of these dtypes: ONNX elem type -> relayish dtype (relayish.types.DTYPES, all of them)
GRAPH_INPUT_DTYPES = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.FLOAT16: "float16",
                      TensorProto.BFLOAT16: "bfloat16", TensorProto.INT64: "int64", TensorProto.INT32: "int32",
                      TensorProto.INT16: "int16", TensorProto.INT8: "int8", TensorProto.UINT64: "uint64",
                      TensorProto.UINT32: "uint32", TensorProto.UINT16: "uint16", TensorProto.UINT8: "uint8",
                      TensorProto.BOOL: "bool"}
_DEFAULT_DOMAINS = ("", "ai.onnx")


class OnnxImportError(ValueError):
    """The model cannot be imported. The message says which file, which node or input, and why. needs_values: the
    graph inputs whose values would let it import (a shape or axes input computed from them), else ()."""

    def __init__(self, message: str, needs_values: tuple[str, ...] = (), data_sized: bool = False):
        super().__init__(message)
        self.needs_values = tuple(needs_values)
        self.data_sized = data_sized  # what needs the values is an output's size (NonZero): see from_onnx data_sized


def from_onnx(model_or_path, input_shapes: dict[str, tuple] | None = None, strict: bool = False,
              input_values: dict | None = None, data_sized: bool = False) -> IRModule:
    """Import an ONNX model. input_shapes maps input names to full shapes; it binds symbolic dims (a dim_param
    bound in one input is bound in all), unbound symbolic or unknown dims are 1 with a warning naming them
    (an OnnxImportError if strict). input_values maps input names to arrays: those inputs become constants of
    that value (of the declared dtype and shape) and are no longer inputs of the module. data_sized: an op whose
    output size depends on values computed at run time (NonZero, Compress) becomes a data-sized op
    (relayish/ops/data_sized.py: the generic tier runs it, compiler/generic.py), else it is an error whose
    `data_sized` says so."""
    if data_sized:
        with data_sized_ops():
            return from_onnx(model_or_path, input_shapes, strict, input_values)
    model, source = load_model(model_or_path)
    model = fuse_qdq(model)  # a static model's DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear groups
    if not model.graph.output:  # onnxruntime refuses an empty graph; one with nodes but no outputs computes nothing
        raise OnnxImportError(f"{source}: the graph declares no outputs: a model must compute at least one")
    input_values = input_values or {}
    if input_values:
        input_shapes = {**(input_shapes or {}), **{n: np.shape(v) for n, v in input_values.items()}}
    opset = default_opset(model, source)
    check_supported(model, source)
    domains = {o.domain: o.version for o in model.opset_import}
    graph = model.graph
    env: dict[str, Expr] = {}
    for init in graph.initializer:
        try:
            env[init.name] = Constant(tensor_array(init, f"initializer {init.name!r}"))
        except ConversionError as e:
            raise OnnxImportError(f"{source}: {e}") from None
    params = _graph_inputs(graph, set(env), input_shapes or {}, source, strict)
    # a zero-size input stays an input of the module (run checks it) but what reads it reads the empty constant
    env.update((p.name, empty(p.type.shape, p.type.dtype) if 0 in p.type.shape else p)
               for p in params)
    params = _bind_values(params, input_values, env, source)
    used = _used_names(graph)
    folded: dict = {}  # fold_small_constants' memo, shared by every node of the import
    with collecting_checks() as dim_checks:  # what shape arithmetic over run-time dims assumes (shape_values.py)
        for index, node in enumerate(graph.node):
            _convert_node(node, index, opset, env, used, source, folded, domains)
    outputs = []
    for out in graph.output:
        if out.name not in env:
            raise OnnxImportError(f"{source}: graph output {out.name!r} is not produced by any node")
        value = env[out.name]
        if isinstance(value, ShapeValue):
            raise OnnxImportError(f"{source}: graph output {out.name!r} is computed from dims known only at run "
                                  f"time ({value}): an output of shape arithmetic is not supported")
        outputs.append(value)
    body = outputs[0] if len(outputs) == 1 else Tuple(outputs)
    described = describe_model(model)
    for name in input_values:  # bound by value: no longer an input
        for key in ("input_dims", "input_types"):
            described[key].pop(name, None)
    attrs = {"onnx_model": described}
    if dim_checks:
        attrs["dim_checks"] = tuple(dim_checks)
    return IRModule(Function(params, body), output_names=tuple(o.name for o in graph.output), attrs=attrs)


def _bind_values(params: list[Var], values: dict, env: dict, source: str) -> list[Var]:
    """The graph inputs named in `values` become Constants in env (checked against their dtype and shape); the
    others stay parameters."""
    by_name = {p.name: p for p in params}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise OnnxImportError(f"{source}: input_values names unknown input(s) {unknown}; model inputs: "
                              f"{list(by_name)}")
    for name, value in values.items():
        ty = by_name[name].type
        array = np.asarray(value)
        if array.dtype != numpy_dtype(ty.dtype) or array.shape != ty.shape:
            raise OnnxImportError(f"{source}: input_values[{name!r}] is {array.dtype} of shape {array.shape}, "
                                  f"expected {ty.dtype} of shape {ty.shape}")
        env[name] = Constant(np.array(array))
    return [p for p in params if p.name not in values]


def describe_model(model: onnx.ModelProto) -> dict:
    """What a session reports about the model besides its compiled shapes (onnxruntime's NodeArg.shape and
    ModelMetadata): the declared dims of each graph input (initializers excluded) and output, each an int, a
    dim_param name or None (unknown), or None for no declared shape; and the model's metadata fields, `version`
    being None when the model does not set model_version."""
    graph, initializers = model.graph, {init.name for init in model.graph.initializer}
    return {"input_dims": {vi.name: _dims(vi) for vi in graph.input if vi.name not in initializers},
            "output_dims": {vi.name: _dims(vi) for vi in graph.output},
            "input_types": {vi.name: _type_name(vi) for vi in graph.input if vi.name not in initializers},
            "output_types": {vi.name: _type_name(vi) for vi in graph.output},
            "producer_name": model.producer_name, "graph_name": graph.name, "domain": model.domain,
            "description": model.doc_string, "graph_description": graph.doc_string,
            "version": model.model_version if model.HasField("model_version") else None,
            "custom_metadata_map": {p.key: p.value for p in model.metadata_props}}


def _type_name(vi: onnx.ValueInfoProto) -> str | None:
    """The element type's numpy name ('float32', 'int64', 'bfloat16', ...), or None if not a known tensor type."""
    if not vi.type.HasField("tensor_type"):
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None


def _dims(vi: onnx.ValueInfoProto) -> list | None:
    ttype = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not ttype.HasField("shape"):
        return None
    return [_declared_dim(d) for d in ttype.shape.dim]


UNNAMED_DIM = "?"  # a dim_param that paddle2onnx writes for every unknown dim: not one symbol shared by all


def _declared_dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """A dim as declared: its size, its dim_param name, or None when it has neither. A negative dim_value (-1, as
    paddle2onnx and tf2onnx write an unknown dim) is unknown too, as onnxruntime reports it."""
    if d.HasField("dim_value"):
        return d.dim_value if d.dim_value >= 0 else None
    return d.dim_param or None


# ---- loading and validation ----

def load_model(model_or_path) -> tuple[onnx.ModelProto, str]:
    """(a checked ModelProto, a name for messages). Any unreadable input is an OnnxImportError naming it."""
    path = None
    if isinstance(model_or_path, onnx.ModelProto):
        model, source = model_or_path, f"<ModelProto {model_or_path.graph.name or 'unnamed'}>"
    elif isinstance(model_or_path, (bytes, bytearray)):
        model, source = _parse(bytes(model_or_path), "<bytes>"), "<bytes>"
    else:
        path = Path(model_or_path)
        source = str(path)
        if not path.is_file():
            raise OnnxImportError(f"{source}: no such file" if not path.exists() else f"{source}: not a file")
        if path.stat().st_size == 0:
            raise OnnxImportError(f"{source}: empty file, not an ONNX model")
        model = _parse(path, source)
    try:  # external data: checked by our own rules before any data file is opened (frontends/onnx/external.py)
        if path is None:
            refuse_external_data(model)
        else:
            load_external_data(model, path)
    except ExternalDataError as e:
        raise OnnxImportError(f"{source}: {e}") from None
    _check_tensors(model, source)
    try:
        onnx.checker.check_model(_checkable(model))
    except (onnx.checker.ValidationError, ValueError) as e:
        raise OnnxImportError(f"{source}: not a valid ONNX model: {_one_line(e)}") from None
    return model, source


def _check_tensors(model: onnx.ModelProto, source: str):
    """Every initializer and Constant value: numeric, data as long as its dims say, within the size limit (our
    own check, before onnx's checker, whose checks differ across versions)."""
    tensors = [(t, f"initializer {t.name!r}") for t in model.graph.initializer]
    tensors += [(a.t, f"node {_node_label(n, i)} ({n.op_type}): attribute {a.name!r}")
                for i, n in enumerate(model.graph.node) for a in n.attribute if a.HasField("t")]
    for tensor, what in tensors:
        try:
            check_tensor_data(tensor, what)
        except ConversionError as e:
            raise OnnxImportError(f"{source}: {e}") from None


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """model, or a copy for onnx's checker where onnxruntime's own ai.onnx ops (LayerNormalization below opset 17,
    SimplifiedLayerNormalization: frontends/onnx/versions/contrib.py) are moved to the contrib domain, which the
    checker does not check, and graph outputs declared without a shape (unknown rank) get an empty one:
    onnxruntime runs such models, the checker alone would refuse them."""
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    opset = max(versions) if versions else MAX_OPSET
    moved = [i for i, n in enumerate(model.graph.node)
             if n.domain in _DEFAULT_DOMAINS and ort_onnx_domain_op(n.op_type, opset)]
    shapeless = [i for i, v in enumerate(model.graph.output) if v.type.HasField("tensor_type") and
                 not v.type.tensor_type.HasField("shape")]
    if not moved and not shapeless:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i in shapeless:  # an output of unknown rank (no shape at all): onnxruntime runs it, the checker wants the
        copy.graph.output[i].type.tensor_type.shape.SetInParent()  # field set
    for i in moved:
        copy.graph.node[i].domain = CONTRIB
    if not any(o.domain == CONTRIB for o in copy.opset_import):
        copy.opset_import.append(helper.make_opsetid(CONTRIB, 1))
    return copy


def _parse(data_or_path, source) -> onnx.ModelProto:
    try:
        model = onnx.load(str(data_or_path), load_external_data=False) if isinstance(data_or_path, Path) \
            else onnx.load_from_string(data_or_path)
    except Exception as e:  # protobuf's DecodeError, OSErrors...: all mean "cannot read this model"
        raise OnnxImportError(f"{source}: not a valid ONNX model (cannot parse it: {_one_line(e)})") from None
    if not model.HasField("graph"):  # protobuf parses many byte strings as a message with unknown fields
        raise OnnxImportError(f"{source}: not a valid ONNX model (no graph)")
    return model


def _one_line(e: Exception, limit: int = 300) -> str:
    """The exception's message on one line (the checker's span several), cut to a readable length."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def default_opset(model: onnx.ModelProto, source: str) -> int:
    """The model's ai.onnx opset. A model that imports none (one of other domains only: check_supported then
    lists its ops as unsupported) is read at MAX_OPSET; the checker refuses one whose nodes need ai.onnx."""
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions and not any(n.domain in _DEFAULT_DOMAINS for n in model.graph.node):
        return MAX_OPSET
    if not versions:
        raise OnnxImportError(f"{source}: the model imports no default-domain (ai.onnx) opset")
    opset = max(versions)
    if not OLDEST_OPSET <= opset <= MAX_OPSET:
        raise OnnxImportError(f"{source}: ai.onnx opset {opset} is not supported (supported: {MIN_OPSET} to "
                              f"{MAX_OPSET})")
    return opset


def check_supported(model: onnx.ModelProto, source: str):
    """Raise ONE OnnxImportError listing every unsupported op type (domain, version, node count, first node)."""
    opset = default_opset(model, source)
    domain_versions = {o.domain: o.version for o in model.opset_import}
    missing: dict[tuple[str, str], list[str]] = defaultdict(list)
    why: dict[tuple[str, str], str] = {}
    for index, node in enumerate(model.graph.node):
        conv, reason = resolve_converter(node, opset, domain_versions)
        if conv is not None and not reason:
            continue
        key = (node.domain or "ai.onnx", node.op_type)
        if reason:
            why[key] = reason
        missing[key].append(_node_label(node, index))
    if not missing:
        return
    lines = []
    for (domain, op_type), nodes in sorted(missing.items()):
        version = opset if domain in _DEFAULT_DOMAINS else domain_versions.get(domain, "?")
        lines.append(f"  {op_type} ({domain} v{version}): {len(nodes)} node(s), first {nodes[0]}"
                     + (f"; {why[domain, op_type]}" if why.get((domain, op_type)) else ""))
    raise OnnxImportError(f"{source}: {len(missing)} unsupported op type(s):\n" + "\n".join(lines))


def resolve_converter(node: onnx.NodeProto, opset: int, domains: dict) -> tuple[Converter | None, str | None]:
    """(the node's converter or None if its op is unsupported, why it cannot be imported through it or None):
    ai.onnx ops at the model's opset (or onnxruntime's own ai.onnx ops where ONNX has none), com.microsoft ops and
    those of the other domains we convert (ai.onnx.ml, ai.onnx.preview, ai.onnx.preview.training:
    frontends/onnx/versions/domains.py) at the model's version of their domain."""
    if node.domain in _DEFAULT_DOMAINS:
        conv = lookup_converter(node.op_type, opset)
        if conv is not None:
            return conv, unreviewed(node.op_type, opset)
        if ort_onnx_domain_op(node.op_type, opset):
            return lookup_converter(node.op_type, 1, ORT_ONNX_DOMAIN), None
        return None, None
    version = domains.get(node.domain)
    if node.domain in OTHER_DOMAINS:
        conv = lookup_converter(node.op_type, version or 0, node.domain)
        return conv, (unreviewed_in_domain(node.domain, node.op_type, version) if conv is not None else None)
    conv = lookup_converter(node.op_type, version or 0, node.domain) if node.domain == CONTRIB else None
    return conv, (unreviewed_contrib(node.op_type, version) if conv is not None else None)


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return repr(node.name) if node.name else f"#{index} (unnamed, output {node.output[0]!r})"


# ---- graph inputs ----

def _graph_inputs(graph, initializer_names: set[str], input_shapes: dict, source: str, strict: bool) -> list[Var]:
    """One Var per non-initializer graph input (of a GRAPH_INPUT_DTYPES dtype), with dims resolved from the model
    and input_shapes."""
    inputs = [vi for vi in graph.input if vi.name not in initializer_names]
    names = [vi.name for vi in inputs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise OnnxImportError(f"{source}: input_shapes names unknown input(s) {unknown}; model inputs: {names}")
    declared = {vi.name: _declared_dims(vi, source) for vi in inputs}
    bindings = _bind_symbols(declared, input_shapes, source)
    params = []
    for vi in inputs:
        dims = declared[vi.name]
        if vi.name in input_shapes:  # (a size variable, te.size_var, leaves the dim free: known at run time)
            shape = tuple(d if isinstance(d, PrimExpr) else int(d) for d in input_shapes[vi.name])
        elif dims is None:
            raise OnnxImportError(f"{source}: input {vi.name!r} has no shape in the model; give it in input_shapes")
        else:
            shape = tuple(bindings.get(d, 1) if isinstance(d, str) else (1 if d is None else d) for d in dims)
            _report_unbound(vi.name, dims, bindings, shape, source, strict)
        _check_input_shape(vi.name, shape, source)
        params.append(Var(vi.name, TensorType(shape, _input_dtype(vi))))
    return params


def _check_input_shape(name: str, shape: tuple, source: str):
    """Every dim >= 0 (a zero-size input is allowed: nothing reads it) and at most MAX_TENSOR_ELEMENTS elements
    (dims known only at run time are checked when they run)."""
    if any(isinstance(d, PrimExpr) for d in shape):
        return
    if any(d < 0 for d in shape):
        raise OnnxImportError(f"{source}: input {name!r} has shape {shape}: a dim is negative")
    try:
        checked_elements(shape, f"input {name!r}")
    except ConversionError as e:
        raise OnnxImportError(f"{source}: {e}") from None


def _report_unbound(name: str, dims: list, bindings: dict, shape: tuple, source: str, strict: bool) -> None:
    """Symbolic dims that input_shapes did not bind, and unknown dims, were set to 1: say so (raise if strict)."""
    unbound = [f"dim {axis} ({d!r})" if d else f"dim {axis} (unknown)" for axis, d in enumerate(dims)
               if (isinstance(d, str) and d not in bindings) or d is None]
    if unbound:
        message = (f"{source}: input {name!r} has unbound {', '.join(unbound)}, compiled as 1 (shape {shape}); "
                   f"bind it with input_shapes={{{name!r}: (...)}} giving the full shape (None for a dim to leave "
                   "free: compiled per shape)")
        if strict:
            raise OnnxImportError(message + " (strict=True)")
        warnings.warn(message, stacklevel=4)


def _declared_dims(vi: onnx.ValueInfoProto, source: str) -> list | None:
    """The input's dims as ints, dim_param strings or None (unknown); None if the model gives no shape."""
    ttype = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise OnnxImportError(f"{source}: input {vi.name!r} is not a tensor")
    if ttype.elem_type not in GRAPH_INPUT_DTYPES:
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type) if ttype.elem_type else "undefined"
        raise OnnxImportError(f"{source}: input {vi.name!r} has dtype {dtype}, which is not supported as a graph "
                              f"input (supported: {', '.join(GRAPH_INPUT_DTYPES.values())})")
    if not ttype.HasField("shape"):
        return None
    return [None if d == UNNAMED_DIM else d for d in map(_declared_dim, ttype.shape.dim)]


def _input_dtype(vi: onnx.ValueInfoProto) -> str:
    return GRAPH_INPUT_DTYPES[vi.type.tensor_type.elem_type]


def _bind_symbols(declared: dict, input_shapes: dict, source: str) -> dict[str, int]:
    """Check each input_shapes entry against the model (rank, fixed dims) and collect dim_param -> size."""
    bindings: dict[str, int] = {}
    for name, shape in input_shapes.items():
        dims = declared[name]
        shape = tuple(shape)
        if any(not isinstance(d, PrimExpr) and (not isinstance(d, (int, np.integer)) or d < 0) for d in shape):
            raise OnnxImportError(f"{source}: input_shapes[{name!r}] = {shape}: dims must be non-negative ints "
                                  "(or None, -1, (lo, hi) for a dim left free)")
        if dims is None:
            continue
        model_shape = tuple(d if d else "?" for d in dims)
        if len(shape) != len(dims):
            raise OnnxImportError(f"{source}: input_shapes[{name!r}] = {shape} has rank {len(shape)}, but model "
                                  f"input {name!r} has rank {len(dims)} {model_shape}")
        for axis, (given, d) in enumerate(zip(shape, dims)):
            if isinstance(d, int) and d and (isinstance(given, PrimExpr) or d != given):
                raise OnnxImportError(f"{source}: input_shapes[{name!r}] = {shape}: dim {axis} must be {d} "
                                      f"(model shape {model_shape})")
            if isinstance(d, str):
                if bindings.setdefault(d, given if isinstance(given, PrimExpr) else int(given)) is not given and \
                        (isinstance(given, PrimExpr) or bindings[d] != given):
                    raise OnnxImportError(f"{source}: input_shapes binds dim {d!r} to both {bindings[d]} and "
                                          f"{given}")
    return bindings


# ---- nodes ----

def _has_run_time_dims(value) -> bool:
    """Whether a converter's input (an Expr, or None for an omitted one) has a dim known only at run time."""
    if isinstance(value, ShapeValue):
        return True
    return not getattr(getattr(value, "type", None), "is_static", True)


def _used_names(graph) -> set[str]:
    return {i for n in graph.node for i in n.input} | {o.name for o in graph.output}


def _attribute(attr: onnx.AttributeProto):
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(v.decode() if isinstance(v, bytes) else v for v in value)
    return value


def _convert_node(node, index, opset, env, used, source, folded: dict | None = None, domains: dict | None = None):
    """Run the node's converter and bind its outputs; any failure names the node. A converter returns one
    expression (the first output; the others must be unused) or a tuple of them, one per output it supports
    (those beyond the node's outputs are not bound). domains: the model's opset versions by domain, for the ops
    of other domains than ai.onnx."""
    label = f"{source}: node {_node_label(node, index)} ({node.op_type})"
    conv, _ = resolve_converter(node, opset, domains or {})
    inputs = []
    for name in node.input:
        if name and name not in env:
            raise OnnxImportError(f"{label}: input {name!r} is not defined before this node")
        inputs.append(env[name] if name else None)
    omitted = [i for i in range(len(conv.inputs), len(inputs)) if conv.variadic and inputs[i] is None]
    if omitted:  # an empty name stands for an omitted optional input; variadic ones (Concat, Sum...) are not optional
        raise OnnxImportError(f"{label}: input {omitted[0]} is empty (''): {node.op_type}'s variadic inputs cannot "
                              f"be omitted")
    while inputs and inputs[-1] is None:  # trailing omitted optional inputs: let the converter's defaults apply
        inputs.pop()
    absent = [conv.inputs[i] for i in range(conv.required_inputs) if i >= len(inputs) or inputs[i] is None]
    if absent:
        raise OnnxImportError(f"{label}: missing required input(s) {absent}")
    if len(inputs) > len(conv.inputs) and not conv.variadic:
        raise OnnxImportError(f"{label}: {len(inputs)} inputs given, at most {len(conv.inputs)} supported "
                              f"({', '.join(conv.inputs)})")
    attrs = {a.name: _attribute(a) for a in node.attribute}
    unknown = sorted(set(attrs) - conv.attrs - {"_outputs", "_scope"})
    if unknown:
        raise OnnxImportError(f"{label}: unsupported attribute(s) {unknown}")
    absent = sorted(conv.required_attrs - set(attrs))
    if absent:
        raise OnnxImportError(f"{label}: missing required attribute(s) {absent}")
    if "_outputs" in conv.attrs:  # a converter whose results depend on the node's output count (Split)
        attrs["_outputs"] = len(node.output)
    if "_scope" in conv.attrs:  # a converter of subgraph attributes (If, Loop, Scan) converts them in the node's scope
        attrs["_scope"] = SubgraphScope(env, opset, label, folded)
    try:
        if any(isinstance(i, ShapeValue) for i in inputs):  # shape arithmetic over run-time dims
            result = shape_values.convert(node.op_type, conv.fn, inputs, attrs)
        else:
            result = conv.fn(*inputs, **attrs)
    except (ConversionError, OpError) as e:
        raise OnnxImportError(f"{label}: {e}", getattr(e, "inputs", ()), getattr(e, "data_sized", False)) from e
    except TypeError as e:  # a converter doing arithmetic a dim known only at run time does not allow
        if not any(_has_run_time_dims(i) for i in inputs):
            raise
        raise OnnxImportError(f"{label}: {node.op_type} over dims known only at run time is not supported "
                              f"({e})") from e
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    results = tuple(r if isinstance(r, ShapeValue) else fold_small_constants(r, folded) for r in results)
    for i, name in enumerate(node.output):  # optional outputs the node omits are not bound
        if i < len(results):
            env[name] = results[i]
        elif name and name in used:
            raise OnnxImportError(f"{label}: output {i} ({name!r}) is used, but only the first {len(results)} "
                                  f"output(s) of {node.op_type} are supported")


class SubgraphScope:
    """What the converter of an op with graph attributes (If, Loop) gets as its `_scope` argument: `convert(graph,
    inputs)` converts a subgraph in the node's scope (every value defined before the node is visible; the
    subgraph's inputs, bound to the given expressions, its initializers and its nodes' outputs shadow outer
    names) and returns the expressions of its outputs. The subgraph's nodes are converted as the graph's are:
    inlined, so a branch or an unrolled loop body becomes part of the graph."""

    def __init__(self, env: dict, opset: int, label: str, folded: dict | None = None):
        self._env, self._opset, self._label, self._folded = env, opset, label, folded

    def convert(self, graph: onnx.GraphProto, inputs: dict[str, Expr] | list[Expr],
                what: str = "body graph") -> list[Expr]:
        """inputs: by name, or a list bound to graph.input in order (a Scan or Loop body)."""
        source = f"{self._label}: {what}"
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != len(graph.input):
                raise ConversionError(f"{what} {graph.name!r} has {len(graph.input)} inputs, {len(inputs)} given")
            inputs = {vi.name: value for vi, value in zip(graph.input, inputs)}
        env = dict(self._env)
        for init in graph.initializer:
            env[init.name] = Constant(tensor_array(init, f"initializer {init.name!r} of {what}"))
        env.update(inputs)
        for index, node in enumerate(graph.node):
            if node.domain not in _DEFAULT_DOMAINS or lookup_converter(node.op_type, self._opset) is None:
                raise ConversionError(f"{what}: node {_node_label(node, index)} has unsupported op type "
                                      f"{node.op_type} ({node.domain or 'ai.onnx'} v{self._opset})")
            why = unreviewed(node.op_type, self._opset)
            if why:
                raise ConversionError(f"{what}: node {_node_label(node, index)}: {why}")
            _convert_node(node, index, self._opset, env, _used_names(graph), source, self._folded)
        missing = [o.name for o in graph.output if o.name not in env]
        if missing:
            raise ConversionError(f"{what}: output(s) {missing} are not produced by any node")
        return [env[o.name] for o in graph.output]


FOLD_LIMIT = 1 << 16  # elements: shape arithmetic is folded at import, large weight computations are left to passes


def fold_small_constants(expr, done: dict | None = None):
    """expr with every op call over constants evaluated now by the op's reference, where its result has at most
    FOLD_LIMIT elements: what a model computes from shapes and small constants (Shape -> Slice -> Neg ->
    ConstantOfShape ...) is then a constant that shape, axes and sizes inputs can take. Walks the DAG once per
    shared subexpression and without recursion (an unrolled recurrence is deep and shares every step's state).
    done: id of an expression -> (the expression, kept alive so that its id stays its own; its folded form); one
    import passes the same dict for every node, so each node of the graph is folded once, not once per consumer."""
    done = {} if done is None else done
    stack = [expr]
    while stack:
        e = stack[-1]
        if id(e) in done:
            stack.pop()
        elif not isinstance(e, Call) or not isinstance(e.op, str):
            done[id(e)] = (e, stack.pop())
        else:
            pending = [a for a in e.args if id(a) not in done]
            if pending:
                stack.extend(pending)
            else:
                stack.pop()
                folded = _fold_call(e, tuple(done[id(a)][1] for a in e.args))
                done[id(e)] = (e, folded)
                done.setdefault(id(folded), (folded, folded))  # the folded form is final too
    return done[id(expr)][1]


def _fold_call(expr: Call, args: tuple) -> Expr:
    """expr with its (already folded) args, evaluated if they are all constants and the result is small; a
    zero-size result is an empty constant whatever its inputs (its value is known: no element)."""
    if isinstance(expr.type, TensorType) and not expr.type.is_static:  # sizes known at run time: nothing to fold
        return expr if args == expr.args else expr.replace(args=args)
    if isinstance(expr.type, TensorType) and 0 in expr.type.shape:
        return empty(expr.type.shape, expr.type.dtype)
    if not all(isinstance(a, Constant) for a in args) or not isinstance(expr.type, TensorType):
        return expr if args == expr.args else expr.replace(args=args)
    if math.prod(expr.type.shape) > FOLD_LIMIT:
        return expr if args == expr.args else expr.replace(args=args)
    try:
        with np.errstate(all="ignore"):
            value = get_op(expr.op).ref(*[a.data for a in args], **expr.attrs.as_dict())
    except Exception:  # noqa: BLE001  (e.g. a constant index out of range: left to the run-time path and its checks)
        return expr if args == expr.args else expr.replace(args=args)
    return Constant(np.asarray(value, dtype=numpy_dtype(expr.type.dtype)).reshape(expr.type.shape))


# ---- body graphs (Scan) ----

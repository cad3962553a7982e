"""The tests' shared harness: one-node ONNX models, their feeds, the engines, and the three-way check of a model
(the compiled module vs the numpy reference interpreter vs onnxruntime, or onnx's reference implementation where
onnxruntime lacks the op).

One-node model builders (ModelProtos that onnx's checker accepts):
- make_model: float32 graph inputs given by shape, initializers by value (the importer's grids).
- typed_model: graph inputs of any dtype, {name: (shape, dtype)} or {name: array} (fed as it is); the op tables.
- node_model: an ordered input list with omitted slots, named and typed outputs, any domain (contrib ops,
  Attention).

Feeds: random_feeds(model) for a model's graph inputs; feeds_for(inputs, rng) for typed_model's input specs.

Checks: three_way(model, feeds) runs the three engines and compares every pair of them with assert_matches (the
reference's dtype and shape; floats within RTOL of the reference's largest magnitude, other dtypes exactly);
assert_three_way does the same for outputs a test ran itself. case_id names a parametrized case.
"""
from __future__ import annotations

import contextlib
from typing import Callable, NamedTuple

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from relayish.interp import evaluate
from relayish.types import numpy_dtype

RTOL = 1e-4  # the project tolerance: max|a - b| / max|ref|
CONTRIB = "com.microsoft"


# ---------------------------------------------------------------------------------------------- model builders

def elem(dtype) -> int:
    """The ONNX element type of a numpy dtype or a dtype name (bfloat16 included)."""
    return helper.np_dtype_to_tensor_dtype(numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype))


def with_output_shapes(model):
    """The checker wants a shape on every graph output: infer it (left empty where inference fails, as in the
    models of the error tests)."""
    model = onnx.shape_inference.infer_shapes(model)
    for out in model.graph.output:
        out.type.tensor_type.shape.SetInParent()
    return model


def make_model(op_type, inputs, attrs=None, opset=17, consts=None, n_outputs=1, produced=(), extra_nodes=()):
    """A one-node model of float32 graph inputs; outputs out0, out1... declared float32. Node inputs, in order:
    `inputs` (name -> shape: float32 graph inputs), `produced` (names computed by extra_nodes), `consts` (name ->
    array: initializers; a name of None is an omitted input "")."""
    consts = consts or {}
    node_inputs = list(inputs) + list(produced) + [name or "" for name in consts]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, node_inputs, outputs, name=f"{op_type.lower()}_node", **(attrs or {}))
    opsets = [helper.make_opsetid("", opset)]
    ir_version = helper.find_min_ir_version_for(opsets)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if n]
    graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    if ir_version < 4:  # initializers must also be graph inputs before IR 4
        graph_inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits]
    graph = helper.make_graph([*extra_nodes, node], "test", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return with_output_shapes(helper.make_model(graph, opset_imports=opsets, ir_version=ir_version))


def typed_model(op, inputs, attrs=None, opset=17, consts=None, outputs=1):
    """A one-node model of graph inputs of any dtype. inputs: name -> (shape, dtype), or an array (a graph input of
    its shape and dtype, which feeds_for feeds as it is); consts: name -> array (an initializer) or None (an
    omitted input ""). Node inputs are the graph inputs then the initializers, in order, unless attrs holds
    "_order": the node's input names (a string of one-letter names will do). outputs: a count (y, or y0, y1...)
    or the names ("" omitted), typed by shape inference."""
    def info(name, spec):
        shape, dtype = spec if isinstance(spec, tuple) else (np.shape(spec), np.asarray(spec).dtype)
        return helper.make_tensor_value_info(name, elem(dtype), shape)
    consts = consts or {}
    attrs = dict(attrs or {})
    names = list(attrs.pop("_order", list(inputs) + [n if v is not None else "" for n, v in consts.items()]))
    if isinstance(outputs, int):
        outputs = ["y"] if outputs == 1 else [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, list(outputs), **attrs)
    graph = helper.make_graph(
        [node], "t", [info(n, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if v is not None])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def node_model(op, inputs, outputs=("y",), attrs=None, domain=CONTRIB, opset=17):
    """A one-node model of `domain` (onnxruntime's contrib ops by default; the default domain at `opset` is
    imported too), IR 8 or the least the opset needs. inputs: per node input, None (omitted), (name, array) for
    an initializer, or (name, dtype, shape) for a graph input; outputs: names of float32 outputs, (name, dtype),
    or '' (omitted)."""
    outputs = [(o, np.float32) if isinstance(o, str) else o for o in outputs]
    graph_inputs, inits, names = [], [], []
    for spec in inputs:
        if spec is None:
            names.append("")
        elif len(spec) == 2:
            names.append(spec[0])
            inits.append(numpy_helper.from_array(np.asarray(spec[1]), spec[0]))
        else:
            name, dtype, shape = spec
            names.append(name)
            graph_inputs.append(helper.make_tensor_value_info(name, elem(dtype), shape))
    node = helper.make_node(op, names, [o for o, _ in outputs], name=f"{op}_node", domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "t", graph_inputs,
                              [helper.make_tensor_value_info(o, elem(t), None) for o, t in outputs if o], inits)
    for out in graph.output:  # the checker wants a shape, even an unknown one
        out.type.tensor_type.shape.SetInParent()
    ir_version = max(8, helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(CONTRIB, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)


def i64(*values) -> np.ndarray:
    """An int64 array of the values: i64(1, 2), i64([1, 2], [3, 4]), or one nested list i64([[1, 2]])."""
    return _array(values, np.int64)


def f32(*values) -> np.ndarray:
    """A float32 array of the values, as i64."""
    return _array(values, np.float32)


def _array(values, dtype):
    return np.array(values[0] if len(values) == 1 and isinstance(values[0], list) else values, dtype)


def case_id(case) -> str:
    """A pytest id for a case: a dict as its k=v pairs; a tuple as its parts joined by "-" (a dict of input specs
    as name=dtype[shape], a tuple of names as a+b, small arrays by value (floats to 4 digits), larger ones by
    dtype and shape; empty parts left out)."""
    if isinstance(case, dict):
        return "-".join(f"{k}={_show(v)}" for k, v in case.items())
    return "-".join(s for s in map(_show, case) if s)


def _show(value) -> str:
    if isinstance(value, dict):
        return "-".join(f"{k}={_show(v)}" for k, v in value.items())
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], str):
        return f"{value[1]}[{'x'.join(map(str, value[0]))}]"  # an input spec (shape, dtype)
    if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
        return "+".join(value)  # names
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind in "biu" and value.size <= 8:
            return str(value.tolist()).replace(" ", "")
        if value.dtype.kind == "f" and value.size <= 4:
            return str(np.vectorize(lambda v: float(f"{v:.4g}"))(value).tolist()).replace(" ", "")
        return f"{value.dtype}[{'x'.join(map(str, value.shape))}]"
    return str(value).replace(" ", "")


# ---------------------------------------------------------------------------------------------- feeds

def random_feeds(model, seed=0, positive=False, ints=None):
    """Feeds for a model's graph inputs (not its initializers): floats standard normal (|x| + 0.1 if positive), bools
    true with probability 0.7, integers the values ints[name]. seed: an int or a numpy Generator."""
    rng = np.random.default_rng(seed)
    feeds, inits = {}, {t.name for t in model.graph.initializer}
    for vi in (vi for vi in model.graph.input if vi.name not in inits):
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dtype.kind == "f":
            x = rng.standard_normal(shape).astype(dtype)
            feeds[vi.name] = np.asarray(np.abs(x) + 0.1 if positive else x, dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.7
        else:
            feeds[vi.name] = np.asarray(ints[vi.name], dtype)
    return feeds


def feeds_for(inputs, rng, ints=(-9, 10), floats=None):
    """Feeds for typed_model's input specs {name: (shape, dtype) or an array (fed as it is)}: floats standard
    normal (floats(x) of the float64 draw, if given), bools 0 or 1 alike, integers uniform in [ints[0], ints[1])
    (from 0 for unsigned dtypes; ints=None: the dtype's whole range)."""
    feeds = {}
    for name, spec in inputs.items():
        if not isinstance(spec, tuple):
            feeds[name] = np.asarray(spec)
            continue
        shape, dtype = spec[0], np.dtype(spec[1])
        if dtype.kind == "f":
            x = rng.standard_normal(shape)
            feeds[name] = (floats(x) if floats else x).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        elif ints is None:
            info = np.iinfo(dtype)
            feeds[name] = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
        else:
            feeds[name] = rng.integers(max(ints[0], 0) if dtype.kind == "u" else ints[0], ints[1], shape).astype(dtype)
    return feeds


def edge_values(dtype: str, n: int = 16) -> np.ndarray:
    """n values of an int dtype: its min and max, their neighbours, small ones, and random ones."""
    info = np.iinfo(dtype)
    fixed = [info.min, info.max, info.min + 1, info.max - 1, 0, 1, 2, 3, 7, info.max // 2 + 1]
    rng = np.random.default_rng(len(dtype))
    rand = rng.integers(info.min, info.max, n - len(fixed), dtype=dtype, endpoint=True)
    return np.concatenate([np.array(fixed, dtype), rand])


# ---------------------------------------------------------------------------------------------- engines

def run_ort(model, feeds, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    """onnxruntime's outputs, one thread, unfused by default (the op semantics). model: a ModelProto, bytes or
    a path."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3  # no shape-merge warnings about one-node models' unknown output shapes
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def run_ort_or_none(model, feeds):
    """onnxruntime's outputs, or None where it has no kernel for the op or these dtypes."""
    try:
        return run_ort(model, feeds)
    except Exception as e:  # onnxruntime's NOT_IMPLEMENTED has no public class to catch
        message = str(e).lower()
        if not any(s in message for s in ("not_implemented", "could not find an implementation", "not supported")):
            raise
        return None


def run_reference(model, feeds):
    """onnx's reference implementation (onnx.reference), for ops and opsets that onnxruntime lacks."""
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)


def compiled_and_interpreted(model, feeds):
    """The compiled model's outputs and the interpreter's (the inputs that the import needs as values, such as
    Dropout's training_mode, bound as the compiled session binds them)."""
    ours = compile_model(model).run(None, feeds)
    try:
        module, rest = from_onnx(model), feeds
    except OnnxImportError as e:
        if not e.needs_values:
            raise
        module = from_onnx(model, input_values={n: feeds[n] for n in e.needs_values})
        rest = {n: v for n, v in feeds.items() if n not in e.needs_values}
    with np.errstate(all="ignore"):
        interp = evaluate(module, rest)
    return ours, [np.asarray(v) for v in interp]


# ---------------------------------------------------------------------------------------------- comparisons

def relative_error(ours, ref) -> float:
    """max |ours - ref| / max |ref| (0 for empty tensors)."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if not ref.size:
        return 0.0
    return float(np.max(np.abs(ours - ref))) / max(float(np.max(np.abs(ref))), 1e-30)


def assert_close(ours, ref, what="", rtol=RTOL):
    """Same shape; relative_error within rtol (the project tolerance by default)."""
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != the reference's {ref.shape}"
    err = relative_error(ours, ref)
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol}"


def assert_exactly(ours, ref, what=""):
    """Equal values (a `close` for three_way where float results must be bit-exact: data movement, indices)."""
    np.testing.assert_array_equal(ours, ref, err_msg=what)


def assert_close_where_finite(ours, ref, what=""):
    """Non-finite values at the same positions; the finite ones within the project tolerance."""
    assert np.array_equal(np.isfinite(ours), np.isfinite(ref)), f"{what}: non-finite positions differ"
    finite = np.isfinite(ref)
    assert_close(ours[finite], ref[finite], what)


def steps_apart(ours, ref) -> int:
    """The largest difference of two integer (quantized) tensors, in steps."""
    return int(np.max(np.abs(ours.astype(np.int64) - ref.astype(np.int64)))) if ref.size else 0


def bits(x: np.ndarray) -> np.ndarray:
    """The bit patterns of x (float comparisons that see the sign of zero and NaN payloads)."""
    return x.view(f"u{x.dtype.itemsize}")


def assert_matches(ours, ref, what="", close=assert_close, steps=0):
    """ours is ref: its dtype and shape; floats as `close` says (default: within the project tolerance), other
    dtypes within `steps` (0: exactly)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != {ref.dtype}"
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != {ref.shape}"
    if ref.dtype.kind == "f" or ref.dtype.name == "bfloat16":
        close(ours, ref, what)
    elif steps:
        apart = steps_apart(ours, ref)
        assert apart <= steps, f"{what}: {apart} steps apart (allowed {steps})"
    else:
        np.testing.assert_array_equal(ours, ref, err_msg=what)


def assert_three_way(ours, ref, interp, what="", close=assert_close, steps=0):
    """One output three ways: the compiled one and the interpreter's each match the reference's, and the compiled
    one matches the interpreter's (assert_matches)."""
    what = f"{what} " if what else ""
    assert_matches(ours, ref, f"{what}compiled vs reference", close, steps)
    assert_matches(interp, ref, f"{what}interpreter vs reference", close, steps)
    assert_matches(ours, interp, f"{what}compiled vs interpreter", close, steps)


class ThreeWay(NamedTuple):
    """Every engine's outputs (reference: None where it has no kernel) and the compiled session."""
    compiled: list
    interpreted: list
    reference: list | None
    session: object


def three_way(model, feeds, *, close=assert_close, steps=0, reference: Callable = run_ort, input_shapes=None,
              **compile_options) -> ThreeWay:
    """Run `model` on `feeds` compiled (compile_model(model, input_shapes, **compile_options)), interpreted
    (evaluate(from_onnx(model, input_shapes))) and by `reference` (onnxruntime; run_reference for onnx's; a
    reference that returns None has no kernel: then compiled vs interpreter only), and check every output with
    assert_three_way. Outputs that onnx's shape inference leaves untyped get the interpreter's dtype first (the
    reference needs one)."""
    session = compile_model(model, input_shapes=input_shapes, **compile_options)
    compiled = session.run(None, feeds)
    interpreted = [np.asarray(v) for v in evaluate(from_onnx(model, input_shapes=input_shapes), feeds)]
    for out, value in zip(model.graph.output, interpreted):
        if not out.type.tensor_type.elem_type:
            out.type.tensor_type.elem_type = elem(value.dtype)
    refs = reference(model, feeds)
    assert len(compiled) == len(interpreted), f"{len(compiled)} outputs compiled, {len(interpreted)} interpreted"
    if refs is None:
        for name, a, b in zip(session.output_names, compiled, interpreted):
            assert_matches(a, b, f"{name}: compiled vs interpreter", close, steps)
    else:
        assert len(refs) == len(compiled), f"{len(compiled)} outputs compiled, {len(refs)} by the reference"
        for name, a, b, c in zip(session.output_names, compiled, interpreted, refs):
            assert_three_way(a, c, b, f"{name}:", close, steps)
    return ThreeWay(compiled, interpreted, refs, session)


def three_way_random(model, positive=False, seed=0, **compile_options) -> ThreeWay:
    """three_way on random_feeds(model, seed, positive) (a model of float inputs)."""
    return three_way(model, random_feeds(model, seed, positive), **compile_options)


@contextlib.contextmanager
def python_planned(module):
    """A generic module (compiler/generic_module.py) that plans and calls its kernels from Python for the block,
    the reference of its generated code: its runner set aside and its plans forgotten, both restored after."""
    assert module._runner is not None, "the module has no generated runner to set aside"
    runner, plans = module._runner, dict(module._plans)
    module._runner = None
    module._plans.clear()
    try:
        yield module
    finally:
        module._runner, module._plans = runner, plans

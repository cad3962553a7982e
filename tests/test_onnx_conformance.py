"""The ONNX conformance cases (onnx.backend.test.case.node.collect_testcases) of the ops whose shape-like inputs
(shapes, axes, split sizes, slice bounds: CONSTANT_INPUTS) our converters take as constants, with those inputs
turned into initializers as an exporter writes them, compiled with compile_model and run: outputs equal ONNX's
expected outputs (floats within 1e-4 of the largest magnitude, NaN where NaN; integers and booleans exactly).
tests/test_conformance.py runs every case of every supported op as onnx ships it (those inputs as graph inputs);
this file adds the exported form of the cases where the two differ.

A case is skipped only for a reason named in `skip_reason`: its opset is outside the frontend's range, it has a
zero-size tensor, or it uses a dtype the compiler has no arithmetic for (float16, bfloat16, float8, float64,
strings, unsigned and 4-bit ints).
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from compiler import compile_model
from frontends.onnx import MAX_OPSET, MIN_OPSET
from relayish.types import DTYPES

# node input positions that must be constants for our converters (everything else stays a graph input)
CONSTANT_INPUTS = {"Reshape": (1,), "Expand": (1,), "Slice": (1, 2, 3, 4), "Split": (1,), "Squeeze": (1,),
                   "Unsqueeze": (1,), "ReduceMax": (1,), "ReduceMean": (1,), "ReduceSum": (1,), "Range": (0, 1, 2),
                   "Trilu": (1,), "ConstantOfShape": (0,)}
SUPPORTED_DTYPES = set(DTYPES)


@functools.cache
def cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = collect_testcases()
    return [c for c in found if c.model is not None and len(c.model.graph.node) == 1
            and c.model.graph.node[0].op_type in CONSTANT_INPUTS]


def _dtypes(model):
    types = list(model.graph.input) + list(model.graph.output)
    names = []
    for vi in types:
        elem = vi.type.tensor_type.elem_type
        names.append(onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "undefined")
    for attr in model.graph.node[0].attribute:
        if attr.name in ("to", "value") and attr.type == onnx.AttributeProto.INT:
            names.append(onnx.helper.tensor_dtype_to_np_dtype(attr.i).name)
        if attr.type == onnx.AttributeProto.TENSOR:
            names.append(numpy_helper.to_array(attr.t).dtype.name)
    return names


def skip_reason(case) -> str | None:
    opset = max(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
    if opset > MAX_OPSET:
        return f"opset {opset} is above the frontend's ceiling {MAX_OPSET}"
    if opset < MIN_OPSET:
        return f"opset {opset} is below the frontend's floor {MIN_OPSET}"
    if any(_array(a).size == 0 for inputs, outputs in case.data_sets for a in list(inputs) + list(outputs)):
        return "a zero-size tensor (the compiler's shapes have no zero dims)"
    unsupported = sorted(set(_dtypes(case.model)) - SUPPORTED_DTYPES)
    if unsupported:
        return f"dtype(s) {unsupported}: no compiled arithmetic for them"
    return None


def with_constant_inputs(model, inputs: list[np.ndarray]):
    """The model with CONSTANT_INPUTS of its node as initializers; returns (model, feeds of the others)."""
    node = model.graph.node[0]
    positions = CONSTANT_INPUTS.get(node.op_type, ())
    values = dict(zip([vi.name for vi in model.graph.input], inputs))  # the cases' inputs are the graph's, in order
    baked = {name: values[name] for i, name in enumerate(node.input) if i in positions and name}
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [vi for vi in model.graph.input if vi.name not in baked]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in baked.items())
    return model, {vi.name: values[vi.name] for vi in model.graph.input}


def _array(value):
    """A case's value as an array (the cases hold some, e.g. float16 ones, as TensorProtos)."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def _data_sets(case):
    return [([_array(v) for v in inputs], [_array(v) for v in outputs]) for inputs, outputs in case.data_sets]


def assert_matches(ours, expected, what):
    assert ours.shape == expected.shape, f"{what}: shape {ours.shape} != {expected.shape}"
    assert ours.dtype == expected.dtype, f"{what}: dtype {ours.dtype} != {expected.dtype}"
    if expected.dtype.name == "bfloat16":  # ml_dtypes' (numpy kind 'V'): compared as float32
        ours, expected = ours.astype(np.float32), expected.astype(np.float32)
    if expected.dtype.kind != "f":
        np.testing.assert_array_equal(ours, expected, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected), err_msg=f"{what}: NaN positions")
    infinite = np.isinf(expected)
    np.testing.assert_array_equal(ours[infinite], expected[infinite], err_msg=f"{what}: infinities")
    finite = np.isfinite(expected)
    if finite.any():
        scale = max(float(np.max(np.abs(expected[finite]))), 1e-30)
        err = float(np.max(np.abs(ours[finite].astype(np.float64) - expected[finite]))) / scale
        assert err <= 1e-4, f"{what}: relative error {err:.3g}"


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_conformance_case(case):
    reason = skip_reason(case)
    if reason:
        pytest.skip(reason)
    for inputs, outputs in _data_sets(case):
        model, feeds = with_constant_inputs(case.model, inputs)
        sess = compile_model(model)
        got = sess.run(None, feeds)
        assert len(got) == len(outputs)
        for name, a, b in zip(sess.output_names, got, outputs):
            assert_matches(a, np.asarray(b), f"{case.name} output {name}")

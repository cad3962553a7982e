"""The com.microsoft review table (frontends/onnx/versions/contrib.py) against onnxruntime's own schemas: every
converted contrib op is reviewed at the schema version onnxruntime has, and takes every input and attribute that
schema defines (an unknown one would be refused by the importer even where onnxruntime runs it). And the
importer's dispatch: unsupported contrib ops listed with their domain, other contrib opsets refused by name."""
from __future__ import annotations

import numpy as np
import onnxruntime.capi.onnxruntime_pybind11_state as ort_c
import pytest

from frontends import OnnxImportError, from_onnx
from frontends.onnx import lookup_converter, supported_ops
from frontends.onnx.versions.contrib import CONTRIB, REVIEWED
from harness import node_model

ORT_SCHEMAS = {s.name: s for s in ort_c.get_all_operator_schema() if s.domain == CONTRIB}


def test_review_table_is_the_converted_ops():
    assert sorted(REVIEWED) == supported_ops(CONTRIB)


@pytest.mark.parametrize("op", sorted(REVIEWED))
def test_reviewed_version_inputs_and_attributes_match_onnxruntime(op):
    schema, conv = ORT_SCHEMAS[op], lookup_converter(op, 1, CONTRIB)
    assert schema.since_version in REVIEWED[op], f"{op}-{schema.since_version} not reviewed"
    inputs = [i for i in schema.inputs]
    if conv.variadic:  # QLinearConcat: fixed inputs, then the variadic ones
        assert len(conv.inputs) == len(inputs) - 1
    else:
        assert len(conv.inputs) == len(inputs), f"{op}: onnxruntime has inputs {[i.name for i in inputs]}"
    assert set(schema.attributes) == set(conv.attrs), f"{op}: onnxruntime's attributes {sorted(schema.attributes)}"
    required = {name for name, a in schema.attributes.items() if a.required}
    assert required == set(conv.required_attrs), op


def test_unsupported_contrib_op_is_listed_with_its_domain():
    model = node_model("SampleOp", [("x", np.float32, [2])])
    with pytest.raises(OnnxImportError, match=r"1 unsupported op type\(s\):\n  SampleOp \(com.microsoft v1\)"):
        from_onnx(model)


def test_other_contrib_opset_is_refused():
    model = node_model("Gelu", [("x", np.float32, [2])])
    model.opset_import[1].version = 2
    with pytest.raises(OnnxImportError, match=r"Gelu \(com.microsoft v2\).*com.microsoft opset 2 is not supported"):
        from_onnx(model)


def test_contrib_op_names_do_not_leak_into_the_default_domain():
    model = node_model("FastGelu", [("x", np.float32, [2])], domain="")
    with pytest.raises(OnnxImportError, match=r"No Op registered for FastGelu"):  # onnx's checker refuses it
        from_onnx(model)

"""The reviewed schema versions (frontends/onnx/versions/default.py) against onnx's registry, and the importer's opset
range: a supported op whose schema changed in onnx fails here until someone reviews the change."""
import pytest
from onnx import TensorProto, defs, helper

from frontends import OnnxImportError, from_onnx
from frontends.onnx import MAX_OPSET, MIN_OPSET, supported_ops
from frontends.onnx.versions.default import REVIEWED, registry_versions, unreviewed


def test_every_version_of_every_supported_op_is_reviewed():
    newest = defs.onnx_opset_version()
    missing = {op: registry_versions(op, MIN_OPSET, newest) for op in supported_ops()
               if registry_versions(op, MIN_OPSET, newest) != REVIEWED.get(op)}
    assert not missing, (f"schema versions in onnx's registry (opsets {MIN_OPSET}-{newest}) that REVIEWED does not "
                         f"list exactly; read each new version's doc and types against its converter, then list it: "
                         f"{missing}")


def test_reviewed_table_names_only_supported_ops():
    assert sorted(set(REVIEWED) - set(supported_ops())) == []


def test_importer_reaches_the_newest_opset_onnx_writes():
    assert MAX_OPSET == defs.onnx_opset_version()


def _model(op_type="Relu", opset=MAX_OPSET, domain="", **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))
    node = helper.make_node(op_type, ["x"], ["y"], name="the_node", domain=domain, **attrs)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), ir_version=10,
                              opset_imports=[helper.make_opsetid(domain, opset)])
    return model


@pytest.mark.parametrize("opset", [MIN_OPSET, 13, 22, MAX_OPSET])
def test_relu_at_every_opset_range_end(opset):
    mod = from_onnx(_model("Relu", opset))
    assert mod.main.body.op == "nn.relu"


def test_opset_above_the_ceiling_is_refused():
    model = _model("Relu", MAX_OPSET)
    model.opset_import[0].version = MAX_OPSET + 1
    with pytest.raises(OnnxImportError, match=f"opset {MAX_OPSET + 1} is not supported \\(supported: 7 to 28\\)"):
        from_onnx(model)


def test_unreviewed_version_is_refused_naming_op_and_node(monkeypatch):
    monkeypatch.setitem(REVIEWED, "Relu", (6, 13))
    with pytest.raises(OnnxImportError, match=r"Relu \(ai.onnx v14\): 1 node\(s\), first 'the_node'; schema Relu-14 "
                                              r"has not been reviewed \(reviewed: 6, 13\)"):
        from_onnx(_model("Relu", 14))
    from_onnx(_model("Relu", 13))  # the reviewed version still imports


def test_op_missing_from_its_opset_is_refused():
    assert unreviewed("ConstantOfShape", 8) == "ConstantOfShape does not exist in ai.onnx opset 8"


def test_model_of_another_domain_only_lists_its_ops():
    """No ai.onnx opset import and no ai.onnx node: the ops are named, not the missing default domain."""
    with pytest.raises(OnnxImportError, match=r"1 unsupported op type\(s\):\n  Normalizer \(ai.onnx.ml v1\)"):
        from_onnx(_model("Normalizer", 1, domain="ai.onnx.ml"))


def test_new_attribute_of_a_reviewed_version_is_refused_naming_node():
    """Cast-24's round_mode is not taken by the converter: refused, never ignored."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (2,))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (2,))
    node = helper.make_node("Cast", ["x"], ["y"], name="cast_node", to=TensorProto.FLOAT, round_mode="nearest")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 24)])
    with pytest.raises(OnnxImportError, match=r"'cast_node' \(Cast\): unsupported attribute\(s\) \['round_mode'\]"):
        from_onnx(model)

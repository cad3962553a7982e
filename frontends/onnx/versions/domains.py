"""The schema versions of ops of ONNX's other domains (ai.onnx.ml, ai.onnx.preview, ai.onnx.preview.training) reviewed against their
converters, as frontends/onnx/versions/default.py does for the default domain. A model's version of such a domain
selects the schema in effect (`onnx.defs.get_schema(op, version, domain).since_version`); a node imports only
through a version listed here. tests/test_conformance_ops.py fails when onnx's registry has a version of a
supported op that is not listed.
"""
from __future__ import annotations

from onnx import defs

MAX_VERSIONS = {"ai.onnx.ml": 5, "ai.onnx.preview": 1, "ai.onnx.preview.training": 1}  # the newest version of each domain onnx 1.23 defines
OTHER_DOMAINS = tuple(MAX_VERSIONS)

# domain -> op -> reviewed since_versions; the comment says what the converter takes and refuses
REVIEWED: dict[str, dict[str, tuple[int, ...]]] = {
    "ai.onnx.ml": {
        "Binarizer": (1,),  # x > threshold -> 1 else 0, in x's dtype (frontends/onnx/ops/ml.py)
        "ArrayFeatureExtractor": (1,),  # the last axis gathered at int64 indices (negative ones refused)
        "TreeEnsemble": (5,),  # every node mode (BRANCH_LEQ..MEMBER), SUM / AVERAGE / MIN / MAX aggregation;
        #   refused: post_transform other than NONE
    },
    "ai.onnx.preview": {
        "FlexAttention": (1,),  # frontends/onnx/ops/attention.py: score_mod / prob_mod subgraphs inlined
    },
    "ai.onnx.preview.training": {  # frontends/onnx/ops/training.py: one step, n tensors, float and double
        "Momentum": (1,),  # standard and nesterov
        "Adagrad": (1,),
        "Adam": (1,),
    },
}


def schema_version(domain: str, op_type: str, version: int) -> int | None:
    try:
        return defs.get_schema(op_type, version, domain).since_version
    except defs.SchemaError:
        return None


def unreviewed_in_domain(domain: str, op_type: str, version: int | None) -> str | None:
    """Why op_type of `domain` cannot be imported at this version of the domain, or None if it can."""
    if version is None:
        return f"the model imports no {domain} opset"
    if not 1 <= version <= MAX_VERSIONS[domain]:
        return f"{domain} opset {version} is not supported (supported: 1 to {MAX_VERSIONS[domain]})"
    since = schema_version(domain, op_type, version)
    if since is None:
        return f"{op_type} does not exist in {domain} opset {version}"
    reviewed = REVIEWED.get(domain, {}).get(op_type, ())
    if since not in reviewed:
        return (f"schema {op_type}-{since} ({domain}) has not been reviewed (reviewed: "
                f"{', '.join(map(str, reviewed)) or 'none'})")
    return None

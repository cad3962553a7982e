"""Which external-data files an ONNX model's bytes refer to (weights kept beside the .onnx file)."""
from __future__ import annotations

import onnx
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data


def external_data_locations(data: bytes) -> list[str]:
    """The sorted relative paths of the external-data files the model in `data` names; [] if none, or if the bytes
    do not parse (reporting that is from_onnx's job)."""
    try:
        proto = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - any parse failure: not ours to report here
        return []
    return sorted({ExternalDataInfo(t).location for t in _get_all_tensors(proto) if uses_external_data(t)})

"""A cost model trained ahead of time on measured programs of many tasks (TenSet, NeurIPS'21): the tuner starts
from it instead of from nothing, and zero-shot schedules (tuning.zero_shot) rank candidates with it without any
measurement.

The file is JSON: {"format": FORMAT, "metadata": {...}, "booster": xgboost's own JSON model}. The metadata says
what it was trained on (CPU, date, programs, tasks, models, the kinds of task (task_kind), the command) and the feature layout it expects
(NUM_FEATURES): a model trained on other features is refused, never silently misused. The package ships one at
DEFAULT_PATH when it was built (`python -m relayish_tools.bench.pretrain`, which also collects the dataset);
`load_cost_model()` returns None when there is none.

Its scores are sums of per-statement predictions of normalized throughput (tuning.cost_model): comparable across
the programs of one task, which is all that ranking needs.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from .cost_model import NUM_FEATURES, XGBoostModel

FORMAT = "relayish-cost-model-1"
DEFAULT_PATH = Path(__file__).parent / "data" / "cost_model.json.gz"


class CostModelFileError(ValueError):
    """A cost model file that cannot be used: unreadable, another format, or other features."""


def task_kind(task) -> str:
    """What kind of program a task makes, for judging whether a model trained on some tasks knows it: its ops in
    compute order (a depthwise convolution with a bias add is one kind, with a bias add and a clip another)."""
    return ",".join(task.ops)


def save_cost_model(model: XGBoostModel, path, metadata: dict) -> Path:
    """Write a trained model with its metadata (gzip-compressed JSON when path ends in .gz)."""
    if model.booster is None:
        raise ValueError("save_cost_model: the model has not been trained (no program was measured successfully)")
    doc = {"format": FORMAT, "metadata": {**metadata, "num_features": NUM_FEATURES},
           "booster": json.loads(bytes(model.booster.save_raw("json")))}
    data = json.dumps(doc, separators=(",", ":")).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def read_cost_model(path) -> tuple[object, dict]:
    """(xgboost Booster, metadata) of a saved model, or CostModelFileError naming the file and the problem."""
    import xgboost as xgb
    path = Path(path)
    try:
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError, EOFError) as e:
        raise CostModelFileError(f"{path}: not a readable cost model file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CostModelFileError(f"{path}: format {doc.get('format') if isinstance(doc, dict) else None!r}, "
                                 f"expected {FORMAT!r}")
    meta = doc.get("metadata") or {}
    if meta.get("num_features") != NUM_FEATURES:
        raise CostModelFileError(f"{path}: trained on {meta.get('num_features')} features per statement, this "
                                 f"version extracts {NUM_FEATURES}: rebuild it (python -m "
                                 "relayish_tools.bench.pretrain)")
    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(json.dumps(doc["booster"]).encode()))
    except (KeyError, xgb.core.XGBoostError) as e:
        raise CostModelFileError(f"{path}: the booster does not load ({e})") from None
    return booster, meta


def load_cost_model(path=None, seed: int = 0) -> XGBoostModel | None:
    """An XGBoostModel that starts from the pretrained booster at `path` (default: the one shipped with the
    package), or None when path is None and the package has none. Its `metadata` says what it was trained on."""
    if path is None and not DEFAULT_PATH.exists():
        return None
    booster, meta = read_cost_model(DEFAULT_PATH if path is None else path)
    model = XGBoostModel(seed=seed, base=booster)
    model.metadata = meta
    return model

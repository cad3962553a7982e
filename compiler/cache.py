"""The compile cache: a compiled model kept on disk under a key of everything its code depends on.

    key = SHA-256 of {the model's bytes, the compile options, the content of the records in use, relayish's source,
                      the target (triple, cpu, features), CACHE_FORMAT}

Entries live in cache_dir() (RELAYISH_CACHE_DIR, else $XDG_CACHE_HOME/relayish, else ~/.cache/relayish), one
directory per key holding an exported library (model.so, model.so.json, model.so.params). A hit is loaded with
runtime.load_module, which checks the content hashes written at export: a damaged entry fails that check, is
removed and rebuilt, never run. An entry is written into a private temporary directory and renamed into place in
one step, so concurrent compiles of one model never see half an entry: the first rename wins, the others discard
their copy.

What the key covers, and what it does not:
- model: the file's bytes (a path), the bytes given, or a ModelProto's deterministic serialization. Weights in
  external-data files are covered by their names, sizes and modification times (not their bytes: hashing gigabytes
  would cost more than the cache saves).
- records: the bytes of the SQLite file and of its write-ahead log. A records *object* (tuning's store) has no
  stable content to hash: such compiles are not cached.
- source: every .py file of relayish/, frontends/, compiler/ and runtime/ (so editing the compiler invalidates).
RELAYISH_CACHE=0 turns the cache off for the process (the test suite does: tests patch the compiler).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import runtime
from frontends.onnx.external import external_data_locations
from runtime.metadata import LoadError

CACHE_FORMAT = 1
_PACKAGES = ("relayish", "frontends", "compiler", "runtime")
_ENTRY_LIB = "model.so"
_SMALL_MODEL = 16 << 20  # a model file this small may keep its weights in external-data files: look for them


def cache_dir() -> str:
    env = os.environ.get("RELAYISH_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "relayish")


def enabled_by_default() -> bool:
    return os.environ.get("RELAYISH_CACHE", "1") not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """SHA-256 over the relative paths and bytes of every .py file of the packages the compiled code depends on."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()


def model_digest(model) -> str:
    """SHA-256 of the model (see the module docstring); a path that is not a file raises FileNotFoundError."""
    h = hashlib.sha256()
    if isinstance(model, (bytes, bytearray)):
        h.update(model)
    elif hasattr(model, "SerializeToString"):
        h.update(model.SerializeToString(deterministic=True))
    else:
        path = Path(model)
        data = path.read_bytes()
        h.update(data)
        if len(data) <= _SMALL_MODEL:
            for name, size, mtime in _external_data(data, path.parent):
                h.update(f"{name}\0{size}\0{mtime}\0".encode())
    return h.hexdigest()


def _external_data(data: bytes, base: Path) -> list[tuple]:
    """(location, size, mtime_ns) of each external-data file the model names (-1s for a missing one)."""
    out = []
    for name in external_data_locations(data):
        try:
            st = os.stat(base / name)
            out.append((name, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((name, -1, -1))
    return out


def records_digest(records) -> str | None:
    """'none' without records, the SHA-256 of a records DB file (and its -wal), or None: not cacheable."""
    if records is None:
        return "none"
    if hasattr(records, "best"):
        return None
    h = hashlib.sha256()
    for path in (str(records), str(records) + "-wal"):
        if os.path.exists(path):
            h.update(Path(path).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_key(model, options: dict, records, target: dict) -> str | None:
    """The entry's key, or None when the compile cannot be cached (a records object)."""
    records_part = records_digest(records)
    if records_part is None:
        return None
    parts = {"format": CACHE_FORMAT, "model": model_digest(model), "options": options, "records": records_part,
             "source": source_hash(), "target": {k: target[k] for k in ("triple", "cpu", "features")}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def entry_path(key: str, root: str | None = None) -> str:
    return os.path.join(root or cache_dir(), key, _ENTRY_LIB)


def load(key: str, root: str | None = None):
    """The cached runtime.Module for key, or None (no entry, or a damaged one, which is removed)."""
    path = entry_path(key, root)
    if not os.path.exists(os.path.dirname(path)):
        return None
    t0 = time.perf_counter()
    try:
        module = runtime.load_module(path)
    except (LoadError, OSError, ValueError, KeyError, TypeError):  # damaged: rebuild
        _remove(os.path.dirname(path))
        return None
    info = module.meta.setdefault("compile_info", {})
    info["cache"] = {"hit": True, "key": key, "load_seconds": round(time.perf_counter() - t0, 4)}
    return module


def store(key: str, module, root: str | None = None) -> str:
    """Write module's library into the cache under key (atomically: see the module docstring); returns the entry's
    library path. An entry already there (another compile won the race) is kept."""
    root = root or cache_dir()
    os.makedirs(root, exist_ok=True)
    final = os.path.dirname(entry_path(key, root))
    tmp = tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=root)
    try:
        module.export_library(os.path.join(tmp, _ENTRY_LIB))
        os.rename(tmp, final)  # atomic; fails if final exists (non-empty)
    except OSError:
        if not os.path.exists(os.path.join(final, _ENTRY_LIB)):
            raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(final, _ENTRY_LIB)


def _remove(entry_dir: str) -> None:
    """Move the entry aside in one rename (a concurrent reader sees it or not), then delete it."""
    trash = f"{entry_dir}.trash-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(entry_dir, trash)
    except OSError:
        return  # someone else removed or replaced it
    shutil.rmtree(trash, ignore_errors=True)

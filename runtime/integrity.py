"""Checks that an exported library's three files belong together and are intact, before any of its code runs.

At export, meta["sha256"] records the SHA-256 of the library file, of the weights file and of every metadata field
the native code depends on (HASHED_FIELDS, each hashed as canonical JSON):

    "sha256": {"library": "9f2c...", "params": "4b1a...",
               "fields": {"inputs": "...", "outputs": "...", "workspace_bytes": "...", ...}}

`load_module` verifies them all before dlopen, because the metadata is the only description of the buffers the code
will read and write: an edited shape, a smaller workspace, a dropped input or another model's .so would make the
code read or write out of bounds. These hashes catch corruption, truncation and mix-ups, and edits by someone who
did not recompute them; they are not a signature: whoever can write the files can also write matching hashes (and
could write any code into the .so). Loading a library is running its code: load only libraries you trust.

Memory limit: a model whose workspace plus weights exceed this machine's physical memory cannot run without
thrashing, and such a figure in metadata is far more likely corrupt than real, so it is refused before allocating.
"""
from __future__ import annotations

import hashlib
import json
import os

from .metadata import LoadError, MetadataError

# The metadata fields the native code relies on (buffer counts, shapes, dtypes, sizes, profile counters, target).
HASHED_FIELDS = ("format_version", "inputs", "outputs", "workspace_bytes", "params_bytes", "kernels", "target")
_HEX_DIGITS = set("0123456789abcdef")


def field_digest(value) -> str:
    """SHA-256 of a metadata value as canonical JSON (sorted keys, tuples as lists, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def bytes_digest(data) -> str:
    return hashlib.sha256(memoryview(data)).hexdigest()


def content_hashes(meta: dict, library_bytes, params_bytes) -> dict:
    """The meta["sha256"] entry for a library with these contents (see the module docstring)."""
    return {"library": bytes_digest(library_bytes), "params": bytes_digest(params_bytes),
            "fields": {key: field_digest(meta[key]) for key in HASHED_FIELDS}}


def physical_memory_bytes() -> int | None:
    """This machine's RAM, or None when the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(meta: dict, source: str, limit: int | None = None) -> None:
    """Raise LoadError naming `source` if one run of the model needs more memory than the machine has."""
    limit = physical_memory_bytes() if limit is None else limit
    need = meta["workspace_bytes"] + meta["params_bytes"]
    if limit is not None and need > limit:
        raise LoadError(f"{source}: the model needs {meta['workspace_bytes']} bytes of workspace and "
                        f"{meta['params_bytes']} bytes of weights, more than this machine's {limit} bytes of memory "
                        f"(corrupt metadata, or a model too big for this machine)")


def _is_digest(value) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX_DIGITS


def check_hash_entry(meta: dict, source: str) -> dict:
    """meta["sha256"], after checking it is present and well formed; a MetadataError naming `source` otherwise."""
    entry = meta.get("sha256")
    if entry is None:
        raise MetadataError(f"{source} has no content hashes ('sha256'): it was exported by an older relayish or "
                            f"written by hand; re-export the library with Module.export_library")
    fields = entry.get("fields") if isinstance(entry, dict) else None
    if not (isinstance(fields, dict) and _is_digest(entry.get("library")) and _is_digest(entry.get("params"))
            and all(_is_digest(fields.get(key)) for key in HASHED_FIELDS)):
        raise MetadataError(f"corrupt metadata in {source}: 'sha256' must hold hex SHA-256 digests of library, "
                            f"params and fields {', '.join(HASHED_FIELDS)}, got {entry!r}")
    return entry


def verify_fields(meta: dict, source: str) -> None:
    """Raise MetadataError naming the first field of HASHED_FIELDS whose value no longer matches its digest."""
    fields = check_hash_entry(meta, source)["fields"]
    edited = [key for key in HASHED_FIELDS if field_digest(meta[key]) != fields[key]]
    if edited:
        raise MetadataError(f"corrupt metadata in {source}: field(s) {', '.join(edited)} do not match the hashes "
                            f"written at export (edited or damaged since); re-export the library")


def verify_file(data, expected: str, path: str, what: str) -> None:
    """Raise LoadError naming `path` unless `data` (the file's bytes) has the digest recorded at export."""
    if bytes_digest(data) != expected:
        raise LoadError(f"{path}: the {what} does not match the SHA-256 recorded in its metadata at export "
                        f"({len(data)} bytes now): it was truncated, damaged or replaced by another "
                        f"file; re-export the library")

"""Can this CPU run a library compiled for `meta["target"]`? Checked at load time, before any native code runs.

Running AVX-512 code on a CPU without it dies with SIGILL inside the first kernel, which is a miserable way to learn
that a library was built elsewhere. The host's ISA extensions are read from /proc/cpuinfo (no llvmlite here: a
deployed model must not need it) and compared with the "+" features the library was compiled with.
"""
from __future__ import annotations

import functools
import platform
import sys
import warnings

from .metadata import LoadError

# LLVM feature name -> /proc/cpuinfo flag, for the x86 extensions whose absence makes generated code fault.
# Features not listed (tuning hints like "fast-gather", pseudo-features like "evex512") are not checked.
LLVM_TO_CPUINFO = {
    "sse": "sse", "sse2": "sse2", "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
    "sse4a": "sse4a", "avx": "avx", "avx2": "avx2", "fma": "fma", "fma4": "fma4", "f16c": "f16c", "xop": "xop",
    "bmi": "bmi1", "bmi2": "bmi2", "lzcnt": "abm", "popcnt": "popcnt", "movbe": "movbe", "adx": "adx",
    "aes": "aes", "pclmul": "pclmulqdq", "sha": "sha_ni", "gfni": "gfni", "vaes": "vaes",
    "vpclmulqdq": "vpclmulqdq", "avxvnni": "avx_vnni",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512dq": "avx512dq", "avx512bw": "avx512bw",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avx512vp2intersect": "avx512_vp2intersect",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}

# platform.machine() spellings of a triple's architecture.
_ARCH_ALIASES = {"x86_64": {"x86_64", "amd64"}, "aarch64": {"aarch64", "arm64"}, "arm64": {"aarch64", "arm64"}}


class TargetMismatchError(LoadError):
    """The library was compiled for a CPU this machine is not compatible with."""


@functools.lru_cache(maxsize=None)
def host_cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> frozenset | None:
    """The ISA flags of the first CPU in /proc/cpuinfo, or None when they cannot be read (not Linux, not x86)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return None


def required_features(features) -> list[str]:
    """The enabled feature names of an LLVM feature string ("+a,-b" -> ["a"]) or of a list of names."""
    if isinstance(features, str):
        items = [f.strip() for f in features.split(",") if f.strip()]
        return [f[1:] for f in items if f.startswith("+")]
    return [str(f).lstrip("+") for f in (features or []) if not str(f).startswith("-")]


def missing_features(features, host_flags) -> list[str]:
    """The checkable features of `features` (LLVM names) that `host_flags` (cpuinfo names) lacks."""
    return [f for f in required_features(features) if f in LLVM_TO_CPUINFO and LLVM_TO_CPUINFO[f] not in host_flags]


def _triple_arch_matches(triple: str, machine: str) -> bool:
    arch = triple.split("-", 1)[0].lower()
    return machine.lower() in _ARCH_ALIASES.get(arch, {arch})


def _host_cpu_name() -> str | None:
    """LLVM's name for the host CPU, only if llvmlite is already imported by someone else (we never import it)."""
    binding = sys.modules.get("llvmlite.binding")
    try:
        return binding.get_host_cpu_name() if binding is not None else None
    except Exception:  # noqa: BLE001 - a best-effort hint, never a reason to fail a load
        return None


def check_target(target: dict, source: str, host_flags=None, machine: str | None = None) -> None:
    """Raise TargetMismatchError naming `source` if this host cannot run code built for `target`.

    `host_flags` / `machine` default to this host's (/proc/cpuinfo, platform.machine()); tests pass their own.
    A different CPU name with all features present only warns: the code runs, maybe not at its tuned speed.
    """
    machine = machine or platform.machine()
    triple = target.get("triple", "")
    if triple and not _triple_arch_matches(triple, machine):
        raise TargetMismatchError(f"{source} was compiled for {triple}, but this machine is {machine}")
    if host_flags is None:
        host_flags = host_cpu_flags()
    if host_flags is not None:
        missing = missing_features(target.get("features", ""), host_flags)
        if missing:
            raise TargetMismatchError(
                f"{source} was compiled for CPU {target.get('cpu', '?')!r} with features this CPU lacks: "
                f"{', '.join(missing)}; recompile it on this machine")
    cpu, host_cpu = target.get("cpu"), _host_cpu_name()
    if cpu and cpu not in ("generic", "host") and host_cpu and cpu != host_cpu:
        warnings.warn(f"{source} was tuned for CPU {cpu!r} but runs on {host_cpu!r}; it may be slower than expected",
                      RuntimeWarning, stacklevel=3)

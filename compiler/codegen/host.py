"""The host target: LLVM initialized for it, and its triple, CPU name and features (what every module is built
for, and the key tuning records are stored under)."""
from __future__ import annotations

import functools

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=None)
def _init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.lru_cache(maxsize=None)
def host_target() -> dict:
    """dict(triple=..., cpu=..., features=...) of this machine; the key tuning records are stored under."""
    _init_llvm()
    return dict(triple=llvm.get_process_triple(), cpu=llvm.get_host_cpu_name(),
                features=llvm.get_host_cpu_features().flatten())

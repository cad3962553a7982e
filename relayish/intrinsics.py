"""The math intrinsics a tensor expression may call (`te.intrin(name, *args)`): the one table of their names.

Each entry: its arity, a float64 numpy reference (what the te and loop-IR evaluators of the tests compute, and
what codegen's accuracy is measured against), and its cost class:
  - "instruction": one `llvm.<name>` intrinsic, a single instruction on x86-64 (SSE4.1 / AVX);
  - "polynomial": range reduction + polynomial written out inline by codegen (compiler/codegen/intrinsics.py),
    tens of instructions.
Codegen emits every name in this table and no other; tests/test_codegen.py checks that they agree.

INTEGER_INTRINSICS holds the integer ones (exact numpy references on integer arrays): `dot4_u8s8`, the 4-byte dot
product of int8 kernels (te.dot4_u8s8; codegen: compiler/codegen/intdot.py, one vpdpbusd lane where the host has
VNNI).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Intrinsic:
    name: str
    arity: int
    numpy: Callable  # float64 arrays -> float64 array
    cost: str  # "instruction" or "polynomial"


_erf = np.vectorize(math.erf, otypes=[np.float64])

INTRINSICS: dict[str, Intrinsic] = {i.name: i for i in (
    Intrinsic("sqrt", 1, np.sqrt, "instruction"),
    Intrinsic("fabs", 1, np.abs, "instruction"),
    Intrinsic("floor", 1, np.floor, "instruction"),
    Intrinsic("ceil", 1, np.ceil, "instruction"),
    Intrinsic("roundeven", 1, np.round, "instruction"),  # nearest integer, ties to even (vrndscaleps)
    Intrinsic("exp", 1, np.exp, "polynomial"),
    Intrinsic("log", 1, np.log, "polynomial"),
    Intrinsic("tanh", 1, np.tanh, "polynomial"),
    Intrinsic("sigmoid", 1, lambda x: 1 / (1 + np.exp(-x)), "polynomial"),
    Intrinsic("erf", 1, _erf, "polynomial"),
    Intrinsic("pow", 2, np.power, "polynomial"),
    Intrinsic("sin", 1, np.sin, "polynomial"),
    Intrinsic("cos", 1, np.cos, "polynomial"),
    Intrinsic("tan", 1, np.tan, "polynomial"),
    Intrinsic("asin", 1, np.arcsin, "polynomial"),
    Intrinsic("acos", 1, np.arccos, "polynomial"),
    Intrinsic("atan", 1, np.arctan, "polynomial"),
)}


def signed_bytes(word) -> list:
    """The 4 bytes of int32 words, least significant first, each read as a signed int8 (as int64 arrays)."""
    w = np.asarray(word).astype(np.int64) & 0xFFFFFFFF
    return [((w >> (8 * t)) & 0xFF) - (((w >> (8 * t)) & 0x80) << 1) for t in range(4)]


def pack_signed_bytes(b: np.ndarray, axis: int = -1) -> np.ndarray:
    """int8 values b with 4 consecutive elements along `axis` (its extent a multiple of 4) -> int32 words, the first
    element in the least significant byte (the inverse of signed_bytes; a little-endian view of the bytes)."""
    b = np.moveaxis(np.asarray(b, np.int8), axis, -1)
    words = np.ascontiguousarray(b).view("<i4")
    return np.moveaxis(words, -1, axis)


def _dot4_u8s8(a0, a1, a2, a3, w):
    """sum over t of a_t (uint8) * byte t of the int32 word w (int8), exact (at most 4 * 255 * 128 in magnitude)."""
    return sum(np.asarray(a, np.int64) * b for a, b in zip((a0, a1, a2, a3), signed_bytes(w))).astype(np.int32)


INTEGER_INTRINSICS: dict[str, Intrinsic] = {i.name: i for i in (
    Intrinsic("dot4_u8s8", 5, _dot4_u8s8, "instruction"),
)}


def get_intrinsic(name: str) -> Intrinsic:
    try:
        return INTRINSICS.get(name) or INTEGER_INTRINSICS[name]
    except KeyError:
        raise ValueError(f"unknown intrinsic {name!r}; known: {sorted(INTRINSICS) + sorted(INTEGER_INTRINSICS)}") \
            from None

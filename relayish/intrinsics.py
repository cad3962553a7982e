"""The math intrinsics a tensor expression may call (`te.intrin(name, *args)`): the one table of their names.

Each entry: its arity, a float64 numpy reference (what the te and loop-IR evaluators of the tests compute, and
what codegen's accuracy is measured against), and its cost class:
  - "instruction": one `llvm.<name>` intrinsic, a single instruction on x86-64 (SSE4.1 / AVX);
  - "polynomial": range reduction + polynomial written out inline by codegen (compiler/codegen/intrinsics.py),
    tens of instructions.
Codegen emits every name in this table and no other; tests/test_codegen.py checks that they agree.
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


def get_intrinsic(name: str) -> Intrinsic:
    try:
        return INTRINSICS[name]
    except KeyError:
        raise ValueError(f"unknown intrinsic {name!r}; known: {sorted(INTRINSICS)}") from None

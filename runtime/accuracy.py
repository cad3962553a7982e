"""Output agreement: the project's fp32 criterion max|ours - ref| / max|ref| <= 1e-4, defined once.

The command line (verify, bench), the measurement of tuning candidates, the kernel benchmark and the cost model's
dataset harness all judge outputs with `output_error`.
"""
from __future__ import annotations

import numpy as np

DEFAULT_TOLERANCE = 1e-4  # max|ours - ref| / max|ref|


def output_error(ours: np.ndarray, ref: np.ndarray, tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """max|ours - ref|, and max|ours - ref| / max|ref| over the reference's finite values (the project's fp32
    criterion), and whether it passes.

    Both NaN, or the same infinity, agree (BERT's attention mask (1 - m) * float32 min overflows to -inf on the
    tuner's random inputs, in both). A shape mismatch, a NaN or an infinity where the reference has another value,
    fails with an infinite error.
    """
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return {"shape": ours.shape, "ref_shape": ref.shape, "max_abs": np.inf, "max_rel": np.inf, "passed": False}
    if ours.size == 0:
        return {"shape": ours.shape, "ref_shape": ref.shape, "max_abs": 0.0, "max_rel": 0.0, "passed": True}
    o, r = ours.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, resolved below
        diff = np.abs(o - r)
    diff[(np.isnan(o) & np.isnan(r)) | (np.isinf(r) & (o == r))] = 0.0  # both NaN, or the same infinity: agreement
    max_abs = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
    finite = np.abs(r[np.isfinite(r)])
    scale = float(finite.max()) if finite.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf)
    return {"shape": ours.shape, "ref_shape": ref.shape, "max_abs": max_abs, "max_rel": max_rel,
            "passed": bool(max_rel <= tolerance)}


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max|ours - ref| / max|ref| of output_error (inf on a shape mismatch or a NaN the reference lacks)."""
    return output_error(ours, ref)["max_rel"]


def compare_outputs(ours: dict, ref: dict, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, dict]:
    """output_error for every output of `ref` (by name); an output we do not produce fails."""
    result = {}
    for name, r in ref.items():
        if name not in ours:
            result[name] = {"shape": None, "ref_shape": np.shape(r), "max_abs": np.inf, "max_rel": np.inf,
                            "passed": False}
        else:
            result[name] = output_error(ours[name], r, tolerance)
    return result

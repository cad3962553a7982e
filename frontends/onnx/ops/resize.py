"""Converters of Resize (opsets 10, 11, 13, 18, 19) and the older Upsample (7, 9, 10) onto relayish's resize
(relayish/ops/resize.py).

Everything that decides the output shape is resolved here and must be constant at import: scales or sizes, axes,
keep_aspect_ratio_policy; roi too (tf_crop_and_resize), which the op takes as attributes. The op gets the full
output shape and, per dim, the scale its coordinate transformation divides by: the given scale, or output / input
extent when sizes are given (both as the ONNX spec computes them: floor(extent * scale), and with a
keep_aspect_ratio_policy round(scale * extent) with one scale for every resized axis).

Upsample and Resize-10 map an output position y to y / scale (asymmetric) and pick the nearest input element as
onnxruntime does: truncated when upsampling, rounded up when downsampling.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Expr
from relayish.prim_expr import PrimExpr

from ..builders import fold, normalize_axis, shape_of
from ..registry import converter
from ..values import ConversionError, constant_value, int_list_input

POLICIES = ("stretch", "not_larger", "not_smaller")


def _given(expr: Expr | None, what: str) -> np.ndarray | None:
    """The value of an optional constant input; None when omitted or empty (Resize-11 passes an empty scales
    next to sizes)."""
    if expr is None:
        return None
    value = constant_value(expr, what)
    return value.reshape(-1) if value.size else None


def _float_scales(expr: Expr | None) -> np.ndarray | None:
    value = _given(expr, "scales")
    if value is not None and value.dtype.kind != "f":
        raise ConversionError(f"input 'scales' must be float, got {value.dtype}")
    return value


def _resolve(shape, axes, scales, sizes, policy):
    """(output shape, per-dim scale) of every dim, as the spec derives them from scales or sizes."""
    ndim = len(shape)
    if (scales is None) == (sizes is None):
        raise ConversionError("exactly one of 'scales' and 'sizes' must be given (a non-empty tensor)")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ConversionError(f"input '{'scales' if scales is not None else 'sizes'}' must have one value per "
                              f"resized axis ({len(axes)}), got {len(given)}")
    out, factors = list(shape), [1.0] * ndim
    if scales is not None:
        for a, s in zip(axes, scales):
            s = float(s)
            if not (s > 0 and math.isfinite(s)):
                raise ConversionError(f"scales must be positive and finite, got {s} for axis {a}")
            if isinstance(shape[a], PrimExpr):  # a size known at run time: a whole scale keeps it exact
                if s != int(s):
                    raise ConversionError(f"scale {s} of axis {a}, whose size {shape[a]} is known only at run "
                                          "time: only whole scales are supported there")
                factors[a], out[a] = s, int(s) * shape[a]
                continue
            factors[a], out[a] = s, int(math.floor(s * shape[a]))
    else:
        if any(isinstance(shape[a], PrimExpr) for a in axes):
            raise ConversionError("resizing to given sizes an axis whose size is known only at run time")
        if any(int(s) < 1 for s in sizes):
            raise ConversionError(f"sizes must be positive, got {[int(s) for s in sizes]}")
        for a, n in zip(axes, sizes):
            factors[a], out[a] = int(n) / shape[a], int(n)
        if policy not in POLICIES:
            raise ConversionError(f"keep_aspect_ratio_policy must be one of {POLICIES}, got {policy!r}")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            scale = pick(factors[a] for a in axes)
            for a in axes:
                factors[a], out[a] = scale, int(scale * shape[a] + 0.5)
    return tuple(out), tuple(factors)  # (an empty dim gives an empty output, folded at import)


def _full_roi(roi: np.ndarray | None, axes, ndim: int) -> tuple[float, ...]:
    if roi is None:
        raise ConversionError("coordinate_transformation_mode tf_crop_and_resize needs the input 'roi'")
    if len(roi) != 2 * len(axes):
        raise ConversionError(f"input 'roi' must hold 2 values per resized axis ({2 * len(axes)}: all starts, "
                              f"then all ends), got {len(roi)}")
    full = [0.0] * ndim + [1.0] * ndim
    for k, a in enumerate(axes):
        full[a], full[ndim + a] = float(roi[k]), float(roi[len(axes) + k])
    return tuple(full)


def _resize(x, roi, scales, sizes, *, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
            exclude_outside, extrapolation_value, antialias=0, axes=None, keep_aspect_ratio_policy="stretch"):
    shape = shape_of(x)
    ndim = len(shape)
    if mode not in ("nearest", "linear", "cubic"):
        raise ConversionError(f"mode must be 'nearest', 'linear' or 'cubic', got {mode!r}")
    for name, value in (("exclude_outside", exclude_outside), ("antialias", antialias)):
        if value not in (0, 1):
            raise ConversionError(f"attribute {name} must be 0 or 1, got {value}")
    axes = tuple(range(ndim)) if axes is None else tuple(normalize_axis(int(a), ndim, "axes value") for a in axes)
    if len(set(axes)) != len(axes):
        raise ConversionError(f"repeated axes {axes}")
    out, factors = _resolve(shape, axes, scales, sizes, keep_aspect_ratio_policy)
    full_roi = ()
    if coordinate_transformation_mode == "tf_crop_and_resize":
        full_roi = _full_roi(_given(roi, "roi"), axes, ndim)
    return fold("resize", x, sizes=out, scales=factors, mode=mode,
                coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
                cubic_coeff_a=float(cubic_coeff_a), exclude_outside=int(exclude_outside),
                antialias=int(antialias) if mode != "nearest" else 0, roi=full_roi,
                extrapolation_value=float(extrapolation_value))


def _resize_asymmetric(x, scales, mode: str):
    """Upsample and Resize-10: y / scale, nearest truncated when upsampling, rounded up when downsampling."""
    if mode not in ("nearest", "linear"):
        raise ConversionError(f"mode must be 'nearest' or 'linear', got {mode!r}")
    scales = None if scales is None else np.asarray(scales, np.float32).reshape(-1)
    if scales is None:
        raise ConversionError("input 'scales' is required")
    if len(scales) != len(shape_of(x)):
        raise ConversionError(f"scales must have one value per dim of the {len(shape_of(x))}-D input, got "
                              f"{len(scales)}")
    shrinks = {bool(s < 1) for s, n in zip(scales, shape_of(x)) if not math.isclose(float(s), 1.0)}
    if mode == "nearest" and len(shrinks) > 1:
        raise ConversionError(f"nearest mode with scales {scales.tolist()} both upsampling and downsampling is "
                              f"not supported (onnxruntime rounds down when upsampling, up when downsampling)")
    nearest = "ceil" if shrinks == {True} else "floor"
    return _resize(x, None, scales, None, mode=mode, coordinate_transformation_mode="asymmetric",
                   nearest_mode=nearest, cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0)


@converter("Upsample", since=7)
def upsample_v7(x, *, scales, mode="nearest"):
    return _resize_asymmetric(x, scales, mode)


@converter("Upsample", since=9)
def upsample_v9(x, scales, *, mode="nearest"):
    """Upsample-10 is Upsample-9 deprecated (in favour of Resize)."""
    return _resize_asymmetric(x, _float_scales(scales), mode)


@converter("Resize", since=10)
def resize_v10(x, scales, *, mode="nearest"):
    return _resize_asymmetric(x, _float_scales(scales), mode)


def _coordinate_mode(mode: str, refused: tuple[str, ...], version: int) -> str:
    if mode in refused:
        raise ConversionError(f"coordinate_transformation_mode {mode!r} does not exist in Resize-{version}")
    return mode


def _resize_checked(x, roi, scales, sizes, refused, version, *, mode, coordinate_transformation_mode, **attrs):
    ctm = _coordinate_mode(coordinate_transformation_mode, refused, version)
    return _resize(x, roi, _float_scales(scales), _sizes(sizes), mode=mode, coordinate_transformation_mode=ctm,
                   **attrs)


@converter("Resize", since=11)
def resize_v11(x, roi=None, scales=None, sizes=None, *, mode="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0):
    """scales is required in Resize-11 and 12 (empty when sizes is given) and optional from 13; the schema of each
    version is checked by the importer."""
    return _resize_checked(x, roi, scales, sizes, ("half_pixel_symmetric",), 11, mode=mode,
                           coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
                           cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                           extrapolation_value=extrapolation_value)


@converter("Resize", since=13)
def resize_v13(x, roi=None, scales=None, sizes=None, *, mode="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0):
    """13: tf_half_pixel_for_nn is gone."""
    return _resize_checked(x, roi, scales, sizes, ("half_pixel_symmetric", "tf_half_pixel_for_nn"), 13,
                           mode=mode, coordinate_transformation_mode=coordinate_transformation_mode,
                           nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                           extrapolation_value=extrapolation_value)


@converter("Resize", since=18)
def resize_v18(x, roi=None, scales=None, sizes=None, *, mode="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
               antialias=0, axes=None, keep_aspect_ratio_policy="stretch"):
    """18: antialias, axes, keep_aspect_ratio_policy."""
    return _resize_checked(x, roi, scales, sizes, ("half_pixel_symmetric", "tf_half_pixel_for_nn"), 18, mode=mode,
                       coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
                       cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                       extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                       keep_aspect_ratio_policy=keep_aspect_ratio_policy)


@converter("Resize", since=19)
def resize_v19(x, roi=None, scales=None, sizes=None, *, mode="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
               antialias=0, axes=None, keep_aspect_ratio_policy="stretch"):
    """19: coordinate mode half_pixel_symmetric."""
    return _resize_checked(x, roi, scales, sizes, ("tf_half_pixel_for_nn",), 19, mode=mode,
                       coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
                       cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                       extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                       keep_aspect_ratio_policy=keep_aspect_ratio_policy)


def _sizes(expr: Expr | None):
    if expr is None:
        return None
    sizes = int_list_input(expr, "sizes")
    return sizes or None

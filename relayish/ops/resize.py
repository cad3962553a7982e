"""ONNX Resize as one op: nearest, linear and cubic interpolation over any of the axes of a tensor.

The frontend resolves what decides the output shape (scales or sizes, axes, keep_aspect_ratio_policy): the op gets
the output shape `sizes` and, per axis, the `scales` factor that the coordinate transformation divides by (the
given scale, or output/input extent when sizes were given), both for every axis.

Interpolation is separable. Per resized axis, output position y maps to a source coordinate x (float64, by the
coordinate_transformation_mode, exactly as the ONNX spec writes it), and x to a fixed number of taps: positions
around x with a weight each (nearest: one tap; linear: 2; cubic: 4; antialias widens the linear / cubic filter
by 1/scale when downsampling and normalizes its weights). Taps outside the input repeat the edge element
(exclude_outside=1: their weight is 0 and the others are renormalized). tf_crop_and_resize gives
extrapolation_value where a resized axis' x lies outside [0, extent - 1].

The per-axis math is written once (`_axis_coordinate`, `_axis_taps`) over a tiny math interface implemented both
by numpy (the reference: whole axes as float64 arrays) and by te (the compute: one output element). The compute
evaluates coordinates and weights in float64 as the reference does, so that roundings agree at ties (nearest
mode) and at extrapolation bounds; it sums the products of the axes' tap weights times the data in float64 and
rounds once. A nearest axis whose source index is an integer affine map (i * p + q) // d of the output index (every
integer up/down sampling) is read with integer arithmetic instead.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .. import te
from ..types import Attrs, TensorType, dim, is_float, is_static_dim
from ..op import REQUIRED, OpError, Pattern, register_op
from .common import same_dim

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MAX_TAPS = 256  # taps per output element (product over the resized axes); each is unrolled in the compute


@dataclass(frozen=True)
class _Axis:
    """One resized axis: input and output extents, the scale factor the coordinate transformation uses, and the
    (start, end) of its region of interest (tf_crop_and_resize)."""
    dim: int
    n_in: int
    n_out: int
    scale: float
    roi: tuple[float, float]


# ---------------------------------------------------------------------------------------------- the per-axis math

class _NumpyMath:
    """Whole axes at once: y is a float64 array of output positions."""
    floor = staticmethod(np.floor)
    where = staticmethod(np.where)
    fabs = staticmethod(np.abs)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    any_of = staticmethod(np.logical_or)

    @staticmethod
    def eq(a, b):
        return a == b


class _TeMath:
    """One output element: y is a float64 expression of the output index."""
    floor = staticmethod(te.floor)
    fabs = staticmethod(te.fabs)
    minimum = staticmethod(te.min_)
    maximum = staticmethod(te.max_)
    @staticmethod
    def eq(a, b):
        return te.eq(a, te.as_expr(b, a.dtype))

    @staticmethod
    def where(cond, a, b):
        if not isinstance(a, te.PrimExpr) and not isinstance(b, te.PrimExpr):
            a = te.const(a, "float64")
        return te.select(cond, a, b)

    @staticmethod
    def any_of(a, b):
        return te.any_of(a, b)


def _axis_coordinate(m, y, ax: _Axis, ctm: str):
    """(source coordinate x of output position y, condition of extrapolating or None), as the ONNX spec."""
    n_in, scale = ax.n_in, ax.scale
    out_w = scale * n_in  # the unrounded output extent
    if ctm == "align_corners":
        return (y * 0.0 if out_w == 1 else y * (n_in - 1) / (out_w - 1)), None
    if ctm == "asymmetric":
        return y / scale, None
    if ctm == "pytorch_half_pixel":  # 0 for an output of one element, as the spec's text (and onnxruntime)
        return (y * 0.0 if ax.n_out == 1 else (y + 0.5) / scale - 0.5), None
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if ctm == "tf_half_pixel_for_nn":  # Resize-11 and 12 only
        return (y + 0.5) / scale, None
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - ax.n_out / out_w)
        return offset + (y + 0.5) / scale - 0.5, None
    # tf_crop_and_resize. roi is float32 data: the spec's arithmetic of roi values alone stays in float32
    # (a float32 0.1 * 5 is 0.5, a tie in nearest mode), as onnxruntime's
    r0, r1 = np.float32(ax.roi[0]), np.float32(ax.roi[1])
    span, start = r1 - r0, float(r0 * np.float32(n_in - 1))
    if out_w == 1:
        x = y * 0.0 + float(span * np.float32(n_in - 1) / np.float32(2))
    else:
        x = y * float(span) * (n_in - 1) / (out_w - 1)
    x = x + start
    return x, m.any_of(x < 0, x > n_in - 1)


def _filter_start(mode: str, antialias: bool, scale: float) -> int:
    """Offset of the first tap from the tap left of x; the filter has 2 - 2 * start taps."""
    support = 1 if mode == "linear" else 2
    if not antialias:
        return 1 - support
    return int(math.floor(-support / min(scale, 1.0)) + 1)


def _axis_taps(m, x, ax: _Axis, attrs):
    """[(source position as float64, weight or None)] of the taps of source coordinate x along one axis. Positions
    are clamped into the axis; a nearest axis has one tap and no weight."""
    last = ax.n_in - 1
    x0 = m.floor(x)
    clamp = lambda p: m.minimum(m.maximum(p, 0.0), float(last))
    if attrs.mode == "nearest":
        f = x - x0
        up = {"round_prefer_floor": f > 0.5, "round_prefer_ceil": f >= 0.5, "floor": None, "ceil": f > 0}
        cond = up[attrs.nearest_mode]
        return [(clamp(x0 if cond is None else x0 + m.where(cond, 1.0, 0.0)), None)]
    # as the spec: an integer x is the right tap of its pair (ratio 1), else the left one (ratio in (0, 1))
    integer = m.eq(x, x0)
    left = m.where(integer, x0 - 1.0, x0)
    r = m.where(integer, 1.0, x - x0)
    start = _filter_start(attrs.mode, attrs.antialias, ax.scale)
    n = 2 - 2 * start
    offsets = range(start, start + n)
    a = attrs.cubic_coeff_a
    if not attrs.antialias and attrs.mode == "linear":
        weights = [1 - r, r]
    elif not attrs.antialias:  # cubic
        weights = [((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                   ((a + 2) * r - (a + 3)) * r * r + 1,
                   ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
                   ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a]
    else:
        s = min(ax.scale, 1.0)
        weights = []
        for k in offsets:
            d = m.fabs((k - r) * s) if attrs.mode == "linear" else m.fabs(s * (k - r))
            if attrs.mode == "linear":
                weights.append(m.maximum(1 - d, 0.0))
            else:
                d2 = d * d
                d3 = d * d2
                inner = (a + 2) * d3 - (a + 3) * d2 + 1
                outer = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
                weights.append(m.where(d <= 1, inner, m.where(d < 2, outer, 0.0)))
        weights = _normalized(m, weights)
    positions = [left + k for k in offsets]
    if attrs.exclude_outside:
        weights = [m.where(m.any_of(p < 0, p > last), 0.0, w) for p, w in zip(positions, weights)]
        weights = _normalized(m, weights, guard=True)
    return [(clamp(p), w) for p, w in zip(positions, weights)]


def _normalized(m, weights, guard=False):
    total = weights[0]
    for w in weights[1:]:
        total = total + w
    if guard:  # every tap excluded: the weights stay 0
        total = m.where(m.eq(total, 0.0), 1.0, total)
    return [w / total for w in weights]


# ---------------------------------------------------------------------------------------------- registry entry

def _resized_axes(shape, attrs) -> list[_Axis]:
    """The axes that change (the spec skips an axis whose scale is ~1, extent is kept and roi is [0, 1])."""
    axes = []
    ndim = len(shape)
    for d, n in enumerate(shape):
        roi = (attrs.roi[d], attrs.roi[ndim + d]) if attrs.roi else (0.0, 1.0)
        identity = math.isclose(attrs.scales[d], 1.0) and attrs.sizes[d] == n and \
            (attrs.coordinate_transformation_mode != "tf_crop_and_resize" or
             (math.isclose(roi[0], 0.0, abs_tol=1e-9) and math.isclose(roi[1], 1.0)))
        if not identity:
            axes.append(_Axis(d, n, attrs.sizes[d], attrs.scales[d], roi))
    return axes


def _tap_count(attrs, ax: _Axis) -> int:
    return 1 if attrs.mode == "nearest" else 2 - 2 * _filter_start(attrs.mode, attrs.antialias, ax.scale)


def _resize_normalize(attrs, arg_types):
    attrs = dict(attrs)
    attrs["sizes"] = tuple(dim(s) for s in attrs["sizes"])
    attrs["scales"] = tuple(float(s) for s in attrs["scales"])
    attrs["roi"] = tuple(float(r) for r in attrs["roi"])
    for name in ("cubic_coeff_a", "extrapolation_value"):
        attrs[name] = float(attrs[name])
    for name in ("exclude_outside", "antialias"):
        attrs[name] = int(attrs[name])
    return attrs


def _resize_infer(arg_types, attrs):
    x, = arg_types
    ndim = x.ndim
    for name, allowed in (("mode", MODES), ("coordinate_transformation_mode", COORDINATE_MODES),
                          ("nearest_mode", NEAREST_MODES)):
        if attrs[name] not in allowed:
            raise OpError(f"resize: {name} must be one of {allowed}, got {attrs[name]!r}")
    if len(attrs.sizes) != ndim or len(attrs.scales) != ndim:
        raise OpError(f"resize: sizes {attrs.sizes} and scales {attrs.scales} must have one value per dim of the "
                      f"{ndim}-D input")
    if any(is_static_dim(s) and s < 0 for s in attrs.sizes):
        raise OpError(f"resize: output shape {attrs.sizes} has a negative dim")
    for ax in _resized_axes(x.shape, attrs):
        if not is_static_dim(ax.n_in) and (attrs.mode != "nearest" or ax.scale != int(ax.scale) or
                                           not same_dim(ax.n_out, dim(ax.n_in * int(ax.scale)))):
            raise OpError(f"resize: axis {ax.dim} of size {ax.n_in}, known only at run time, can only be resized by "
                          f"nearest with a whole scale (got {attrs.mode}, scale {ax.scale}, output {ax.n_out})")
    if any(not (s > 0 and math.isfinite(s)) for s in attrs.scales):
        raise OpError(f"resize: scales {attrs.scales} must be positive and finite")
    if attrs.roi and len(attrs.roi) != 2 * ndim:
        raise OpError(f"resize: roi must hold 2 values per dim (all starts, then all ends), got {len(attrs.roi)}")
    if attrs.mode != "nearest" and not is_float(x.dtype):
        raise OpError(f"resize: {attrs.mode} mode needs a float input, got {x.dtype}")
    if attrs.antialias and attrs.mode == "nearest":
        raise OpError("resize: antialias applies to linear and cubic modes, not nearest")
    taps = math.prod(_tap_count(attrs, ax) for ax in _resized_axes(x.shape, attrs))
    if taps > MAX_TAPS:
        raise OpError(f"resize: {taps} taps per output element (antialias over a large downsampling) exceed the "
                      f"{MAX_TAPS} the compute unrolls")
    return TensorType(attrs.sizes, x.dtype)


def _to_dtype(values, dtype) -> np.ndarray:
    """float64 values to the data's dtype as the spec's saturate_cast (integers: rounded half to even and
    clipped; bool: nonzero)."""
    values, dtype = np.asarray(values), np.dtype(dtype)
    if dtype.kind == "b":
        return values != 0
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)


def _resize_ref(x, **kw):
    """One resized axis after the other, as the spec. Nearest mode gathers the data in its own dtype (int64 beyond
    2^53 stays exact); linear and cubic compute in float64 and round once."""
    attrs = Attrs(kw)
    nearest = attrs.mode == "nearest"
    out = x if nearest else x.astype(np.float64)
    fill = _to_dtype(attrs.extrapolation_value, x.dtype) if nearest else attrs.extrapolation_value
    for ax in _resized_axes(x.shape, attrs):
        y = np.arange(ax.n_out, dtype=np.float64)
        coord, outside = _axis_coordinate(_NumpyMath, y, ax, attrs.coordinate_transformation_mode)
        taps = _axis_taps(_NumpyMath, coord, ax, attrs)
        shape = [1] * x.ndim
        shape[ax.dim] = ax.n_out
        result = None
        for pos, weight in taps:
            gathered = np.take(out, pos.astype(np.intp), axis=ax.dim)
            term = gathered if weight is None else gathered * weight.reshape(shape)
            result = term if result is None else result + term
        if outside is not None:
            result = np.where(outside.reshape(shape), fill, result)
        out = result
    return _to_dtype(out, x.dtype)


def _affine_nearest(ax: _Axis, attrs):
    """(p, q, d) with source index == clip((y * p + q) // d) at every output position y, or None."""
    y = np.arange(ax.n_out, dtype=np.float64)
    coord, outside = _axis_coordinate(_NumpyMath, y, ax, attrs.coordinate_transformation_mode)
    if outside is not None:
        return None
    (pos, _), = _axis_taps(_NumpyMath, coord, ax, attrs)
    want = pos.astype(np.int64)
    ratio = Fraction(ax.n_in, ax.n_out)
    p, d = ratio.numerator, ratio.denominator
    if (ax.n_out - 1) * p + 2 * d >= 2 ** 31:  # the int32 index arithmetic would overflow
        return None
    iy = np.arange(ax.n_out, dtype=np.int64)
    for q in range(-d, d + 1):
        if np.array_equal(np.clip((iy * p + q) // d, 0, ax.n_in - 1), want):
            return p, q, d
    return None


def _run_time_affine(ax: _Axis, attrs):
    """_affine_nearest of an axis whose size is known only at run time (a whole scale k, checked by infer): the
    map found for two sizes of it, which must agree, and whether its index can pass the last input element."""
    maps = set()
    past_end = False
    for n in (7, 16):
        twin = _Axis(ax.dim, n, n * int(ax.scale), ax.scale, ax.roi)
        affine = _affine_nearest(twin, attrs)
        if affine is None:
            raise OpError(f"resize: nearest {attrs.nearest_mode} of axis {ax.dim} "
                          f"({attrs.coordinate_transformation_mode}) by {ax.scale} is not an integer map of the index "
                          f"over a size known only at run time")
        p, q, d = affine
        maps.add(affine)
        past_end |= ((twin.n_out - 1) * p + q) // d > n - 1
    if len(maps) != 1:
        raise OpError(f"resize: nearest of axis {ax.dim} by {ax.scale} maps indices differently at different sizes")
    return maps.pop(), past_end


def _nearest_index(i, ax: _Axis, attrs):
    """(int32 source index, extrapolation condition or None) of output index i along a nearest axis."""
    if not is_static_dim(ax.n_in):
        (p, q, d), past_end = _run_time_affine(ax, attrs)
        k = (i * p + q) // d if q >= 0 else (i * p + (q + d)) // d - 1
        k = te.max_(k, 0) if q < 0 else k
        return (te.min_(k, ax.n_in - 1) if past_end else k), None
    affine = _affine_nearest(ax, attrs)
    if affine is not None:
        p, q, d = affine
        if q >= 0:
            k = (i * p + q) // d
        else:  # a dividend kept >= 0: // of negatives rounds toward zero in codegen
            k = (i * p + (q + d)) // d - 1
        lo, hi = q // d, ((ax.n_out - 1) * p + q) // d  # the index is nondecreasing in i
        if lo < 0:
            k = te.max_(k, 0)
        if hi > ax.n_in - 1:
            k = te.min_(k, ax.n_in - 1)
        return k, None
    y = te.cast("float64", i)
    coord, outside = _axis_coordinate(_TeMath, y, ax, attrs.coordinate_transformation_mode)
    (pos, _), = _axis_taps(_TeMath, coord, ax, attrs)
    return te.cast("int32", pos), outside


def _fill_value(attrs, dtype):
    """extrapolation_value in the data's dtype (as _to_dtype)."""
    if is_float(dtype):
        return te.const(attrs.extrapolation_value, dtype)
    return te.const(int(_to_dtype(attrs.extrapolation_value, dtype)), dtype)


def _resize_compute(inputs, attrs, out_type):
    x, = inputs
    axes = _resized_axes(x.shape, attrs)

    def body(*i):
        outside = []
        if attrs.mode == "nearest":
            idx = list(i)
            for ax in axes:
                idx[ax.dim], cond = _nearest_index(i[ax.dim], ax, attrs)
                if cond is not None:
                    outside.append(cond)
            value = x[tuple(idx)]
        else:
            per_axis = []
            for ax in axes:
                coord, cond = _axis_coordinate(_TeMath, te.cast("float64", i[ax.dim]), ax,
                                               attrs.coordinate_transformation_mode)
                per_axis.append([(te.cast("int32", p), w) for p, w in _axis_taps(_TeMath, coord, ax, attrs)])
                if cond is not None:
                    outside.append(cond)
            value = None
            for combo in itertools.product(*per_axis):
                idx = list(i)
                weight = None
                for ax, (p, w) in zip(axes, combo):
                    idx[ax.dim] = p
                    weight = w if weight is None else weight * w
                term = te.cast("float64", x[tuple(idx)]) * weight
                value = term if value is None else value + term
            value = te.cast(x.dtype, value)
        if outside:
            value = te.select(te.any_of(*outside), _fill_value(attrs, x.dtype), value)
        return value
    return te.compute(out_type.shape, body, name="resize", tag="injective")


def _resize_flops(arg_types, attrs, out_type):
    taps = math.prod(_tap_count(attrs, ax) for ax in _resized_axes(arg_types[0].shape, attrs))
    return float(out_type.size * (1 if attrs.mode == "nearest" else 2 * taps))


register_op("resize", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_resize_infer,
            ref=_resize_ref, compute=_resize_compute, normalize=_resize_normalize, flops=_resize_flops,
            attrs={"sizes": REQUIRED, "scales": REQUIRED, "mode": "nearest",
                   "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
                   "cubic_coeff_a": -0.75, "exclude_outside": 0, "antialias": 0, "roi": (),
                   "extrapolation_value": 0.0},
            doc="ONNX Resize with the output shape `sizes` and per-dim `scales` resolved: nearest (nearest_mode), "
                "linear, cubic (cubic_coeff_a, exclude_outside, antialias) over any axes; coordinate modes "
                "half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
                "tf_crop_and_resize (roi: all starts then all ends, extrapolation_value)")

"""Converters of the sampling ops, each a composition of existing relayish ops:
- GridSample: per output position and tap, index and weight arithmetic in float32 on the run-time grid, then
  gather_elements over the flattened spatial dims. Every index is made finite (NaN -> 0) and clipped into its axis
  before the cast to an integer, and gather_elements clamps again, so no grid value (NaN, inf, huge) can make a
  read leave the data;
- DeformConv: GridSample (bilinear, zeros outside) of each offset group's channels at the kernel taps moved by
  the run-time offsets, in pixels, times the mask, then one batched matmul with the weights per group;
- RoiAlign: the sample positions and bilinear weights per roi and axis from the run-time rois, indices clipped the
  same way, a take of each roi's image (the batch index is clamped) and gather_elements (sampling_ratio 0, a
  sample count per roi, needs constant rois).

The numerics follow onnx's reference implementations (onnx/reference/ops/op_grid_sample.py, op_deform_conv.py, op_roi_align.py),
which generated the conformance cases.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, const

from ..builders import binary, fold, reshape, shape_of
from ..registry import converter
from ..values import ConversionError
from .signal import MAX_MATRIX_ELEMENTS, expect_float32


# ---- GridSample ----

CUBIC_A = -0.75  # Keys' cubic convolution coefficient, as PyTorch and the reference use


class _Grid:
    """float32 arithmetic on [N, Q] coordinate tensors (one per spatial dim of the data)."""

    @staticmethod
    def f(value: float) -> Constant:
        return const(float(value), "float32")

    @staticmethod
    def op(name: str, a: Expr, b) -> Expr:
        return fold(name, a, b if isinstance(b, Expr) else _Grid.f(b))  # fold: comparisons of constants are bool

    @staticmethod
    def where(cond: Expr, a, b) -> Expr:
        a = a if isinstance(a, Expr) else _Grid.f(a)
        b = b if isinstance(b, Expr) else _Grid.f(b)
        return fold("where", cond, a, b)


def _reflect(x: Expr, lo: float, hi: float) -> Expr:
    """x mirrored at lo and hi until it lies in [lo, hi] (the reference's _gs_reflect)."""
    g = _Grid
    if hi == lo:
        return g.op("multiply", x, 0.0)  # one position (align_corners): every coordinate reflects onto it
    below, above = g.op("less", x, lo), g.op("greater", x, hi)
    dx = g.where(below, g.op("subtract", g.f(lo), x), g.op("subtract", x, hi))
    n = fold("floor", g.op("divide", dx, hi - lo))
    r = g.op("subtract", dx, g.op("multiply", n, hi - lo))
    odd = g.op("equal", g.op("subtract", n, g.op("multiply", fold("floor", g.op("multiply", n, 0.5)), 2.0)), 1.0)
    from_lo = fold("logical_xor", below, odd)
    mirrored = g.where(from_lo, g.op("add", r, lo), g.op("subtract", g.f(hi), r))
    return g.where(fold("logical_or", below, above), mirrored, x)


def _safe_index(i: Expr, extent: int) -> Expr:
    """A float index -> int64 in [0, extent): NaN -> 0, then clipped (inf too) before the cast, so that the cast
    is always defined and the read always in bounds."""
    finite = _Grid.where(fold("isnan", i), 0.0, i)
    return fold("cast", fold("clip", finite, a_min=0.0, a_max=float(extent - 1)), dtype="int64")


def _tap(i: Expr, extent: int, padding_mode: str, lo: float, hi: float):
    """(validity or None, int64 index) of the integer-valued float tap i under the padding mode."""
    g = _Grid
    if padding_mode == "zeros":
        return fold("logical_and", g.op("greater_equal", i, 0.0), g.op("less", i, float(extent))), \
            _safe_index(i, extent)
    if padding_mode == "border":
        return None, _safe_index(i, extent)
    return None, _safe_index(fold("floor", _reflect(i, lo, hi)), extent)  # reflection (floor = int() here)


def _cubic_coeffs(t: Expr) -> list[Expr]:
    g, a = _Grid, CUBIC_A

    def outer(s):  # ((a s - 5a) s + 8a) s - 4a for s in [1, 2]
        return g.op("subtract", g.op("multiply", g.op("add", g.op("multiply", g.op("subtract", g.op(
            "multiply", s, a), 5 * a), s), 8 * a), s), 4 * a)

    def inner(s):  # ((a + 2) s - (a + 3)) s s + 1 for s in [0, 1]
        return g.op("add", g.op("multiply", g.op("multiply", g.op("subtract", g.op("multiply", s, a + 2), a + 3),
                                                 s), s), 1.0)
    one_minus = g.op("subtract", g.f(1.0), t)
    return [outer(g.op("add", t, 1.0)), inner(t), inner(one_minus), outer(g.op("subtract", g.f(2.0), t))]


def _grid_sample(x, grid, mode, padding_mode, align_corners, max_dims, pixels: bool = False):
    """GridSample of x at grid, normalized coordinates in [-1, 1] (pixels: coordinates in pixels, DeformConv's)."""
    expect_float32(x, "X")
    expect_float32(grid, "grid")
    xs, gs = shape_of(x), shape_of(grid)
    r = len(xs) - 2
    if not 1 <= r <= max_dims:
        raise ConversionError(f"input X must have {max_dims}-D spatial dims at most (N, C, ...), got shape {xs}")
    if len(gs) != r + 2 or gs[0] != xs[0] or gs[-1] != r:
        raise ConversionError(f"grid must have shape (N={xs[0]}, ..., {r}) with {r} output dims for X {xs}, got "
                              f"{gs}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ConversionError(f"attribute padding_mode must be zeros, border or reflection, got {padding_mode!r}")
    if align_corners not in (0, 1):
        raise ConversionError(f"attribute align_corners must be 0 or 1, got {align_corners}")
    if mode == "cubic" and r != 2:
        raise ConversionError(f"cubic mode is supported for 4-D inputs (2 spatial dims) only, got {r}")
    g, (n, c), spatial, out = _Grid, xs[:2], xs[2:], gs[1:-1]
    q = math.prod(out)
    flat_grid = reshape(grid, (n, q, r))
    taps = []  # per spatial dim: list of (weight or None, validity, index)
    for k, extent in enumerate(spatial):
        lo, hi = (0.0, extent - 1.0) if align_corners else (-0.5, extent - 0.5)
        # the grid's last dim lists (x, y[, z]): x is the last spatial dim
        comp = reshape(fold("strided_slice", flat_grid, begin=(r - 1 - k,), end=(r - k,), axes=(2,)), (n, q))
        if pixels:
            pos = comp
        elif align_corners:
            pos = g.op("multiply", g.op("divide", g.op("add", comp, 1.0), 2.0), extent - 1.0)
        else:
            pos = g.op("divide", g.op("subtract", g.op("multiply", g.op("add", comp, 1.0), float(extent)), 1.0), 2.0)
        if mode == "nearest":
            pos = fold("round", pos)  # ties to even, as PyTorch
        # linear and nearest bring the coordinate inside first; cubic only its taps (PyTorch's and onnxruntime's
        # bicubic; onnx's reference clamps the coordinate too, which differs near the border)
        if padding_mode == "border" and mode != "cubic":
            outside = fold("logical_or", g.op("less", pos, lo), g.op("greater", pos, hi))
            pos = g.where(outside, fold("clip", pos, a_min=0.0, a_max=extent - 1.0), pos)
        elif padding_mode == "reflection" and mode != "cubic":
            pos = _reflect(pos, lo, hi)
        if mode == "nearest":
            trunc = g.where(g.op("less", pos, 0.0), fold("ceil", pos), fold("floor", pos))
            taps.append([(None,) + _tap(trunc, extent, padding_mode, lo, hi)])
            continue
        base = fold("floor", pos)
        t = g.op("subtract", pos, base)
        if mode == "linear":
            weights, offsets = [g.op("subtract", g.f(1.0), t), t], (0, 1)
        else:
            weights, offsets = _cubic_coeffs(t), (-1, 0, 1, 2)
        taps.append([(w,) + _tap(g.op("add", base, float(o)), extent, padding_mode, lo, hi)
                     for w, o in zip(weights, offsets)])
    data = reshape(x, (n, c, math.prod(spatial)))
    strides = [math.prod(spatial[k + 1:]) for k in range(r)]

    def expand(e: Expr) -> Expr:
        return reshape(e, (n, 1, q))

    def interpolate(k: int, chosen: list) -> Expr:
        """The interpolation over dims k.. with taps `chosen` on the dims before (the reference's recursion)."""
        if k == r:
            index = None
            for (_, _, idx), stride in zip(chosen, strides):
                term = idx if stride == 1 else binary("multiply", idx, const(stride, "int64"))
                index = term if index is None else binary("add", index, term)
            index = fold("broadcast_to", expand(index), shape=(n, c, q))
            value = fold("gather_elements", data, index, axis=2)
            valid = [v for _, v, _ in chosen if v is not None]
            if valid:
                ok = valid[0]
                for v in valid[1:]:
                    ok = fold("logical_and", ok, v)
                value = fold("where", expand(ok), value, g.f(0.0))
            return value
        total = None
        for tap in taps[k]:
            inner = interpolate(k + 1, chosen + [tap])
            if tap[0] is not None:
                inner = binary("multiply", expand(tap[0]), inner)
            total = inner if total is None else binary("add", total, inner)
        return total
    return reshape(interpolate(0, []), (n, c) + tuple(out))


GRID_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
GRID_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}


def _grid_mode(mode: str, table: dict) -> str:
    if mode not in table:
        raise ConversionError(f"attribute mode must be one of {', '.join(table)} at this opset, got {mode!r}")
    return table[mode]


@converter("GridSample", since=16)
def grid_sample_v16(x, grid, *, mode="bilinear", padding_mode="zeros", align_corners=0):
    return _grid_sample(x, grid, _grid_mode(mode, GRID_MODES_16), padding_mode, align_corners, 2)


@converter("GridSample", since=20)
def grid_sample_v20(x, grid, *, mode="linear", padding_mode="zeros", align_corners=0):
    return _grid_sample(x, grid, _grid_mode(mode, GRID_MODES_20), padding_mode, align_corners, 3)


# ---- RoiAlign ----

def _roi_axis(rois: Expr, lo_col: int, extent: int, bins: int, samples: int, scale: float, half_pixel: bool):
    """Per roi and (bin, sample) along one axis: (in range, low index, high index, weight of low, weight of high),
    each [R, bins * samples], as the reference's pre_calc_for_bilinear_interpolate."""
    g, r = _Grid, shape_of(rois)[0]
    offset = 0.5 if half_pixel else 0.0

    def column(j):
        return g.op("subtract", g.op("multiply", fold("strided_slice", rois, begin=(j,), end=(j + 1,), axes=(1,)),
                                     scale), offset)  # [R, 1]
    start = column(lo_col)
    size = g.op("subtract", column(lo_col + 2), start)
    if not half_pixel:
        size = fold("maximum", size, g.f(1.0))
    bin_size = g.op("divide", size, float(bins))
    which = np.repeat(np.arange(bins, dtype=np.float32), samples).reshape(1, -1)
    within = np.tile((np.arange(samples, dtype=np.float32) + 0.5), bins).reshape(1, -1)
    pos = g.op("add", g.op("add", start, binary("multiply", Constant(which), bin_size)),
               g.op("divide", binary("multiply", Constant(within), bin_size), float(samples)))  # [R, B * S]
    inside = fold("logical_not", fold("logical_or", g.op("less", pos, -1.0), g.op("greater", pos, float(extent))))
    pos = fold("maximum", pos, g.f(0.0))
    low = fold("floor", pos)
    at_end = g.op("greater_equal", low, extent - 1.0)
    low = g.where(at_end, extent - 1.0, low)
    high = g.where(at_end, extent - 1.0, g.op("add", low, 1.0))
    pos = g.where(at_end, low, pos)
    frac = g.op("subtract", pos, low)
    assert shape_of(frac) == (r, bins * samples)
    return inside, _safe_index(low, extent), _safe_index(high, extent), g.op("subtract", g.f(1.0), frac), frac


def _roi_align(x, rois, batch_indices, *, mode, output_height, output_width, sampling_ratio, spatial_scale,
               half_pixel):
    expect_float32(x, "X")
    expect_float32(rois, "rois")
    xs, rs, bs = shape_of(x), shape_of(rois), shape_of(batch_indices)
    if len(xs) != 4 or len(rs) != 2 or rs[1] != 4 or bs != (rs[0],):
        raise ConversionError(f"X must be [N, C, H, W], rois [R, 4] and batch_indices [R], got {xs}, {rs}, {bs}")
    if batch_indices.type.dtype != "int64":
        raise ConversionError(f"batch_indices must be int64, got {batch_indices.type.dtype}")
    if mode not in ("avg", "max"):
        raise ConversionError(f"attribute mode must be avg or max, got {mode!r}")
    if output_height < 1 or output_width < 1:
        raise ConversionError(f"output_height and output_width must be >= 1, got {output_height}, {output_width}")
    if sampling_ratio < 0:
        raise ConversionError(f"sampling_ratio must be >= 0, got {sampling_ratio}")
    bins = (output_height, output_width)
    if sampling_ratio > 0:
        return _roi_align_grid(x, rois, batch_indices, mode, bins, (sampling_ratio, sampling_ratio), spatial_scale,
                               half_pixel)
    if not isinstance(rois, Constant):
        raise ConversionError("sampling_ratio 0 (an adaptive number of samples per bin, ceil(roi size / output "
                              "size)) is not supported with run-time rois: the sample count would depend on them")
    # constant rois: each roi with its own sample grid (the reference's arithmetic), the results concatenated
    parts = []
    for i, roi in enumerate(rois.data):
        size = roi.astype(np.float32) * np.float32(spatial_scale)
        extent = (size[3] - size[1], size[2] - size[0])
        if not half_pixel:
            extent = tuple(max(e, 1.0) for e in extent)
        grid = tuple(int(np.ceil(e / b)) for e, b in zip(extent, bins))
        one = Constant(rois.data[i:i + 1])
        index = fold("strided_slice", batch_indices, begin=(i,), end=(i + 1,), axes=(0,))
        if min(grid) < 1:  # an empty roi has no samples: the reference leaves 0
            parts.append(Constant(np.zeros((1, xs[1]) + bins, np.float32)))
        else:
            parts.append(_roi_align_grid(x, one, index, mode, bins, grid, spatial_scale, half_pixel))
    return parts[0] if len(parts) == 1 else fold("concatenate", *parts, axis=0)


def _roi_align_grid(x, rois, batch_indices, mode, bins, samples, spatial_scale, half_pixel):
    """RoiAlign with samples = (sy, sx) sample points per bin along each axis for every roi."""
    (n, c, h, w), r = shape_of(x), shape_of(rois)[0]
    (oh, ow), (sy, sx) = bins, samples
    q = oh * sy * ow * sx
    if r * q > MAX_MATRIX_ELEMENTS:
        raise ConversionError("RoiAlign: rois x output bins x samples is larger than supported")
    ys = _roi_axis(rois, 1, h, oh, sy, spatial_scale, half_pixel)
    xs_ = _roi_axis(rois, 0, w, ow, sx, spatial_scale, half_pixel)
    # the images of the rois, [R, C, H * W] (take clamps a batch index out of range)
    images = fold("take", reshape(x, (n, c, h * w)), batch_indices, axis=0)

    def outer(a: Expr, b: Expr, op: str) -> Expr:  # [R, Y] (op) [R, X] -> [R, 1, Y * X]
        rows, cols = shape_of(a)[1], shape_of(b)[1]
        return reshape(fold(op, reshape(a, (r, rows, 1)), reshape(b, (r, 1, cols))), (r, 1, rows * cols))

    inside = outer(ys[0], xs_[0], "logical_and")
    terms = []
    for yi, yw in ((ys[1], ys[3]), (ys[2], ys[4])):
        for xi, xw in ((xs_[1], xs_[3]), (xs_[2], xs_[4])):
            index = outer(binary("multiply", yi, const(w, "int64")), xi, "add")
            value = fold("gather_elements", images, fold("broadcast_to", index, shape=(r, c, q)), axis=2)
            weight = _Grid.where(inside, outer(yw, xw, "multiply"), 0.0)
            terms.append(binary("multiply", weight, value))
    if mode == "avg":
        total = terms[0]
        for t in terms[1:]:
            total = binary("add", total, t)
        pooled = fold("sum", reshape(total, (r, c, oh, sy, ow, sx)), axes=(3, 5), keepdims=False)
        return binary("divide", pooled, _Grid.f(float(sy * sx)))
    best = terms[0]
    for t in terms[1:]:
        best = fold("maximum", best, t)
    return fold("max", reshape(best, (r, c, oh, sy, ow, sx)), axes=(3, 5), keepdims=False)


@converter("RoiAlign", since=10)
def roi_align_v10(x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                  spatial_scale=1.0):
    return _roi_align(x, rois, batch_indices, mode=mode, output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale, half_pixel=False)


@converter("RoiAlign", since=16)
def roi_align_v16(x, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
                  output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise ConversionError(f"attribute coordinate_transformation_mode must be half_pixel or output_half_pixel, "
                              f"got {coordinate_transformation_mode!r}")
    return _roi_align(x, rois, batch_indices, mode=mode, output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale,
                      half_pixel=coordinate_transformation_mode == "half_pixel")


# ---- DeformConv ----

def _ints_or(value, default: list[int], what: str, length: int) -> list[int]:
    value = list(default if value is None else value)
    if len(value) != length:
        raise ConversionError(f"attribute {what} must have {length} values, got {value}")
    return [int(v) for v in value]


@converter("DeformConv", since=19)
def deform_conv(x, w, offset, b=None, mask=None, *, dilations=None, group=1, kernel_shape=None, offset_group=1,
                pads=None, strides=None):
    """2-D deformable convolution: output (i, j) sums, per kernel tap (a, b), the input bilinearly sampled at
    (i * stride - pad + a * dilation + offset_h, j * stride - pad + b * dilation + offset_w) (zero outside),
    times the mask and the weight, as onnx's reference (a GridSample with align_corners=1 per tap)."""
    xs, ws, os_ = shape_of(x), shape_of(w), shape_of(offset)
    if len(xs) != 4 or len(ws) != 4 or len(os_) != 4:
        raise ConversionError(f"X, W and offset must be 4-D (2 spatial dims), got {xs}, {ws}, {os_}")
    n, c, height, width = xs
    oc, cg, kh, kw = ws
    if tuple(_ints_or(kernel_shape, [kh, kw], "kernel_shape", 2)) != (kh, kw):
        raise ConversionError(f"kernel_shape {kernel_shape} does not match W {ws}")
    dh, dw = _ints_or(dilations, [1, 1], "dilations", 2)
    sh, sw = _ints_or(strides, [1, 1], "strides", 2)
    top, left, bottom, right = _ints_or(pads, [0, 0, 0, 0], "pads", 4)
    oh, ow = (height + top + bottom - (kh - 1) * dh - 1) // sh + 1, (width + left + right - (kw - 1) * dw - 1) // sw + 1
    if group < 1 or c != cg * group or oc % group or offset_group < 1 or c % offset_group:
        raise ConversionError(f"channels do not match: X {xs}, W {ws}, group {group}, offset_group {offset_group}")
    taps, positions = kh * kw, oh * ow
    if os_ != (n, offset_group * taps * 2, oh, ow):
        raise ConversionError(f"offset must have shape {(n, offset_group * taps * 2, oh, ow)}, got {os_}")
    if mask is not None and shape_of(mask) != (n, offset_group * taps, oh, ow):
        raise ConversionError(f"mask must have shape {(n, offset_group * taps, oh, ow)}, got {shape_of(mask)}")
    if b is not None and shape_of(b) != (oc,):
        raise ConversionError(f"B must have shape ({oc},), got {shape_of(b)}")
    # tap (a, b) of output (i, j) before its offset, as [1, 1, taps, positions] per axis
    rows = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(oh) * sh - top)[None, None, :, None]
    cols = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(ow) * sw - left)[None, None, None, :]
    base = [const(np.broadcast_to(v, (kh, kw, oh, ow)).reshape(1, 1, taps, positions), "float32")
            for v in (rows, cols)]
    moved = reshape(offset, (n, offset_group, taps, 2, positions))
    per_group = c // offset_group
    sampled = []
    for g in range(offset_group):
        at = [fold("add", base[axis], reshape(fold("strided_slice", moved, begin=(g, axis), end=(g + 1, axis + 1),
                                                    axes=(1, 3)), (n, 1, taps, positions))) for axis in (0, 1)]
        grid = fold("concatenate", *[reshape(a, (n, taps, positions, 1)) for a in (at[1], at[0])], axis=3)  # (x, y)
        channels = fold("strided_slice", x, begin=(g * per_group,), end=((g + 1) * per_group,), axes=(1,))
        values = _grid_sample(channels, grid, "linear", "zeros", 1, 2, pixels=True)  # [n, per_group, taps, pos]
        if mask is not None:
            weights = fold("strided_slice", mask, begin=(g * taps,), end=((g + 1) * taps,), axes=(1,))
            values = fold("multiply", values, reshape(weights, (n, 1, taps, positions)))
        sampled.append(values)
    columns = fold("concatenate", *sampled, axis=1) if len(sampled) > 1 else sampled[0]
    columns = reshape(columns, (n, group, cg * taps, positions))
    y = fold("nn.matmul", reshape(w, (group, oc // group, cg * taps)), columns)  # [n, group, oc / group, pos]
    y = reshape(y, (n, oc, oh, ow))
    return y if b is None else fold("add", y, reshape(b, (oc, 1, 1)))

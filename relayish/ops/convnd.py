"""3-D convolution and pooling: NCDHW data, OIDHW weights, a direct compute (1-D windows are 2-D ones of height 1,
done in the frontend; 2-D ones live in nn.py).

`padding` is 6 ints in ONNX's order: (front, top, left, back, bottom, right), the begins of (D, H, W) then their
ends. Output sizes and the avg-pool tap counts follow nn.py's 2-D rules axis by axis.
"""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..op import REQUIRED, OpError, Pattern, register_op, stage_tag
from ..types import TensorType
from .common import expect_float, expect_ndim, int_tuple, pad_stage, same_dtype
from .nn import _conv_out, _pool_normalize, _tap_count, _window_attrs, pool_out_size

SPATIAL = ("depth", "height", "width")


def _padded(x: np.ndarray, padding, fill) -> np.ndarray:
    begin, end = padding[:3], padding[3:]
    return np.pad(x, ((0, 0), (0, 0)) + tuple(zip(begin, end)), constant_values=fill)

# ---------------------------------------------------------------------------------------------- conv3d


def _conv3d_normalize(attrs, arg_types):
    attrs = _window_attrs("nn.conv3d", attrs, rank=3)
    attrs["groups"] = int(attrs["groups"])
    return attrs


def _conv3d_infer(arg_types, attrs):
    op = "nn.conv3d"
    x, w = arg_types
    expect_ndim(op, x, 5, "data")
    expect_ndim(op, w, 5, "weight")
    dtype = same_dtype(op, arg_types)
    expect_float(op, x, "data")
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    g = attrs.groups
    if g < 1 or c % g or o % g:
        raise OpError(f"{op}: groups={g} must divide data channels {c} and weight output channels {o}")
    if cg * g != c:
        raise OpError(f"{op}: weight has {cg} input channels per group but data has {c} channels (groups={g})")
    p = attrs.padding
    return TensorType((n, o) + tuple(_conv_out(op, SPATIAL[i], x.shape[2 + i], w.shape[2 + i], attrs.strides[i],
                                               attrs.dilation[i], p[i] + p[3 + i]) for i in range(3)), dtype)


def _conv3d_ref(x, w, strides, padding, dilation, groups):
    """Per kernel tap, one batched matmul of the grouped weights with the strided input patch."""
    n = x.shape[0]
    o, cg, kd, kh, kw = w.shape
    xp = _padded(x, padding, 0)
    out_sp = tuple((xp.shape[2 + i] - (w.shape[2 + i] - 1) * dilation[i] - 1) // strides[i] + 1 for i in range(3))
    wg = w.reshape(groups, o // groups, cg, kd, kh, kw)
    out = np.zeros((n, groups, o // groups, math.prod(out_sp)), dtype=np.float64)
    for tap in np.ndindex(kd, kh, kw):
        sl = tuple(slice(t * d, t * d + (e - 1) * s + 1, s) for t, d, e, s in zip(tap, dilation, out_sp, strides))
        patch = xp[(slice(None), slice(None)) + sl]
        out += wg[(Ellipsis,) + tap].astype(np.float64) @ patch.reshape(n, groups, cg, -1)
    return out.reshape((n, o) + out_sp).astype(x.dtype)


CONV3D_TAG = stage_tag("conv3d", buffered_padding=True)  # each padded voxel is read KD*KH*KW*O times


def _conv3d_compute(inputs, attrs, out_type):
    x, w = inputs
    o, cg, kd, kh, kw = w.shape
    (sd, sh, sw), (dd, dh, dw), p = attrs.strides, attrs.dilation, attrs.padding
    data = x
    if any(p):
        shape = x.shape[:2] + tuple(x.shape[2 + i] + p[i] + p[3 + i] for i in range(3))
        data = pad_stage(x, {2: p[0], 3: p[1], 4: p[2]}, shape, 0.0, name="pad")
    rz, ry, rx = te.reduce_axis(kd, "rz"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    rc = te.reduce_axis(cg, "rc") if cg > 1 else None
    axes = [a for a in (rc, rz, ry, rx) if a is not None]
    per_group = o // attrs.groups

    def body(n, oc, z, y, xx):
        ic = rc.var if rc is not None else 0
        channel = ic if attrs.groups == 1 else (oc // per_group) * cg + ic
        read = data[n, channel, z * sd + rz.var * dd, y * sh + ry.var * dh, xx * sw + rx.var * dw]
        return te.sum(read * w[oc, ic, rz.var, ry.var, rx.var], axes)
    return te.compute(out_type.shape, body, name="conv3d", tag=CONV3D_TAG)


def _conv3d_flops(arg_types, attrs, out_type):
    return 2.0 * out_type.size * math.prod(arg_types[1].shape[1:])


register_op("nn.conv3d", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv", infer=_conv3d_infer,
            ref=_conv3d_ref, compute=_conv3d_compute, flops=_conv3d_flops, normalize=_conv3d_normalize,
            attrs={"strides": (1, 1, 1), "padding": (0,) * 6, "dilation": (1, 1, 1), "groups": 1},
            doc="3-D convolution, NCDHW data, OIDHW weight, padding (front, top, left, back, bottom, right); "
                "grouped through groups.")

# ---------------------------------------------------------------------------------------------- pooling


def _pool3d_out_shape(x_shape, pool_size, strides, padding, dilation, ceil_mode):
    return tuple(x_shape[:2]) + tuple(
        pool_out_size(x_shape[2 + i], pool_size[i], strides[i], dilation[i], padding[i], padding[3 + i], ceil_mode)
        for i in range(3))


def _pool3d_infer(op):
    def infer(arg_types, attrs):
        x, = arg_types
        expect_ndim(op, x, 5, "data")
        if op not in ("nn.max_pool3d", "nn.max_pool3d_argmax") or x.dtype == "bool":
            expect_float(op, x, "data")
        k, d, p = attrs.pool_size, attrs.dilation, attrs.padding
        for i in range(3):
            if max(p[i], p[3 + i]) >= k[i]:  # onnxruntime's rule; it keeps every window overlapping the input
                raise OpError(f"{op}: padding {p} must be smaller than pool_size {k}")
            if x.shape[2 + i] + p[i] + p[3 + i] < (k[i] - 1) * d[i] + 1:
                raise OpError(f"{op}: padded input {SPATIAL[i]} {x.shape[2 + i] + p[i] + p[3 + i]} is smaller "
                              f"than the dilated pool {SPATIAL[i]} {(k[i] - 1) * d[i] + 1}")
        return TensorType(_pool3d_out_shape(x.shape, k, attrs.strides, p, d, attrs.ceil_mode), x.dtype)
    return infer


def _pool3d_taps(x, out_shape, pool_size, strides, dilation, padding, fill):
    """Array (N, C, OD, OH, OW, KD*KH*KW) of every window tap; positions outside the input read `fill`."""
    need = [(o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(out_shape[2:], pool_size, strides, dilation)]
    xp = np.full(x.shape[:2] + tuple(max(need[i], padding[i] + x.shape[2 + i]) for i in range(3)), fill, x.dtype)
    xp[(slice(None), slice(None)) + tuple(slice(padding[i], padding[i] + x.shape[2 + i]) for i in range(3))] = x
    taps = [xp[(slice(None), slice(None)) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in
                                                  zip(tap, dilation, out_shape[2:], strides))]
            for tap in np.ndindex(*pool_size)]
    return np.stack(taps, axis=-1)


def _lowest(dtype):
    """The fill of padded max-pool taps: -inf, or the smallest integer of an integer dtype."""
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool3d_ref(x, pool_size, strides, padding, dilation, ceil_mode):
    out_shape = _pool3d_out_shape(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    return _pool3d_taps(x, out_shape, pool_size, strides, dilation, padding, _lowest(x.dtype)).max(axis=-1)


def _avg_pool3d_ref(x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad):
    """As nn.avg_pool2d: the sum over the taps counted (inside the input, or inside input + explicit padding)."""
    out_shape = _pool3d_out_shape(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    total = _pool3d_taps(x, out_shape, pool_size, strides, dilation, padding, 0).sum(axis=-1, dtype=np.float64)
    counted = np.zeros((1, 1) + tuple(x.shape[2 + i] + padding[i] + padding[3 + i] for i in range(3)), x.dtype)
    if count_include_pad:
        counted[:] = 1
    else:
        counted[(0, 0) + tuple(slice(padding[i], padding[i] + x.shape[2 + i]) for i in range(3))] = 1
    count = _pool3d_taps(counted, out_shape, pool_size, strides, dilation, (0,) * 6, 0).sum(axis=-1)
    return (total / count).astype(x.dtype)


def _pool3d_input(x, attrs, out_type, value):
    """x padded for the windows (explicit padding plus any ceil_mode overhang), or x itself if none is needed."""
    p = attrs.padding
    need = tuple((o - 1) * s + (k - 1) * d + 1 for o, k, s, d in
                 zip(out_type.shape[2:], attrs.pool_size, attrs.strides, attrs.dilation))
    if not any(p[:3]) and all(n <= e for n, e in zip(need, x.shape[2:])):
        return x
    return pad_stage(x, {2: p[0], 3: p[1], 4: p[2]}, x.shape[:2] + need, value, name="pad")


def _window_reduce3d(data, attrs, out_type, reducer, name):
    (kd, kh, kw), (sd, sh, sw), (dd, dh, dw) = attrs.pool_size, attrs.strides, attrs.dilation
    rz, ry, rx = te.reduce_axis(kd, "rz"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    return te.compute(out_type.shape,
                      lambda n, c, z, y, x: reducer(data[n, c, z * sd + rz.var * dd, y * sh + ry.var * dh,
                                                         x * sw + rx.var * dw], [rz, ry, rx]),
                      name=name, tag="pool")


def _max_pool3d_compute(inputs, attrs, out_type):
    data = _pool3d_input(inputs[0], attrs, out_type, _lowest(inputs[0].dtype))
    return _window_reduce3d(data, attrs, out_type, te.max_reduce, "max_pool3d")


def _avg_pool3d_compute(inputs, attrs, out_type):
    x, = inputs
    total = _window_reduce3d(_pool3d_input(x, attrs, out_type, 0.0), attrs, out_type, te.sum, "avg_pool3d_sum")
    k, s, d, p = attrs.pool_size, attrs.strides, attrs.dilation, attrs.padding
    bounds = [(0, x.shape[2 + i] + p[i] + p[3 + i]) if attrs.count_include_pad else (p[i], p[i] + x.shape[2 + i])
              for i in range(3)]

    def count(*pos):
        taps = _tap_count(pos[0] * s[0], k[0], d[0], *bounds[0])
        for i in (1, 2):
            taps = taps * _tap_count(pos[i] * s[i], k[i], d[i], *bounds[i])
        return taps
    return te.compute(out_type.shape,
                      lambda n, c, z, y, xx: total[n, c, z, y, xx] / te.cast(x.dtype, count(z, y, xx)),
                      name="avg_pool3d", tag="pool")


def _pool3d_flops(arg_types, attrs, out_type):
    return float(out_type.size * math.prod(attrs.pool_size))


_POOL3D_ATTRS = {"pool_size": REQUIRED, "strides": (1, 1, 1), "padding": (0,) * 6, "dilation": (1, 1, 1),
                 "ceil_mode": False}
register_op("nn.max_pool3d", inputs=1, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="pool",
            infer=_pool3d_infer("nn.max_pool3d"), ref=_max_pool3d_ref, compute=_max_pool3d_compute,
            flops=_pool3d_flops, normalize=_pool_normalize("nn.max_pool3d", 3), attrs=_POOL3D_ATTRS,
            doc="3-D max pooling over NCDHW (ONNX MaxPool), float or integer; padded and overhanging taps are "
                "-inf (the smallest integer).")
register_op("nn.avg_pool3d", inputs=1, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="pool",
            infer=_pool3d_infer("nn.avg_pool3d"), ref=_avg_pool3d_ref, compute=_avg_pool3d_compute,
            flops=_pool3d_flops, normalize=_pool_normalize("nn.avg_pool3d", 3),
            attrs=dict(_POOL3D_ATTRS, count_include_pad=False),
            doc="3-D average pooling over NCDHW (ONNX AveragePool).")

# ---------------------------------------------------------------------------------------------- conv_transpose


def _conv_transpose_normalize(attrs, arg_types):
    op = "nn.conv_transpose"
    rank = len(arg_types[0].shape) - 2
    out = dict(attrs)
    for name, minimum in (("strides", 1), ("dilation", 1), ("pad_begin", 0), ("output_size", 1)):
        out[name] = int_tuple(op, attrs, name, rank, minimum=minimum)
    out["groups"] = int(attrs["groups"])
    return out


def _conv_transpose_infer(arg_types, attrs):
    op = "nn.conv_transpose"
    x, w = arg_types
    if len(x.shape) not in (3, 4, 5):
        raise OpError(f"{op}: data must be 3-D, 4-D or 5-D (N, C, spatial...), got shape {x.shape}")
    expect_ndim(op, w, len(x.shape), "weight")
    dtype = same_dtype(op, arg_types)
    expect_float(op, x, "data")
    n, c = x.shape[:2]
    g = attrs.groups
    if g < 1 or c % g or w.shape[0] != c:
        raise OpError(f"{op}: weight {w.shape} must have the data's {c} input channels first, and groups={g} "
                      f"must divide them")
    return TensorType((n, w.shape[1] * g) + attrs.output_size, dtype)


def _conv_transpose_ref(x, w, strides, dilation, pad_begin, output_size, groups):
    """Scatter every input position through every kernel tap into the full (unpadded) output, then take the
    window [pad_begin, pad_begin + output_size) of it; positions past the full output are 0."""
    n, c = x.shape[:2]
    cg, mg = c // groups, w.shape[1]
    in_sp, kernel = x.shape[2:], w.shape[2:]
    full_sp = tuple((i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_sp, strides, kernel, dilation))
    full = np.zeros((n, groups, mg) + full_sp, np.float64)
    xg = x.reshape((n, groups, cg, -1)).astype(np.float64)
    wg = w.reshape((groups, cg, mg) + kernel).astype(np.float64)
    for tap in np.ndindex(*kernel):
        contrib = np.einsum("ngcp,gcm->ngmp", xg, wg[(slice(None),) * 3 + tap]).reshape((n, groups, mg) + in_sp)
        sl = tuple(slice(t * d, t * d + (i - 1) * s + 1, s) for t, d, i, s in zip(tap, dilation, in_sp, strides))
        full[(slice(None),) * 3 + sl] += contrib
    out = np.zeros((n, groups, mg) + tuple(output_size), np.float64)
    src = tuple(slice(min(p, f), min(p + o, f)) for p, o, f in zip(pad_begin, output_size, full_sp))
    dst = tuple(slice(0, s.stop - s.start) for s in src)
    out[(slice(None),) * 3 + dst] = full[(slice(None),) * 3 + src]
    return out.reshape((n, groups * mg) + tuple(output_size)).astype(x.dtype)


def _conv_transpose_compute(inputs, attrs, out_type):
    """out[n, m, o...] = sum over the group's input channels and the kernel taps k of x[n, c, i...] * w[c, m', k...]
    where o + pad_begin - k * dilation = i * stride with 0 <= i < in; reads are clamped into x (selected away)."""
    x, w = inputs
    rank = len(x.shape) - 2
    cg, mg = x.shape[1] // attrs.groups, w.shape[1]
    kernel, in_sp = w.shape[2:], x.shape[2:]
    rc = te.reduce_axis(cg, "rc")
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(kernel)]

    def body(n, m, *pos):
        channel = rc.var if attrs.groups == 1 else (m // mg) * cg + rc.var
        conds, idx = [], []
        for a in range(rank):
            s = attrs.strides[a]
            t = pos[a] + attrs.pad_begin[a] - taps[a].var * attrs.dilation[a]
            conds += [t >= 0, t <= (in_sp[a] - 1) * s]
            if s > 1:
                conds.append(te.eq(t % s, 0))
            idx.append(te.min_(te.max_(t // s if s > 1 else t, 0), in_sp[a] - 1))
        wm = m % mg if attrs.groups > 1 else m
        product = x[(n, channel) + tuple(idx)] * w[(channel, wm) + tuple(tp.var for tp in taps)]
        return te.sum(te.select(te.all_of(*conds), product, te.const(0.0, x.dtype)), [rc] + taps)
    return te.compute(out_type.shape, body, name="conv_transpose", tag="conv_transpose")


def _conv_transpose_flops(arg_types, attrs, out_type):
    return 2.0 * arg_types[0].size * math.prod(arg_types[1].shape[1:])


register_op("nn.conv_transpose", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv",
            infer=_conv_transpose_infer, ref=_conv_transpose_ref, compute=_conv_transpose_compute,
            flops=_conv_transpose_flops, normalize=_conv_transpose_normalize,
            attrs={"strides": REQUIRED, "dilation": REQUIRED, "pad_begin": REQUIRED, "output_size": REQUIRED,
                   "groups": 1},
            doc="Transposed convolution of 1, 2 or 3 spatial dims (ONNX ConvTranspose), data (N, C, ...), weight "
                "(C, M/groups, k...): output positions o read input i where o + pad_begin = i*stride + k*dilation; "
                "output_size (per spatial dim) may cut the full output or extend it with zeros.")

# ---------------------------------------------------------------------------------------------- max pool indices


def _argmax_normalize(attrs, arg_types):
    attrs = _pool_normalize("nn.max_pool3d_argmax", 3)(attrs, arg_types)
    if attrs["storage_order"] not in (0, 1):
        raise OpError(f"nn.max_pool3d_argmax: storage_order must be 0 or 1, got {attrs['storage_order']}")
    return attrs


def _argmax_infer(arg_types, attrs):
    out = _pool3d_infer("nn.max_pool3d_argmax")(arg_types, attrs)
    return TensorType(out.shape, "int64")


def _argmax_ref(x, pool_size, strides, padding, dilation, ceil_mode, storage_order):
    """The flat index into x (N, C, D, H, W) of each window's first largest tap (taps in row-major order); with
    storage_order 1 the (H, W) part of the index counts column-major (h + w * H), as ONNX's MaxPool."""
    n, c, d, h, w = x.shape
    out_shape = _pool3d_out_shape(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    taps = _pool3d_taps(x, out_shape, pool_size, strides, dilation, padding, _lowest(x.dtype))
    where = np.arange(d * h * w, dtype=np.int64).reshape(1, 1, d, h, w)
    spatial = _pool3d_taps(where, out_shape, pool_size, strides, dilation, padding, -1)
    valid = spatial >= 0
    best = np.where(valid, taps, _lowest(x.dtype)).max(axis=-1, keepdims=True)
    first = np.argmax(valid & (taps == best), axis=-1)[..., None]
    s = np.take_along_axis(np.broadcast_to(spatial, taps.shape), first, axis=-1)[..., 0]
    if storage_order:
        s = (s // (h * w)) * (h * w) + (s % w) * h + (s // w) % h
    base = (np.arange(n, dtype=np.int64)[:, None] * c + np.arange(c)).reshape(n, c, 1, 1, 1) * (d * h * w)
    return base + s


def _argmax_compute(inputs, attrs, out_type):
    x, = inputs
    n_, c_, d_, h_, w_ = x.shape
    best = _max_pool3d_compute(inputs, attrs, TensorType(out_type.shape, x.dtype))
    (kd, kh, kw), s, dl, p = attrs.pool_size, attrs.strides, attrs.dilation, attrs.padding
    rz, ry, rx = te.reduce_axis(kd, "rz"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    never = te.const(2**62, "int64")

    def first(n, c, z, y, xx):
        pos = [z * s[0] + rz.var * dl[0] - p[0], y * s[1] + ry.var * dl[1] - p[1], xx * s[2] + rx.var * dl[2] - p[2]]
        conds = []
        for q, extent in zip(pos, (d_, h_, w_)):
            conds += [q >= 0, q < extent]
        clamped = [te.min_(te.max_(q, 0), e - 1) for q, e in zip(pos, (d_, h_, w_))]
        hit = te.all_of(*conds, te.eq(x[(n, c) + tuple(clamped)], best[n, c, z, y, xx]))
        flat = te.cast("int64", (clamped[0] * h_ + clamped[1]) * w_ + clamped[2])
        return te.min_reduce(te.select(hit, flat, never), [rz, ry, rx])
    spatial = te.compute(out_type.shape, first, name="max_pool_argmax_first", tag="pool")
    plane = h_ * w_

    def index(n, c, z, y, xx):
        sp = spatial[n, c, z, y, xx]
        if attrs.storage_order:
            sp = (sp // plane) * plane + (sp % w_) * h_ + (sp // w_) % h_
        return te.cast("int64", n * c_ + c) * (d_ * plane) + sp
    return te.compute(out_type.shape, index, name="max_pool_argmax", tag="pool")


register_op("nn.max_pool3d_argmax", inputs=1, pattern=Pattern.OPAQUE, op_class="pool", infer=_argmax_infer,
            ref=_argmax_ref, compute=_argmax_compute, flops=_pool3d_flops, normalize=_argmax_normalize,
            attrs=dict(_POOL3D_ATTRS, storage_order=0),
            doc="MaxPool's Indices output over NCDHW: the flat index (int64) of each window's first largest "
                "element; storage_order 1 counts (H, W) column-major.")

"""Neural-network ops: convolution, pooling, dense, matmul (softmax, log-softmax, LRN, batch norm: norm.py).

Layouts: activations NCHW, conv weights OIHW; `padding` is (top, left, bottom, right). References follow ONNX
(and onnxruntime where ONNX leaves room). Compute definitions read every tensor in bounds even under a select
(see relayish/ops/common.py).
"""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..types import TensorType, is_static_dim
from ..op import REQUIRED, OpError, Pattern, register_op, stage_tag
from .common import broadcast_shape, expect_float, expect_ndim, int_tuple, pad_stage, same_dtype
from .rows import ROW_TAG, trailing_reduce

# ---------------------------------------------------------------------------------------------- conv2d

def _window_attrs(op: str, attrs: dict, names=("strides", "dilation"), rank: int = 2) -> dict:
    """Validate/normalize the window attributes (`rank` ints each) and the padding (2 x rank ints: the begins of
    every spatial axis, then their ends) into int tuples."""
    out = dict(attrs)
    for name in names:
        out[name] = int_tuple(op, attrs, name, rank, minimum=1)
    out["padding"] = int_tuple(op, attrs, "padding", 2 * rank, minimum=0)
    return out


def _conv_normalize(attrs, arg_types):
    attrs = _window_attrs("nn.conv2d", attrs)
    attrs["groups"] = int(attrs["groups"])
    return attrs


def _conv_out(op: str, what: str, size, kernel: int, stride: int, dilation: int, pad: int):
    span = size + pad - (kernel - 1) * dilation - 1
    if not is_static_dim(span):  # a size known at run time: its window count, as an expression
        return span // stride + 1
    if span < 0:
        raise OpError(f"{op}: padded input {what} {size + pad} is smaller than the dilated kernel {what} "
                      f"{(kernel - 1) * dilation + 1}")
    return span // stride + 1


def _conv_infer(arg_types, attrs):
    op = "nn.conv2d"
    x, w = arg_types
    expect_ndim(op, x, 4, "data")
    expect_ndim(op, w, 4, "weight")
    dtype = same_dtype(op, arg_types)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = attrs.groups
    if g < 1 or c % g or o % g:
        raise OpError(f"{op}: groups={g} must divide data channels {c} and weight output channels {o}")
    if cg * g != c:
        raise OpError(f"{op}: weight has {cg} input channels per group but data has {c} channels (groups={g})")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    return TensorType((n, o, _conv_out(op, "height", h, kh, sh, dh, pt + pb),
                       _conv_out(op, "width", wd, kw, sw, dw, pl + pr)), dtype)


def _conv_ref(x, w, strides, padding, dilation, groups):
    """Per kernel tap, one batched matmul of the grouped weights with the strided input patch."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, oh * ow), dtype=x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
            out += wg[..., ky, kx] @ patch.reshape(n, groups, cg, oh * ow)
    return out.reshape(n, o, oh, ow)


CONV2D_TAG = stage_tag("conv2d", buffered_padding=True)  # each padded pixel is read KH*KW*O times


def _conv_compute(inputs, attrs, out_type):
    x, w = inputs
    _, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    data = x
    if any(attrs.padding):
        data = pad_stage(x, {2: pt, 3: pl}, (x.shape[0], c, h + pt + pb, wd + pl + pr), 0.0, name="pad")
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    rc = te.reduce_axis(cg, "rc") if cg > 1 else None  # depthwise: a single input channel per output channel
    axes = [a for a in (rc, ry, rx) if a is not None]
    per_group = o // attrs.groups

    def body(n, oc, y, xx):
        ic = rc.var if rc is not None else 0
        channel = ic if attrs.groups == 1 else (oc // per_group) * cg + ic
        read = data[n, channel, y * sh + ry.var * dh, xx * sw + rx.var * dw]
        return te.sum(read * w[oc, ic, ry.var, rx.var], axes)
    return te.compute(out_type.shape, body, name="conv2d", tag=CONV2D_TAG)


def _conv_flops(arg_types, attrs, out_type):
    _, cg, kh, kw = arg_types[1].shape
    return 2.0 * out_type.size * cg * kh * kw


register_op("nn.conv2d", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv", infer=_conv_infer,
            ref=_conv_ref, compute=_conv_compute, flops=_conv_flops, normalize=_conv_normalize,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
            doc="2-D convolution, NCHW data, OIHW weight; grouped and depthwise through groups.")

# ---------------------------------------------------------------------------------------------- pooling


def pool_out_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
                  ceil_mode: bool) -> int:
    """ONNX/onnxruntime pooling output size. In ceil mode a last window that would start past the input and its
    leading padding (in the trailing padding or beyond) is dropped."""
    span = size + pad_begin + pad_end - (kernel - 1) * dilation - 1
    if not is_static_dim(span):
        if not ceil_mode:
            return span // stride + 1
        # ceil mode: the last window starts below size + pad_end - (kernel - 1) * dilation - 1 + stride, so it is
        # never dropped (below) when stride + pad_end <= (kernel - 1) * dilation + 1 (a 3x3/2 or 2x2/2 pool)
        if stride + pad_end > (kernel - 1) * dilation + 1:
            raise OpError(f"pooling in ceil mode over a dim known only at run time ({size}) with stride {stride} "
                          f"and trailing padding {pad_end} is not supported (its last window may be dropped)")
        return (span + stride - 1) // stride + 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _pool_out_shape(x_shape, pool_size, strides, padding, dilation, ceil_mode):
    """Output shape for NCHW or blocked NCHW{c}c data (the block axis, if any, rides along at the end)."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = pool_size, strides, dilation, padding
    n, c, h, w = x_shape[:4]
    return (n, c, pool_out_size(h, kh, sh, dh, pt, pb, ceil_mode),
            pool_out_size(w, kw, sw, dw, pl, pr, ceil_mode)) + tuple(x_shape[4:])


def _layout_ndim(op, layout: str) -> int:
    """4 for NCHW, 5 for a channel-blocked NCHW{c}c layout; anything else is an error."""
    if layout == "NCHW":
        return 4
    if layout.startswith("NCHW") and layout.endswith("c") and layout[4:-1].isdigit():
        return 5
    raise OpError(f"{op}: layout must be NCHW or NCHW<block>c, got {layout!r}")


def _blocked_ref(ref):
    """A pooling reference for NCHW data made to accept NCHW{c}c data too (layout attr)."""
    def wrapped(x, layout="NCHW", **kw):
        if x.ndim == 4:
            return ref(x, **kw)
        n, cb, h, w, c = x.shape
        y = ref(np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)).reshape(n, cb * c, h, w), **kw)
        return np.ascontiguousarray(y.reshape(n, cb, c, *y.shape[2:]).transpose(0, 1, 3, 4, 2))
    return wrapped


def _pool_normalize(op, rank: int = 2):
    def normalize(attrs, arg_types):
        attrs = _window_attrs(op, attrs, rank=rank)
        attrs["pool_size"] = int_tuple(op, attrs, "pool_size", rank, minimum=1)
        attrs["ceil_mode"] = bool(attrs["ceil_mode"])
        if "count_include_pad" in attrs:
            attrs["count_include_pad"] = bool(attrs["count_include_pad"])
        return attrs
    return normalize


def _pool_infer(op):
    def infer(arg_types, attrs):
        x, = arg_types
        expect_ndim(op, x, _layout_ndim(op, attrs.layout), f"data (layout {attrs.layout})")
        if not (op == "nn.max_pool2d" and x.dtype in ("uint8", "int8")):  # (max of quantized data: exact)
            expect_float(op, x, "data")
        h, w = x.shape[2:4]
        (kh, kw), (dh, dw) = attrs.pool_size, attrs.dilation
        pt, pl, pb, pr = attrs.padding
        # onnxruntime's rule; it also keeps every window overlapping the real input
        if max(pt, pb) >= kh or max(pl, pr) >= kw:
            raise OpError(f"{op}: padding {attrs.padding} must be smaller than pool_size {attrs.pool_size}")
        for what, size, k, d, pad in (("height", h, kh, dh, pt + pb), ("width", w, kw, dw, pl + pr)):
            if is_static_dim(size) and size + pad < (k - 1) * d + 1:
                raise OpError(f"{op}: padded input {what} {size + pad} is smaller than the dilated pool {what} "
                              f"{(k - 1) * d + 1}")
        return TensorType(_pool_out_shape(x.shape, attrs.pool_size, attrs.strides, attrs.padding, attrs.dilation,
                                          attrs.ceil_mode), x.dtype)
    return infer


def _pool_geometry(out_shape, pool_size, strides, dilation):
    """Extent of the padded input that the windows read, per spatial axis: (OH-1)*s + (K-1)*d + 1."""
    return tuple((o - 1) * s + (k - 1) * d + 1
                 for o, k, s, d in zip(out_shape[2:], pool_size, strides, dilation))


def _pool_taps(x, out_shape, pool_size, strides, dilation, padding, fill):
    """Array (N, C, OH, OW, KH*KW) of every window tap; positions outside the input read `fill`."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _) = pool_size, strides, dilation, padding
    oh, ow = out_shape[2:]
    need_h, need_w = _pool_geometry(out_shape, pool_size, strides, dilation)
    h, w = x.shape[2:4]
    xp = np.full(x.shape[:2] + (max(need_h, pt + h), max(need_w, pl + w)), fill, dtype=x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    taps = [xp[:, :, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
            for ky in range(kh) for kx in range(kw)]
    return np.stack(taps, axis=-1)


def _lowest(dtype) -> float | int:
    """What a max pool's padded taps read: -inf, or an integer dtype's least value."""
    return int(np.iinfo(dtype).min) if np.dtype(dtype).kind in "iu" else -math.inf


def _max_pool_ref(x, pool_size, strides, padding, dilation, ceil_mode):
    out_shape = _pool_out_shape(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    return _pool_taps(x, out_shape, pool_size, strides, dilation, padding, _lowest(x.dtype)).max(axis=-1)


def _avg_pool_ref(x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad):
    """Sum of the taps over the count of taps inside the input (or inside input + explicit padding if
    count_include_pad); taps in the ceil_mode overhang past the explicit padding never count (onnxruntime)."""
    out_shape = _pool_out_shape(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    total = _pool_taps(x, out_shape, pool_size, strides, dilation, padding, 0).sum(axis=-1)
    h, w = x.shape[2:]
    pt, pl, pb, pr = padding
    counted = np.zeros((1, 1, h + pt + pb, w + pl + pr), dtype=x.dtype)  # 1 where a tap counts
    if count_include_pad:
        counted[:] = 1
    else:
        counted[:, :, pt:pt + h, pl:pl + w] = 1
    count = _pool_taps(counted, out_shape, pool_size, strides, dilation, (0, 0, 0, 0), 0).sum(axis=-1)
    return (total / count).astype(x.dtype)


def _tap_count(start, kernel: int, dilation: int, lo: int, hi: int):
    """How many taps start + k*dilation (0 <= k < kernel) land in [lo, hi); works on ints and te expressions.
    k ranges over [ceil((lo-start)/d), ceil((hi-start)/d)) clipped to [0, kernel); ceil(a/d) = (a+d-1)//d."""
    first = te.max_((lo - start + (dilation - 1)) // dilation, 0)
    last = te.min_((hi - start + (dilation - 1)) // dilation, kernel)
    return last - first


def _pool_input(x, attrs, out_type, value):
    """x padded for the windows (explicit padding plus any ceil_mode overhang), or x itself if none is needed."""
    pt, pl, pb, pr = attrs.padding
    need_h, need_w = _pool_geometry(out_type.shape, attrs.pool_size, attrs.strides, attrs.dilation)
    if not (is_static_dim(x.shape[2]) and is_static_dim(x.shape[3])):  # sizes known at run time (floor mode:
        if not any(attrs.padding) and not attrs.ceil_mode:             # unpadded windows stay inside)
            return x
    elif pt == 0 and pl == 0 and need_h <= x.shape[2] and need_w <= x.shape[3]:
        return x
    return pad_stage(x, {2: pt, 3: pl}, x.shape[:2] + (need_h, need_w) + x.shape[4:], value, name="pad")


def _window_reduce(data, attrs, out_type, reducer, name, tag):
    (kh, kw), (sh, sw), (dh, dw) = attrs.pool_size, attrs.strides, attrs.dilation
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    return te.compute(out_type.shape,
                      lambda n, c, y, x, *blk: reducer(data[(n, c, y * sh + ry.var * dh, x * sw + rx.var * dw)
                                                              + blk], [ry, rx]),
                      name=name, tag=tag)


def _max_pool_compute(inputs, attrs, out_type):
    data = _pool_input(inputs[0], attrs, out_type, _lowest(inputs[0].dtype))
    return _window_reduce(data, attrs, out_type, te.max_reduce, "max_pool2d", "pool")


def _avg_pool_compute(inputs, attrs, out_type):
    x, = inputs
    data = _pool_input(x, attrs, out_type, 0.0)
    total = _window_reduce(data, attrs, out_type, te.sum, "avg_pool2d_sum", "pool")
    (kh, kw), (sh, sw), (dh, dw) = attrs.pool_size, attrs.strides, attrs.dilation
    pt, pl, pb, pr = attrs.padding
    h, w = x.shape[2:4]
    # counted region in padded coordinates
    (lo_h, hi_h), (lo_w, hi_w) = ((0, h + pt + pb), (0, w + pl + pr)) if attrs.count_include_pad else \
        ((pt, pt + h), (pl, pl + w))

    def count(y, xx):
        return _tap_count(y * sh, kh, dh, lo_h, hi_h) * _tap_count(xx * sw, kw, dw, lo_w, hi_w)

    oh, ow = out_type.shape[2:4]
    same = None  # the count of every window, when they all count the same (the common case): a constant reciprocal
    if not (is_static_dim(oh) and is_static_dim(ow)):  # sizes known at run time: every window whole, or counted
        if not attrs.ceil_mode and (not any(attrs.padding) or attrs.count_include_pad):
            same = kh * kw
    else:
        rows = {_tap_count(y * sh, kh, dh, lo_h, hi_h).value for y in range(oh)}
        cols = {_tap_count(xx * sw, kw, dw, lo_w, hi_w).value for xx in range(ow)}
        if len(rows) == len(cols) == 1:
            same = rows.pop() * cols.pop()
    if same is not None:
        inv = 1.0 / same
        return te.compute(out_type.shape, lambda n, c, y, xx, *b: total[(n, c, y, xx) + b] * inv,
                          name="avg_pool2d", tag="pool")
    return te.compute(out_type.shape,
                      lambda n, c, y, xx, *b: total[(n, c, y, xx) + b] / te.cast(x.dtype, count(y, xx)),
                      name="avg_pool2d", tag="pool")


def _pool_flops(arg_types, attrs, out_type):
    kh, kw = attrs.pool_size
    return float(out_type.size * kh * kw)


_POOL_ATTRS = {"pool_size": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
               "ceil_mode": False, "layout": "NCHW"}
register_op("nn.max_pool2d", inputs=1, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="pool",
            infer=_pool_infer("nn.max_pool2d"), ref=_blocked_ref(_max_pool_ref), compute=_max_pool_compute,
            flops=_pool_flops, normalize=_pool_normalize("nn.max_pool2d"), attrs=_POOL_ATTRS, blocked_layout=True,
            doc="2-D max pooling (ONNX MaxPool) of floats or 8-bit integers; padded and overhanging taps are -inf (the "
                "integer's least value).")
register_op("nn.avg_pool2d", inputs=1, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="pool",
            infer=_pool_infer("nn.avg_pool2d"), ref=_blocked_ref(_avg_pool_ref), compute=_avg_pool_compute,
            flops=_pool_flops, normalize=_pool_normalize("nn.avg_pool2d"),
            attrs=dict(_POOL_ATTRS, count_include_pad=False), blocked_layout=True,
            doc="2-D average pooling (ONNX AveragePool).")


def _global_pool_infer(arg_types, attrs):
    x, = arg_types
    op = "nn.global_avg_pool2d"
    expect_ndim(op, x, _layout_ndim(op, attrs.layout), f"data (layout {attrs.layout})")
    expect_float(op, x, "data")
    return TensorType(x.shape[:2] + (1, 1) + x.shape[4:], x.dtype)


def _global_pool_compute(inputs, attrs, out_type):
    x, = inputs
    h, w = x.shape[2:4]
    rows = trailing_reduce(x, 2, "sum", "global_avg_pool2d_rows") if x.ndim == 4 else None
    if rows is not None:  # NCHW: each channel's H*W values are one contiguous row, summed in vector partials
        return te.compute(out_type.shape, lambda n, c, y, xx: rows[n, c] * te.const(1.0 / (h * w), x.dtype),
                          name="global_avg_pool2d", tag=ROW_TAG)
    rh, rw = te.reduce_axis(h, "rh"), te.reduce_axis(w, "rw")
    if not (is_static_dim(h) and is_static_dim(w)):  # sizes known at run time: the count is too
        # each row summed on its own, then the rows: rounding grows with H + W, not H * W (one running sum of a
        # 480 x 480 map in float32 is off by ~3e-5; the schedules made for a typical size keep such sums serial)
        row_sums = te.compute(x.shape[:3] + x.shape[4:],
                              lambda n, c, y, *b: te.sum(x[(n, c, y, rw.var) + b], [rw]),
                              name="global_avg_pool2d_rows", tag="pool")
        total = te.compute(out_type.shape, lambda n, c, y, xx, *b: te.sum(row_sums[(n, c, rh.var) + b], [rh]),
                           name="global_avg_pool2d_sum", tag="pool")
        count = te.cast(x.dtype, h * w)
        return te.compute(out_type.shape, lambda n, c, y, xx, *b: total[(n, c, y, xx) + b] / count,
                          name="global_avg_pool2d", tag="pool")
    total = te.compute(out_type.shape,
                       lambda n, c, y, xx, *b: te.sum(x[(n, c, rh.var, rw.var) + b], [rh, rw]),
                       name="global_avg_pool2d_sum", tag="pool")
    inv = 1.0 / (h * w)
    return te.compute(out_type.shape, lambda n, c, y, xx, *b: total[(n, c, y, xx) + b] * inv,
                      name="global_avg_pool2d", tag="pool")


register_op("nn.global_avg_pool2d", inputs=1, pattern=Pattern.COMM_REDUCE, op_class="pool",
            infer=_global_pool_infer,
            ref=lambda x, layout="NCHW": x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(x.dtype),
            attrs={"layout": "NCHW"}, blocked_layout=True,
            compute=_global_pool_compute, flops=lambda arg_types, attrs, out: float(arg_types[0].size),
            doc="Mean over H and W, keeping them as extent-1 dims (ONNX GlobalAveragePool).")

# ---------------------------------------------------------------------------------------------- dense, matmul


def _dense_infer(arg_types, attrs):
    op = "nn.dense"
    x, w = arg_types
    expect_ndim(op, x, 2, "data")
    expect_ndim(op, w, 2, "weight")
    if x.shape[1] != w.shape[1]:
        raise OpError(f"{op}: data has {x.shape[1]} features (shape {x.shape}) but weight expects {w.shape[1]} "
                      f"(shape {w.shape}, [units, features])")
    return TensorType((x.shape[0], w.shape[0]), same_dtype(op, arg_types))


def _dense_compute(inputs, attrs, out_type):
    x, w = inputs
    k = te.reduce_axis(x.shape[1], "k")
    return te.compute(out_type.shape, lambda i, j: te.sum(x[i, k.var] * w[j, k.var], k), name="dense",
                      tag="dense")


register_op("nn.dense", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="dense",
            infer=_dense_infer, ref=lambda x, w: x @ w.T, compute=_dense_compute,
            flops=lambda arg_types, attrs, out: 2.0 * out.size * arg_types[0].shape[1],
            doc="y = x @ w.T with x [M, K] and w [N, K].")


def _matmul_dims(a: TensorType, b: TensorType):
    """numpy matmul shapes: (batch shape, M or None if a is 1-D, K, N or None if b is 1-D); raises OpError."""
    op = "nn.matmul"
    if a.ndim == 0 or b.ndim == 0:
        raise OpError(f"{op}: operands must be at least 1-D, got shapes {a.shape} and {b.shape}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise OpError(f"{op}: a has {ka} columns (shape {a.shape}) but b has {kb} rows (shape {b.shape})")
    batch = broadcast_shape(op, a.shape[:-2], b.shape[:-2])
    return batch, (a.shape[-2] if a.ndim > 1 else None), ka, (b.shape[-1] if b.ndim > 1 else None)


def _matmul_infer(arg_types, attrs):
    batch, m, _, n = _matmul_dims(*arg_types)
    dtype = same_dtype("nn.matmul", arg_types)
    return TensorType(batch + tuple(d for d in (m, n) if d is not None), dtype)


def _matmul_compute(inputs, attrs, out_type):
    a, b = inputs
    batch, m, kdim, n = _matmul_dims(TensorType(a.shape, a.dtype), TensorType(b.shape, b.dtype))
    k = te.reduce_axis(kdim, "k")
    nb = len(batch)

    def batch_index(t: te.Tensor, i):
        """t's batch dims, right-aligned with the output's and broadcast (extent 1 -> index 0)."""
        dims = t.shape[:-2]
        return tuple(0 if extent == 1 else i[nb - len(dims) + d] for d, extent in enumerate(dims))

    def body(*i):
        mi = i[nb] if m is not None else None
        ni = i[-1] if n is not None else None
        a_idx = (k.var,) if m is None else batch_index(a, i) + (mi, k.var)
        b_idx = (k.var,) if n is None else batch_index(b, i) + (k.var, ni)
        return te.sum(a[a_idx] * b[b_idx], k)
    return te.compute(out_type.shape, body, name="matmul", tag="matmul")


register_op("nn.matmul", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="dense",
            infer=_matmul_infer, ref=np.matmul, compute=_matmul_compute,
            flops=lambda arg_types, attrs, out: 2.0 * out.size * _matmul_dims(*arg_types)[2],
            doc="numpy matmul: 1-D operands promoted then squeezed, batch dims broadcast.")

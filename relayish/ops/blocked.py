"""Channel-blocked ops of the mobile networks: nn.depthwise_conv2d_nchwc and nn.channel_shuffle.

Both work on activations in a channel-blocked layout NCHW{b}c, shape (N, C/b, H, W, b), so that the b lanes of a
vector are b channels and a network of depthwise, grouped and dense convolutions stays blocked throughout
(compiler/passes/layout.py puts them there).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType
from ..op import REQUIRED, OpError, Pattern, register_op, stage_tag
from .common import expect_ndim, pad_stage
from .layout import _conv_out
from .nn import _blocked_ref, _layout_ndim

# ---------------------------------------------------------------------------------------------- depthwise


def _dw_infer(arg_types, attrs):
    op = "nn.depthwise_conv2d_nchwc"
    x, w = arg_types
    expect_ndim(op, x, 5, "data")
    expect_ndim(op, w, 5, "weight")
    n, cb, h, wd, b = x.shape
    wcb, one, kh, kw, wb = w.shape
    if (wcb, one, wb) != (cb, 1, b):
        raise OpError(f"{op}: weight {w.shape} is not [C/b, 1, KH, KW, b] for data {x.shape}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    oh, ow = _conv_out(h, kh, sh, dh, pt, pb), _conv_out(wd, kw, sw, dw, pl, pr)
    if oh <= 0 or ow <= 0:
        raise OpError(f"{op}: empty output ({oh}x{ow}) for input {x.shape} and a {kh}x{kw} kernel")
    return TensorType((n, cb, oh, ow, b), x.dtype)


def _dw_ref(x, w, strides, padding, dilation):
    n, cb, h, wd, b = x.shape
    kh, kw = w.shape[2:4]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = _conv_out(h, kh, sh, dh, pt, pb), _conv_out(wd, kw, sw, dw, pl, pr)
    out = np.zeros((n, cb, oh, ow, b))
    for r in range(kh):
        for s in range(kw):
            patch = xp[:, :, r * dh: r * dh + sh * (oh - 1) + 1: sh, s * dw: s * dw + sw * (ow - 1) + 1: sw, :]
            out += patch * w[:, 0, r, s][None, :, None, None, :]
    return out.astype(x.dtype)


# A strided depthwise window reads its padding inline (a select per vector, its condition uniform across the
# lanes): each padded pixel is read only KH*KW / stride^2 times, and a padded copy of its large input costs more
# memory traffic than it saves (MobileNetV2's stride-2 112x112x96 depthwise: 270 -> 101 us, Xeon, 2026-11-25; 30 ->
# 23 GFLOP/s, Zen 3). A stride-1 window reads each pixel KH*KW times from a padded copy, with no select in its
# inner loop: MobileNetV2's 3x3 144-channel 56x56 depthwise went 13 -> 40 GFLOP/s, the 960-channel 7x7 one
# 35 -> 43 (Zen 3, 2026-11-27, python -m bench.op_table --only depthwise).
DEPTHWISE_TAG = stage_tag("depthwise_conv2d_nchwc", buffered_padding=True)
DEPTHWISE_STRIDED_TAG = stage_tag("depthwise_conv2d_nchwc_strided", buffered_padding=False)


def _dw_compute(inputs, attrs, out_type):
    """Per lane (channel) a multiply-reduce over the window: no reduction over channels."""
    x, w = inputs
    n, cb, h, wd, b = x.shape
    kh, kw = w.shape[2:4]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    data = x
    if any(attrs.padding):
        data = pad_stage(x, {2: pt, 3: pl}, (n, cb, h + pt + pb, wd + pl + pr, b), 0.0)
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    return te.compute(
        out_type.shape,
        lambda a, c, y, xx, i: te.sum(data[a, c, y * sh + ry * dh, xx * sw + rx * dw, i] * w[c, 0, ry, rx, i],
                                      (ry, rx)),
        name="depthwise_conv2d_nchwc", tag=DEPTHWISE_TAG if (sh, sw) == (1, 1) else DEPTHWISE_STRIDED_TAG)


def _dw_flops(arg_types, attrs, out_type):
    kh, kw = arg_types[1].shape[2:4]
    return 2.0 * out_type.size * kh * kw


register_op("nn.depthwise_conv2d_nchwc", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv",
            infer=_dw_infer, ref=_dw_ref, compute=_dw_compute, flops=_dw_flops,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1)},
            doc="depthwise conv2d (groups = channels) in a blocked layout: x [N, C/b, H, W, b], w [C/b, 1, KH, KW, b]"
                " (OIHW{b}o of the OIHW weight); each lane is one channel")

# ---------------------------------------------------------------------------------------------- channel shuffle


def _shuffle_infer(arg_types, attrs):
    op = "nn.channel_shuffle"
    x, = arg_types
    expect_ndim(op, x, _layout_ndim(op, attrs.layout), f"data (layout {attrs.layout})")
    channels = x.shape[1] * (x.shape[4] if x.ndim == 5 else 1)
    if attrs.groups < 1 or channels % attrs.groups:
        raise OpError(f"{op}: groups={attrs.groups} must divide the {channels} channels of {x.shape}")
    return x


def _shuffle_source(j, channels: int, groups: int):
    """The input channel that output channel j reads: j = c * groups + k reads channel k * (C/groups) + c."""
    return (j % groups) * (channels // groups) + j // groups


def _shuffle_ref(x, groups):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(x.shape))


def _shuffle_compute(inputs, attrs, out_type):
    x, = inputs
    if x.ndim == 4:
        channels = x.shape[1]
        return te.compute(out_type.shape,
                          lambda n, j, y, xx: x[n, _shuffle_source(j, channels, attrs.groups), y, xx],
                          name="channel_shuffle", tag="injective")
    b = x.shape[4]
    channels = x.shape[1] * b

    def body(n, cb, y, xx, i):
        src = _shuffle_source(cb * b + i, channels, attrs.groups)
        return x[n, src // b, y, xx, src % b]
    return te.compute(out_type.shape, body, name="channel_shuffle", tag="injective")


register_op("nn.channel_shuffle", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_shuffle_infer,
            ref=_blocked_ref(_shuffle_ref), compute=_shuffle_compute, attrs={"groups": REQUIRED, "layout": "NCHW"},
            blocked_layout=True, flops=lambda arg_types, attrs, out: float(out.size),
            doc="ShuffleNet's channel shuffle (Reshape [N, g, C/g, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape): "
                "output channel c * g + k is input channel k * C/g + c; NCHW or NCHW{b}c")

# ---------------------------------------------------------------------------------------------- concatenate


def _channels(shape) -> int:
    return shape[1] * shape[4]


def _concat_blocked_infer(arg_types, attrs):
    op = "nn.concat_blocked"
    if not arg_types:
        raise OpError(f"{op}: needs at least one input")
    for k, t in enumerate(arg_types):
        expect_ndim(op, t, 5, f"input {k}")
        if (t.shape[0],) + t.shape[2:4] != (arg_types[0].shape[0],) + arg_types[0].shape[2:4]:
            raise OpError(f"{op}: input {k} {t.shape} and input 0 {arg_types[0].shape} differ in N, H or W")
    total = sum(_channels(t.shape) for t in arg_types)
    if attrs.block < 1 or total % attrs.block:
        raise OpError(f"{op}: block {attrs.block} does not divide the {total} concatenated channels")
    n, _, h, w, _ = arg_types[0].shape
    return TensorType((n, total // attrs.block, h, w, attrs.block), arg_types[0].dtype)


def _concat_blocked_ref(*xs, block):
    nchw = [x.transpose(0, 1, 4, 2, 3).reshape(x.shape[0], -1, *x.shape[2:4]) for x in xs]
    y = np.concatenate(nchw, axis=1)
    n, c, h, w = y.shape
    return np.ascontiguousarray(y.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def _concat_blocked_compute(inputs, attrs, out_type):
    """Nested selects on the output channel; input k is read at its own block and lane of that channel. Where the
    blocks line up (same block, offsets multiples of it) the selects depend on the block index only."""
    b = attrs.block
    offsets = np.cumsum([0] + [_channels(t.shape) for t in inputs]).tolist()

    def read(k, n, cb, y, xx, i):
        t = inputs[k]
        tb = t.shape[4]
        if tb == b and offsets[k] % b == 0:  # aligned: whole blocks, lane i is lane i
            block = te.min_(te.max_(cb - offsets[k] // b, 0), t.shape[1] - 1)
            return t[n, block, y, xx, i]
        j = te.min_(te.max_(cb * b + i - offsets[k], 0), _channels(t.shape) - 1)
        return t[n, j // tb, y, xx, j % tb]

    def body(n, cb, y, xx, i):
        value = read(len(inputs) - 1, n, cb, y, xx, i)
        for k in range(len(inputs) - 2, -1, -1):
            bound = offsets[k + 1]
            cond = cb < bound // b if bound % b == 0 else cb * b + i < bound
            value = te.select(cond, read(k, n, cb, y, xx, i), value)
        return value
    return te.compute(out_type.shape, body, name="concat_blocked", tag="injective")


register_op("nn.concat_blocked", inputs=None, pattern=Pattern.INJECTIVE, op_class="layout",
            infer=_concat_blocked_infer, ref=_concat_blocked_ref, compute=_concat_blocked_compute,
            attrs={"block": REQUIRED}, flops=lambda arg_types, attrs, out: float(out.size),
            doc="concatenation over channels of NCHW{b_k}c inputs (any blocks, any channel counts) into NCHW{block}c")

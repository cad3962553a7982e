"""Channel-blocked ops of the mobile networks: nn.depthwise_conv2d_nchwc and nn.channel_shuffle.

Both work on activations in a channel-blocked layout NCHW{b}c, shape (N, C/b, H, W, b), so that the b lanes of a
vector are b channels and a network of depthwise, grouped and dense convolutions stays blocked throughout
(compiler/passes/layout.py puts them there).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType, is_static_dim
from ..op import REQUIRED, OpError, Pattern, register_op, stage_tag
from .common import expect_ndim, pad_stage
from .layout import _conv_out
from .channel_pad import check_map, map_array, to_logical, to_physical
from .nn import _layout_ndim

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
    if any(is_static_dim(d) and d <= 0 for d in (oh, ow)):  # (run-time sizes: checked when they run)
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
# 35 -> 43 (Zen 3, 2026-11-27, python -m relayish_tools.bench.op_table --only depthwise).
DEPTHWISE_TAG = stage_tag("depthwise_conv2d_nchwc", buffered_padding=True)
CHANNEL_GATHER_TAG = stage_tag("channel_gather", gathers_lanes=True)  # blocked shuffles and concatenations
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
    channels = check_map(op, "in_map", attrs.in_map, x.shape[1] * (x.shape[4] if x.ndim == 5 else 1))
    if attrs.groups < 1 or channels % attrs.groups:
        raise OpError(f"{op}: groups={attrs.groups} must divide the {channels} channels of {x.shape}")
    out_layout = attrs.out_layout or attrs.layout
    _layout_ndim(op, out_layout)
    if attrs.out_map and check_map(op, "out_map", attrs.out_map, attrs.out_map[0] * attrs.out_map[2]) != channels:
        raise OpError(f"{op}: out_map {tuple(attrs.out_map)} does not hold the {channels} channels")
    physical = attrs.out_map[0] * attrs.out_map[2] if attrs.out_map else channels
    if out_layout == "NCHW":
        return TensorType((x.shape[0], physical) + x.shape[2:4], x.dtype)
    block = int(out_layout[4:-1])
    if physical % block:
        raise OpError(f"{op}: out_layout {out_layout} does not divide the {physical} output channels")
    return TensorType((x.shape[0], physical // block) + x.shape[2:4] + (block,), x.dtype)


def _shuffle_source(j, channels: int, groups: int):
    """The input channel that output channel j reads: j = c * groups + k reads channel k * (C/groups) + c."""
    return (j % groups) * (channels // groups) + j // groups


def _to_nchw(x):
    return x if x.ndim == 4 else \
        np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)).reshape(x.shape[0], -1, *x.shape[2:4])


def _from_nchw(y, layout: str):
    if layout == "NCHW":
        return y
    b = int(layout[4:-1])
    n, c, h, w = y.shape
    return np.ascontiguousarray(y.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _shuffle_ref(x, groups, layout="NCHW", in_map=(), out_map=(), out_layout=""):
    y = map_array(_to_nchw(x), in_map, unpad=True)
    n, c, h, w = y.shape
    y = y.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(y.shape)
    return _from_nchw(map_array(y, out_map, unpad=False), out_layout or layout)


def _shuffle_compute(inputs, attrs, out_type):
    """Output position j holds logical channel l (out_map), which is input channel s = _shuffle_source(l), stored
    at physical position to_physical(s, in_map) in the input's block and lane."""
    x, = inputs
    bi = x.shape[4] if x.ndim == 5 else 0
    channels = check_map("nn.channel_shuffle", "in_map", attrs.in_map, x.shape[1] * (bi or 1))

    def value(n, j, y, xx):
        logical, real = to_logical(j, attrs.out_map)
        src = to_physical(_shuffle_source(logical, channels, attrs.groups), attrs.in_map)
        read = x[n, src // bi, y, xx, src % bi] if bi else x[n, src, y, xx]
        return read if real is None else te.select(real, read, te.const(0.0, x.dtype))
    if len(out_type.shape) == 4:
        return te.compute(out_type.shape, value, name="channel_shuffle", tag="injective")
    bo = out_type.shape[4]
    return te.compute(out_type.shape, lambda n, cb, y, xx, i: value(n, cb * bo + i, y, xx),
                      name="channel_shuffle", tag=CHANNEL_GATHER_TAG)


register_op("nn.channel_shuffle", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_shuffle_infer,
            ref=_shuffle_ref, compute=_shuffle_compute,
            attrs={"groups": REQUIRED, "layout": "NCHW", "in_map": (), "out_map": (), "out_layout": ""},
            blocked_layout=True, flops=lambda arg_types, attrs, out: float(out.size),
            doc="ShuffleNet's channel shuffle (Reshape [N, g, C/g, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape): "
                "output channel c * g + k is input channel k * C/g + c; NCHW or NCHW{b}c (`layout`), the output in "
                "`out_layout` (default: the same); in_map / out_map: () or (groups, channels, padded), the "
                "channels padded per group (relayish/ops/channel_pad.py)")

# ---------------------------------------------------------------------------------------------- concatenate


def _channels(shape) -> int:
    return shape[1] * shape[4]


def _input_maps(attrs, count: int) -> tuple:
    maps = tuple(attrs.in_maps) if attrs.in_maps else ((),) * count
    if len(maps) != count:
        raise OpError(f"nn.concat_blocked: in_maps has {len(maps)} entries for {count} inputs")
    return maps


def _logical_counts(arg_types, attrs) -> list[int]:
    maps = _input_maps(attrs, len(arg_types))
    return [check_map("nn.concat_blocked", f"in_maps[{k}]", m, _channels(t.shape))
            for k, (t, m) in enumerate(zip(arg_types, maps))]


def _concat_blocked_infer(arg_types, attrs):
    op = "nn.concat_blocked"
    if not arg_types:
        raise OpError(f"{op}: needs at least one input")
    for k, t in enumerate(arg_types):
        expect_ndim(op, t, 5, f"input {k}")
        if (t.shape[0],) + t.shape[2:4] != (arg_types[0].shape[0],) + arg_types[0].shape[2:4]:
            raise OpError(f"{op}: input {k} {t.shape} and input 0 {arg_types[0].shape} differ in N, H or W")
    total = sum(_logical_counts(arg_types, attrs))
    if attrs.out_map:
        groups, channels, padded = attrs.out_map
        if check_map(op, "out_map", attrs.out_map, groups * padded) != total:
            raise OpError(f"{op}: out_map {tuple(attrs.out_map)} does not hold the {total} concatenated channels")
        total = groups * padded
    if attrs.block < 1 or total % attrs.block:
        raise OpError(f"{op}: block {attrs.block} does not divide the {total} concatenated channels")
    n, _, h, w, _ = arg_types[0].shape
    return TensorType((n, total // attrs.block, h, w, attrs.block), arg_types[0].dtype)


def _concat_blocked_ref(*xs, block, in_maps=(), out_map=()):
    maps = in_maps or ((),) * len(xs)
    y = np.concatenate([map_array(_to_nchw(x), m, unpad=True) for x, m in zip(xs, maps)], axis=1)
    return _from_nchw(map_array(y, out_map, unpad=False), f"NCHW{block}c")


def _concat_blocked_compute(inputs, attrs, out_type):
    """Nested selects on the output channel; input k is read at its own block and lane of that channel. Where the
    blocks line up (same block, offsets multiples of it, no channel maps) the selects depend on the block index
    only."""
    if attrs.in_maps or attrs.out_map:
        return _mapped_concat_compute(inputs, attrs, out_type)
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
    return te.compute(out_type.shape, body, name="concat_blocked", tag=CHANNEL_GATHER_TAG)


def _whole_parts(inputs, maps, out_map, block: int) -> bool:
    """Whether input k is group k of out_map, stored as it is there: the same map (one group of c channels padded
    to p) for every input, out_map (k, c, p), and every input in blocks of `block` that divide p."""
    if not out_map or len(set(map(tuple, maps))) != 1 or not maps[0]:
        return False
    groups, channels, padded = out_map
    return tuple(maps[0]) == (1, channels, padded) and groups == len(inputs) and padded % block == 0 and \
        all(t.shape[4] == block and t.shape[1] * block == padded for t in inputs)


def _mapped_concat_compute(inputs, attrs, out_type):
    """The general case: output position -> logical channel (out_map) -> input and its logical channel -> that
    input's physical position (its map); zero at the output's padding."""
    b = attrs.block
    maps = _input_maps(attrs, len(inputs))
    if _whole_parts(inputs, maps, attrs.out_map, b):  # each input is its own group of whole blocks: copy blocks
        per = inputs[0].shape[1]

        def part_block(n, cb, y, xx, i):
            value = inputs[-1][n, te.max_(cb - (len(inputs) - 1) * per, 0), y, xx, i]
            for k in range(len(inputs) - 2, -1, -1):
                block = te.min_(te.max_(cb - k * per, 0), per - 1)
                value = te.select(cb < (k + 1) * per, inputs[k][n, block, y, xx, i], value)
            return value
        return te.compute(out_type.shape, part_block, name="concat_blocked", tag=CHANNEL_GATHER_TAG)
    counts = _logical_counts([te_type(t) for t in inputs], attrs)
    offsets = np.cumsum([0] + counts).tolist()

    def read(k, n, logical, y, xx):
        t = inputs[k]
        src = to_physical(te.min_(te.max_(logical - offsets[k], 0), counts[k] - 1), maps[k])
        return t[n, src // t.shape[4], y, xx, src % t.shape[4]]

    def body(n, cb, y, xx, i):
        logical, real = to_logical(cb * b + i, attrs.out_map)
        value = read(len(inputs) - 1, n, logical, y, xx)
        for k in range(len(inputs) - 2, -1, -1):
            value = te.select(logical < offsets[k + 1], read(k, n, logical, y, xx), value)
        return value if real is None else te.select(real, value, te.const(0.0, out_type.dtype))
    return te.compute(out_type.shape, body, name="concat_blocked", tag=CHANNEL_GATHER_TAG)


def te_type(t: te.Tensor) -> TensorType:
    return TensorType(tuple(t.shape), t.dtype)


register_op("nn.concat_blocked", inputs=None, pattern=Pattern.INJECTIVE, op_class="layout",
            infer=_concat_blocked_infer, ref=_concat_blocked_ref, compute=_concat_blocked_compute,
            attrs={"block": REQUIRED, "in_maps": (), "out_map": ()}, flops=lambda arg_types, attrs, out: float(out.size),
            doc="concatenation over channels of NCHW{b_k}c inputs (any blocks, any channel counts) into NCHW{block}c; "
                "in_maps (one per input) / out_map: () or (groups, channels, padded), channels padded per group "
                "(relayish/ops/channel_pad.py)")

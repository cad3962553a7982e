"""Layout propagation: the transforms alter_layout puts around blocked ops are pushed through layout-agnostic ops
(elementwise, broadcast against per-channel constants, pools, channel shuffles and concatenations) until they meet
their inverse and cancel, so that a network stays blocked between its convolutions.

A table of `pattern -> replacement` rows (passes/rewrite.py), one comment each; `lt(x, A->B)` is
layout_transform(x, src_layout=A, dst_layout=B). The builders of the transforms (_lt, _crop) live here too: the
layout pass (passes/layout.py) builds with them.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from relayish import Call, Constant, Expr, IRModule
from relayish.op import Pattern, get_op
from relayish.ops.layout import parse_layout

from .channel_maps import ChannelMap, channel_block, keeps_padding_finite, pad_channel_values
from .rewrite import ANY, CONST, Pat, rewrite, table_rules


def _lt(x, src, dst):
    return Call("layout_transform", (x,), {"src_layout": src, "dst_layout": dst})


def _crop(x, channels: int):
    """The first `channels` channels of an NCHW x: drops the padding of a padded convolution's output."""
    return Call("strided_slice", (x,), {"begin": (0,), "end": (channels,), "strides": (1,), "axes": (1,)})


def _pad(x, m):
    """x (NCHW) with each of m.groups channel groups padded with zeros to m.padded channels."""
    return Call("nn.pad_channels", (x,), {"groups": m.groups, "padded": m.padded})


def _unpad(x, m):
    """The inverse of _pad: the m.channels first channels of each of m.groups groups of x."""
    return Call("nn.unpad_channels", (x,), {"groups": m.groups, "channels": m.channels})


# ---------------------------------------------------------------------------------------------- matchers

class LayoutTransform(NamedTuple):
    """A matched layout_transform(value, src -> dst)."""
    value: Expr
    src: str
    dst: str


def LT(node) -> LayoutTransform | None:  # noqa: N802  (an argument matcher, see rewrite.Pat)
    """Matches any layout_transform."""
    if isinstance(node, Call) and node.op == "layout_transform":
        return LayoutTransform(node.args[0], node.attrs.src_layout, node.attrs.dst_layout)
    return None


def FROM_BLOCKED(node) -> LayoutTransform | None:  # noqa: N802
    """Matches a layout_transform from a blocked layout back to NCHW."""
    lt = LT(node)
    return lt if lt is not None and lt.dst == "NCHW" and lt.src != "NCHW" else None


class Crop(NamedTuple):
    """A matched crop(lt(value, B->NCHW), channels) (groups 1: a tail-padded convolution's output, or a value
    computed from it) or unpad(lt(value, B->NCHW), groups, channels) (a value padded per group, channel_maps.py)."""
    lt: LayoutTransform
    channels: int  # per group
    groups: int = 1
    unpad: bool = False  # an nn.unpad_channels (the layout pass's, dropping padding), not a strided_slice

    def rebuild(self, x: Expr) -> Call:
        """The same crop of another value (its blocked twin)."""
        if self.unpad:
            return Call("nn.unpad_channels", (x,), {"groups": self.groups, "channels": self.channels})
        return _crop(x, self.channels)

    @property
    def padded(self) -> int:
        """The value's physical channels per group."""
        shape = self.lt.value.type.shape
        return shape[1] * shape[-1] // self.groups


def CROPPED(node) -> Crop | None:  # noqa: N802
    """Matches strided_slice(lt(y, B->NCHW), channels 0..C) of a 4-D value (what `_crop` builds) and
    unpad_channels(lt(y, B->NCHW)) (`_unpad`)."""
    if not (isinstance(node, Call) and node.type.ndim == 4):
        return None
    if node.op == "nn.unpad_channels":
        lt = FROM_BLOCKED(node.args[0])
        return None if lt is None else Crop(lt, node.attrs.channels, node.attrs.groups, unpad=True)
    if not (node.op == "strided_slice" and tuple(node.attrs.axes) == (1,) and tuple(node.attrs.begin) == (0,)
            and tuple(node.attrs.strides) == (1,)):
        return None
    lt = FROM_BLOCKED(node.args[0])
    return None if lt is None else Crop(lt, node.type.shape[1])


def UNPADDED(node) -> Call | None:  # noqa: N802
    """Matches any nn.unpad_channels (built only by the layout pass: what it drops is padding)."""
    return node if isinstance(node, Call) and node.op == "nn.unpad_channels" else None


def CROPPED_FOR_BLOCKED(node) -> Crop | None:  # noqa: N802
    """Matches lt(crop(lt(y, B->NCHW), C), NCHW->X): a cropped value transformed again for a blocked reader."""
    lt = LT(node)
    return None if lt is None or lt.src != "NCHW" else CROPPED(lt.value)


def PACKED_WEIGHT(node) -> LayoutTransform | None:  # noqa: N802
    """Matches lt(w, OIHW->OIHW{i}i{o}o) of a constant w."""
    lt = LT(node)
    return lt if lt is not None and lt.src == "OIHW" and isinstance(lt.value, Constant) else None


def _padding_is_finite(y: Expr, channels: int) -> bool:
    """Whether the channels of y past `channels` come from padding (padded_channels) and hold finite values when
    the model's input does: y is a blocked convolution whose weights are zero past `channels` (it computes 0 plus
    nothing there), or elementwise / broadcast ops over such values and finite constants (a bias padded by
    repeating its last value, _pad_channel_constant). A crop that drops real channels (an ONNX Slice of a
    convolution's output) is not padding: its channels may hold anything, and reading them with zero weights
    would turn an Inf there into a NaN in every output."""
    known: dict[int, bool] = {}  # a residual network reaches a value along many paths

    def finite(node: Expr) -> bool:
        if id(node) not in known:
            known[id(node)] = False  # (a cycle cannot occur; this also bounds the work)
            known[id(node)] = _finite_padding_step(node, channels, finite)
        return known[id(node)]
    return finite(y)


def _finite_padding_step(node: Expr, channels: int, finite: Callable[[Expr], bool]) -> bool:
    if isinstance(node, Constant):
        return bool(np.isfinite(node.data).all())
    if not isinstance(node, Call) or not isinstance(node.op, str):
        return False
    if node.op == "nn.conv2d_nchwc":
        w = PACKED_WEIGHT(node.args[1])
        return w is not None and node.attrs.groups == 1 and not np.any(w.value.data[channels:])
    return get_op(node.op).pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and keeps_padding_finite(node) and \
        all(finite(a) for a in node.args)


def _absorb_padding(node: Call, crop: Crop, weight: LayoutTransform):
    """conv2d_nchwc(lt(crop(lt(y, B->NCHW), C), NCHW->NCHW{i}c), lt(w, OIHW->OIHW{i}i{o}o))
    -> conv2d_nchwc(y, lt(w', OIHW->OIHW{b}i{o}o)), w' = w with zero weights for y's padded channels (b: B's block):
    the convolution reads the padded value as it is, and the padding adds nothing to its sums."""
    y = crop.lt.value
    if node.attrs.groups != 1 or crop.groups != 1 or not _padding_is_finite(y, crop.channels):
        return None
    block = parse_layout(crop.lt.src)[-1][1]
    padded = y.type.shape[1] * y.type.shape[-1]
    out_block = parse_layout(weight.dst)[-1][1]
    w = weight.value.data
    w = np.pad(w, ((0, 0), (0, padded - w.shape[1]), (0, 0), (0, 0)))
    return node.replace(args=(y, _lt(Constant(w), "OIHW", f"OIHW{block}i{out_block}o")))


def _per_channel(c: Constant, ndim: int) -> np.ndarray | None:
    """A constant broadcast against an NCHW-like tensor of rank ndim, as an array of that rank with every axis but
    the channels of extent 1; None if it varies along another axis or has more dims."""
    data = c.data
    if data.ndim > ndim:
        return None
    full = data.reshape((1,) * (ndim - data.ndim) + data.shape)
    return None if any(d != 1 for i, d in enumerate(full.shape) if i != 1) else full


def _pad_channel_constant(c: Constant, crop: Crop, ndim: int) -> Constant | None:
    """A per-channel constant broadcast against a cropped NCHW tensor, extended to the channels of the value
    before the crop by repeating each group's last value (any finite value will do: the padded channels are
    cropped away; zeros could make a division give Inf there)."""
    if c.data.size == 1:
        return c
    full = _per_channel(c, ndim)
    if full is None or full.shape[1] != crop.groups * crop.channels:
        return None
    return Constant(pad_channel_values(full, 1, ChannelMap(crop.groups, crop.channels, crop.padded, 0)))


def _blocked_constant(c: Constant, blocked: str, ndim: int) -> Constant | None:
    """A constant broadcast against an NCHW tensor, re-expressed against its blocked form, if per-channel."""
    if c.data.size == 1:
        return Constant(c.data.reshape(()))
    full = _per_channel(c, ndim)
    if full is None:
        return None
    block = next(f for a, f in parse_layout(blocked) if f)
    ch = full.shape[1]
    if ch == 1:
        return Constant(full.reshape((1,) * (ndim + 1)))
    if ch % block:
        return None
    return Constant(np.ascontiguousarray(full.reshape(1, ch // block, block, *([1] * (ndim - 2)))
                                         .transpose(0, 1, *range(3, ndim + 1), 2)))


def _cancel(node: Call, inner: LayoutTransform):
    return inner.value if inner.src == node.attrs.dst_layout else _lt(inner.value, inner.src, node.attrs.dst_layout)


def _through_unary(node: Call, lt: LayoutTransform):
    return _lt(node.replace(args=(lt.value,)), lt.src, lt.dst)


def _spatial_broadcast(x: tuple, y: tuple) -> bool:
    """Shapes of one layout that agree but for spatial dims where one of them is 1 (a per-channel attention
    vector times a feature map: its blocked twins broadcast alike)."""
    return len(x) == len(y) and x[:2] == y[:2] and x[4:] == y[4:] and \
        all(p == q or 1 in (p, q) for p, q in zip(x[2:4], y[2:4]))


def _through_binary(node: Call, la: LayoutTransform, lb: LayoutTransform):
    a, b = node.args
    if la.src != lb.src or a.type.dtype != b.type.dtype or not _spatial_broadcast(a.type.shape, b.type.shape):
        return None
    return _lt(node.replace(args=(la.value, lb.value)), la.src, la.dst)


def _through_binary_constant(node: Call, lt: LayoutTransform, c: Constant, const_first: bool):
    """op(lt(a), c) or op(c, lt(a)) -> lt(op(a, c')), if c is per channel and does not widen the result."""
    if node.type.shape != node.args[1 if const_first else 0].type.shape:
        return None
    blocked = _blocked_constant(c, lt.src, 4)
    if blocked is None:
        return None
    args = (blocked, lt.value) if const_first else (lt.value, blocked)
    return _lt(node.replace(args=args), lt.src, lt.dst)


def PER_CHANNEL(node) -> Call | None:  # noqa: N802
    """Matches a run-time value of one element (a dynamically quantized tensor's scale) or a per-channel value
    computed at run time from constants and 0-d values by elementwise and broadcast ops (an integer convolution's
    x_zero_point * sum of each channel's weights: its zero point is known at run time only)."""
    if isinstance(node, Constant) or node.type.ndim > 4:
        return None
    if node.type.size == 1:  # one value (a run-time scale or zero point): any layout
        return node
    return node if isinstance(node, Call) and _blocked_value(node, "NCHW16c", probe=True) is not None else None


def _blocked_value(v: Expr, blocked: str, probe: bool = False, depth: int = 4) -> Expr | None:
    """PER_CHANNEL's value re-expressed against the blocked layout (each constant leaf blocked, 0-d leaves as they
    are), or None if it is not such a value. probe: only check (any block)."""
    if isinstance(v, Constant):
        if probe:
            return v if v.data.size == 1 or _per_channel(v, 4) is not None else None
        return _blocked_constant(v, blocked, 4)
    if v.type.ndim == 0:
        return v
    if depth == 0 or not isinstance(v, Call) or not isinstance(v.op, str) or \
            get_op(v.op).pattern not in (Pattern.ELEMWISE, Pattern.BROADCAST):
        return None
    args = [_blocked_value(a, blocked, probe, depth - 1) for a in v.args]
    if any(a is None for a in args):
        return None
    return v if probe else Call(v.op, tuple(args), v.attrs)


def _through_binary_per_channel(node: Call, lt: LayoutTransform, v: Call, value_first: bool):
    """op(lt(a), v) -> lt(op(a, v')), v a run-time per-channel value (PER_CHANNEL) rebuilt against the blocked
    layout, if it does not widen the result."""
    if node.type.shape != node.args[1 if value_first else 0].type.shape or v.type.size > 1 and (
            v.type.ndim < 3 or v.type.shape[-2:] != (1, 1) or v.type.shape[-3] != node.type.shape[1]):
        return None
    blocked = (v if v.type.ndim == 0 else Call("reshape", (v,), {"newshape": ()})) if v.type.size == 1 else \
        _blocked_value(v, lt.src)
    if blocked is None:
        return None
    args = (blocked, lt.value) if value_first else (lt.value, blocked)
    return _lt(node.replace(args=args), lt.src, lt.dst)


def _where_through(node: Call):
    """where(c, a, b) with every argument lt(., B->NCHW) of the result's shape or one value (a constant or a run-time
    scalar) -> lt(where(c', a', b'), B->NCHW) (QuantizeLinear's NaN guard: where(q == q, q, lo))."""
    layout, args = None, []
    for a in node.args:
        lt = FROM_BLOCKED(a)
        if lt is not None and a.type.shape == node.type.shape and layout in (None, lt.src):
            layout = lt.src
            args.append(lt.value)
        elif a.type.size == 1 and a.type.ndim <= 4:
            args.append(a if a.type.ndim == 0 else Call("reshape", (a,), {"newshape": ()}))
        else:
            return None
    return None if layout is None else _lt(node.replace(args=tuple(args)), layout, "NCHW")


FULL_REDUCTIONS = ("max", "min", "sum")  # order-free over a whole tensor: any layout gives the same value


def _reduce_whole(node: Call, lt: LayoutTransform):
    """r(lt(y, B->NCHW)) over every axis, without keepdims -> r(y) over every axis (a dynamically quantized
    tensor's range: max and min of the whole tensor)."""
    ndim = node.args[0].type.ndim
    axes = node.attrs.axes
    if node.attrs.keepdims or (axes is not None and sorted(a % ndim for a in axes) != list(range(ndim))):
        return None
    return node.replace(args=(lt.value,), attrs=dict(node.attrs.as_dict(), axes=tuple(range(lt.value.type.ndim))))


def _pool_blocked(node: Call, lt: LayoutTransform):
    if node.attrs.layout != "NCHW":
        return None
    return _lt(Call(node.op, (lt.value,), dict(node.attrs.as_dict(), layout=lt.src)), lt.src, "NCHW")


def _resize_blocked(node: Call, lt):
    """A Resize of the spatial axes only (N and C kept, no roi) runs on the blocked value as it is: its 5-D form
    keeps the lanes too. An FPN's upsampling then keeps the network blocked (PP-OCRv6's detector ran its four
    upsamplings, adds and concatenation in NCHW, one 8.9 ms kernel reading every lane through a select)."""
    x = node.args[0].type.shape
    a = node.attrs
    if node.type.ndim != 4 or tuple(a.sizes[:2]) != tuple(x[:2]) or any(sc != 1.0 for sc in a.scales[:2]) or \
            a.roi or a.coordinate_transformation_mode == "tf_crop_and_resize" or a.antialias:
        return None
    block = lt.value.type.shape[-1]
    attrs = dict(a.as_dict(), sizes=tuple(lt.value.type.shape[:2]) + tuple(a.sizes[2:]) + (block,),
                 scales=tuple(a.scales) + (1.0,))
    return _lt(Call("resize", (lt.value,), attrs), lt.src, "NCHW")


def _crop_through_resize(node: Call, crop):
    resized = _resize_blocked(node, crop.lt)
    return None if resized is None else crop.rebuild(resized)


def _concat_blocked(node: Call, vector_width: int):
    """concatenate over the channels of values that all come from a blocked layout (any blocks, cropped or
    padded per group: in_maps), into the block that convolutions reading the result choose (channel_block)."""
    if node.attrs.axis % 4 != 1 or node.type.ndim != 4:
        return None
    values, maps = [], []
    for a in node.args:
        lt, crop = FROM_BLOCKED(a), CROPPED(a)
        if lt is None and crop is None:
            return None
        values.append(lt.value if lt is not None else crop.lt.value)
        maps.append(() if lt is not None else (crop.groups, crop.channels, crop.padded))
    block = channel_block(node.type.shape[1], vector_width)
    attrs = {"block": block, "in_maps": tuple(maps)} if any(maps) else {"block": block}
    return _lt(Call("nn.concat_blocked", tuple(values), attrs), f"NCHW{block}c", "NCHW")


def _keeps_finite(node: Call, crop: Crop) -> bool:
    """Whether an op may run on crop's padding: always for a strided_slice (_absorb_padding checks the channels
    it drops when a convolution reads them), only ops that keep finite padding finite for the layout pass's
    padding (its readers take it as it is)."""
    return not crop.unpad or keeps_padding_finite(node)


def _crop_through_unary(node: Call, crop: Crop):
    return crop.rebuild(_through_unary(node, crop.lt)) if _keeps_finite(node, crop) else None


def _crop_through_binary(node: Call, ca: Crop, cb: Crop):
    va, vb = ca.lt.value.type, cb.lt.value.type
    if (ca.channels, ca.groups) != (cb.channels, cb.groups) or va.dtype != vb.dtype or \
            not _spatial_broadcast(va.shape, vb.shape) or not _keeps_finite(node, ca):
        return None
    moved = _through_binary(node, ca.lt, cb.lt)
    return None if moved is None else ca.rebuild(moved)


def _crop_through_binary_constant(node: Call, crop: Crop, c: Constant, const_first: bool):
    """op(crop(lt(a)), c) -> crop(lt(op(a, c'))), c per channel: padded to a's channels, then as without a crop."""
    padded = _pad_channel_constant(c, crop, 4) if _keeps_finite(node, crop) else None
    moved = None if padded is None else _through_binary_constant(node, crop.lt, padded, const_first)
    return None if moved is None else crop.rebuild(moved)


def _crop_through_pool(node: Call, crop: Crop):
    if node.op == "nn.channel_shuffle":  # a gather: it reads the real channels where they are
        if node.attrs.layout != "NCHW" or node.attrs.in_map:
            return None
        src = crop.lt.src  # the result in a block of its own channels (a reader's transform reblocks it)
        out = f"NCHW{math.gcd(node.type.shape[1], parse_layout(src)[-1][1])}c"
        attrs = dict(node.attrs.as_dict(), layout=src, in_map=(crop.groups, crop.channels, crop.padded),
                     out_layout=out)
        return _lt(Call(node.op, (crop.lt.value,), attrs), out, "NCHW")
    pooled = _pool_blocked(node, crop.lt)
    return None if pooled is None else crop.rebuild(pooled)


def _cancel_padding(node: Call, unpad: Call):
    """pad(unpad(v, G, c), G, p) -> v when v has G x p channels: the layout pass padded, and the reader pads the
    same way again."""
    v = unpad.args[0]
    same = (node.attrs.groups, unpad.attrs.channels) == (unpad.attrs.groups, node.args[0].type.shape[1] // node.attrs.groups)
    return v if same and v.type.shape[1] == node.attrs.groups * node.attrs.padded else None


GATHERS = ("nn.concat_blocked", "nn.channel_shuffle")  # blocked ops that may write any block and channel map


def _regather(gather: Call, layout: str, out_map: tuple = ()) -> Call | None:
    """A blocked gather writing its result in another blocked layout (and padded per group by out_map)."""
    dst = parse_layout(layout)
    if gather.attrs.out_map or len(dst) != 5 or dst[-1][0] != "c":
        return None
    block = dst[-1][1]
    physical = out_map[0] * out_map[2] if out_map else gather.type.shape[1] * gather.type.shape[4]
    if physical % block:
        return None
    changed = {"block": block} if gather.op == "nn.concat_blocked" else {"out_layout": layout}
    return gather.replace(attrs=dict(gather.attrs.as_dict(), out_map=tuple(out_map), **changed))


def _reblock_gather(node: Call, inner: LayoutTransform):
    """lt(g(xs), A->NCHW{B}c) -> g(xs) writing NCHW{B}c: a gather (concat_blocked, blocked channel_shuffle) puts
    its channels in any block."""
    g = inner.value
    if not (isinstance(g, Call) and g.op in GATHERS and g.type.ndim == 5 and node.attrs.src_layout != "NCHW"):
        return None
    return _regather(g, node.attrs.dst_layout)


def PADDED_GATHER(node) -> tuple | None:  # noqa: N802
    """Matches pad(lt(g, B->NCHW), M) of a blocked gather g; captures (g, M)."""
    if not (isinstance(node, Call) and node.op == "nn.pad_channels"):
        return None
    lt = FROM_BLOCKED(node.args[0])
    if lt is None or not (isinstance(lt.value, Call) and lt.value.op in GATHERS):
        return None
    m = node.attrs
    return lt.value, (m.groups, node.args[0].type.shape[1] // m.groups, m.padded)


def _gather_padded(node: Call, padded: tuple):
    """lt(pad(lt(g, B->NCHW), M), NCHW->NCHW{b}c) -> g writing NCHW{b}c padded by M."""
    return _regather(padded[0], node.attrs.dst_layout, padded[1]) if node.attrs.src_layout == "NCHW" else None


def _drop_copy(node: Call, x: Expr):
    """copy(x) -> x unless x is a layout_transform (alter_layout's copies keep lt(lt(..)) pairs of a gather's
    result from cancelling until the gather writes the blocked layout itself)."""
    return None if LT(x) is not None else x


def _is(pattern: Pattern):
    return lambda opdef: opdef.pattern == pattern


PROPAGATE_RULES = table_rules([
    # lt(lt(y, A->B), B->C) -> lt(y, A->C), or y when C == A
    (Pat("layout_transform", (LT,)), _cancel),
    # lt(g(xs), A->NCHW{B}c) -> g(xs) in NCHW{B}c          (g a gather: concat_blocked, blocked channel_shuffle)
    (Pat("layout_transform", (ANY,)), lambda node, x: _reblock_gather(node, LT(node))),
    # lt(pad(lt(g(xs), A->NCHW), M), NCHW->NCHW{B}c) -> g(xs) in NCHW{B}c, padded per group by M
    (Pat("layout_transform", (PADDED_GATHER,)), _gather_padded),
    # copy(g) -> g                                            (g not a layout_transform: see alter_layout's gathers)
    (Pat("copy", (ANY,)), _drop_copy),
    # pad(unpad(v, G, c), G, p) -> v                                    (v has G x p channels: the padding is v's)
    (Pat("nn.pad_channels", (UNPADDED,)), _cancel_padding),
    # op(lt(y, B->NCHW)) -> lt(op(y), B->NCHW)                           (op elementwise, B blocked)
    (Pat(_is(Pattern.ELEMWISE), (FROM_BLOCKED,)), _through_unary),
    # op(lt(a, B->NCHW), lt(b, B->NCHW)) -> lt(op(a, b), B->NCHW)        (op broadcast, a and b of one type)
    (Pat(_is(Pattern.BROADCAST), (FROM_BLOCKED, FROM_BLOCKED)), _through_binary),
    # op(lt(a, B->NCHW), c) -> lt(op(a, c'), B->NCHW)                    (c per channel; c' blocked like a)
    (Pat(_is(Pattern.BROADCAST), (FROM_BLOCKED, CONST)),
     lambda node, lt, c: _through_binary_constant(node, lt, c, const_first=False)),
    # op(c, lt(b, B->NCHW)) -> lt(op(c', b), B->NCHW)
    (Pat(_is(Pattern.BROADCAST), (CONST, FROM_BLOCKED)),
     lambda node, c, lt: _through_binary_constant(node, lt, c, const_first=True)),
    # op(lt(a, B->NCHW), v) -> lt(op(a, v'), B->NCHW)       (v per channel, computed from constants and 0-d values)
    (Pat(_is(Pattern.BROADCAST), (FROM_BLOCKED, PER_CHANNEL)),
     lambda node, lt, v: _through_binary_per_channel(node, lt, v, value_first=False)),
    (Pat(_is(Pattern.BROADCAST), (PER_CHANNEL, FROM_BLOCKED)),
     lambda node, v, lt: _through_binary_per_channel(node, lt, v, value_first=True)),
    # where(lt(c, B->NCHW), lt(a, B->NCHW), s) -> lt(where(c, a, s), B->NCHW)  (any mix of such args and one-value s)
    (Pat("where"), _where_through),
    # r(lt(y, B->NCHW), every axis) -> r(y, every axis)             (r: max, min or sum to one value, no keepdims)
    (Pat(lambda opdef: opdef.name in FULL_REDUCTIONS, (FROM_BLOCKED,)), _reduce_whole),
    # pool(lt(y, B->NCHW)) -> lt(pool(y, layout=B), B->NCHW)             (ops that run in the blocked layout)
    (Pat(lambda opdef: opdef.blocked_layout, (FROM_BLOCKED,)), _pool_blocked),
    # The same five rows over crop(lt(y, B->NCHW), C), the output of a padded convolution (padded_channels), and
    # over unpad(lt(y, B->NCHW), G, c), a value padded per group (channel_maps.py; only ops that keep its padding
    # finite): the ops run on the padded channels and the crop moves with the transform. A convolution reading a
    # crop keeps the crop and its own transform, unless it reads it as below; one reading an unpad pads it again
    # (alter_layout), and the pair cancels as above.
    (Pat(_is(Pattern.ELEMWISE), (CROPPED,)), _crop_through_unary),
    (Pat(_is(Pattern.BROADCAST), (CROPPED, CROPPED)), _crop_through_binary),
    (Pat(_is(Pattern.BROADCAST), (CROPPED, CONST)),
     lambda node, crop, c: _crop_through_binary_constant(node, crop, c, const_first=False)),
    (Pat(_is(Pattern.BROADCAST), (CONST, CROPPED)),
     lambda node, c, crop: _crop_through_binary_constant(node, crop, c, const_first=True)),
    (Pat(lambda opdef: opdef.blocked_layout, (CROPPED,)), _crop_through_pool),
    # resize(lt(y, B->NCHW)) -> lt(resize(y), B->NCHW)         (H and W only: the 5-D resize keeps the lanes too)
    (Pat("resize", (FROM_BLOCKED,)), _resize_blocked),
    (Pat("resize", (CROPPED,)), _crop_through_resize),
    # conv2d_nchwc(lt(crop(lt(y, B->NCHW), C), NCHW->NCHW{i}c), lt(w, OIHW->OIHW{i}i{o}o))
    #   -> conv2d_nchwc(y, lt(w zero-padded to y's channels, OIHW->OIHW{b}i{o}o))   (groups 1, y's padding finite)
    (Pat("nn.conv2d_nchwc", (CROPPED_FOR_BLOCKED, PACKED_WEIGHT)), _absorb_padding),
])


def propagate_layout(mod: IRModule, vector_width: int = 16) -> IRModule:
    """Push NCHW{c}c -> NCHW transforms towards the outputs through elementwise, broadcast, pooling, channel
    shuffle and channel concatenation ops, so that a transform meets its inverse before the next convolution and
    both disappear. vector_width: the widest channel block (alter_layout's `block`)."""
    return rewrite(mod, PROPAGATE_RULES + table_rules([
        # concatenate(lt(a, A->NCHW), lt(b, B->NCHW), ..., axis=1) -> lt(concat_blocked(a, b, ...), NCHW{c}c->NCHW)
        #                                                        (c = channel_block of the result, any A, B, ...)
        (Pat("concatenate"), lambda node: _concat_blocked(node, vector_width)),
    ]))

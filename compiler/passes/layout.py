"""Layout transforms: convolutions (and dense layers) move to blocked layouts, and the transforms around them
are pushed through layout-agnostic ops until they meet their inverse and cancel.

NCHW -> NCHW{c}c: c (the channel block) is chosen per convolution from the vector width and the channel counts;
the weights become OIHW{i}i{o}o constants (folded at compile time).
"""
from __future__ import annotations

import numpy as np

from relayish import Call, Constant, IRModule, get_op
from relayish.op import Pattern
from relayish.ops.layout import parse_layout

from .simplify import rewrite


def channel_block(channels: int, vector_width: int) -> int:
    """The block of channels that forms one vector: the largest power of two <= vector_width that divides the
    channel count, if it is at least 4; else the largest divisor <= vector_width (3 for RGB)."""
    pow2 = [b for b in (vector_width, vector_width // 2, vector_width // 4) if b >= 4 and channels % b == 0]
    if pow2:
        return pow2[0]
    return max(b for b in range(1, min(channels, vector_width) + 1) if channels % b == 0)


def _lt(x, src, dst):
    return Call("layout_transform", (x,), {"src_layout": src, "dst_layout": dst})


WINOGRAD_MIN_CHANNELS = 16  # below this the transforms cost more than the products save
WINOGRAD_MIN_TILES = 32  # tiles (per image) that must share each transformed weight


def winograd_tile(node: Call) -> int:
    """The Winograd tile m for an NCHW conv2d (0: keep the direct convolution).

    Only 3x3, stride 1, undilated, groups = 1 with at least WINOGRAD_MIN_CHANNELS input and output channels.
    F(4x4, 3x3) does 4x fewer multiplies than the direct sum, F(2x2, 3x3) 2.25x, but the transformed weights are
    (m + 2)^2 / 9 times the direct ones (4x, 1.8x), and at batch 1 they are read once per run: per flop of the
    batched products they cost 2 / tiles bytes. So m is the largest tile that leaves WINOGRAD_MIN_TILES tiles per
    image, else the convolution stays direct. On ResNet-18 (in the model, cold weights, 2 threads): 56x56 and
    28x28 take m = 4 (2.0-2.4x faster than our direct kernel), 14x14 m = 2 (1.5x; m = 4 with 16 tiles only
    1.25x), 7x7 stays direct (m = 2 with 16 tiles is 1.15x slower)."""
    x, w = node.args
    oc, ic, kh, kw = w.type.shape
    if (kh, kw) != (3, 3) or tuple(node.attrs.strides) != (1, 1) or tuple(node.attrs.dilation) != (1, 1) or \
            node.attrs.groups != 1 or min(ic, oc) < WINOGRAD_MIN_CHANNELS:
        return 0
    oh, ow = node.type.shape[2:]
    return next((m for m in (4, 2) if -(-oh // m) * -(-ow // m) >= WINOGRAD_MIN_TILES), 0)


def alter_layout(mod: IRModule, vector_width: int = 16, winograd: bool = True) -> IRModule:
    """conv2d (groups=1, constant weight) -> NCHW{i}c conv2d_nchwc between layout transforms (or, when `winograd`
    and `winograd_tile` says so, conv2d_winograd_nchwc with its weight transformed at compile time); dense with a
    constant weight -> dense_pack with the weight in blocks of output features."""
    transforms = {}

    def lt_once(x, src, dst):  # a value read by several convolutions is transformed once
        key = (id(x), src, dst)
        if key not in transforms:
            transforms[key] = _lt(x, src, dst)
        return transforms[key]

    def conv_to_nchwc(node: Call):
        # conv2d(x, w) -> lt(conv2d_nchwc(lt(x, NCHW->NCHWic), lt(w)), NCHWoc->NCHW)
        if node.op != "nn.conv2d" or node.attrs.groups != 1 or not isinstance(node.args[1], Constant):
            return None
        x, w = node.args
        oc, ic = w.type.shape[0], w.type.shape[1]
        ib, ob = channel_block(ic, vector_width), channel_block(oc, vector_width)
        data = lt_once(x, "NCHW", f"NCHW{ib}c")
        weight = _lt(w, "OIHW", f"OIHW{ib}i{ob}o")
        m = winograd_tile(node) if winograd else 0
        if m:
            weight = Call("nn.winograd_weight_transform", (weight,), {"tile_size": m})
            conv = Call("nn.conv2d_winograd_nchwc", (data, weight), {"tile_size": m, "padding": node.attrs.padding})
        else:
            conv = Call("nn.conv2d_nchwc", (data, weight), {"strides": node.attrs.strides,
                                                            "padding": node.attrs.padding,
                                                            "dilation": node.attrs.dilation})
        return _lt(conv, f"NCHW{ob}c", "NCHW")

    def dense_to_pack(node: Call):
        # dense(x, w[N, K]) -> dense_pack(x, w as [N/b, K, b])
        if node.op != "nn.dense" or not isinstance(node.args[1], Constant):
            return None
        n = node.args[1].type.shape[0]
        nb = channel_block(n, vector_width)
        return Call("nn.dense_pack", (node.args[0], _lt(node.args[1], "NK", f"NK{nb}n")))

    return rewrite(mod, [("conv_to_nchwc", conv_to_nchwc), ("dense_to_pack", dense_to_pack)])


# ---------------------------------------------------------------------------------------------- propagation

def _as_lt(node):
    if isinstance(node, Call) and node.op == "layout_transform":
        return node.args[0], node.attrs.src_layout, node.attrs.dst_layout
    return None


def _blocked_constant(c: Constant, blocked: str, ndim: int) -> Constant | None:
    """A constant broadcast against an NCHW tensor, re-expressed against its blocked form, if per-channel."""
    data = c.data
    if data.size == 1:
        return Constant(data.reshape(()))
    if data.ndim > ndim:
        return None
    full = data.reshape((1,) * (ndim - data.ndim) + data.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != 1):
        return None
    block = next(f for a, f in parse_layout(blocked) if f)
    ch = full.shape[1]
    if ch == 1:
        return Constant(full.reshape((1,) * (ndim + 1)))
    if ch % block:
        return None
    return Constant(np.ascontiguousarray(full.reshape(1, ch // block, block, *([1] * (ndim - 2)))
                                         .transpose(0, 1, *range(3, ndim + 1), 2)))


def _propagate_rules():
    def through_elemwise(node: Call):
        # op(lt(y, B->NCHW)) -> lt(op(y), B->NCHW)        (op elementwise)
        if get_op(node.op).pattern != Pattern.ELEMWISE or len(node.args) != 1:
            return None
        lt = _as_lt(node.args[0])
        if lt is None or lt[2] != "NCHW" or lt[1] == "NCHW":
            return None
        y, src, dst = lt
        return _lt(node.replace(args=(y,)), src, dst)

    def through_broadcast(node: Call):
        # op(lt(a), lt(b)) -> lt(op(a, b));  op(lt(a), c) -> lt(op(a, c'))   (c per-channel constant)
        if get_op(node.op).pattern != Pattern.BROADCAST or len(node.args) != 2 or node.op == "nn.batch_norm":
            return None
        a, b = node.args
        la, lb = _as_lt(a), _as_lt(b)
        if la is not None and lb is not None:
            if la[1:] == lb[1:] and la[2] == "NCHW" and la[1] != "NCHW" and a.type == b.type:
                return _lt(node.replace(args=(la[0], lb[0])), la[1], la[2])
            return None
        lt, other, first = (la, b, True) if la is not None else (lb, a, False)
        if lt is None or lt[2] != "NCHW" or lt[1] == "NCHW" or not isinstance(other, Constant):
            return None
        if node.type.shape != node.args[0 if first else 1].type.shape:  # the constant must not widen it
            return None
        c = _blocked_constant(other, lt[1], 4)
        if c is None:
            return None
        args = (lt[0], c) if first else (c, lt[0])
        return _lt(node.replace(args=args), lt[1], lt[2])

    def cancel(node: Call):
        # lt(lt(y, A->B), B->C) -> lt(y, A->C), or y when C == A
        if node.op != "layout_transform":
            return None
        inner = _as_lt(node.args[0])
        if inner is None:
            return None
        y, a, _ = inner
        c = node.attrs.dst_layout
        return y if a == c else _lt(y, a, c)

    def pool_blocked(node: Call):
        # pool(lt(y, B->NCHW)) -> lt(pool(y, layout=B), B->NCHW)
        if not get_op(node.op).blocked_layout or node.attrs.layout != "NCHW":
            return None
        lt = _as_lt(node.args[0])
        if lt is None or lt[2] != "NCHW" or lt[1] == "NCHW":
            return None
        attrs = dict(node.attrs.as_dict(), layout=lt[1])
        return _lt(Call(node.op, (lt[0],), attrs), lt[1], "NCHW")

    return [("cancel", cancel), ("through_elemwise", through_elemwise), ("through_broadcast", through_broadcast),
            ("pool_blocked", pool_blocked)]


def propagate_layout(mod: IRModule) -> IRModule:
    """Push NCHW{c}c -> NCHW transforms towards the outputs through elementwise, broadcast and pooling ops, so
    that a transform meets its inverse before the next convolution and both disappear."""
    return rewrite(mod, _propagate_rules())

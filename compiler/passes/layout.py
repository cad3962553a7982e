"""Layout transforms: convolutions (and dense layers) move to blocked layouts, and the transforms around them
are pushed through layout-agnostic ops until they meet their inverse and cancel.

NCHW -> NCHW{c}c: c (the channel block) is chosen per convolution from the vector width and the channel counts;
the weights become OIHW{i}i{o}o constants (folded at compile time).

Both passes are tables of `pattern -> replacement` rows (passes/rewrite.py), one comment each; `lt(x, A->B)` is
layout_transform(x, src_layout=A, dst_layout=B).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from relayish import Call, Constant, Expr, IRModule, Tuple
from relayish.expr import children, post_order
from relayish.op import get_op
from relayish.op import Pattern
from relayish.ops.layout import parse_layout
from relayish.ops.matmul_pack import pack_weight
from relayish.types import is_float

from ..matmul_schedule import matmul_tile
from .rewrite import ANY, CONST, Pat, rewrite, table_rules


def channel_block(channels: int, vector_width: int) -> int:
    """The block of channels that forms one vector: the largest power of two <= vector_width that divides the
    channel count, if it is at least 4; else the largest divisor <= vector_width (3 for RGB)."""
    pow2 = [b for b in (vector_width, vector_width // 2, vector_width // 4) if b >= 4 and channels % b == 0]
    if pow2:
        return pow2[0]
    return max(b for b in range(1, min(channels, vector_width) + 1) if channels % b == 0)


def dense_block(units: int, vector_width: int) -> int:
    """The block of output features of a batch-1 dense layer's packed weight: channel_block's, unless that is
    under half a vector (8210 classes: 2); then a whole vector, the last block padded with zero columns."""
    block = channel_block(units, vector_width)
    return block if block >= vector_width // 2 or units < vector_width else vector_width


PAD_MIN_CHANNELS = 128  # pad the outputs of convolutions at least this wide ...
PAD_MAX_WASTE = 1 / 16  # ... when the padding adds at most this fraction of work
PAD_NARROW_MAX_WASTE = 1 / 3  # a narrower one, when only convolutions read it (MobileNetV2's 24 -> 32 channels)


def padded_channels(node: Call, vector_width: int, absorbed: bool = False) -> int:
    """The output channels an ungrouped, direct NCHW conv2d computes: its own count, or that count rounded up to
    whole vectors when it is not a multiple of vector_width (SqueezeNet's 1,000-class convolution would take
    8-channel blocks at half the FMA width; as 1,008 zero-weight-padded channels it takes 16-channel blocks, and
    a crop (strided_slice over the channels) after its transform back to NCHW drops the padding). Wide
    convolutions are padded when the waste is small (PAD_MAX_WASTE), to an even number of vectors if that is
    small too: the register tile shares each input broadcast between two output blocks, and an odd count of
    blocks has no such pair (SqueezeNet's 1,000 channels as 125 blocks of 8 ran at 84 GFLOP/s on a Zen 3, 1,008 as
    126 at ~115). A narrow one (MobileNetV2's 144 -> 24 projections: 8-channel blocks at 40% of the FMA peak)
    only when `absorbed`: every use of its output ends in convolutions that read the padded channels with zero
    weights (narrow_padding_sites, `_absorb_padding`), so that no crop and no transform is left between them;
    the padding may then add up to PAD_NARROW_MAX_WASTE."""
    oc = node.args[1].type.shape[0]
    if node.attrs.groups != 1:
        return oc
    if oc >= PAD_MIN_CHANNELS:
        pair = -(-oc // (2 * vector_width)) * 2 * vector_width
        if (pair - oc) <= PAD_MAX_WASTE * oc:
            return pair
    padded = -(-oc // vector_width) * vector_width
    if padded == oc:
        return oc
    if oc >= PAD_MIN_CHANNELS:
        return padded if (padded - oc) <= PAD_MAX_WASTE * oc else oc
    return padded if absorbed and (padded - oc) <= PAD_NARROW_MAX_WASTE * oc else oc


def narrow_padding_sites(mod: IRModule, absorbs: Callable[[Call], bool]) -> set[int]:
    """ids of the NCHW conv2d nodes of `mod` whose every use, through elementwise and same-shape broadcast ops,
    ends as the data input of a convolution for which absorbs(conv) holds, and never in a graph output or
    another op: their outputs may carry padded channels to their readers (padded_channels)."""
    users: dict[int, list] = {}
    for node in post_order(mod.main.body):
        for k, arg in enumerate(children(node)):
            users.setdefault(id(arg), []).append((node, k))
    body = mod.main.body
    outputs = {id(f) for f in body.fields} if isinstance(body, Tuple) else {id(body)}

    known: dict[int, bool] = {}

    def only_convs_read(node: Expr) -> bool:
        if id(node) not in known:
            known[id(node)] = id(node) not in outputs and bool(users.get(id(node))) and all(
                read_by_convs(user, k, node) for user, k in users[id(node)])
        return known[id(node)]

    def read_by_convs(user: Expr, k: int, node: Expr) -> bool:
        if not (isinstance(user, Call) and isinstance(user.op, str)):
            return False
        if user.op == "nn.conv2d" and k == 0:
            return absorbs(user)
        return get_op(user.op).pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and \
            user.type.shape == node.type.shape and only_convs_read(user)

    return {id(n) for n in post_order(body) if isinstance(n, Call) and n.op == "nn.conv2d"
            and isinstance(n.args[1], Constant) and n.attrs.groups == 1 and only_convs_read(n)}


def group_block(per_group: int, channels: int, vector_width: int) -> int:
    """The channel block of a grouped convolution's input or output: channel_block(channels), the block the
    tensor has wherever it is produced or read, narrowed to divide the channels per group, so that every block
    lies in one group (ShuffleNet's 60 channels in 3 groups of 20: blocks of 4)."""
    return math.gcd(per_group, channel_block(channels, vector_width))


def _lt(x, src, dst):
    return Call("layout_transform", (x,), {"src_layout": src, "dst_layout": dst})


def _crop(x, channels: int):
    """The first `channels` channels of an NCHW x: drops the padding of a padded convolution's output."""
    return Call("strided_slice", (x,), {"begin": (0,), "end": (channels,), "strides": (1,), "axes": (1,)})


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
    if not winograd_tiles(node):
        return 0
    oh, ow = node.type.shape[2:]
    return next((m for m in (4, 2) if -(-oh // m) * -(-ow // m) >= WINOGRAD_MIN_TILES), 0)


def conv_signature(node: Call) -> str:
    """What identifies an NCHW conv2d for the choice of its algorithm: its shapes and window (every conv2d of one
    signature in a model takes the same algorithm; compiler/algorithms.py)."""
    (n, ic, h, w), (oc, _, kh, kw) = node.args[0].type.shape, node.args[1].type.shape
    a = node.attrs
    return (f"conv2d n{n} c{ic} {h}x{w} -> c{oc} k{kh}x{kw} s{tuple(a.strides)} p{tuple(a.padding)} "
            f"d{tuple(a.dilation)} g{a.groups}")


def winograd_tiles(node: Call) -> tuple[int, ...]:
    """The Winograd tiles an NCHW conv2d may take (besides 0, direct): (4, 2) for a 3x3, stride-1, undilated,
    ungrouped float convolution of at least WINOGRAD_MIN_CHANNELS input and output channels whose weights are all
    finite, else (). An Inf or NaN weight would reach every output of a tile through the transforms (Inf - Inf =
    NaN), where the direct sum touches only the outputs whose window holds it, as onnxruntime does; an integer
    convolution (ConvInteger) must stay exact: no fractions."""
    weight = node.args[1]
    oc, ic, kh, kw = weight.type.shape
    if not is_float(node.type.dtype):
        return ()
    if (kh, kw) != (3, 3) or tuple(node.attrs.strides) != (1, 1) or tuple(node.attrs.dilation) != (1, 1) or \
            node.attrs.groups != 1 or min(ic, oc) < WINOGRAD_MIN_CHANNELS:
        return ()
    if isinstance(weight, Constant) and not np.isfinite(weight.data.astype(np.float32)).all():
        return ()
    return (4, 2)


def alter_layout(mod: IRModule, vector_width: int = 16, winograd: bool = True,
                 algorithms: dict | None = None, block: int | None = None) -> IRModule:
    """conv2d (constant weight, any groups) -> a blocked convolution between layout transforms: depthwise
    (groups = channels = outputs) -> depthwise_conv2d_nchwc with the lanes on channels; else conv2d_nchwc with
    blocks that divide the channels per group (group_block), or, when `winograd` and `winograd_tile` say so,
    conv2d_winograd_nchwc with its weight transformed at compile time. Dense with a constant weight -> dense_pack
    with the weight in blocks of output features; matmul with a constant 2-D weight -> matmul_pack with the
    weight in blocks of its register tile's columns. ShuffleNet's channel shuffle (reshape -> transpose -> reshape)
    -> channel_shuffle, which runs in the blocked layout. algorithms: {conv_signature: tile} overrides
    winograd_tile for those convolutions (0 direct, or one of their winograd_tiles), when `winograd`. block: the
    widest channel block of convolutions (default: vector_width; compiler/algorithms.py may choose another)."""
    algorithms = algorithms or {}
    block = block or vector_width
    origin: dict[int, int] = {}  # rewritten node -> the node of `mod` it came from (rewrite fills it)

    def tile_of(node: Call) -> int:
        if not winograd:
            return 0
        m = algorithms.get(conv_signature(node)) if algorithms else None
        return winograd_tile(node) if m is None or (m and m not in winograd_tiles(node)) else m

    transforms = {}

    def lt_once(x, src, dst):  # a value read by several convolutions is transformed once
        key = (id(x), src, dst)
        if key not in transforms:
            transforms[key] = _lt(x, src, dst)
        return transforms[key]

    def window(node: Call) -> dict:
        return {"strides": node.attrs.strides, "padding": node.attrs.padding, "dilation": node.attrs.dilation}

    def conv_to_nchwc(node: Call, x: Expr, w: Constant):
        oc, cg = w.type.shape[0], w.type.shape[1]
        groups = node.attrs.groups
        if groups == oc == cg * groups:  # depthwise
            b = channel_block(oc, block)
            conv = Call("nn.depthwise_conv2d_nchwc", (lt_once(x, "NCHW", f"NCHW{b}c"), _lt(w, "OIHW", f"OIHW{b}o")),
                        window(node))
            return _lt(conv, f"NCHW{b}c", "NCHW")
        m = tile_of(node)
        padded = oc if m else padded_channels(node, block, origin.get(id(node)) in narrow)
        if padded != oc:
            w = Constant(np.pad(w.data, ((0, padded - oc), (0, 0), (0, 0), (0, 0))))
        ib, ob = group_block(cg, cg * groups, block), group_block(padded // groups, padded, block)
        data = lt_once(x, "NCHW", f"NCHW{ib}c")
        weight = _lt(w, "OIHW", f"OIHW{ib}i{ob}o")
        if m:
            weight = Call("nn.winograd_weight_transform", (weight,), {"tile_size": m})
            conv = Call("nn.conv2d_winograd_nchwc", (data, weight), {"tile_size": m, "padding": node.attrs.padding})
        else:
            conv = Call("nn.conv2d_nchwc", (data, weight), dict(window(node), groups=groups))
        out = _lt(conv, f"NCHW{ob}c", "NCHW")
        return out if padded == oc else _crop(out, oc)

    def dense_to_pack(node: Call, x: Expr, w: Constant):
        rows, n = x.type.shape[0], w.type.shape[0]
        tile = matmul_tile(rows, n, 1, vector_width) if rows > 1 else None
        nb = tile[1] * tile[2] if tile else dense_block(n, vector_width)  # rows > 1: the matmul tile's columns
        if n % nb:  # zero columns fill the last block (packed at compile time); the op computes the first n
            padded = Constant(np.pad(w.data, ((0, nb - n % nb), (0, 0))))
            return Call("nn.dense_pack", (x, _lt(padded, "NK", f"NK{nb}n")), {"units": n})
        return Call("nn.dense_pack", (x, _lt(w, "NK", f"NK{nb}n")))

    def matmul_to_pack(node: Call, x: Expr, w: Constant):
        block = packed_matmul_block(node, vector_width)
        if block is None:
            return None
        n = w.type.shape[1]
        return Call("nn.matmul_pack", (x, Constant(pack_weight(w.data, block))), {"units": n} if n % block else {})

    # outputs that may keep padded channels: only direct, ungrouped convolutions read them (_absorb_padding)
    narrow = narrow_padding_sites(mod, lambda conv: conv.attrs.groups == 1 and isinstance(conv.args[1], Constant)
                                  and not tile_of(conv))
    return rewrite(mod, table_rules([
        # conv2d(x, w) -> lt(depthwise_conv2d_nchwc(lt(x, NCHW->NCHW{b}c), lt(w, OIHW->OIHW{b}o)), NCHW{b}c->NCHW)
        #                                                           (depthwise: groups = channels = outputs)
        # conv2d(x, w) -> lt(conv2d_nchwc(lt(x, NCHW->NCHW{i}c), lt(w, OIHW->OIHW{i}i{o}o)), NCHW{o}c->NCHW)
        #                     (w constant, any groups; conv2d_winograd_nchwc if winograd_tile says so)
        # conv2d(x, w) -> crop(lt(conv2d_nchwc(.., w padded to P outputs), NCHW{o}c->NCHW), C)
        #                     (P = padded_channels: C not a multiple of the vector width, wide enough)
        (Pat("nn.conv2d", (ANY, CONST)), conv_to_nchwc),
        # dense(x, w[N, K]) -> dense_pack(x, lt(w, NK->NK{n}n))          (w constant; n: the channel block, or the
        #                                                              matmul tile's columns when x has rows > 1)
        (Pat("nn.dense", (ANY, CONST)), dense_to_pack),
        # matmul(x[.., M, K], W[K, N]) -> matmul_pack(x, W as [N/nb, K, nb])     (W constant; nb: the tile's columns)
        (Pat("nn.matmul", (ANY, CONST)), matmul_to_pack),
        # reshape(transpose(reshape(x, [N, g, C/g, H, W]), (0, 2, 1, 3, 4)), [N, C, H, W]) -> channel_shuffle(x, g)
        (Pat("reshape", (SHUFFLED,)), _channel_shuffle),
    ]), origin)


def packed_matmul_block(node: Call, vector_width: int) -> int | None:
    """Columns per block of a matmul's packed weight: those of its register tile (compiler/matmul_schedule.py),
    so that a tile reads one contiguous panel; None (keep the matmul) for a 1-D operand, an untileable shape or an
    integer matmul (MatMulInteger's int32 products: the packed form is float-only, the plain matmul exact)."""
    x, w = node.args
    if x.type.ndim < 2 or w.type.ndim != 2 or not is_float(node.type.dtype):
        return None
    m, n = x.type.shape[-2], w.type.shape[1]
    tile = matmul_tile(m, n, math.prod(x.type.shape[:-2]), vector_width)
    return None if tile is None else tile[1] * tile[2]


def SHUFFLED(node) -> tuple | None:  # noqa: N802  (an argument matcher, see rewrite.Pat)
    """Matches transpose(reshape(x, [N, g, C/g, H, W]), (0, 2, 1, 3, 4)) of a 4-D x; captures (x, g)."""
    if not (isinstance(node, Call) and node.op == "transpose" and tuple(node.attrs.axes) == (0, 2, 1, 3, 4)):
        return None
    inner = node.args[0]
    if not (isinstance(inner, Call) and inner.op == "reshape" and inner.args[0].type.ndim == 4):
        return None
    n, c, h, w = inner.args[0].type.shape
    g = inner.type.shape[1]
    return (inner.args[0], g) if inner.type.shape == (n, g, c // g, h, w) else None


def _channel_shuffle(node: Call, shuffled: tuple):
    x, groups = shuffled
    return Call("nn.channel_shuffle", (x,), {"groups": groups}) if node.type.shape == x.type.shape else None


# ---------------------------------------------------------------------------------------------- propagation

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
    """A matched crop(lt(value, B->NCHW), channels): a padded convolution's output, or a value computed from it."""
    lt: LayoutTransform
    channels: int


def CROPPED(node) -> Crop | None:  # noqa: N802
    """Matches strided_slice(lt(y, B->NCHW), channels 0..C) of a 4-D value: what `_crop` builds."""
    if not (isinstance(node, Call) and node.op == "strided_slice" and tuple(node.attrs.axes) == (1,)
            and tuple(node.attrs.begin) == (0,) and tuple(node.attrs.strides) == (1,) and node.type.ndim == 4):
        return None
    lt = FROM_BLOCKED(node.args[0])
    return None if lt is None else Crop(lt, node.type.shape[1])


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
    return get_op(node.op).pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and all(finite(a) for a in node.args)


def _absorb_padding(node: Call, crop: Crop, weight: LayoutTransform):
    """conv2d_nchwc(lt(crop(lt(y, B->NCHW), C), NCHW->NCHW{i}c), lt(w, OIHW->OIHW{i}i{o}o))
    -> conv2d_nchwc(y, lt(w', OIHW->OIHW{b}i{o}o)), w' = w with zero weights for y's padded channels (b: B's block):
    the convolution reads the padded value as it is, and the padding adds nothing to its sums."""
    y = crop.lt.value
    if node.attrs.groups != 1 or not _padding_is_finite(y, crop.channels):
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


def _pad_channel_constant(c: Constant, channels: int, padded: int, ndim: int) -> Constant | None:
    """A per-channel constant broadcast against an NCHW tensor of `channels` channels, extended to `padded`
    channels by repeating its last value (any finite value will do: the padded channels are cropped away; zeros
    could make a division give Inf there)."""
    if c.data.size == 1:
        return c
    full = _per_channel(c, ndim)
    if full is None or full.shape[1] != channels:
        return None
    return Constant(np.pad(full, [(0, padded - channels if i == 1 else 0) for i in range(ndim)], mode="edge"))


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


def _through_binary(node: Call, la: LayoutTransform, lb: LayoutTransform):
    a, b = node.args
    if la.src != lb.src or a.type != b.type:
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


def _pool_blocked(node: Call, lt: LayoutTransform):
    if node.attrs.layout != "NCHW":
        return None
    return _lt(Call(node.op, (lt.value,), dict(node.attrs.as_dict(), layout=lt.src)), lt.src, "NCHW")


def _concat_blocked(node: Call, vector_width: int):
    """concatenate over the channels of values that all come from a blocked layout (any blocks), into the block
    that convolutions reading the result choose (channel_block)."""
    if node.attrs.axis != 1 or node.type.ndim != 4:
        return None
    inputs = [FROM_BLOCKED(a) for a in node.args]
    if any(lt is None for lt in inputs):
        return None
    block = channel_block(node.type.shape[1], vector_width)
    return _lt(Call("nn.concat_blocked", tuple(lt.value for lt in inputs), {"block": block}), f"NCHW{block}c", "NCHW")


def _crop_through_unary(node: Call, crop: Crop):
    return _crop(_through_unary(node, crop.lt), crop.channels)


def _crop_through_binary(node: Call, ca: Crop, cb: Crop):
    if ca.channels != cb.channels or ca.lt.value.type != cb.lt.value.type:
        return None
    moved = _through_binary(node, ca.lt, cb.lt)
    return None if moved is None else _crop(moved, ca.channels)


def _crop_through_binary_constant(node: Call, crop: Crop, c: Constant, const_first: bool):
    """op(crop(lt(a)), c) -> crop(lt(op(a, c'))), c per channel: padded to a's channels, then as without a crop."""
    padded = _pad_channel_constant(c, crop.channels, crop.lt.value.type.shape[1] * crop.lt.value.type.shape[-1], 4)
    moved = None if padded is None else _through_binary_constant(node, crop.lt, padded, const_first)
    return None if moved is None else _crop(moved, crop.channels)


def _crop_through_pool(node: Call, crop: Crop):
    pooled = _pool_blocked(node, crop.lt)
    return None if pooled is None else _crop(pooled, crop.channels)


def _is(pattern: Pattern):
    return lambda opdef: opdef.pattern == pattern


PROPAGATE_RULES = table_rules([
    # lt(lt(y, A->B), B->C) -> lt(y, A->C), or y when C == A
    (Pat("layout_transform", (LT,)), _cancel),
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
    # pool(lt(y, B->NCHW)) -> lt(pool(y, layout=B), B->NCHW)             (ops that run in the blocked layout)
    (Pat(lambda opdef: opdef.blocked_layout, (FROM_BLOCKED,)), _pool_blocked),
    # The same five rows over crop(lt(y, B->NCHW), C), the output of a padded convolution (padded_channels): the
    # ops run on the padded channels and the crop moves with the transform. A convolution reading a crop keeps
    # the crop and its own transform, unless it reads it as below.
    (Pat(_is(Pattern.ELEMWISE), (CROPPED,)), _crop_through_unary),
    (Pat(_is(Pattern.BROADCAST), (CROPPED, CROPPED)), _crop_through_binary),
    (Pat(_is(Pattern.BROADCAST), (CROPPED, CONST)),
     lambda node, crop, c: _crop_through_binary_constant(node, crop, c, const_first=False)),
    (Pat(_is(Pattern.BROADCAST), (CONST, CROPPED)),
     lambda node, c, crop: _crop_through_binary_constant(node, crop, c, const_first=True)),
    (Pat(lambda opdef: opdef.blocked_layout, (CROPPED,)), _crop_through_pool),
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

"""Layout transforms: convolutions (and dense layers) move to blocked layouts between layout transforms, which
passes/propagate.py then pushes through layout-agnostic ops until they meet their inverse and cancel.

NCHW -> NCHW{c}c: c (the channel block) is chosen per convolution from the vector width and the channel counts,
or, for the values convolutions write with channels that are not whole vectors and those grouped convolutions
read, per set of values that must share a layout, with the channels padded to whole blocks (at their end, or per
group: passes/channel_maps.py); the weights become OIHW{i}i{o}o constants (folded at compile time).

A table of `pattern -> replacement` rows (passes/rewrite.py), one comment each; `lt(x, A->B)` is
layout_transform(x, src_layout=A, dst_layout=B).
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Call, Constant, Expr, IRModule, Var
from relayish.ops.matmul_pack import pack_weight
from relayish.ops.qnn import pack_conv_weight, pack_matmul_weight
from relayish.dims import typical
from relayish.types import is_float

from ..matmul_schedule import matmul_tile
from .channel_maps import (ChannelMap, channel_block, channel_maps, input_block, is_window_pool, network_block,
                           scatter_channels, stays_nchw)
from .propagate import _lt, _pad, _unpad, propagate_layout  # noqa: F401  (propagate_layout: its pass, re-exported)
from .rewrite import ANY, CONST, Pat, rewrite, table_rules


def dense_block(units: int, vector_width: int) -> int:
    """The block of output features of a batch-1 dense layer's packed weight, the last block padded with zero
    columns where it does not divide the units: channel_block's when that is a power of two of at least half a
    vector (1000 classes: 8); else a whole vector if that pads at most an eighth (8210 classes, whose divisor is
    2; 1863, whose divisor 9 made 9-lane vectors and ran 16x slower than onnxruntime), else the one of a vector
    and half a vector that pads least (22 units: 8 -> 24)."""
    block = channel_block(units, vector_width)
    if units < vector_width or (block >= vector_width // 2 and block & (block - 1) == 0):
        return block

    def padded(b: int) -> int:
        return -(-units // b) * b
    if padded(vector_width) - units <= units // 8:
        return vector_width
    return min((vector_width, vector_width // 2), key=lambda b: (padded(b), -b))


def group_block(per_group: int, channels: int, vector_width: int) -> int:
    """The channel block of a grouped convolution's input or output: channel_block(channels), the block the
    tensor has wherever it is produced or read, narrowed to divide the channels per group, so that every block
    lies in one group (ShuffleNet's 60 channels in 3 groups of 20: blocks of 4)."""
    return math.gcd(per_group, channel_block(channels, vector_width))


MIN_OUTPUT_BLOCK = 4
"""A convolution whose output block would be narrower (a grouped one with 1 or 2 output channels per group, which
channel_maps.group_map does not pad) stays NCHW, its vectors along the width: 267 -> 6 channels in 3 groups, 1x1,
over 100x100 ran 1,890 us in blocks of 2 channels (6 GFLOP/s), 150 us in NCHW (Zen 4)."""

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
    1.25x), 7x7 stays direct (m = 2 with 16 tiles is 1.15x slower). Over sizes known only at run time the tile
    is chosen here for the typical size (relayish.dims.typical), and the generic tier builds a kernel per tile
    and picks one per call (compiler/generic.py _algorithm_variants, winograd_tile_at)."""
    if not winograd_tiles(node):
        return 0
    return winograd_tile_at(*(typical(d) for d in node.type.shape[2:]))


def winograd_tile_at(oh: int, ow: int, tiles: tuple = (4, 2)) -> int:
    """The largest of the Winograd tiles that leaves WINOGRAD_MIN_TILES tiles of an oh x ow output, else 0
    (direct): winograd_tile's rule, also the generic module's choice per call among the kernels it has
    (compiler/generic_module.py)."""
    return next((m for m in tiles if m and -(-oh // m) * -(-ow // m) >= WINOGRAD_MIN_TILES), 0)


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

    def window(node: Call) -> dict:
        return {"strides": node.attrs.strides, "padding": node.attrs.padding, "dilation": node.attrs.dilation}

    maps = channel_maps(mod, block, vector_width)
    if network_block(maps, block, vector_width) < block:  # one block size through the network
        block = network_block(maps, block, vector_width)
        maps = channel_maps(mod, block, vector_width)

    def cmap(node: Expr) -> ChannelMap | None:  # the map of a value of the rewritten graph (channel_maps.py)
        return maps.get(origin.get(id(node)))

    padded_inputs = {}

    def blocked_input(x: Expr, m: ChannelMap | None, b: int):  # x as NCHW{b}c, padded per m; once per value
        key = (id(x), m, b)
        if key not in padded_inputs:
            padded_inputs[key] = _lt(_pad(x, m) if m is not None and m.is_padded else x, "NCHW", f"NCHW{b}c")
        return padded_inputs[key]

    def blocked_output(y: Call, m: ChannelMap, b: int):  # a blocked value back to NCHW, its padding dropped
        return _unpad(_lt(y, f"NCHW{b}c", "NCHW"), m) if m is not None and m.is_padded else _lt(y, f"NCHW{b}c", "NCHW")

    def conv_to_nchwc(node: Call, x: Expr, w: Constant):
        oc, cg = w.type.shape[0], w.type.shape[1]
        groups = node.attrs.groups
        m_in, m_out = cmap(x), cmap(node)
        if groups == oc == cg * groups:  # depthwise: channel c of the result is channel c of x (m_in == m_out)
            b = m_out.block if m_out else channel_block(oc, block)
            weight = _lt(Constant(scatter_channels(w.data, 0, m_out)), "OIHW", f"OIHW{b}o")
            conv = Call("nn.depthwise_conv2d_nchwc", (blocked_input(x, m_in, b), weight), window(node))
            return blocked_output(conv, m_out, b)
        if stays_nchw(node):  # a grouped convolution of a few products per output (channel_maps.py)
            return None
        m = tile_of(node)
        if m_in is not None:  # x keeps its per-group padding: zero weights for the padded channels
            ib, w = m_in.block, Constant(scatter_channels(w.data, 1, m_in.split(groups)))
        elif isinstance(x, Var) and groups > 1:  # a graph input: any block that divides the groups (channel_maps)
            ib = input_block(cg, block)
        else:
            ib = group_block(cg, cg * groups, block)
        if m_out is not None:  # padded outputs (per group, or at the end): zero weights, zero_channel_padding keeps 0
            ob, w = m_out.block, Constant(scatter_channels(w.data, 0, m_out))
        else:
            ob = group_block(oc // groups, oc, block)
        if ob < MIN_OUTPUT_BLOCK and not m:
            return None  # vectors along the width instead (the NCHW convolution's schedule)
        data = blocked_input(x, m_in, ib)
        weight = _lt(w, "OIHW", f"OIHW{ib}i{ob}o")
        if m:
            weight = Call("nn.winograd_weight_transform", (weight,), {"tile_size": m})
            conv = Call("nn.conv2d_winograd_nchwc", (data, weight), {"tile_size": m, "padding": node.attrs.padding})
        else:
            conv = Call("nn.conv2d_nchwc", (data, weight), dict(window(node), groups=groups))
        if m_out is not None and m_out.is_padded:
            conv = Call("nn.zero_channel_padding", (conv,), {"groups": m_out.groups, "channels": m_out.channels})
        return blocked_output(conv, m_out, ob)

    def pool_blocked(node: Call, x: Expr):
        """A windowed pool of NCHW, blocked as its channel map says (or in whole blocks of its channels): in
        NCHW its strided windows are read element by element (an average pool of 113 channels, 3x3 / 2 over 33x33,
        ran 49 us, 1.6x onnxruntime's time)."""
        if not is_window_pool(node):
            return None
        m = cmap(node)
        b = m.block if m is not None else channel_block(node.type.shape[1], block)
        if b < 4:
            return None
        pooled = Call(node.op, (blocked_input(x, m, b),), dict(node.attrs.as_dict(), layout=f"NCHW{b}c"))
        return blocked_output(pooled, m, b)

    def gather_to_map(node: Call, value: Expr | None = None):
        """A gather (concatenation, channel shuffle) whose result has a ChannelMap: computed as it is, then padded
        and blocked for its readers, who find it as blocked_output(..) and cancel the transforms. The copy keeps
        the blocked value: it is what the gather's kernel writes (lt(lt(v, NCHW->B), B->NCHW) would cancel)."""
        m = cmap(node)
        if m is None or (node.op == "concatenate" and (node.attrs.axis % 4 != 1 or node.type.ndim != 4)):
            return value
        return blocked_output(Call("copy", (blocked_input(node if value is None else value, m, m.block),)), m, m.block)

    def shuffle(node: Call, shuffled: tuple):
        value = _channel_shuffle(node, shuffled)
        return None if value is None else gather_to_map(node, value)

    def dense_to_pack(node: Call, x: Expr, w: Constant):
        rows, n = typical(x.type.shape[0]), w.type.shape[0]  # the tile only tunes speed
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

    def int8_conv(node: Call, x: Expr, w: Constant, pad: Expr):
        rows = int8_conv_rows(node, x, w, pad, block)
        if rows is not None:
            return rows
        b = int8_depthwise_block(node, block)
        if b:  # each lane a channel: the data as it is, the weight [C/b, 1, KH, KW, b]
            weight = Constant(np.ascontiguousarray(_blocked_depthwise(w.data, b)))
            conv = Call("qnn.depthwise_conv2d_nchwc", (_lt(x, "NCHW", f"NCHW{b}c"), weight, pad), window(node))
            return _lt(conv, f"NCHW{b}c", "NCHW")
        blocks = int8_conv_blocks(node, block)
        if blocks is None:
            return None
        ib, ob, padded = blocks
        weight = w.data
        if padded:  # (ungrouped) whole words of input channels: zero weights for the padded ones
            weight = np.pad(weight, ((0, 0), (0, padded - weight.shape[1]), (0, 0), (0, 0)))
            x = Call("nn.pad_channels", (x,), {"groups": 1, "padded": padded})
        conv = Call("qnn.conv2d_nchwc", (_lt(x, "NCHW", f"NCHW{ib}c"), Constant(pack_conv_weight(weight, ib, ob)),
                                         pad), dict(window(node), groups=node.attrs.groups))
        return _flipped_data_term(_lt(conv, f"NCHW{ob}c", "NCHW"), x, w.data, (1, 2, 3), (-1, 1, 1))

    def int8_matmul(node: Call, x: Expr, w: Constant):
        nb = int8_matmul_block(node, vector_width)
        if nb is None:
            return None
        n = w.type.shape[1]
        packed = Call("qnn.matmul_pack", (x, Constant(pack_matmul_weight(w.data, nb))), {"units": n} if n % nb else {})
        return _flipped_data_term(packed, x, w.data, (0,), (-1,))

    return rewrite(mod, table_rules([
        # qnn.conv2d(x, w, pad) -> lt(qnn.conv2d_nchwc(lt(x, NCHW->NCHW{i}c), words(w), pad), NCHW{o}c->NCHW)
        #    (8-bit x, constant int8 w; words: 4 input channels per int32, vpdpbusd's form; int8_conv_blocks;
        #    int8 x: minus 128 x each channel's weight sum, the packed op reads x + 128)
        # qnn.conv2d(x, w, pad) -> lt(qnn.depthwise_conv2d_nchwc(lt(x, NCHW->NCHW{b}c), w as [C/b, 1, KH, KW, b],
        #    pad), NCHW{b}c->NCHW)          (depthwise, channels in whole blocks of 4 or more: int8_depthwise_block)
        (Pat("qnn.conv2d", (ANY, CONST, ANY)), int8_conv),
        # qnn.matmul(x[.., M, K], w[K, N]) -> qnn.matmul_pack(x, words(w) [N/nb, K/4, nb])   (8-bit x, constant
        #    int8 w; nb: the register tile's columns; int8 x as above)
        (Pat("qnn.matmul", (ANY, CONST)), int8_matmul),
        # conv2d(x, w) -> lt(depthwise_conv2d_nchwc(lt(x, NCHW->NCHW{b}c), lt(w, OIHW->OIHW{b}o)), NCHW{b}c->NCHW)
        #                                                           (depthwise: groups = channels = outputs)
        # conv2d(x, w) -> lt(conv2d_nchwc(lt(x, NCHW->NCHW{i}c), lt(w, OIHW->OIHW{i}i{o}o)), NCHW{o}c->NCHW)
        #                     (w constant, any groups, o >= MIN_OUTPUT_BLOCK and not stays_nchw (else kept NCHW);
        #                     conv2d_winograd_nchwc if winograd_tile says so)
        # conv2d(x, w) -> unpad(lt(zero_channel_padding(conv2d_nchwc(lt(pad(x, Mx), NCHW->NCHW{i}c), w')), ..), My)
        #                     (x, y with channel maps Mx, My: channels padded per group or at the end; w' with zero
        #                     weights for the padding; channel_maps.py)
        (Pat("nn.conv2d", (ANY, CONST)), conv_to_nchwc),
        # max_pool2d(x) -> lt(max_pool2d(lt(x, NCHW->NCHW{b}c), layout=NCHW{b}c), NCHW{b}c->NCHW)  (and average;
        #                     windows of one value: padded per its channel map, as a depthwise convolution)
        (Pat("nn.max_pool2d", (ANY,)), pool_blocked),
        (Pat("nn.avg_pool2d", (ANY,)), pool_blocked),
        # dense(x, w[N, K]) -> dense_pack(x, lt(w, NK->NK{n}n))          (w constant; n: the channel block, or the
        #                                                              matmul tile's columns when x has rows > 1)
        (Pat("nn.dense", (ANY, CONST)), dense_to_pack),
        # matmul(x[.., M, K], W[K, N]) -> matmul_pack(x, W as [N/nb, K, nb])     (W constant; nb: the tile's columns)
        (Pat("nn.matmul", (ANY, CONST)), matmul_to_pack),
        # reshape(transpose(reshape(x, [N, g, C/g, H, W]), (0, 2, 1, 3, 4)), [N, C, H, W]) -> channel_shuffle(x, g)
        #    (its result padded and blocked as below when it has a channel map)
        (Pat("reshape", (SHUFFLED,)), shuffle),
        # concatenate(xs, axis=1) -> unpad(lt(copy(lt(pad(concatenate(xs), M), NCHW->NCHW{b}c)), NCHW{b}c->NCHW), M)
        #    (its result has the channel map M: the layout its readers share; propagate_layout moves the outer
        #    unpad and lt to them, and they cancel against their own pad and lt)
        (Pat("concatenate"), gather_to_map),
    ]), origin)


def packed_matmul_block(node: Call, vector_width: int) -> int | None:
    """Columns per block of a matmul's packed weight: those of its register tile (compiler/matmul_schedule.py),
    so that a tile reads one contiguous panel; None (keep the matmul) for a 1-D operand, an untileable shape or an
    integer matmul (MatMulInteger's int32 products: the packed form is float-only, the plain matmul exact)."""
    x, w = node.args
    if x.type.ndim < 2 or w.type.ndim != 2 or not is_float(node.type.dtype):
        return None
    m, n = typical(x.type.shape[-2]), w.type.shape[1]
    tile = matmul_tile(m, n, math.prod(typical(d) for d in x.type.shape[:-2]), vector_width)
    return None if tile is None else tile[1] * tile[2]


def _flipped_data_term(y: Call, x: Expr, w: np.ndarray, axes: tuple, shape: tuple) -> Expr:
    """y minus 128 x each output channel's weight sum when the data is int8: the packed ops read it as x + 128."""
    if x.type.dtype != "int8":
        return y
    term = (128 * w.astype(np.int64).sum(axis=axes)).astype(np.int32).reshape(shape)
    return Call("subtract", (y, Constant(term)))


def int8_conv_rows(node: Call, x: Expr, w: Constant, pad: Constant, block: int = 16) -> Expr | None:
    """An ungrouped 8-bit qnn.conv2d of fewer than 4 input channels whose kernel is 2+ columns wide, as
    qnn.conv2d_rows over x's rows in NHWC (padded with the pad value, and past the right edge with the bytes the
    last column's last word reads: their weights are zero), else None. A kernel row's KW columns x C channels are
    one run of bytes there: vpdpbusd's words hold 4 of them, whatever pixel each byte is, where padding the
    channels to 4 left a quarter of every word zero (RGB). ResNet-18's int8 conv1 (7x7/2, 3 -> 64): 21 bytes in
    6 words instead of 7; the kernel went from 61% to ~75% of the int8 peak (Zen 4), with no copy of the input
    beyond the transposition (a column gather of the taps, 3.5x the input, cost more than it saved)."""
    if not x.type.is_static:  # (its row layout is sized by the input's width: the general int8 path takes it)
        return None
    n, c, h, wd = x.type.shape
    o, cg, kh, kw = w.type.shape
    a = node.attrs
    words = -(-kw * c // 4)
    ob = int8_block(o, block)
    if a.groups != 1 or c >= 4 or kw < 2 or words >= kw or tuple(a.dilation)[1] != 1 or ob is None or \
            not isinstance(pad, Constant) or x.type.dtype not in ("uint8", "int8") or w.type.dtype != "int8":
        return None
    (sh, sw), (dh, _), (pt, pl, pb, pr) = a.strides, a.dilation, a.padding
    ow = (wd + pl + pr - kw) // sw + 1
    if ow < 1 or (h + pt + pb - dh * (kh - 1) - 1) < 0:
        return None
    right = max(pr, -(-((ow - 1) * sw * c + 4 * words - (wd + pl) * c) // c))  # columns the last word reaches
    value = float(np.asarray(pad.data).reshape(()))
    nhwc = Call("transpose", (x,), {"axes": (0, 2, 3, 1)})
    padded = Call("pad", (nhwc,), {"pads": (0, pt, pl, 0, 0, pb, right, 0), "value": value})
    rows = Call("reshape", (padded,), {"newshape": (n, h + pt + pb, (wd + pl + right) * c)})
    weight = w.data.transpose(0, 3, 1, 2).reshape(o, kw * c, kh)  # byte rx x C + c of a kernel row
    weight = np.pad(weight, ((0, 0), (0, 4 * words - kw * c), (0, 0)))[:, :, :, None]
    conv = Call("qnn.conv2d_rows", (rows, Constant(pack_conv_weight(weight, 4 * words, ob))),
                {"strides": (sh, sw), "dilation": dh, "channels": c, "width": ow})
    return _flipped_data_term(_lt(conv, f"NCHW{ob}c", "NCHW"), x, w.data, (1, 2, 3), (-1, 1, 1))


INT8_BLOCKS = (16, 8, 4)  # channel blocks of int8 convolutions: whole int32 words (4 channels), as wide as a vector


def int8_block(channels: int, block: int = 16) -> int | None:
    """The widest of INT8_BLOCKS, at most `block`, that divides `channels` (None if none does)."""
    return next((b for b in INT8_BLOCKS if b <= block and channels % b == 0), None)


def int8_conv_blocks(node: Call, block: int = 16) -> tuple[int, int, int] | None:
    """(input block, output block, padded input channels or 0) of a qnn.conv2d in qnn.conv2d_nchwc, or None (keep
    the generic kernel) unless the data is 8-bit, the weight int8 and the channels fit whole words: every block a
    multiple of 4 channels (the int32 lanes of vpdpbusd, each a sum over 4 input channels), within one group.
    Ungrouped convolutions pad their input channels to a multiple of 4 (RGB: 3 -> 4, with zero weights); grouped
    ones (depthwise included) whose groups are not whole words stay generic."""
    x, w = node.args[0], node.args[1]
    if x.type.dtype not in ("uint8", "int8") or w.type.dtype != "int8":
        return None
    o, cg = w.type.shape[:2]
    groups = node.attrs.groups
    padded = 0
    if groups == 1 and cg % 4:
        padded = cg = cg + -cg % 4
    og = o // groups
    ib, ob = int8_block(cg, block), int8_block(og, block)
    return None if ib is None or ob is None else (ib, ob, padded)


def int8_depthwise_block(node: Call, block: int = 16) -> int:
    """The channel block of a depthwise qnn.conv2d (groups = channels = outputs) in qnn.depthwise_conv2d_nchwc, or 0
    (not depthwise, not 8-bit x int8, or channels in no block of INT8_BLOCKS: kept generic). Without it MobileNetV2's
    int8 depthwise convolutions ran NCHW, one int32 multiply per tap and output, half of its time."""
    x, w = node.args[0], node.args[1]
    o, cg = w.type.shape[:2]
    if x.type.dtype not in ("uint8", "int8") or w.type.dtype != "int8" or cg != 1 or node.attrs.groups != o \
            or x.type.shape[1] != o:
        return 0
    return next((b for b in INT8_BLOCKS if b <= block and o % b == 0), 0)


def _blocked_depthwise(w: np.ndarray, b: int) -> np.ndarray:
    """A depthwise weight [C, 1, KH, KW] as [C/b, 1, KH, KW, b] (OIHW{b}o)."""
    c, _, kh, kw = w.shape
    return w.reshape(c // b, b, 1, kh, kw).transpose(0, 2, 3, 4, 1)


def int8_matmul_block(node: Call, vector_width: int) -> int | None:
    """Columns per block of a qnn.matmul's packed weight words (None: keep the generic kernel): its register tile's
    columns (compiler/matmul_schedule.py, int32 lanes as many as float32 ones), or for a single row dense_block's;
    8-bit data and a 2-D int8 weight only."""
    x, w = node.args
    if x.type.dtype not in ("uint8", "int8") or w.type.dtype != "int8" or w.type.ndim != 2:
        return None
    m, n = typical(x.type.shape[-2]), w.type.shape[1]  # (a row count known only at run time: a typical one)
    batch = math.prod(typical(d) for d in x.type.shape[:-2])
    if m == 1 and batch == 1:
        return dense_block(n, vector_width)
    tile = matmul_tile(m, n, batch, vector_width)
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

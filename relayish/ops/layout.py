"""Blocked-layout ops: layout_transform, nn.conv2d_nchwc and nn.dense_pack.

A layout string names each dimension: an upper-case letter is a primal axis, a number followed by a lower-case
letter is the inner block of that axis. "NCHW16c" has shape (N, C/16, H, W, 16); "OIHW8i16o" is a conv weight
with blocks of 8 input and 16 output channels, shape (O/16, I/8, H, W, 8, 16).
"""
from __future__ import annotations

import re

import numpy as np

from .. import te
from ..types import TensorType, is_static_dim
from ..op import OpError, Pattern, register_op, stage_tag
from .common import expect_ndim, pad_stage


def parse_layout(layout: str) -> list[tuple[str, int]]:
    """"NCHW16c" -> [("N", 0), ("C", 0), ("H", 0), ("W", 0), ("c", 16)]: (axis letter, block factor or 0)."""
    dims = re.findall(r"(\d*)([A-Za-z])", layout)
    if "".join(f + a for f, a in dims) != layout:
        raise OpError(f"layout_transform: cannot parse layout {layout!r}")
    out = []
    for factor, axis in dims:
        if axis.isupper() != (factor == ""):
            raise OpError(f"layout_transform: bad layout {layout!r} (blocks are like 16c, primal axes upper-case)")
        out.append((axis, int(factor) if factor else 0))
    primal = [a for a, _ in out if a.isupper()]
    for a, f in out:
        if f and a.upper() not in primal:
            raise OpError(f"layout_transform: block {f}{a} of {layout!r} has no primal axis {a.upper()}")
    return out


def _primal_shape(shape, layout) -> dict[str, int]:
    dims = parse_layout(layout)
    if len(dims) != len(shape):
        raise OpError(f"layout_transform: layout {layout!r} has {len(dims)} dims, tensor shape {tuple(shape)}")
    sizes = {}
    for (axis, factor), extent in zip(dims, shape):
        if factor:
            if extent != factor:
                raise OpError(f"layout_transform: block {factor}{axis} of {layout!r} has extent {extent}")
            continue
        sizes[axis] = sizes.get(axis, 1) * extent
    for (axis, factor), extent in zip(dims, shape):
        if factor:
            sizes[axis.upper()] *= factor
    return sizes


def layout_shape(primal: dict[str, int], layout: str) -> tuple[int, ...]:
    dims = parse_layout(layout)
    blocks = {a.upper(): f for a, f in dims if f}
    shape = []
    for axis, factor in dims:
        if factor:
            shape.append(factor)
        else:
            size = primal[axis]
            b = blocks.get(axis, 1)
            if not is_static_dim(size):  # (blocked layouts block channels, which are static)
                if b != 1:
                    raise OpError(f"layout_transform: axis {axis} of size {size}, known only at run time, cannot be "
                                  f"blocked by {b}")
            elif size % b:
                raise OpError(f"layout_transform: axis {axis} of size {size} is not divisible by block {b}")
            shape.append(size // b)
    return tuple(shape)


def _lt_infer(arg_types, attrs):
    x, = arg_types
    src, dst = attrs.src_layout, attrs.dst_layout
    primal = _primal_shape(x.shape, src)
    if sorted(primal) != sorted(a for a, f in parse_layout(dst) if not f):
        raise OpError(f"layout_transform: {src!r} and {dst!r} do not have the same axes")
    return TensorType(layout_shape(primal, dst), x.dtype)


def _lt_ref(x, src_layout, dst_layout):
    # to primal (all blocks merged, axes in src order), then split for dst
    src = parse_layout(src_layout)
    primal_order = [a for a, f in src if not f]
    sizes = _primal_shape(x.shape, src_layout)
    # merge: move each block next to its primal axis
    perm, shape = [], []
    for i, (a, f) in enumerate(src):
        if f:
            continue
        perm.append(i)
        inner = [j for j, (b, g) in enumerate(src) if g and b.upper() == a]
        perm.extend(inner)
        shape.append(sizes[a])
    primal = x.transpose(perm).reshape(shape)
    dst = parse_layout(dst_layout)
    blocks = {a.upper(): f for a, f in dst if f}
    split_shape, names = [], []
    for a in primal_order:
        b = blocks.get(a, 0)
        if b:
            split_shape += [sizes[a] // b, b]
            names += [a, a.lower()]
        else:
            split_shape.append(sizes[a])
            names.append(a)
    split = primal.reshape(split_shape)
    order = [names.index(a if not f else a.lower()) for a, f in dst]
    return np.ascontiguousarray(split.transpose(order))


# into a blocked layout its lanes are channels, read from the source layout by division and remainder
LAYOUT_TRANSFORM_TAG = stage_tag("layout_transform", gathers_lanes=True)


def _lt_compute(inputs, attrs, out_type):
    x, = inputs
    src, dst = parse_layout(attrs.src_layout), parse_layout(attrs.dst_layout)
    dst_blocks = {a.upper(): f for a, f in dst if f}
    src_blocks = {a.upper(): f for a, f in src if f}

    def fcompute(*idx):
        value = {}
        for (a, f), i in zip(dst, idx):
            if not f:
                value[a] = value.get(a, 0) + i * dst_blocks.get(a, 1)
        for (a, f), i in zip(dst, idx):
            if f:
                value[a.upper()] = value[a.upper()] + i
        src_idx = []
        for a, f in src:
            if f:
                src_idx.append(value[a.upper()] % f)
            else:
                b = src_blocks.get(a, 1)
                src_idx.append(value[a] // b if b > 1 else value[a])
        return x[tuple(src_idx)]

    return te.compute(out_type.shape, fcompute, name="layout_transform", tag=LAYOUT_TRANSFORM_TAG)


register_op("layout_transform", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_lt_infer,
            ref=_lt_ref, compute=_lt_compute, attrs={"src_layout": "NCHW", "dst_layout": "NCHW"},
            flops=lambda a, attrs, o: 0.0,
            doc="x from src_layout to dst_layout (NCHW <-> NCHW16c, OIHW -> OIHW{i}i{o}o, NK -> NK{n}n)")


# ---------------------------------------------------------------------------------------------- conv2d_nchwc

def _conv_out(size, k, stride, dil, pad0, pad1):
    return (size + pad0 + pad1 - dil * (k - 1) - 1) // stride + 1


def _cn_infer(arg_types, attrs):
    x, w = arg_types
    expect_ndim("nn.conv2d_nchwc", x, 5, "data")
    expect_ndim("nn.conv2d_nchwc", w, 6, "weight")
    n, cb, h, wd, ib = x.shape
    ob_n, icb, kh, kw, wib, ob = w.shape
    g = attrs.groups
    if g < 1 or ob_n % g:
        raise OpError(f"nn.conv2d_nchwc: groups={g} must divide the {ob_n} output channel blocks of weight {w.shape}")
    if (icb * g, wib) != (cb, ib):
        raise OpError(f"nn.conv2d_nchwc: weight blocks {w.shape} do not match data blocks {x.shape} (groups={g})")
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    pt, pl, pb, pr = attrs.padding
    oh, ow = _conv_out(h, kh, sh, dh, pt, pb), _conv_out(wd, kw, sw, dw, pl, pr)
    if any(is_static_dim(d) and d <= 0 for d in (oh, ow)):
        raise OpError(f"nn.conv2d_nchwc: empty output ({oh}x{ow}) for input {x.shape}")
    return TensorType((n, ob_n, oh, ow, ob), x.dtype)


def _cn_ref(x, w, strides, padding, dilation, groups=1):
    if groups > 1:  # each group is a groups=1 convolution of its own channel blocks
        icb, ocb = w.shape[1], w.shape[0] // groups
        return np.concatenate([_cn_ref(x[:, k * icb:(k + 1) * icb], w[k * ocb:(k + 1) * ocb], strides, padding,
                                       dilation) for k in range(groups)], axis=1)
    n, cb, h, wd, ib = x.shape
    ob_n, _, kh, kw, _, ob = w.shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = _conv_out(h, kh, sh, dh, pt, pb), _conv_out(wd, kw, sw, dw, pl, pr)
    out = np.zeros((n, ob_n, oh, ow, ob), dtype=np.float64)
    for r in range(kh):
        for s in range(kw):
            patch = xp[:, :, r * dh: r * dh + sh * (oh - 1) + 1: sh, s * dw: s * dw + sw * (ow - 1) + 1: sw, :]
            # patch: n, cb, oh, ow, ib ; w[:, :, r, s]: ob_n, cb, ib, ob
            out += np.einsum("ncyxi,kcio->nkyxo", patch, w[:, :, r, s], optimize=True)
    return out.astype(x.dtype)


CONV2D_NCHWC_TAG = stage_tag("conv2d_nchwc", buffered_padding=True)


def _cn_compute(inputs, attrs, out_type):
    x, w = inputs
    n, cb, h, wd, ib = x.shape
    ob_n, icb, kh, kw, _, ob = w.shape
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    pt, pl, pb, pr = attrs.padding
    if any(attrs.padding):
        data = pad_stage(x, {2: pt, 3: pl}, (n, cb, h + pt + pb, wd + pl + pr, ib), 0.0)
    else:
        data = x
    ric = te.reduce_axis(icb, "ric")
    rii = te.reduce_axis(ib, "rii")
    ry = te.reduce_axis(kh, "ry")
    rx = te.reduce_axis(kw, "rx")
    per_group = ob_n // attrs.groups  # output channel blocks per group

    def in_block(o):  # the data block of reduction block ric for output block o (groups=1: ric itself, so that
        # the input pixel stays independent of o and the default schedule reuses it across output blocks)
        return ric if attrs.groups == 1 else (o // per_group) * icb + ric
    return te.compute(
        out_type.shape,
        lambda a, o, y, xx, oi: te.sum(data[a, in_block(o), y * sh + ry * dh, xx * sw + rx * dw, rii]
                                       * w[o, ric, ry, rx, rii, oi], (ric, ry, rx, rii)),
        name="conv2d_nchwc", tag=CONV2D_NCHWC_TAG)


def _cn_flops(arg_types, attrs, out_type):
    x, w = arg_types
    _, cb, kh, kw, ib, _ = w.shape
    return 2.0 * out_type.size * cb * ib * kh * kw


register_op("nn.conv2d_nchwc", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv", infer=_cn_infer,
            ref=_cn_ref, compute=_cn_compute, flops=_cn_flops,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
            doc="conv2d in blocked layouts: x [N, C/ib, H, W, ib], w [O/ob, C/groups/ib, KH, KW, ib, ob]; output "
                "block o belongs to group o // (O/ob/groups), which reads data blocks [g, g+1) * C/groups/ib")


# ---------------------------------------------------------------------------------------------- dense_pack

def _dp_infer(arg_types, attrs):
    x, w = arg_types
    expect_ndim("nn.dense_pack", x, 2, "data")
    expect_ndim("nn.dense_pack", w, 3, "weight")
    if w.shape[1] != x.shape[1]:
        raise OpError(f"nn.dense_pack: weight {w.shape} has K={w.shape[1]} but data {x.shape} has K={x.shape[1]}")
    return TensorType((x.shape[0], packed_units("nn.dense_pack", w.shape, attrs.units)), x.dtype)


def packed_units(op: str, w_shape: tuple, units: int) -> int:
    """The output columns of a packed weight [N/nb, K, nb]: all of them (units=0), or the first `units`, the
    rest of the last block being zero padding (between (N/nb - 1) * nb and N/nb * nb)."""
    blocks, _, nb = w_shape
    if not units:
        return blocks * nb
    if not (blocks - 1) * nb < units <= blocks * nb:
        raise OpError(f"{op}: units={units} must leave only the last of {blocks} blocks of {nb} columns partial")
    return units


def _dp_ref(x, w, units=0):
    nb_n, k, nb = w.shape
    y = (x.astype(np.float64) @ w.transpose(1, 0, 2).reshape(k, nb_n * nb)).astype(x.dtype)
    return y[:, :units] if units else y


def _dp_compute(inputs, attrs, out_type):
    x, w = inputs
    nb = w.shape[2]
    rk = te.reduce_axis(x.shape[1], "rk")
    return te.compute(out_type.shape, lambda m, j: te.sum(x[m, rk] * w[j // nb, rk, j % nb], rk),
                      name="dense_pack", tag="dense_pack")


register_op("nn.dense_pack", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="dense", infer=_dp_infer,
            ref=_dp_ref, compute=_dp_compute, flops=lambda a, attrs, o: 2.0 * o.size * a[0].shape[1],
            attrs={"units": 0},
            doc="dense with the weight in blocks of output features: x [M, K], w [N/b, K, b] (units: the first N "
                "columns only, the last block zero-padded; 0: all)")

"""Per-group channel padding: nn.pad_channels, nn.unpad_channels and nn.zero_channel_padding.

A value whose channels come in G groups of c (the groups of the grouped convolutions that write or read it) is
stored with each group padded to p >= c channels, so that every group fills whole blocks of its blocked layout
NCHW{b}c (b divides p): ShuffleNet's 68 channels in 4 groups of 17 become 4 x 24 = 96 channels in 8-channel
blocks, and a grouped convolution reads and writes whole vectors instead of blocks of 1 channel. Logical channel l
sits at physical position (l // c) * p + l % c; the other positions are padding. compiler/passes/channel_maps.py
decides the groups and the padding, the layout pass inserts these ops at the edges of the padded values.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType
from ..op import REQUIRED, OpError, Pattern, register_op


def _channels_per_group(op: str, total: int, groups: int, what: str) -> int:
    if groups < 1 or total % groups:
        raise OpError(f"{op}: groups={groups} must divide the {total} {what} channels")
    return total // groups


def _pad_infer(arg_types, attrs):
    x, = arg_types
    if x.ndim < 2:
        raise OpError(f"nn.pad_channels: data must have a channel axis (axis 1), got shape {x.shape}")
    c = _channels_per_group("nn.pad_channels", x.shape[1], attrs.groups, "input")
    if attrs.padded < c:
        raise OpError(f"nn.pad_channels: padded={attrs.padded} is less than the {c} channels per group")
    return TensorType((x.shape[0], attrs.groups * attrs.padded) + x.shape[2:], x.dtype)


def _pad_ref(x, groups, padded):
    n, c = x.shape[0], x.shape[1] // groups
    grouped = x.reshape((n, groups, c) + x.shape[2:])
    pads = [(0, 0), (0, 0), (0, padded - c)] + [(0, 0)] * (x.ndim - 2)
    return np.ascontiguousarray(np.pad(grouped, pads).reshape((n, groups * padded) + x.shape[2:]))


def _pad_compute(inputs, attrs, out_type):
    x, = inputs
    c, p = x.shape[1] // attrs.groups, attrs.padded

    def body(n, j, *rest):
        k, r = j // p, j % p
        read = x[(n, k * c + te.min_(r, c - 1)) + rest]  # clamped: the select's other arm may be evaluated
        return te.select(r < c, read, te.const(0.0, x.dtype))
    return te.compute(out_type.shape, body, name="pad_channels", tag="injective")


register_op("nn.pad_channels", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_pad_infer,
            ref=_pad_ref, compute=_pad_compute, attrs={"groups": REQUIRED, "padded": REQUIRED},
            flops=lambda arg_types, attrs, out: 0.0,
            doc="channels (axis 1) in `groups` equal groups, each padded with zeros to `padded` channels")


def _unpad_infer(arg_types, attrs):
    x, = arg_types
    if x.ndim < 2:
        raise OpError(f"nn.unpad_channels: data must have a channel axis (axis 1), got shape {x.shape}")
    p = _channels_per_group("nn.unpad_channels", x.shape[1], attrs.groups, "input")
    if not 1 <= attrs.channels <= p:
        raise OpError(f"nn.unpad_channels: channels={attrs.channels} must be in [1, {p}] (the padded channels per "
                      f"group)")
    return TensorType((x.shape[0], attrs.groups * attrs.channels) + x.shape[2:], x.dtype)


def _unpad_ref(x, groups, channels):
    n, p = x.shape[0], x.shape[1] // groups
    grouped = x.reshape((n, groups, p) + x.shape[2:])[:, :, :channels]
    return np.ascontiguousarray(grouped.reshape((n, groups * channels) + x.shape[2:]))


def _unpad_compute(inputs, attrs, out_type):
    x, = inputs
    c, p = attrs.channels, x.shape[1] // attrs.groups
    if attrs.groups == 1:  # the first c channels: an index affine in j (a transposing copy's tile needs it)
        return te.compute(out_type.shape, lambda n, j, *rest: x[(n, j) + rest], name="unpad_channels",
                          tag="injective")
    return te.compute(out_type.shape, lambda n, j, *rest: x[(n, (j // c) * p + j % c) + rest],
                      name="unpad_channels", tag="injective")


register_op("nn.unpad_channels", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_unpad_infer,
            ref=_unpad_ref, compute=_unpad_compute, attrs={"groups": REQUIRED, "channels": REQUIRED},
            flops=lambda arg_types, attrs, out: 0.0,
            doc="the inverse of nn.pad_channels: the first `channels` of each of `groups` equal channel groups")


# ---------------------------------------------------------------------------------------------- maps as attributes

# A gather (nn.channel_shuffle, nn.concat_blocked) may read and write padded values directly: its `in_map` /
# `out_map` attribute is () (every channel is real) or (groups, channels, padded) as above.


def check_map(op: str, what: str, cmap, physical: int) -> int:
    """The logical channels of a value of `physical` channels stored with channel map `cmap`; OpError if the
    map does not fit."""
    if not cmap:
        return physical
    try:
        groups, channels, padded = (int(v) for v in cmap)
    except (TypeError, ValueError):
        raise OpError(f"{op}: {what} must be () or (groups, channels, padded), got {cmap!r}") from None
    if groups < 1 or not 1 <= channels <= padded or groups * padded != physical:
        raise OpError(f"{op}: {what} {tuple(cmap)} does not describe {physical} physical channels")
    return groups * channels


def to_physical(logical, cmap):
    """The physical position of a logical channel (an int or a te index expression)."""
    if not cmap:
        return logical
    _, c, p = cmap
    return (logical // c) * p + logical % c


def to_logical(physical, cmap):
    """(logical channel, condition that it is real or None) of a physical position; the channel of a padded
    position is clamped to its group's last real one (a read that is not taken must stay in bounds)."""
    if not cmap:
        return physical, None
    _, c, p = cmap
    r = physical % p
    return (physical // p) * c + te.min_(r, c - 1), r < c


def map_array(x, cmap, unpad: bool):
    """An NCHW array's channels from physical to logical (unpad) or back (zeros in the padding)."""
    if not cmap:
        return x
    groups, channels, padded = cmap
    return _unpad_ref(x, groups, channels) if unpad else _pad_ref(x, groups, padded)


# ---------------------------------------------------------------------------------------------- zeroing


def _zero_infer(arg_types, attrs):
    x, = arg_types
    if x.ndim != 5:
        raise OpError(f"nn.zero_channel_padding: data must be 5-D (N, C/b, H, W, b), got shape {x.shape}")
    p = _channels_per_group("nn.zero_channel_padding", x.shape[1] * x.shape[4], attrs.groups, "physical")
    if not 1 <= attrs.channels <= p:
        raise OpError(f"nn.zero_channel_padding: channels={attrs.channels} must be in [1, {p}]")
    return x


def _zero_ref(x, groups, channels):
    n, cb, h, w, b = x.shape
    keep = (np.arange(cb * b) % (cb * b // groups) < channels).reshape(1, cb, 1, 1, b)
    return np.where(keep, x, np.zeros((), x.dtype))


def _zero_compute(inputs, attrs, out_type):
    x, = inputs
    b = x.shape[4]
    p = x.shape[1] * b // attrs.groups
    return te.compute(out_type.shape, lambda n, cb, y, xx, i: te.select(
        (cb * b + i) % p < attrs.channels, x[n, cb, y, xx, i], te.const(0.0, x.dtype)),
        name="zero_channel_padding", tag="elemwise")


register_op("nn.zero_channel_padding", inputs=1, pattern=Pattern.ELEMWISE, op_class="elementwise",
            infer=_zero_infer, ref=_zero_ref, compute=_zero_compute, attrs={"groups": REQUIRED, "channels": REQUIRED},
            flops=lambda arg_types, attrs, out: 0.0,
            doc="a blocked x (N, C/b, H, W, b) whose C channels are `groups` groups padded per group: the channels "
                "past the first `channels` of each group set to 0 (a padded convolution's output, so that its "
                "padding is 0 and not 0 x Inf)")

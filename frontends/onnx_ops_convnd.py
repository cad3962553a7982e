"""Converters of the convolution and pooling windows of every spatial rank: Conv, MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool.

- 2-D (a 4-D NCHW input): the 2-D converters of frontends/onnx_ops.py, unchanged (NCHWc, Winograd downstream).
- 1-D (a 3-D NCL input): the same 2-D ops on a (N, C, 1, L) view: kernel (1, k), strides (1, s), dilations
  (1, d), pads (0, b, 0, e); a window of height 1 adds no padding on that axis in any auto_pad mode.
- 3-D (a 5-D NCDHW input): relayish/ops/convnd.py's direct computes; the global pools are mean / max reductions.
"""
from __future__ import annotations

import math

from relayish import Expr, call

from . import onnx_ops
from .onnx_ops import _binary, _flag, _reshape, _shape, converter
from .onnx_values import ConversionError


def _spatial_rank(x: Expr, op: str) -> int:
    rank = len(_shape(x)) - 2
    if rank not in (1, 2, 3):
        raise ConversionError(f"{op} takes a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) input, got "
                              f"shape {_shape(x)}")
    return rank


def _to_2d(x: Expr) -> Expr:
    """(N, C, L) -> (N, C, 1, L)."""
    n, c, length = _shape(x)
    return _reshape(x, (n, c, 1, length))


def _from_2d(y: Expr) -> Expr:
    n, c, _, length = _shape(y)
    return _reshape(y, (n, c, length))


def _window_1d_as_2d(kernel_shape, strides, dilations, pads):
    """1-D window attributes as those of a 2-D window of height 1 (None stays None: the 2-D defaults)."""
    def lift(values, pad_value):
        if values is None:
            return None
        if len(values) != 1:
            raise ConversionError(f"a 1-D window takes 1 value per attribute, got {tuple(values)}")
        return (pad_value, values[0])
    if pads is not None:
        if len(pads) != 2:
            raise ConversionError(f"pads must have 2 values for a 1-D window, got {tuple(pads)}")
        pads = (0, pads[0], 0, pads[1])
    return lift(kernel_shape, 1), lift(strides, 1), lift(dilations, 1), pads


def _window_3d(x, kernel_shape, strides, dilations, auto_pad, pads) -> dict:
    """The attrs of a 3-D window: strides, dilation and padding (front, top, left, back, bottom, right)."""
    strides = tuple(strides) if strides is not None else (1, 1, 1)
    dilations = tuple(dilations) if dilations is not None else (1, 1, 1)
    if len(kernel_shape) != 3 or len(strides) != 3 or len(dilations) != 3:
        raise ConversionError(f"kernel_shape, strides and dilations must have 3 values for a 3-D window, got "
                              f"{tuple(kernel_shape)}, {strides}, {dilations}")
    for name, values in (("kernel_shape", kernel_shape), ("strides", strides), ("dilations", dilations),
                         ("pads", pads or ())):
        if any(abs(v) >= 2**31 for v in values):
            raise ConversionError(f"attribute {name} {tuple(values)} has a value beyond the int32 range")
    taps = math.prod(max(int(k), 1) for k in kernel_shape)
    if taps > onnx_ops.MAX_WINDOW_TAPS:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} is a window of {taps} taps; at most "
                              f"{onnx_ops.MAX_WINDOW_TAPS} (2^24) are supported")
    if auto_pad != "NOTSET" and pads is not None:
        raise ConversionError(f"auto_pad={auto_pad} together with explicit pads {tuple(pads)}: ONNX allows "
                              f"one or the other")
    if auto_pad == "NOTSET":
        padding = tuple(pads) if pads is not None else (0,) * 6
        if len(padding) != 6:
            raise ConversionError(f"pads must have 6 values for a 3-D window, got {padding}")
    elif auto_pad == "VALID":
        padding = (0,) * 6
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(_shape(x)[2:], kernel_shape, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
        padding = tuple(begin + end)
    else:
        raise ConversionError(f"unknown auto_pad {auto_pad!r}")
    return dict(strides=strides, dilation=dilations, padding=padding)


@converter("Conv")
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    rank = _spatial_rank(x, "Conv")
    if len(_shape(w)) != rank + 2:
        raise ConversionError(f"weight shape {_shape(w)} does not match a {rank}-D convolution of input shape "
                              f"{_shape(x)}")
    if rank == 2:
        return onnx_ops.conv(x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
                             kernel_shape=kernel_shape, pads=pads, strides=strides)
    kernel = _shape(w)[2:]
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {_shape(w)}")
    if rank == 1:
        kernel_2d, strides, dilations, pads = _window_1d_as_2d(kernel, strides, dilations, pads)
        w2 = _reshape(w, _shape(w)[:2] + (1,) + kernel)
        y = onnx_ops.conv(_to_2d(x), w2, b, auto_pad=auto_pad, dilations=dilations, group=group,
                          kernel_shape=kernel_2d, pads=pads, strides=strides)
        return _from_2d(y)
    y = call("nn.conv3d", x, w, groups=group, **_window_3d(x, kernel, strides, dilations, auto_pad, pads))
    if b is None:
        return y
    if _shape(b) != (_shape(w)[0],):
        raise ConversionError(f"bias shape {_shape(b)} does not match {_shape(w)[0]} output channels")
    return _binary("add", y, _reshape(b, (_shape(b)[0], 1, 1, 1)))


def _pool(op: str, x, kernel_shape, strides, dilations, auto_pad, pads, pool_2d, **attrs):
    """A pooling window of any rank: pool_2d(x, kernel_shape, strides, dilations, pads) for 1-D and 2-D."""
    rank = _spatial_rank(x, op)
    if len(kernel_shape) != rank:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not have {rank} values for input shape "
                              f"{_shape(x)}")
    if rank == 2:
        return pool_2d(x, kernel_shape, strides, dilations, pads)
    if rank == 1:
        kernel_shape, strides, dilations, pads = _window_1d_as_2d(kernel_shape, strides, dilations, pads)
        return _from_2d(pool_2d(_to_2d(x), kernel_shape, strides, dilations, pads))
    name = "nn.max_pool3d" if op == "MaxPool" else "nn.avg_pool3d"
    return call(name, x, pool_size=tuple(kernel_shape),
                **_window_3d(x, kernel_shape, strides, dilations, auto_pad, pads), **attrs)


@converter("MaxPool")
def max_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0,
             strides=None):
    def pool_2d(x4, k, s, d, p):
        return onnx_ops.max_pool(x4, kernel_shape=k, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=d, pads=p,
                                 storage_order=storage_order, strides=s)
    return _pool("MaxPool", x, kernel_shape, strides, dilations, auto_pad, pads, pool_2d,
                 ceil_mode=_flag(ceil_mode, "ceil_mode"))


@converter("AveragePool")
def avg_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, pads=None,
             strides=None):
    def pool_2d(x4, k, s, d, p):
        return onnx_ops.avg_pool(x4, kernel_shape=k, auto_pad=auto_pad, ceil_mode=ceil_mode,
                                 count_include_pad=count_include_pad, dilations=d, pads=p, strides=s)
    return _pool("AveragePool", x, kernel_shape, strides, dilations, auto_pad, pads, pool_2d,
                 ceil_mode=_flag(ceil_mode, "ceil_mode"), count_include_pad=_flag(count_include_pad,
                                                                                 "count_include_pad"))


def _global_pool(op: str, reduce_op: str, x, pool_2d):
    rank = _spatial_rank(x, op)
    if rank == 2:
        return pool_2d(x)
    if rank == 1:
        return _from_2d(pool_2d(_to_2d(x)))
    if x.type.dtype != "float32":
        raise ConversionError(f"{op} of a {x.type.dtype} tensor is not supported (float32 only)")
    return call(reduce_op, x, axes=(2, 3, 4), keepdims=True)


@converter("GlobalAveragePool")
def global_avg_pool(x):
    return _global_pool("GlobalAveragePool", "mean", x, onnx_ops.global_avg_pool)


@converter("GlobalMaxPool")
def global_max_pool(x):
    return _global_pool("GlobalMaxPool", "max", x, onnx_ops.global_max_pool)

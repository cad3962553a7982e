"""Converters of the convolution and pooling windows of every spatial rank: Conv, ConvTranspose, MaxPool,
AveragePool, GlobalAveragePool, GlobalMaxPool, LpPool, GlobalLpPool, MaxUnpool; and the normalizations over
channels and groups written with existing ops: InstanceNormalization, GroupNormalization,
MeanVarianceNormalization, LpNormalization.

- 2-D (a 4-D NCHW input): relayish's nn.conv2d and 2-D pools (conv2d, max_pool2d... below; NCHWc and
  Winograd downstream).
- 1-D (a 3-D NCL input): the same 2-D ops on a (N, C, 1, L) view: kernel (1, k), strides (1, s), dilations
  (1, d), pads (0, b, 0, e); a window of height 1 adds no padding on that axis in any auto_pad mode.
- 3-D (a 5-D NCDHW input): relayish/ops/convnd.py's direct computes; the global pools are mean / max reductions.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, call, const
from relayish.prim_expr import PrimExpr
from relayish.ops.nn import pool_out_size
from relayish.types import dim, is_static_dim

from ..builders import MAX_WINDOW_TAPS, binary, flag, fold, normalize_axis, reshape, shape_of, window_attrs
from ..registry import converter
from ..values import ConversionError, int_list_input


def _spatial_rank(x: Expr, op: str) -> int:
    rank = len(shape_of(x)) - 2
    if rank not in (1, 2, 3):
        raise ConversionError(f"{op} takes a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D (N, C, D, H, W) input, got "
                              f"shape {shape_of(x)}")
    return rank


def _to_2d(x: Expr) -> Expr:
    """(N, C, L) -> (N, C, 1, L)."""
    n, c, length = shape_of(x)
    return reshape(x, (n, c, 1, length))


def _from_2d(y: Expr) -> Expr:
    n, c, _, length = shape_of(y)
    return reshape(y, (n, c, length))


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


# ---- the 2-D windows: nn.conv2d and the 2-D pools (NCHWc layouts and Winograd downstream) ----

def _expect_spatial_2d(x: Expr, op: str):
    if len(shape_of(x)) != 4:
        raise ConversionError(f"only 2-D {op} (a 4-D NCHW input) is supported, got input shape {shape_of(x)}")


def conv2d(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    _expect_spatial_2d(x, "Conv")
    kernel = shape_of(w)[2:]
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {shape_of(w)}")
    y = call("nn.conv2d", x, w, groups=group, **window_attrs(x, kernel, strides, dilations, auto_pad, pads))
    if b is None:
        return y
    if shape_of(b) != (shape_of(w)[0],):
        raise ConversionError(f"bias shape {shape_of(b)} does not match {shape_of(w)[0]} output channels")
    return binary("add", y, reshape(b, (shape_of(b)[0], 1, 1)))


def _overhanging_window(x, kernel_shape, window: dict) -> dict:
    """A window larger than its padded input (a 2x2 / 2 pool of a 1x1 map) as onnxruntime and onnx's shape
    inference take it: one output, the window clipped to the input (its trailing padding extended to the window
    and, as all padding, outside every max and average); onnx's reference implementation gives no output."""
    padding = list(window["padding"])
    for axis, (size, k, s, d) in enumerate(zip(shape_of(x)[2:], kernel_shape, window["strides"], window["dilation"])):
        if isinstance(size, PrimExpr):  # a size known at run time: windows past it are not decided here
            continue
        short = (k - 1) * d + 1 - (size + padding[axis] + padding[axis + 2])
        if 0 < short < s:
            padding[axis + 2] += short
    return dict(window, padding=tuple(padding))


def max_pool2d(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0,
               strides=None):
    _expect_spatial_2d(x, "MaxPool")
    window = _overhanging_window(x, kernel_shape, window_attrs(x, kernel_shape, strides, dilations, auto_pad, pads))
    return call("nn.max_pool2d", x, pool_size=tuple(kernel_shape), ceil_mode=flag(ceil_mode, "ceil_mode"), **window)


def avg_pool2d(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
               pads=None, strides=None):
    _expect_spatial_2d(x, "AveragePool")
    window = window_attrs(x, kernel_shape, strides, dilations, auto_pad, pads)
    if not flag(count_include_pad, "count_include_pad"):  # (counted, the extension would change the divisor)
        window = _overhanging_window(x, kernel_shape, window)
    return call("nn.avg_pool2d", x, pool_size=tuple(kernel_shape), ceil_mode=flag(ceil_mode, "ceil_mode"),
                count_include_pad=flag(count_include_pad, "count_include_pad"), **window)


def global_avg_pool2d(x):
    _expect_spatial_2d(x, "GlobalAveragePool")
    return call("nn.global_avg_pool2d", x)


def global_max_pool2d(x):
    _expect_spatial_2d(x, "GlobalMaxPool")
    if not x.type.is_static:  # a window of a size known only at run time: the max over H and W (exact in any order)
        return call("max", x, axes=(2, 3), keepdims=True)
    return call("nn.max_pool2d", x, pool_size=shape_of(x)[2:])


# ---- Conv and pools of every rank ----

@converter("Conv")
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    rank = _spatial_rank(x, "Conv")
    if len(shape_of(w)) != rank + 2:
        raise ConversionError(f"weight shape {shape_of(w)} does not match a {rank}-D convolution of input shape "
                              f"{shape_of(x)}")
    if rank == 2:
        return conv2d(x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
                             kernel_shape=kernel_shape, pads=pads, strides=strides)
    kernel = shape_of(w)[2:]
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {shape_of(w)}")
    if rank == 1:
        kernel_2d, strides, dilations, pads = _window_1d_as_2d(kernel, strides, dilations, pads)
        w2 = reshape(w, shape_of(w)[:2] + (1,) + kernel)
        y = conv2d(_to_2d(x), w2, b, auto_pad=auto_pad, dilations=dilations, group=group,
                          kernel_shape=kernel_2d, pads=pads, strides=strides)
        return _from_2d(y)
    y = call("nn.conv3d", x, w, groups=group, **window_attrs(x, kernel, strides, dilations, auto_pad, pads))
    if b is None:
        return y
    if shape_of(b) != (shape_of(w)[0],):
        raise ConversionError(f"bias shape {shape_of(b)} does not match {shape_of(w)[0]} output channels")
    return binary("add", y, reshape(b, (shape_of(b)[0], 1, 1, 1)))


def _pool(op: str, x, kernel_shape, strides, dilations, auto_pad, pads, pool_2d, **attrs):
    """A pooling window of any rank: pool_2d(x, kernel_shape, strides, dilations, pads) for 1-D and 2-D."""
    rank = _spatial_rank(x, op)
    if len(kernel_shape) != rank:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not have {rank} values for input shape "
                              f"{shape_of(x)}")
    if op == "MaxPool" and not x.type.dtype.startswith(("float", "bfloat")) and \
            not (rank == 2 and x.type.dtype in ("uint8", "int8")):  # (2-D 8-bit: the blocked nn.max_pool2d)
        return _integer_max_pool(x, kernel_shape, strides, dilations, auto_pad, pads, **attrs)
    if rank == 2:
        return pool_2d(x, kernel_shape, strides, dilations, pads)
    if rank == 1:
        kernel_shape, strides, dilations, pads = _window_1d_as_2d(kernel_shape, strides, dilations, pads)
        return _from_2d(pool_2d(_to_2d(x), kernel_shape, strides, dilations, pads))
    name = "nn.max_pool3d" if op == "MaxPool" else "nn.avg_pool3d"
    return call(name, x, pool_size=tuple(kernel_shape),
                **window_attrs(x, kernel_shape, strides, dilations, auto_pad, pads), **attrs)


def _as_3d_window(x, kernel_shape, strides, dilations, auto_pad, pads):
    """x of any spatial rank as a 5-D view with leading spatial dims of 1 (windows of 1 there: no padding in any
    auto_pad mode), and the 3-D window attrs over it."""
    shape = shape_of(x)
    extra = 5 - len(shape)
    if pads is not None and len(pads) != 2 * (len(shape) - 2):
        raise ConversionError(f"pads {tuple(pads)} must have {2 * (len(shape) - 2)} values for input shape {shape}")
    lift = lambda values, fill: None if values is None else (fill,) * extra + tuple(values)  # noqa: E731
    if pads is not None:
        half = len(pads) // 2
        pads = lift(pads[:half], 0) + lift(pads[half:], 0)
    x5 = reshape(x, shape[:2] + (1,) * extra + shape[2:])
    return x5, dict(pool_size=lift(kernel_shape, 1), **window_attrs(x5, lift(kernel_shape, 1), lift(strides, 1),
                                                                  lift(dilations, 1), auto_pad, pads))


def _from_3d(y, like):
    return reshape(y, shape_of(like)[:2] + shape_of(y)[7 - len(shape_of(like)):])


def _integer_max_pool(x, kernel_shape, strides, dilations, auto_pad, pads, **attrs):
    """MaxPool of an integer tensor of any rank: the 3-D op (the 2-D ones compute on floats and 8-bit ints)."""
    x5, window = _as_3d_window(x, kernel_shape, strides, dilations, auto_pad, pads)
    return _from_3d(call("nn.max_pool3d", x5, **window, **attrs), x)


@converter("MaxPool")
def max_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0,
             strides=None, _outputs=1):
    """Y as 2-D, 1-D or 3-D pooling; the Indices output (opset 8), when the node has it, from
    nn.max_pool3d_argmax over a 5-D view."""
    def pool_2d(x4, k, s, d, p):
        return max_pool2d(x4, kernel_shape=k, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=d, pads=p,
                                 storage_order=storage_order, strides=s)
    y = _pool("MaxPool", x, kernel_shape, strides, dilations, auto_pad, pads, pool_2d,
              ceil_mode=flag(ceil_mode, "ceil_mode"))
    if _outputs < 2:
        return y
    order = flag(storage_order, "storage_order")
    if order and len(shape_of(x)) == 5:
        raise ConversionError("storage_order=1 (column-major Indices) of a 3-D MaxPool is not supported")
    x5, window = _as_3d_window(x, kernel_shape, strides, dilations, auto_pad, pads)
    indices = call("nn.max_pool3d_argmax", x5, ceil_mode=flag(ceil_mode, "ceil_mode"), storage_order=int(order),
                   **window)
    return y, _from_3d(indices, x)


@converter("AveragePool")
def avg_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, pads=None,
             strides=None):
    def pool_2d(x4, k, s, d, p):
        return avg_pool2d(x4, kernel_shape=k, auto_pad=auto_pad, ceil_mode=ceil_mode,
                                 count_include_pad=count_include_pad, dilations=d, pads=p, strides=s)
    return _pool("AveragePool", x, kernel_shape, strides, dilations, auto_pad, pads, pool_2d,
                 ceil_mode=flag(ceil_mode, "ceil_mode"), count_include_pad=flag(count_include_pad,
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
    return _global_pool("GlobalAveragePool", "mean", x, global_avg_pool2d)


@converter("GlobalMaxPool")
def global_max_pool(x):
    return _global_pool("GlobalMaxPool", "max", x, global_max_pool2d)


def _transpose_geometry(x, w, auto_pad, dilations, output_padding, output_shape, pads, strides):
    """ConvTranspose's (pad_begin, output_size) per spatial axis, as onnxruntime computes them. The full output
    of an axis is (in - 1) * stride + (k - 1) * dilation + 1 + output_padding; pads (or auto_pad, or output_shape)
    cut it at the front and the back. An output_shape longer than the full output extends it with zeros."""
    rank = len(shape_of(x)) - 2
    in_sp, kernel = shape_of(x)[2:], shape_of(w)[2:]

    def per_axis(values, name, default):
        values = tuple(values) if values is not None else (default,) * rank
        if len(values) != rank:
            raise ConversionError(f"attribute {name} {values} must have {rank} values for input shape {shape_of(x)}")
        return values
    strides, dilations = per_axis(strides, "strides", 1), per_axis(dilations, "dilations", 1)
    output_padding = per_axis(output_padding, "output_padding", 0)
    if any(v < 1 for v in strides + dilations) or any(v < 0 for v in output_padding):
        raise ConversionError(f"strides {strides} and dilations {dilations} must be >= 1, output_padding "
                              f"{output_padding} >= 0")
    full = [(i - 1) * s + (k - 1) * d + 1 + a for i, s, k, d, a in zip(in_sp, strides, kernel, dilations,
                                                                       output_padding)]
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ConversionError(f"unknown auto_pad {auto_pad!r}")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            output_shape = tuple(output_shape)
            if len(output_shape) == rank + 2:  # (N, C, spatial...) also seen in models
                output_shape = output_shape[2:]
            output_shape = per_axis(output_shape, "output_shape", 0)
        else:
            output_shape = tuple(i * s for i, s in zip(in_sp, strides))
            if any(f < o for f, o in zip(full, output_shape)):  # onnxruntime then returns the full output instead
                raise ConversionError(f"auto_pad={auto_pad} with a full output {tuple(full)} smaller than input "
                                      f"* strides {output_shape} (a kernel shorter than the stride) is not supported")
        if any(o < 1 for o in output_shape):
            raise ConversionError(f"output_shape {output_shape} must be positive")
        # the spec and onnxruntime: the odd padding element goes at the back for SAME_UPPER, else at the front;
        # an output_shape beyond the full output extends it with zeros at the back
        totals = [max(f - o, 0) for f, o in zip(full, output_shape)]
        pad_begin = tuple(t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals)
        return strides, dilations, pad_begin, output_shape
    pads = tuple(pads) if pads is not None and auto_pad == "NOTSET" else (0,) * (2 * rank)
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise ConversionError(f"pads {pads} must be {2 * rank} values >= 0 for input shape {shape_of(x)}")
    output_size = tuple(dim(f - pads[a] - pads[rank + a]) for a, f in enumerate(full))
    if any(is_static_dim(o) and o < 1 for o in output_size):  # (a run-time one is checked per call: generic.py)
        raise ConversionError(f"pads {pads} leave no output (full output {tuple(full)})")
    return strides, dilations, pads[:rank], output_size


def _conv_transpose_as_conv2d(x, w: np.ndarray, groups, strides, dilations, pad_begin, output_size) -> Expr:
    """A 1-D or 2-D ConvTranspose with constant weights as the fast 2-D convolution: the input with stride - 1
    zeros after each element, padded by (k - 1) * dilation - pad_begin in front (negative: cropped) and to the
    length the output needs at the back, convolved with the kernel flipped and its channel axes swapped per
    group. out[o] = sum_k x_up[o + pad_begin - k * d] * w[k] = sum_k' x_pad[o + k' * d] * w[K - 1 - k']."""
    rank = len(shape_of(x)) - 2
    if rank == 1:  # (N, C, L) as (N, C, 1, L)
        x, w = _to_2d(x), w.reshape(w.shape[:2] + (1,) + w.shape[2:])
        strides, dilations, output_size = ((1,) + tuple(v) for v in (strides, dilations, output_size))
        pad_begin = (0,) + tuple(pad_begin)
        return _from_2d(_conv_transpose_as_conv2d(x, w, groups, strides, dilations, pad_begin, output_size))
    n, c, h, wd = shape_of(x)
    (sh, sw), kernel = strides, w.shape[2:]
    if groups == 1 and kernel == (sh, sw) and sh * sw > 1 and tuple(dilations) == (1, 1) and \
            tuple(pad_begin) == (0, 0) and tuple(output_size) == (dim(h * sh), dim(wd * sw)):
        return _patches_to_pixels(x, w)
    if sh > 1 or sw > 1:
        x = call("pad", reshape(x, (n, c, h, 1, wd, 1)), pads=(0,) * 9 + (sh - 1, 0, sw - 1))
        x = reshape(x, (n, c, h * sh, wd * sw))
    front = [(k - 1) * d - p for k, d, p in zip(kernel, dilations, pad_begin)]
    back = [o + (k - 1) * d - f - u for o, k, d, f, u in zip(output_size, kernel, dilations, front, shape_of(x)[2:])]
    if min(front + back) < 0:  # crop; the convolution pads (its padding is >= 0)
        x = call("pad", x, pads=(0, 0, min(front[0], 0), min(front[1], 0), 0, 0, min(back[0], 0), min(back[1], 0)))
    mg = w.shape[1]
    flipped = w.reshape((groups, c // groups, mg) + kernel).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
    weight = Constant(np.ascontiguousarray(flipped.reshape((groups * mg, c // groups) + kernel)))
    padding = (max(front[0], 0), max(front[1], 0), max(back[0], 0), max(back[1], 0))
    return call("nn.conv2d", x, weight, groups=groups, dilation=tuple(dilations), padding=padding)


def _patches_to_pixels(x, w: np.ndarray) -> Expr:
    """A ConvTranspose whose kernel is its stride (k x k, stride k: each input pixel writes its own k x k patch,
    the upsampling of segmentation and text-detection heads) as a 1x1 convolution to O*k*k channels and a
    depth-to-space: out[o, y*k + i, x*k + j] = sum_c x[c, y, x] w[c, o, i, j]. The zero-inserted input of the
    general form makes 3 of every 4 multiply-adds (k = 2) read a zero: PP-OCRv6's detector head (2x2/2 to one
    channel over 640x640) spent 8.7 ms there (Zen 4)."""
    n, c, h, wd = shape_of(x)
    o, (kh, kw) = w.shape[1], w.shape[2:]
    weight = Constant(np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(o * kh * kw, c, 1, 1)))
    y = call("nn.conv2d", x, weight, groups=1, dilation=(1, 1), padding=(0, 0, 0, 0))
    y = call("transpose", reshape(y, (n, o, kh, kw, h, wd)), axes=(0, 1, 4, 2, 5, 3))
    return reshape(y, (n, o, h * kh, wd * kw))


@converter("ConvTranspose")
def conv_transpose(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    rank = _spatial_rank(x, "ConvTranspose")
    if len(shape_of(w)) != rank + 2:
        raise ConversionError(f"weight shape {shape_of(w)} does not match a {rank}-D transposed convolution of "
                              f"input shape {shape_of(x)}")
    if kernel_shape is not None and tuple(kernel_shape) != shape_of(w)[2:]:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {shape_of(w)}")
    if math.prod(shape_of(w)[2:]) > MAX_WINDOW_TAPS:
        raise ConversionError(f"kernel {shape_of(w)[2:]} has more than {MAX_WINDOW_TAPS} taps")
    strides, dilations, pad_begin, output_size = _transpose_geometry(x, w, auto_pad, dilations, output_padding,
                                                                     output_shape, pads, strides)
    fits = group >= 1 and shape_of(x)[1] % group == 0 and shape_of(w)[0] == shape_of(x)[1]  # else the op says why
    if rank <= 2 and isinstance(w, Constant) and x.type.dtype == "float32" and fits:
        y = _conv_transpose_as_conv2d(x, w.data, group, strides, dilations, pad_begin, output_size)
    else:
        y = call("nn.conv_transpose", x, w, strides=strides, dilation=dilations, pad_begin=pad_begin,
                 output_size=output_size, groups=group)
    if b is None:
        return y
    channels = shape_of(y)[1]
    if shape_of(b) != (channels,):
        raise ConversionError(f"bias shape {shape_of(b)} does not match {channels} output channels")
    return binary("add", y, reshape(b, (channels,) + (1,) * rank))


# ---- Lp pools and norms: sum of |x|^p, then its p-th root


def _abs_power(x: Expr, p) -> Expr:
    if p == 1:
        return fold("abs", x)
    if p == 2:
        return binary("multiply", x, x)
    return fold("power", fold("abs", x), const(float(p), x.type.dtype))


def _root(x: Expr, p) -> Expr:
    if p == 1:
        return x
    if p == 2:
        return fold("sqrt", x)
    return fold("power", x, const(1.0 / float(p), x.type.dtype))


def _check_p(p, x: Expr):
    if not p > 0:
        raise ConversionError(f"attribute p must be positive, got {p}")
    if x.type.dtype != "float32":
        raise ConversionError(f"a {x.type.dtype} input is not supported (float32 only)")


def _lp_pool(x, kernel_shape, auto_pad, ceil_mode, dilations, p, pads, strides):
    """The window sums of |x|^p are a depthwise convolution with a kernel of ones (zero padding adds nothing);
    ceil_mode becomes extra padding at the end, as many positions as the last window needs."""
    rank = _spatial_rank(x, "LpPool")
    _check_p(p, x)
    if len(kernel_shape) != rank:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not have {rank} values for input shape "
                              f"{shape_of(x)}")
    if flag(ceil_mode, "ceil_mode") and auto_pad == "NOTSET":
        strides_ = tuple(strides) if strides is not None else (1,) * rank
        dil = tuple(dilations) if dilations is not None else (1,) * rank
        pads = list(pads) if pads is not None else [0] * (2 * rank)
        if len(pads) != 2 * rank or len(strides_) != rank or len(dil) != rank:
            raise ConversionError(f"pads {tuple(pads)}, strides {strides_}, dilations {dil} do not fit a {rank}-D "
                                  f"window")
        for a in range(rank):
            size, k, s, d = shape_of(x)[2 + a], kernel_shape[a], strides_[a], dil[a]
            out = pool_out_size(size, k, s, d, pads[a], pads[rank + a], True)
            pads[rank + a] = max(pads[rank + a], (out - 1) * s + (k - 1) * d + 1 - size - pads[a])
    channels = shape_of(x)[1]
    ones = Constant(np.ones((channels, 1) + tuple(kernel_shape), np.float32))
    total = conv(_abs_power(x, p), ones, auto_pad=auto_pad, dilations=dilations, group=channels,
                 kernel_shape=kernel_shape, pads=pads, strides=strides)
    return _root(total, p)


@converter("LpPool")
def lp_pool_v1(x, *, kernel_shape, auto_pad="NOTSET", p=2.0, pads=None, strides=None):
    return _lp_pool(x, kernel_shape, auto_pad, 0, None, p, pads, strides)


@converter("LpPool", since=18)
def lp_pool_v18(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, p=2, pads=None, strides=None):
    return _lp_pool(x, kernel_shape, auto_pad, ceil_mode, dilations, p, pads, strides)


@converter("GlobalLpPool")
def global_lp_pool(x, *, p=2.0):
    rank = len(shape_of(x)) - 2
    if rank < 1:
        raise ConversionError(f"GlobalLpPool takes an (N, C, spatial...) input, got shape {shape_of(x)}")
    _check_p(p, x)
    return _root(fold("sum", _abs_power(x, p), axes=tuple(range(2, rank + 2)), keepdims=True), p)


@converter("LpNormalization")
def lp_normalization(x, *, axis=-1, p=2):
    if p not in (1, 2):
        raise ConversionError(f"attribute p must be 1 or 2, got {p}")
    _check_p(p, x)
    axis = normalize_axis(axis, len(shape_of(x)))
    norm = _root(fold("sum", _abs_power(x, p), axes=(axis,), keepdims=True), p)
    one = const(1.0, x.type.dtype)  # a zero norm means a zero x there: 0 / 1 gives the 0 ONNX wants
    return binary("divide", x, fold("where", binary("equal", norm, const(0.0, x.type.dtype)), one, norm))


# ---- normalizations over channels and groups


def _per_channel(v: Expr, ndim: int) -> Expr:
    """A (C,) vector shaped to broadcast over (N, C, spatial...) of ndim dims."""
    return reshape(v, (shape_of(v)[0],) + (1,) * (ndim - 2))


def _normalize_rows(x: Expr, rows: tuple[int, ...], epsilon: float) -> Expr:
    """x viewed as rows (N, G, rest) normalized over `rest` (mean 0, variance 1), in x's shape."""
    flat = reshape(x, rows + (int(np.prod(shape_of(x))) // int(np.prod(rows)),))
    one = Constant(np.ones((1,), np.float32))
    zero = Constant(np.zeros((1,), np.float32))
    return reshape(fold("nn.layer_norm", flat, one, zero, axis=len(rows), epsilon=float(epsilon)), shape_of(x))


def _expect_float32(x: Expr, op: str):
    if x.type.dtype != "float32":
        raise ConversionError(f"{op} of a {x.type.dtype} tensor is not supported (float32 only)")


@converter("InstanceNormalization")
def instance_norm(x, scale, b, *, epsilon=1e-5):
    shape = shape_of(x)
    if len(shape) < 2 or shape_of(scale) != (shape[1],) or shape_of(b) != (shape[1],):
        raise ConversionError(f"input (N, C, ...) {shape} needs scale and B of shape (C,), got {shape_of(scale)} "
                              f"and {shape_of(b)}")
    _expect_float32(x, "InstanceNormalization")
    y = _normalize_rows(x, shape[:2], epsilon)
    return binary("add", binary("multiply", y, _per_channel(scale, len(shape))), _per_channel(b, len(shape)))


@converter("GroupNormalization", since=21)
def group_norm(x, scale, bias, *, num_groups, epsilon=1e-5, stash_type=1):
    """Opset 21's form (per-channel scale and bias). Opset 18's per-group form is deprecated: onnx's checker
    refuses models that use it, so it has no converter."""
    if stash_type != 1:
        raise ConversionError(f"stash_type={stash_type}: only 1 (float32 statistics) is supported")
    shape = shape_of(x)
    if len(shape) < 2:
        raise ConversionError(f"input must be (N, C, ...), got shape {shape}")
    _expect_float32(x, "GroupNormalization")
    n, c = shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ConversionError(f"num_groups={num_groups} must divide the {c} channels")
    if shape_of(scale) != (c,) or shape_of(bias) != (c,):
        raise ConversionError(f"scale and bias must have shape {(c,)}, got {shape_of(scale)} and {shape_of(bias)}")
    y = _normalize_rows(x, (n, num_groups), epsilon)
    return binary("add", binary("multiply", y, _per_channel(scale, len(shape))), _per_channel(bias, len(shape)))


@converter("MeanVarianceNormalization", since=9)
def mean_variance_normalization(x, *, axes=(0, 2, 3)):
    """(x - mean) / (sqrt(variance) + 1e-9) over axes (ONNX's function body; the variance as the mean of the
    squared deviations)."""
    _expect_float32(x, "MeanVarianceNormalization")
    ndim = len(shape_of(x))
    axes = tuple(sorted({normalize_axis(a, ndim) for a in axes}))
    mean = fold("mean", x, axes=axes, keepdims=True)
    diff = binary("subtract", x, mean)
    std = fold("sqrt", fold("mean", binary("multiply", diff, diff), axes=axes, keepdims=True))
    return binary("divide", diff, binary("add", std, const(1e-9, x.type.dtype)))


# ---- MaxUnpool: the values scattered to their flat indices into zeros


@converter("MaxUnpool", since=9)
def max_unpool(x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None):
    shape = shape_of(x)
    rank = len(shape) - 2
    if rank < 1 or len(kernel_shape) != rank:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not fit input shape {shape}")
    if shape_of(indices) != shape:
        raise ConversionError(f"indices shape {shape_of(indices)} must equal the input shape {shape}")
    if indices.type.dtype != "int64":
        raise ConversionError(f"indices must be int64, got {indices.type.dtype}")
    strides = tuple(strides) if strides is not None else (1,) * rank
    pads = tuple(pads) if pads is not None else (0,) * (2 * rank)
    if len(strides) != rank or len(pads) != 2 * rank:
        raise ConversionError(f"strides {strides} and pads {pads} do not fit a {rank}-D window")
    out = shape[:2] + tuple((shape[2 + a] - 1) * strides[a] + kernel_shape[a] - pads[a] - pads[rank + a]
                            for a in range(rank))
    if output_shape is not None:
        given = int_list_input(output_shape, "output_shape")
        if given != out:  # onnx's test pads the default output (indices keep their (y, x)); onnxruntime
            # scatters the flat indices into the larger shape: they disagree, so neither is assumed
            raise ConversionError(f"output_shape {given} other than the default {out} is not supported (onnx's "
                                  f"reference and onnxruntime place the values differently)")
    if any(v < 1 for v in out):
        raise ConversionError(f"the output shape {out} is empty")
    total = int(np.prod(out))
    if isinstance(indices, Constant):  # run-time indices are checked by the runtime (as ScatterElements')
        bad = indices.data[(indices.data < 0) | (indices.data >= total)]
        if bad.size:
            raise ConversionError(f"indices hold {int(bad.flat[0])}, outside [0, {total}) of the output {out}")
    zeros = Constant(np.zeros((total,), np.dtype(x.type.dtype)))
    size = (int(np.prod(shape)),)
    flat = fold("scatter_elements", zeros, reshape(indices, size), reshape(x, size), axis=0,
                reduction="none")
    return reshape(flat, out)

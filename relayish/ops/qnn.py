"""Integer products of quantized models: 8-bit operands, products summed exactly in int32.

Every op here computes the *raw* sum of products of its 8-bit operands, without zero points: the importer
(frontends/onnx/ops/quantization.py integer_conv / integer_matmul) subtracts the zero-point terms with int32
element-wise ops after it, which fusion puts in the kernel's epilogue with the rest (scales, bias, activation,
requantization):

    sum (x - zx)(w - zw) = sum x w - zw sum x - zx sum w + K zx zw

- qnn.conv2d (NCHW, OIHW) and qnn.matmul (numpy matmul, batch dims broadcast): uint8 or int8 operands, any
  mix; the generic kernels widen to int32 and multiply. A padded tap of qnn.conv2d reads the value of its third
  input (x's zero point, so that x - zx is 0 there).
- qnn.conv2d_nchwc and qnn.matmul_pack: uint8 data times int8 weights packed as int32 words of 4 consecutive
  input channels / K elements (the first in the least significant byte), the form of vpdpbusd; int8 data is
  read with its top bit flipped, as the uint8 x + 128 (so these ops sum (x + 128) w: the layout pass subtracts
  128 sum w after them):
  compiler/passes/layout.py rewrites the generic ops with constant weights into them. The body of their reduction
  is te.dot4_u8s8 of 4 data bytes and one weight word (compiler/codegen/intdot.py: one vpdpbusd per vector).
  qnn.conv2d_nchwc has data NCHW{ib}c (ib a multiple of 4), weight words [O/ob, C/g/ib, KH, KW, ib/4, ob],
  output NCHW{ob}c; qnn.matmul_pack data [.., M, K], weight words [N/nb, ceil(K/4), nb] (K padded with zero
  weights to a multiple of 4; `units`: the first N columns, the last block padded with zero columns).
- qnn.depthwise_conv2d_nchwc: data NCHW{b}c (uint8 or int8 as it is), int8 weight [C/b, 1, KH, KW, b]: each lane
  one channel, its window's products widened to int32 (a depthwise sum has no 4 consecutive channels to dot).

The references compute in int64 and wrap to int32, as the kernels' int32 sums do.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..intrinsics import pack_signed_bytes, signed_bytes
from ..types import TensorType, is_static_dim
from ..op import REQUIRED, OpError, Pattern, register_op, stage_tag
from .common import expect_ndim, pad_stage
from .blocked import DEPTHWISE_STRIDED_TAG, DEPTHWISE_TAG, _dw_flops, _dw_infer, _dw_ref
from .layout import CONV2D_NCHWC_TAG, _cn_ref, _conv_out, packed_units
from .nn import CONV2D_TAG, _conv_infer, _conv_normalize, _conv_ref, _matmul_compute, _matmul_dims

Q8 = ("uint8", "int8")


def _expect_q8(op: str, t: TensorType, what: str, dtypes=Q8):
    if t.dtype not in dtypes:
        raise OpError(f"{op}: {what} must be {' or '.join(dtypes)}, got {t.dtype}")


def _expect_pad(op: str, pad: TensorType, x: TensorType):
    if pad.shape != () or pad.dtype != x.dtype:
        raise OpError(f"{op}: the padding value must be a 0-d {x.dtype} tensor (x's dtype), got {pad.dtype} "
                      f"of shape {pad.shape}")


def _wrap32(y: np.ndarray) -> np.ndarray:
    return np.asarray(y, np.int64).astype(np.int32)


# ---------------------------------------------------------------------------------------------- qnn.conv2d

def _qconv_infer(arg_types, attrs):
    op = "qnn.conv2d"
    x, w, pad = arg_types
    _expect_q8(op, x, "data")
    _expect_q8(op, w, "weight")
    _expect_pad(op, pad, x)
    t = _conv_infer([x, TensorType(w.shape, x.dtype)], attrs)
    return TensorType(t.shape, "int32")


def _padded_with(x: np.ndarray, pad, padding) -> np.ndarray:
    """x (int64, spatial axes 2 and 3) padded by padding (top, left, bottom, right) with the value pad."""
    pt, pl, pb, pr = padding
    widths = [(0, 0)] * x.ndim
    widths[2], widths[3] = (pt, pb), (pl, pr)
    return np.pad(x, widths, constant_values=int(pad))


def _qconv_ref(x, w, pad, strides, padding, dilation, groups):
    xp = _padded_with(x.astype(np.int64), pad, padding)
    return _wrap32(_conv_ref(xp, w.astype(np.int64), strides, (0, 0, 0, 0), dilation, groups))


def _padded_data(x: te.Tensor, pad: te.Tensor, padding) -> te.Tensor:
    """x padded on its axes 2, 3 by padding with the 0-d tensor pad's value (x itself without padding)."""
    if not any(padding):
        return x
    pt, pl, pb, pr = padding
    shape = list(x.shape)
    shape[2] += pt + pb
    shape[3] += pl + pr
    return pad_stage(x, {2: pt, 3: pl}, tuple(shape), pad[()])


def _qconv_compute(inputs, attrs, out_type):
    x, w, pad = inputs
    _, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    data = _padded_data(x, pad, attrs.padding)
    ry, rx, rc = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx"), te.reduce_axis(cg, "rc")
    per_group = o // attrs.groups

    def body(n, oc, y, xx):
        channel = rc.var if attrs.groups == 1 else (oc // per_group) * cg + rc.var
        read = data[n, channel, y * sh + ry.var * dh, xx * sw + rx.var * dw]
        return te.sum(te.cast("int32", read) * te.cast("int32", w[oc, rc.var, ry.var, rx.var]), [rc, ry, rx])
    return te.compute(out_type.shape, body, name="qconv2d", tag=CONV2D_TAG)


def _qconv_flops(arg_types, attrs, out_type):
    _, cg, kh, kw = arg_types[1].shape
    return 2.0 * out_type.size * cg * kh * kw


register_op("qnn.conv2d", inputs=3, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv", infer=_qconv_infer,
            ref=_qconv_ref, compute=_qconv_compute, flops=_qconv_flops, normalize=_conv_normalize,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
            doc="int32 sums of products of 8-bit data [N, C, H, W] and weight [O, C/groups, KH, KW] (uint8 or int8, "
                "no zero points); padded taps read the 0-d third input")

# ---------------------------------------------------------------------------------------------- qnn.matmul


def _qmatmul_infer(arg_types, attrs):
    op = "qnn.matmul"
    a, b = arg_types
    _expect_q8(op, a, "a")
    _expect_q8(op, b, "b")
    if a.ndim < 2 or b.ndim < 2:
        raise OpError(f"{op}: operands must be at least 2-D, got shapes {a.shape} and {b.shape}")
    batch, m, _, n = _matmul_dims(a, b)
    return TensorType(batch + (m, n), "int32")


def _qmatmul_compute(inputs, attrs, out_type):
    a32, b32 = (te.compute(t.shape, lambda *i, t=t: te.cast("int32", t[i]), name=f"{t.name}_i32", tag="elemwise")
                for t in inputs)
    return _matmul_compute([a32, b32], attrs, out_type)


register_op("qnn.matmul", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="dense", infer=_qmatmul_infer,
            ref=lambda a, b: _wrap32(np.matmul(a.astype(np.int64), b.astype(np.int64))), compute=_qmatmul_compute,
            flops=lambda arg_types, attrs, out: 2.0 * out.size * arg_types[0].shape[-1],
            doc="int32 numpy matmul of 8-bit a [.., M, K] and b [.., K, N] (uint8 or int8, no zero points)")

# ---------------------------------------------------------------------------------------------- weight words


def pack_conv_weight(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """int8 w [O, C/g, KH, KW] -> int32 words [O/ob, C/g/ib, KH, KW, ib/4, ob]: word j of a block holds input
    channels 4j..4j+3 of the block (ib a multiple of 4; O and C/g multiples of ob and ib)."""
    o, cg, kh, kw = w.shape
    if ib % 4 or o % ob or cg % ib:
        raise ValueError(f"pack_conv_weight: blocks {ib}i{ob}o do not fit weight {w.shape} (ib must divide by 4)")
    blocked = w.reshape(o // ob, ob, cg // ib, ib // 4, 4, kh, kw).transpose(0, 2, 5, 6, 3, 1, 4)
    return np.ascontiguousarray(pack_signed_bytes(blocked, axis=-1)[..., 0])


def unpack_conv_weight(words: np.ndarray) -> np.ndarray:
    """The inverse of pack_conv_weight: int32 words [O/ob, Cb, KH, KW, ib/4, ob] -> int64 [O, Cb*ib, KH, KW]."""
    obn, cb, kh, kw, iw, ob = words.shape
    b = np.stack(signed_bytes(words), axis=-1)  # [obn, cb, kh, kw, iw, ob, 4]
    return b.transpose(0, 5, 1, 4, 6, 2, 3).reshape(obn * ob, cb * iw * 4, kh, kw)


def pack_matmul_weight(w: np.ndarray, nb: int) -> np.ndarray:
    """int8 W [K, N] -> int32 words [ceil(N/nb), ceil(K/4), nb]: word k of column n holds W[4k..4k+3, n], K padded
    with zero rows to a multiple of 4, N with zero columns to a multiple of nb."""
    k, n = w.shape
    w = np.pad(w, ((0, -k % 4), (0, -n % nb)))
    blocked = w.reshape(w.shape[0] // 4, 4, w.shape[1] // nb, nb).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(pack_signed_bytes(blocked, axis=-1)[..., 0])


def unpack_matmul_weight(words: np.ndarray) -> np.ndarray:
    """The inverse of pack_matmul_weight (padding kept): [N/nb, K/4, nb] words -> int64 W [K4, N padded]."""
    nbs, kw, nb = words.shape
    b = np.stack(signed_bytes(words), axis=-1)  # [nbs, kw, nb, 4]
    return b.transpose(1, 3, 0, 2).reshape(kw * 4, nbs * nb)


# ---------------------------------------------------------------------------------------------- qnn.conv2d_nchwc

def as_unsigned(x: np.ndarray) -> np.ndarray:
    """8-bit data as the packed ops read it, in int64: uint8 as it is, int8 with its top bit flipped (x + 128)."""
    return x.astype(np.int64) + (128 if x.dtype == np.int8 else 0)


def _unsigned(read: te.PrimExpr) -> te.PrimExpr:
    """A data byte as vpdpbusd's unsigned operand: int8 with its top bit flipped (x + 128)."""
    if read.dtype == "uint8":
        return read
    return te.bitcast("uint8", te.bitwise_xor(read, te.const(-128, "int8")))


def _qcn_infer(arg_types, attrs):
    op = "qnn.conv2d_nchwc"
    x, w, pad = arg_types
    expect_ndim(op, x, 5, "data")
    expect_ndim(op, w, 6, "weight")
    _expect_q8(op, x, "data")
    _expect_q8(op, w, "weight words", ("int32",))
    _expect_pad(op, pad, x)
    n, cb, h, wd, ib = x.shape
    ob_n, icb, kh, kw, iw, ob = w.shape
    g = attrs.groups
    if ib % 4 or iw * 4 != ib or g < 1 or ob_n % g or icb * g != cb:
        raise OpError(f"{op}: weight words {w.shape} do not match data blocks {x.shape} (groups={g}; the data "
                      f"block must be 4 x the weight's words)")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    oh, ow = _conv_out(h, kh, sh, dh, pt, pb), _conv_out(wd, kw, sw, dw, pl, pr)
    if any(is_static_dim(d) and d <= 0 for d in (oh, ow)):  # (run-time sizes: checked when they run)
        raise OpError(f"{op}: empty output ({oh}x{ow}) for input {x.shape}")
    return TensorType((n, ob_n, oh, ow, ob), "int32")


def _qcn_ref(x, w, pad, strides, padding, dilation, groups=1):
    ob_n, icb, kh, kw, iw, ob = w.shape
    weight = unpack_conv_weight(w).reshape(ob_n, ob, icb, iw * 4, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return _wrap32(_cn_ref(_padded_with(as_unsigned(x), as_unsigned(np.asarray(pad)), padding), weight, strides,
                           (0, 0, 0, 0), dilation, groups))


def _qcn_compute(inputs, attrs, out_type):
    x, w, pad = inputs
    ob_n, icb, kh, kw, iw, ob = w.shape
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    data = _padded_data(x, pad, attrs.padding)
    ric, ry, rx, riw = (te.reduce_axis(e, name) for e, name in ((icb, "ric"), (kh, "ry"), (kw, "rx"), (iw, "riw")))
    per_group = ob_n // attrs.groups

    def body(a, o, y, xx, oi):
        block = ric if attrs.groups == 1 else (o // per_group) * icb + ric
        pixel = [_unsigned(data[a, block, y * sh + ry * dh, xx * sw + rx * dw, riw * 4 + t]) for t in range(4)]
        return te.sum(te.dot4_u8s8(pixel, w[o, ric, ry, rx, riw, oi]), (ric, ry, rx, riw))
    return te.compute(out_type.shape, body, name="qconv2d_nchwc", tag=CONV2D_NCHWC_TAG)


def _qcn_flops(arg_types, attrs, out_type):
    _, cb, kh, kw, iw, _ = arg_types[1].shape
    return 2.0 * out_type.size * cb * iw * 4 * kh * kw


register_op("qnn.conv2d_nchwc", inputs=3, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv",
            infer=_qcn_infer, ref=_qcn_ref, compute=_qcn_compute, flops=_qcn_flops,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1},
            doc="int32 sums of uint8 data [N, C/ib, H, W, ib] (int8: as x + 128) times int8 weights packed in int32 "
                "words [O/ob, C/groups/ib, KH, KW, ib/4, ob] (vpdpbusd's form); padded taps read the 0-d third input")

# ---------------------------------------------------------------------------------------------- qnn.conv2d_rows

QCONV_ROWS_TAG = stage_tag("qconv2d_rows")


def _qrows_infer(arg_types, attrs):
    op = "qnn.conv2d_rows"
    x, w = arg_types
    expect_ndim(op, x, 3, "data rows")
    expect_ndim(op, w, 6, "weight")
    _expect_q8(op, x, "data rows")
    _expect_q8(op, w, "weight words", ("int32",))
    n, h, row = x.shape
    ob_n, one, kh, one_w, iw, ob = w.shape
    (sh, sw), dh, c, ow = attrs.strides, attrs.dilation, attrs.channels, attrs.width
    if one != 1 or one_w != 1 or c < 1 or ow < 1:
        raise OpError(f"{op}: weight words {w.shape} must be [O/ob, 1, KH, 1, words, ob], channels and width >= 1")
    if (ow - 1) * sw * c + 4 * iw > row:
        raise OpError(f"{op}: rows of {row} bytes are too short for {ow} columns of stride {sw} x {c} channels "
                      f"and {iw} words")
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    if is_static_dim(oh) and oh <= 0:
        raise OpError(f"{op}: empty output for rows {x.shape} and a kernel {kh} high")
    return TensorType((n, ob_n, oh, ow, ob), "int32")


def _qrows_ref(x, w, strides, dilation, channels, width):
    ob_n, _, kh, _, iw, ob = w.shape
    weight = unpack_conv_weight(w)[:, :, :, 0]  # [O, 4 iw, KH]: byte k of a row window, kernel row ry
    data = as_unsigned(x)
    (sh, sw), dh = strides, dilation
    n, h, _ = x.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    out = np.zeros((n, ob_n * ob, oh, width), np.int64)
    cols = np.arange(width) * sw * channels
    for ry in range(kh):
        rows = data[:, ry * dh: ry * dh + (oh - 1) * sh + 1: sh, :]  # [N, OH, R]
        for k in range(4 * iw):
            out += np.einsum("nyx,o->noyx", rows[:, :, cols + k], weight[:, k, ry])
    return _wrap32(out.reshape(n, ob_n, ob, oh, width).transpose(0, 1, 3, 4, 2))


def _qrows_compute(inputs, attrs, out_type):
    """Output column xx reads the row window [xx x stride x channels, + 4 x words): its words are 4 consecutive
    bytes (one 32-bit load each), whatever pixel and channel each byte is."""
    x, w = inputs
    ob_n, _, kh, _, iw, ob = w.shape
    (sh, sw), dh, c = attrs.strides, attrs.dilation, attrs.channels
    ry, riw = te.reduce_axis(kh, "ry"), te.reduce_axis(iw, "riw")

    def body(a, o, y, xx, oi):
        base = xx * (sw * c) + riw * 4
        data = [_unsigned(x[a, y * sh + ry * dh, base + t]) for t in range(4)]
        return te.sum(te.dot4_u8s8(data, w[o, 0, ry, 0, riw, oi]), (ry, riw))
    return te.compute(out_type.shape, body, name="qconv2d_rows", tag=QCONV_ROWS_TAG)


register_op("qnn.conv2d_rows", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv",
            infer=_qrows_infer, ref=_qrows_ref, compute=_qrows_compute,
            flops=lambda arg_types, attrs, out: 2.0 * out.size * arg_types[1].shape[2] * arg_types[1].shape[4] * 4,
            attrs={"strides": (1, 1), "dilation": 1, "channels": REQUIRED, "width": REQUIRED},
            doc="int32 sums of a convolution of few input channels over data rows [N, H, W x C] (NHWC rows, padded; "
                "uint8 or int8 as x + 128): output column x reads the 4 x `words` bytes from x x stride x channels "
                "on (a kernel row's columns and channels as one run of bytes) times int8 weights packed in words "
                "[O/ob, 1, KH, 1, words, ob]; compiler/passes/layout.py makes it from a qnn.conv2d of 1-3 channels")

# ---------------------------------------------------------------------------------------------- qnn.depthwise


def _qdw_infer(arg_types, attrs):
    op = "qnn.depthwise_conv2d_nchwc"
    x, w, pad = arg_types
    _expect_q8(op, x, "data")
    _expect_q8(op, w, "weight", ("int8",))
    _expect_pad(op, pad, x)
    try:  # the float op's shape rule, its errors under this op's name
        t = _dw_infer([x, TensorType(w.shape, x.dtype)], attrs)
    except OpError as e:
        raise OpError(str(e).replace("nn.depthwise_conv2d_nchwc", op)) from None
    return TensorType(t.shape, "int32")


def _qdw_ref(x, w, pad, strides, padding, dilation):
    pt, pl, pb, pr = padding
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=int(pad))
    return _wrap32(_dw_ref(xp, w.astype(np.int64), strides, (0, 0, 0, 0), dilation))


def _qdw_compute(inputs, attrs, out_type):
    """Per lane (channel) the window's products widened to int32 (no reduction over channels, so no dot4 form)."""
    x, w, pad = inputs
    n, cb, h, wd, b = x.shape
    kh, kw = w.shape[2:4]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    data = pad_stage(x, {2: pt, 3: pl}, (n, cb, h + pt + pb, wd + pl + pr, b), pad[()]) if any(attrs.padding) else x
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    return te.compute(
        out_type.shape,
        lambda a, c, y, xx, i: te.sum(te.cast("int32", data[a, c, y * sh + ry * dh, xx * sw + rx * dw, i])
                                      * te.cast("int32", w[c, 0, ry, rx, i]), (ry, rx)),
        name="qdepthwise_conv2d_nchwc", tag=DEPTHWISE_TAG if (sh, sw) == (1, 1) else DEPTHWISE_STRIDED_TAG)


register_op("qnn.depthwise_conv2d_nchwc", inputs=3, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv",
            infer=_qdw_infer, ref=_qdw_ref, compute=_qdw_compute, flops=_dw_flops,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1)},
            doc="int32 depthwise sums of 8-bit data [N, C/b, H, W, b] (uint8 or int8, as it is) times int8 weights "
                "[C/b, 1, KH, KW, b]; each lane one channel; padded taps read the 0-d third input")

# ---------------------------------------------------------------------------------------------- qnn.matmul_pack

QMATMUL_PACK_TAG = stage_tag("qnn_matmul_pack", buffered_padding=True)  # its K padding: a copy of the data


def _qmp_infer(arg_types, attrs):
    op = "qnn.matmul_pack"
    x, w = arg_types
    _expect_q8(op, x, "data")
    _expect_q8(op, w, "weight words", ("int32",))
    if x.ndim < 2 or w.ndim != 3:
        raise OpError(f"{op}: data must be at least 2-D and the weight words 3-D [N/nb, K/4, nb]; got {x.shape} and "
                      f"{w.shape}")
    if w.shape[1] != -(-x.shape[-1] // 4):
        raise OpError(f"{op}: data {x.shape} has K={x.shape[-1]}: the weight needs {-(-x.shape[-1] // 4)} words "
                      f"per column, it has {w.shape[1]}")
    return TensorType(x.shape[:-1] + (packed_units(op, w.shape, attrs.units),), "int32")


def _qmp_ref(x, w, units=0):
    k = x.shape[-1]
    y = _wrap32(np.matmul(as_unsigned(x), unpack_matmul_weight(w)[:k]))
    return y[..., :units] if units else y


def _qmp_compute(inputs, attrs, out_type):
    x, w = inputs
    nb, k = w.shape[2], x.shape[-1]
    data = x
    if k % 4:  # whole words: the data padded with what reads as 0 (int8: -128, flipped)
        data = pad_stage(x, {}, x.shape[:-1] + (k + -k % 4,), -128 if x.dtype == "int8" else 0)
    rk = te.reduce_axis(w.shape[1], "rk")

    def body(*i):
        row = tuple(i[:-1])
        return te.sum(te.dot4_u8s8([_unsigned(data[row + (rk * 4 + t,)]) for t in range(4)],
                                   w[i[-1] // nb, rk, i[-1] % nb]), rk)
    return te.compute(out_type.shape, body, name="qmatmul", tag=QMATMUL_PACK_TAG)


register_op("qnn.matmul_pack", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="dense", infer=_qmp_infer,
            ref=_qmp_ref, compute=_qmp_compute, attrs={"units": 0},
            flops=lambda arg_types, attrs, out: 2.0 * out.size * arg_types[0].shape[-1],
            doc="int32 x [.., M, K] (uint8; int8: as x + 128) @ W [K, N] (int8) with W packed in int32 words of 4 "
                "K-elements: [N/nb, ceil(K/4), nb] (units: the first N columns only; 0: all)")

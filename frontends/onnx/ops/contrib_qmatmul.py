"""Converters of onnxruntime's quantized matrix products (domain com.microsoft): QGemm (quantize_static's Gemm),
DynamicQuantizeMatMul and MatMulIntegerToFloat (its graph optimizer's fusions of quantize_dynamic's
DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul), MatMulInteger16, MatMulNBits (weight-only block
quantization, onnxruntime.quantization.matmul_nbits_quantizer), DynamicQuantizeLSTM (quantize_dynamic's LSTM) and
QAttention (quantize_dynamic's Attention).

Integer products are exact: (a - a_zero_point) @ (b - b_zero_point) summed in int32 (nn.matmul on int32 operands,
which the compiler keeps unpacked), then scaled in float32 as onnxruntime does. A float operand that onnxruntime
quantizes at run time (DynamicQuantizeMatMul's A, DynamicQuantizeLSTM's input and hidden state) is quantized the
same way (uint8 over [min(x, 0), max(x, 0)], as DynamicQuantizeLinear), so the products match its integers.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, const

from ..builders import astype, binary, flag, fold, reshape, shape_of, transpose
from ..registry import converter
from ..values import ConversionError
from ..versions.contrib import CONTRIB
from .integer import integer_matmul as exact_matmul
from .nn import matmul
from .contrib_attention import MASK_FILTER_VALUE, attention_of_projections
from .contrib_quant import q8, requantize, scalar, zero_point
from .quantization import dynamic_quantize
from .rnn import lstm
from .rnn_cells import pad_units, padded_units


def _per_column(p: Expr | None, columns: int, dtype: str, what: str) -> Expr | None:
    """A scale or zero point of B: one value (a 0-d tensor) or one per column of B (N,)."""
    if p is None:
        return None
    if p.type.dtype != dtype or math.prod(shape_of(p)) not in (1, columns):
        raise ConversionError(f"{what} must be one {dtype} value or one per column of B ({columns}), got "
                              f"{p.type.dtype} of shape {shape_of(p)}")
    return reshape(p, () if math.prod(shape_of(p)) == 1 else (columns,))


def integer_matmul(a: Expr, a_zp: Expr | None, b: Expr, b_zp: Expr | None) -> Expr:
    """(a - a_zp) @ (b - b_zp) in int32, numpy matmul semantics; b_zp one value or one per column of b."""
    q8(a, "A")
    q8(b, "B")
    columns = shape_of(b)[-1]
    return exact_matmul(a, a_zp, b, _per_column(b_zp, columns, b.type.dtype, "B's zero point"))


def _bias(y: Expr, bias: Expr | None) -> Expr:
    if bias is None:
        return y
    if bias.type.dtype != y.type.dtype or shape_of(bias) != (shape_of(y)[-1],):
        raise ConversionError(f"bias must be {y.type.dtype} of shape ({shape_of(y)[-1]},), got {bias.type.dtype} "
                              f"{shape_of(bias)}")
    return binary("add", y, bias)


@converter("MatMulIntegerToFloat", domain=CONTRIB)
def matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """(A - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias, in a_scale's float type."""
    dtype = a_scale.type.dtype
    if dtype not in ("float32", "float16") or b_scale.type.dtype != dtype:
        raise ConversionError(f"a_scale and b_scale must be float32 (or float16), got {a_scale.type.dtype} and "
                              f"{b_scale.type.dtype}")
    a_zp = None if a_zero_point is None else scalar(a_zero_point, "a_zero_point", a.type.dtype)
    acc = integer_matmul(a, a_zp, b, b_zero_point)
    sb = _per_column(b_scale, shape_of(b)[-1], dtype, "b_scale")
    scale = binary("multiply", scalar(a_scale, "a_scale", dtype), sb)
    return _bias(binary("multiply", astype(acc, dtype), scale), bias)


@converter("DynamicQuantizeMatMul", domain=CONTRIB)
def dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None):
    """A quantized to uint8 at run time (DynamicQuantizeLinear), then MatMulIntegerToFloat."""
    if a.type.dtype != "float32":
        raise ConversionError(f"input A must be float32, got {a.type.dtype}")
    qa, sa, za = dynamic_quantize(a)
    return matmul_integer_to_float(qa, b, sa, b_scale, za, b_zero_point, bias)


@converter("MatMulInteger16", domain=CONTRIB)
def matmul_integer16(a, b):
    for name, v in (("A", a), ("B", b)):
        if v.type.dtype not in ("int16", "uint16"):
            raise ConversionError(f"input {name} must be int16 or uint16, got {v.type.dtype}")
    return matmul(astype(a, "int32"), astype(b, "int32"))


@converter("QGemm", domain=CONTRIB)
def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0):  # noqa: N803
    """acc = (A' - a_zp) @ (B' - b_zp) + C in int32; Y = acc * alpha * a_scale * b_scale (float), or that over
    y_scale plus y_zero_point, quantized (when y_scale is given)."""
    for name, v in (("A", a), ("B", b)):
        if len(shape_of(v)) != 2:
            raise ConversionError(f"input {name} must be 2-D, got shape {shape_of(v)}")
    a2 = transpose(a, (1, 0)) if flag(transA, "transA") else a
    b2 = transpose(b, (1, 0)) if flag(transB, "transB") else b
    n = shape_of(b2)[1]
    b_zp = b_zero_point
    if b_zp is not None and math.prod(shape_of(b_zp)) == 1:
        b_zp = reshape(b_zp, ())
    acc = integer_matmul(a2, scalar(a_zero_point, "a_zero_point", a.type.dtype), b2, b_zp)
    if c is not None:
        if c.type.dtype != "int32" or len(shape_of(c)) > 2 or any(d not in (1, e) for d, e in
                                                                 zip(shape_of(c)[::-1], shape_of(acc)[::-1])):
            raise ConversionError(f"input C must be int32 broadcastable to {shape_of(acc)}, got {c.type.dtype} "
                                  f"{shape_of(c)}")
        acc = binary("add", acc, c)
    scale = binary("multiply", scalar(a_scale, "a_scale"), _per_column(b_scale, n, "float32", "b_scale"))
    if alpha != 1.0:
        scale = binary("multiply", scale, const(alpha, "float32"))
    if y_scale is None:
        if y_zero_point is not None:
            raise ConversionError("y_zero_point without y_scale")
        return binary("multiply", astype(acc, "float32"), scale)
    out = q8(y_zero_point, "y_zero_point") if y_zero_point is not None else "uint8"
    return requantize(acc, binary("divide", scale, scalar(y_scale, "y_scale")),
                      zero_point(y_zero_point, out, "y_zero_point"), out)


# ---- MatMulNBits ----

def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """uint8 rows of `bits`-bit values, the first value in the low bits of each byte -> (rows, count) values."""
    values = np.stack([(packed >> (bits * i)) & ((1 << bits) - 1) for i in range(8 // bits)], axis=-1)
    return values.reshape(packed.shape[0], -1)[:, :count].astype(np.int32)


@converter("MatMulNBits", domain=CONTRIB)
def matmul_nbits(a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, block_size, bits=4,  # noqa: N803
                 accuracy_level=0, weight_prepacked=0):
    """A @ W + bias with W (K, N) = (q - zero_point) * scale per block of block_size along K, dequantized at import
    (the packed weight, scales and zero points are initializers). accuracy_level 4 lets onnxruntime quantize A to
    int8 blockwise: the float product here is what it approximates."""
    if g_idx is not None or weight_prepacked:
        raise ConversionError("g_idx and prepacked weights are not supported")
    if bits not in (2, 4, 8):
        raise ConversionError(f"bits must be 2, 4 or 8, got {bits}")
    if block_size < 16 or block_size & (block_size - 1):
        raise ConversionError(f"block_size must be a power of 2, at least 16, got {block_size}")
    if not all(isinstance(v, Constant) for v in (b, scales) + (() if zero_points is None else (zero_points,))):
        raise ConversionError("inputs B, scales and zero_points must be constants (initializers)")
    blocks = -(-K // block_size)
    blob = block_size * bits // 8
    if b.data.dtype != np.uint8 or b.data.shape != (N, blocks, blob):
        raise ConversionError(f"input B must be uint8 of shape ({N}, {blocks}, {blob}), got {b.data.dtype} "
                              f"{b.data.shape}")
    if a.type.dtype != "float32" or shape_of(a)[-1] != K:
        raise ConversionError(f"input A must be float32 with {K} columns, got {a.type.dtype} {shape_of(a)}")
    scale = scales.data.astype(np.float32).reshape(N, blocks) if scales.data.size == N * blocks else None
    if scale is None or scales.data.dtype != np.float32:
        raise ConversionError(f"scales must be float32 of {N} x {blocks} values, got {scales.data.dtype} "
                              f"{scales.data.shape}")
    q = _unpack(b.data.reshape(N * blocks, blob), bits, block_size).reshape(N, blocks, block_size)
    if zero_points is None:
        zp = np.full((N, blocks, 1), 1 << (bits - 1), np.float32)
    elif zero_points.data.dtype == np.uint8:
        packed = zero_points.data.reshape(N, -1)
        zp = _unpack(packed, bits, blocks).astype(np.float32).reshape(N, blocks, 1)
    else:
        zp = zero_points.data.astype(np.float32).reshape(N, blocks, 1)
    w = ((q.astype(np.float32) - zp) * scale[:, :, None]).reshape(N, blocks * block_size)[:, :K]
    return _bias(matmul(a, Constant(np.ascontiguousarray(w.T))), bias)


# ---- DynamicQuantizeLSTM ----

def _direction_params(p: Expr, d: int, what: str, units: int):
    """Direction d's scale or zero point: per tensor (num_directions,) or per channel (num_directions, units)."""
    shape = shape_of(p)
    if len(shape) == 1:
        return reshape(fold("strided_slice", p, begin=(d,), end=(d + 1,), axes=(0,)), ())
    if len(shape) == 2 and shape[1] == units:
        return reshape(fold("strided_slice", p, begin=(d,), end=(d + 1,), axes=(0,)), (units,))
    raise ConversionError(f"{what} must be (num_directions,) or (num_directions, {units}), got shape {shape}")


def _quantized_dense(x2d: Expr, w: Expr, d: int, scale: Expr, zp: Expr, units: int, what: str,
                     quantized_x: tuple | None = None) -> Expr:
    """x2d @ W[d] with x2d quantized to uint8 at run time over the whole matrix (onnxruntime's quantized GEMM
    of its LSTM: the input projection once for all steps, the recurrence once per step), or quantized_x, that
    quantization made once for every direction."""
    qx, sx, zx = dynamic_quantize(x2d) if quantized_x is None else quantized_x
    wd = reshape(fold("strided_slice", w, begin=(d,), end=(d + 1,), axes=(0,)), shape_of(w)[1:])
    acc = integer_matmul(qx, zx, wd, _direction_params(zp, d, f"{what}_zero_point", units))
    return binary("multiply", astype(acc, "float32"),
                   binary("multiply", sx, _direction_params(scale, d, f"{what}_scale", units)))


def _per_unit(p: Constant, dirs: int, units: int, what: str) -> np.ndarray:
    """A constant scale or zero point, per direction or per direction and unit, as float32 [D, units]."""
    if p.data.size not in (dirs, dirs * units):
        raise ConversionError(f"{what} must be (num_directions,) or (num_directions, {units}), got shape "
                              f"{p.data.shape}")
    return np.broadcast_to(p.data.astype(np.float32).reshape(dirs, -1), (dirs, units))


def _fused_parts(w, r, w_scale, w_zero_point, r_scale, r_zero_point):
    """quantized(spec, bias) for rnn.lstm's fused form (cells with quantize_state: relayish/ops/recurrent.py), or
    None unless R, its scale and zero point are constants: xp, each direction's input projection as
    _quantized_dense computes it plus its summed biases, the gates padded; R's integers less their zero points,
    [D, 4H, H] float32 (exact); R's scales by gate, padded with zeros [D, 4*Hp]."""
    if not all(isinstance(v, Constant) for v in (r, r_scale, r_zero_point)):
        return None

    def parts(spec, bias):
        dirs, hidden = spec.dirs, spec.hidden
        units, padded = 4 * hidden, padded_units(hidden)
        seq, batch, inputs = shape_of(spec.x)
        x2d = reshape(spec.x, (seq * batch, inputs))
        quantized_x = dynamic_quantize(x2d)
        columns = []
        for d in range(dirs):
            proj = _quantized_dense(x2d, w, d, w_scale, w_zero_point, units, "W", quantized_x)
            proj = binary("add", proj, reshape(spec.take(bias, d), (1, units)))
            columns.append(reshape(pad_units(reshape(proj, (seq * batch, 4, hidden)), 2, hidden),
                                   (seq * batch, 4 * padded)))
        xp = columns[0] if dirs == 1 else fold("concatenate", *columns, axis=1)
        zp = _per_unit(r_zero_point, dirs, units, "R_zero_point")
        integers = (r.data.astype(np.float32) - zp[:, None, :]).transpose(0, 2, 1)
        scales = np.zeros((dirs, 4, padded), np.float32)
        scales[:, :, :hidden] = _per_unit(r_scale, dirs, units, "R_scale").reshape(dirs, 4, hidden)
        return xp, Constant(np.ascontiguousarray(integers)), Constant(scales.reshape(dirs, 4 * padded))
    return parts


@converter("DynamicQuantizeLSTM", domain=CONTRIB)
def dynamic_quantize_lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
                          w_scale=None, w_zero_point=None, r_scale=None, r_zero_point=None, *, activation_alpha=None,
                          activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
                          input_forget=0):
    """ONNX's LSTM with quantized weights W (num_directions, input_size, 4 * hidden) and R (num_directions,
    hidden, 4 * hidden) (the transposes of LSTM's), each with its scale and zero point per direction or per
    direction and channel; the products quantize their float operand at run time. The default form (rnn.lstm's
    fused one) runs one cell per step that quantizes the hidden state itself; the products are exact in both
    forms, as onnxruntime's int32 ones."""
    if any(v is None for v in (w_scale, w_zero_point, r_scale, r_zero_point)):
        raise ConversionError("inputs W_scale, W_zero_point, R_scale and R_zero_point are required")
    for name, t in (("W", w), ("R", r)):
        q8(t, name)
        if len(shape_of(t)) != 3:
            raise ConversionError(f"input {name} must be 3-D, got shape {shape_of(t)}")
    units = shape_of(w)[2]
    # float stand-ins of W and R in LSTM's layout: the shapes the LSTM checks (their values are never read)
    w_like = Constant(np.zeros((shape_of(w)[0], units, shape_of(w)[1]), np.float32))
    r_like = Constant(np.zeros((shape_of(r)[0], units, shape_of(r)[1]), np.float32))

    def dense(d, which, x2d):
        if which == "W":
            return _quantized_dense(x2d, w, d, w_scale, w_zero_point, units, "W")
        return _quantized_dense(x2d, r, d, r_scale, r_zero_point, units, "R")
    return lstm(x, w_like, r_like, b, sequence_lens, initial_h, initial_c, p, activation_alpha=activation_alpha,
                 activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget, layout=0, dense=dense,
                 quantized=_fused_parts(w, r, w_scale, w_zero_point, r_scale, r_zero_point))


# ---- QAttention ----

@converter("QAttention", domain=CONTRIB)
def qattention(x, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
               weight_zero_point=None, past=None, *, num_heads, do_rotary=0, mask_filter_value=MASK_FILTER_VALUE,
               past_present_share_buffer=0, scale=None, unidirectional=0):
    """Attention whose projection is the integer product (input - zp) @ (weight - zp) * (input_scale *
    weight_scale) + bias (weights per tensor or per column)."""
    if past_present_share_buffer or do_rotary:
        raise ConversionError("past_present_share_buffer and do_rotary are not supported")
    if len(shape_of(x)) != 3 or len(shape_of(weight)) != 2 or shape_of(weight)[1] % 3:
        raise ConversionError(f"input must be 3-D and weight 2-D (D, 3 * hidden), got {shape_of(x)} and "
                              f"{shape_of(weight)}")
    x_zp = None if input_zero_point is None else scalar(input_zero_point, "input_zero_point", x.type.dtype)
    columns = shape_of(weight)[1]
    qkv = matmul_integer_to_float(x, weight, reshape(scalar(input_scale, "input_scale"), (1,)),
                                  weight_scale, None if x_zp is None else reshape(x_zp, (1,)), weight_zero_point,
                                  bias)
    hidden = columns // 3
    parts = [fold("strided_slice", qkv, begin=(i * hidden,), end=((i + 1) * hidden,), axes=(2,)) for i in range(3)]
    return attention_of_projections(parts, mask_index, past, None, num_heads=num_heads,
                                    unidirectional=unidirectional, scale=scale, mask_filter_value=mask_filter_value)

"""Converters of the signal ops, each a composition of existing relayish ops (GridSample and RoiAlign:
sampling.py):
- HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix: every input is a constant, so the result is folded at
  import to a Constant (a size computed at run time is compiled per value, compiler/specialize.py);
- DFT and STFT: a DFT is linear, so along its axis it is one matmul with a constant [L * c, K * c'] matrix (c, c':
  1 for real, 2 for complex as a trailing dim) built at import from numpy's fft of the basis vectors; STFT frames
  the signal with a constant take, applies the window, then the same matrix;
- AffineGrid: the constant base grid [P, r + 1] times theta transposed (nn.matmul);
- Col2Im: a constant take of the (block element, pixel) table, masked, summed over the block elements.

The numerics follow onnx's reference implementations (onnx/reference/ops/op_dft.py etc.), which generated
the conformance cases.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, call, const
from relayish.types import DTYPES

from ..builders import astype, binary, elem_type_name, fold, normalize_axis, reshape, shape_of, transpose
from ..registry import converter
from ..values import ConversionError, constant_value, int_list_input, scalar_input

MAX_MATRIX_ELEMENTS = 1 << 24  # a DFT matrix of 128 MB in float64 is far beyond real uses
FLOAT_INPUTS = ("float32",)


def expect_float32(x: Expr, what: str):
    if x.type.dtype not in FLOAT_INPUTS:
        raise ConversionError(f"input {what} must be float32, got {x.type.dtype} (other types are not supported)")


def _output_dtype(output_datatype: int) -> str:
    dtype = elem_type_name(output_datatype, "attribute output_datatype")
    if dtype not in DTYPES:
        raise ConversionError(f"attribute output_datatype names {dtype}, which relayish does not support")
    return dtype


def _int_scalar(x: Expr, what: str) -> int:
    value = constant_value(x, what)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ConversionError(f"input {what!r} must be an integer scalar, got {value.dtype} of shape {value.shape}")
    return int(value.reshape(-1)[0])


# ---- window functions: folded at import ----

def _window(size, periodic, output_datatype, coefficients) -> Constant:
    """sum_k a_k cos(2 pi k n / N) for n < size, N = size (periodic) or size - 1 (symmetric)."""
    n = _int_scalar(size, "size")
    if n < 1:
        raise ConversionError(f"input 'size' must be >= 1, got {n}")
    if n > MAX_MATRIX_ELEMENTS:
        raise ConversionError(f"input 'size' {n} is larger than the {MAX_MATRIX_ELEMENTS} supported")
    if periodic not in (0, 1):
        raise ConversionError(f"attribute periodic must be 0 or 1, got {periodic}")
    denom = n if periodic else n - 1
    i = np.arange(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # size 1, symmetric: 0 / 0 as the reference computes
        value = sum(a * np.cos(2 * np.pi * k * i / denom) for k, a in enumerate(coefficients))
    return Constant(value.astype(_output_dtype(output_datatype)))


@converter("HannWindow", since=17)
def hann_window(size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (0.5, -0.5))


@converter("HammingWindow", since=17)
def hamming_window(size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (25 / 46, -21 / 46))


@converter("BlackmanWindow", since=17)
def blackman_window(size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (0.42, -0.5, 0.08))


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=1):
    """Triangular filters between mel-spaced frequency bins (the reference's integer bin arithmetic)."""
    mels, length = _int_scalar(num_mel_bins, "num_mel_bins"), _int_scalar(dft_length, "dft_length")
    rate = _int_scalar(sample_rate, "sample_rate")
    low, high = scalar_input(lower_edge_hertz, "lower_edge_hertz"), scalar_input(upper_edge_hertz,
                                                                                  "upper_edge_hertz")
    if mels < 1 or length < 1 or rate < 1 or not 0 <= low < high:
        raise ConversionError(f"MelWeightMatrix needs num_mel_bins, dft_length, sample_rate >= 1 and 0 <= "
                              f"lower_edge_hertz < upper_edge_hertz, got {mels}, {length}, {rate}, {low}, {high}")
    spectrogram_bins = length // 2 + 1
    checked = spectrogram_bins * mels
    if checked > MAX_MATRIX_ELEMENTS:
        raise ConversionError(f"MelWeightMatrix of {spectrogram_bins} x {mels} is larger than supported")
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    bins = np.arange(mels + 2) * ((high_mel - low_mel) / (mels + 2)) + low_mel
    bins = (((length + 1) * (700 * np.expm1(bins / 2595 * np.log(10)))) // rate).astype(np.int64)
    if bins[-1] >= spectrogram_bins:
        raise ConversionError(f"upper_edge_hertz {high} lies beyond the Nyquist frequency of sample_rate {rate}")
    out = np.zeros((spectrogram_bins, mels))
    for i in range(mels):
        left, center, right = (int(b) for b in bins[i:i + 3])
        if center == left:
            out[center, i] = 1
        else:
            for j in range(left, center + 1):
                out[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j, i] = (right - j) / (right - center)
    return Constant(out.astype(_output_dtype(output_datatype)))


# ---- DFT and STFT: matmul with a constant matrix ----

def dft_matrix(length: int, channels: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """[length * channels, K * c'] float64: row-major (sample, re/im) in -> row-major (bin, re/im) out, where the
    input holds `length` samples (truncated or zero-padded to n, as numpy's fft does). Forward onesided keeps
    n // 2 + 1 bins; inverse onesided is numpy's irfft (real output, c' = 1)."""
    basis = np.eye(length * channels).reshape(length * channels, length, channels)
    signal = basis[..., 0] + (1j * basis[..., 1] if channels == 2 else 0)
    if inverse and onesided:
        return np.fft.irfft(signal, n=n, axis=1)
    spectrum = np.fft.ifft(signal, n=n, axis=1) if inverse else np.fft.fft(signal, n=n, axis=1)
    if onesided:
        spectrum = spectrum[:, :n // 2 + 1]
    return np.stack([spectrum.real, spectrum.imag], axis=-1).reshape(length * channels, -1)


def _matmul64(x: Expr, matrix: Constant) -> Expr:
    """x @ matrix in float64, rounded once to x's float32: the reference transforms in float64 too, and near-zero
    outputs (the imaginary part of an inverse of a real signal's spectrum) must stay within 1e-7 of 0."""
    return astype(call("nn.matmul", astype(x, "float64"), matrix), x.type.dtype)


def _check_matrix(rows: int, n: int, what: str):
    if n < 1:
        raise ConversionError(f"dft_length must be >= 1, got {n}")
    if rows * 2 * n > MAX_MATRIX_ELEMENTS:
        raise ConversionError(f"{what}: a DFT of {rows} inputs to {n} points needs a {rows} x {2 * n} matrix, more "
                              f"than the {MAX_MATRIX_ELEMENTS} elements supported")


def _dft(x, dft_length, axis, inverse, onesided):
    expect_float32(x, "input")
    shape = shape_of(x)
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise ConversionError(f"input must have a trailing dim of 1 (real) or 2 (complex), got shape {shape}")
    if inverse not in (0, 1) or onesided not in (0, 1):
        raise ConversionError(f"attributes inverse and onesided must be 0 or 1, got {inverse} and {onesided}")
    inverse, onesided = bool(inverse), bool(onesided)
    axis = normalize_axis(axis, len(shape))
    if axis == len(shape) - 1:
        raise ConversionError(f"axis {axis} is the trailing re/im dim; it must be a signal dim")
    length, channels = shape[axis], shape[-1]
    if dft_length is None:
        n = 2 * (length - 1) if inverse and onesided else length
    else:
        n = _int_scalar(dft_length, "dft_length")
    if inverse and not onesided:
        # the matrix computes it exactly (float64), but onnx's reference transforms float32 signals in complex64,
        # so an output that is exactly 0 comes out as ~2e-7 there, beyond the conformance tolerance (1e-7 absolute);
        # refused rather than answered differently from the reference (onnxruntime's differs too)
        raise ConversionError("an inverse DFT with a complex output (inverse=1, onesided=0) is not supported: its "
                              "near-zero outputs cannot match onnx's complex64 reference within 1e-7")
    if onesided and not inverse and channels == 2:
        raise ConversionError("onesided output is defined for a real input only, got a complex input")
    _check_matrix(length * channels, n, "DFT")
    matrix = Constant(dft_matrix(length, channels, n, inverse, onesided))
    # the signal axis and the re/im dim last, flattened together: (..., L * c) @ M -> (..., K, c')
    rest = [d for d in range(len(shape) - 1) if d != axis]
    perm = rest + [axis, len(shape) - 1]
    moved = transpose(x, perm)
    lead = tuple(shape[d] for d in rest)
    y = _matmul64(reshape(moved, lead + (length * channels,)), matrix)
    out_channels = 1 if inverse and onesided else 2
    y = reshape(y, lead + (shape_of(matrix)[1] // out_channels, out_channels))
    return transpose(y, [perm.index(d) for d in range(len(shape))])


@converter("DFT", since=17)
def dft_v17(x, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(x, dft_length, axis, inverse, onesided)


@converter("DFT", since=20)
def dft_v20(x, dft_length=None, axis=None, *, inverse=0, onesided=0):
    return _dft(x, dft_length, -2 if axis is None else _int_scalar(axis, "axis"), inverse, onesided)


@converter("STFT", since=17)
def stft(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """[batch, length, c] -> [batch, frames, bins, 2]: frames of frame_length samples every frame_step, times the
    window, each through the DFT of frame_length points."""
    expect_float32(signal, "signal")
    shape = shape_of(signal)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ConversionError(f"signal must be [batch, length, 1 or 2], got shape {shape}")
    step = _int_scalar(frame_step, "frame_step")
    width = shape_of(window)[0] if window is not None else None
    if window is not None and len(shape_of(window)) != 1:
        raise ConversionError(f"window must be 1-D, got shape {shape_of(window)}")
    n = _int_scalar(frame_length, "frame_length") if frame_length is not None else width or shape[1]
    width = width or n
    if width != n:
        raise ConversionError(f"the window has {width} samples but frame_length is {n}")
    if step < 1 or not 1 <= n <= shape[1]:
        raise ConversionError(f"frame_step must be >= 1 and frame_length in [1, {shape[1]}], got {step} and {n}")
    if onesided not in (0, 1):
        raise ConversionError(f"attribute onesided must be 0 or 1, got {onesided}")
    if onesided and shape[-1] == 2:
        raise ConversionError("onesided output is defined for a real signal only, got a complex signal")
    frames = 1 + (shape[1] - n) // step
    channels = shape[-1]
    _check_matrix(n * channels, n, "STFT")
    starts = np.arange(frames, dtype=np.int64)[:, None] * step + np.arange(n, dtype=np.int64)
    framed = fold("take", signal, Constant(starts), axis=1)  # [batch, frames, n, c]
    if window is not None:
        expect_float32(window, "window")
        framed = binary("multiply", framed, reshape(window, (n, 1)))
    matrix = Constant(dft_matrix(n, channels, n, False, bool(onesided)))
    y = _matmul64(reshape(framed, (shape[0], frames, n * channels)), matrix)
    return reshape(y, (shape[0], frames, shape_of(matrix)[1] // 2, 2))


# ---- AffineGrid ----

def _base_coords(extent: int, align_corners: bool) -> np.ndarray:
    """Normalized coordinates in [-1, 1] of `extent` positions (pixel centers, or corners if align_corners)."""
    if align_corners:
        return np.linspace(-1.0, 1.0, extent) if extent > 1 else np.array([-1.0])
    return (2 * np.arange(extent) + 1) / extent - 1


@converter("AffineGrid", since=20)
def affine_grid(theta, size, *, align_corners=0):
    expect_float32(theta, "theta")
    dims = int_list_input(size, "size")
    if len(dims) not in (4, 5) or any(d < 1 for d in dims):
        raise ConversionError(f"size must be (N, C, H, W) or (N, C, D, H, W) of positive dims, got {dims}")
    if align_corners not in (0, 1):
        raise ConversionError(f"attribute align_corners must be 0 or 1, got {align_corners}")
    spatial = dims[2:]
    r = len(spatial)
    if shape_of(theta) != (dims[0], r, r + 1):
        raise ConversionError(f"theta must have shape {(dims[0], r, r + 1)} for size {dims}, got {shape_of(theta)}")
    points = math.prod(spatial)
    if points * (r + 1) > MAX_MATRIX_ELEMENTS:
        raise ConversionError(f"size {dims} makes a grid larger than supported")
    axes = np.meshgrid(*[_base_coords(d, bool(align_corners)) for d in spatial], indexing="ij")
    # homogeneous coordinates (x, y[, z], 1): x runs along the last spatial dim
    base = np.stack([a.reshape(-1) for a in reversed(axes)] + [np.ones(points)], axis=1)
    y = call("nn.matmul", Constant(base.astype(np.float32)), transpose(theta, (0, 2, 1)))  # [N, P, r]
    return reshape(y, (dims[0],) + tuple(spatial) + (r,))


# ---- Col2Im ----

MAX_COL2IM_TAPS = 1 << 24  # block elements x output pixels: the size of the constant index table


def col2im_table(image, block, dilations, pads, strides) -> tuple[np.ndarray, np.ndarray, int]:
    """(index [K, P] into the flattened (block element, block position) input dim, mask [K, P], L): output pixel
    p receives block element k of the block at index[k, p] where mask[k, p]. K = prod(block), P = prod(image)."""
    r = len(image)
    positions = [(image[d] + pads[d] + pads[r + d] - (dilations[d] * (block[d] - 1) + 1)) // strides[d] + 1
                 for d in range(r)]
    if any(n < 1 for n in positions):
        raise ConversionError(f"blocks {block} (dilations {dilations}) do not fit image {image} padded by {pads}")
    k_count, p_count, l_count = math.prod(block), math.prod(image), math.prod(positions)
    if k_count * p_count > MAX_COL2IM_TAPS:
        raise ConversionError(f"Col2Im of {k_count} block elements over {p_count} pixels is larger than supported")
    index = np.zeros((k_count, p_count), np.int64)
    mask = np.zeros((k_count, p_count), bool)
    for k, offset in enumerate(np.ndindex(*block)):
        for l, at in enumerate(np.ndindex(*positions)):
            pixel = [at[d] * strides[d] - pads[d] + offset[d] * dilations[d] for d in range(r)]
            if all(0 <= pixel[d] < image[d] for d in range(r)):
                p = int(np.ravel_multi_index(pixel, image))
                index[k, p], mask[k, p] = k * l_count + l, True
    return index, mask, l_count


@converter("Col2Im", since=18)
def col2im(x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """[N, C * prod(block), L] -> [N, C, *image]: every pixel sums the block elements that cover it (a constant
    take of [K, P] positions, masked, summed over K)."""
    expect_float32(x, "input")
    image, block = int_list_input(image_shape, "image_shape"), int_list_input(block_shape, "block_shape")
    r = len(image)
    dilations = tuple(dilations) if dilations is not None else (1,) * r
    strides = tuple(strides) if strides is not None else (1,) * r
    pads = tuple(pads) if pads is not None else (0,) * (2 * r)
    if len(block) != r or len(dilations) != r or len(strides) != r or len(pads) != 2 * r:
        raise ConversionError(f"image_shape {image}, block_shape {block}, dilations {dilations}, strides {strides} "
                              f"need one value per spatial dim (pads two)")
    if any(v < 1 for v in image + block + dilations + strides) or any(p < 0 for p in pads):
        raise ConversionError("image_shape, block_shape, dilations and strides must be >= 1 and pads >= 0")
    shape = shape_of(x)
    k_count = math.prod(block)
    index, mask, l_count = col2im_table(image, block, dilations, pads, strides)
    if len(shape) != 3 or shape[1] % k_count or shape[2] != l_count:
        raise ConversionError(f"input must be [N, C * {k_count}, {l_count}] for these blocks, got shape {shape}")
    n, c = shape[0], shape[1] // k_count
    taken = fold("take", reshape(x, (n, c, k_count * l_count)), Constant(index), axis=2)  # [N, C, K, P]
    summed = fold("sum", fold("where", Constant(mask), taken, const(0.0, "float32")), axes=(2,), keepdims=False)
    return reshape(summed, (n, c) + tuple(image))

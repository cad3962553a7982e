"""64-byte aligned, C-contiguous numpy buffers: the workspace, the weights and the outputs a compiled library writes.

Kernels assume only the alignment of their elements (compiler/codegen/llvm.py): a caller's input array is read in
place when it is C-contiguous and element-aligned, and copied into an `aligned_empty` buffer otherwise. The
library's own buffers start on cache lines (64 bytes), so that no vector load of them splits one.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

ALIGNMENT = 64


def aligned_empty(shape, dtype, align: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous array whose data pointer is a multiple of `align`.

    The array is a view into a slightly larger uint8 block (kept alive by the view's `.base` chain). Even a
    zero-size array gets a valid, aligned, non-null pointer, so the native side never sees NULL.
    """
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(max(nbytes, 1) + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    # The ndarray constructor keeps the exact offset even for zero-size arrays (slicing would not).
    return np.ndarray(shape, dtype=dtype, buffer=raw, offset=offset)


def data_address(array: np.ndarray) -> int:
    """The address of the array's data: `array.ctypes.data`, in a quarter of its time for a writable C-contiguous
    array (the hot path of Module.run: ctypes reads the pointer through the buffer protocol)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):  # read-only, not contiguous or empty
        return array.ctypes.data


def is_aligned(array: np.ndarray, align: int = ALIGNMENT) -> bool:
    """True when `array` is C-contiguous and its data pointer is a multiple of `align`."""
    return array.flags.c_contiguous and array.ctypes.data % align == 0


def as_aligned(array: np.ndarray, align: int = ALIGNMENT) -> np.ndarray:
    """`array` itself when already aligned and C-contiguous, else an aligned C-contiguous copy of it."""
    if is_aligned(array, align):
        return array
    out = aligned_empty(array.shape, array.dtype, align)
    out[...] = array
    return out


def kernel_arguments(specs, inputs, fill: float | None = 0) -> list[np.ndarray]:
    """One aligned buffer per kernel parameter, in parameter order, for (shape, dtype) `specs`: copies of `inputs`
    for the first len(inputs) parameters, the rest (outputs, then scratch) set to `fill` (None: uninitialised).

    The native side keeps only the buffers' addresses: the caller must keep the returned list alive."""
    specs = list(specs)
    if len(inputs) > len(specs):
        raise ValueError(f"kernel_arguments: {len(inputs)} inputs for a kernel of {len(specs)} parameters")
    args = []
    for k, (shape, dtype) in enumerate(specs):
        buf = aligned_empty(shape, dtype)
        if k < len(inputs):
            if tuple(np.shape(inputs[k])) != buf.shape:
                raise ValueError(f"kernel_arguments: input {k} has shape {tuple(np.shape(inputs[k]))}, the kernel "
                                 f"takes {buf.shape}")
            buf[...] = inputs[k]
        elif fill is not None:
            buf[...] = fill
        args.append(buf)
    return args


def packed_offsets(nbytes_list, align: int = ALIGNMENT) -> tuple[list[int], int]:
    """Offsets that place buffers of the given sizes back to back in one block, each starting `align`-aligned;
    returns (offsets, total block size)."""
    offsets, end = [], 0
    for nbytes in nbytes_list:
        offsets.append(end)
        end += -(-nbytes // align) * align
    return offsets, end

"""nn.matmul_pack: matmul with a constant weight in column blocks, the transformer projections' form.

x [.., M, K] @ W [K, N], with W stored as w [N/nb, K, nb] (w[j, k, c] = W[k, j * nb + c]): compiler/passes/
layout.py rewrites matmul(x, constant W) into it and folds the packing at compile time. A register tile of
nb columns (compiler/matmul_schedule.py) then reads its panel of the weight as one contiguous stream, K rows
of nb floats, instead of K rows N floats apart.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType
from ..op import OpError, Pattern, register_op
from .common import expect_float, same_dtype
from .layout import packed_units


def pack_weight(w: np.ndarray, block: int) -> np.ndarray:
    """W [K, N] -> [ceil(N/block), K, block], the last block padded with zero columns."""
    k, n = w.shape
    if n % block:
        w = np.pad(w, ((0, 0), (0, block - n % block)))
    return np.ascontiguousarray(w.reshape(k, -1, block).transpose(1, 0, 2))


def _mp_infer(arg_types, attrs):
    x, w = arg_types
    op = "nn.matmul_pack"
    expect_float(op, x)
    same_dtype(op, arg_types)
    if x.ndim < 2 or w.ndim != 3:
        raise OpError(f"{op}: data must be at least 2-D and the weight 3-D [N/nb, K, nb]; got {x.shape} and "
                      f"{w.shape}")
    if w.shape[1] != x.shape[-1]:
        raise OpError(f"{op}: data {x.shape} has K={x.shape[-1]} but the weight {w.shape} has K={w.shape[1]}")
    return TensorType(x.shape[:-1] + (packed_units(op, w.shape, attrs.units),), x.dtype)


def _mp_ref(x, w, units=0):
    nbs, k, nb = w.shape
    y = np.matmul(x, w.transpose(1, 0, 2).reshape(k, nbs * nb)).astype(x.dtype)
    return y[..., :units] if units else y


def _mp_compute(inputs, attrs, out_type):
    x, w = inputs
    nb = w.shape[2]
    k = te.reduce_axis(x.shape[-1], "k")
    return te.compute(out_type.shape, lambda *i: te.sum(x[tuple(i[:-1]) + (k.var,)] * w[i[-1] // nb, k.var,
                                                                                          i[-1] % nb], k),
                      name="matmul", tag="matmul_pack")


register_op("nn.matmul_pack", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="dense", infer=_mp_infer,
            ref=_mp_ref, compute=_mp_compute, flops=lambda a, attrs, o: 2.0 * o.size * a[0].shape[-1],
            attrs={"units": 0},
            doc="x [.., M, K] @ W [K, N] with the weight packed in column blocks: w [N/nb, K, nb] (units: the "
                "first N columns only, the last block zero-padded; 0: all)")

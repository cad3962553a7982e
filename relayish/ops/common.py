"""Helpers shared by op declarations: shape rules and compute building blocks."""
from __future__ import annotations

import numpy as np

from .. import te
from ..expr import TensorType
from ..op import OpError


def broadcast_shape(op: str, *shapes) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise OpError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


def same_dtype(op: str, types) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise OpError(f"{op}: inputs have different dtypes {sorted(dtypes)}")
    return dtypes.pop()


def expect_ndim(op: str, t: TensorType, ndim: int, what: str = "input"):
    if len(t.shape) != ndim:
        raise OpError(f"{op}: {what} must be {ndim}-D, got shape {t.shape}")


def broadcast_index(tensor: te.Tensor, out_index, out_ndim: int):
    """Index `tensor` (numpy-broadcast against an output of rank out_ndim) at out_index."""
    offset = out_ndim - tensor.ndim
    idx = []
    for d, extent in enumerate(tensor.shape):
        idx.append(0 if extent == 1 else out_index[offset + d])
    return tensor[tuple(idx)] if idx else tensor[()]

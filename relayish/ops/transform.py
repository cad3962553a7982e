"""Injective data-movement ops: reshape, transpose, concatenate (layout_transform is declared by the lead).

They do no arithmetic; their FLOPs count 1 per output element like the registry's default, so that no task has a
FLOP count of zero (tuners divide by it).
"""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..dims import exact_quotient
from ..types import TensorType, dim, is_static_dim
from ..op import REQUIRED, OpError, Pattern, register_op
from .common import normalize_axis, num_elements, same_dim, same_dtype, show_shape


def _movement_flops(arg_types, attrs, out_type):
    return float(out_type.size)

# ---------------------------------------------------------------------------------------------- reshape


def _reshape_normalize(attrs, arg_types):
    attrs = dict(attrs)
    try:
        attrs["newshape"] = tuple(dim(d) for d in attrs["newshape"])
    except (TypeError, ValueError):
        raise OpError(f"reshape: newshape must be a sequence of ints, got {attrs['newshape']!r}") from None
    return attrs


def _reshape_infer(arg_types, attrs):
    x, = arg_types
    new = attrs.newshape
    if not (x.is_static and all(is_static_dim(d) for d in new)):
        if _run_time_groups(x.shape, new) is None:
            raise OpError(f"reshape: cannot show that {show_shape(x.shape)} and {show_shape(new)} hold as many "
                          "elements: their products must be equal expressions of the dims known only at run time")
        return TensorType(new, x.dtype)
    if any(d < 1 for d in new):
        raise OpError(f"reshape: newshape {new} must be fully resolved (every dim >= 1; no 0 or -1)")
    if num_elements(new) != x.size:
        raise OpError(f"reshape: cannot reshape {x.shape} ({x.size} elements) to {new} "
                      f"({num_elements(new)} elements)")
    return TensorType(new, x.dtype)


def _reshape_groups(src: tuple, dst: tuple) -> list[tuple[range, range]]:
    """Split both shapes into consecutive groups of dims with equal element counts (src dims, dst dims), the
    finest such split: e.g. (2, 3, 4, 5) -> (6, 20) gives [(0..2, 0..1), (2..4, 1..2)]. Each group is reshaped on
    its own, which keeps index expressions short (a dim that is unchanged maps straight through)."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        i0, j0 = i, j
        ps = pd = 1
        while True:  # grow the side with the smaller product until both are equal and non-empty
            if (ps < pd or j == len(dst)) and i < len(src):
                ps *= src[i]
                i += 1
            elif j < len(dst):
                pd *= dst[j]
                j += 1
            else:
                break
            if ps == pd and i > i0 and j > j0:
                break
        # trailing extent-1 dims join the last group
        if i == len(src) or j == len(dst):
            i, j = len(src), len(dst)
        groups.append((range(i0, i), range(j0, j)))
    return groups


def _anchored_groups(src: tuple, dst: tuple) -> list | None:
    """_reshape_groups for shapes with dims known only at run time: each such dim is a group of its own, mapped
    through to the same dim of dst (same expression, same order); the static dims between two of them are
    grouped as _reshape_groups groups them. None when the shapes do not line up so."""
    sa = [i for i, d in enumerate(src) if not is_static_dim(d)]
    da = [j for j, d in enumerate(dst) if not is_static_dim(d)]
    if len(sa) != len(da) or not all(same_dim(src[i], dst[j]) for i, j in zip(sa, da)):
        return None
    groups, i0, j0 = [], 0, 0
    for i, j in zip(sa + [len(src)], da + [len(dst)]):
        seg_s, seg_d = src[i0:i], dst[j0:j]
        if num_elements(seg_s) != num_elements(seg_d):
            return None
        if seg_s or seg_d:
            groups += [(range(i0 + a.start, i0 + a.stop), range(j0 + b.start, j0 + b.stop))
                       for a, b in _reshape_groups(seg_s, seg_d)]
        if i < len(src):
            groups.append((range(i, i + 1), range(j, j + 1)))
        i0, j0 = i + 1, j + 1
    return groups


def _merged_groups(src: tuple, dst: tuple) -> list | None:
    """Consecutive groups of dims with products that are equal expressions, for shapes with dims known only at run
    time that do not map through (a depth-to-space: (h, 2) -> (2 * h)): each group grows on the side whose
    product divides the other's exactly (relayish.dims.exact_quotient). None when the shapes do not line up so."""
    groups, i, j = [], 0, 0
    while i < len(src) and j < len(dst):
        i0, j0, ps, pd = i, j, src[i], dst[j]
        i, j = i + 1, j + 1
        while not same_dim(dim(ps), dim(pd)):
            if i < len(src) and exact_quotient(pd, ps) is not None:
                ps, i = dim(ps * src[i]), i + 1
            elif j < len(dst) and exact_quotient(ps, pd) is not None:
                pd, j = dim(pd * dst[j]), j + 1
            else:
                return None
        groups.append((range(i0, i), range(j0, j)))
    if not groups or not all(is_static_dim(d) and d == 1 for d in src[i:] + dst[j:]):
        return None
    if i < len(src) or j < len(dst):  # trailing extent-1 dims join the last group
        groups[-1] = (range(groups[-1][0].start, len(src)), range(groups[-1][1].start, len(dst)))
    return groups


def _run_time_groups(src: tuple, dst: tuple) -> list | None:
    """The groups of a reshape over dims known only at run time: mapped through (_anchored_groups), merged
    (_merged_groups), or else the whole shape as one group when the products are equal expressions (YOLOX's
    (n, 6, 52, 52) -> (1, 6, n * 2704): the items' values spread over the channels, read back by a row-major
    position whose divisors are static); None when not even the products can be shown equal."""
    groups = _anchored_groups(src, dst) or _merged_groups(src, dst)
    if groups is None and same_dim(dim(math.prod(src)), dim(math.prod(dst))):
        groups = [(range(len(src)), range(len(dst)))]
    return groups


def _reshape_compute(inputs, attrs, out_type):
    x, = inputs
    src, dst = x.shape, out_type.shape
    static = all(is_static_dim(d) for d in src + dst)
    groups = _reshape_groups(src, dst) if static else _run_time_groups(src, dst)

    def body(*out_idx):
        in_idx = [None] * len(src)
        for sdims, ddims in groups:
            if len(sdims) == len(ddims) == 1 and not is_static_dim(src[sdims[0]]):  # a run-time dim, mapped through
                in_idx[sdims[0]] = out_idx[ddims[0]]
                continue
            flat = 0  # row-major position inside the group
            for d in ddims:
                flat = flat * dst[d] + (out_idx[d] if not (is_static_dim(dst[d]) and dst[d] == 1) else 0)
            leading = True  # the group's first dim of extent > 1: flat // stride is below its extent, no wrap
            for k, d in enumerate(sdims):
                # the product of the dims after d (not a quotient: a run-time dim such as q - 1 divides no sum)
                stride = dim(math.prod((src[e] for e in list(sdims)[k + 1:]), start=1))
                if is_static_dim(src[d]) and src[d] == 1:
                    in_idx[d] = 0
                    continue
                index = flat // stride
                in_idx[d] = index if leading else index % src[d]
                leading = False
        return x[tuple(in_idx)]
    return te.compute(dst, body, name="reshape", tag="injective")


register_op("reshape", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_reshape_infer,
            ref=lambda x, newshape: x.reshape([d if is_static_dim(d) else -1 for d in newshape]),  # (one known
            compute=_reshape_compute, normalize=_reshape_normalize,  # only at run time: a data-sized one, the rest)
            attrs={"newshape": REQUIRED}, flops=_movement_flops,
            doc="Row-major reshape to a fully resolved shape (the frontend resolves 0 and -1).")

# ---------------------------------------------------------------------------------------------- transpose


def _transpose_normalize(attrs, arg_types):
    attrs = dict(attrs)
    ndim = arg_types[0].ndim
    axes = attrs["axes"]
    axes = tuple(range(ndim))[::-1] if axes is None else tuple(int(a) for a in axes)
    if len(axes) != ndim or any(not -ndim <= a < ndim for a in axes) or \
            sorted(a % ndim for a in axes) != list(range(ndim)):
        raise OpError(f"transpose: axes {axes} is not a permutation of the {ndim} axes of the input")
    attrs["axes"] = tuple(a % ndim for a in axes)
    return attrs


def _transpose_infer(arg_types, attrs):
    x, = arg_types
    return TensorType(tuple(x.shape[a] for a in attrs.axes), x.dtype)


def _transpose_compute(inputs, attrs, out_type):
    x, = inputs

    def body(*i):
        idx = [None] * x.ndim
        for out_dim, in_dim in enumerate(attrs.axes):
            idx[in_dim] = i[out_dim]
        return x[tuple(idx)]
    return te.compute(out_type.shape, body, name="transpose", tag="injective")


register_op("transpose", inputs=1, pattern=Pattern.INJECTIVE, op_class="layout", infer=_transpose_infer,
            ref=lambda x, axes: np.ascontiguousarray(np.transpose(x, axes)), compute=_transpose_compute,
            normalize=_transpose_normalize, attrs={"axes": None}, flops=_movement_flops,
            doc="out dim d is input dim axes[d]; axes None reverses the dims.")

# ---------------------------------------------------------------------------------------------- concatenate


def _concat_normalize(attrs, arg_types):
    if not arg_types:
        raise OpError("concatenate: needs at least one input")
    attrs = dict(attrs)
    attrs["axis"] = normalize_axis("concatenate", attrs["axis"], arg_types[0].ndim)
    return attrs


def _concat_infer(arg_types, attrs):
    ax = attrs.axis
    first = arg_types[0]
    dtype = same_dtype("concatenate", arg_types)
    for k, t in enumerate(arg_types[1:], start=1):
        if t.ndim != first.ndim:
            raise OpError(f"concatenate: input {k} has rank {t.ndim} (shape {t.shape}) but input 0 has rank "
                          f"{first.ndim} (shape {first.shape})")
        for d in range(first.ndim):
            if d != ax and t.shape[d] != first.shape[d]:
                raise OpError(f"concatenate: input {k} has shape {t.shape} but input 0 has {first.shape}: they "
                              f"differ in dim {d}, not only in the concatenation axis {ax}")
    total = sum(t.shape[ax] for t in arg_types)
    return TensorType(first.shape[:ax] + (total,) + first.shape[ax + 1:], dtype)


def _concat_compute(inputs, attrs, out_type):
    """A balanced tree of selects on the position along the axis (depth log2 of the inputs: a recurrent layer's
    history concatenates hundreds of states, and a chain of that many selects is deeper than the lowering's
    recursion can follow); each input's read index is clamped into that input."""
    ax = attrs.axis

    offsets = np.cumsum([0] + [t.shape[ax] for t in inputs]).tolist()

    def read(k, i):
        """Input k at output index i; only the bounds that i can cross (a select not taken) are clamped."""
        t, idx = inputs[k], list(i)
        pos = i[ax] - offsets[k]
        if k > 0:
            pos = te.max_(pos, 0)
        if k < len(inputs) - 1:
            pos = te.min_(pos, t.shape[ax] - 1)
        idx[ax] = pos
        return t[tuple(idx)]

    def body(*i):
        def tree(lo, hi):  # inputs lo .. hi-1
            if hi - lo == 1:
                return read(lo, i)
            mid = (lo + hi) // 2
            return te.select(i[ax] < offsets[mid], tree(lo, mid), tree(mid, hi))
        return tree(0, len(inputs))
    return te.compute(out_type.shape, body, name="concatenate", tag="injective")


register_op("concatenate", inputs=None, pattern=Pattern.INJECTIVE, op_class="layout", infer=_concat_infer,
            ref=lambda *xs, axis: np.concatenate(xs, axis=axis), compute=_concat_compute,
            normalize=_concat_normalize, attrs={"axis": 0}, flops=_movement_flops,
            doc="Join inputs along axis; all other dims must match.")

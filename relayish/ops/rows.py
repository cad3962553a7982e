"""Reductions along the last axis in two stages, for softmax and layer norm over rows.

A reduction of a row of `length` elements is written as per-lane partials `part[.., l1] = R_l0 v(.., l0 * lanes
+ l1)` (the reduction walks the row in vectors of `lanes` contiguous elements: each step is one vector load and
one vector max/add), then one reduction over the `lanes` partials. That is the rfactor of the plain reduction:
the result differs from it only by the order of a sum. Stages made here carry ROW_TAG (with the op's tag in the
name); compiler/row_schedule.py schedules tasks made only of such stages: rows in parallel, every stage of a row
computed at the row, lanes vectorized.
"""
from __future__ import annotations

from .. import te

ROW_TAG = "row_reduce"  # every stage of a two-stage row computation carries it: the row schedule's condition
ROW_LANES = (16, 8)  # the partials' width: the first that divides the row length


def row_lanes(length: int, dtype: str = "float32") -> int | None:
    """Lanes of the partials for a row of `length`: the first width that divides it, else the widest that fits
    twice in it (the row's last length % lanes elements are then a tail); None for a row too short for partials
    (use the plain reduction). 16-bit floats take the tail form only where they took it before it existed (a
    width divides the row): their stored intermediates round differently from the plain reduction's, and onnx's
    float16 Attention cases, which the plain reduction matches, lie within that difference."""
    whole = next((w for w in ROW_LANES if length % w == 0 and length > w), None)
    if whole or dtype in ("float16", "bfloat16"):
        return whole
    return next((w for w in ROW_LANES if length >= 2 * w), None)


def row_reduce(outer: tuple, length: int, value, combiner: str, name: str) -> te.Tensor:
    """[*outer] = combiner over l < length of value(i, l) (i: the outer index tuple), as per-lane partials
    [*outer, lanes] then a reduction of those. `length` must have row_lanes. When lanes do not divide the row,
    the partials cover its whole vectors and the tail (fewer than `lanes` elements) is reduced into the result:
    a third stage, with the partials' reduction inlined into it."""
    lanes = row_lanes(length)  # (the caller checked row_lanes for its dtype)
    whole, tail = divmod(length, lanes)
    reducer = {"sum": te.sum, "max": te.max_reduce, "min": te.min_reduce}[combiner]
    l0 = te.reduce_axis(whole, "l0")
    part = te.compute(tuple(outer) + (lanes,), lambda *i: reducer(value(i[:-1], l0.var * lanes + i[-1]), l0),
                      name=f"{name}_lanes", tag=ROW_TAG)
    l1 = te.reduce_axis(lanes, "l1")
    if not tail:
        return te.compute(tuple(outer), lambda *i: reducer(part[tuple(i) + (l1.var,)], l1), name=name, tag=ROW_TAG)
    head = te.compute(tuple(outer), lambda *i: reducer(part[tuple(i) + (l1.var,)], l1), name=f"{name}_head",
                      tag=ROW_TAG)
    t = te.reduce_axis(tail, "t")
    rest = te.compute(tuple(outer), lambda *i: reducer(value(i, whole * lanes + t.var), t), name=f"{name}_tail",
                      tag=ROW_TAG)
    combine = {"sum": lambda a, b: a + b, "max": te.max_, "min": te.min_}[combiner]
    return te.compute(tuple(outer), lambda *i: combine(head[i], rest[i]), name=name, tag=ROW_TAG)


def trailing_reduce(x: te.Tensor, count: int, combiner: str, name: str) -> te.Tensor | None:
    """[*x.shape[:-count]] = combiner over x's last `count` axes, read as one row of their product (contiguous in
    memory: the reshape's index l // W, l % W recombines to l in the lowered flat index, compiler/arith.py), in
    the row form; None when the row is too short for it (the plain reduction then)."""
    outer, inner = x.shape[:x.ndim - count], x.shape[x.ndim - count:]
    length = 1
    for d in inner:
        length *= d
    if combiner not in ("sum", "max", "min") or not row_lanes(length, x.dtype):
        return None

    def value(i, l):
        index = []
        for d in reversed(inner[1:]):
            index.append(l % d)
            l = l // d
        return x[tuple(i) + (l,) + tuple(reversed(index))]
    return row_reduce(outer, length, value, combiner, name)

"""Reductions along the last axis in two stages, for softmax and layer norm over rows.

A reduction of a row of `length` elements is written as per-lane partials `part[.., l1] = R_l0 v(.., l0 * lanes
+ l1)` (the reduction walks the row in vectors of `lanes` contiguous elements: each step is one vector load and
one vector max/add), then one reduction over the `lanes` partials. That is the rfactor of the plain reduction:
the result differs from it only by the order of a sum. Few long rows (a sum over every axis) are also cut into
chunks, each with its partials (row_chunks): the threads' work, and a blocked sum's accuracy. Stages made here carry ROW_TAG (with the op's tag in the
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
    float16 Attention cases, which the plain reduction matches, lie within that difference. A row whose length is
    known only at run time takes the plain reduction (None)."""
    if isinstance(length, te.PrimExpr):
        return None
    whole = next((w for w in ROW_LANES if length % w == 0 and length > w), None)
    if whole or dtype in ("float16", "bfloat16"):
        return whole
    return next((w for w in ROW_LANES if length >= 2 * w), None)


ROW_CHUNK_VECTORS = 1024  # a single row is cut into chunks of at least this many vectors (16,384 floats: a
# shorter one runs on one thread, a fork and join costing more than its sum saves) ...
ROW_CHUNKS = 8  # ... and at most this many: the threads' work (two rows or more run row by row,
# compiler/row_schedule.py, each thread on whole rows, as onnxruntime's softmax)
ROW_ACCUMULATORS = ((16, 4), (8, 2))  # (whole vectors at least, vectors of partials): independent accumulators


def row_accumulators(vectors: int, dtype: str = "float32") -> int:
    """How many vectors of partials a row of `vectors` whole vectors accumulates at once (each step one add or max
    per vector, none waiting on another): with one, a row's partial reduction waited an add's latency per vector,
    3 cycles per 16 elements on a Zen 4. 16-bit floats keep one (their rounding follows the partials' order, see
    row_lanes)."""
    if dtype in ("float16", "bfloat16"):
        return 1
    return next((k for least, k in ROW_ACCUMULATORS if vectors >= least), 1)


def row_chunks(rows: int, vectors: int, group: int = 1) -> int:
    """Into how many chunks a reduction of `rows` rows of `vectors` whole vectors (taken `group` at a time) cuts
    each row: 1 when there are two rows or more (each thread takes whole rows) or the row is short; else up to
    ROW_CHUNKS chunks of at least ROW_CHUNK_VECTORS vectors, the count among the upper half of that range that
    leaves the fewest groups over (reduced on their own, one vector add each). A sum over every axis of a
    (1, 104, 2048) tensor was one serial scalar loop, 4x onnxruntime's time, and over (443, 384) 1.7e-4 off its
    result; chunks give it threads, and with the lanes a sum of blocks of a few thousand elements then a tree,
    not one of 170,000."""
    target = min(ROW_CHUNKS, vectors // ROW_CHUNK_VECTORS) if rows == 1 else 1
    if target < 2:
        return 1
    return min(range(max(2, target // 2), target + 1), key=lambda c: ((vectors // group) % c, -c))


def row_reduce(outer: tuple, length: int, value, combiner: str, name: str,
               dtype: str = "float32") -> te.Tensor:
    """[*outer] = combiner over l < length of value(i, l) (i: the outer index tuple), as per-lane partials
    [*outer, lanes] then a reduction of those. `length` must have row_lanes. When lanes do not divide the row,
    the partials cover its whole vectors and the tail (fewer than `lanes` elements) is reduced into the result:
    a third stage, with the partials' reduction inlined into it. How the partials are made: see _lane_partials."""
    lanes = row_lanes(length, dtype)  # (the caller checked row_lanes for its dtype)
    whole, tail = divmod(length, lanes)
    reducer = {"sum": te.sum, "max": te.max_reduce, "min": te.min_reduce}[combiner]
    combine = {"sum": lambda a, b: a + b, "max": te.max_, "min": te.min_}[combiner]
    part = _lane_partials(outer, whole, lanes, row_accumulators(whole, dtype), value, reducer, combine, name)
    l1 = te.reduce_axis(lanes, "l1")
    if not tail:
        return te.compute(tuple(outer), lambda *i: reducer(part[tuple(i) + (l1.var,)], l1), name=name, tag=ROW_TAG)
    head = te.compute(tuple(outer), lambda *i: reducer(part[tuple(i) + (l1.var,)], l1), name=f"{name}_head",
                      tag=ROW_TAG)
    t = te.reduce_axis(tail, "t")
    rest = te.compute(tuple(outer), lambda *i: reducer(value(i, whole * lanes + t.var), t), name=f"{name}_tail",
                      tag=ROW_TAG)
    return te.compute(tuple(outer), lambda *i: combine(head[i], rest[i]), name=name, tag=ROW_TAG)


def _lane_partials(outer: tuple, whole: int, lanes: int, k: int, value, reducer, combine, name: str):
    """[*outer, lanes]: per lane, the reduction of the row's first `whole` vectors. The row is read in groups of
    k vectors (row_accumulators) into partials k vectors wide; when the rows are few and long (row_chunks), each
    row's groups are cut into chunks with partials of their own [*outer, chunks, k * lanes] (the parallel work),
    reduced over the chunks. The k vectors are folded to one, then combined with a reduction of the vectors that
    no chunk or group takes."""
    rows = 1
    for n in outer:
        rows *= n
    width = k * lanes
    chunks = row_chunks(rows, whole, k)
    per = whole // k // chunks  # groups per chunk
    over = whole - chunks * per * k  # vectors left over
    l0 = te.reduce_axis(per, "l0")
    if chunks == 1:
        part = te.compute(tuple(outer) + (width,), lambda *i: reducer(value(i[:-1], l0.var * width + i[-1]), l0),
                          name=f"{name}_lanes" if k == 1 else f"{name}_groups", tag=ROW_TAG)
    else:
        chunked = te.compute(tuple(outer) + (chunks, width), lambda *i: reducer(
            value(i[:-2], (i[-2] * per + l0.var) * width + i[-1]), l0), name=f"{name}_chunks", tag=ROW_TAG)
        c = te.reduce_axis(chunks, "c")
        part = te.compute(tuple(outer) + (width,), lambda *i: reducer(chunked[tuple(i[:-1]) + (c.var, i[-1])], c),
                          name=f"{name}_lanes" if k == 1 else f"{name}_groups", tag=ROW_TAG)
    if k > 1:
        g = te.reduce_axis(k, "g")
        part = te.compute(tuple(outer) + (lanes,), lambda *i: reducer(
            part[tuple(i[:-1]) + (g.var * lanes + i[-1],)], g), name=f"{name}_lanes", tag=ROW_TAG)
    if not over:
        return part
    v = te.reduce_axis(over, "v")
    left = te.compute(tuple(outer) + (lanes,), lambda *i: reducer(
        value(i[:-1], (whole - over + v.var) * lanes + i[-1]), v), name=f"{name}_over", tag=ROW_TAG)
    return te.compute(tuple(outer) + (lanes,), lambda *i: combine(part[i], left[i]), name=f"{name}_all",
                      tag=ROW_TAG)


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
    return row_reduce(outer, length, value, combiner, name, x.dtype)

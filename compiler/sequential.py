"""Kernels written as loop IR by hand, for ops whose work is sequential in a way no te compute states
(relayish/ops/data_sized.py): the indices of the nonzero elements, a compaction whose output position is the count
of nonzero elements before; the first k elements along an axis; non-max suppression, a greedy selection; and the
distinct values of a tensor.

    func = sequential_kernel(primitive_function, "nonzero_0")   # or None: not such an op

A task of such an op (compiler/task.py: it has no te stages) is lowered here, not scheduled: one serial loop over
the input, its counter in a local buffer. Only the generic tier makes these ops (compiler/generic.py).
"""
from __future__ import annotations

import math

from relayish import te
from relayish.expr import Call

from .loopir import Allocate, Buffer, For, IfThenElse, LetStmt, Load, PrimFunc, Seq, Stmt, Store
from .lower import prim_func

SEQUENTIAL_OPS = ("nonzero", "slice_to_count", "non_max_suppression", "unique_positions")


def _get(buf: Buffer):
    """The value of a one-element local buffer (a kernel's counter or flag)."""
    return Load(buf, te.IntImm(0))


def _put(buf: Buffer, value) -> Store:
    return Store(buf, te.IntImm(0), te.as_expr(value))


def sequential_op(func) -> str | None:
    """The op of a primitive function that is one sequential op over its parameters, else None."""
    body = func.body
    if isinstance(body, Call) and body.op in SEQUENTIAL_OPS and len(body.args) == len(func.params) and \
            all(a is p for a, p in zip(body.args, func.params)):
        return body.op
    return None


def sequential_kernel(func, name: str) -> PrimFunc | None:
    """The loop IR kernel of a sequential op's primitive function (None if it is not one)."""
    op = sequential_op(func)
    if op == "nonzero":
        return _nonzero(func, name)
    if op == "slice_to_count":
        return _slice_to_count(func, name)
    if op == "non_max_suppression":
        return _non_max_suppression(func, name)
    if op == "unique_positions":
        return _unique_positions(func, name)
    return None


def _nonzero(func, name: str) -> PrimFunc:
    """out[r, j] = the r-th coordinate of the j-th nonzero element of x in row-major order: x walked in order,
    each nonzero element written at column `found` (a local counter), then counted. A count larger than the
    output's columns n (it cannot be: n is the count's value) writes nothing past them."""
    x_param, count_param = func.params
    x = Buffer("x", x_param.type.shape, x_param.type.dtype)
    count = Buffer("count", (), "int64")
    out = Buffer("out", func.body.type.shape, "int64")
    n = te.as_expr(te.dim(out.shape[1]))
    shape = tuple(te.as_expr(te.dim(d)) for d in x.shape) or (te.IntImm(1),)
    found = Buffer("found", (1,), "int32", "local")
    i = te.Var("i")
    coords, stride = [], te.IntImm(1)
    for d in reversed(shape):
        coords.append((i // stride) % d)
        stride = stride * d
    coords.reverse()
    at = _get(found)
    element = Load(x, i)
    nonzero = te.Cmp("!=", te.cast("int32", element) if x.dtype == "bool" else element,
                     te.const(0, "int32" if x.dtype == "bool" else x.dtype))
    write = Seq([Store(out, te.IntImm(r) * n + at, te.cast("int64", c)) for r, c in enumerate(coords)])
    step = IfThenElse(nonzero, Seq([IfThenElse(te.Cmp("<", at, n), write), _put(found, at + 1)]))
    total = math.prod(shape[1:], start=shape[0])
    body = Allocate(found, Seq([_put(found, 0), For(i, te.IntImm(0), total, "serial", step)]))
    return prim_func(name, [x, count], [out], [], body)


def _slice_to_count(func, name: str) -> PrimFunc:
    """out = x's k elements along axis from start (k: the output's dim there, checked <= x's - start by the
    caller): one copy loop nest over the dims before the axis, k, and the dims after it."""
    x_param, k_param = func.params
    axis, start = func.body.attrs["axis"], func.body.attrs["start"]
    x = Buffer("x", x_param.type.shape, x_param.type.dtype)
    k = Buffer("k", k_param.type.shape, "int64")
    out = Buffer("out", func.body.type.shape, x.dtype)
    dims = [te.as_expr(te.dim(d)) for d in x.shape]
    outer = math.prod(dims[:axis], start=te.IntImm(1))
    inner = math.prod(dims[axis + 1:], start=te.IntImm(1))
    n, count = dims[axis], te.as_expr(te.dim(out.shape[axis]))
    o, j, i = te.Var("o"), te.Var("j"), te.Var("i")
    copy = Store(out, (o * count + j) * inner + i, Load(x, (o * n + start + j) * inner + i))
    body = For(o, te.IntImm(0), outer, "serial", For(j, te.IntImm(0), count, "serial",
                                                       For(i, te.IntImm(0), inner, "serial", copy)))
    return prim_func(name, [x, k], [out], [], body)


def _non_max_suppression(func, name: str) -> PrimFunc:
    """Per batch b and class c in order: the boxes scoring above the threshold put in a max-heap (scratch, by
    score, then the lower index first: the order of a stable sort by score), and while any is left and fewer than
    max_output are kept, the top one popped and kept unless a box kept for this class overlaps it by more
    (relayish.ops.data_sized.boxes_overlap, the same float32 arithmetic). A kept box's corners and area go to a
    second scratch, read in order by the next overlap tests. Row 0 of the output holds the count of kept boxes,
    rows 1... the kept (b, c, box) one after another; rows past them are not written. O(N + K log K + K * kept)
    per class for K candidates."""
    attrs = func.body.attrs
    boxes_p, scores_p = func.params
    boxes = Buffer("boxes", boxes_p.type.shape, "float32")
    scores = Buffer("scores", scores_p.type.shape, "float32")
    out = Buffer("out", func.body.type.shape, "int64")
    batches, classes, n = (te.as_expr(te.dim(d)) for d in scores.shape)
    heap = Buffer("heap", (scores.shape[2],), "int32")  # scratch: the class's candidates not yet popped
    kept_corners = Buffer("kept_corners", (scores.shape[2], 5), "float32")  # scratch: kept boxes' corners, area
    size, kept, total, pos, top, active, keep, depth = (Buffer(v, (1,), "int32", "local") for v in (
        "size", "kept", "total", "pos", "top", "active", "keep", "depth"))
    b, c, i, h, t, step, level = (te.Var(v) for v in ("b", "c", "i", "h", "t", "step", "level"))
    zero = te.IntImm(0)

    def score(box):
        return Load(scores, (b * classes + c) * n + box)

    def before(x, y):  # box x pops before box y
        return te.any_of(score(y) < score(x), te.all_of(te.eq(score(x), score(y)), x < y))

    def sift_down(start) -> Seq:
        """The heap order restored below `start` (at most the heap's depth)."""
        child = [2 * _get(pos) + 1, 2 * _get(pos) + 2]
        look = [IfThenElse(ch < _get(size), IfThenElse(before(Load(heap, ch), Load(heap, _get(top))), _put(top, ch)))
                for ch in child]
        tmp = te.Var("tmp")
        swap = LetStmt(tmp, Load(heap, _get(pos)), Seq([Store(heap, _get(pos), Load(heap, _get(top))),
                                                        Store(heap, _get(top), tmp), _put(pos, _get(top))]))
        settled = IfThenElse(te.eq(_get(top), _get(pos)), _put(active, 0), swap)
        level_step = Seq([_put(top, _get(pos))] + look + [settled])
        return Seq([_put(pos, start), _put(active, 1),
                    For(level, zero, _get(depth), "serial", IfThenElse(te.ne(_get(active), 0), level_step))])

    def corners(box):
        v = [Load(boxes, (b * n + box) * 4 + k) for k in range(4)]
        if attrs["center_point_box"]:
            half_w, half_h = v[2] * te.FloatImm(0.5), v[3] * te.FloatImm(0.5)
            return (v[1] - half_h, v[0] - half_w, v[1] + half_h, v[0] + half_w)
        return (te.min_(v[0], v[2]), te.min_(v[1], v[3]), te.max_(v[0], v[2]), te.max_(v[1], v[3]))

    def area(corners):
        return (corners[3] - corners[1]) * (corners[2] - corners[0])

    def suppress(a, q, then: Stmt) -> Stmt:
        """`then` if a kept box (corners and area a) overlaps the candidate (q) by more than the threshold: the
        intersection's test first, alone, as most pairs of boxes do not meet and the rest costs a division."""
        y0, x0, y1, x1 = te.max_(a[0], q[0]), te.max_(a[1], q[1]), te.min_(a[2], q[2]), te.min_(a[3], q[3])
        inter = (x1 - x0) * (y1 - y0)
        union = a[4] + q[4] - inter
        f0 = te.FloatImm(0.0)
        return IfThenElse(te.all_of(x0 < x1, y0 < y1), IfThenElse(te.all_of(
            f0 < inter, f0 < a[4], f0 < q[4], f0 < union, te.FloatImm(float(attrs["iou_threshold"])) < inter / union),
            then))

    above = te.FloatImm(float(attrs["score_threshold"])) < score(i)  # (stored anyway, counted if above: no branch)
    one = te.IntImm(1)
    listing = Seq([_put(size, 0), For(i, zero, n, "serial", Seq([
        Store(heap, _get(size), i), _put(size, _get(size) + te.select(above, one, zero))]))])
    levels = Seq([_put(depth, 0)] + [  # the bit length of the candidates' count
        _put(depth, _get(depth) + te.select(te.IntImm(1 << k) <= _get(size), one, zero)) for k in range(31)])
    heapify = Seq([levels, For(h, zero, _get(size) // 2, "serial", sift_down(_get(size) // 2 - 1 - h))])
    q = te.Var("q")
    qc = [te.Var(f"q_{k}", "float32") for k in ("y0", "x0", "y1", "x1", "area")]
    kept_at = [Load(kept_corners, t * 5 + k) for k in range(5)]
    test = Seq([_put(keep, 1), For(t, zero, _get(kept), "serial", suppress(kept_at, qc, _put(keep, 0)))])
    write = Seq([Store(out, (_get(total) + 1) * 3 + k, te.cast("int64", v)) for k, v in enumerate((b, c, q))] +
                [Store(kept_corners, _get(kept) * 5 + k, v) for k, v in enumerate(qc)] +
                [_put(kept, _get(kept) + 1), _put(total, _get(total) + 1)])
    judge = Seq([test, IfThenElse(te.ne(_get(keep), 0), write)])
    judge = LetStmt(qc[4], area(qc), judge)
    for var, value in reversed(list(zip(qc, corners(q)))):
        judge = LetStmt(var, value, judge)
    pop = LetStmt(q, Load(heap, zero), Seq([Store(heap, zero, Load(heap, _get(size) - 1)), _put(size, _get(size) - 1),
                                            sift_down(zero), judge]))
    more = te.all_of(zero < _get(size), te.cast("int64", _get(kept)) < te.const(int(attrs["max_output"]), "int64"))
    per_class = Seq([listing, heapify, _put(kept, 0), For(step, zero, _get(size), "serial", IfThenElse(more, pop))])
    counted = Seq([Store(out, te.IntImm(k), te.cast("int64", _get(total)) if k == 0 else te.const(0, "int64"))
                   for k in range(3)])
    body = Seq([_put(total, 0), For(b, zero, batches, "serial", For(c, zero, classes, "serial", per_class)), counted])
    for buf in (size, kept, total, pos, top, active, keep, depth):
        body = Allocate(buf, body)
    return prim_func(name, [boxes, scores], [out], [heap, kept_corners], body)


def _unique_positions(func, name: str) -> PrimFunc:
    """x walked in order, each element compared with the distinct values found so far (a scratch, in order of
    first occurrence): a new one is appended (its first index and a count in the output), and the element's
    inverse is its distinct value's position. Sorted: each distinct value's rank is the count of those below it
    (NaN above every number), and the positions are permuted through a scratch. O(N * U) for U distinct values,
    and O(U^2) to sort them."""
    (x_param,) = func.params
    x = Buffer("x", x_param.type.shape, x_param.type.dtype)
    out = Buffer("out", func.body.type.shape, "int64")
    n = te.as_expr(te.dim(x.shape[0]))
    width = n + 1  # the output's row length
    values = Buffer("values", x.shape, x.dtype)  # scratch: the distinct values, in order of first occurrence
    rank = Buffer("rank", x.shape, "int32")  # scratch: each distinct value's rank when sorted
    moved = Buffer("moved", (2, x.shape[0]), "int64")  # scratch: first indices and counts in sorted order
    count = Buffer("count", (1,), "int32", "local")  # distinct values so far
    found = Buffer("found", (1,), "int32", "local")  # the element's distinct value (-1: new); a value's rank
    i, p, q = te.Var("i"), te.Var("p"), te.Var("q")
    zero, one = te.IntImm(0), te.IntImm(1)
    is_float = x.dtype.startswith("float")

    def same(a, b):
        return te.any_of(te.eq(a, b), te.all_of(te.ne(a, a), te.ne(b, b))) if is_float else te.eq(a, b)

    def below(a, b):  # a sorts before b
        return te.any_of(a < b, te.all_of(te.eq(a, a), te.ne(b, b))) if is_float else a < b

    u, at = _get(count), _get(found)
    counts_at = (lambda k: 2 * width + 1 + k)
    add = Seq([Store(values, u, Load(x, i)), Store(out, 1 + u, te.cast("int64", i)),
               Store(out, counts_at(u), te.const(0, "int64")), _put(found, u), _put(count, u + 1)])
    walk = For(i, zero, n, "serial", Seq([
        _put(found, -1),
        For(p, zero, u, "serial", IfThenElse(te.all_of(at < zero, same(Load(values, p), Load(x, i))), _put(found, p))),
        IfThenElse(at < zero, add),
        Store(out, width + i, te.cast("int64", at)),
        Store(out, counts_at(at), Load(out, counts_at(at)) + te.const(1, "int64"))]))
    body = [_put(count, 0), walk]
    if func.body.attrs["sorted"]:
        ranked = For(p, zero, u, "serial", Seq([_put(found, 0), For(q, zero, u, "serial", _put(
            found, at + te.select(below(Load(values, q), Load(values, p)), one, zero))), Store(rank, p, at)]))
        r = Load(rank, p)
        permute = For(p, zero, u, "serial", Seq([Store(moved, r, Load(out, 1 + p)),
                                                   Store(moved, n + r, Load(out, counts_at(p)))]))
        back = For(p, zero, u, "serial", Seq([Store(out, 1 + p, Load(moved, p)),
                                               Store(out, counts_at(p), Load(moved, n + p))]))
        relabel = For(i, zero, n, "serial", Store(out, width + i, te.cast(
            "int64", Load(rank, te.cast("int32", Load(out, width + i))))))
        body += [ranked, permute, back, relabel]
    body.append(Store(out, zero, te.cast("int64", u)))
    stmt = Seq(body)
    for buf in (count, found):
        stmt = Allocate(buf, stmt)
    return prim_func(name, [x], [out], [values, rank, moved], stmt)

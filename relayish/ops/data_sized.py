"""Ops whose output size depends on their input's values: the indices of the nonzero elements, the first k
elements along an axis for a k computed at run time (TopK's), the boxes non-max suppression keeps and the distinct
values of a tensor (Unique's).

    count = sum(cast(x != 0, "int64"))                 # a reduction: int64 []
    y     = nonzero(x, count, count_dim=n)             # int64 [rank, n], n the size variable count's value is

The output's data-sized dim is a size variable of its own (`count_dim`), given a value per call by the value of
the op's second input, which the graph computes before it: the generic module (compiler/generic_module.py) reads
that value before it runs the kernel and plans what follows with it, its buffers placed for the largest value
(the element count of x). The kernel (compiler/sequential.py) walks x in order, so the indices come in
row-major order as onnx's NonZero gives them. Only the frontend's imports for the generic tier make these ops
(frontends/onnx/ops/selection.py); a static compile folds NonZero of a constant at import.

Non-max suppression keeps a number of boxes known only once it has run, so its op writes them into an output of
the largest size after a first row that counts them; slice_to_count then takes them:

    rows  = non_max_suppression(boxes, scores, ...)             # int64 [1 + B * C * N, 3]: (count, 0, 0), the kept
    count = rows[0:1, 0:1]
    y     = slice_to_count(rows, count, axis=0, start=1, count_dim=n)

Unique's op does the same with three rows: the distinct count and the first indices, the inverse indices, and the
counts (unique_positions; slice_to_count along axis 1 from 1).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..op import REQUIRED, OpError, Pattern, register_op
from ..types import TensorType


def _nonzero_infer(arg_types, attrs):
    x, count = arg_types
    if count.shape != () or count.dtype != "int64":
        raise OpError(f"nonzero: the count must be an int64 scalar, got {count.dtype}{list(count.shape)}")
    n = attrs.count_dim
    if not isinstance(n, te.Var):
        raise OpError(f"nonzero: count_dim must be a size variable (the count's value at run time), got {n!r}")
    return TensorType((max(1, x.ndim), n), "int64")


def _nonzero_ref(x, count, count_dim):
    value = np.atleast_1d(x)
    out = np.array(np.nonzero(value), np.int64).reshape(value.ndim, -1)
    if out.shape[1] != int(count):
        raise OpError(f"nonzero: {out.shape[1]} nonzero elements, but the count says {int(count)}")
    return out


# no compute: its kernel is written as loop IR (compiler/sequential.py)
register_op("nonzero", inputs=2, pattern=Pattern.OPAQUE, op_class="layout", infer=_nonzero_infer, ref=_nonzero_ref,
            attrs={"count_dim": REQUIRED},
            doc="the indices of x's nonzero elements, int64 [rank, n] in row-major order (a scalar as 1-D), given "
                "their count (int64 []) and the size variable n that stands for its value")


def _slice_infer(arg_types, attrs):
    x, k = arg_types
    if k.dtype != "int64" or k.size != 1:
        raise OpError(f"slice_to_count: the count must be one int64, got {k.dtype}{list(k.shape)}")
    if not 0 <= attrs.axis < x.ndim:
        raise OpError(f"slice_to_count: axis {attrs.axis} out of range for a rank-{x.ndim} input")
    if attrs.start < 0 or te.is_static(x.shape[attrs.axis]) and attrs.start > x.shape[attrs.axis]:
        raise OpError(f"slice_to_count: start {attrs.start} outside axis {attrs.axis} of {x.shape[attrs.axis]}")
    n = attrs.count_dim
    if not isinstance(n, te.Var):
        raise OpError(f"slice_to_count: count_dim must be a size variable (the count's value at run time), got {n!r}")
    return TensorType(x.shape[:attrs.axis] + (n,) + x.shape[attrs.axis + 1:], x.dtype)


def _slice_ref(x, k, axis, count_dim, start):
    count = int(np.asarray(k).reshape(-1)[0])
    if not 0 <= count <= x.shape[axis] - start:
        raise OpError(f"slice_to_count: a count of {count} from {start} along an axis of {x.shape[axis]}")
    return np.take(x, np.arange(start, start + count), axis=axis)


register_op("slice_to_count", inputs=2, pattern=Pattern.OPAQUE, op_class="layout", infer=_slice_infer,
            ref=_slice_ref, attrs={"axis": REQUIRED, "count_dim": REQUIRED, "start": 0},
            doc="k elements of x along axis from start, k the value of the int64 count computed at run time (TopK's "
                "k, NMS's count), the size variable count_dim standing for it")


def _nms_infer(arg_types, attrs):
    boxes, scores = arg_types
    if boxes.ndim != 3 or te.is_static(boxes.shape[2]) and boxes.shape[2] != 4:
        raise OpError(f"non_max_suppression: boxes must be [batch, boxes, 4], got {list(boxes.shape)}")
    if scores.ndim != 3:
        raise OpError(f"non_max_suppression: scores must be [batch, classes, boxes], got {list(scores.shape)}")
    for what, a, b in (("batch", boxes.shape[0], scores.shape[0]), ("box count", boxes.shape[1], scores.shape[2])):
        if te.is_static(a) and te.is_static(b) and a != b:
            raise OpError(f"non_max_suppression: boxes and scores disagree on the {what}: {a} and {b}")
    if boxes.dtype != "float32" or scores.dtype != "float32":
        raise OpError(f"non_max_suppression: boxes and scores must be float32, got {boxes.dtype} and {scores.dtype}")
    if attrs.center_point_box not in (0, 1):
        raise OpError(f"non_max_suppression: center_point_box must be 0 or 1, got {attrs.center_point_box}")
    return TensorType((1 + te.dim(scores.shape[0]) * te.dim(scores.shape[1]) * te.dim(scores.shape[2]), 3), "int64")


def box_corners(box: np.ndarray, center_point_box: int) -> tuple:
    """(y min, x min, y max, x max) of a box given as [y1, x1, y2, x2] (either corner first), or, with
    center_point_box, as [x center, y center, width, height]: float32 arithmetic, as onnx's reference."""
    if center_point_box:
        half_w, half_h = box[2] / np.float32(2), box[3] / np.float32(2)
        return box[1] - half_h, box[0] - half_w, box[1] + half_h, box[0] + half_w
    return min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])


def boxes_overlap(a: tuple, b: tuple, iou_threshold: np.float32) -> bool:
    """Whether box b is suppressed by a (both as box_corners): their intersection over union is above the
    threshold, both boxes and the intersection having a positive area."""
    y0, x0 = max(a[0], b[0]), max(a[1], b[1])
    y1, x1 = min(a[2], b[2]), min(a[3], b[3])
    if x1 <= x0 or y1 <= y0:
        return False
    inter = (x1 - x0) * (y1 - y0)
    area_a, area_b = (a[3] - a[1]) * (a[2] - a[0]), (b[3] - b[1]) * (b[2] - b[0])
    union = area_a + area_b - inter
    return bool(inter > 0 and area_a > 0 and area_b > 0 and union > 0 and inter / union > iou_threshold)


def _nms_ref(boxes, scores, max_output, iou_threshold, score_threshold, center_point_box):
    batches, classes, n = scores.shape
    out = np.full((1 + batches * classes * n, 3), -1, np.int64)  # (the kernel leaves the rows past the kept alone)
    iou, floor, row = np.float32(iou_threshold), np.float32(score_threshold), 1
    for b in range(batches):
        corners = [box_corners(box, center_point_box) for box in boxes[b].astype(np.float32)]
        for c in range(classes):
            s = scores[b, c].astype(np.float32)
            candidates = np.nonzero(s > floor)[0]
            kept = []
            for i in candidates[np.lexsort((candidates, -s[candidates]))]:  # by score, then by index
                if len(kept) >= max_output:
                    break
                if not any(boxes_overlap(corners[j], corners[i], iou) for j in kept):
                    kept.append(i)
            out[row:row + len(kept)] = np.array([(b, c, i) for i in kept], np.int64).reshape(-1, 3)
            row += len(kept)
    out[0] = (row - 1, 0, 0)
    return out


# no compute: its kernel is written as loop IR (compiler/sequential.py)
register_op("non_max_suppression", inputs=2, pattern=Pattern.OPAQUE, op_class="layout", infer=_nms_infer,
            ref=_nms_ref, attrs={"max_output": 0, "iou_threshold": 0.0, "score_threshold": float("-inf"),
                                 "center_point_box": 0},
            doc="ONNX's NonMaxSuppression of boxes [B, N, 4] by scores [B, C, N]: per batch and class, greedily the "
                "best-scored box above score_threshold not overlapping a kept one by more than iou_threshold, at "
                "most max_output: int64 [1 + B * C * N, 3], a row (count, 0, 0), then the kept (batch, class, box)")


def _unique_infer(arg_types, attrs):
    (x,) = arg_types
    if x.ndim != 1:
        raise OpError(f"unique_positions: x must be 1-D (flattened), got {list(x.shape)}")
    if x.dtype == "bool" or x.dtype.startswith(("float16", "bfloat16")):
        raise OpError(f"unique_positions: x of {x.dtype} is not supported")
    return TensorType((3, 1 + te.dim(x.shape[0])), "int64")


def _equal(a, b) -> bool:
    return a == b or (a != a and b != b)  # NaN equals NaN, as numpy's unique


def _unique_ref(x, sorted):  # noqa: A002  (ONNX's attribute name)
    n = x.shape[0]
    out = np.full((3, 1 + n), -1, np.int64)
    values, first, counts, inverse = [], [], [], []
    for i, v in enumerate(x.tolist()):
        p = next((p for p, u in enumerate(values) if _equal(u, v)), None)
        if p is None:
            p = len(values)
            values.append(v)
            first.append(i)
            counts.append(0)
        counts[p] += 1
        inverse.append(p)
    if sorted:  # by value, NaN last
        order = np.array([sum(u < w or (u == u and w != w) for u in values) for w in values], np.int64)
        by_rank = np.argsort(order)
        first, counts = np.array(first)[by_rank], np.array(counts)[by_rank]
        inverse = order[np.array(inverse, np.int64)]
    u = len(values)
    out[0, 0], out[0, 1:1 + u], out[1, :n], out[2, 1:1 + u] = u, first, inverse, counts
    return out


# no compute: its kernel is written as loop IR (compiler/sequential.py)
register_op("unique_positions", inputs=1, pattern=Pattern.OPAQUE, op_class="layout", infer=_unique_infer,
            ref=_unique_ref, attrs={"sorted": 1},
            doc="ONNX's Unique of a flat x as positions, int64 [3, 1 + N]: row 0 the count U of distinct values, "
                "then each's first index; row 1 each element's distinct value; row 2 (from 1) each's count. In "
                "order of first occurrence, or sorted by value (NaN last, equal to NaN)")

"""Default schedule rule for a task of row stages (relayish/ops/rows.py: softmax, log-softmax, layer norm over the
last axis) with enough rows: one parallel loop over the rows, every stage of a row computed at it.

    for row in rows (parallel):         max's partials, max, exp(x - max), the sum's partials, the sum: each into
        ...stages of the row...         a buffer of one row (L1), lanes vectorized
        out[row, :] = ...               the row's result, vectorized

Run stage by stage instead (each its own parallel loop over every row, default_schedule.schedule_rows), a softmax
of 550 x 728 makes six passes over buffers of the whole tensor (1.6 MB each, past L2) and ran 185 us, 2.3x
onnxruntime's time; row by row it reads x from memory once and writes the result once (and a softmax of 2 x 8236
ran 5.5 us stage by stage over chunks of its rows, 3.3 us row by row). A single row long enough to be cut into
chunks for the threads (rows.row_chunks) keeps the stage-by-stage schedule; a shorter one runs row by row on
one thread (a softmax of 1 x 7542 in ten parallel loops spent most of its time forking and joining).
"""
from __future__ import annotations

from relayish.ops.rows import ROW_TAG

from .schedule import Annotate, ComputeAt, Fuse, Reorder, Split

MIN_ROWS = 1  # (a row cut into chunks, rows.row_chunks, runs stage by stage: each stage's own parallel loop)
# Fewer elements run on one thread: the fork/join would cost more than it saves. A Sigmoid of 4,096 floats took
# 11.3 us on two threads and 7.9 on one, the same at 8,192 and 16,384, and 22 against 31 at 32,768 (Zen 4, steady
# timing of whole runs); the default schedule's loops use this bound too.
MIN_PARALLEL_ELEMENTS = 8192
MAX_WHOLE_VECTOR = 64  # a last axis up to this long (a stage of partials: its lanes) is one vector


def schedule_fused_rows(b, vector_width: int) -> bool:
    """Schedule a row task through the ScheduleBuilder `b` (its single-reader elementwise stages inlined already):
    the output's rows in parallel, every other root stage computed at that loop. False (nothing applied) when the
    task is not one of rows with one output of at least MIN_ROWS rows of length > 1, or cuts its rows in chunks."""
    stages = list(b.state.stages)
    outs = [s for s in stages if s.is_output]
    if len(outs) != 1 or not all(s.op.tag == ROW_TAG for s in stages):
        return False
    out = outs[0]
    shape = out.op.shape
    rows = 1
    for n in shape[:-1]:
        rows *= n
    others = [s for s in stages if s.loc.is_root and s is not out]
    if len(shape) < 2 or shape[-1] < 2 or rows < MIN_ROWS or any(s.name.endswith("_chunks") for s in stages) or \
            any(tuple(s.op.shape[:len(shape) - 1]) != tuple(shape[:-1]) for s in others):
        return False
    names = [i.name for i in out.leaves]
    lane = row_lane(shape[-1], vector_width)
    if lane < shape[-1]:
        b.add(Split(out.name, names[-1], (lane,)))
        names = names[:-1] + [f"{names[-1]}.0", f"{names[-1]}.1"]
    row_axes = names[:len(shape) - 1]
    row = "@".join(row_axes)
    if len(row_axes) > 1:
        b.add(Fuse(out.name, tuple(row_axes)))
    if rows * shape[-1] >= MIN_PARALLEL_ELEMENTS:
        b.add(Annotate(out.name, row, "parallel"))
    b.add(Annotate(out.name, names[-1], "vectorize"))
    for st in reversed(others):  # consumers first: each one's readers are then the output or computed at the row
        b.add(ComputeAt(st.name, out.name, row))
    for st in others:
        _row_stage_loops(b, b.stage(st.name), vector_width)
    b.scheduled.update(s.name for s in stages)
    return True


def row_lane(length: int, vector_width: int) -> int:
    """The vector of a row's last axis: all of it when short (a stage of partials: its lanes), else the widest of
    a vector and half a vector that divides it, else a whole vector with a masked last one."""
    if length <= MAX_WHOLE_VECTOR:
        return length
    return next((w for w in (vector_width, vector_width // 2) if length % w == 0), vector_width)


def _row_stage_loops(b, st, vector_width: int):
    """A stage computed at the row: its reduction outside, its last axis (lanes or the row) vectorized inside."""
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    red = [i.name for i in st.leaves if i.kind == "reduce"]
    length = st.op.shape[-1] if len(st.op.shape) == len(b.state.outputs[0].shape) else 1
    vec = None
    if length >= 4 and sp:
        lane = row_lane(length, vector_width)
        if lane < length:
            b.add(Split(st.name, sp[-1], (lane,)))
            sp = sp[:-1] + [f"{sp[-1]}.0", f"{sp[-1]}.1"]
        vec = sp[-1]
    order = [n for n in sp if n != vec] + red + ([vec] if vec else [])
    if red and vec:
        b.add(Reorder(st.name, tuple(order)))
    if vec:
        b.add(Annotate(st.name, vec, "vectorize"))

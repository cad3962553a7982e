"""Default schedules: what an untuned model runs, built from the same steps the tuner searches over.

The rules, applied to a task's initial state:
  1. every non-output stage without a reduction is inlined into its readers (padding stages excepted: they
     become their own parallel loop nest, so that the convolution's inner loop reads without bounds checks);
  2. the anchor (the last reduction: conv, dense, pool...) gets a register tile: computed at a loop of the
     output stage (or of its cache_write copy when it is the output), reduction loops outside, a few output
     columns unrolled and the contiguous innermost axis vectorized;
  3. every root stage fuses its outer spatial loops into one parallel loop and vectorizes its innermost axis
     when that axis is contiguous in what the stage reads and writes.
"""
from __future__ import annotations

from relayish import te

from .schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, Fuse, Reorder, Schedule, Split, Stage,
                       State)

MIN_PARALLEL_ELEMENTS = 2048  # below this, fork/join costs more than it saves
MAX_VECTOR = 64


def default_schedule(state: State, vector_width: int = 16) -> Schedule:
    """A sensible schedule for any task; replaying its steps on `state` gives the scheduled state."""
    b = _Builder(state)
    for st in reversed(list(b.state.stages)):
        if not st.is_output and not st.is_reduction and st.op.tag != "pad":
            b.add(ComputeInline(st.name))
    anchor = next((s for s in reversed(b.state.stages) if s.is_reduction and s.loc != ("inline",)), None)
    if anchor is not None:
        _schedule_anchor(b, anchor, vector_width)
    for st in list(b.state.stages):
        if st.loc == ("root",) and not b.done(st):
            _schedule_root(b, st, vector_width)
    return Schedule(tuple(b.steps))


class _Builder:
    """Applies steps to a working copy as they are chosen, so later choices see the current state."""

    def __init__(self, state: State):
        self.state = state.copy()
        self.steps = []
        self.scheduled = set()

    def add(self, step):
        step.apply(self.state)
        self.steps.append(step)

    def stage(self, name) -> Stage:
        return self.state.stage(name)

    def done(self, st) -> bool:
        return st.name in self.scheduled


def _output_consumer(b: _Builder, st: Stage) -> Stage | None:
    """The root stage that reads st once everything between them is inlined, if it is an output."""
    consumers = b.state.consumers(st)
    while len(consumers) == 1 and consumers[0].loc == ("inline",):
        consumers = b.state.consumers(consumers[0])
    if len(consumers) == 1 and consumers[0].is_output and consumers[0].loc == ("root",):
        return consumers[0]
    return None


def _schedule_anchor(b: _Builder, anchor: Stage, vw: int):
    out = _output_consumer(b, anchor)
    if anchor.is_output:
        b.add(CacheWrite(anchor.name))
        out, anchor = anchor, b.stage(anchor.name + ".local")
    if out is None or len(out.op.axes) != len(anchor.op.axes) or out.op.shape != anchor.op.shape:
        return  # not a tile-able pattern: the root rule handles it
    names = [i.name for i in out.leaves]
    shape = out.op.shape
    last = names[-1]
    vec = shape[-1] <= MAX_VECTOR and _contiguous_last(anchor) and shape[-1] > 1
    # register tile: the last spatial axis vectorized, the one before it split into an unrolled column block
    tile_axis = len(names) - 2 if vec and len(names) >= 2 else None
    if tile_axis is not None:
        cols = _largest_divisor(shape[tile_axis], 16 if shape[-1] >= vw else 32)
        b.add(Split(out.name, names[tile_axis], (cols,)))
        outer, inner = f"{names[tile_axis]}.0", f"{names[tile_axis]}.1"
        order = names[:tile_axis] + [outer, inner, last]
        b.add(Reorder(out.name, tuple(order)))
        at = outer
    else:
        at = names[-2] if len(names) >= 2 else names[-1]
        order = names
    par = [n for n in order[:order.index(at) + 1]]
    _parallelize(b, out, par)
    at_name = _fused_name(par) if len(par) > 1 else at
    b.add(ComputeAt(anchor.name, out.name, at_name))
    if tile_axis is not None:
        b.add(Annotate(out.name, inner, "unroll"))
    if vec:
        b.add(Annotate(out.name, last, "vectorize"))
    # the anchor's own loops: reductions outside the tile, the tile unrolled, the lanes vectorized
    a_sp = [i.name for i in anchor.leaves if i.kind == "spatial"]
    a_red = [i.name for i in anchor.leaves if i.kind == "reduce"]
    if vec and tile_axis is not None:
        b.add(Reorder(anchor.name, tuple(a_sp[:tile_axis] + a_red + a_sp[tile_axis:])))
        b.add(Annotate(anchor.name, a_sp[tile_axis], "unroll"))
        b.add(Annotate(anchor.name, a_sp[-1], "vectorize"))
    elif vec:
        b.add(Reorder(anchor.name, tuple(a_sp[:-1] + a_red + a_sp[-1:])))
        b.add(Annotate(anchor.name, a_sp[-1], "vectorize"))
    b.scheduled.add(out.name)
    b.scheduled.add(anchor.name)


def _schedule_root(b: _Builder, st: Stage, vw: int):
    """Outer spatial loops fused and parallel; the innermost contiguous axis vectorized."""
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    red = [i.name for i in st.leaves if i.kind == "reduce"]
    shape = st.op.shape
    vec_name = None
    if sp and shape[-1] > 1 and _contiguous_last(st):
        if shape[-1] <= MAX_VECTOR:
            vec_name = sp[-1]
        elif shape[-1] % vw == 0:
            b.add(Split(st.name, sp[-1], (vw,)))
            sp = sp[:-1] + [f"{sp[-1]}.0", f"{sp[-1]}.1"]
            vec_name = sp[-1]
    outer = [n for n in sp if n != vec_name]
    if red or vec_name:
        b.add(Reorder(st.name, tuple(outer + red + ([vec_name] if vec_name else []))))
    total = 1
    for s in shape:
        total *= s
    if outer and total >= MIN_PARALLEL_ELEMENTS:
        _parallelize(b, st, outer)
    if vec_name:
        b.add(Annotate(st.name, vec_name, "vectorize"))
    b.scheduled.add(st.name)


def _parallelize(b: _Builder, st: Stage, names: list[str]):
    if len(names) > 1:
        b.add(Fuse(st.name, tuple(names)))
    b.add(Annotate(st.name, _fused_name(names), "parallel"))


def _fused_name(names):
    return "@".join(names) if len(names) > 1 else names[0]


def _contiguous_last(st: Stage) -> bool:
    """True if the last output axis indexes only the last dimension of every tensor the stage reads, with
    coefficient 1 (so vectorizing it gives contiguous or broadcast loads)."""
    var = st.op.axes[-1].var if st.op.axes else None
    if var is None:
        return False
    body = st.op.body.body if isinstance(st.op.body, te.Reduce) else st.op.body
    for r in te.walk(body):
        if isinstance(r, te.TensorRead):
            for d, idx in enumerate(r.indices):
                uses = any(v is var for v in te.walk(idx))
                if uses and (d != len(r.indices) - 1 or not _is_plus_var(idx, var)):
                    return False
    return True


def _is_plus_var(idx, var) -> bool:
    if idx is var:
        return True
    if isinstance(idx, te.BinOp) and idx.op == "+":
        return (idx.a is var and not any(v is var for v in te.walk(idx.b))) or \
               (idx.b is var and not any(v is var for v in te.walk(idx.a)))
    return False


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)

"""What the schedule generators ask of a stage before they choose a structure for it: whether tiling would give
its inputs reuse, whether it may simply be inlined, which consumer it could be fused into, how much parallelism
and reduction it has. Ansor's sketch rules (tuning/sketch.py) and MetaSchedule's rules
(tuning/metaschedule/rules.py) both decide with these."""
from __future__ import annotations

from compiler.default_schedule import keeps_buffer
from compiler.schedule import Stage, State
from relayish import te


def has_data_reuse(st: Stage) -> bool:
    """A reduction some input of which is read without some spatial axis: tiling can keep it in cache/registers."""
    if not st.is_reduction:
        return False
    axes = {ax.var for ax in st.op.axes if ax.extent > 1}
    for r in te.walk(st.op.body.body):
        if isinstance(r, te.TensorRead):
            used = {v for i in r.indices for v in te.walk(i) if isinstance(v, te.Var)}
            if axes - used:
                return True
    return False


def strictly_inlinable(state: State, st: Stage) -> bool:
    """Elementwise/injective, not an output, not a reduction, not a padding that a tiled conv reads, not a stage
    the default schedule keeps in its own buffer (a Winograd transform)."""
    if st.is_output or st.is_reduction or not st.loc.is_root or keeps_buffer(state, st):
        return False
    return not (st.op.tag == "pad" and any(has_data_reuse(c) for c in state.effective_consumers(st)))


def fusible_consumer(state: State, st: Stage) -> Stage | None:
    """The single root consumer (through inlined stages) that reads st elementwise over the same shape."""
    consumers = state.effective_consumers(st)
    if len(consumers) != 1:
        return None
    c = consumers[0]
    if c.is_reduction or not c.loc.is_root or c.op.shape != st.op.shape or c.relations:
        return None
    return c


def spatial_parallelism(st: Stage) -> int:
    n = 1
    for ax in st.op.axes:
        n *= ax.extent
    return n


def reduce_size(st: Stage) -> int:
    n = 1
    for ax in st.op.reduce_axes:
        n *= ax.extent
    return n

"""AutoTVM templates: functions that define a knob space and build one schedule per configuration.

    @template("dense_pack", matches=lambda task, anchor: anchor.op.tag == "dense_pack")
    def dense_pack(cfg, sch): ...        # cfg.define_*(...) then cfg[name] to schedule `sch`

A template writes its schedule in the MetaSchedule-style language (tuning/metaschedule/schedule.py) without
sampling: the knobs are its only freedom, so its trace is a hand-written schedule with holes. The templates
generalize bench/hand_schedules.py: a register tile of the anchor (the last reduction) computed at the parallel
loop of the output (or of its cache_write copy), reduction loops outside the tile, the contiguous axis
vectorized. `find_template(task)` returns the first registered template that matches the task and whose first
configuration builds, or None (AutoTVM then keeps the task's default schedule).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from compiler.default_schedule import keeps_buffer
from compiler.schedule import Schedule as StepSchedule, ScheduleError, Stage
from compiler.task import Task
from tuning.metaschedule.schedule import UNROLL, Schedule

from .space import ConfigEntity, ConfigSpace


@dataclass(frozen=True)
class Template:
    name: str
    func: Callable  # func(cfg, sch) -> None
    matches: Callable  # matches(task, anchor stage) -> bool

    def space(self, task: Task) -> ConfigSpace:
        """Run the template in define mode: the knobs it defines for this task."""
        cfg = ConfigSpace()
        self.func(cfg, Schedule(task))
        return cfg

    def instantiate(self, task: Task, cfg: ConfigEntity) -> StepSchedule:
        """The schedule of one configuration; ScheduleError when it is not legal for this task."""
        sch = Schedule(task)
        self.func(cfg, sch)
        return sch.to_schedule()


TEMPLATES: dict[str, Template] = {}


def template(name: str, matches: Callable):
    """Register a template function under `name` for the tasks `matches(task, anchor)` accepts."""
    def register(func):
        if name in TEMPLATES:
            raise ValueError(f"template {name!r} registered twice")
        TEMPLATES[name] = Template(name, func, matches)
        return func
    return register


def anchor_stage(task: Task) -> Stage | None:
    state = task.initial_state()
    return next((s for s in reversed(state.stages) if s.is_reduction), None)


def find_template(task: Task) -> Template | None:
    anchor = anchor_stage(task)
    if anchor is None:
        return None
    for tpl in TEMPLATES.values():
        if tpl.matches(task, anchor):
            try:
                space = tpl.space(task)
                tpl.instantiate(task, space.get(0))
            except (ScheduleError, ValueError):
                continue
            return tpl
    return None


# ---------------------------------------------------------------------------------------------- shared parts

def _prologue(sch: Schedule):
    """Inline the injective stages not worth a buffer; the anchor and the stage that writes the output
    (the anchor's cache_write copy when the anchor is the output). Raises ScheduleError if the task is not
    one reduction followed by elementwise stages."""
    state = sch.state
    for st in reversed(list(state.stages)):
        if not st.is_output and not st.is_reduction and not keeps_buffer(sch.state, st):
            sch.compute_inline(sch.get_block(st.name))
    anchor = next(s for s in reversed(sch.state.stages) if s.is_reduction)
    block = sch.get_block(anchor.name)
    if anchor.is_output:
        return sch.cache_write(block), block
    out = sch.state.effective_consumers(anchor)
    if len(out) != 1 or not out[0].is_output or out[0].op.shape != anchor.op.shape:
        raise ScheduleError("the template needs one reduction read elementwise by the output")
    return block, sch.get_block(out[0].name)


def _other_roots(sch: Schedule, skip: set) -> None:
    """Stages still at root besides the anchor and output (the padding): outer loops parallel, last vectorized."""
    for st in list(sch.state.stages):
        if st.name in skip or not st.loc.is_root:
            continue
        block = sch.get_block(st.name)
        loops = sch.get_loops(block)
        if len(loops) >= 2 and 2 <= sch.extent(loops[-1]) <= 64:
            sch.vectorize(loops[-1])
            loops = loops[:-1]
        sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])


def _parallel_outer(cfg, sch, outer: list):
    """Fuse the first `fuse_outer` of the outer loops into the parallel loop; the loop the tile goes in."""
    k = min(cfg["fuse_outer"].val, len(outer))
    par = sch.fuse(*outer[:k]) if k > 1 else outer[0]
    sch.parallel(par)
    return par if k == len(outer) else outer[-1]


# ---------------------------------------------------------------------------------------------- templates

@template("conv2d_nchwc", matches=lambda task, anchor: anchor.op.tag == "conv2d_nchwc")
def conv2d_nchwc(cfg, sch):
    """Direct convolution on channel blocks (bench/hand_schedules.py conv_schedule with its choices as knobs):
    oc blocks x output columns x 16 lanes per register tile, input channels of a block split and unrolled."""
    anchor, out = _prologue(sch)
    n, c, y, x, v = sch.get_loops(out)
    cfg.define_split("tile_oc", sch.extent(c), num_outputs=2, max_factor=4)
    cfg.define_split("tile_ow", sch.extent(x), num_outputs=2, max_factor=28)
    cfg.define_knob("fuse_outer", [2, 3, 4])
    c0, c1 = cfg["tile_oc"].apply(sch, c)
    x0, x1 = cfg["tile_ow"].apply(sch, x)
    sch.reorder(n, c0, y, x0, c1, x1, v)
    sch.compute_at(anchor, _parallel_outer(cfg, sch, [n, c0, y, x0]))
    sch.vectorize(v)
    an, ac, ay, ax, av, ric, ry, rx, rii = sch.get_loops(anchor)
    cfg.define_split("tile_ici", sch.extent(rii), num_outputs=2, max_factor=8)
    cfg.define_reorder("tile_order", 2, policy="all")
    cfg.define_annotate("tile_unroll", 3, policy="try_unroll")
    i0, i1 = cfg["tile_ici"].apply(sch, rii)
    sch.reorder(an, ay, ric, ry, rx, i0, i1, *cfg["tile_order"].apply([ax, ac]), av)
    cfg["tile_unroll"].apply(sch, [i1, ac, ax])
    sch.vectorize(av)
    _other_roots(sch, {sch.get(anchor), sch.get(out)})


@template("dense_pack", matches=lambda task, anchor: anchor.op.tag == "dense_pack")
def dense_pack(cfg, sch):
    """dense with the weight in blocks of nb output features (bench/hand_schedules.py dense_schedule): a tile
    of rows x weight blocks x nb lanes at the parallel loop, k split and unrolled inside."""
    anchor, out = _prologue(sch)
    nb = next(t for t in sch.state.stage(sch.get(anchor)).op.input_tensors if len(t.shape) == 3).shape[2]
    m, j = sch.get_loops(out)
    jo, ji = sch.split(j, [None, nb])
    cfg.define_split("tile_m", sch.extent(m), num_outputs=2, max_factor=8)
    cfg.define_split("tile_j", sch.extent(jo), num_outputs=2, max_factor=8)
    cfg.define_knob("fuse_outer", [1, 2])
    m0, m1 = cfg["tile_m"].apply(sch, m)
    j0, j1 = cfg["tile_j"].apply(sch, jo)
    sch.reorder(m0, j0, m1, j1, ji)
    sch.compute_at(anchor, _parallel_outer(cfg, sch, [m0, j0]))
    sch.vectorize(ji)
    am, aj, rk = sch.get_loops(anchor)
    aj0, aj1 = sch.split(aj, [None, nb])
    cfg.define_split("tile_k", sch.extent(rk), num_outputs=2, max_factor=16)
    cfg.define_reorder("tile_order", 3, policy="candidate", candidate=[(0, 1, 2), (1, 0, 2), (1, 2, 0)])
    cfg.define_annotate("tile_unroll", 3, policy="try_unroll")
    k0, k1 = cfg["tile_k"].apply(sch, rk)
    sch.reorder(*cfg["tile_order"].apply([am, k0, k1]), aj0, aj1)
    cfg["tile_unroll"].apply(sch, [k1, am, aj0])
    sch.vectorize(aj1)


def _is_depthwise(task, anchor) -> bool:
    return anchor.op.tag == "conv2d" and len(anchor.op.axes) == 4 and \
        len(anchor.op.reduce_axes) == 2  # ry, rx: one input channel per output channel


def _is_batch_matmul(task, anchor) -> bool:
    return anchor.op.tag == "matmul" and len(anchor.op.axes) >= 3


def tiled_reduction(cfg, sch):
    """Any reduction whose last two output axes make a register tile (rows x vectorized columns): the outer
    axes and tile positions run in parallel, the reductions outside the tile."""
    anchor, out = _prologue(sch)
    *lead, y, x = sch.get_loops(out)
    cfg.define_split("tile_y", sch.extent(y), num_outputs=2, max_factor=8)
    cfg.define_split("tile_x", sch.extent(x), num_outputs=2, max_factor=64)
    cfg.define_knob("fuse_outer", [1, 2, 3])
    cfg.define_knob("auto_unroll", [0, 16, 64])
    y0, y1 = cfg["tile_y"].apply(sch, y)
    x0, x1 = cfg["tile_x"].apply(sch, x)
    sch.reorder(*lead, y0, x0, y1, x1)
    sch.compute_at(anchor, _parallel_outer(cfg, sch, lead + [y0, x0]))
    if sch.extent(x1) >= 2:
        sch.vectorize(x1)
    loops = sch.get_loops(anchor)
    kinds = [it.kind for it in sch.state.stage(sch.get(anchor)).leaves]
    sp = [l for l, k in zip(loops, kinds) if k == "spatial"]
    red = [l for l, k in zip(loops, kinds) if k == "reduce"]
    sch.reorder(*sp[:-2], *red, sp[-2], sp[-1])
    cfg.define_annotate("tile_unroll", 1, policy="try_unroll")
    cfg["tile_unroll"].apply(sch, [sp[-2]])
    if cfg["tile_x"].size[1] >= 2:
        sch.vectorize(sp[-1])
    sch.annotate(anchor, UNROLL, cfg["auto_unroll"].val)
    _other_roots(sch, {sch.get(anchor), sch.get(out)})


template("depthwise_conv2d_nchw", matches=_is_depthwise)(tiled_reduction)
template("batch_matmul", matches=_is_batch_matmul)(tiled_reduction)
template("matmul", matches=lambda task, anchor: anchor.op.tag == "matmul" and len(anchor.op.axes) == 2)(tiled_reduction)

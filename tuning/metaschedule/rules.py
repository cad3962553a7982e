"""Schedule rules: small units that turn a block of a schedule into sampled schedule programs.

    sch = Schedule(task)
    sch = MultiLevelTiling("SSRSRS").apply(sch, sch.get_block("C"))[0]     # by hand
    spaces = design_spaces(task)                                          # or every rule on every block

Each rule's `apply(sch, block)` returns the schedules it makes of `sch` (copies; `[sch]` when it does not apply
or its instructions are not legal here), recording instructions and sampling decisions in their traces. A design
space is the trace `design_spaces` builds by visiting the blocks from the outputs back to the inputs (as TVM's
PostOrderApply and Ansor's sketch rules do) and applying every rule to each; search replays that trace with
other decisions (tuning/metaschedule/search.py).
"""
from __future__ import annotations

import os

from compiler.schedule import ScheduleError, Stage, divisors
from compiler.task import Task
from tuning.stage_analysis import fusible_consumer, has_data_reuse, strictly_inlinable

from .schedule import PARALLEL, UNROLL, VECTORIZE, Schedule
from .trace import BlockRV

RULE_PARAMS = {
    "max_innermost_factor": 64,  # innermost tile level (vectorized or unrolled) at most this long
    "max_vector": 64,  # widest vectorized loop (elements)
    "unroll_candidates": (0, 16, 64, 512),  # auto_unroll_max_step choices
    "jobs_per_core": (1, 4, 16, 64),  # parallel extent choices, in multiples of the core count
}


class ScheduleRule:
    name = "rule"

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__


def _stage(sch: Schedule, block: BlockRV) -> Stage:
    return sch.state.stage(sch.get(block))


def _attempt(sch: Schedule, fn) -> list[Schedule]:
    """fn(copy) on a copy of sch; [sch] unchanged if an instruction of fn is not legal here."""
    new = sch.copy()
    try:
        fn(new)
    except ScheduleError:
        return [sch]
    return [new]


class AutoInline(ScheduleRule):
    """Inline a block that is injective, not an output and not worth its own buffer (tuning.stage_analysis's test)."""

    def apply(self, sch, block):
        if not strictly_inlinable(sch.state, _stage(sch, block)):
            return [sch]
        return _attempt(sch, lambda s: s.compute_inline(block))


class MultiLevelTiling(ScheduleRule):
    """Tile a block with data reuse by `structure`: each "S" is one level of every spatial loop, each "R" one
    level of every reduction loop, outermost first ("SSRSRS": 4 spatial levels, 2 reduction levels, the
    10-loop matmul of the Ansor paper). Tile sizes are sample_perfect_tile random variables.

    With fusion (Ansor's rule 4, TVM's reuse-write): the block's elementwise consumer (a cache_write copy when
    the block is an output) takes all the spatial levels, and the block is computed at the consumer's loop after
    the leading S levels, tiling its own loops inside by the same random variables: the tile accumulates in a
    small local buffer and the consumer writes it out once."""

    def __init__(self, structure: str = "SSRSRS", fuse_consumer: bool = True,
                 max_innermost_factor: int = RULE_PARAMS["max_innermost_factor"]):
        if set(structure) - {"S", "R"} or "S" not in structure:
            raise ValueError(f"tiling structure must be made of S and R and hold an S, got {structure!r}")
        self.structure, self.fuse_consumer, self.max_inner = structure, fuse_consumer, max_innermost_factor

    def apply(self, sch, block):
        st = _stage(sch, block)
        if not has_data_reuse(st) or st.relations or not st.loc.is_root:
            return [sch]
        lead = len(self.structure) - len(self.structure.lstrip("S"))
        if self.fuse_consumer and 0 < lead < self.structure.count("S") and "R" in self.structure:
            fused = _attempt(sch, lambda s: self._tile_fused(s, block, lead))
            if fused[0] is not sch:
                return fused
        return _attempt(sch, lambda s: self._tile(s, block))

    def _levels(self, sch, loops, kind_count):
        """Split each loop into kind_count levels by sampled tiles; returns (levels per loop, tiles per loop)."""
        levels, tiles = [], []
        for loop in loops:
            t = sch.sample_perfect_tile(loop, n=kind_count, max_innermost_factor=self.max_inner)
            levels.append(sch.split(loop, t))
            tiles.append(t)
        return levels, tiles

    def _order(self, sp_levels, red_levels, structure):
        order, used = [], {"S": 0, "R": 0}
        for c in structure:
            group = sp_levels if c == "S" else red_levels
            order += [lv[used[c]] for lv in group]
            used[c] += 1
        return order

    def _split_kinds(self, sch, block):
        loops = sch.get_loops(block)
        st = _stage(sch, block)
        kinds = [it.kind for it in st.leaves]
        return [l for l, k in zip(loops, kinds) if k == "spatial"], [l for l, k in zip(loops, kinds) if k == "reduce"]

    def _tile(self, sch, block):
        sp, red = self._split_kinds(sch, block)
        sp_levels, _ = self._levels(sch, sp, self.structure.count("S"))
        red_levels, _ = self._levels(sch, red, self.structure.count("R"))
        sch.reorder(*self._order(sp_levels, red_levels, self.structure))

    def _tile_fused(self, sch, block, lead):
        st = _stage(sch, block)
        consumer = fusible_consumer(sch.state, st)
        if consumer is None:
            if not st.is_output:
                raise ScheduleError("no elementwise consumer to fuse into")
            consumer_block, block = block, sch.cache_write(block)
        else:
            consumer_block = sch.get_block(consumer.name)
        n_s = self.structure.count("S")
        c_levels, tiles = self._levels(sch, sch.get_loops(consumer_block), n_s)
        sch.reorder(*[lv[k] for k in range(n_s) for lv in c_levels])
        sch.compute_at(block, c_levels[-1][lead - 1])
        sp, red = self._split_kinds(sch, block)
        if len(sp) != len(c_levels):
            raise ScheduleError("the consumer's loops do not match the block's spatial loops")
        inner_s = n_s - lead  # levels of the block's own spatial loops, by the consumer's inner tiles
        sp_levels = [sch.split(l, [None] + list(t[lead + 1:])) if inner_s > 1 else [l] for l, t in zip(sp, tiles)]
        red_levels, _ = self._levels(sch, red, self.structure.count("R"))
        sch.reorder(*self._order(sp_levels, red_levels, self.structure[lead:]))
        sch.annotate(block, VECTORIZE, RULE_PARAMS["max_vector"])
        _sample_unroll(sch, block)


class ParallelizeVectorizeUnroll(ScheduleRule):
    """Annotate a block for the postprocessor: a sampled parallel extent (a block at root), vectorization of
    its innermost loop, a sampled auto-unroll step (a reduction). An untiled block first gets its innermost
    spatial loop innermost (after its reductions) and, when that loop is longer than a vector, split by a
    sampled lane count."""

    def __init__(self, num_cores: int | None = None):
        self.cores = num_cores or os.cpu_count() or 1

    def apply(self, sch, block):
        st = _stage(sch, block)
        if st.loc.is_inline:
            return [sch]
        return _attempt(sch, lambda s: self._annotate(s, block))

    def _annotate(self, sch, block):
        st = _stage(sch, block)
        if not st.relations and st.loc.is_root and not _is_epilogue(sch.state, st):
            _innermost_spatial(sch, block)
        st = _stage(sch, block)
        if st.loc.is_root:
            extents = [self.cores * j for j in RULE_PARAMS["jobs_per_core"]]
            sch.annotate(block, PARALLEL, sch.sample_categorical(extents, [1.0] * len(extents)))
        if VECTORIZE not in sch.annotations.get(st.name, {}):
            sch.annotate(block, VECTORIZE, RULE_PARAMS["max_vector"])
        if st.is_reduction and UNROLL not in sch.annotations.get(st.name, {}):
            _sample_unroll(sch, block)


class RandomComputeLocation(ScheduleRule):
    """An untiled block that is not an output, with one consumer: compute it at a sampled location (a loop of
    its consumer, root, or inlined)."""

    def apply(self, sch, block):
        st = _stage(sch, block)
        if st.is_output or st.relations or not st.loc.is_root or has_data_reuse(st):
            return [sch]
        if len(sch.state.effective_consumers(st)) != 1:
            return [sch]

        def place(s):
            s.compute_at(block, s.sample_compute_location(block))
        return _attempt(sch, place)


def _sample_unroll(sch: Schedule, block: BlockRV) -> None:
    cands = RULE_PARAMS["unroll_candidates"]
    sch.annotate(block, UNROLL, sch.sample_categorical(cands, [1.0] * len(cands)))


def _is_epilogue(state, st: Stage) -> bool:
    """Whether st reads (through injective stages) a stage with data reuse: then MultiLevelTiling of that stage
    splits st's loops, which must still be untouched when it gets there."""
    todo, seen = list(state.producers(st)), set()
    while todo:
        p = todo.pop()
        if p.name in seen:
            continue
        seen.add(p.name)
        if has_data_reuse(p):
            return True
        if not p.is_reduction:
            todo += state.producers(p)
    return False


def _innermost_spatial(sch: Schedule, block: BlockRV) -> None:
    """Reductions outside the last spatial loop; that loop split by a sampled lane count if it is too long to
    vectorize whole."""
    st = _stage(sch, block)
    loops = sch.get_loops(block)
    kinds = [it.kind for it in st.leaves]
    sp = [l for l, k in zip(loops, kinds) if k == "spatial"]
    if not sp:
        return
    if kinds[-1] != "spatial":
        sch.reorder(*[l for l, k in zip(loops, kinds) if l is not sp[-1]], sp[-1])
    extent = sch.extent(sp[-1])
    if extent > RULE_PARAMS["max_vector"]:
        lanes = [d for d in divisors(extent) if 4 <= d <= RULE_PARAMS["max_vector"]]
        if lanes:
            sch.split(sp[-1], [None, sch.sample_categorical(lanes, [1.0] * len(lanes))])


DEFAULT_RULES = (AutoInline(), MultiLevelTiling("SSRSRS"), ParallelizeVectorizeUnroll(), RandomComputeLocation())


def design_spaces(task: Task, rules=DEFAULT_RULES, seed: int = 0) -> list[Schedule]:
    """Every rule applied to every block, from the last block to the first (blocks a rule creates, such as a
    cache_write's ".local", are visited too); a rule returning several schedules branches the space."""
    work = [(Schedule(task, seed), set())]
    done = []
    while work:
        sch, visited = work.pop()
        todo = [s.name for s in sch.state.stages if s.name not in visited]
        if not todo:
            done.append(sch)
            continue
        name = todo[-1]
        sch = sch.copy()
        block = sch.get_block(name)
        schedules = [sch]
        for rule in rules:
            schedules = [out for s in schedules for out in rule.apply(s, block)]
        work += [(s, visited | {name}) for s in schedules]
    return done

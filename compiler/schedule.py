"""Schedules as data: transform steps over a task's stage DAG, replayed on its initial state.

A schedule is an ordered list of steps (Ansor's transform steps, MetaSchedule's trace). Each step names its stage
and iterators by name, is a frozen dataclass that JSON round-trips, and `apply`s to a `State`, raising
`ScheduleError` (naming the step and why) when it cannot apply or would change results. Replaying the same list
on the same task always gives the same state; a schedule never changes results, only speed.

State model. Every stage keeps its *root* iterators (one per output axis, then one per reduce axis) and the
*relations* (Split, Fuse) deriving its current *leaf* iterators; the leaf order is the loop order. Extents are
not stored: they are derived from the root extents by `leaf_extents`, because a stage computed at another stage
gets root extents from bound inference at lowering time and its splits then apply to those.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import ClassVar

from relayish import te


class ScheduleError(ValueError):
    """A step cannot apply to this state, or applying it would change the program's results."""


# ---------------------------------------------------------------------------------------------- state

@dataclass
class Iter:
    name: str
    kind: str  # "spatial" | "reduce"
    annotation: str = "none"  # none | parallel | vectorize | unroll


@dataclass(frozen=True)
class SplitRel:
    parent: str
    outer: str
    inner: str
    factor: int


@dataclass(frozen=True)
class FuseRel:
    outer: str
    inner: str
    fused: str


@dataclass(frozen=True)
class Loc:
    """Where a stage is computed. kind "root": its own loop nest at the top of the kernel, into its own buffer;
    "inline": substituted into its readers (no loops, no buffer); "at": inside loop `iter` of stage `stage` (its
    consumer), over the region that loop needs, into a local buffer. Invariant: `stage` and `iter` are given
    exactly when kind is "at". Use the constants Loc.ROOT, Loc.INLINE and Loc.at(stage, iter)."""
    kind: str
    stage: str | None = None
    iter: str | None = None

    ROOT: ClassVar[Loc]
    INLINE: ClassVar[Loc]

    def __post_init__(self):
        if self.kind not in ("root", "inline", "at") or \
                (self.kind == "at") != (self.stage is not None and self.iter is not None):
            raise ValueError(f"bad compute location {self!r}: kind root, inline, or at with a stage and an iter")

    @staticmethod
    def at(stage: str, iter: str) -> Loc:
        return Loc("at", stage, iter)

    @property
    def is_root(self) -> bool:
        return self.kind == "root"

    @property
    def is_inline(self) -> bool:
        return self.kind == "inline"

    def is_at(self, stage: str, iter: str | None = None) -> bool:
        """Computed at a loop of `stage` (at its loop `iter`, when given)."""
        return self.kind == "at" and self.stage == stage and (iter is None or self.iter == iter)

    def __str__(self):
        return f"at({self.stage}, {self.iter})" if self.kind == "at" else self.kind


Loc.ROOT, Loc.INLINE = Loc("root"), Loc("inline")


@dataclass
class Stage:
    """One compute stage of a task and its schedule state."""
    name: str
    op: te.ComputeOp  # the current definition (cache_write rewrites it)
    tensor: te.Tensor  # the tensor consumers read (identity); for a cache stage, its own tensor
    roots: list[Iter]
    leaves: list[Iter]
    relations: list = field(default_factory=list)
    loc: Loc = Loc.ROOT
    auto_unroll: int = 0
    is_output: bool = False

    @property
    def root_axes(self) -> list[te.IterVar]:
        return list(self.op.axes) + list(self.op.reduce_axes)

    def leaf(self, name: str, step=None) -> Iter:
        for it in self.leaves:
            if it.name == name:
                return it
        raise ScheduleError(f"{_where(step)}stage {self.name!r} has no iterator {name!r}; "
                            f"it has {[i.name for i in self.leaves]}")

    def leaf_index(self, name: str, step=None) -> int:
        return self.leaves.index(self.leaf(name, step))

    def root_extents(self) -> dict[str, int]:
        return {it.name: ax.extent for it, ax in zip(self.roots, self.root_axes)}

    def leaf_extents(self, root_extents: dict[str, int] | None = None) -> dict[str, int]:
        """Extent of every iterator (root, intermediate and leaf) derived from the root extents."""
        ext = dict(root_extents or self.root_extents())
        for rel in self.relations:
            if isinstance(rel, SplitRel):
                parent = ext[rel.parent]
                if te.is_static(parent):
                    ext[rel.inner] = min(rel.factor, parent)
                    ext[rel.outer] = -(-parent // rel.factor)
                else:  # an extent known at run time: whole tiles of `factor`, the last one guarded
                    ext[rel.inner] = rel.factor
                    ext[rel.outer] = (parent + (rel.factor - 1)) // rel.factor
            else:
                ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
        return ext

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.op.body, te.Reduce)


@dataclass
class State:
    """The schedule state of one task: its stages in producer-before-consumer order, and its inputs."""
    stages: list[Stage]
    inputs: list[te.Tensor]  # placeholders, in kernel parameter order
    outputs: list[te.Tensor]

    def stage(self, name: str, step=None) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ScheduleError(f"{_where(step)}no stage {name!r}; stages are {[s.name for s in self.stages]}")

    def stage_of(self, tensor: te.Tensor) -> Stage | None:
        for s in self.stages:
            if s.tensor is tensor:
                return s
        return None

    def consumers(self, stage: Stage) -> list[Stage]:
        """Stages whose current definition reads `stage`'s tensor."""
        return [s for s in self.stages if any(t is stage.tensor for t in s.op.input_tensors)]

    def effective_consumers(self, stage: Stage) -> list[Stage]:
        """Consumers once inlined stages are substituted: an inlined consumer is replaced by its readers."""
        out = []
        for c in self.consumers(stage):
            for e in (self.effective_consumers(c) if c.loc.is_inline else [c]):
                if e not in out:
                    out.append(e)
        return out

    def producers(self, stage: Stage) -> list[Stage]:
        return [p for p in (self.stage_of(t) for t in stage.op.input_tensors) if p is not None]

    def attached_at(self, stage: Stage, iter_name: str) -> list[Stage]:
        return [s for s in self.stages if s.loc.is_at(stage.name, iter_name)]

    def copy(self) -> "State":
        stages = [dataclasses.replace(s, roots=[dataclasses.replace(i) for i in s.roots],
                                      leaves=[dataclasses.replace(i) for i in s.leaves],
                                      relations=list(s.relations)) for s in self.stages]
        return State(stages, list(self.inputs), list(self.outputs))

    def __str__(self):
        """One line per stage: where it is computed, then its loops outer to inner as name[extent], with their
        annotations. (A stage computed at another gets its extents from bound inference when lowered; these are
        its full extents. compiler.lower.lower(state) shows the loop IR.)"""
        lines = []
        for st in self.stages:
            ext = st.leaf_extents()
            loops = [f"{it.name}[{ext[it.name]}]" + ("" if it.annotation == "none" else f" {it.annotation}")
                     for it in st.leaves]
            unroll = f" (auto_unroll_max_step {st.auto_unroll})" if st.auto_unroll else ""
            lines.append(f"{st.name} {st.loc}{unroll}: " + ", ".join(loops))
        return "\n".join(lines)


def initial_state(outputs: list[te.Tensor], inputs: list[te.Tensor] | None = None) -> State:
    """The unscheduled state: every compute stage at root, loops in axis order, unique stage names."""
    order = te.stage_dag(outputs)
    placeholders = [t for t in order if isinstance(t.op, te.PlaceholderOp)]
    if inputs is None:
        inputs = placeholders
    missing = [t.name for t in placeholders if all(t is not i for i in inputs)]
    if missing:
        raise ValueError(f"task reads placeholders {missing} that are not among its inputs")
    stages, used = [], set()
    for t in order:
        if isinstance(t.op, te.PlaceholderOp):
            continue
        name = t.op.name
        n = 1
        while name in used:
            name, n = f"{t.op.name}_{n}", n + 1
        used.add(name)
        stages.append(_new_stage(name, t.op, t, is_output=any(t is o for o in outputs)))
    return State(stages, list(inputs), list(outputs))


def _new_stage(name, op: te.ComputeOp, tensor, is_output=False) -> Stage:
    roots = [Iter(ax.var.name.split("_")[-1] if ax.kind == "spatial" else ax.var.name, ax.kind)
             for ax in list(op.axes) + list(op.reduce_axes)]
    # iterator names must be unique within a stage
    seen = {}
    for it in roots:
        if it.name in seen:
            seen[it.name] += 1
            it.name = f"{it.name}{seen[it.name]}"
        else:
            seen[it.name] = 0
    return Stage(name, op, tensor, roots, [dataclasses.replace(i) for i in roots], [], is_output=is_output)


def _where(step) -> str:
    return f"{step.describe()}: " if step is not None else ""


# ---------------------------------------------------------------------------------------------- steps

STEP_TYPES: dict[str, type] = {}


def _step(cls):
    STEP_TYPES[cls.__name__] = cls
    return dataclass(frozen=True)(cls)


class Step:
    stage: str

    def apply(self, state: State) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"{type(self).__name__}({args})"

    def to_json(self) -> list:
        return [type(self).__name__] + [_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)]


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def step_from_json(item: list) -> Step:
    cls = STEP_TYPES.get(item[0]) if item else None
    if cls is None:
        raise ScheduleError(f"unknown schedule step {item[:1]}")
    fields = dataclasses.fields(cls)
    if len(item) - 1 != len(fields):
        raise ScheduleError(f"{item[0]}: expected {len(fields)} fields, got {len(item) - 1}")
    values = [tuple(v) if isinstance(v, list) else v for v in item[1:]]
    return cls(*values)


@_step
class Split(Step):
    """Split an iterator into len(lengths)+1 nested ones: [outer, l0, l1, ...]; the outer covers the rest.

    With nparts=True, lengths == (n,) makes the OUTER iterator have n parts. Splits that do not divide are
    correct: lowering guards the tail."""
    stage: str
    iter: str
    lengths: tuple
    nparts: bool = False

    def apply(self, state):
        st = state.stage(self.stage, self)
        it = st.leaf(self.iter, self)
        if not self.lengths or any(not isinstance(l, int) or l <= 0 for l in self.lengths):
            raise ScheduleError(f"{self.describe()}: split lengths must be positive integers")
        if it.annotation != "none":
            raise ScheduleError(f"{self.describe()}: cannot split an iterator annotated {it.annotation}")
        if _has_attached(state, st, it.name):
            raise ScheduleError(f"{self.describe()}: a stage is computed at {it.name!r}; split before compute_at")
        extent = st.leaf_extents()[it.name]
        lengths = list(self.lengths)
        if self.nparts:
            if len(lengths) != 1:
                raise ScheduleError(f"{self.describe()}: nparts takes one length")
            if not te.is_static(extent):
                raise ScheduleError(f"{self.describe()}: {lengths[0]} parts of an extent known only at run time "
                                    f"({te.expr_str(extent)}) would have no constant length")
            lengths = [-(-extent // lengths[0])]
        pos = st.leaves.index(it)
        names = [f"{it.name}.{k}" for k in range(len(lengths) + 1)]
        parent = it.name
        # peel the innermost factor off first: parent -> (rest, inner) repeatedly
        new_leaves = []
        for k in range(len(lengths), 0, -1):
            rest = names[0] if k == 1 else f"{it.name}.r{k}"
            st.relations.append(SplitRel(parent, rest, names[k], lengths[k - 1]))
            new_leaves.insert(0, Iter(names[k], it.kind))
            parent = rest
        new_leaves.insert(0, Iter(names[0], it.kind))
        st.leaves[pos:pos + 1] = new_leaves


@_step
class Fuse(Step):
    """Fuse consecutive iterators (outer to inner) of the same kind into one."""
    stage: str
    iters: tuple

    def apply(self, state):
        st = state.stage(self.stage, self)
        if len(self.iters) < 2:
            raise ScheduleError(f"{self.describe()}: fuse needs at least two iterators")
        idx = [st.leaf_index(n, self) for n in self.iters]
        if idx != list(range(idx[0], idx[0] + len(idx))):
            raise ScheduleError(f"{self.describe()}: iterators must be consecutive, outer to inner")
        its = [st.leaves[i] for i in idx]
        if len({i.kind for i in its}) != 1:
            raise ScheduleError(f"{self.describe()}: cannot fuse spatial and reduce iterators")
        if any(i.annotation != "none" for i in its):
            raise ScheduleError(f"{self.describe()}: cannot fuse annotated iterators")
        for i in its[:-1]:
            if _has_attached(state, st, i.name):
                raise ScheduleError(f"{self.describe()}: a stage is computed at {i.name!r}")
        name = its[0].name
        for it in its[1:]:
            fused = f"{name}@{it.name}"
            st.relations.append(FuseRel(name, it.name, fused))
            name = fused
        st.leaves[idx[0]:idx[-1] + 1] = [Iter(name, its[0].kind)]
        for s in state.stages:  # a stage attached at the innermost fused iter now sits at the fused one
            if s.loc.is_at(st.name, its[-1].name):
                s.loc = Loc.at(st.name, name)


@_step
class Reorder(Step):
    """Set the loop order: `order` is a permutation of the stage's leaf iterators."""
    stage: str
    order: tuple

    def apply(self, state):
        st = state.stage(self.stage, self)
        names = [i.name for i in st.leaves]
        if sorted(self.order) != sorted(names):
            raise ScheduleError(f"{self.describe()}: order must be a permutation of {names}")
        new = [st.leaf(n, self) for n in self.order]
        # Stages computed at an iterator see the loops outside it: reordering must not change that set.
        for k, it in enumerate(st.leaves):
            if _has_attached(state, st, it.name):
                j = self.order.index(it.name)
                if set(names[:k + 1]) != set(self.order[:j + 1]):
                    raise ScheduleError(f"{self.describe()}: reorders across the compute_at point {it.name!r}")
        for it in new:
            if it.annotation == "vectorize" and it is not new[-1]:
                raise ScheduleError(f"{self.describe()}: vectorized {it.name!r} must stay innermost")
        st.leaves = new


@_step
class Annotate(Step):
    """Mark an iterator parallel, vectorize, unroll or none (serial)."""
    stage: str
    iter: str
    annotation: str

    def apply(self, state):
        st = state.stage(self.stage, self)
        it = st.leaf(self.iter, self)
        kind = self.annotation
        pos = st.leaves.index(it)
        if kind not in ("none", "parallel", "vectorize", "unroll"):
            raise ScheduleError(f"{self.describe()}: unknown annotation {kind!r}")
        if kind == "parallel":
            if it.kind == "reduce":
                raise ScheduleError(f"{self.describe()}: a reduction iterator cannot run in parallel "
                                    "(the updates would race); rfactor it first")
            if not st.loc.is_root:
                raise ScheduleError(f"{self.describe()}: only a stage at root may have parallel loops")
            if any(i.kind == "reduce" for i in st.leaves[:pos]):
                raise ScheduleError(f"{self.describe()}: parallel loop inside a reduction loop")
        if kind == "vectorize":
            if it.kind == "reduce":
                raise ScheduleError(f"{self.describe()}: vectorizing a reduction iterator would reorder the "
                                    "reduction across lanes; rfactor it first")
            if pos != len(st.leaves) - 1:
                raise ScheduleError(f"{self.describe()}: only the innermost iterator can be vectorized")
            if _has_attached(state, st, it.name):
                raise ScheduleError(f"{self.describe()}: a stage is computed inside {it.name!r}")
        extent = st.leaf_extents()[it.name]
        if not te.is_static(extent) and not st.loc.is_root:
            extent = None  # computed at another stage: bound inference gives its extents (lowering checks them)
        elif kind in ("vectorize", "unroll") and not te.is_static(extent):
            raise ScheduleError(f"{self.describe()}: its extent {te.expr_str(extent)} is known only at run time; "
                                f"split it by a constant and {kind} the inner part")
        if kind == "vectorize" and extent is not None and extent > 64:
            raise ScheduleError(f"{self.describe()}: vector length {extent} > 64")
        # (a stage computed at another gets its extents from bound inference: its root extents only bound them)
        if kind == "unroll" and st.loc.is_root and extent is not None and extent > 256:
            raise ScheduleError(f"{self.describe()}: unrolling {extent} iterations")
        it.annotation = kind


@_step
class Pragma(Step):
    """auto_unroll_max_step: unroll the innermost loops of the stage while their trip count stays <= value."""
    stage: str
    iter: str
    name: str
    value: int

    def apply(self, state):
        st = state.stage(self.stage, self)
        st.leaf(self.iter, self)
        if self.name != "auto_unroll_max_step":
            raise ScheduleError(f"{self.describe()}: unknown pragma {self.name!r}")
        if not isinstance(self.value, int) or self.value < 0:
            raise ScheduleError(f"{self.describe()}: value must be a non-negative integer")
        st.auto_unroll = self.value


@_step
class ComputeAt(Step):
    """Compute `stage` inside loop `iter` of `target` (the region read there by the target and the stages there)."""
    stage: str
    target: str
    iter: str

    def apply(self, state):
        st = state.stage(self.stage, self)
        tgt = state.stage(self.target, self)
        tgt.leaf(self.iter, self)
        if st.is_output:
            raise ScheduleError(f"{self.describe()}: an output stage must stay at root")
        if st.loc.is_inline:
            raise ScheduleError(f"{self.describe()}: stage is inlined")
        if tgt.loc.is_inline:
            raise ScheduleError(f"{self.describe()}: target is inlined")
        consumers = state.effective_consumers(st)
        if not consumers or any(c is not tgt and not c.loc.is_at(tgt.name, self.iter) for c in consumers):
            raise ScheduleError(f"{self.describe()}: every consumer of {st.name!r} must be the target or computed "
                                f"at the same loop; consumers are {[c.name for c in consumers]}")
        if any(i.annotation == "parallel" for i in st.leaves):
            raise ScheduleError(f"{self.describe()}: a stage with parallel loops cannot be computed at another")
        vec = [i.name for i in tgt.leaves if i.annotation == "vectorize"]
        if self.iter in vec:
            raise ScheduleError(f"{self.describe()}: cannot compute inside a vectorized loop")
        st.loc = Loc.at(tgt.name, self.iter)


@_step
class ComputeInline(Step):
    """Substitute the stage's body into its consumers (no buffer, no loops)."""
    stage: str

    def apply(self, state):
        st = state.stage(self.stage, self)
        if st.is_output:
            raise ScheduleError(f"{self.describe()}: an output stage cannot be inlined")
        if st.is_reduction:
            raise ScheduleError(f"{self.describe()}: a reduction cannot be inlined")
        if any(s.loc.is_at(st.name) for s in state.stages):
            raise ScheduleError(f"{self.describe()}: other stages are computed at it")
        st.loc = Loc.INLINE


@_step
class ComputeRoot(Step):
    """Compute the whole stage at the top level of the kernel (its own buffer)."""
    stage: str

    def apply(self, state):
        st = state.stage(self.stage, self)
        st.loc = Loc.ROOT


@_step
class CacheWrite(Step):
    """Compute the stage into a new stage `<name>.local`; the stage itself becomes a copy of it.

    Must come before any other step on the stage (it starts the stage's loops anew, as in TVM)."""
    stage: str

    def apply(self, state):
        st = state.stage(self.stage, self)
        _require_fresh(state, st, self, "cache_write")
        name = f"{st.name}.local"
        if any(s.name == name for s in state.stages):
            raise ScheduleError(f"{self.describe()}: stage {name!r} exists already")
        local_op = te.ComputeOp(name, st.op.axes, st.op.body, st.op.dtype, st.op.tag)
        local_tensor = te.Tensor(local_op)
        new_axes = tuple(te.IterVar(te.Var(ax.var.name), ax.extent, "spatial") for ax in st.op.axes)
        copy_body = local_tensor[tuple(ax.var for ax in new_axes)]
        st.op = te.ComputeOp(st.name, new_axes, copy_body, st.op.dtype, st.op.tag)
        local = _new_stage(name, local_op, local_tensor)
        st.roots = [Iter(i.name, "spatial") for i in st.roots if i.kind == "spatial"]
        st.leaves = [dataclasses.replace(i) for i in st.roots]
        state.stages.insert(state.stages.index(st), local)


@_step
class Rfactor(Step):
    """Factor a reduction: split reduce iterator `iter` by `factor`, and compute partial results over the inner
    part in a new stage `<name>.rf` whose extra spatial axis is that inner part; the stage then reduces over it.

    The new axis of `.rf` is spatial, so it can be vectorized or parallelized. Must precede other steps on the
    stage."""
    stage: str
    iter: str
    factor: int

    def apply(self, state):
        st = state.stage(self.stage, self)
        if not st.is_reduction:
            raise ScheduleError(f"{self.describe()}: stage is not a reduction")
        _require_fresh(state, st, self, "rfactor")
        if not isinstance(self.factor, int) or self.factor <= 0:
            raise ScheduleError(f"{self.describe()}: factor must be a positive integer")
        red = st.op.body
        names = [i.name for i in st.roots]
        try:
            k = names.index(self.iter) - len(st.op.axes)
        except ValueError:
            raise ScheduleError(f"{self.describe()}: no iterator {self.iter!r}") from None
        if k < 0:
            raise ScheduleError(f"{self.describe()}: {self.iter!r} is not a reduction iterator")
        ax = red.axes[k]
        if ax.extent % self.factor:
            raise ScheduleError(f"{self.describe()}: factor {self.factor} must divide extent {ax.extent}")
        outer = te.reduce_axis(ax.extent // self.factor, ax.var.name + "o")
        inner_sp = te.IterVar(te.Var(ax.var.name + "i"), self.factor, "spatial")
        sp_axes = tuple(te.IterVar(te.Var(a.var.name), a.extent, "spatial") for a in st.op.axes)
        other = [a if a is not ax else outer for a in red.axes]
        mapping = {a.var: b.var for a, b in zip(st.op.axes, sp_axes)}
        mapping[ax.var] = outer.var * self.factor + inner_sp.var
        rf_body = te.Reduce(red.combiner, te.substitute_vars(red.body, mapping), tuple(other))
        rf_op = te.ComputeOp(f"{st.name}.rf", (inner_sp,) + sp_axes, rf_body, st.op.dtype, st.op.tag)
        rf_tensor = te.Tensor(rf_op)
        k_axis = te.reduce_axis(self.factor, ax.var.name + "i")
        new_axes = tuple(te.IterVar(te.Var(a.var.name), a.extent, "spatial") for a in st.op.axes)
        body = te.Reduce(red.combiner, rf_tensor[(k_axis.var,) + tuple(a.var for a in new_axes)], (k_axis,))
        st.op = te.ComputeOp(st.name, new_axes, body, st.op.dtype, st.op.tag)
        fresh = _new_stage(st.name, st.op, st.tensor, is_output=st.is_output)
        st.roots, st.leaves = fresh.roots, fresh.leaves
        state.stages.insert(state.stages.index(st), _new_stage(f"{st.name}.rf", rf_op, rf_tensor))


def _require_fresh(state: State, st: Stage, step: Step, what: str) -> None:
    """cache_write and rfactor rebuild a stage's loops: nothing may have been done to or at the stage yet."""
    if st.relations or not st.loc.is_root or any(i.annotation != "none" for i in st.leaves):
        raise ScheduleError(f"{step.describe()}: {what} must precede other steps on the stage")
    if any(s.loc.is_at(st.name) for s in state.stages):
        raise ScheduleError(f"{step.describe()}: stages are computed at {st.name!r}; "
                            f"{type(step).__name__} must come before those compute_at steps")


def _has_attached(state: State, st: Stage, iter_name: str) -> bool:
    return any(s.loc.is_at(st.name, iter_name) for s in state.stages)


# ---------------------------------------------------------------------------------------------- schedules

@dataclass(frozen=True)
class Schedule:
    """An ordered list of steps. `apply` replays them on a fresh copy of the task's initial state."""
    steps: tuple = ()

    def apply(self, state: State) -> State:
        state = state.copy()
        for step in self.steps:
            step.apply(state)
        return state

    def to_json(self) -> str:
        return json.dumps([s.to_json() for s in self.steps])

    @staticmethod
    def from_json(text: str) -> "Schedule":
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise ScheduleError(f"schedule is not valid JSON: {e}") from None
        return Schedule(tuple(step_from_json(i) for i in items))

    def __add__(self, other: "Schedule") -> "Schedule":
        return Schedule(self.steps + other.steps)

    def __len__(self):
        return len(self.steps)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))

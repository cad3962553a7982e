"""A MetaSchedule-style schedule: a program over a task's stages whose every instruction is traced.

    sch = Schedule(task, seed=0)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ti = sch.sample_perfect_tile(i, n=4, max_innermost_factor=16)   # random variables
    i0, i1, i2, i3 = sch.split(i, ti)
    sch.to_schedule()        # -> compiler.schedule.Schedule: the step list the records store and compile_model apply

Blocks are stages (`compiler.schedule.Stage`), loops their leaf iterators. Every instruction applies the matching
schedule step at once (a `ScheduleError` names what is illegal, and leaves the schedule unchanged) and appends
itself to `sch.trace`; sampling instructions record their decision. A hand-written schedule is a trace without
sampling; a template is one with sampling; `replay(trace, task)` runs a trace again with the same or new
decisions (tuning/metaschedule/trace.py).

Annotations (`annotate(block, key, value)`) are read by the postprocessor in `to_schedule()`, the way TVM's
RewriteParallelVectorizeUnroll reads what ParallelizeVectorizeUnroll wrote: after all instructions, a block
annotated "meta_schedule.parallel" = E fuses its leading spatial loops while their extent stays <= E (at least
one) and runs them in parallel; "meta_schedule.vectorize" = W vectorizes its innermost loop when it is spatial
with 2..W iterations; "meta_schedule.unroll_explicit" = U sets auto_unroll_max_step U. The value may be a sampled
expression RV, so the search can change it; a postprocessor step that is not legal for the final state is left
out (the program stays correct).
"""
from __future__ import annotations

import math
import random

from compiler.schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, ComputeRoot, Fuse, Pragma, Reorder,
                               Schedule as StepSchedule, ScheduleError, Split, State, divisors)
from compiler.task import Task

from .trace import SAMPLING_KINDS, BlockRV, ExprRV, Instruction, LoopRV, RV, Trace

PARALLEL, VECTORIZE, UNROLL = "meta_schedule.parallel", "meta_schedule.vectorize", "meta_schedule.unroll_explicit"
ANNOTATION_KEYS = (PARALLEL, VECTORIZE, UNROLL)
ROOT, INLINE = -1, -2  # compute location decisions besides a loop index of the consumer
_PREFIX = {BlockRV: "b", LoopRV: "l", ExprRV: "v"}


class Schedule:
    """A task's schedule state, the steps that made it, and the trace of the instructions that made them."""

    def __init__(self, task: Task, seed: int = 0):
        self.task = task
        self.state: State = task.initial_state()
        self.steps: list = []
        self.trace = Trace()
        self.annotations: dict[str, dict[str, int]] = {}
        self.rng = random.Random(seed)
        self._values: dict[str, object] = {}  # RV id -> stage name | (stage, iter) | int | ROOT/INLINE

    def copy(self) -> "Schedule":
        new = Schedule.__new__(Schedule)
        new.task, new.state, new.steps = self.task, self.state.copy(), list(self.steps)
        new.trace = Trace(list(self.trace.insts), dict(self.trace.decisions))
        new.annotations = {k: dict(v) for k, v in self.annotations.items()}
        new.rng = random.Random()
        new.rng.setstate(self.rng.getstate())
        new._values = dict(self._values)
        return new

    # ------------------------------------------------------------------ inspection (not traced)
    def get(self, rv: RV):
        """The value of an RV: a stage name, (stage, iter), an int, or ROOT/INLINE for a compute location."""
        try:
            return self._values[rv.id]
        except KeyError:
            raise ScheduleError(f"{rv!r} is not a random variable of this schedule") from None

    def extent(self, loop: LoopRV) -> int:
        stage, it = self._loop(loop)
        return self.state.stage(stage).leaf_extents()[it]

    def blocks(self) -> list[str]:
        return [s.name for s in self.state.stages]

    # ------------------------------------------------------------------ instructions
    def get_block(self, name: str) -> BlockRV:
        return self._run("get_block", (), (("name", name),))[0]

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        return self._run("get_loops", (block,), ())

    def split(self, loop: LoopRV, factors) -> list[LoopRV]:
        """Split into len(factors) loops, outermost first; factors are ints or expression RVs, one may be None
        (inferred). The outermost covers the rest, so factors need not divide (the tail is guarded)."""
        return self._run("split", (loop, tuple(factors)), ())

    def fuse(self, *loops: LoopRV) -> LoopRV:
        return self._run("fuse", tuple(loops), ())[0]

    def reorder(self, *loops: LoopRV) -> None:
        """Put the given loops of one block in this order, in the positions they occupy (others stay put)."""
        self._run("reorder", tuple(loops), ())

    def parallel(self, loop: LoopRV) -> None:
        self._run("parallel", (loop,), ())

    def vectorize(self, loop: LoopRV) -> None:
        self._run("vectorize", (loop,), ())

    def unroll(self, loop: LoopRV) -> None:
        self._run("unroll", (loop,), ())

    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute the block at a loop of its consumer, or at ROOT / INLINE (from sample_compute_location)."""
        self._run("compute_at", (block, loop), ())

    def compute_inline(self, block: BlockRV) -> None:
        self._run("compute_inline", (block,), ())

    def cache_write(self, block: BlockRV) -> BlockRV:
        """The block computes into a new block "<name>.local" (returned); the block itself becomes the copy."""
        return self._run("cache_write", (block,), ())[0]

    def annotate(self, block: BlockRV, key: str, value) -> None:
        self._run("annotate", (block, value), (("key", key),))

    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision=None) -> list[ExprRV]:
        """n expression RVs whose product is the loop's extent exactly, the innermost <= max_innermost_factor."""
        return self._run("sample_perfect_tile", (loop,), (("n", n), ("max_innermost_factor", max_innermost_factor)),
                         decision)

    def sample_categorical(self, candidates, probs, decision=None) -> ExprRV:
        """One of the integer candidates, drawn with the given probabilities; the decision is its index."""
        return self._run("sample_categorical", (), (("candidates", tuple(candidates)), ("probs", tuple(probs))),
                         decision)[0]

    def sample_compute_location(self, block: BlockRV, decision=None) -> LoopRV:
        """A legal compute location of the block: a loop of its only consumer, ROOT or INLINE."""
        return self._run("sample_compute_location", (block,), (), decision)[0]

    def to_schedule(self) -> StepSchedule:
        """The compiler's step list: the instructions' steps, then the annotations' postprocessing steps."""
        state, steps = self.state.copy(), list(self.steps)
        for st in list(state.stages):
            ann = self.annotations.get(st.name)
            if ann and not st.loc.is_inline:
                _postprocess(state, st.name, ann, steps)
        return StepSchedule(tuple(steps))

    # ------------------------------------------------------------------ machinery
    def _run(self, kind: str, inputs: tuple, attrs: tuple, decision=None):
        """Run one instruction: resolve its inputs, apply it, record it (and its decision) in the trace."""
        handler = getattr(self, "_do_" + kind, None)
        if handler is None:
            raise ScheduleError(f"unknown schedule instruction {kind!r}")
        args = [self._resolve(x) for x in inputs]
        if kind in SAMPLING_KINDS:
            outs, decision = handler(*args, decision=decision, **dict(attrs))
        else:
            outs = handler(*args, **dict(attrs))
        rvs = []
        for cls, value in outs:
            rv = cls(f"{_PREFIX[cls]}{len(self._values)}")
            self._values[rv.id] = value
            rvs.append(rv)
        self.trace.insts.append(Instruction(kind, _encode(inputs), attrs, tuple(r.id for r in rvs)))
        if kind in SAMPLING_KINDS:
            self.trace.decisions[len(self.trace.insts) - 1] = decision
        return rvs

    def _resolve(self, x):
        if isinstance(x, RV):
            return self.get(x)
        if isinstance(x, tuple):
            return tuple(self._resolve(i) for i in x)
        return x

    def _apply(self, *steps) -> None:
        """Apply steps atomically: on a ScheduleError the state is as before."""
        trial = self.state.copy()
        for s in steps:
            s.apply(trial)
        self.state = trial
        self.steps.extend(steps)

    def _loop(self, loop) -> tuple:
        value = self.get(loop) if isinstance(loop, RV) else loop
        if not isinstance(value, tuple) or len(value) != 2:
            raise ScheduleError(f"{loop!r} is not a loop (its value is {value!r})")
        return value

    def _do_get_block(self, name):
        self.state.stage(name)
        return [(BlockRV, name)]

    def _do_get_loops(self, stage):
        return [(LoopRV, (stage, it.name)) for it in self.state.stage(stage).leaves]

    def _do_split(self, loop, factors):
        stage, it = loop
        if len(factors) < 2 or sum(f is None for f in factors) > 1:
            raise ScheduleError(f"split of {it!r}: give two or more factors, at most one of them None")
        if any(f is not None and (not isinstance(f, int) or f < 1) for f in factors):
            raise ScheduleError(f"split of {it!r}: factors must be positive integers, got {factors}")
        extent = self.state.stage(stage).leaf_extents()[it]
        if factors[0] is not None and None in factors[1:]:  # infer an inner factor from the others
            known = math.prod(f for f in factors if f is not None)
            factors = tuple(-(-extent // known) if f is None else f for f in factors)
        self._apply(Split(stage, it, tuple(factors[1:])))
        return [(LoopRV, (stage, f"{it}.{k}")) for k in range(len(factors))]

    def _do_fuse(self, *loops):
        stages = {s for s, _ in loops}
        if len(stages) != 1:
            raise ScheduleError(f"fuse: loops of one block only, got {sorted(stages)}")
        stage = stages.pop()
        self._apply(Fuse(stage, tuple(i for _, i in loops)))
        return [(LoopRV, (stage, "@".join(i for _, i in loops)))]

    def _do_reorder(self, *loops):
        stages = {s for s, _ in loops}
        if len(stages) != 1:
            raise ScheduleError(f"reorder: loops of one block only, got {sorted(stages)}")
        stage = stages.pop()
        names = [i.name for i in self.state.stage(stage).leaves]
        wanted = [i for _, i in loops]
        missing = [n for n in wanted if n not in names]
        if missing:
            raise ScheduleError(f"reorder: block {stage!r} has no loops {missing}; it has {names}")
        slots = sorted(names.index(n) for n in wanted)
        order = list(names)
        for slot, n in zip(slots, wanted):
            order[slot] = n
        if order != names:
            self._apply(Reorder(stage, tuple(order)))
        return []

    def _annotate_loop(self, loop, kind):
        stage, it = self._loop(loop)
        self._apply(Annotate(stage, it, kind))
        return []

    def _do_parallel(self, loop):
        return self._annotate_loop(loop, "parallel")

    def _do_vectorize(self, loop):
        return self._annotate_loop(loop, "vectorize")

    def _do_unroll(self, loop):
        return self._annotate_loop(loop, "unroll")

    def _do_compute_at(self, stage, loc):
        if loc == INLINE:
            self._apply(ComputeInline(stage))
        elif loc == ROOT:
            if not self.state.stage(stage).loc.is_root:
                self._apply(ComputeRoot(stage))
        else:
            target, it = self._loop(loc)
            self._apply(ComputeAt(stage, target, it))
        return []

    def _do_compute_inline(self, stage):
        self._apply(ComputeInline(stage))
        return []

    def _do_cache_write(self, stage):
        self._apply(CacheWrite(stage))
        return [(BlockRV, f"{stage}.local")]

    def _do_annotate(self, stage, value, key):
        if key not in ANNOTATION_KEYS:
            raise ScheduleError(f"annotate: unknown key {key!r}; expected one of {ANNOTATION_KEYS}")
        if not isinstance(value, int) or value < 0:
            raise ScheduleError(f"annotate {key}: value must be a non-negative integer, got {value!r}")
        self.state.stage(stage)
        self.annotations.setdefault(stage, {})[key] = value
        return []

    def _do_sample_perfect_tile(self, loop, n, max_innermost_factor, decision=None):
        stage, it = loop
        extent = self.state.stage(stage).leaf_extents()[it]
        if decision is None:
            decision = sample_perfect_tile(extent, n, max_innermost_factor, self.rng)
        decision = tuple(decision)
        if len(decision) != n or math.prod(decision) != extent or decision[-1] > max(max_innermost_factor, 1):
            raise ScheduleError(f"sample_perfect_tile of {it!r} (extent {extent}, n={n}, innermost <= "
                                f"{max_innermost_factor}): decision {decision} is not such a factorization")
        return [(ExprRV, f) for f in decision], decision

    def _do_sample_categorical(self, candidates, probs, decision=None):
        if len(candidates) != len(probs) or not candidates:
            raise ScheduleError(f"sample_categorical: {len(candidates)} candidates but {len(probs)} probabilities")
        if decision is None:
            decision = self.rng.choices(range(len(candidates)), weights=probs)[0]
        if not isinstance(decision, int) or not 0 <= decision < len(candidates):
            raise ScheduleError(f"sample_categorical: decision {decision!r} is not an index of {candidates}")
        return [(ExprRV, candidates[decision])], decision

    def _do_sample_compute_location(self, stage, decision=None):
        options = compute_location_candidates(self.state, stage)
        if decision is None:
            decision = self.rng.choice(options)
        if decision not in options:
            raise ScheduleError(f"sample_compute_location of {stage!r}: decision {decision} is not one of {options}")
        if decision < 0:
            return [(LoopRV, decision)], decision
        target = self.state.effective_consumers(self.state.stage(stage))[0]
        return [(LoopRV, (target.name, target.leaves[decision].name))], decision

    def __str__(self):
        return str(self.trace)


def sample_perfect_tile(extent: int, n: int, max_innermost: int, rng: random.Random) -> tuple:
    """A uniformly chosen divisor per level from the innermost out (<= max_innermost for the innermost); the
    outermost takes the rest. Always a perfect factorization: the product is `extent`."""
    factors, rest = [1] * n, extent
    for level in range(n - 1, 0, -1):
        options = [d for d in divisors(rest) if level != n - 1 or d <= max_innermost] or [1]
        factors[level] = rng.choice(options)
        rest //= factors[level]
    factors[0] = rest
    return tuple(factors)


def compute_location_candidates(state: State, stage: str) -> list[int]:
    """Decisions of sample_compute_location: INLINE (an injective non-output stage nothing is computed at),
    ROOT, and the index of each loop of its only consumer but the innermost (and not a vectorized one)."""
    st = state.stage(stage)
    options = [ROOT]
    if not st.is_output and not st.is_reduction and not any(s.loc.is_at(st.name) for s in state.stages):
        options.insert(0, INLINE)
    consumers = state.effective_consumers(st)
    if len(consumers) == 1 and not st.is_output and not consumers[0].loc.is_inline:
        options += [k for k, it in enumerate(consumers[0].leaves[:-1]) if it.annotation != "vectorize"]
    return options


def replay(trace: Trace, task: Task, seed: int = 0, decisions: dict | None = None) -> Schedule:
    """Run the trace's instructions on a fresh schedule of `task`. Each sampling instruction takes its decision
    from `decisions` if given (a missing index: sample afresh), else from the trace's own decisions."""
    decisions = trace.decisions if decisions is None else decisions
    sch = Schedule(task, seed)
    ids: dict[str, RV] = {}
    for k, inst in enumerate(trace.insts):
        inputs = _decode(inst.inputs, ids)
        outs = sch._run(inst.kind, inputs, inst.attrs, decisions.get(k)) if inst.kind in SAMPLING_KINDS \
            else sch._run(inst.kind, inputs, inst.attrs)
        if len(outs) != len(inst.outputs):
            raise ScheduleError(f"replay: {inst} now gives {len(outs)} results, the trace has {len(inst.outputs)}")
        ids.update(zip(inst.outputs, outs))
    return sch


def _encode(x):
    if isinstance(x, RV):
        return x.id
    if isinstance(x, (tuple, list)):
        return tuple(_encode(i) for i in x)
    return x


def _decode(x, ids: dict):
    if isinstance(x, str):
        if x not in ids:
            raise ScheduleError(f"replay: random variable {x!r} is used before it is defined")
        return ids[x]
    if isinstance(x, tuple):
        return tuple(_decode(i, ids) for i in x)
    return x


# ---------------------------------------------------------------------------------------------- postprocessing

def _try(state: State, steps: list, *new) -> bool:
    trial = state.copy()
    try:
        for s in new:
            s.apply(trial)
    except ScheduleError:
        return False
    for s in new:
        s.apply(state)
    steps.extend(new)
    return True


def _postprocess(state: State, stage: str, ann: dict, steps: list) -> None:
    """Vectorize the innermost loop, then fuse-and-parallelize the outer ones, then the unroll pragma."""
    st = state.stage(stage)
    ext = st.leaf_extents()
    inner = st.leaves[-1]
    lanes = ann.get(VECTORIZE, 0)
    if lanes and inner.kind == "spatial" and inner.annotation == "none" and 2 <= ext[inner.name] <= lanes:
        _try(state, steps, Annotate(stage, inner.name, "vectorize"))
    limit = ann.get(PARALLEL, 0)
    if limit and st.loc.is_root:
        outer, extent = [], 1
        for it in st.leaves:
            if it.kind != "spatial" or it.annotation != "none" or (outer and extent * ext[it.name] > limit):
                break
            outer.append(it.name)
            extent *= ext[it.name]
            if any(s.loc.is_at(stage, it.name) for s in state.stages):
                break  # a stage computed here: this loop can be the innermost of the fused ones only
        if len(outer) > 1:
            if _try(state, steps, Fuse(stage, tuple(outer)), Annotate(stage, "@".join(outer), "parallel")):
                outer = []
        if outer:
            _try(state, steps, Annotate(stage, outer[0], "parallel"))
    unroll = ann.get(UNROLL, 0)
    if unroll:
        _try(state, steps, Pragma(stage, state.stage(stage).leaves[0].name, "auto_unroll_max_step", unroll))

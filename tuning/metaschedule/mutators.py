"""Mutators: a trace with one decision changed (MetaSchedule's evolutionary search, Ansor's mutations).

Each `apply(trace, rng)` returns a new trace or None when the trace has no decision of its kind. The result
is checked by replaying it (`schedule.replay`): a decision that is not legal there raises ScheduleError and the
search drops it. Pure functions of (trace, rng).
"""
from __future__ import annotations

import random

from compiler.schedule import divisors

from .schedule import PARALLEL, UNROLL
from .trace import Trace


class Mutator:
    def apply(self, trace: Trace, rng: random.Random) -> Trace | None:
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__


class MutateTileSize(Mutator):
    """Move a divisor of one tile level's factor to another level of the same sample_perfect_tile: the product
    (the loop's extent) is unchanged and the innermost stays within its bound."""

    def apply(self, trace, rng):
        sites = [i for i in trace.sampling_sites("sample_perfect_tile")
                 if i in trace.decisions and any(f > 1 for f in trace.decisions[i]) and len(trace.decisions[i]) > 1]
        if not sites:
            return None
        i = rng.choice(sites)
        new = move_factor(trace.decisions[i], trace.insts[i].attr("max_innermost_factor"), rng)
        return None if new is None else trace.with_decision(i, new)


def move_factor(factors: tuple, max_inner: int, rng: random.Random) -> tuple | None:
    """factors with a divisor d > 1 of one level moved to another level; None if the innermost would exceed
    max_inner."""
    f = list(factors)
    src = rng.choice([k for k, x in enumerate(f) if x > 1])
    dst = rng.choice([k for k in range(len(f)) if k != src])
    d = rng.choice([d for d in divisors(f[src]) if d > 1])
    f[src] //= d
    f[dst] *= d
    return None if f[-1] > max_inner else tuple(f)


class _MutateAnnotationValue(Mutator):
    """Another candidate for a sample_categorical whose value an annotation with `key` reads."""
    key = ""

    def apply(self, trace, rng):
        read = {inst.inputs[1] for inst in trace.insts if inst.kind == "annotate" and inst.attr("key") == self.key}
        sites = [i for i in trace.sampling_sites("sample_categorical")
                 if i in trace.decisions and set(trace.insts[i].outputs) & read
                 and len(trace.insts[i].attr("candidates")) > 1]
        if not sites:
            return None
        i = rng.choice(sites)
        n = len(trace.insts[i].attr("candidates"))
        return trace.with_decision(i, rng.choice([k for k in range(n) if k != trace.decisions[i]]))


class MutateUnroll(_MutateAnnotationValue):
    """Another auto-unroll step."""
    key = UNROLL


class MutateParallel(_MutateAnnotationValue):
    """Another parallel extent (how many outer loops the postprocessor fuses into the parallel one)."""
    key = PARALLEL


class MutateComputeLocation(Mutator):
    """A sample_compute_location decided afresh on replay (the legal locations depend on the state there)."""

    def apply(self, trace, rng):
        sites = trace.sampling_sites("sample_compute_location")
        if not sites:
            return None
        return trace.with_decision(rng.choice(sites), None)


DEFAULT_MUTATORS = ((MutateTileSize(), 0.7), (MutateUnroll(), 0.1), (MutateParallel(), 0.1),
                    (MutateComputeLocation(), 0.1))


def mutate(trace: Trace, rng: random.Random, mutators=DEFAULT_MUTATORS, tries: int = 8) -> Trace | None:
    """One mutation by a mutator drawn with its probability; None if none applies after a few tries."""
    ms, probs = zip(*mutators)
    for _ in range(tries):
        new = rng.choices(ms, weights=probs)[0].apply(trace, rng)
        if new is not None:
            return new
    return None

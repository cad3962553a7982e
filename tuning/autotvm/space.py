"""AutoTVM's configuration space: knobs a template defines, and the configurations (one entity per knob).

    cfg.define_split("tile_ow", 56, num_outputs=2, max_factor=28)     # every (outer, inner) with inner <= 28
    cfg.define_reorder("tile_order", 2, policy="all")                 # every permutation of 2 loops
    cfg.define_annotate("tile_unroll", 3, policy="try_unroll")        # unroll each of 3 loops or not
    cfg.define_knob("fuse_outer", [2, 3, 4])
    x0, x1 = cfg["tile_ow"].apply(sch, x)

A template is run once with a `ConfigSpace` (define mode: each `cfg[name]` is that knob's first entity, so the
template runs through) to collect the knobs, then once per `ConfigEntity` to build that configuration's
schedule. The space is the product of the knobs: configuration i has knob indices point2knob(i) (mixed radix,
first knob fastest), so it can be enumerated (len, get(i)) and sampled.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import numpy as np

from compiler.schedule import divisors


@dataclass(frozen=True)
class SplitEntity:
    size: tuple  # factors, outermost first; product == extent

    def apply(self, sch, loop):
        return sch.split(loop, list(self.size))

    def features(self) -> list[float]:
        return [math.log2(f) for f in self.size]


@dataclass(frozen=True)
class ReorderEntity:
    perm: tuple

    def apply(self, loops):
        """The loops in this order (the template passes them to sch.reorder with its other loops)."""
        return [loops[i] for i in self.perm]

    def features(self) -> list[float]:
        return [float(p) for p in self.perm]


ANNOTATIONS = ("none", "unroll", "vec")


@dataclass(frozen=True)
class AnnotateEntity:
    anns: tuple  # one of ANNOTATIONS per loop

    def apply(self, sch, loops):
        for loop, ann in zip(loops, self.anns):
            if ann == "unroll":
                sch.unroll(loop)
            elif ann == "vec":
                sch.vectorize(loop)

    def features(self) -> list[float]:
        return [float(ANNOTATIONS.index(a)) for a in self.anns]


@dataclass(frozen=True)
class OtherOptionEntity:
    val: object

    def features(self) -> list[float]:
        return [float(self.val) if isinstance(self.val, (int, float)) else 0.0]


def split_entities(extent: int, num_outputs: int, max_factor: int | None) -> list[SplitEntity]:
    """Every factorization of extent into num_outputs factors (outermost first) with the innermost <= max_factor."""
    out = []

    def rec(rest, k, suffix):
        if k == 1:
            out.append(SplitEntity((rest,) + suffix))
            return
        for d in divisors(rest):
            if suffix or max_factor is None or d <= max_factor:
                rec(rest // d, k - 1, (d,) + suffix)
    rec(extent, num_outputs, ())
    return out


class ConfigSpace:
    """The knobs of a template for one task (define mode). Invariant: len(self) == prod(self.dims)."""

    def __init__(self):
        self.space_map: dict[str, list] = {}

    def define_split(self, name: str, extent: int, num_outputs: int = 2, max_factor: int | None = None) -> None:
        self._define(name, split_entities(int(extent), num_outputs, max_factor))

    def define_reorder(self, name: str, num_loops: int, policy: str = "all", candidate=None) -> None:
        if policy == "all":
            perms = list(itertools.permutations(range(num_loops)))
        elif policy == "candidate" and candidate:
            perms = [tuple(c) for c in candidate]
        else:
            raise ValueError(f"define_reorder {name!r}: policy 'all', or 'candidate' with a list of permutations")
        self._define(name, [ReorderEntity(p) for p in perms])

    def define_annotate(self, name: str, num_loops: int, policy: str = "try_unroll") -> None:
        """try_unroll: each loop unrolled or not; try_vec: the last vectorized or not; try_unroll_vec: both."""
        per_loop = {"try_unroll": [("none", "unroll")] * num_loops,
                    "try_vec": [("none",)] * (num_loops - 1) + [("none", "vec")],
                    "try_unroll_vec": [("none", "unroll")] * (num_loops - 1) + [("none", "unroll", "vec")]}
        if policy not in per_loop:
            raise ValueError(f"define_annotate {name!r}: unknown policy {policy!r}; expected {sorted(per_loop)}")
        self._define(name, [AnnotateEntity(a) for a in itertools.product(*per_loop[policy])])

    def define_knob(self, name: str, candidates) -> None:
        self._define(name, [OtherOptionEntity(c) for c in candidates])

    def _define(self, name, entities):
        if name in self.space_map:
            raise ValueError(f"knob {name!r} defined twice")
        if not entities:
            raise ValueError(f"knob {name!r} has no values")
        self.space_map[name] = entities

    def __getitem__(self, name):
        return self.space_map[name][0]

    # ------------------------------------------------------------------ the space
    @property
    def dims(self) -> list[int]:
        return [len(v) for v in self.space_map.values()]

    def __len__(self):
        return math.prod(self.dims)

    def point2knob(self, index: int) -> list[int]:
        if not 0 <= index < len(self):
            raise IndexError(f"configuration {index} outside a space of {len(self)}")
        knobs = []
        for d in self.dims:
            knobs.append(index % d)
            index //= d
        return knobs

    def knob2point(self, knobs) -> int:
        index, scale = 0, 1
        for k, d in zip(knobs, self.dims):
            index += k * scale
            scale *= d
        return index

    def get(self, index: int) -> "ConfigEntity":
        return ConfigEntity(self, index)

    def sample(self, rng: random.Random) -> "ConfigEntity":
        return self.get(rng.randrange(len(self)))

    def __repr__(self):
        knobs = ", ".join(f"{k}:{len(v)}" for k, v in self.space_map.items())
        return f"ConfigSpace(len={len(self)}; {knobs})"


class ConfigEntity:
    """One configuration: a value for every knob. The define_* calls of a template are no-ops here."""

    def __init__(self, space: ConfigSpace, index: int):
        self.space, self.index = space, index
        self.knobs = space.point2knob(index)
        self._entities = {name: ents[k] for (name, ents), k in zip(space.space_map.items(), self.knobs)}

    def define_split(self, *args, **kwargs):
        pass

    define_reorder = define_annotate = define_knob = define_split

    def __getitem__(self, name):
        try:
            return self._entities[name]
        except KeyError:
            raise KeyError(f"knob {name!r} was not defined by the template; knobs are {list(self._entities)}") from None

    def features(self) -> np.ndarray:
        """The configuration as numbers (AutoTVM's "knob" features): log2 of split factors, permutation
        positions, annotation codes and knob values, in knob order. Same length for every configuration of a
        template, whatever the workload's shapes, so a model can transfer between workloads."""
        return np.array([x for e in self._entities.values() for x in e.features()], dtype=np.float64)

    def __repr__(self):
        return f"ConfigEntity({self.index}: " + ", ".join(f"{k}={v}" for k, v in self._entities.items()) + ")"

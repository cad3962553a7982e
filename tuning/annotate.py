"""Random annotation and evolutionary mutation of sketches (Ansor sections 4.2 and 5.1).

A `Program` is a sketch plus its decisions: the factors of every tile variable, the parallel granularity of
each tiled stage, the auto-unroll pragma of each tiled stage, the compute location of every movable stage and,
for simple root stages, the vector lane split and the number of outer loops fused into the parallel loop.
`concretize` turns it into a concrete `Schedule` (the data the records store keeps and compile_model applies).

Every function of decisions here is pure given its `random.Random`: sampling, mutation and crossover can be
unit-tested on their own.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

from compiler.default_schedule import branch_axes
from compiler.flat_schedule import flat_tail
from compiler.transpose_schedule import TRANSPOSE_LANES, tile_loops, transpose_tile
from compiler.schedule import (Annotate, ComputeAt, ComputeInline, Fuse, Pragma, Reorder, Schedule, ScheduleError,
                               Split, State, divisors)

from .sketch import Sketch

UNROLL_CHOICES = (0, 16, 64, 512)
MAX_INNER_FACTOR = 64  # innermost tile level (the vector/unrolled one) is never larger
MAX_VECTOR = 64
MAX_TAIL_FACTOR = 8  # a tail tile variable's inner factor may be any of 2..8, dividing its extent or not


@dataclass
class Program:
    sketch_id: int
    tiles: list  # per tile var: factors, outermost first, product == extent (a tail var: extent // inner, inner)
    parallel: dict = field(default_factory=dict)  # tiled root stage -> number of outer iters fused (>= 1)
    unroll: dict = field(default_factory=dict)  # tiled stage -> auto_unroll_max_step
    loc: dict = field(default_factory=dict)  # movable stage -> "root" | "inline" | iter name
    simple: dict = field(default_factory=dict)  # simple root stage -> (lane or 0, parallel depth)

    def copy(self) -> "Program":
        return copy.deepcopy(self)

    def key(self) -> tuple:
        return (self.sketch_id, tuple(self.tiles), tuple(sorted(self.parallel.items())),
                tuple(sorted(self.unroll.items())), tuple(sorted(self.loc.items())), tuple(sorted(self.simple.items())))


# ---------------------------------------------------------------------------------------------- sampling

def sample_factors(extent: int, levels: int, rng: random.Random, max_inner: int = MAX_INNER_FACTOR,
                   tail: bool = False) -> tuple:
    """A random factorization extent = f0 * f1 * ... * f{levels-1}, inner factors drawn first. tail (a two-level
    TileVar.tail variable): the inner factor is drawn from the divisors and from 2..MAX_TAIL_FACTOR (below the
    extent), the outer one is what is left (extent // inner, the loop nest rounds it up), as derive_program reads
    a hand-written split of 4 columns of 7."""
    if tail and levels == 2:
        inner = rng.choice(tail_options(extent, max_inner))
        return (max(extent // inner, 1), inner)
    factors = [1] * levels
    rest = extent
    for lv in range(levels - 1, 0, -1):
        options = [d for d in divisors(rest) if lv != levels - 1 or d <= max_inner]
        factors[lv] = rng.choice(options)
        rest //= factors[lv]
    factors[0] = rest
    return tuple(factors)


def tail_options(extent: int, max_inner: int = MAX_INNER_FACTOR) -> list[int]:
    """Inner factors of a tail tile variable: the divisors of extent up to max_inner and every 2..MAX_TAIL_FACTOR
    below extent."""
    return sorted({d for d in divisors(extent) if d <= max_inner} |
                  set(range(2, min(MAX_TAIL_FACTOR, extent - 1, max_inner) + 1)))


def sample_program(sketches: list[Sketch], sketch_id: int, rng: random.Random) -> Program:
    sk = sketches[sketch_id]
    prog = Program(sketch_id, [sample_factors(t.extent, t.levels, rng, tail=t.tail) for t in sk.tiles])
    for tl in sk.tiled:
        prog.parallel[tl.root_stage] = rng.randint(1, len(tl.outer_iters))
        for st in tl.unroll_stages:
            prog.unroll[st] = rng.choice(UNROLL_CHOICES)
    for mv in sk.movable:
        prog.loc[mv.stage] = rng.choice(_loc_options(mv))
    for name in sk.simple_roots:
        prog.simple[name] = _sample_simple(sk.state.stage(name), rng)
    return prog


def _loc_options(mv) -> list:
    return ["root"] + (["inline"] if mv.can_inline else []) + list(mv.at_iters)


def _sample_simple(st, rng) -> tuple:
    """(lane, parallel depth, transpose tile side or 0, trailing axes fused) for a root stage without tiling (the
    tile applies where compiler/transpose_schedule.py finds one: a transposing copy; the fusion where
    compiler/flat_schedule.py says the reads allow it)."""
    sp = [i for i in st.leaves if i.kind == "spatial"]
    if not sp:
        return (0, 0, 0, 1)
    last = st.leaf_extents()[sp[-1].name]
    lanes = [0] + [d for d in divisors(last) if 4 <= d <= MAX_VECTOR]
    lane = rng.choice(lanes) if rng.random() < 0.8 else 0
    if lanes[-1] and rng.random() < 0.6:
        lane = max(lanes)  # contiguous and wide is usually best: bias towards it
    tile = rng.choice(TRANSPOSE_LANES) if rng.random() < 0.5 else 0
    return (lane, rng.randint(0, len(sp)), tile, rng.randint(2, len(sp)) if len(sp) > 1 and rng.random() < 0.3 else 1)


# ---------------------------------------------------------------------------------------------- concrete

def concretize(sketch: Sketch, prog: Program, initial: State) -> Schedule:
    """The concrete schedule of a program; raises ScheduleError if a decision is not legal for this sketch.

    Step order (the default schedule's, so that the space holds it step for step): every ComputeInline first
    (the sketch's and the movable stages' chosen inline, last stage first); the sketch's other steps with their
    tile sizes; compute_at of movable stages; tiled stages' annotations; simple root stages, in stage order."""
    values = {}
    for k, factors in enumerate(prog.tiles):
        for lv, f in enumerate(factors):
            values[f"T{k}.{lv}"] = f
    position = {st.name: k for k, st in enumerate(initial.stages)}
    inlines = [s for s in sketch.steps if isinstance(s, ComputeInline)] + \
              [ComputeInline(mv.stage) for mv in sketch.movable if prog.loc.get(mv.stage) == "inline"]
    steps = sorted(inlines, key=lambda s: -position[s.stage])
    for step in sketch.steps:
        if isinstance(step, ComputeInline):
            continue
        if isinstance(step, Split) and any(isinstance(l, str) for l in step.lengths):
            lengths = tuple(_eval_length(l, values) if isinstance(l, str) else l for l in step.lengths)
            step = Split(step.stage, step.iter, lengths, step.nparts)
        steps.append(step)
    state = Schedule(tuple(steps)).apply(initial)
    for mv in sketch.movable:
        choice = prog.loc.get(mv.stage, "root")
        if choice not in ("root", "inline"):
            _add(ComputeAt(mv.stage, mv.target, choice), state, steps)
    for tl in sketch.tiled:
        for st_name, it_name in tl.vector_iters:
            ext = state.stage(st_name).leaf_extents()[it_name]
            if 2 <= ext <= MAX_VECTOR:
                _add(Annotate(st_name, it_name, "vectorize"), state, steps)
        depth = prog.parallel.get(tl.root_stage, 1)
        outer = list(tl.outer_iters[:depth])
        if len(outer) > 1:
            _add(Fuse(tl.root_stage, tuple(outer)), state, steps)
        _add(Annotate(tl.root_stage, "@".join(outer), "parallel"), state, steps)
        for st_name in tl.unroll_stages:
            value = prog.unroll.get(st_name, 0)
            if value:
                first = state.stage(st_name).leaves[0].name
                _add(Pragma(st_name, first, "auto_unroll_max_step", value), state, steps)
    order = {st.name: k for k, st in enumerate(state.stages)}
    for name in sorted(sketch.simple_roots, key=order.__getitem__):
        if state.stage(name).loc.is_root:
            _annotate_simple(state, name, prog.simple.get(name, (0, 0)), steps)
    return Schedule(tuple(steps))


def _eval_length(expr: str, values: dict) -> int:
    out = 1
    for name in expr.split("*"):
        out *= values[name]
    return out


def _add(step, state, steps):
    step.apply(state)
    steps.append(step)


def _annotate_simple(state: State, name: str, decision: tuple, steps: list):
    lane, depth, tile_side, flat = (tuple(decision) + (0, 0, 1))[:4]  # (older programs: fewer entries)
    st = state.stage(name)
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    red = [i.name for i in st.leaves if i.kind == "reduce"]
    if not sp:  # a reduction to one value (a whole tensor's max): its loops in order, as the default's root rule
        if red:
            _add(Reorder(name, tuple(red)), state, steps)
        return
    vec = None
    ext = st.leaf_extents()
    tile = transpose_tile(state, st, tile_side) if tile_side else None
    flat = flat if flat > 1 and not tile and not red and flat_tail(state, st) >= flat else 1
    if flat > 1:  # trailing axes fused into one contiguous run (as the default does for a short last axis)
        _add(Fuse(name, tuple(sp[-flat:])), state, steps)
        sp = sp[:-flat] + ["@".join(sp[-flat:])]
        if lane and state.stage(name).leaf_extents()[sp[-1]] > lane:  # (a partial last vector masked)
            _add(Split(name, sp[-1], (lane,)), state, steps)
            sp = sp[:-1] + [f"{sp[-1]}.0", f"{sp[-1]}.1"]
        vec = sp[-1] if lane >= 4 else None
    elif tile is not None:  # a transposing copy's square tile (as the default schedule makes it)
        splits, sp, (unrolled, vec) = tile_loops(st, tile, sp)
        for step in splits:
            _add(step, state, steps)
        sp = sp + [unrolled, vec]
    elif lane and ext[sp[-1]] % lane == 0:
        if ext[sp[-1]] > lane:
            _add(Split(name, sp[-1], (lane,)), state, steps)
            sp = sp[:-1] + [f"{sp[-1]}.0", f"{sp[-1]}.1"]
        vec = sp[-1]
    # axes that only choose between select branches (Winograd tile positions) run inside, unrolled: they fold
    branch = [st.roots[k].name for k in branch_axes(st) if st.roots[k].name in sp and st.roots[k].name != vec]
    if tile is not None:
        branch = [unrolled]
    outer = [n for n in sp if n != vec and n not in branch]
    order = outer + red + branch + ([vec] if vec else [])
    if red or branch or vec:  # (as the default schedule: even when the order is unchanged)
        _add(Reorder(name, tuple(order)), state, steps)
    depth = min(depth, len(outer))
    if depth >= 1:
        if depth > 1:
            _add(Fuse(name, tuple(outer[:depth])), state, steps)
        _add(Annotate(name, "@".join(outer[:depth]), "parallel"), state, steps)
    for n in branch:
        _add(Annotate(name, n, "unroll"), state, steps)
    if vec:
        _add(Annotate(name, vec, "vectorize"), state, steps)


def random_programs(sketches: list[Sketch], initial: State, n: int, rng: random.Random,
                    max_tries: int = 20) -> list[tuple[Program, Schedule]]:
    """n legal (program, schedule) pairs, sketches drawn uniformly."""
    out = []
    for _ in range(n * max_tries):
        if len(out) >= n:
            break
        prog = sample_program(sketches, rng.randrange(len(sketches)), rng)
        try:
            out.append((prog, concretize(sketches[prog.sketch_id], prog, initial)))
        except ScheduleError:
            continue
    return out


# ---------------------------------------------------------------------------------------------- evolution

def mutate(sketches: list[Sketch], prog: Program, rng: random.Random) -> Program:
    """One random mutation: a tile size, the parallel granularity, an unroll pragma or a compute location."""
    sk = sketches[prog.sketch_id]
    new = prog.copy()
    kinds = []
    if any(len(t) >= 2 for t in new.tiles):
        kinds += ["tile"] * 4
    if new.parallel:
        kinds.append("parallel")
    if new.unroll:
        kinds.append("unroll")
    if new.loc:
        kinds.append("loc")
    if new.simple:
        kinds.append("simple")
    if not kinds:
        return new
    kind = rng.choice(kinds)
    if kind == "tile":
        k = rng.choice([k for k, t in enumerate(new.tiles) if len(t) >= 2])
        tv = sk.tiles[k]
        new.tiles[k] = sample_factors(tv.extent, 2, rng, tail=True) if tv.tail and tv.levels == 2 else \
            _mutate_factors(new.tiles[k], rng)
    elif kind == "parallel":
        stage = rng.choice(sorted(new.parallel))
        tl = next(t for t in sk.tiled if t.root_stage == stage)
        new.parallel[stage] = rng.randint(1, len(tl.outer_iters))
    elif kind == "unroll":
        stage = rng.choice(sorted(new.unroll))
        new.unroll[stage] = rng.choice(UNROLL_CHOICES)
    elif kind == "loc":
        stage = rng.choice(sorted(new.loc))
        mv = next(m for m in sk.movable if m.stage == stage)
        new.loc[stage] = rng.choice(_loc_options(mv))
    else:
        stage = rng.choice(sorted(new.simple))
        new.simple[stage] = _sample_simple(sk.state.stage(stage), rng)
    return new


def _mutate_factors(factors: tuple, rng: random.Random) -> tuple:
    """Move a divisor of one level's factor to another level (the product, i.e. the extent, is unchanged)."""
    f = list(factors)
    src = rng.choice([i for i, x in enumerate(f) if x > 1] or [0])
    if f[src] == 1:
        return tuple(f)
    dst = rng.choice([i for i in range(len(f)) if i != src])
    d = rng.choice([d for d in divisors(f[src]) if d > 1])
    f[src] //= d
    f[dst] *= d
    if f[-1] > MAX_INNER_FACTOR:
        return tuple(factors)
    return tuple(f)


def crossover(sketches: list[Sketch], a: Program, b: Program, rng: random.Random) -> Program:
    """Node-based crossover: for each stage, take all its decisions from one parent or the other."""
    if a.sketch_id != b.sketch_id:
        return a.copy()
    sk = sketches[a.sketch_id]
    child = a.copy()
    stages = {t.stage for t in sk.tiles} | set(a.parallel) | set(a.unroll) | set(a.loc) | set(a.simple)
    for st in sorted(stages):  # in a fixed order: a set's (of strings) changes with the process's hash seed
        if rng.random() < 0.5:
            continue
        for k, t in enumerate(sk.tiles):
            if t.stage == st:
                child.tiles[k] = b.tiles[k]
        for d_child, d_b in ((child.parallel, b.parallel), (child.unroll, b.unroll), (child.loc, b.loc),
                             (child.simple, b.simple)):
            if st in d_b:
                d_child[st] = d_b[st]
    return child


# ---------------------------------------------------------------------------------------------- the inverse

def derive_program(sketches: list[Sketch], schedule: Schedule, initial: State,
                   exact: bool = True) -> Program | None:
    """A program whose concretization is `schedule` (the inverse of concretize): the first sketch whose symbolic
    splits unify with the schedule's splits, with the decisions read off the schedule's steps. exact=True: None
    unless replaying the program gives exactly `schedule`'s steps (how the default schedule is found in the
    space, and the test that the space contains it). exact=False: the decisions are fitted to this task
    (tile factors to divisors of its extents, lanes to divisors of its axes): a schedule measured on another
    shape of the same computation becomes a similar legal program here, or None if none fits."""
    splits = {(s.stage, s.iter): s.lengths for s in schedule.steps if isinstance(s, Split)}
    for sketch_id, sk in enumerate(sketches):
        prog = _derive(sketch_id, sk, schedule, splits, exact)
        if prog is None:
            continue
        try:
            sch = concretize(sk, prog, initial)
        except ScheduleError:
            continue
        if not exact or sch.steps == schedule.steps:
            return prog
    return None


def _derive(sketch_id: int, sk: Sketch, schedule: Schedule, splits: dict, exact: bool) -> Program | None:
    values = _solve_tile_symbols(sk, splits)
    if values is None:
        return None
    tiles = []
    for k, tv in enumerate(sk.tiles):
        inner = [values.get(f"T{k}.{lv}", 1) for lv in range(1, tv.levels)]
        if not exact:
            inner = _fit_factors(tv.extent, inner)
        rest = tv.extent
        for f in inner:
            rest //= max(f, 1)
        tiles.append((max(rest, 1), *inner))
    prog = Program(sketch_id, tiles)
    steps = schedule.steps
    for tl in sk.tiled:
        fuse = next((s for s in steps if isinstance(s, Fuse) and s.stage == tl.root_stage), None)
        prog.parallel[tl.root_stage] = len(fuse.iters) if fuse is not None else 1
        for name in tl.unroll_stages:
            prog.unroll[name] = next((s.value for s in steps if isinstance(s, Pragma) and s.stage == name), 0)
    for mv in sk.movable:
        prog.loc[mv.stage] = next(("inline" if isinstance(s, ComputeInline) else s.iter for s in steps
                                   if isinstance(s, (ComputeInline, ComputeAt)) and s.stage == mv.stage), "root")
    for name in sk.simple_roots:
        prog.simple[name] = _simple_decision(sk.state.stage(name), steps, exact)
    return prog


def _solve_tile_symbols(sk: Sketch, splits: dict) -> dict | None:
    """Values of the sketch's tile symbols from the schedule's concrete splits of the same iterators (a length
    "a*b" gives b once a is known); None if the schedule lacks a split the sketch makes."""
    equations = []
    for step in sk.steps:
        if isinstance(step, Split) and any(isinstance(l, str) for l in step.lengths):
            concrete = splits.get((step.stage, step.iter))
            if concrete is None or len(concrete) != len(step.lengths):
                return None
            equations += [(l, v) for l, v in zip(step.lengths, concrete) if isinstance(l, str)]
    values: dict[str, int] = {}
    progress = True
    while progress:
        progress = False
        for expr, v in equations:
            names = expr.split("*")
            unknown = [n for n in names if n not in values]
            if len(unknown) == 1:
                known = 1
                for n in names:
                    known *= values.get(n, 1)
                values[unknown[0]] = max(v // known, 1)
                progress = True
    return values


def _fit_factors(extent: int, inner: list[int]) -> list[int]:
    """Inner tile factors (outer to inner) moved to divisors of what is left of `extent`, innermost first."""
    out, rest = list(inner), extent
    for k in range(len(out) - 1, -1, -1):
        out[k] = max(d for d in divisors(rest) if d <= max(out[k], 1))
        rest //= out[k]
    return out


def _simple_decision(st, steps, exact: bool) -> tuple:
    """(lane, parallel depth, transpose tile side) of a simple root stage, read off its Split / Fuse / Annotate
    steps (an unrolled loop that is no branch axis is a transpose tile's)."""
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    if not sp:
        return (0, 0, 0, 1)
    mine = [s for s in steps if getattr(s, "stage", None) == st.name]
    parallel_iters = {s.iter for s in mine if isinstance(s, Annotate) and s.annotation == "parallel"}
    flat = next((s for s in mine if isinstance(s, Fuse) and s.iters[-1] == sp[-1]
                 and "@".join(s.iters) not in parallel_iters), None)  # (not the parallel loop's fusion)
    if flat is not None:  # trailing axes fused into one run: its lane is its split's (or the whole run)
        fused = "@".join(flat.iters)
        split = next((s for s in mine if isinstance(s, Split) and s.iter == fused), None)
        extent = 1
        for n in flat.iters:
            extent *= st.leaf_extents()[n]
        vectorized = any(isinstance(s, Annotate) and s.annotation == "vectorize" for s in mine)
        lane = split.lengths[0] if split is not None else extent if vectorized else 0
        outer = [s for s in mine if isinstance(s, Fuse) and s is not flat]
        parallel = any(isinstance(s, Annotate) and s.annotation == "parallel" for s in mine)
        return (lane, len(outer[0].iters) if outer and parallel else int(parallel), 0, len(flat.iters))
    branch = {st.roots[k].name for k in branch_axes(st)}
    tiled = next((s.iter for s in mine if isinstance(s, Annotate) and s.annotation == "unroll"
                  and s.iter not in branch), None)
    if tiled is not None:
        split = next((s for s in mine if isinstance(s, Split) and f"{s.iter}.1" == tiled), None)
        side = split.lengths[0] if split is not None else st.leaf_extents().get(tiled, 0)
        fuse = next((s for s in mine if isinstance(s, Fuse)), None)
        parallel = any(isinstance(s, Annotate) and s.annotation == "parallel" for s in mine)
        return (0, len(fuse.iters) if fuse is not None and parallel else int(parallel), side, 1)
    split = next((s for s in mine if isinstance(s, Split) and s.iter == sp[-1]), None)
    extent = st.leaf_extents()[sp[-1]]
    vectorized = any(isinstance(s, Annotate) and s.annotation == "vectorize" and s.iter == sp[-1] for s in mine)
    lane = split.lengths[0] if split is not None else extent if vectorized else 0
    if not exact and lane and extent % lane:
        lane = max(d for d in divisors(extent) if d <= lane)
        lane = lane if lane >= 4 else 0
    fuse = next((s for s in mine if isinstance(s, Fuse)), None)
    parallel = any(isinstance(s, Annotate) and s.annotation == "parallel" for s in mine)
    return (lane, len(fuse.iters) if fuse is not None and parallel else int(parallel), 0, 1)

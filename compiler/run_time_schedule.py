"""Schedules over run-time extents: the default schedule of a task whose dims hold size variables, made for a
typical size (default_schedule.py) and replayed on the task over the variables, with the steps that do not fit a
run-time extent refitted (the generic tier, compiler/generic.py)."""
from __future__ import annotations

from relayish import te

from .default_schedule import default_schedule
from .schedule import Annotate, CacheWrite, ComputeAt, Fuse, Reorder, Schedule, Split, State, initial_state

MIN_STATIC_PARALLEL = 16  # static iterations a parallel loop keeps when its run-time ones are unfused


def default_schedule_for_sizes(state: State, hints: dict, vector_width: int = 16,
                               uncached: frozenset = frozenset(), rooted: frozenset = frozenset()) -> Schedule:
    """The default schedule of a state whose extents hold size variables (dims known only at run time): the one
    default_schedule makes for the same computation with each size variable v bound to the typical size hints[v]
    (te.bind_sizes: the same stages and names), replayed on `state`. Steps are data (splits by constants, fuses,
    annotations) and apply as they are: a split of a run-time extent runs whole tiles and a guarded last tile,
    versioned so that the whole tiles run unguarded (compiler/lower.py). A vectorized loop of a run-time extent is
    split by the vector width first, an unrolled one is not unrolled (_fit_run_time_extents); a step that cannot
    apply (an nparts split of a run-time extent) raises ScheduleError naming it; a schedule that keeps a
    whole run-time axis in a local buffer raises lowering's LoweringError naming the local stage: given again in
    `uncached` (names of the stages that were cached), those stages are computed in place instead (their
    CacheWrite and every step of their local copy dropped; a typical size's tile may keep a whole axis there, as
    softmax's row sums over the query axis). A stage computed at another over a region whose extent is known only
    at run time (a Winograd chunk's padded input, whose rows and columns come from a tile index divided by the
    run-time tiles per row) raises it too, naming that stage: given in `rooted`, it is computed at root instead
    (its ComputeAt dropped)."""
    twin = te.bind_sizes(state.outputs + state.inputs, hints)
    hint_state = initial_state([twin[id(t)] for t in state.outputs], [twin[id(t)] for t in state.inputs])
    sched = default_schedule(hint_state, vector_width)
    steps = sched.steps
    if uncached:
        local = {f"{name}.local" for name in uncached}
        steps = tuple(s for s in steps if not (isinstance(s, CacheWrite) and s.stage in uncached)
                      and getattr(s, "stage", None) not in local)
    if rooted:
        steps = tuple(s for s in steps if not (isinstance(s, ComputeAt) and s.stage in rooted))
    return Schedule(_fit_run_time_extents(steps, state, vector_width))


def _fit_run_time_extents(steps: tuple, state: State, vector_width: int) -> tuple:
    """The steps, replayed on `state`, with each vectorize of a loop of a stage at root whose extent is known only
    at run time made a split by the vector width with its inner loop vectorized (the typical size's twin
    vectorizes a row of 32 whole; a row of any length needs a tail), and each unroll of one dropped. A stage
    computed at another runs its loops over the region read there, which the tiles make constant: its steps
    stay as they are (lowering refuses a run-time one). Raises ScheduleError where a step does not fit."""
    steps = _unfuse_run_time_tails(steps, state)
    placing = tuple(s for s in steps if not (isinstance(s, Annotate) and s.annotation in ("vectorize", "unroll")))
    final = Schedule(placing).apply(state)  # (annotations move no stage)
    at_root = {st.name for st in final.stages if st.loc.is_root}
    out, work = [], state.copy()
    for step in steps:
        if isinstance(step, Annotate) and step.annotation in ("vectorize", "unroll") and step.stage in at_root:
            extent = work.stage(step.stage, step).leaf_extents().get(step.iter)
            if extent is not None and not te.is_static(extent):
                if step.annotation == "unroll":
                    continue
                fitted = (Split(step.stage, step.iter, (vector_width,)),
                          Annotate(step.stage, f"{step.iter}.1", "vectorize"))
                for s in fitted:
                    s.apply(work)
                out += fitted
                continue
        step.apply(work)
        out.append(step)
    return tuple(out)


def _unfuse_run_time_tails(steps: tuple, state: State) -> tuple:
    """The steps with each parallel Fuse whose last iterators have run-time extents (a matmul's row tiles after
    its column blocks) fusing only the static ones before them, when those give MIN_STATIC_PARALLEL iterations:
    the parallel loop runs over them and the run-time loops follow inside it, unfused. Fused, a column block was
    the fused index divided by the run-time row-tile count, a quotient whose range lowering cannot bound: the
    weight panel's index kept a clamp and a division per lane (gathers). With fewer static iterations than that,
    the run-time loops are fused outside the static ones instead. Steps naming the fused loop are renamed: its
    annotations go to the static part (or the reordered fuse), a ComputeAt at it moves to the last fused loop (the
    same region per iteration)."""
    parallel = {(s.stage, s.iter) for s in steps if isinstance(s, Annotate) and s.annotation == "parallel"}
    renamed, out, work = {}, [], state.copy()
    for step in steps:
        if isinstance(step, Fuse) and (step.stage, "@".join(step.iters)) in parallel:
            extents = work.stage(step.stage, step).leaf_extents()
            static = list(step.iters)
            while static and not te.is_static(extents[static[-1]]):
                static.pop()
            product = 1
            for it in static:
                product *= extents[it]
            if static and len(static) < len(step.iters) and product >= MIN_STATIC_PARALLEL and \
                    all(te.is_static(extents[it]) for it in static):
                fused = "@".join(step.iters)
                renamed[(step.stage, fused)] = ("@".join(static), step.iters[-1])
                if len(static) > 1:
                    step = Fuse(step.stage, tuple(static))
                else:
                    continue
            else:
                run_time = [it for it in step.iters if not te.is_static(extents[it])]
                order = run_time + [it for it in step.iters if te.is_static(extents[it])]
                divided = any(te.is_static(extents[a]) and extents[a] > 1 and
                              any(not te.is_static(extents[b]) for b in step.iters[k + 1:])
                              for k, a in enumerate(step.iters))  # a static loop outside a run-time one
                if divided:
                    # too few static iterations to run alone: the run-time loops go outside them in the fused
                    # loop, so that each static one is the fused index modulo a constant (bounded: a channel
                    # block's selects fold per block, its lanes vectorize)
                    leaves = [it.name for it in work.stage(step.stage, step).leaves]
                    at = leaves.index(step.iters[0])
                    reorder = Reorder(step.stage, tuple(leaves[:at] + order + leaves[at + len(order):]))
                    reorder.apply(work)
                    out.append(reorder)
                    renamed[(step.stage, "@".join(step.iters))] = ("@".join(order), "@".join(order))
                    step = Fuse(step.stage, tuple(order))
        elif isinstance(step, Annotate) and (step.stage, step.iter) in renamed:
            step = Annotate(step.stage, renamed[(step.stage, step.iter)][0], step.annotation)
        elif isinstance(step, ComputeAt) and (step.target, step.iter) in renamed:
            step = ComputeAt(step.stage, step.target, renamed[(step.target, step.iter)][1])
        elif any(getattr(step, "stage", None) == st and fused in (getattr(step, "iter", None),
                                                                   *getattr(step, "iters", ()))
                 for st, fused in renamed):
            return steps  # another step of the fused loop (a split of it): left as the twin made it
        if not (isinstance(step, Annotate) and step.annotation in ("vectorize", "unroll")):
            step.apply(work)  # (annotations change no extent; a vectorize of a run-time one is fitted later)
        out.append(step)
    return tuple(out)

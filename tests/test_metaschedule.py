"""MetaSchedule-style schedules (tuning/metaschedule): sampling, traces, replay, rules, mutators, search, Database."""
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler.lower import lower
from compiler.schedule import Loc, ScheduleError, Split
from loop_eval import run_primfunc
from test_sketch import matmul_task
from tuning.cost_model import RandomModel
from tuning.metaschedule.database import Database, TuningRecord
from tuning.metaschedule.mutators import DEFAULT_MUTATORS, MutateTileSize, mutate
from tuning.metaschedule.rules import MultiLevelTiling, design_spaces
from tuning.metaschedule.schedule import INLINE, ROOT, Schedule, replay, sample_perfect_tile
from tuning.metaschedule.search import MetaScheduleSearch
from tuning.metaschedule.trace import Trace


def run_matmul(task, sch, relu):
    """Lower and run a schedule of matmul_task(6, 8, 12); assert it matches numpy."""
    a = np.random.default_rng(0).standard_normal((6, 12)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((12, 8)).astype(np.float32)
    ref = np.maximum(a @ b, 0) if relu else a @ b
    func = lower(sch.apply(task.initial_state()))
    bufs = [a, b, np.zeros((6, 8), np.float32)] + [np.zeros(x.shape, np.float32) for x in func.params[3:]]
    run_primfunc(func, bufs)
    np.testing.assert_allclose(bufs[2], ref, rtol=1e-5, atol=1e-5, err_msg=sch.to_json())


@settings(max_examples=200, deadline=None)
@given(extent=st.integers(1, 5000), n=st.integers(1, 5), max_inner=st.integers(1, 64), seed=st.integers(0, 99))
def test_sample_perfect_tile_is_always_a_perfect_factorization(extent, n, max_inner, seed):
    f = sample_perfect_tile(extent, n, max_inner, random.Random(seed))
    assert len(f) == n and int(np.prod(f)) == extent and all(x >= 1 for x in f)
    assert n == 1 or f[-1] <= max_inner


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 4), seed=st.integers(0, 999))
def test_sample_perfect_tile_instruction_splits_exactly(n, seed):
    sch = Schedule(matmul_task(12, 8, 36, relu=False), seed=seed)
    c = sch.get_block("C")
    k = sch.get_loops(c)[2]
    tiles = sch.sample_perfect_tile(k, n=n, max_innermost_factor=4)
    values = [sch.get(t) for t in tiles]
    assert int(np.prod(values)) == 36 and values[-1] <= 4
    loops = sch.split(k, tiles)
    assert [sch.extent(lp) for lp in loops] == values


def test_hand_written_schedule_and_illegal_decisions():
    task = matmul_task(6, 8, 12, relu=False)
    sch = Schedule(task)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 3])
    sch.reorder(i0, k, i1, j)  # the given loops, in the slots they occupy
    sch.vectorize(j)
    sch.parallel(i0)
    assert [it.name for it in sch.state.stage("C").leaves] == ["i.0", "r", "i.1", "j"]
    assert sch.trace.decisions == {}  # a hand-written schedule is a trace without sampling
    run_matmul(task, sch.to_schedule(), relu=False)
    with pytest.raises(ScheduleError, match="not such a factorization"):
        sch.sample_perfect_tile(k, n=2, decision=(5, 3))
    steps = len(sch.steps)
    with pytest.raises(ScheduleError):
        sch.parallel(k)  # a reduction loop: refused, and the schedule is unchanged
    assert len(sch.steps) == steps


def test_multi_level_tiling_by_hand_has_the_ssrsrs_structure():
    task = matmul_task(16, 16, 16)
    sch = Schedule(task, seed=3)
    sch = MultiLevelTiling("SSRSRS").apply(sch, sch.get_block("C"))[0]
    st = sch.state
    assert st.stage("C").loc == Loc.at("D", "j.1")  # computed at the consumer after the two leading S levels
    assert [i.name for i in st.stage("D").leaves] == ["i.0", "j.0", "i.1", "j.1", "i.2", "j.2", "i.3", "j.3"]
    assert [i.kind[0] for i in st.stage("C").leaves] == list("rssrss")
    assert len(sch.trace.sampling_sites("sample_perfect_tile")) == 3  # i, j of the consumer; r


@pytest.mark.parametrize("relu", [True, False])
def test_traces_replay_exactly_round_trip_json_and_run_correctly(relu):
    task = matmul_task(6, 8, 12, relu)
    (space,) = design_spaces(task)
    for seed in range(8):
        sch = replay(space.trace, task, seed=seed, decisions={})  # fresh decisions
        trace = sch.trace
        assert set(trace.decisions) == set(trace.sampling_sites())
        again = replay(Trace.from_json(trace.to_json()), task, seed=99)
        assert Trace.from_json(trace.to_json()) == trace
        assert again.trace == trace and again.to_schedule() == sch.to_schedule()
        run_matmul(task, sch.to_schedule(), relu)


def test_replay_with_a_new_decision_changes_only_that_choice():
    task = matmul_task(6, 8, 12, relu=False)
    sch = replay(design_spaces(task)[0].trace, task, seed=1, decisions={})
    site = sch.trace.sampling_sites("sample_perfect_tile")[-1]  # the reduction's 2-level split
    new = replay(sch.trace.with_decision(site, (1, 12)), task)
    splits = [s for s in new.to_schedule().steps if isinstance(s, Split) and s.iter == "r"]
    assert splits == [Split("C.local", "r", (12,))]
    with pytest.raises(ScheduleError):
        replay(sch.trace.with_decision(site, (5, 5)), task)


def test_mutators_keep_programs_correct():
    task = matmul_task(6, 8, 12, relu=True)
    rng = random.Random(0)
    base = replay(design_spaces(task)[0].trace, task, seed=0, decisions={}).trace
    kinds = set()
    for _ in range(20):
        child = mutate(base, rng, DEFAULT_MUTATORS)
        kinds.update(k for k in child.decisions if child.decisions.get(k) != base.decisions.get(k))
        try:
            sch = replay(child, task, seed=rng.randrange(100))
        except ScheduleError:
            continue
        run_matmul(task, sch.to_schedule(), relu=True)
    assert len(kinds) >= 3  # several different decisions were mutated
    tiled = MutateTileSize().apply(base, rng)
    (k,) = [k for k in tiled.decisions if tiled.decisions[k] != base.decisions[k]]
    assert np.prod(tiled.decisions[k]) == np.prod(base.decisions[k])


def test_sample_compute_location_offers_inline_root_and_consumer_loops():
    task = matmul_task(6, 8, 12, relu=True)
    from relayish import te
    A, B = task.inputs
    pre = te.compute((6, 12), lambda i, k: A[i, k] * 2.0, name="P")
    r = te.reduce_axis(12, "r")
    out = te.compute((6, 8), lambda i, j: te.sum(pre[i, r] * B[r, j], r), name="C")
    t2 = type(task)("t2", "scaled matmul", None, [A, B], [out], 1.0)
    for decision, loc in ((INLINE, Loc.INLINE), (ROOT, Loc.ROOT), (1, Loc.at("C", "j"))):
        sch = Schedule(t2)
        p = sch.get_block("P")
        sch.compute_at(p, sch.sample_compute_location(p, decision=decision))
        assert sch.state.stage("P").loc == loc


def test_search_strategies_propose_new_distinct_programs():
    task = matmul_task(16, 16, 16)
    for strategy in ("replay", "evolutionary"):
        search = MetaScheduleSearch(task, RandomModel(0), strategy, seed=0, params={"population": 8, "generations": 1})
        first = search.next_batch(6)
        search.update(first, [1e-3 * (k + 1) for k in range(len(first))])
        second = search.next_batch(6)
        keys = [s.to_json() for _, s in first + second]
        assert len(first) == 6 and len(set(keys)) == len(keys)
        assert search.best_traces(1)[0] == first[0][0]


def test_database_round_trip(tmp_path):
    task = matmul_task(16, 16, 16)
    path = str(tmp_path / "ms.db")
    progs = MetaScheduleSearch(task, None, "replay", seed=2).next_batch(4)
    with Database(path) as db:
        wl = db.commit_workload(task)
        assert db.commit_workload(task) == wl and db.workloads() == [wl]
        for (trace, sch), cost in zip(progs, (3e-3, 1e-3, 2e-3)):
            db.commit_tuning_record(TuningRecord(wl, sch, run_secs=(cost, cost * 1.1), trace=trace))
        db.commit_tuning_record(TuningRecord(wl, progs[3][1], error="build failed"))
        assert len(db) == 4
    with Database(path) as db:  # reopened: everything came from the file
        top = db.get_top_k(db.workloads()[0], 2)
    assert [r.cost for r in top] == [1e-3, 2e-3]
    assert [(r.trace, r.schedule) for r in top] == [progs[1], progs[2]]

"""Candidate builds (tuning/build.py, tuning.measure's build phase): a build is reused for an equal lowered
candidate and only for one; equal schedules in a batch are built once; a crash costs the builds that had not
started nothing but a second submission."""
from __future__ import annotations

import pytest

from compiler.default_schedule import default_schedule
from compiler.lower import lower
from compiler.schedule import Annotate, Reorder, Schedule, Split
from tuning import build as candidate_build
from tuning import measure as m
from tuning.pool import WorkerPool

from test_measure import conv_task, pool  # noqa: F401  (the fixtures test_measure.py's tests use too)


@pytest.fixture(autouse=True)
def fresh_driver_builds(monkeypatch):
    """Each test starts with nothing built in this process (and leaves nothing for the next test files)."""
    monkeypatch.setattr(candidate_build, "_BUILDS", type(candidate_build._BUILDS)())


def _identity_reorder(task) -> Schedule:
    """A schedule that differs from the naive one as data but lowers to the same loops: the conv's loops
    reordered into the order they have."""
    leaves = tuple(i.name for i in task.initial_state().stage("conv2d").leaves)
    return Schedule((Reorder("conv2d", leaves),))


def _lowered(task, schedule):
    return lower(schedule.apply(task.initial_state()), m.KERNEL_NAME)


def test_lowered_key_is_equal_exactly_for_equal_loop_ir(conv_task):
    naive, same = _lowered(conv_task, Schedule()), _lowered(conv_task, _identity_reorder(conv_task))
    unrolled = _lowered(conv_task, Schedule((Annotate("conv2d", "rx", "unroll"),)))
    assert str(naive) == str(same) and Schedule().to_json() != _identity_reorder(conv_task).to_json()
    key = candidate_build.lowered_key(conv_task.key, naive)
    assert candidate_build.lowered_key(conv_task.key, same) == key
    assert candidate_build.lowered_key(conv_task.key, unrolled) != key
    assert candidate_build.lowered_key("another task", naive) != key


def test_a_worker_builds_an_equal_lowered_candidate_once(conv_task, monkeypatch):
    """The second of two schedules that lower alike gets the first one's library without emitting or compiling
    anything; a schedule that lowers differently is built."""
    emitted = []
    real = candidate_build.kernel_module_text
    monkeypatch.setattr(candidate_build, "kernel_module_text", lambda f: emitted.append(f) or real(f))
    monkeypatch.setattr(candidate_build, "_LIBRARIES", type(candidate_build._LIBRARIES)())
    spec = m.TaskSpec.of(conv_task)
    naive, same, other = (m._build_job(spec, s.to_json(), 60, None) for s in
                          (Schedule(), _identity_reorder(conv_task), default_schedule(conv_task.initial_state())))
    assert all(b.error is None for b in (naive, same, other)), [b.error for b in (naive, same, other)]
    assert same.lib == naive.lib and same.phases.get("reused") == 1 and "emit_ir_s" not in same.phases
    assert "reused" not in naive.phases and "reused" not in other.phases and other.lib != naive.lib
    assert len(emitted) == 2  # the naive kernel and the default's


def test_a_reused_build_measures_as_its_own(conv_task, pool):
    """Candidates that share a build are each run and checked: same outputs, each its own costs."""
    results = m.measure(conv_task, [Schedule(), _identity_reorder(conv_task)], number=1, repeat=2, executor=pool)
    assert all(r.ok for r in results), [r.error for r in results]
    assert all(len(r.costs) == 2 for r in results)


def test_equal_schedules_in_a_batch_are_built_once(conv_task, pool):
    default = default_schedule(conv_task.initial_state())
    a, b, c = m.build_candidates(conv_task, [default, Schedule(), default], executor=pool)
    assert a.lib is not None and a is c and b is not a


def test_a_schedule_built_by_an_earlier_call_is_not_built_again(conv_task, pool, monkeypatch):
    """The driver keeps what it built: measuring a program again (the tuner's final rounds) reuses its library;
    another schedule, or the same one under a test fault, is built."""
    default = default_schedule(conv_task.initial_state())
    first, = m.build_candidates(conv_task, [default], executor=pool)
    again, other = m.build_candidates(conv_task, [default, Schedule()], executor=pool)
    # a worker's build has its lowering time at least (it may reuse its own library of an earlier test's build)
    assert first.lib is not None and first.build_s > 0 and "lower_s" in first.phases
    assert again.lib == first.lib and again.build_s == 0.0 and again.phases == {"reused": 1}
    assert other.lib is not None and other.build_s > 0 and "lower_s" in other.phases
    faulty, = m._build_all(pool, m.TaskSpec.of(conv_task), [default], 60, {0: "wrong"})
    assert "lower_s" in faulty.phases and faulty.lib != first.lib
    results = m.measure(conv_task, [default], number=1, repeat=1, executor=pool)
    assert results[0].ok and results[0].build_s == 0.0, results[0].error


def test_after_a_build_crash_the_builds_not_started_are_built_in_parallel(conv_task, pool, monkeypatch):
    """A crashing build breaks the pool: only the builds that may have run beside it are retried alone; those
    that had not started go back to the (new) pool together, and every one but the culprit is built."""
    alone = []
    real = m._call_alone
    monkeypatch.setattr(m, "_call_alone", lambda *args: alone.append(args) or real(*args))
    schedules = [Schedule((Split("conv2d", "l", (f,), False),)) for f in range(1, 13)]
    outputs = m._build_all(pool, m.TaskSpec.of(conv_task), schedules, 60, {0: "build_crash"})
    assert "build crashed its worker process" in outputs[0].error
    assert all(o.lib is not None for o in outputs[1:]), [o.error for o in outputs[1:]]
    assert 1 <= len(alone) <= pool.started_at_once < len(schedules) - 1


def test_an_executor_of_unknown_dispatch_retries_every_unfinished_build_alone():
    from tuning.pool import _as_pool
    import concurrent.futures as cf
    import multiprocessing
    ex = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        assert _as_pool(ex).started_at_once is None
        assert WorkerPool(3).started_at_once == 7 and WorkerPool(1, executor_factory=lambda: ex).started_at_once is None
    finally:
        ex.shutdown()

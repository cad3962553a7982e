"""Measurement: candidates built and run in worker processes; crashes, hangs and wrong results become recorded
errors and measuring goes on."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import pickle
import time

import numpy as np
import pytest

from compiler.default_schedule import default_schedule
from compiler.schedule import Schedule, Split
from compiler.task import build_task, workload_key
from relayish.expr import Attrs, Function, TensorType, Var, call
from relayish.interp import evaluate
from tuning.measure import (WorkerPool, check_outputs, function_from_data, function_to_data, measure,
                            random_inputs, reference_outputs)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(max_workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def conv_task():
    """conv2d (padded) + bias + relu, small enough to build in a fraction of a second."""
    x = Var("x", TensorType((1, 8, 10, 10)))
    w = Var("w", TensorType((16, 8, 3, 3)))
    b = Var("b", TensorType((1, 16, 1, 1)))
    y = call("nn.relu", call("add", call("nn.conv2d", x, w, padding=(1, 1, 1, 1)), b))
    return build_task(Function((x, w, b), y, Attrs(Primitive=1)))


def test_function_data_round_trip(conv_task):
    data = pickle.loads(pickle.dumps(function_to_data(conv_task.func)))
    func = function_from_data(data)
    assert func is not conv_task.func and workload_key(func) == conv_task.key
    inputs = random_inputs([(p.type.shape, p.type.dtype) for p in func.params], seed=3)
    np.testing.assert_array_equal(evaluate(func, inputs)[0], evaluate(conv_task.func, inputs)[0])


def test_random_inputs_are_seeded():
    specs = [((2, 3), "float32"), ((4,), "int32")]
    a, b, c = random_inputs(specs, 1), random_inputs(specs, 1), random_inputs(specs, 2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and not np.array_equal(a[0], c[0])
    assert a[1].dtype == np.int32 and a[1].min() >= 0


def test_default_and_naive_schedules_measure_correctly(conv_task, pool):
    default = default_schedule(conv_task.initial_state())
    invalid = Schedule((Split("no_such_stage", "i", (2,)),))
    results = measure(conv_task, [default, Schedule(), invalid], number=2, repeat=3, executor=pool)
    assert len(results) == 3
    for r in results[:2]:
        assert r.ok, r.error
        assert len(r.costs) == 3 and all(0 < c < 1 for c in r.costs) and r.cost == min(r.costs)
        assert r.build_s > 0 and r.run_s > 0
    bad = results[2]
    assert bad.costs is None and bad.cost == float("inf")
    assert bad.error.startswith("build error: ScheduleError") and "no_such_stage" in bad.error


def test_candidates_are_timed_only_once_the_drivers_threads_are_quiet(conv_task, pool, monkeypatch):
    """The reference leaves a thread spinning without the GIL (as OpenBLAS's workers do after a product): no run
    job starts before it has stopped, else the candidate would share its cores with it."""
    import hashlib
    import threading
    import time

    import tuning.measure as m
    spun = {}

    def reference_then_spin(task, seed):
        out = reference_outputs(task, seed)

        def spin():
            hashlib.sha256(bytes(48 << 20)).digest()  # ~0.03-0.3 s of CPU, the GIL released: well inside
            spun["end"] = time.monotonic()  # idle_wait's 1 s limit even on a loaded machine
        spun["thread"] = threading.Thread(target=spin)
        spun["thread"].start()
        return out
    started = []
    real_call_alone = m._call_alone

    def call_alone(pool, what, *args):
        if what == "run":
            started.append(time.monotonic())
        return real_call_alone(pool, what, *args)
    monkeypatch.setattr(m, "reference_outputs", reference_then_spin)
    monkeypatch.setattr(m, "_call_alone", call_alone)
    # the wait is bounded (1 s) so that a process that never quiets cannot stall tuning; on a machine loaded
    # enough to starve the spinning thread past that bound the order would be the bound's, not the wait's
    real_idle_wait = m.idle_wait
    monkeypatch.setattr(m, "idle_wait", lambda gap_s, **kw: real_idle_wait(gap_s, **dict(kw, max_settle_s=120.0)))
    result, = measure(conv_task, [default_schedule(conv_task.initial_state())], number=1, repeat=1, executor=pool)
    spun["thread"].join()
    assert result.ok, result.error
    assert started and started[0] >= spun["end"]


def test_a_candidate_far_slower_than_the_best_is_timed_no_further(conv_task, pool, monkeypatch):
    """give_up_factor: a first call slower than that factor x the best cost known (given, or of an earlier
    candidate) is the candidate's one cost; candidates whose first call is under GIVE_UP_MIN_S are always timed."""
    import tuning.measure as m
    default = default_schedule(conv_task.initial_state())
    fast, = measure(conv_task, [default], number=2, repeat=3, executor=pool, give_up_factor=10, best_cost=1e-12)
    assert fast.ok and len(fast.costs) == 3  # far over 10 x 1e-12 s, but under the floor
    monkeypatch.setattr(m, "GIVE_UP_MIN_S", 0.0)
    timed, gave_up = measure(conv_task, [default, default], number=2, repeat=3, executor=pool, give_up_factor=1e-3)
    assert timed.ok and gave_up.ok and len(timed.costs) == 3 and len(gave_up.costs) == 1
    assert len(measure(conv_task, [default], number=2, repeat=3, executor=pool)[0].costs) == 3  # off by default


def test_crash_hang_and_wrong_result_are_survived(conv_task, pool):
    default = default_schedule(conv_task.initial_state())
    faults = {1: "segfault", 2: "hang", 3: "wrong", 4: "build_crash"}
    results = measure(conv_task, [default] * 6, number=1, repeat=2, timeout_s=3, executor=pool, _faults=faults)
    errors = [r.error for r in results]
    assert results[0].ok and results[5].ok, errors  # measured before and after the faulty ones
    assert "run crashed its worker process" in errors[1]
    assert "run timed out after 3 s" in errors[2]
    assert errors[3].startswith("wrong result: max rel err") and "output 0 of shape (1, 16, 10, 10)" in errors[3]
    assert "build crashed its worker process" in errors[4]
    assert all(r.costs is None for r in results[1:5])
    # the pool was replaced and still works
    again = measure(conv_task, [default], number=1, repeat=1, executor=pool)
    assert again[0].ok, again[0].error


def test_wrong_result_goes_unnoticed_only_without_checking(conv_task, pool):
    default = default_schedule(conv_task.initial_state())
    unchecked = measure(conv_task, [default], number=1, repeat=1, executor=pool, check_correctness=False,
                        _faults={0: "wrong"})
    assert unchecked[0].ok and unchecked[0].costs


def test_check_outputs_against_reference(conv_task):
    ref = reference_outputs(conv_task, seed=0)
    assert reference_outputs(conv_task, seed=0) is ref  # cached
    assert check_outputs([ref[0].copy()], ref, 1e-4) is None
    off = ref[0].copy()
    off.flat[7] += 1e-2 * np.max(np.abs(off))
    assert check_outputs([off], ref, 1e-4).startswith("wrong result: max rel err 0.01")
    unwritten = ref[0].copy()
    unwritten.flat[0] = np.nan  # outputs start as NaN: an element never written is wrong
    assert "wrong result" in check_outputs([unwritten], ref, 1e-4)


def test_plain_executor_is_used_as_given(conv_task):
    default = default_schedule(conv_task.initial_state())
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        results = measure(conv_task, [default], number=1, repeat=1, executor=ex)
    assert results[0].ok, results[0].error


def test_bad_arguments(conv_task):
    with pytest.raises(ValueError, match="repeat"):
        measure(conv_task, [], repeat=0)
    with pytest.raises(ValueError, match="unknown fault"):
        measure(conv_task, [Schedule()], _faults={0: "meteor"})
    with pytest.raises(TypeError, match="executor"):
        measure(conv_task, [Schedule()], executor="local")


def test_cache_flush_times_each_call_alone_after_evicting_the_caches(conv_task, pool, monkeypatch):
    from tuning import measure as m

    assert m.last_level_cache_bytes() >= 1 << 20
    events = []
    monkeypatch.setattr(m, "evict_caches", lambda: events.append("evict"))
    costs = m._timed_calls(lambda: events.append("call"), (), number=2, repeat=3, flush=True,
                           wake=lambda: events.append("wake"), jiffies=None)  # no retakes on a busy machine
    assert len(costs) == 3 and events == ["evict", "wake", "call"] * 6
    events.clear()
    m._timed_calls(lambda: events.append("call"), (), number=2, repeat=3, flush=False, jiffies=None)
    assert events == ["call"] * 6
    default = default_schedule(conv_task.initial_state())
    results = measure(conv_task, [default], number=2, repeat=2, executor=pool, flush_cache=True)
    assert results[0].ok and len(results[0].costs) == 2, results[0].error


def test_flushed_calls_read_the_activations_back_before_each_call(monkeypatch):
    """In a model a kernel's activations were just written by its producer and its workspace used by the kernels
    before it; only its weights come from memory: each flushed call reads the warm arrays back after the flush."""
    import tuning.measure as measure_module
    events = []

    class Warm:
        def sum(self):
            events.append("warm")
    monkeypatch.setattr(measure_module, "evict_caches", lambda: events.append("evict"))
    measure_module._timed_calls(lambda: events.append("call"), [], number=2, repeat=1, flush=True,
                                wake=lambda: events.append("wake"), warm=[Warm()])
    assert events == ["evict", "warm", "wake", "call"] * 2


def test_a_model_task_knows_which_inputs_are_weights():
    from compiler.passes import PassContext, run_pipeline
    from compiler.task import extract_tasks
    from relayish import Constant, Function, IRModule, TensorType, Var, call
    x = Var("x", TensorType((1, 16, 6, 6)))
    w = Constant(np.ones((16, 16, 3, 3), np.float32))
    fused = run_pipeline(IRModule(Function([x], call("nn.relu", call("nn.conv2d", x, w, padding=(1, 1, 1, 1))))),
                         PassContext(vector_width=8, winograd=False))
    conv, = [t for t in extract_tasks(fused) if t.ops[0] == "nn.conv2d_nchwc"]
    assert conv.constant_inputs[:2] == (False, True) and conv.activation_inputs()[0] == 0
    assert 1 not in conv.activation_inputs()


def test_a_worker_compiles_the_thread_pool_once_and_a_repeated_program_not_again(conv_task, monkeypatch):
    """A candidate's build compiles its kernel's module only: the thread pool's object, the same for every
    candidate, is compiled by the worker's first build and linked into every later one; an IR text compiled
    before (two schedules that lower alike) is not compiled again."""
    from compiler.codegen import library
    from tuning.measure import TaskSpec, _build_job
    compiled = []
    real = library._compile_text_here
    monkeypatch.setattr(library, "_compile_text_here", lambda text, opt, *rest: compiled.append(text) or real(text, opt, *rest))
    monkeypatch.setattr(library, "_OBJECTS", type(library._OBJECTS)())  # this process has compiled nothing
    spec = TaskSpec.of(conv_task)
    default = default_schedule(conv_task.initial_state())
    builds = [_build_job(spec, s.to_json(), 60, None) for s in (default, Schedule(), default)]
    assert all(b.error is None and b.lib for b in builds), [b.error for b in builds]
    assert len(compiled) == 3  # the pool, the default's kernel, the naive kernel; the default's again: remembered
    t = library.host_target()
    assert compiled.count(library._thread_pool_text(library._arch(), t["features"], t["triple"])) == 1


def test_a_repeat_disturbed_by_other_processes_is_taken_again():
    """_timed_calls reads the machine's busy jiffies around each repeat: where other processes took the CPU (a
    neighbour: here the fake clock says so for the first attempt of the second repeat) the repeat is taken again
    and its least reading kept; an undisturbed repeat runs once; a machine that stays busy gives up after
    MAX_RETAKES retakes."""
    from tuning.measure import MAX_RETAKES, _timed_calls
    calls = []
    slow = {1}  # the call numbers (0-based) that a neighbour slowed down

    def kernel():
        calls.append(None)
        time.sleep(0.02 if len(calls) - 1 in slow else 0.002)

    def jiffies_with(disturbed):  # (machine busy, own) per read; attempt k of repeat r is reads 2k, 2k + 1
        reads = iter(disturbed)
        state = {"busy": 0}

        def jiffies():
            state["busy"] += next(reads)
            return state["busy"], 0
        return jiffies

    # repeat 0: quiet; repeat 1: a neighbour took 5 jiffies during its first attempt, then quiet
    costs = _timed_calls(kernel, (), number=1, repeat=2, flush=False, jiffies=jiffies_with([0, 0, 0, 5, 0, 0]))
    assert len(calls) == 3 and costs[0] < 0.01 and costs[1] < 0.01  # the slow call (call 1) was taken again
    calls.clear()
    slow.clear()
    always_busy = jiffies_with([0, 9] * (2 * (MAX_RETAKES + 1)))
    costs = _timed_calls(kernel, (), number=1, repeat=2, flush=False, jiffies=always_busy)
    assert len(calls) == 2 * (MAX_RETAKES + 1) and len(costs) == 2


def test_a_task_whose_outputs_overflow_to_infinity_measures(pool):
    """BERT's attention mask, (1 - float(m)) * float32 min: on the tuner's random integer inputs (0-3) it overflows
    to +-inf, in the kernel and in the numpy reference alike; every program of the task, the default included,
    was rejected as a wrong result (inf - inf) before infinities that agree counted as agreeing."""
    from relayish.expr import Constant
    m = Var("m", TensorType((1, 16), "int64"))
    lowest = Constant(np.array(np.finfo(np.float32).min, np.float32))
    y = call("multiply", call("subtract", Constant(np.array(1.0, np.float32)), call("cast", m, dtype="float32")),
             lowest)
    task = build_task(Function((m,), y, Attrs(Primitive=1)))
    ref = reference_outputs(task, seed=0)[0]
    assert np.isinf(ref).any() and np.isfinite(ref).any()  # the case this test is about
    result, = measure(task, [default_schedule(task.initial_state())], number=1, repeat=1, executor=pool)
    assert result.ok, result.error


def test_a_candidate_too_large_once_unrolled_is_refused_before_llvm(conv_task, pool):
    """Random annotation can unroll a register tile of 49 x 8 x 8 vector FMAs: LLVM then outlasts the build timeout,
    and the kill breaks the pool for every build in flight (each retried alone: ~100 s for one round of a
    template-free run). Such a candidate is refused with an error that says why, as fast as it lowers."""
    from compiler.schedule import Annotate
    unrolled = Schedule(tuple(Annotate("conv2d", it, "unroll") for it in ("k", "l", "rc", "ry", "rx")))  # 7,200
    modest = Schedule((Annotate("conv2d", "rx", "unroll"), Annotate("conv2d", "ry", "unroll")))  # 9 per store
    t0 = time.perf_counter()
    big, small = measure(conv_task, [unrolled, modest], number=1, repeat=1, executor=pool)
    assert big.error is not None and big.error.startswith("build refused: ") and "more than 1024" in big.error
    assert int(big.error.split()[2]) >= 7200, big.error  # 10 x 10 x 8 x 3 x 3 updates, and the stores around them
    assert big.build_s < 5.0 and time.perf_counter() - t0 < 30.0
    assert small.ok, small.error

"""A compiled Module called from many threads, next to other modules, and after fork(): always the right outputs.

The model is small but real (compiled by compile_model, run with 2 native threads so that its parallel loops use the
thread pool), and every output of a concurrent call is compared with the single-threaded result for the same input.
"""
from __future__ import annotations

import gc
import os
import pickle
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from runtime.workspaces import WorkspacePool

N_THREADS, N_RUNS = 8, 50


def small_model(channels: int = 8, classes: int = 10, seed: int = 0):
    """x [1, C, 16, 16], b [1, classes] -> logits = Gemm(GAP(Conv1x1(MaxPool(Relu(Conv3x3(x)))))) + b and
    pooled = the MaxPool output: two inputs, two outputs, parallel loops and a workspace."""
    rng = np.random.default_rng(seed)

    def const(name, *shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, (rng.standard_normal(shape) * 0.2).astype(
            np.float32).ravel())
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["pooled", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 16, 16]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, classes])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 16, 8, 8])],
        [const("w1", 16, channels, 3, 3), const("b1", 16), const("w2", 32, 16, 1, 1), const("w3", classes, 32)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what the installed onnxruntime reads
    return model


def feeds(sess, count: int, seed: int = 0) -> list[dict]:
    return [sess.random_inputs(seed=seed + i) for i in range(count)]


@pytest.fixture(scope="module")
def sess():
    s = compile_model(small_model(), num_threads=2)
    assert s.num_threads == 2
    return s


@pytest.fixture(scope="module")
def other_sess():
    return compile_model(small_model(channels=4, classes=3, seed=1), num_threads=2)


def run_threads(target, n: int) -> None:
    """Run target(i) on n threads at once; re-raise the first failure."""
    errors = []

    def wrapped(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread is still running after 120 s (a deadlock?)"
    if errors:
        raise errors[0]


def misaligned(a: np.ndarray) -> np.ndarray:
    """a's values at an address 4 bytes past a 64-byte boundary: run copies them into its slot's aligned buffer."""
    raw = np.empty(a.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + 4
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def check_concurrent_runs(sess, n_threads: int = N_THREADS, n_runs: int = N_RUNS, layout=lambda a: a) -> None:
    inputs = [{k: layout(v) for k, v in f.items()} for f in feeds(sess, n_threads * n_runs)]
    want = [sess.run(None, f) for f in inputs]  # single-threaded references

    def worker(t):
        for r in range(n_runs):
            i = t * n_runs + r
            for got, ref in zip(sess.run(None, inputs[i]), want[i]):
                np.testing.assert_array_equal(got, ref, err_msg=f"thread {t}, run {r}")
    run_threads(worker, n_threads)


# ---- one module, many threads ----------------------------------------------------------------------------------
@pytest.mark.parametrize("max_runs", [1, 2, N_THREADS])
def test_concurrent_runs_give_the_single_threaded_results(sess, max_runs):
    default = sess.max_concurrent_runs
    sess.max_concurrent_runs = max_runs
    try:
        check_concurrent_runs(sess)
        assert 1 <= sess._workspaces.created <= max_runs
    finally:
        sess.max_concurrent_runs = default


def test_concurrent_runs_of_misaligned_inputs(sess):
    """Each call's misaligned inputs are copied into its own slot's buffers, reused from call to call."""
    check_concurrent_runs(sess, layout=misaligned)


def test_profile_concurrent_with_run(sess):
    inputs = feeds(sess, 20, seed=1000)
    want = [sess.run(None, f) for f in inputs]

    def worker(t):
        if t == 0:
            for _ in range(5):
                rows = sess.profile(repeat=5, inputs=inputs[0])
                assert len(rows) == len(sess.kernels) and all(r["median_ms"] > 0 for r in rows)
        else:
            for i, f in enumerate(inputs):
                for got, ref in zip(sess.run(None, f), want[i]):
                    np.testing.assert_array_equal(got, ref)
    run_threads(worker, 4)


def test_max_concurrent_runs_validates(sess):
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="limit of concurrent runs must be an integer >= 1"):
            sess.max_concurrent_runs = bad


# ---- the pool on its own ---------------------------------------------------------------------------------------
def test_pool_blocks_at_its_limit_and_reuses_slots():
    pool = WorkspacePool(128, 2, 1, limit=2)
    with pool.slot() as a, pool.slot() as b:
        assert a is not b and a.workspace_ptr != b.workspace_ptr and a.workspace_ptr % 64 == 0
        got = []
        waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive() and not got  # a third call waits: the limit is 2
    waiter.join(5)
    assert got and got[0] in (a, b) and pool.created == 2  # it got a released slot, nothing new was allocated
    pool.release(got[0])


def test_lowering_the_limit_frees_slots():
    pool = WorkspacePool(64, 1, 1, limit=3)
    with pool.slot(), pool.slot():
        with pool.slot():
            pass
        assert pool.created == 3
        pool.limit = 1  # one free slot dropped now, one held slot dropped at release
        assert pool.created == 2
    assert pool.created == 1


def test_a_failed_allocation_gives_its_place_back(monkeypatch):
    pool = WorkspacePool(64, 1, 1, limit=1)
    monkeypatch.setattr("runtime.workspaces.aligned_empty", lambda *a: (_ for _ in ()).throw(MemoryError("test")))
    with pytest.raises(MemoryError):
        with pool.slot():
            pass
    monkeypatch.undo()
    assert pool.created == 0
    with pool.slot() as s:  # no hang: the failed call did not keep the only place
        assert s.workspace.nbytes == 64


# ---- several modules -------------------------------------------------------------------------------------------
def test_two_modules_run_at_once(sess, other_sess):
    def worker(t):
        m = sess if t % 2 == 0 else other_sess
        inputs = feeds(m, 30, seed=100 * t)
        want = [m.run(None, f) for f in inputs]
        for f, ref in zip(inputs * 2, want * 2):
            for got, r in zip(m.run(None, f), ref):
                np.testing.assert_array_equal(got, r)
    run_threads(worker, 4)


def test_a_module_collected_while_another_runs(sess):
    model = small_model(channels=4, classes=3, seed=2)
    stop = threading.Event()
    inputs = feeds(sess, 10, seed=500)
    want = [sess.run(None, f) for f in inputs]

    def runner(_):
        while not stop.is_set():
            for f, ref in zip(inputs, want):
                for got, r in zip(sess.run(None, f), ref):
                    np.testing.assert_array_equal(got, r)

    thread_errors = []
    t = threading.Thread(target=lambda: _capture(runner, thread_errors))
    t.start()
    try:
        for _ in range(3):
            doomed = compile_model(model, num_threads=2)
            doomed.run(None, doomed.random_inputs())
            lib_dir = os.path.dirname(doomed.lib_path)
            del doomed
            gc.collect()
            assert not os.path.exists(lib_dir)  # collected: its temporary directory is gone
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive() and not thread_errors, thread_errors


def _capture(fn, errors):
    try:
        fn(0)
    except BaseException as e:  # noqa: BLE001 - reported by the caller
        errors.append(e)


# ---- fork ------------------------------------------------------------------------------------------------------
def run_in_fork(fn, timeout: float = 60.0):
    """fn() in a forked child; returns what it returned (pickled through a pipe). Fails on a timeout (the child is
    killed), a signal or an exception in the child."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_fd)
            payload = pickle.dumps(fn())
        except BaseException as e:  # noqa: BLE001 - sent to the parent
            payload, code = pickle.dumps(repr(e)), 1
        with os.fdopen(write_fd, "wb") as w:
            w.write(payload)
        os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child hung for {timeout} s")
        time.sleep(0.05)
    with os.fdopen(read_fd, "rb") as r:
        data = r.read()
    assert os.WIFEXITED(status), f"the child died with signal {os.WTERMSIG(status)}"
    result = pickle.loads(data)
    assert os.WEXITSTATUS(status) == 0, f"the child failed: {result}"
    return result


def test_a_module_used_after_fork(sess):
    inputs = feeds(sess, 5, seed=700)
    want = [sess.run(None, f) for f in inputs]  # the parent's pool has started its worker
    got = run_in_fork(lambda: [sess.run(None, f) for f in inputs] + [sess.num_threads])
    assert got[-1] == 2
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


def test_fork_while_other_threads_run(sess):
    """Fork while other threads are inside native calls (holding workspaces and the native pool's busy flag):
    the child has none of those threads and must neither wait for them nor for the slots they held."""
    default = sess.max_concurrent_runs
    sess.max_concurrent_runs = 1  # the worst case: the only slot is held by a parent thread at fork time
    inputs = feeds(sess, 4, seed=900)
    want = [sess.run(None, f) for f in inputs]
    stop = threading.Event()

    def runner(_):
        while not stop.is_set():
            sess.run(None, inputs[0])
    errors = []
    threads = [threading.Thread(target=lambda: _capture(runner, errors)) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.05)
        for _ in range(3):
            got = run_in_fork(lambda: [sess.run(None, f) for f in inputs], timeout=30)
            for g, w in zip(got, want):
                for a, b in zip(g, w):
                    np.testing.assert_array_equal(a, b)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        sess.max_concurrent_runs = default
    assert not errors, errors


def test_default_concurrency_is_one_per_core_within_physical_memory(monkeypatch):
    from runtime import module as runtime_module
    meta = {"workspace_bytes": 1000, "params_bytes": 500}
    monkeypatch.setattr(runtime_module, "default_num_threads", lambda: 4)
    monkeypatch.setattr(runtime_module, "physical_memory_bytes", lambda: 10**6)
    assert runtime_module.default_max_concurrent_runs(meta) == 4
    monkeypatch.setattr(runtime_module, "physical_memory_bytes", lambda: 500 + 2500)  # room for 2 workspaces
    assert runtime_module.default_max_concurrent_runs(meta) == 2
    monkeypatch.setattr(runtime_module, "physical_memory_bytes", lambda: 1200)  # not even one: check_memory refuses
    assert runtime_module.default_max_concurrent_runs(meta) == 1
    assert runtime_module.default_max_concurrent_runs(dict(meta, workspace_bytes=0)) == 4

"""Measurement on a Dask cluster (tuning/dask_measure.py): a LocalCluster of 2 worker processes builds and runs
candidates; a worker that dies in a build or in a run (a segfaulting candidate, or killed from outside during a
tuning round) becomes that candidate's recorded error and tuning goes on."""
from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import onnx
import pytest

distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install -e '.[dask]')")

from compiler.default_schedule import default_schedule  # noqa: E402
from tuning.dask_measure import DaskMeasurer, _run_all, close_client, local_cluster_client  # noqa: E402
from tuning.measure import measure  # noqa: E402
from tuning.tune import model_tasks, tune_model  # noqa: E402

from test_tune import conv_pool  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def client():
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    c = local_cluster_client(2)  # (the workers import this worktree, not an installed copy)
    try:
        yield c
    finally:
        close_client(c)


def test_worker_deaths_in_builds_and_runs_are_candidate_errors(client):
    task = model_tasks(conv_pool(), layout="NCHW")[0]
    default = default_schedule(task.initial_state())
    arrived = []
    results = measure(task, [default, default, default, default], number=1, repeat=2, timeout_s=20,
                      executor=DaskMeasurer(client), _faults={1: "build_crash", 2: "segfault"},
                      on_result=lambda i, r: arrived.append(i))
    errors = [r.error for r in results]
    assert results[0].ok and results[3].ok, errors
    assert errors[1].startswith("build failed: its Dask worker died"), errors[1]
    assert errors[2].startswith("run failed: its Dask worker died"), errors[2]
    assert sorted(arrived) == [0, 1, 2, 3]
    again = measure(task, [default], number=1, repeat=1, executor=DaskMeasurer(client))  # still measures
    with pytest.raises(TypeError, match="measures through tuning.dask_measure.DaskMeasurer"):
        measure(task, [default], number=1, repeat=1, executor=client)  # measure.py knows nothing of Dask
    assert again[0].ok, again[0].error


def test_tuning_goes_on_when_a_worker_is_killed_during_a_round(client, tmp_path):
    path, db = str(tmp_path / "m.onnx"), str(tmp_path / "r.db")
    onnx.save(conv_pool(), path)
    client.wait_for_workers(2, timeout=30)  # (the first test's deaths restarted some)
    killed = []

    def kill_one_worker_once_records_appear():
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not killed:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                    started = conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] > 0
            except sqlite3.OperationalError:
                started = False
            if started:  # a worker process alive now (a slow build's watchdog may have ended another one), found
                for nanny in list(client.cluster.workers.values()):  # without asking the cluster (no waiting)
                    process = getattr(nanny, "process", None)
                    pid = getattr(process, "pid", None)
                    if pid is None:
                        continue
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        break
                    except ProcessLookupError:
                        continue
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_worker_once_records_appear)
    killer.start()
    result = tune_model(path, db, trials=12, layout="NCHW", progress=False, check_model=False, executor=client,
                        params={"batch_size": 4, "final_remeasure": 0, "timeout_s": 6})
    killer.join(timeout=60)
    assert killed and result.trials == 12
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 12
        ok = conn.execute("SELECT COUNT(*) FROM records WHERE error IS NULL").fetchone()[0]
    assert ok >= 6  # a killed worker costs at most the jobs it held


def test_a_job_the_cluster_does_not_finish_in_time_is_an_error_not_a_hang(client):
    outcomes = {}
    t0 = time.monotonic()
    _run_all(client, time.sleep, {0: (0.0,), 1: (8.0,)}, "run", lambda i, v, e: outcomes.setdefault(i, e),
             patience_s=3.0, retry_patience_s=3.0)
    assert time.monotonic() - t0 < 7.0
    assert outcomes[0] is None
    assert outcomes[1].startswith("run not done: the Dask cluster did not finish it within 3 s"), outcomes[1]

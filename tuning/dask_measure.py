"""Measurement on a dask.distributed cluster (the optional extra `pip install -e '.[dask]'`).

    client = local_cluster_client(2)                 # or connect_client("tcp://scheduler:8786")
    tune_model("resnet18.onnx", records="r.db", trials=2000, executor=client)

measure(task, schedules, executor=DaskMeasurer(client)) comes here (tune_model wraps a Client itself). The protocol of tuning/measure.py, spread over machines:
  1. every candidate is built on some worker, all at once (builds share nothing);
  2. then every built candidate is run on some worker, holding a cluster-wide lock named after the worker's host
     (`relayish-measure-<hostname>`) for the whole run: two measurements never share a machine, while machines
     measure in parallel. The built library travels as bytes, so a run may land on another host of the target;
  3. results go to `on_result` as they arrive (tune_model writes the record at once, in the driver).
A worker that dies in a build or a run (a segfault, the job's watchdog, a killed machine) fails that job with
dask's KilledWorker or a lost connection: the candidate gets that error and measuring goes on. How many deaths a
job may cause before it fails is the scheduler's `distributed.scheduler.allowed-failures`; `local_cluster_client`
sets it to 0 (the first death is the candidate's error), a cluster of your own keeps its setting. A lock whose
holder died is freed by the scheduler after its lease timeout (`distributed.scheduler.locks.lease-timeout`).
Nothing waits on the cluster without a deadline: a stage of n jobs gets n x (timeout_s + GRACE_S) + CLUSTER_SLACK_S
(every job one after another, each as long as its watchdog allows), a run waits for its host's lock no longer than
that, and a job the cluster has not finished by then gets a "not done" error instead of hanging the tuner.

The workers must import this project (the same version) and run one job per process (threads_per_worker=1):
LLVM builds and the timed kernels must not share a process with another job.
"""
from __future__ import annotations

import socket

from runtime import default_num_threads

from .measure import (GRACE_S, BuildOutput, MeasureResult, RunOutput, TaskSpec, _build_job, _run_job,
                      reference_outputs, run_result, settle)

LOCK_PREFIX = "relayish-measure-"
CLUSTER_SLACK_S = 60.0  # beyond the jobs' own time: scheduling, moving libraries, restarting a dead worker
LOCAL_CLUSTER_CONFIG = {
    "distributed.scheduler.allowed-failures": 0,  # a worker that dies fails the job it ran: the candidate's error
    "distributed.scheduler.locks.lease-timeout": "5s",  # a dead run's host lock is freed within seconds
    "distributed.scheduler.locks.lease-validation-interval": "1s",
}


def _require_distributed():
    try:
        import distributed
    except ImportError as e:
        raise RuntimeError("measuring on a Dask cluster needs dask.distributed: pip install -e '.[dask]'") from e
    return distributed


def local_cluster_client(n_workers: int):
    """A Client of a new LocalCluster of n_workers worker processes, one thread each, on this machine (with
    LOCAL_CLUSTER_CONFIG, which stays set in this process). Close the client and its cluster with close_client."""
    distributed = _require_distributed()
    import dask

    if n_workers < 1:
        raise ValueError(f"a local Dask cluster needs at least one worker, got {n_workers}")
    # set for good in this process, not for the block: its scheduler reads the lease timeout at every check
    dask.config.set(LOCAL_CLUSTER_CONFIG)
    cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    return distributed.Client(cluster)


def connect_client(address: str):
    """A Client of the running dask.distributed scheduler at address (e.g. tcp://host:8786)."""
    distributed = _require_distributed()
    try:
        return distributed.Client(address, timeout="10s")
    except OSError as e:
        raise RuntimeError(f"cannot reach the Dask scheduler at {address}: {e}") from None


def close_client(client, timeout_s: float = 30.0) -> None:
    """Close a client and, if it made one (local_cluster_client), its cluster, each within timeout_s."""
    cluster = client.cluster
    client.close(timeout=timeout_s)
    if cluster is not None:
        cluster.close(timeout=timeout_s)


def _locked_run_job(build: BuildOutput, number: int, repeat: int, threads: int, seed: int, timeout_s: float,
                    want_outputs: bool, flush: bool, warm: tuple, lock_wait_s: float):
    """Worker: run the candidate holding this host's measurement lock (threads 0: the worker's own core count),
    waiting at most lock_wait_s for it."""
    from distributed import Lock

    lock = Lock(LOCK_PREFIX + socket.gethostname())
    if not lock.acquire(timeout=lock_wait_s):
        return RunOutput(None, None, f"run not done: this host's measurement lock stayed taken for {lock_wait_s:.0f} s",
                         lock_wait_s)
    try:
        return _run_job(build, number, repeat, threads or default_num_threads(), seed, timeout_s, want_outputs,
                        flush, warm)
    finally:
        lock.release()


def _died(what: str, e: BaseException) -> str:
    return f"{what} failed: its Dask worker died or was lost ({type(e).__name__}: {e})"


def _stage_patience(n_jobs: int, timeout_s: float) -> float:
    """How long a stage of n_jobs may take: all of them one after another, each for as long as its watchdog
    and the grace after it allow, plus CLUSTER_SLACK_S."""
    return n_jobs * (timeout_s + GRACE_S) + CLUSTER_SLACK_S


def _run_all(client, fn, jobs: dict, what: str, done, patience_s: float, retry_patience_s: float) -> None:
    """Submit fn(*jobs[i]) for every i at once; done(i, value, error) as each finishes. With allowed-failures 0
    the death of a worker fails every job it held: those are retried one at a time, so that only a job that
    kills its worker again gets the error. A job not finished within patience_s of the stage's start, or a retry
    within retry_patience_s of its own, is cancelled and gets a "not done" error."""
    from distributed import as_completed

    futures = {client.submit(fn, *args, pure=False): i for i, args in jobs.items()}
    lost, finished = [], set()
    try:
        for future in as_completed(futures, timeout=patience_s):
            finished.add(future)
            try:
                value = future.result()
            except Exception:  # KilledWorker, CommClosedError...: this job or another on its worker killed it
                lost.append(futures[future])
                continue
            finally:
                future.release()  # else the cluster keeps the result, and recomputes it if its worker dies
            done(futures[future], value, None)
    except TimeoutError:
        late = [f for f in futures if f not in finished]
        client.cancel(late)
        for f in late:
            done(futures[f], None, f"{what} not done: the Dask cluster did not finish it within {patience_s:.0f} s")
    for i in sorted(lost):
        future = client.submit(fn, *jobs[i], pure=False)
        try:
            done(i, future.result(timeout=retry_patience_s), None)
        except TimeoutError:
            client.cancel([future])
            done(i, None, f"{what} not done: the Dask cluster did not finish its retry in time")
        except Exception as e:
            done(i, None, _died(what, e))


class DaskMeasurer:
    """The measurer of a dask.distributed Client: tuning.measure.measure delegates to measure_candidates (the
    same arguments as measure_on_dask but the client), so that measure.py needs nothing of this module."""

    def __init__(self, client):
        self.client = client

    def measure_candidates(self, task, schedules, **options) -> list[MeasureResult]:
        return measure_on_dask(self.client, task, schedules, **options)

    def __repr__(self):
        return f"DaskMeasurer({self.client!r})"


def measure_on_dask(client, task, schedules, *, number, repeat, timeout_s, check, num_threads, seed, tolerance,
                    flush_cache, on_result, faults, warm=()) -> list[MeasureResult]:
    """tuning.measure.measure on a dask.distributed Client (see the module docstring); same arguments."""
    spec = TaskSpec.of(task)
    results: list = [None] * len(schedules)
    built = {}

    def build_done(i, b, error):
        b = b or BuildOutput(None, None, 0, 0, error, 0.0)
        if b.lib is not None:
            built[i] = b
            return
        results[i] = MeasureResult(None, b.error, b.build_s, 0.0)
        on_result(i, results[i])

    _run_all(client, _build_job, {i: (spec, s.to_json(), timeout_s, faults.get(i)) for i, s in enumerate(schedules)},
             "build", build_done, _stage_patience(len(schedules), timeout_s), _stage_patience(1, timeout_s))
    reference = reference_outputs(task, seed) if check and built else None
    settle()  # a LocalCluster's workers share this host

    def run_done(i, run, error):
        results[i] = run_result(built[i], run, error, reference, tolerance)
        on_result(i, results[i])

    patience = _stage_patience(len(built), timeout_s)
    _run_all(client, _locked_run_job, {i: (b, number, repeat, num_threads or 0, seed, timeout_s, check, flush_cache,
                                           warm, patience) for i, b in sorted(built.items())}, "run", run_done,
             patience, _stage_patience(1, timeout_s))
    return results

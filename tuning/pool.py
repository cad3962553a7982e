"""The worker processes that measure() builds and runs candidates in.

    with WorkerPool(max_workers=2) as pool:   # or measure(..., executor=None): one default pool per process
        measure(task, schedules, executor=pool)

A WorkerPool wraps a concurrent.futures executor whose workers are processes (spawned, never forked: the parent may
hold LLVM state, threads and locks). measure() replaces it when a worker dies or hangs (restart) and recycles it
after RECYCLE_AFTER_RUNS runs: every run leaves a loaded library and its idle threads in a worker for good. An
executor given by the caller (a distributed engine's) is used as is and cannot be replaced (_FixedExecutor).
"""
from __future__ import annotations

import atexit
import concurrent.futures as cf
import concurrent.futures.process  # noqa: F401  (cf.process.EXTRA_QUEUED_CALLS)
import math
import multiprocessing
import os

from runtime import default_num_threads

RECYCLE_AFTER_RUNS = 256  # every run leaves a loaded library (never unloaded) and its idle threads in a worker


def _noop() -> int:
    return os.getpid()


class WorkerPool:
    """The worker processes measure() uses: a spawn-context ProcessPoolExecutor, replaced when a worker dies or
    hangs, and recycled after RECYCLE_AFTER_RUNS runs (each run leaves a library loaded in a worker for good).

    executor_factory: a zero-argument callable returning a fresh concurrent.futures.Executor whose workers are
    processes (e.g. a distributed engine's); default: ProcessPoolExecutor(max_workers, spawn). Use as a context
    manager, or call shutdown()."""

    def __init__(self, max_workers: int | None = None, executor_factory=None,
                 recycle_after: int = RECYCLE_AFTER_RUNS):
        self.max_workers = max_workers or default_num_threads()
        self._factory = executor_factory or self._spawn_pool
        self.recycle_after = recycle_after
        self._executor = None
        self.runs = 0  # run jobs since the executor was made
        self.restarts = 0

    def _spawn_pool(self) -> cf.Executor:
        # spawn, not fork: the parent may hold LLVM state, threads (a thread pool of a loaded model) and locks
        return cf.ProcessPoolExecutor(self.max_workers, mp_context=multiprocessing.get_context("spawn"))

    @property
    def executor(self) -> cf.Executor:
        if self._executor is None:
            self._executor = self._factory()
            self._warm()
        return self._executor

    def _warm(self) -> None:
        """Start every worker (and its imports) now, so that no job's time includes a process start."""
        futures = [self._executor.submit(_noop) for _ in range(self.max_workers)]
        for f in futures:
            f.result()

    @property
    def started_at_once(self) -> int | None:
        """At most how many of the unfinished jobs, the first ones in submission order, may have started while the
        ones after them wait, None when unknown: a ProcessPoolExecutor hands jobs to its workers in submission order
        through a queue of max_workers + EXTRA_QUEUED_CALLS, and each worker runs one; an executor from a caller's
        factory may do otherwise."""
        if self._factory != self._spawn_pool:
            return None
        return 2 * self.max_workers + getattr(cf.process, "EXTRA_QUEUED_CALLS", 1)

    def submit(self, fn, *args) -> cf.Future:
        return self.executor.submit(fn, *args)

    def restart(self, kill: bool = False) -> None:
        """Replace the executor. kill: first kill its processes (a worker is stuck: shutdown would wait for it)."""
        old, self._executor = self._executor, None
        self.runs = 0
        self.restarts += 1
        if old is not None:
            if kill:
                # ProcessPoolExecutor offers no public way to stop a running job: kill its processes.
                for proc in list((getattr(old, "_processes", None) or {}).values()):
                    proc.kill()
            old.shutdown(wait=not kill, cancel_futures=True)

    def recycle_if_due(self) -> None:
        if self.runs >= self.recycle_after:
            self.restart()

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


class _FixedExecutor(WorkerPool):
    """An Executor given by the caller: used as is; it cannot be replaced, so after a crash that breaks it every
    later job fails with an error (give a WorkerPool with an executor_factory to survive crashes)."""

    def __init__(self, executor: cf.Executor):
        super().__init__(max_workers=1, executor_factory=lambda: executor, recycle_after=math.inf)
        self._executor = executor

    def restart(self, kill: bool = False) -> None:
        self.restarts += 1

    @property
    def started_at_once(self) -> int | None:
        return None


_DEFAULT_POOL: WorkerPool | None = None


def default_pool() -> WorkerPool:
    """The WorkerPool measure() uses when given no executor (one per process, shut down at exit)."""
    global _DEFAULT_POOL
    if _DEFAULT_POOL is None:
        _DEFAULT_POOL = WorkerPool()
        atexit.register(_DEFAULT_POOL.shutdown)
    return _DEFAULT_POOL


def _as_pool(executor) -> WorkerPool:
    if executor is None:
        return default_pool()
    if isinstance(executor, WorkerPool):
        return executor
    if isinstance(executor, cf.ThreadPoolExecutor):  # a crashing or hanging kernel would take this process down
        raise TypeError("measure needs worker processes: a ThreadPoolExecutor offers no isolation")
    if isinstance(executor, cf.Executor):
        return _FixedExecutor(executor)
    raise TypeError(f"executor must be a WorkerPool, a concurrent.futures.Executor or None, "
                    f"got {type(executor).__name__}")

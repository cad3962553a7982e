"""Parallel codegen: LLVM modules optimized and compiled to object code in worker processes.

`compile_texts(texts, target, opt_level)` takes an iterable of LLVM IR texts and returns their object codes in
order. Texts are handed to workers as soon as the iterable yields them, so the caller's Python (emitting the next
kernel's IR) overlaps with LLVM optimizing the previous ones. The workers are objworker.py processes, started on
first use and kept for the life of this process (one pool per process: a forked child starts its own rather than
share its parent's pipes). A worker that dies or cannot start is replaced by compiling in this process; an LLVM
error in a module is raised here as RuntimeError with LLVM's message.

RELAYISH_CODEGEN_WORKERS=n sets the number of workers (0: everything in this process); the default is the number
of cores this process may run on, at most 4, and none on a single core.
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from . import objworker

_SCRIPT = os.path.abspath(objworker.__file__)
_POOLS: dict = {}
_POOL_LOCK = threading.Lock()


def default_workers() -> int:
    env = os.environ.get("RELAYISH_CODEGEN_WORKERS")
    if env is not None:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(f"RELAYISH_CODEGEN_WORKERS must be an integer, got {env!r}") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return 0 if cores < 2 else min(cores, 4)


class _Worker:
    """One objworker.py process; used by one thread at a time (the pool's idle queue hands it out)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, _SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)

    def compile(self, text: str, target: dict, opt_level: int) -> bytes:
        """Object code, or RuntimeError for an LLVM error; OSError/EOFError if the process is gone."""
        job = json.dumps({"target": target, "opt_level": opt_level}).encode()
        objworker.write_message(self.proc.stdin, job)
        objworker.write_message(self.proc.stdin, text.encode())
        self.proc.stdin.flush()
        status = self.proc.stdout.read(1)
        if status not in (b"O", b"E"):
            raise EOFError("objworker exited")
        payload = objworker.read_message(self.proc.stdout)
        if status == b"E":
            raise RuntimeError(f"LLVM rejected a module in a codegen worker: {payload.decode(errors='replace')}")
        return payload

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class _Pool:
    def __init__(self, n: int):
        self.n = n
        self.idle: queue.Queue = queue.Queue()
        self.started = 0
        self.lock = threading.Lock()
        self.threads = ThreadPoolExecutor(max_workers=n, thread_name_prefix="relayish-codegen")

    def _take(self) -> _Worker | None:
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        with self.lock:
            if self.started < self.n:
                self.started += 1
                try:
                    return _Worker()
                except OSError:
                    self.started -= 1
                    return None
        return self.idle.get()

    def _job(self, text: str, target: dict, opt_level: int, local) -> bytes:
        worker = self._take()
        if worker is not None:
            try:
                obj = worker.compile(text, target, opt_level)
            except (OSError, EOFError):  # the worker died: drop it, compile here
                with self.lock:
                    self.started -= 1
                worker.proc.kill()
                worker.proc.wait()
            else:
                return obj
            finally:
                if worker.proc.poll() is None:
                    self.idle.put(worker)  # healthy (an LLVM error is the module's fault, not the worker's)
        return local(text)

    def prestart(self):
        """Start every worker not started yet, idle until the first jobs come."""
        with self.lock:
            while self.started < self.n:
                try:
                    worker = _Worker()
                except OSError:
                    return
                self.started += 1
                self.idle.put(worker)

    def submit(self, text: str, target: dict, opt_level: int, local):
        return self.threads.submit(self._job, text, target, opt_level, local)

    def close(self):
        self.threads.shutdown(wait=True)
        while not self.idle.empty():
            self.idle.get_nowait().close()


def _pool(n: int) -> _Pool:
    """This process's pool of n workers (pools of a parent process, inherited by fork, are never used)."""
    global _POOLS
    with _POOL_LOCK:
        if _POOLS.get("pid") != os.getpid():
            _POOLS = {"pid": os.getpid()}
        if n not in _POOLS:
            _POOLS[n] = _Pool(n)
        return _POOLS[n]


@atexit.register
def _shutdown():
    if _POOLS.get("pid") == os.getpid():
        for n, pool in _POOLS.items():
            if n != "pid":
                pool.close()


def prestart(workers: int | None = None) -> None:
    """Start this process's codegen workers now, so that a build's first modules do not wait for them (each worker
    starts Python and imports llvmlite: ~0.1 s of CPU, more wall time on a loaded machine). compile_model calls it
    before the graph passes; a no-op when the workers run already or there are none."""
    n = default_workers() if workers is None else workers
    if n:
        _pool(n).prestart()


def compile_texts(texts, target: dict, opt_level: int, local, workers: int | None = None) -> list[bytes]:
    """Object code of each IR text in `texts` (any iterable, consumed as it yields), in order. local(text) compiles
    one text in this process: used when there are no workers, or when a worker is lost."""
    n = default_workers() if workers is None else workers
    if n == 0:
        return [local(t) for t in texts]
    pool = _pool(n)
    futures = [pool.submit(t, target, opt_level, local) for t in texts]
    return [f.result() for f in futures]

"""Run cases in child worker processes that may crash or hang.

Each worker is a forked child that receives case indices over a pipe and sends back a CaseResult. A worker that
dies (a signal, an abort, os._exit in native code) or takes longer than `timeout` seconds on one case is killed
if need be and replaced by a new one; the case it was running is recorded as a crash naming the signal, exit code
or timeout. Nothing a case does can stop the suite.

Workers are forked (not spawned) so that they inherit the cases, which take seconds to generate, and start at
once; the parent itself never compiles or runs a case, so it has no thread pools or native state to fork.
"""
from __future__ import annotations

import faulthandler
import multiprocessing
import signal
import time
from collections import deque
from multiprocessing.connection import wait
from typing import Callable

from .cases import case_ops
from .engines import CaseResult


def _serve(conn, cases, run_case):
    """The worker's loop: an index in, a CaseResult out, until the parent sends None or goes away. A crash is
    reported by the parent (naming the case), so a fault handler inherited from the parent (pytest's) is off."""
    faulthandler.disable()
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return
        conn.send(run_case(cases[index]))


class _Worker:
    def __init__(self, cases, run_case):
        self.conn, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("fork").Process(target=_serve, args=(child, cases, run_case),
                                                                   daemon=True)
        self.process.start()
        child.close()
        self.index: int | None = None  # the case it runs, None when idle
        self.deadline = 0.0
        self.started = 0.0

    def give(self, index: int, timeout: float):
        self.index, self.started = index, time.monotonic()
        self.deadline = self.started + timeout
        self.conn.send(index)

    def kill(self) -> str:
        """Stop this worker (it hung or died) and say how it ended."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with code {code}"

    def stop(self):
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.kill()
        self.conn.close()


def run_cases(cases: list, run_case: Callable, workers: int = 2, timeout: float = 60.0,
              on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Run run_case(case) for every case in `workers` child processes; results in the cases' order.
    on_result, if given, is called in the parent as each result arrives (progress)."""
    pending = deque(range(len(cases)))
    results: dict[int, CaseResult] = {}
    pool = [_Worker(cases, run_case) for _ in range(max(1, min(workers, len(cases))))]

    def finish(worker, result):
        results[worker.index] = result
        worker.index = None
        if on_result:
            on_result(result)

    def crashed(worker, why):
        case = cases[worker.index]
        finish(worker, CaseResult(case.name, "crash", why, time.monotonic() - worker.started,
                                  tuple(sorted(case_ops(case)))))
        pool[pool.index(worker)] = _Worker(cases, run_case)

    try:
        while pending or any(w.index is not None for w in pool):
            for w in pool:
                if w.index is None and pending:
                    w.give(pending.popleft(), timeout)
            busy = [w for w in pool if w.index is not None]
            now = time.monotonic()
            ready = wait([w.conn for w in busy], timeout=max(0.0, min(w.deadline for w in busy) - now))
            for w in busy:
                if w.conn in ready:
                    try:
                        finish(w, w.conn.recv())
                    except (EOFError, OSError):
                        crashed(w, w.kill())
                elif time.monotonic() > w.deadline:
                    w.kill()
                    crashed(w, f"timed out after {timeout:g} s (worker killed)")
    finally:
        for w in pool:
            w.stop()
    return [results[i] for i in range(len(cases))]

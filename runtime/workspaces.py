"""The per-call native state of a Module: workspace buffers and argument pointer arrays, one set per running call.

A native call reads and writes its workspace (the intermediate tensors of the static memory plan) and reads two
pointer arrays (its inputs and outputs); two calls that overlap must not share any of them. The library's other
state is its thread pool, which is safe for concurrent callers: a call that finds the pool busy runs its parallel
loops on its own thread (compiler/codegen/threadpool.py, the `busy` flag). So calls with distinct `Slot`s may run
at once, and `WorkspacePool` hands each running call its own.
"""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from contextlib import contextmanager

import numpy as np

from .aligned import aligned_empty


class Slot:
    """What one native call owns while it runs: an aligned workspace, the input/output pointer arrays (and their
    addresses, the native call's arguments), and an aligned copy of each input that was passed misaligned or
    non-contiguous (made on first need, then reused: a served model's inputs come the same way every call)."""
    __slots__ = ("workspace", "workspace_ptr", "in_ptrs", "out_ptrs", "in_ptrs_address", "out_ptrs_address",
                 "staged")

    def __init__(self, workspace_bytes: int, n_inputs: int, n_outputs: int):
        self.workspace = aligned_empty(workspace_bytes, "uint8")
        self.workspace_ptr = self.workspace.ctypes.data
        self.in_ptrs = (ctypes.c_void_p * n_inputs)()
        self.out_ptrs = (ctypes.c_void_p * n_outputs)()
        self.in_ptrs_address = ctypes.addressof(self.in_ptrs)
        self.out_ptrs_address = ctypes.addressof(self.out_ptrs)
        self.staged: list = [None] * n_inputs  # per input: (aligned array, its address) once needed

    def stage_input(self, i: int, value: np.ndarray) -> int:
        """Copy `value` (input i, shape and dtype checked) into this slot's aligned buffer for input i; its
        address."""
        staged = self.staged[i]
        if staged is None:
            buf = aligned_empty(value.shape, value.dtype)
            staged = self.staged[i] = (buf, buf.ctypes.data)
        np.copyto(staged[0], value)
        return staged[1]


class WorkspacePool:
    """Slots for concurrent calls, created on demand and reused.

    Invariants: a slot is held by at most one call at a time; at most `limit` slots exist (a call that finds all of
    them held waits for one, so limit=1 serializes calls like a plain lock); a released slot is kept for the next
    call unless the limit was lowered meanwhile. Memory is thus at most `limit` workspaces, allocated only if that
    many calls ever overlapped. In a child after os.fork() (one thread) the slots held by the parent's other threads
    are forgotten and the lock is new, so the child never waits for a thread that does not exist there.
    """

    def __init__(self, workspace_bytes: int, n_inputs: int, n_outputs: int, limit: int):
        self._shape = (workspace_bytes, n_inputs, n_outputs)
        self._cond = threading.Condition()
        self._free: list[Slot] = []
        self._created = 0
        self._waiting = 0  # calls waiting for a slot (acquire)
        self.limit = limit
        _LIVE_POOLS.add(self)

    @property
    def limit(self) -> int:
        """The most slots (hence overlapping calls) this pool allows; >= 1."""
        return self._limit

    @limit.setter
    def limit(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"the limit of concurrent runs must be an integer >= 1, got {n!r}")
        with self._cond:
            self._limit = n
            while self._created > n:  # free slots above the limit are dropped now, held ones when released
                try:
                    self._free.pop()
                except IndexError:
                    break
                self._created -= 1
            self._cond.notify_all()

    @property
    def created(self) -> int:
        """How many slots exist (held or free)."""
        return self._created

    @contextmanager
    def slot(self):
        """Hold a slot for the duration of the `with` block."""
        s = self.acquire()
        try:
            yield s
        finally:
            self.release(s)

    # The hot path takes no lock: list.pop and list.append are atomic under the GIL, and a free slot is all a
    # call needs (0.05 us, where the condition's lock cost 0.9 us of run's ~5 us of Python). Only a call that
    # finds no free slot takes the lock, counts itself in `_waiting` and waits; a release that sees a waiter
    # notifies under the lock. The waiter counts itself before its last look at the free list, so a release
    # either puts its slot where that look finds it or sees the count and notifies once the waiter waits.

    def acquire(self) -> Slot:
        """A slot for one call, waiting while `limit` are held; give it back with release() (in a finally)."""
        try:
            return self._free.pop()
        except IndexError:
            pass
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    try:
                        return self._free.pop()
                    except IndexError:
                        pass
                    if self._created < self._limit:
                        self._created += 1
                        break
                    self._cond.wait()
            finally:
                self._waiting -= 1
        try:  # allocate outside the lock: a large workspace takes time, others may proceed meanwhile
            return Slot(*self._shape)
        except BaseException:
            with self._cond:
                self._created -= 1
                self._cond.notify()
            raise

    def release(self, s: Slot) -> None:
        if self._created > self._limit:  # the limit was lowered while s was held: drop it
            with self._cond:
                if self._created > self._limit:
                    self._created -= 1
                    self._cond.notify()
                    return
        self._free.append(s)
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def _after_fork_in_child(self) -> None:
        self._cond = threading.Condition()
        self._created = len(self._free)
        self._waiting = 0


_LIVE_POOLS: weakref.WeakSet = weakref.WeakSet()


def _reset_pools_in_child() -> None:
    for pool in list(_LIVE_POOLS):
        pool._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_in_child)

"""MetaSchedule's Database interface over the records store (compiler/records.py).

    db = Database("tuning.db")                       # the same SQLite file tune_model and compile_model use
    wl = db.commit_workload(task)
    db.commit_tuning_record(TuningRecord(wl, schedule, run_secs=[1e-4, 1.1e-4], trace=trace))
    db.get_top_k(wl, 5)                              # the fastest distinct programs, with their traces

A tuning record goes into the `records` table exactly as every other strategy's (step list, costs or error,
target), so `compile_model(records=...)` applies it like any other. What MetaSchedule adds is kept beside it in
the same file: the workloads (`ms_workloads`: key, name) and the trace of each program (`ms_traces`: key, step-list
JSON, trace JSON), so that a stored program can be replayed and mutated again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from compiler.codegen import host_target
from compiler.records import RecordStore, connect, target_key
from compiler.schedule import Schedule as StepSchedule

from .trace import Trace

SIDE_TABLES = """
CREATE TABLE IF NOT EXISTS ms_workloads (task_key TEXT PRIMARY KEY, task_name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ms_traces (task_key TEXT NOT NULL, schedule TEXT NOT NULL, trace TEXT NOT NULL,
                                      PRIMARY KEY (task_key, schedule));
"""


@dataclass(frozen=True)
class Workload:
    key: str  # the task's workload key
    name: str


@dataclass(frozen=True)
class TuningRecord:
    """One measured program. Exactly one of run_secs / error is None."""
    workload: Workload
    schedule: StepSchedule
    run_secs: tuple | None = None
    error: str | None = None
    trace: Trace | None = None

    @property
    def cost(self) -> float:
        return min(self.run_secs) if self.run_secs else float("inf")


class Database:
    """Workloads and tuning records of one target (default: this machine) in a records file."""

    def __init__(self, path: str, target=None):
        self.path = os.fspath(path)
        self.target = target_key(target or host_target())
        self.store = RecordStore(self.path)
        self._conn = connect(self.path)
        with self._conn:
            self._conn.executescript(SIDE_TABLES)

    def commit_workload(self, task) -> Workload:
        """Register a task (anything with .key and .name); returns its workload (the same for the same key)."""
        with self._conn:
            self._conn.execute("INSERT OR IGNORE INTO ms_workloads VALUES (?, ?)", (task.key, task.name))
        name = self._conn.execute("SELECT task_name FROM ms_workloads WHERE task_key = ?", (task.key,)).fetchone()[0]
        return Workload(task.key, name)

    def workloads(self) -> list[Workload]:
        return [Workload(*row) for row in self._conn.execute("SELECT task_key, task_name FROM ms_workloads")]

    def commit_tuning_record(self, record: TuningRecord) -> None:
        self.store.add(record.workload, self.target, record.schedule,
                       None if record.run_secs is None else list(record.run_secs), record.error)
        if record.trace is not None:
            self.commit_trace(record.workload, record.schedule, record.trace)

    def commit_trace(self, workload: Workload, schedule: StepSchedule, trace: Trace) -> None:
        """Keep the trace of a program whose record is (or will be) in the records table."""
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO ms_traces VALUES (?, ?, ?)",
                               (workload.key, schedule.to_json(), trace.to_json()))

    def get_top_k(self, workload: Workload, k: int) -> list[TuningRecord]:
        """The k fastest distinct successful programs of the workload on this target, fastest first; each with
        its trace when one was committed (programs of other strategies have none)."""
        best: dict[str, object] = {}
        for rec in self.store.records(workload.key, target=self.target):
            key = rec.schedule.to_json()
            if rec.ok and (key not in best or rec.cost < best[key].cost):
                best[key] = rec
        out = []
        for key, rec in sorted(best.items(), key=lambda kv: kv[1].cost)[:k]:
            row = self._conn.execute("SELECT trace FROM ms_traces WHERE task_key = ? AND schedule = ?",
                                     (workload.key, key)).fetchone()
            out.append(TuningRecord(workload, rec.schedule, tuple(rec.costs), None,
                                    Trace.from_json(row[0]) if row else None))
        return out

    def __len__(self):
        return self.store.count(target=self.target)

    def close(self) -> None:
        self._conn.close()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""Tuning records: the table schema, and the read-only reader `compile_model` takes tuned schedules from.

The records database is SQLite (stdlib `sqlite3`) in WAL mode. The tuning side writes it (`tuning.records.
RecordStore`, which takes its schema from here: this file is the one place the table is defined); the compiler only
reads it, so that `compiler` never imports `tuning`.

One row per measured candidate:

    task_key     the task's workload key (compiler.task.workload_key)
    task_name    the task's readable name (for listings only)
    target       canonical target string (see `target_key`): records of another CPU or feature set never match
    schedule     the schedule's steps, Schedule.to_json()
    costs        JSON list of seconds (one per repeat), NULL when the candidate failed
    record_cost  min over repeats of costs (what `best` ranks by), NULL when the candidate failed
    error        why the candidate failed, NULL when it was measured
    measured_at  unix time (seconds) of the measurement
    run_id       the tuning run that measured it

Invariant: exactly one of (costs, error) is NULL. A record whose schedule no longer parses (written by an older
version of the schedule steps) is skipped with a warning, never an error.
"""
from __future__ import annotations

import json
import os
import sqlite3
import urllib.parse
import warnings

from .schedule import Schedule, ScheduleError

SCHEMA_VERSION = 1  # stored in PRAGMA user_version
BUSY_TIMEOUT_S = 30.0  # a writer in another process holds the lock for one batch commit: wait, do not fail

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    task_key    TEXT NOT NULL,
    task_name   TEXT NOT NULL,
    target      TEXT NOT NULL,
    schedule    TEXT NOT NULL,
    costs       TEXT,
    record_cost   REAL,
    error       TEXT,
    measured_at REAL NOT NULL,
    run_id      TEXT NOT NULL,
    CHECK ((costs IS NULL) != (error IS NULL))
);
CREATE INDEX IF NOT EXISTS records_by_task ON records (task_key, target, record_cost);
"""

COLUMNS = ("id", "task_key", "task_name", "target", "schedule", "costs", "record_cost", "error", "measured_at",
           "run_id")


class RecordsError(ValueError):
    """The file is not a usable records database (not SQLite, no records table, or a newer schema)."""


def target_key(target: dict | str) -> str:
    """The canonical string of a target: 'triple=...;cpu=...;features=+a,+b,-c' with the features sorted.

    Accepts host_target()'s dict or a string already in this form (returned re-canonicalized)."""
    if isinstance(target, str):
        fields = dict(part.partition("=")[::2] for part in target.split(";"))
        if set(fields) != {"triple", "cpu", "features"}:
            raise ValueError(f"target string must be 'triple=...;cpu=...;features=...', got {target!r}")
        target = fields
    missing = {"triple", "cpu", "features"} - set(target)
    if missing:
        raise ValueError(f"target lacks {sorted(missing)}; expected dict(triple=, cpu=, features=)")
    features = sorted(f for f in str(target["features"]).split(",") if f)
    return f"triple={target['triple']};cpu={target['cpu']};features={','.join(features)}"


def record_cost(costs) -> float:
    """The number records are ranked by (seconds): costs holds, per repeat, the mean time over `number` runs;
    the record's cost is their minimum (the least disturbed repeat), as tuning/measure.py defines it."""
    return min(costs)


def connect(path: str, read_only: bool = False) -> sqlite3.Connection:
    """A connection to the records database at path; read_only opens it without ever writing (not even WAL setup).

    Raises FileNotFoundError for a missing file when read_only (a writer creates it) and RecordsError when the
    file is not a records database."""
    path = os.fspath(path)
    if read_only:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"tuning records database not found: {path}")
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
    else:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        conn.close()
        raise RecordsError(f"{path} is not a tuning records database: {e}") from None
    if version > SCHEMA_VERSION:
        conn.close()
        raise RecordsError(f"{path} has records schema version {version}; this version reads up to "
                           f"{SCHEMA_VERSION}")
    return conn


def check_schema(conn: sqlite3.Connection, path: str) -> None:
    """Raise RecordsError unless the database has the records table."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchone()
    if row is None:
        raise RecordsError(f"{path} is not a tuning records database (it has no 'records' table)")


def parse_schedule(text: str, record_id) -> Schedule | None:
    """The record's schedule, or None (with a warning naming the record) when it no longer parses."""
    try:
        return Schedule.from_json(text)
    except (ScheduleError, TypeError, ValueError, IndexError) as e:
        warnings.warn(f"tuning record {record_id}: skipping a schedule that does not parse ({e})", stacklevel=3)
        return None


def best_schedule(conn: sqlite3.Connection, task_key: str, target: str) -> tuple[Schedule, int] | None:
    """The successful record of exactly (task_key, target) with the lowest cost whose schedule parses,
    with its record id; None when there is none. Ties go to the earlier record."""
    rows = conn.execute("SELECT id, schedule FROM records WHERE task_key = ? AND target = ? AND error IS NULL "
                        "ORDER BY record_cost, id", (task_key, target))
    for record_id, text in rows:
        schedule = parse_schedule(text, record_id)
        if schedule is not None:
            return schedule, record_id
    return None


class RecordsConnection:
    """An open records database (`self._conn`): closed by close() or at the end of a `with` block."""
    _conn: sqlite3.Connection

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RecordsReader(RecordsConnection):
    """Read-only view of a records database for one target: what `compile_model(records=path)` uses.

        reader = RecordsReader(path, host_target())
        reader.best(task.key)   # -> Schedule | None
    """

    def __init__(self, path: str, target: dict | str):
        self.path = os.fspath(path)
        self.target = target_key(target)
        self._conn = connect(self.path, read_only=True)
        check_schema(self._conn, self.path)

    def best(self, task_key: str) -> Schedule | None:
        """The lowest-cost successful schedule of this task measured on exactly this target."""
        found = best_schedule(self._conn, task_key, self.target)
        return None if found is None else found[0]

    def count(self, task_key: str | None = None) -> int:
        """Records (successful or not) of this target, of one task or of all."""
        sql, args = "SELECT COUNT(*) FROM records WHERE target = ?", [self.target]
        if task_key is not None:
            sql, args = sql + " AND task_key = ?", args + [task_key]
        return self._conn.execute(sql, args).fetchone()[0]

    def counts(self) -> dict:
        """For logging: records and distinct tasks of this target, and records of other targets."""
        mine, tasks = self._conn.execute("SELECT COUNT(*), COUNT(DISTINCT task_key) FROM records "
                                         "WHERE target = ?", (self.target,)).fetchone()
        total = self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        return {"records": mine, "tasks": tasks, "other_target_records": total - mine}

    def __repr__(self):
        return f"RecordsReader({self.path!r}, {self.target.split(';features')[0]})"


def decode_costs(text: str | None) -> tuple | None:
    return None if text is None else tuple(json.loads(text))

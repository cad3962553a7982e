"""Tuning records: every measured candidate, in SQLite (stdlib `sqlite3`, WAL), keyed by workload key and target.

    store = RecordStore("tuning.db")                             # read-write: what the tuner uses
    store.add_results(task, host_target(), schedules, results)  # one commit per batch
    store.best(task.key)                                         # this machine's best Schedule, or None
    RecordsReader("tuning.db", host_target()).best(task.key)    # read-only: what compile_model(records=) uses
    store.distill("best.db"); store.export_jsonl("r.jsonl"); store.import_jsonl("r.jsonl")

This module is the one place the table is defined. It lives in the compiler, which reads records, so that the
tuner (which writes them) imports the compiler and never the reverse; `relayish records ...` (cli/records.py)
lists and manages a database from the command line.

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

A second table, `verdicts`, holds what a tuning run found when it timed the whole model (tuning/model_check.py)
or, before that, the task's best program side by side with its default (tuning/tune.side_by_side_verdicts): per
(task_key, target, schedule), whether that schedule lost to the untuned one (keep_default = 1). `best` skips a task whose best record has such a verdict, so compile_model keeps the default
for it; a better record measured later has no verdict and applies.

Invariant: exactly one of (costs, error) is NULL. A record whose schedule no longer parses (written by an older
version of the schedule steps) is skipped with a warning, never an error.

Durability: each add / add_many is one transaction, committed before it returns, so killing the tuner loses at
most the batch being added. Several processes may open the same file: SQLite serializes the writers (each waits
up to BUSY_TIMEOUT_S for the lock) and WAL lets readers read while one writes. A connection is never shared across
a fork: open the store in the process that uses it.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import statistics
import time
import urllib.parse
import uuid
import warnings
from dataclasses import dataclass

from .codegen import host_target
from .schedule import Schedule, ScheduleError

# ---------------------------------------------------------------------------------------------- schema, reading

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
CREATE TABLE IF NOT EXISTS verdicts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    task_key     TEXT NOT NULL,
    target       TEXT NOT NULL,
    schedule     TEXT NOT NULL,
    keep_default INTEGER NOT NULL,
    tuned_s      REAL NOT NULL,
    default_s    REAL NOT NULL,
    decided_at   REAL NOT NULL,
    run_id       TEXT NOT NULL
);
"""

COLUMNS = ("id", "task_key", "task_name", "target", "schedule", "costs", "record_cost", "error", "measured_at",
           "run_id")


class RecordsError(ValueError):
    """The file is not a usable records database (not SQLite, no records table, or a newer schema)."""


class RecordsFormatError(ValueError):
    """A malformed line of a JSON-lines records file."""


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


def decode_costs(text: str | None) -> tuple | None:
    """The costs column (JSON list of seconds, or NULL) as a tuple, or None."""
    return None if text is None else tuple(json.loads(text))


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
    with its record id; None when there is none, or when the latest verdict on that schedule says it lost to
    the untuned schedule in the model. Ties go to the earlier record."""
    rows = conn.execute("SELECT id, schedule FROM records WHERE task_key = ? AND target = ? AND error IS NULL "
                        "ORDER BY record_cost, id", (task_key, target))
    for record_id, text in rows:
        schedule = parse_schedule(text, record_id)
        if schedule is not None:
            return None if keeps_default(conn, task_key, target, text) else (schedule, record_id)
    return None


def keeps_default(conn: sqlite3.Connection, task_key: str, target: str, schedule_json: str) -> bool:
    """True when the latest verdict on this schedule of the task says the untuned schedule won in the model.
    (A database written before verdicts existed has no such table: no verdicts.)"""
    try:
        row = conn.execute("SELECT keep_default FROM verdicts WHERE task_key = ? AND target = ? AND schedule = ? "
                           "ORDER BY id DESC LIMIT 1", (task_key, target, schedule_json)).fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return False
        raise
    return bool(row and row[0])


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

    def best_cost(self, task_key: str) -> float | None:
        """The cost (s) of the schedule best() returns, or None."""
        found = best_schedule(self._conn, task_key, self.target)
        if found is None:
            return None
        return self._conn.execute("SELECT record_cost FROM records WHERE id = ?", (found[1],)).fetchone()[0]

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


# ---------------------------------------------------------------------------------------------- the read-write store

@dataclass(frozen=True)
class Record:
    """One measured candidate. Exactly one of costs / error is None."""
    task_key: str
    task_name: str
    target: str  # canonical, see target_key
    schedule: Schedule
    costs: tuple | None  # seconds, one per repeat
    error: str | None
    measured_at: float  # unix time
    run_id: str
    id: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cost(self) -> float:
        """Cost in seconds (min over repeats); inf for a failed candidate."""
        return record_cost(self.costs) if self.costs else math.inf


@dataclass(frozen=True)
class TaskSummary:
    key: str
    name: str
    records: int
    errors: int
    best_cost: float | None  # lowest cost in seconds; None when nothing succeeded


def _default_target() -> str:
    return target_key(host_target())


def _check_costs(costs, error) -> None:
    if (costs is None) == (error is None):
        raise ValueError(f"a record has either costs or an error, not both or neither "
                         f"(costs={costs!r}, error={error!r})")
    if costs is not None:
        if not isinstance(costs, (list, tuple)) or not costs:
            raise ValueError(f"costs must be a non-empty list of seconds, got {costs!r}")
        if any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0
               for c in costs):
            raise ValueError(f"costs must be finite non-negative numbers of seconds, got {list(costs)!r}")
    elif not isinstance(error, str):
        raise ValueError(f"error must be a string, got {type(error).__name__}")


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode (persistent in the file; readers never block the writer). Switching needs a
    moment of exclusive access, for which SQLite does not wait on its busy handler: when another process holds the
    file (two tuning runs starting on one database), retry until BUSY_TIMEOUT_S. A file already in WAL mode (every
    file but a new one) needs no switch at all."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RecordStore(RecordsConnection):
    """Read-write access to a records database (created if missing). `run_id` tags what this store adds."""

    def __init__(self, path: str, run_id: str | None = None):
        self.path = os.fspath(path)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._conn = connect(self.path)
        tables = {name for (name,) in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "records" not in tables:  # some other SQLite file: do not add our table to it
            self._conn.close()
            raise RecordsError(f"{self.path} is an SQLite database without a 'records' table, not tuning records")
        _use_wal(self._conn)
        self._conn.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")

    # ---- writing ---------------------------------------------------------------------------------------------
    def add(self, task, target, schedule: Schedule, costs=None, error: str | None = None,
            measured_at: float | None = None) -> None:
        """Add one record (task: anything with .key and .name; target: host_target() dict or canonical string)."""
        self.add_many([(task, target, schedule, costs, error)], measured_at)

    def add_many(self, entries, measured_at: float | None = None) -> int:
        """Add (task, target, schedule, costs, error) tuples in ONE transaction; returns how many."""
        now = time.time() if measured_at is None else measured_at
        rows = []
        for task, target, schedule, costs, error in entries:
            if not isinstance(schedule, Schedule):
                raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
            _check_costs(costs, error)
            rows.append((task.key, task.name, target_key(target), schedule.to_json(), costs, error, now,
                         self.run_id))
        return self._insert(rows)

    def add_results(self, task, target, schedules, results, measured_at: float | None = None) -> int:
        """Add measure() results (anything with .costs and .error) of `schedules`, one transaction."""
        schedules, results = list(schedules), list(results)
        if len(schedules) != len(results):
            raise ValueError(f"add_results: {len(schedules)} schedules but {len(results)} results")
        return self.add_many([(task, target, s, r.costs, r.error) for s, r in zip(schedules, results)],
                             measured_at)

    def add_verdict(self, task_key: str, target, schedule: Schedule, tuned_s: float, default_s: float,
                    keep_default: bool | None = None) -> bool:
        """Record how `schedule` (the task's best record) did inside the model against the untuned schedule; it
        keeps applying only if it was faster (tuned_s < default_s), unless the caller decides (keep_default: the
        whole tuned model was not faster). The latest verdict on a schedule is the one that counts. Returns
        keep_default."""
        keep_default = not tuned_s < default_s if keep_default is None else keep_default
        with self._conn:
            self._conn.execute("INSERT INTO verdicts (task_key, target, schedule, keep_default, tuned_s, default_s, "
                               "decided_at, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                               (task_key, target_key(target), schedule.to_json(), int(keep_default), float(tuned_s),
                                float(default_s), time.time(), self.run_id))
        return keep_default

    def _insert(self, rows) -> int:
        """rows: (key, name, target, schedule json, costs list|None, error, measured_at, run_id)."""
        values = [(k, n, t, s, None if c is None else json.dumps([float(x) for x in c]),
                   None if c is None else record_cost(c), e, float(m), r) for k, n, t, s, c, e, m, r in rows]
        with self._conn:  # one transaction: committed on return, rolled back on error
            self._conn.executemany("INSERT INTO records (task_key, task_name, target, schedule, costs, record_cost, "
                                   "error, measured_at, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        return len(values)

    # ---- reading ---------------------------------------------------------------------------------------------
    def best(self, task_key: str, target=None) -> Schedule | None:
        """The lowest-cost successful schedule of the task on exactly `target` (default: this machine)."""
        record = self.best_record(task_key, target)
        return None if record is None else record.schedule

    def best_record(self, task_key: str, target=None) -> Record | None:
        found = best_schedule(self._conn, task_key, self._target(target))
        if found is None:
            return None
        row = self._conn.execute(f"SELECT {', '.join(COLUMNS)} FROM records WHERE id = ?", (found[1],)).fetchone()
        return self._record(row, found[0])

    def typical_cost(self, task_key: str, schedule: Schedule, target=None) -> float | None:
        """The median (s) of every reading of this schedule of the task on `target`: each repeat of each of its
        successful records (the search's measurement and the re-measure's), None if it has none. The records
        rank programs by their least reading (noise only ever adds time), but the least of many readings of the
        program that won is a best case: a model runs its kernels at their typical speed (tuning/tune.py's
        check_models estimates the model with this)."""
        rows = self._conn.execute("SELECT costs FROM records WHERE task_key = ? AND target = ? AND schedule = ? AND "
                                  "error IS NULL", (task_key, self._target(target), schedule.to_json()))
        readings = [c for (text,) in rows for c in decode_costs(text) or ()]
        return statistics.median(readings) if readings else None

    def best_of_similar(self, task_name: str, exclude_key: str, target=None, k: int = 4) -> list[Record]:
        """The best successful record of each of the k best other tasks named `task_name` (the same fused ops on
        other shapes) on `target`: what tuning a new shape starts from."""
        rows = self._conn.execute("SELECT task_key FROM records WHERE task_name = ? AND task_key != ? AND "
                                  "target = ? AND error IS NULL GROUP BY task_key ORDER BY MIN(record_cost) LIMIT ?",
                                  (task_name, exclude_key, self._target(target), k)).fetchall()
        return [r for r in (self.best_record(key, target) for (key,) in rows) if r is not None]

    def records(self, task_key: str | None = None, target=None) -> list[Record]:
        """Records in insertion order, of one task and/or one target (default: all); unparseable ones skipped."""
        out = []
        for row in self._rows(task_key, None if target is None else self._target(target)):
            schedule = parse_schedule(row[4], row[0])
            if schedule is not None:
                out.append(self._record(row, schedule))
        return out

    def count(self, task_key: str | None = None, target=None) -> int:
        where, args = self._where(task_key, None if target is None else self._target(target))
        return self._conn.execute(f"SELECT COUNT(*) FROM records{where}", args).fetchone()[0]

    def tasks(self, target=None) -> list[TaskSummary]:
        """Per task: records, errors and best cost, over one target (default: every target)."""
        where, args = self._where(None, None if target is None else self._target(target))
        rows = self._conn.execute(
            f"SELECT task_key, MAX(task_name), COUNT(*), COUNT(error), MIN(record_cost) FROM records{where} "
            "GROUP BY task_key ORDER BY MIN(id)", args)
        return [TaskSummary(*row) for row in rows]

    def targets(self) -> list[tuple[str, int]]:
        """(target, number of records) for every target in the store."""
        return list(self._conn.execute("SELECT target, COUNT(*) FROM records GROUP BY target ORDER BY MIN(id)"))

    # ---- whole-store operations ------------------------------------------------------------------------------
    def distill(self, out_path: str) -> int:
        """Write the best successful record of every (task, target) to a new store at out_path; returns how many."""
        if os.path.exists(out_path):
            raise FileExistsError(f"distill: {out_path} exists already; give a new file")
        best = []
        for (key, target) in self._conn.execute("SELECT DISTINCT task_key, target FROM records ORDER BY task_key"):
            record = self.best_record(key, target)
            if record is not None:
                best.append(record)
        with RecordStore(out_path) as out:
            out._insert([(r.task_key, r.task_name, r.target, r.schedule.to_json(), r.costs, r.error,
                          r.measured_at, r.run_id) for r in best])
        return len(best)

    def export_jsonl(self, path: str) -> int:
        """Every record, one JSON object per line (fields JSONL_FIELDS), unparsed schedules included."""
        n = 0
        with open(path, "w", encoding="utf-8") as f:
            for row in self._rows(None, None):
                obj = dict(zip(COLUMNS, row))
                obj["schedule"] = json.loads(obj["schedule"])
                obj["costs"] = decode_costs(obj["costs"])
                f.write(json.dumps({k: obj[k] for k in JSONL_FIELDS}) + "\n")
                n += 1
        return n

    def import_jsonl(self, path: str) -> int:
        """Add the records of a JSON-lines file (all or none); records already present are skipped.
        Returns how many were added. A malformed line raises RecordsFormatError naming its line number."""
        rows = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    rows.append(_parse_jsonl_line(line, lineno, path))
        fresh = [r for r in rows if not self._exists(r)]
        return self._insert(fresh)

    def _exists(self, row) -> bool:
        key, _, target, schedule, _, _, measured_at, run_id = row
        return self._conn.execute("SELECT 1 FROM records WHERE task_key = ? AND target = ? AND schedule = ? AND "
                                  "measured_at = ? AND run_id = ?",
                                  (key, target, schedule, measured_at, run_id)).fetchone() is not None

    # ---- helpers ---------------------------------------------------------------------------------------------
    def _target(self, target) -> str:
        return _default_target() if target is None else target_key(target)

    @staticmethod
    def _where(task_key, target) -> tuple[str, list]:
        conds, args = [], []
        if task_key is not None:
            conds.append("task_key = ?")
            args.append(task_key)
        if target is not None:
            conds.append("target = ?")
            args.append(target)
        return (" WHERE " + " AND ".join(conds) if conds else ""), args

    def _rows(self, task_key, target):
        where, args = self._where(task_key, target)
        return self._conn.execute(f"SELECT {', '.join(COLUMNS)} FROM records{where} ORDER BY id", args)

    @staticmethod
    def _record(row, schedule: Schedule) -> Record:
        rid, key, name, target, _, costs, _, error, measured_at, run_id = row
        return Record(key, name, target, schedule, decode_costs(costs), error, measured_at, run_id, rid)

    def __repr__(self):
        return f"RecordStore({self.path!r}, run_id={self.run_id!r})"


# ---------------------------------------------------------------------------------------------- JSON lines

JSONL_FIELDS = ("task_key", "task_name", "target", "schedule", "costs", "error", "measured_at", "run_id")


def _parse_jsonl_line(line: str, lineno: int, path: str) -> tuple:
    """One JSON-lines record -> an insert row; RecordsFormatError naming the line when it is malformed."""
    def bad(why):
        return RecordsFormatError(f"{path}:{lineno}: {why}")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise bad(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in JSONL_FIELDS if k not in obj]
    if missing:
        raise bad(f"missing field(s) {missing}")
    for k in ("task_key", "task_name", "target", "run_id"):
        if not isinstance(obj[k], str) or not obj[k]:
            raise bad(f"field {k!r} must be a non-empty string, got {obj[k]!r}")
    if not isinstance(obj["schedule"], list):
        raise bad(f"field 'schedule' must be a list of steps, got {type(obj['schedule']).__name__}")
    if isinstance(obj["measured_at"], bool) or not isinstance(obj["measured_at"], (int, float)):
        raise bad(f"field 'measured_at' must be a number (unix time), got {obj['measured_at']!r}")
    try:
        _check_costs(obj["costs"], obj["error"])
        target = target_key(obj["target"])
    except ValueError as e:
        raise bad(str(e)) from None
    return (obj["task_key"], obj["task_name"], target, json.dumps(obj["schedule"]), obj["costs"], obj["error"],
            float(obj["measured_at"]), obj["run_id"])

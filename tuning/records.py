"""The tuning records store: every measured candidate, in SQLite (WAL), keyed by workload key and target.

    store = RecordStore("tuning.db")
    store.add_results(task, host_target(), schedules, results)  # one commit per batch
    store.best(task.key)                                         # this machine's best Schedule, or None

The table schema lives in compiler/records_reader.py (the compiler reads the same file, read-only). Durability:
each add / add_many is one transaction, committed before it returns, so killing the tuner loses at most the batch
being added. Several processes may open the same file: SQLite serializes the writers (each waits up to
BUSY_TIMEOUT_S for the lock) and WAL lets readers read while one writes. A connection is never shared across a
fork: open the store in the process that uses it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import sys
import time
import uuid
from dataclasses import dataclass

from compiler.records_reader import (COLUMNS, SCHEMA, SCHEMA_VERSION, RecordsConnection, RecordsError, best_schedule,
                                     connect, decode_costs, record_cost, parse_schedule, target_key)
from compiler.schedule import Schedule

JSONL_FIELDS = ("task_key", "task_name", "target", "schedule", "costs", "error", "measured_at", "run_id")


@dataclass(frozen=True)
class Record:
    """One measured candidate. Exactly one of costs / error is None."""
    task_key: str
    task_name: str
    target: str  # canonical, see compiler.records_reader.target_key
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


class RecordsFormatError(ValueError):
    """A malformed line of a JSON-lines records file."""


def _default_target() -> str:
    from compiler.codegen import host_target
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
        self._conn.execute("PRAGMA journal_mode = WAL")  # persistent in the file; readers never block the writer
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


# ---------------------------------------------------------------------------------------------- command line

def add_records_parser(subparsers) -> argparse.ArgumentParser:
    """Add `records list|distill|export|import DB ...` to an argparse subparsers object; func=main_records."""
    p = subparsers.add_parser("records", help="list or manage tuning records",
                              description="List, distill, export or import a tuning records database.")
    sub = p.add_subparsers(dest="records_command", required=True, metavar="ACTION")
    q = sub.add_parser("list", help="per target, every task's records, errors and best cost")
    q.add_argument("db", metavar="DB")
    q.add_argument("--task", metavar="KEY", help="list this task's records one by one (a key prefix will do)")
    q = sub.add_parser("distill", help="write the best record of each task and target to a new database")
    q.add_argument("db", metavar="DB")
    q.add_argument("output", metavar="OUT_DB")
    q = sub.add_parser("export", help="write every record as JSON lines")
    q.add_argument("db", metavar="DB")
    q.add_argument("output", metavar="OUT.jsonl")
    q = sub.add_parser("import", help="add the records of a JSON-lines file (duplicates skipped)")
    q.add_argument("db", metavar="DB")
    q.add_argument("input", metavar="IN.jsonl")
    p.set_defaults(func=main_records)
    return p


def main_records(args: argparse.Namespace) -> int:
    """Run a `relayish records` action; 0 on success, 2 (with `error: ...` on stderr) on bad input."""
    try:
        if args.records_command != "import" and not os.path.isfile(args.db):
            raise FileNotFoundError(f"records database not found: {args.db}")
        if args.records_command == "import" and not os.path.isfile(args.input):
            raise FileNotFoundError(f"records file not found: {args.input}")
        with RecordStore(args.db) as store:
            if args.records_command == "list":
                print(_format_list(store, args.task))
            elif args.records_command == "distill":
                print(f"distilled {store.distill(args.output)} records into {args.output}")
            elif args.records_command == "export":
                print(f"exported {store.export_jsonl(args.output)} records to {args.output}")
            else:
                print(f"imported {store.import_jsonl(args.input)} new records into {args.db}")
    except (OSError, ValueError, sqlite3.Error) as e:  # RecordsError and RecordsFormatError are ValueErrors
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def records_cli(argv: list[str]) -> int:
    """`relayish records ...` as a stand-alone command: records_cli(["list", "tuning.db"])."""
    parser = argparse.ArgumentParser(prog="relayish")
    add_records_parser(parser.add_subparsers(dest="command", required=True))
    return main_records(parser.parse_args(["records", *argv]))


def _short_target(target: str) -> str:
    fields = dict(part.partition("=")[::2] for part in target.split(";"))
    features = fields.get("features", "")
    return f"{fields.get('triple')} cpu={fields.get('cpu')} ({len(features.split(',')) if features else 0} features)"


def _ms(seconds) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4f}"


def _format_list(store: RecordStore, task_prefix: str | None) -> str:
    lines = []
    if not store.targets():
        return f"{store.path}: no records"
    for target, n in store.targets():
        lines.append(f"target {_short_target(target)}: {n} records")
        if task_prefix is None:
            lines.append(f"  {'task key':<12} {'name':<36} {'records':>8} {'errors':>7} {'best_ms':>10}")
            for t in store.tasks(target):
                lines.append(f"  {t.key[:12]:<12} {t.name[:36]:<36} {t.records:>8} {t.errors:>7} "
                             f"{_ms(t.best_cost):>10}")
            continue
        for r in store.records(target=target):
            if r.task_key.startswith(task_prefix):
                outcome = f"{_ms(r.cost)} ms" if r.ok else f"error: {r.error.splitlines()[0][:80]}"
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.measured_at))
                lines.append(f"  #{r.id:<6} {r.task_key[:12]} {when} run {r.run_id} {len(r.schedule)} steps "
                             f"{outcome}")
    return "\n".join(lines)

"""`relayish records list|distill|export|import DB ...`: look after a tuning records database (compiler.records)."""
from __future__ import annotations

import argparse
import math
import time

from .common import EXIT_OK, existing


def add_records_parser(subparsers) -> None:
    """Add `records list|distill|export|import DB ...` to the command's subparsers; func=cmd_records."""
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
    p.set_defaults(func=cmd_records)


def cmd_records(args: argparse.Namespace) -> int:
    """Run a `relayish records` action. A missing or unusable file raises (OSError, RecordsError and
    RecordsFormatError, which are ValueErrors, or sqlite3.Error): cli.main prints it as one `error: ...` line."""
    from compiler.records import RecordStore  # here, not at the top: the compiler is heavy and --help is not

    if args.records_command == "import":
        existing(args.input, "records file")
    else:
        existing(args.db, "records database")
    with RecordStore(args.db) as store:
        if args.records_command == "list":
            print(_format_list(store, args.task))
        elif args.records_command == "distill":
            print(f"distilled {store.distill(args.output)} records into {args.output}")
        elif args.records_command == "export":
            print(f"exported {store.export_jsonl(args.output)} records to {args.output}")
        else:
            print(f"imported {store.import_jsonl(args.input)} new records into {args.db}")
    return EXIT_OK


def _short_target(target: str) -> str:
    fields = dict(part.partition("=")[::2] for part in target.split(";"))
    features = fields.get("features", "")
    return f"{fields.get('triple')} cpu={fields.get('cpu')} ({len(features.split(',')) if features else 0} features)"


def _ms(seconds) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4f}"


def _format_list(store, task_prefix: str | None) -> str:
    """The `records list` text of an open compiler.records.RecordStore: per target, a row per task, or with
    task_prefix the records of the tasks whose key starts with it."""
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

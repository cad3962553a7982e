"""What tuning pays, model by model: tune each suite model for a fixed time, then time it untuned, tuned and in
onnxruntime side by side.

    python -m models --all --out suite/
    python -m relayish_tools.bench.payoff suite/ --minutes 15 --out payoff/ [--models resnet18,mobilenet_v2] [--repeat 30]

For each model (in the folder's order, or the named ones):
1. `tune_model(model, payoff/<model>.db, time_budget_s=minutes * 60)`: the task scheduler, the search and, at the
   end, the in-model check (tuning/model_check.py), which keeps the default of every task whose tuned program
   does not win inside the model. It prints the tuner's estimate beside the measured tuned latency.
2. In one process, in steady state (runtime.timing: blocks of consecutive runs per engine, alternating with idle
   gaps, same inputs and threads): the model compiled without records (the hand-written defaults), compiled
   with payoff/<model>.db, and onnxruntime. Outputs of the tuned model are checked against onnxruntime.

Each model's row is added to payoff/payoff.json as soon as it is measured, and a model already there is skipped:
a suite of 13 models x 15 minutes spans sessions, and a run stopped midway loses only the model it was tuning
(its records stay in its .db; the next run resumes them). --force re-tunes and re-times the named models. Each row
carries the command line, machine and versions of the run that measured it (bench/report.py provenance);
docs/data/payoff.json is a copy of payoff.json (bench/report_docs.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from compiler import compile_model
from runtime.timing import BLOCK_RUNS, describe_timing, format_paired, paired_ratio

from .compare import compare_with_onnxruntime
from .report import command_line, provenance
from .suite import suite_paths


def payoff_row(path: str, records: str, minutes: float, threads: int, repeat: int, warmup: int, block: int,
               trials: int | None = None, params: dict | None = None) -> dict:
    """Tune one model for `minutes` (or until `trials` measured programs, if sooner) into `records`, then time it
    untuned, tuned and in onnxruntime. params: tune_model's tuning parameters (tests make rounds small)."""
    from tuning.tune import tune_model  # tuning pulls in xgboost: only when a model is tuned

    name = os.path.splitext(os.path.basename(path))[0]
    started = time.time()
    result = tune_model(path, records, trials=trials, time_budget_s=minutes * 60, params=params)
    check = result.model_checks[0] if result.model_checks else None
    untuned = compile_model(path, num_threads=threads)
    tuned = compile_model(path, records=records, num_threads=threads)
    timed = compare_with_onnxruntime(tuned, path, threads=threads, repeat=repeat, warmup=warmup, block=block,
                                     extra_engines=[("untuned", lambda feed: untuned.run(None, feed))])
    return {
        "model": name, "minutes": minutes, "trials": result.trials, "tasks": len(result.tasks),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "untuned_ms": timed["untuned"]["median_ms"], "tuned_ms": timed["ours"]["median_ms"],
        "onnxruntime_ms": timed["onnxruntime"]["median_ms"],
        # tuned over untuned and each over onnxruntime, round by round (runtime.timing.paired_ratio)
        "paired": {"tuned/untuned": paired_ratio(timed["ours"], timed["untuned"]),
                   "tuned/ort": timed["paired"]["ours"], "untuned/ort": timed["paired"]["untuned"]},
        # the model check's estimate (median readings of the programs the model runs), else the least readings
        "estimated_ms": check.estimated_ms if check and check.estimated_ms else result.estimated_latency() * 1e3,
        "kept": len(check.kept) if check else None, "reverted": len(check.reverted) if check else None,
        "max_rel_error": max(e["max_rel"] for e in timed["outputs"].values()),
        "agree": all(e["passed"] for e in timed["outputs"].values()),
        "model_check": None if check is None else {
            "untuned_ms": check.untuned_ms, "tuned_ms": check.tuned_ms, "paired_ratio": check.paired,
            "all_reverted": check.model_reverted},
        "per_task": task_rows(result, check),
    }


def task_rows(result, check) -> list[dict]:
    """Per task: what the tuner measured (its default's cost and its best, ms, flushed caches) against what the
    model check's profile read inside the model (untuned and tuned program, ms per call), and the verdict: the
    figures to see where the tuner's estimate and the model disagree."""
    kept = set(check.kept) if check else set()
    rows = []
    for t in result.tasks:
        in_model = check.task_ms.get(t.key) if check else None
        rows.append({
            "task": t.name, "key": t.key, "weight": t.weight, "trials": result.trials_per_task.get(t.key, 0),
            "default_ms": 1e3 * result.default.get(t.key, float("nan")),
            "best_ms": 1e3 * result.best.get(t.key, float("nan")),
            "in_model_untuned_ms": None if in_model is None else in_model[0] / t.weight,
            "in_model_tuned_ms": None if in_model is None else in_model[1] / t.weight,
            "kept": t.key in kept})
    return rows


def format_table(rows: list[dict]) -> str:
    """Medians in ms; tuned/untuned < 1: tuning paid; the ratios to onnxruntime before and after; "paired": tuned
    over untuned round by round with its 90% interval (rows measured before it was kept show "-")."""
    head = (f"{'model':<18} {'min':>4} {'trials':>6} {'untuned':>8} {'tuned':>8} {'ort':>8} {'tuned/untuned':>13} "
            f"{'paired':>19} {'untuned/ort':>11} {'tuned/ort':>9} {'estimate':>8}  accuracy")
    lines = [head, "-" * len(head)]
    for r in rows:
        p = (r.get("paired") or {}).get("tuned/untuned")
        paired = format_paired(p) if p else "-"
        lines.append(
            f"{r['model']:<18} {r['minutes']:>4g} {r['trials']:>6} {r['untuned_ms']:>8.3f} {r['tuned_ms']:>8.3f} "
            f"{r['onnxruntime_ms']:>8.3f} {r['tuned_ms'] / r['untuned_ms']:>13.3f} {paired:>19} "
            f"{r['untuned_ms'] / r['onnxruntime_ms']:>11.3f} {r['tuned_ms'] / r['onnxruntime_ms']:>9.3f} "
            f"{r['estimated_ms']:>8.3f}  {r['max_rel_error']:.1e}{'' if r['agree'] else ' DISAGREE'}")
    return "\n".join(lines)


def load_rows(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["model"]: r for r in json.load(f)}


def save_rows(path: str, rows: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(list(rows.values()), f, indent=1, default=float)
    os.replace(tmp, path)  # a run killed while writing leaves the previous file whole


def main(argv: list[str] | None = None, params: dict | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.payoff", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="folder of .onnx files (python -m models --all --out DIR)")
    p.add_argument("--out", required=True, help="folder for the records (one .db per model) and payoff.json")
    p.add_argument("--minutes", type=float, default=15.0, help="tuning time per model (default 15)")
    p.add_argument("--trials", type=int, help="or stop tuning a model after this many measured programs")
    p.add_argument("--models", help="comma-separated names (default: every .onnx in the folder)")
    p.add_argument("--force", action="store_true", help="re-tune and re-time models already in payoff.json")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30, help="timed runs per engine (default 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--block", type=int, default=BLOCK_RUNS, help="consecutive runs per engine turn")
    args = p.parse_args(argv)
    if args.minutes <= 0:
        p.error(f"--minutes must be positive, got {args.minutes}")
    paths = suite_paths(args.directory, args.models.split(",") if args.models else None)
    os.makedirs(args.out, exist_ok=True)
    table = os.path.join(args.out, "payoff.json")
    rows = load_rows(table)
    print(f"threads {args.threads}; " + describe_timing("steady", args.repeat, args.warmup, args.block), flush=True)
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        if name in rows and not args.force:
            print(f"{name}: already in {table} (--force to redo)", file=sys.stderr, flush=True)
            continue
        print(f"== {name}: tuning {args.minutes:g} min", file=sys.stderr, flush=True)
        row = payoff_row(path, os.path.join(args.out, name + ".db"), args.minutes, args.threads,
                         args.repeat, args.warmup, args.block, args.trials, params)
        # each row is measured by its own run (a suite spans sessions): each says where and how; "date" stays the
        # start of its tuning
        rows[name] = {**provenance(command_line("python -m relayish_tools.bench.payoff", argv)), **row}
        save_rows(table, rows)
        print(format_table([rows[name]]).splitlines()[-1], file=sys.stderr, flush=True)
    print(format_table(list(rows.values())))
    return 0 if all(r["agree"] for r in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

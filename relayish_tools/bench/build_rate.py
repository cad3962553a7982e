"""Candidate build throughput: how many of the tuner's candidate programs this machine builds (and measures) a minute.

    python -m relayish_tools.bench.build_rate MODEL... [--tasks 16] [--per-task 8] [--seed 0] [--workers 2]
        [--measure] [--json FILE [--label before]]

A fixed, seeded set of candidates: --tasks tasks drawn (seeded) from the models' tuning tasks (tuning.tune.
model_tasks), and per task its default schedule and --per-task programs of the three generations' search spaces
in turn (Ansor sketches and mutations, MetaSchedule replays, AutoTVM configurations: bench.pretrain.
sample_programs, the cost model's dataset sampler). The same arguments give the same candidates on any version, so
that two runs on one machine compare builds.

build: every task's candidates through the tuner's own build phase (tuning.measure.build_candidates: the worker
pool, its watchdog and crash handling), timed on the wall clock: programs per minute, the errors (timeouts,
refusals) by kind, and the workers' CPU seconds per build step (tuning/build.py PHASES) summed over candidates;
programs_per_worker_minute divides by those (a timed-out build counted as timeout_s), which other work on a shared
machine disturbs less than the wall clock.
--measure: then the whole of tuning.measure.measure with the tuner's settings (TUNE_PARAMS: cold caches, outputs
checked), timed the same way; each candidate's measured cost is kept so that two versions' kernels can be compared.

--json FILE writes the report (provenance: command line, machine, versions); with --label it goes under that key
of FILE, the other keys kept (docs/data/build_rate.json holds "before" and "after"). Run under the CPU lock.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

from tuning import build as candidate_build
from tuning.build import PHASES
from tuning.measure import build_candidates, measure
from tuning.pool import WorkerPool
from tuning.tune import TUNE_PARAMS, model_tasks

from .pretrain import sample_programs
from .report import command_line, provenance


def candidate_set(models: list[str], n_tasks: int, per_task: int, seed: int) -> list[tuple]:
    """[(task, [schedules])]: n_tasks tasks drawn with `seed` from the models' tasks (ordered by key first, so
    that the draw does not depend on the order models list them), and each one's sampled programs."""
    rng = random.Random(seed)
    tasks = sorted(model_tasks(models), key=lambda t: t.key)
    chosen = sorted(rng.sample(tasks, min(n_tasks, len(tasks))), key=lambda t: t.key)
    return [(task, sample_programs(task, per_task, rng)) for task in chosen]


def error_kind(error: str) -> str:
    """"build timed out", "build refused", "build error", "wrong result"... : an error's text up to its first
    colon or number."""
    return re.split(r"[:(0-9]", error, maxsplit=1)[0].strip()


def _rate(n: int, seconds: float) -> float:
    return round(60.0 * n / seconds, 1) if seconds > 0 else None


def time_builds(cands: list[tuple], pool: WorkerPool, timeout_s: float, log=print) -> dict:
    """The build phase of every task's candidates, task after task, on the wall clock."""
    phases, errors, n, ok, seconds = collections.Counter(), collections.Counter(), 0, 0, 0.0
    for task, schedules in cands:
        t0 = time.perf_counter()
        outputs = build_candidates(task, schedules, executor=pool, timeout_s=timeout_s)
        dt = time.perf_counter() - t0
        seconds += dt
        n += len(outputs)
        ok += sum(b.lib is not None for b in outputs)
        for b in outputs:
            phases.update(getattr(b, "phases", None) or {})  # (a version before phases: none)
            if b.error:
                errors[error_kind(b.error)] += 1
        log(f"  build {task.name}: {len(outputs)} programs in {dt:.1f} s")
    worker_s = sum(phases[p] for p in PHASES)
    timeouts = sum(v for k, v in errors.items() if "timed out" in k)  # each held a worker for timeout_s
    return {"programs": n, "built": ok, "seconds": round(seconds, 2), "programs_per_minute": _rate(n, seconds),
            "built_per_minute": _rate(ok, seconds),
            "programs_per_worker_minute": _rate(n, worker_s + timeouts * timeout_s) if worker_s else None,
            "errors": dict(errors),
            "phases_s": {p: round(phases[p], 2) for p in PHASES},
            "phases_share": {p: round(phases[p] / worker_s, 3) for p in PHASES} if worker_s else {},
            "remembered_objects": phases.get("remembered", 0), "reused_builds": phases.get("reused", 0)}


def time_measure(cands: list[tuple], pool: WorkerPool, log=print) -> dict:
    """measure() of every task's candidates with the tuner's settings, on the wall clock; the costs kept."""
    p = TUNE_PARAMS
    errors, costs, n, ok, seconds = collections.Counter(), {}, 0, 0, 0.0
    for task, schedules in cands:
        t0 = time.perf_counter()
        results = measure(task, schedules, number=p["num_measure_number"], repeat=p["num_measure_repeat"],
                          timeout_s=p["timeout_s"], executor=pool, flush_cache=p["cache_flush"])
        dt = time.perf_counter() - t0
        seconds += dt
        n += len(results)
        ok += sum(r.ok for r in results)
        for r in results:
            if r.error:
                errors[error_kind(r.error)] += 1
        costs[task.key] = [r.cost * 1e6 if r.ok else None for r in results]
        log(f"  measure {task.name}: {len(results)} programs in {dt:.1f} s")
    return {"programs": n, "measured": ok, "seconds": round(seconds, 2), "programs_per_minute": _rate(n, seconds),
            "errors": dict(errors), "costs_us": costs}


def compare_costs(a: dict, b: dict) -> dict | None:
    """How the measured costs of the same candidates in two reports compare: the median and the spread of their
    ratios b / a over the candidates both measured (None when there are none)."""
    ratios = [y / x for key in a if key in b for x, y in zip(a[key], b[key]) if x and y]
    if not ratios:
        return None
    ratios.sort()
    return {"candidates": len(ratios), "median_ratio": round(statistics.median(ratios), 3),
            "p10_ratio": round(ratios[len(ratios) // 10], 3), "p90_ratio": round(ratios[(9 * len(ratios)) // 10], 3)}


def source_version() -> str | None:
    """The git commit of the tree this package runs from (with "+changes" when its files differ), or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def run(args, argv=None, log=print) -> dict:
    t0 = time.perf_counter()
    cands = candidate_set(args.models, args.tasks, args.per_task, args.seed)
    log(f"{sum(len(s) for _, s in cands)} candidates of {len(cands)} tasks ({time.perf_counter() - t0:.1f} s to "
        "sample)")
    report = {"benchmark": "build_rate", **provenance(command_line("python -m relayish_tools.bench.build_rate", argv)),
              "models": [os.path.basename(m) for m in args.models], "tasks": [t.name for t, _ in cands],
              "version": source_version(), "seed": args.seed, "per_task": args.per_task, "workers": args.workers,
              "timeout_s": args.timeout}
    forget = getattr(candidate_build, "forget_builds", lambda: None)  # (versions without a driver's cache)
    with WorkerPool(args.workers) as pool:
        forget()
        pool.executor  # started (and warm) before the clock runs
        report["build"] = time_builds(cands, pool, args.timeout, log)
    if args.measure:
        with WorkerPool(args.workers) as pool:  # new workers: nothing built in them yet
            forget()  # nor in this process: the measure pass builds every candidate again
            pool.executor
            report["build_measure"] = time_measure(cands, pool, log)
    return report


def write_report(report: dict, path: str, label: str | None) -> None:
    """Write report to path, or under report[label] of the JSON already there (its other keys kept); with both
    "before" and "after" measured, their comparison goes in too."""
    if label is None:
        data = report
    else:
        data = json.load(open(path)) if os.path.exists(path) else {}
        data[label] = report
        before, after = data.get("before"), data.get("after")
        if before and after:
            data["speedup"] = {k: round(after[k]["programs_per_minute"] / before[k]["programs_per_minute"], 2)
                               for k in ("build", "build_measure") if k in before and k in after}
            if "build_measure" in before and "build_measure" in after:
                data["costs_after_over_before"] = compare_costs(before["build_measure"]["costs_us"],
                                                                after["build_measure"]["costs_us"])
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relayish_tools.bench.build_rate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="ONNX model files (their tasks are sampled)")
    ap.add_argument("--tasks", type=int, default=16, help="tasks drawn from the models' tasks (default 16)")
    ap.add_argument("--per-task", type=int, default=8, help="programs sampled per task, beside its default (8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="build and measure worker processes (default 2)")
    ap.add_argument("--timeout", type=float, default=TUNE_PARAMS["timeout_s"], help="per build job, as the tuner's")
    ap.add_argument("--measure", action="store_true", help="also time build + measure (tuning.measure.measure)")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--label", help="the key of FILE to write the report under (e.g. before, after)")
    args = ap.parse_args(argv)
    report = run(args, argv)
    b = report["build"]
    print(f"build: {b['programs']} programs in {b['seconds']:.1f} s = {b['programs_per_minute']} programs/min "
          f"({b['built']} built, errors {b['errors']})")
    print("  worker seconds per step: " + ", ".join(f"{k} {v:.1f}" for k, v in b["phases_s"].items()))
    if "build_measure" in report:
        m = report["build_measure"]
        print(f"build + measure: {m['programs']} programs in {m['seconds']:.1f} s = {m['programs_per_minute']} "
              f"programs/min ({m['measured']} measured, errors {m['errors']})")
    if args.json:
        write_report(report, args.json, args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())

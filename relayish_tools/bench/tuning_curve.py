"""Tuning efficiency on a model the cost model never saw: measured model latency against tuning time, for the tuner
starting from an empty cost model (cold), from the pretrained one shipped with the package, and for the zero-shot
schedules that measure nothing.

    python -m relayish_tools.bench.tuning_curve MODEL [--budget 600] [--checkpoints 30,60,120,240,420]
        [--algorithms] [--start hand-written|naive] [--work DIR] [--threads 2] [--repeat 30] [--json FILE]
        [--reuse REPORT [--retune pretrained]]

One tuning run per starting model (tuning.tune.tune_model with the budget, cost_model="cold" and "pretrained",
the end-of-run model check off: it times models, which is what this bench does itself). A point of a curve at
t seconds is the model compiled with the records that run had measured t seconds after it started (the records
database cut at that time), so one run gives the whole curve; its end is every record, the final re-measurement
of each task's best programs included, at the run's whole wall time. Every compiled model and onnxruntime are
timed in one process, taking turns in steady-state blocks (bench.compare), the untuned model among them.
--start naive: every run, the zero-shot schedules and every compiled model start from the naive loop nests
instead of the hand-written schedules (template-free: the search's whole work shows; the hand-written model is
then timed too, as the mark to reach). --reuse REPORT: the tuning runs of an earlier report, whose databases are still
in --work, instead of tuning again (the zero-shot schedules predicted and every point compiled and timed anew);
with --retune START, that start's run is tuned again (e.g. the pretrained tuner after a change to it, beside the same
cold run).

The figures of issue 33: gain(x) = (untuned - x) / (untuned - cold at the end of its budget); zero-shot's gain,
the pretrained tuner's gain at 120 s, and the first checkpoint where the pretrained run reaches 90% of the cold
run's gain. The cost model's training data must not contain the model's architecture (the shipped model's
metadata lists the models it was trained on: the JSON repeats them). Run it under the CPU lock: the tuner measures
kernels, and the timing that follows needs a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

from .report import command_line, provenance

DEFAULT_CHECKPOINTS = (30, 60, 120, 240, 420)
STARTS = ("cold", "pretrained")


def cut_records(db: str, until: float, out: str) -> int:
    """Copy records database `db` to `out` keeping only the records measured at or before `until` (a time.time()
    value) and no model-check verdicts; returns the records kept."""
    shutil.copyfile(db, out)
    with sqlite3.connect(out) as con:
        con.execute("DELETE FROM records WHERE measured_at > ?", (until,))
        con.execute("DELETE FROM verdicts")
        return con.execute("SELECT COUNT(*) FROM records").fetchone()[0]


def tune_run(model: str, db: str, start: str, budget: float, algorithms: bool, defaults: str, log=print) -> dict:
    """One tuning run into records database `db` (emptied first); its start time (time.time()), wall seconds and
    database."""
    from tuning.tune import tune_model
    for path in (db, db + "-wal", db + "-shm"):
        if os.path.exists(path):
            os.remove(path)
    t0 = time.time()
    result = tune_model(model, db, time_budget_s=budget, cost_model=start, check_model=False, algorithms=algorithms,
                        progress=sys.stderr.isatty(), start=defaults)
    wall = time.time() - t0
    log(f"{start}: {result.trials} programs measured in {wall:.0f} s")
    return {"start": start, "db": db, "started_at": t0, "wall_s": round(wall, 1), "trials": result.trials}


MIN_GAIN = 0.05  # a gain below 5% of the untuned time is noise: one model's two instances in one process differ 5-15%


def gain(untuned: float, x: float, reference: float) -> float | None:
    """The share of the reference's gain over untuned that x gets (1: as much, 0: none, < 0: slower than untuned);
    None when the reference itself gains less than MIN_GAIN of the untuned time (no gain to share)."""
    return (untuned - x) / (untuned - reference) if untuned - reference >= MIN_GAIN * untuned else None


def curve(model: str, budget: float, checkpoints: list[float], work: str, threads: int, repeat: int,
          algorithms: bool, defaults: str = "hand-written", log=print, reuse: list | None = None,
          retune: tuple = ()) -> dict:
    """The report (module doc). reuse: the runs of an earlier report (its "runs", their databases still there),
    taken instead of tuning again, except those of the starts in `retune`, which are tuned again."""
    from compiler import compile_model
    from tuning.pretrained import load_cost_model
    from tuning.zero_shot import predict_schedules

    from .compare import compare_with_onnxruntime

    if reuse is not None:
        runs = [dict(run) for run in reuse]
        missing = [run["db"] for run in runs if run["start"] not in retune and not os.path.exists(run["db"])]
        if missing or [run["start"] for run in runs] != list(STARTS):
            raise ValueError(f"--reuse: the report's runs must be {list(STARTS)} with their databases; missing "
                             f"{missing}")
    os.makedirs(work, exist_ok=True)
    stem = Path(model).stem
    shipped = load_cost_model(None)
    trained_on = (shipped.metadata or {}).get("trained_on", {}) if shipped is not None else {}
    if stem in trained_on.get("models", []):
        log(f"warning: the shipped cost model was trained on {stem}: it is not held out")
    t0 = time.perf_counter()
    predicted = predict_schedules(model, start=defaults)
    predict_s = time.perf_counter() - t0
    if reuse is None:
        runs = [{"start": start} for start in STARTS]
    runs = [tune_run(model, os.path.join(work, f"{stem}-{run['start']}.db"), run["start"], budget, algorithms,
                     defaults, log) if reuse is None or run["start"] in retune else run for run in runs]

    engines, points = [], []  # (name, module), and what each timed engine is
    untuned = compile_model(model, num_threads=threads, default_schedules=defaults)
    zero_shot = compile_model(model, num_threads=threads, records=predicted, cache=False, default_schedules=defaults)
    engines.append(("zero_shot", zero_shot))
    if defaults != "hand-written":
        engines.append(("hand_written", compile_model(model, num_threads=threads)))
    for run in runs:
        for t in [c for c in checkpoints if c < run["wall_s"]] + [run["wall_s"]]:
            cut = os.path.join(work, f"{stem}-{run['start']}-{round(t)}s.db")
            kept = cut_records(run["db"], run["started_at"] + t, cut)
            name = f"{run['start']}@{round(t)}s"
            engines.append((name, compile_model(model, num_threads=threads, records=cut, cache=False,
                                                default_schedules=defaults)))
            points.append({"start": run["start"], "seconds": t, "records": kept, "engine": name})
            log(f"compiled {name} ({kept} records)")
    result = compare_with_onnxruntime(untuned, model, threads=threads, repeat=repeat,
                                      extra_engines=[(n, lambda x, m=m: m.run(None, x)) for n, m in engines])
    ms = {name: result[name]["median_ms"] for name, _ in engines}
    ms["untuned"], ms["onnxruntime"] = result["ours"]["median_ms"], result["onnxruntime"]["median_ms"]
    cold_end = ms[f"cold@{round(runs[0]['wall_s'])}s"]
    for p in points:
        p["median_ms"] = ms[p["engine"]]
        p["gain"] = gain(ms["untuned"], p["median_ms"], cold_end)
    pretrained = [p for p in points if p["start"] == "pretrained"]
    at_120 = [p for p in pretrained if p["seconds"] <= 120]
    reach_90 = next((p["seconds"] for p in pretrained if p["gain"] is not None and p["gain"] >= 0.9), None)
    summary = {"untuned_ms": ms["untuned"], "onnxruntime_ms": ms["onnxruntime"], "cold_end_ms": cold_end,
               "min_gain": MIN_GAIN,
               "zero_shot_ms": ms["zero_shot"], "zero_shot_gain": gain(ms["untuned"], ms["zero_shot"], cold_end),
               "zero_shot_tasks": f"{len(predicted.chosen)} of {len(predicted.report)}",
               "predict_s": round(predict_s, 1),
               "pretrained_gain_at_120s": at_120[-1]["gain"] if at_120 else None,
               "pretrained_reaches_90pct_at_s": reach_90,
               "hand_written_ms": ms.get("hand_written")}
    log(json.dumps(summary, indent=1))
    return {"model": stem, "budget_s": budget, "algorithms": algorithms, "start": defaults, "threads": threads,
            "repeat": repeat,
            "cost_model_trained_on": trained_on, "runs": runs, "points": points, "summary": summary,
            "timing": {k: result[k] for k in ("timing", "block", "idle_gap_s")},
            "outputs_agree": result["outputs"]}


def format_rows(report: dict) -> str:
    s = report["summary"]
    lines = [f"{report['model']}: untuned {s['untuned_ms']:.2f} ms, onnxruntime {s['onnxruntime_ms']:.2f} ms, "
             f"zero-shot {s['zero_shot_ms']:.2f} ms (gain {_pct(s['zero_shot_gain'])} of cold's end)"]
    for p in report["points"]:
        lines.append(f"  {p['start']:<10} {p['seconds']:>6.0f} s  {p['records']:>5} records  {p['median_ms']:7.2f} ms  "
                     f"gain {_pct(p['gain'])}")
    return "\n".join(lines)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.tuning_curve",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--budget", type=float, default=600.0, help="seconds of each tuning run")
    p.add_argument("--checkpoints", default=",".join(map(str, DEFAULT_CHECKPOINTS)),
                   help="seconds into each run at which the model is compiled and timed (and at its end)")
    p.add_argument("--algorithms", action="store_true", help="tune with --algorithms (relayish tune)")
    p.add_argument("--start", choices=("hand-written", "naive"), default="hand-written",
                   help="what each task starts from (and keeps untuned): relayish tune --start")
    p.add_argument("--work", default="tuning-curve", help="directory of the records databases")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--json", help="write the report with provenance (docs/data/tuning_curve.json)")
    p.add_argument("--reuse", metavar="REPORT",
                   help="take the tuning runs of an earlier report (its records databases still in place) instead "
                        "of tuning again: zero-shot is predicted and every point compiled and timed anew")
    p.add_argument("--retune", choices=STARTS, action="append", default=[],
                   help="with --reuse: tune this start's run again (repeatable)")
    args = p.parse_args(argv)
    if args.retune and not args.reuse:
        p.error("--retune needs --reuse REPORT (the runs it does not tune again)")
    if args.budget <= 0:
        p.error("--budget must be > 0")
    try:
        checkpoints = sorted(float(c) for c in args.checkpoints.split(",") if c.strip())
    except ValueError:
        p.error(f"--checkpoints: expected seconds separated by commas, got {args.checkpoints!r}")
    reuse = None
    if args.reuse:
        with open(args.reuse) as f:
            reuse = json.load(f)["runs"]
    report = curve(args.model, args.budget, checkpoints, args.work, args.threads, args.repeat, args.algorithms,
                   args.start, reuse=reuse, retune=tuple(args.retune))
    print(format_rows(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "tuning_curve",
                       **provenance(command_line("python -m relayish_tools.bench.tuning_curve", argv)), **report},
                      f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Template-free tuning, judged as Ansor was: tune from the naive loop nests, compare with the hand-written schedules.

    python -m relayish_tools.bench.template_free models/resnet18.onnx --time-budget 900 --records naive.db --plot curve.png

1. Every task's hand-written default schedule is measured as the tuner measures candidates (cold caches, same
   number and repeat), in as many rounds as the tuner re-measures its best programs (the least reading kept):
   the hand-written level of the tuner's estimate (sum over kernel calls of their cost).
2. tune_model(start="naive") for the budget: each task starts from its plain loop nest (no default schedule is
   measured or seeded), and the search has sketches, annotation, evolution and the cost model to find programs.
   Its curve is the estimate after every round.
3. End to end, in steady state (blocks of runs per engine, alternating with idle gaps, one process): the model
   compiled with the hand-written defaults, with the naive loop nests, and with the records on the naive
   defaults (compile_model(records=..., default_schedules="naive"), so that no hand-written schedule helps).
   Printed: each median and tuned / hand-written (the goal: <= 1.1 within 15 minutes), also paired by round.

    python -m relayish_tools.bench.template_free models/resnet18.onnx --retime run1.db run2.db

times the models that earlier runs' records give, side by side with the hand-written one in one process: a run's
own end-to-end ratio moves with the phase of a shared machine (four runs' records read 1.20x, 1.13x, 1.28x and
1.12x paired, timed together, where their runs had printed 1.11x, 1.07x, 1.33x and 1.15x).

The plot shows the estimate against tuning time, with the hand-written and naive estimates as lines.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from compiler import compile_model
from compiler.codegen import host_target, vector_width
from compiler.default_schedule import default_schedule
from compiler.records import RecordsError, RecordsReader
from runtime.accuracy import DEFAULT_TOLERANCE, relative_error
from runtime.timing import Engine, describe_timing, format_paired, paired_ratio, time_blocks
from tuning.measure import measure
from tuning.report import require_matplotlib
from tuning.tune import TUNE_PARAMS, model_tasks, tune_model

from .report import command_line, provenance


def hand_written_costs(tasks, params=TUNE_PARAMS) -> dict:
    """Task key -> the hand-written default schedule's cost (s), measured as the tuner measures a candidate and,
    as the tuner re-measures its best programs at the end, in params["remeasure_rounds"] rounds over the tasks,
    keeping each one's least reading (a single reading once put a Winograd kernel at 3x its time in the model)."""
    costs = {}
    for _ in range(max(1, int(params.get("remeasure_rounds", 1)))):
        for task in tasks:
            result, = measure(task, [default_schedule(task.initial_state(), vector_width())],
                              number=params["num_measure_number"], repeat=params["num_measure_repeat"],
                              timeout_s=params["timeout_s"], flush_cache=params["cache_flush"])
            costs[task.key] = min(costs.get(task.key, float("inf")), result.cost)
    return costs


def estimate(tasks, costs: dict) -> float:
    """Sum over kernel calls of their task's cost (s): the tuner's estimate of the model."""
    return float(sum(t.weight * costs.get(t.key, np.nan) for t in tasks))


def end_to_end(model, records: str, repeat: int) -> dict:
    """Steady-state timings (time_blocks' stats: median_ms, rounds_ms) of the model with hand-written defaults,
    naive loop nests, and tuned from naive."""
    return timed_builds(model, {"hand-written": {}, "naive": {"default_schedules": "naive"},
                                "tuned from naive": {"records": records, "default_schedules": "naive"}}, repeat)


def timed_builds(model, builds: dict, repeat: int) -> dict:
    """builds: name -> compile_model's keyword arguments, the first the reference. Each build is compiled and
    checked against the reference's outputs, then all are timed in one process (time_blocks' stats by name)."""
    modules = {name: compile_model(model, **kwargs) for name, kwargs in builds.items()}
    reference = next(iter(modules))
    feed = modules[reference].random_inputs(0)
    ref = modules[reference].run(None, feed)
    for name, m in modules.items():  # every build computes the model (the naive one slowly)
        for a, b in zip(m.run(None, feed), ref):
            if relative_error(a, b) > DEFAULT_TOLERANCE:
                raise AssertionError(f"{name} disagrees with the {reference} build: max|diff| / max|ref| "
                                     f"{relative_error(a, b):.2e} > {DEFAULT_TOLERANCE}")
    engines = [Engine(name, (lambda m=m: m.run(None, feed))) for name, m in modules.items()]
    return time_blocks(engines, repeat, warmup=3)  # (describe_timing in main says so)


def retime(model, databases: list, repeat: int) -> int:
    """Time the hand-written model and the model tuned from naive by each database, side by side; print the
    medians and each one's paired ratio over the hand-written model."""
    builds = {"hand-written": {}}
    for i, db in enumerate(databases):
        builds[f"{i}: {db}"] = {"records": db, "default_schedules": "naive"}
    stats = timed_builds(model, builds, repeat)
    print(describe_timing("steady", repeat, 3))
    hand = stats["hand-written"]
    print(f"hand-written {hand['median_ms']:.3f} ms")
    for name in list(builds)[1:]:
        paired = paired_ratio(stats[name], hand)
        print(f"{name}: {stats[name]['median_ms']:.3f} ms, {stats[name]['median_ms'] / hand['median_ms']:.2f}x "
              f"the hand-written model (paired {format_paired(paired, 2)} over {paired['rounds']} rounds)")
    return 0


def plot(curve, hand_ms: float, naive_ms: float, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=120)
    pts = [(t, est * 1e3) for _, t, est in curve if np.isfinite(est)]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], drawstyle="steps-post", lw=1.3, label="tuned from naive (estimate)")
    ax.axhline(hand_ms, color="tab:green", ls="--", lw=1, label=f"hand-written defaults ({hand_ms:.2f} ms)")
    ax.axhline(1.1 * hand_ms, color="tab:green", ls=":", lw=1, label="1.1 x hand-written")
    ax.set_yscale("log")
    ax.set_xlabel("tuning time (s)")
    ax.set_ylabel("estimated latency (ms, log)")
    ax.set_title(f"{title}; naive loop nests: {naive_ms:.0f} ms", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None, params: dict | None = None) -> int:
    """params: tune_model's (tests make the rounds small)."""
    ap = argparse.ArgumentParser(prog="python -m relayish_tools.bench.template_free", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--time-budget", type=float, default=900.0, help="seconds of tuning (default 900)")
    ap.add_argument("--trials", type=int, default=None, help="or a number of measured programs")
    ap.add_argument("--records", help="records database (a new file: the run starts from nothing); required "
                    "unless --retime")
    ap.add_argument("--retime", nargs="+", metavar="DB",
                    help="tune nothing: time the model tuned from naive by each of these databases (earlier runs' "
                         "--records) side by side with the hand-written one, in one process, and print each "
                         "one's paired ratio over it (runs compared in one process, not across their own timings)")
    ap.add_argument("--repeat", type=int, default=50, help="timed runs per model end to end (default 50: 10 "
                    "rounds of blocks for the paired ratio)")
    ap.add_argument("--plot", metavar="PNG")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--no-cache-flush", action="store_true",
                    help="time candidates (and the hand-written kernels) back to back, as relayish tune's flag")
    args = ap.parse_args(argv)
    if args.retime:
        missing = [db for db in args.retime if not os.path.isfile(db)]
        if missing:
            ap.error(f"--retime: no records database at {', '.join(missing)}")
        for db in args.retime:
            try:
                RecordsReader(db, host_target()).close()
            except RecordsError as e:
                ap.error(f"--retime: {e}")
        return retime(args.model, args.retime, args.repeat)
    if not args.records:
        ap.error("--records DB is required (or --retime DB ... to time earlier runs' records)")
    if args.no_cache_flush:
        params = dict(params or {}, cache_flush=False)
    if args.plot:
        require_matplotlib()  # now, not after the whole budget
    tasks = model_tasks(args.model)
    print(f"measuring the hand-written default of {len(tasks)} tasks", file=sys.stderr)
    hand = hand_written_costs(tasks, dict(TUNE_PARAMS, **(params or {})))
    budget = {"trials": args.trials} if args.trials else {"time_budget_s": args.time_budget}
    result = tune_model(args.model, args.records, start="naive", params=params, **budget)
    naive_est = estimate(result.tasks, result.default)
    hand_est, tuned_est = estimate(tasks, hand), estimate(result.tasks, result.best)
    stats = end_to_end(args.model, args.records, args.repeat)
    ms = {name: s["median_ms"] for name, s in stats.items()}
    # the ratio of medians moves with the machine's phase (tf11's model read 1.07x at its run's end, 1.13x and 1.20x
    # in two later timings); the paired ratio compares blocks that ran side by side
    paired = paired_ratio(stats["tuned from naive"], stats["hand-written"])
    print(describe_timing("steady", args.repeat, 3))
    print(f"estimate (sum of kernel costs): hand-written {hand_est * 1e3:.3f} ms, naive {naive_est * 1e3:.1f} ms, "
          f"tuned from naive {tuned_est * 1e3:.3f} ms ({tuned_est / hand_est:.2f}x hand-written) after "
          f"{result.trials} programs in {result.seconds:.0f} s")
    print("end to end: " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items())
          + f"; tuned from naive / hand-written = {ms['tuned from naive'] / ms['hand-written']:.2f} (paired "
          f"{format_paired(paired, 2)} over {paired['rounds']} rounds)")
    if args.plot:
        plot(result.curve, hand_est * 1e3, naive_est * 1e3, args.plot,
             f"template-free tuning, {args.model.rsplit('/', 1)[-1]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "template_free", "model": args.model,
                       **provenance(command_line("python -m relayish_tools.bench.template_free", argv)),
                       "estimate_ms": {"hand-written": hand_est * 1e3, "naive": naive_est * 1e3,
                                       "tuned": tuned_est * 1e3},
                       "end_to_end_ms": ms, "paired_tuned_over_hand_written": paired,
                       "trials": result.trials, "seconds": result.seconds,
                       "curve": [[n, t, est * 1e3] for n, t, est in result.curve]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

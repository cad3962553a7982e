"""AutoTVM transfer learning on real tasks: does a model trained on one network's records find good programs for
another network's tasks in fewer trials than a cold model?

    python -m relayish_tools.bench.transfer --history resnet18_xgb.db --model suite/mobilenet_v2.onnx [--tasks 6] [--trials 48]

The history is a records database an AutoTVM tuner wrote (`relayish tune-compare ... --strategies autotvm-xgb`
or log_to_records): its configurations of a template train XGBTuner's global model (load_history). For each of
the `--tasks` largest tasks of `--model` that the template fits, and each seed, a cold XGBTuner and a warm one
(history loaded) tune `--trials` configurations in batches of `--batch`. A task's target is its best cost found
by any run, plus 5%; printed per task: the trials each run needed to reach the target (inf: never), and their
mean over tasks and seeds. Costs are measured as AutoTVM measures (warm caches, the least of 3 repeats).
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from tuning.autotvm import XGBTuner, find_template, measure_option
from tuning.measure import WorkerPool
from tuning.tune import model_tasks


def curve(tuner, trials: int, option: dict) -> list[float]:
    """Best cost so far after each trial."""
    best, out = math.inf, []

    def record(t, inputs, results):
        nonlocal best
        for r in results:
            best = min(best, r.cost)
            out.append(best)
    tuner.tune(trials, option, callbacks=[record])
    return out


def trials_to(points: list[float], target: float) -> float:
    return next((k + 1 for k, c in enumerate(points) if c <= target), math.inf)


def run(history: str, model: str, template: str, n_tasks: int, trials: int, batch: int, seeds: int, log=print):
    tasks = [t for t in model_tasks(model) if (tp := find_template(t)) is not None and tp.name == template]
    tasks = sorted(tasks, key=lambda t: -t.flops * t.weight)[:n_tasks]
    if not tasks:
        raise SystemExit(f"no task of {model} fits the AutoTVM template {template!r}")
    rows = []
    with WorkerPool(2) as pool:
        option = measure_option(batch_size=batch, executor=pool)
        for task in tasks:
            for seed in range(seeds):
                cold = curve(XGBTuner(task, seed=seed), trials, option)
                warm_tuner = XGBTuner(task, seed=seed)
                warm_tuner.load_history(history)
                warm = curve(warm_tuner, trials, option)
                target = 1.05 * min(cold + warm)
                rows.append((task.name, seed, trials_to(cold, target), trials_to(warm, target), min(cold), min(warm)))
                log(f"{task.name[:44]:<44} seed {seed}: cold reaches best+5% after {rows[-1][2]} trials, "
                    f"warm after {rows[-1][3]} (best {min(cold) * 1e6:.1f} / {min(warm) * 1e6:.1f} us)")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relayish_tools.bench.transfer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", required=True, help="records database with AutoTVM configurations")
    ap.add_argument("--model", required=True)
    ap.add_argument("--template", default="conv2d_nchwc")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args(argv)
    rows = run(args.history, args.model, args.template, args.tasks, args.trials, args.batch, args.seeds)
    cold = [r[2] for r in rows]
    warm = [r[3] for r in rows]
    cap = lambda xs: [min(x, args.trials + args.batch) for x in xs]  # never reached: counted as budget + 1 batch
    print(f"trials to reach each run's best + 5%, over {len(rows)} task x seed runs: cold mean "
          f"{np.mean(cap(cold)):.1f} (never: {sum(math.isinf(x) for x in cold)}), warm (history of "
          f"{args.history}) mean {np.mean(cap(warm)):.1f} (never: {sum(math.isinf(x) for x in warm)}); warm needed "
          f"fewer trials in {sum(w < c for c, w in zip(cold, warm))}, more in {sum(w > c for c, w in zip(cold, warm))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

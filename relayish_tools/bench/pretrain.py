"""The pretrained cost model (tuning.pretrained): its dataset of measured programs, its training, its judgement.

    python -m relayish_tools.bench.pretrain collect MODEL... --out data.db [--per-task 24] [--seed 0]
    python -m relayish_tools.bench.pretrain train data.db [-o FILE] [--hold-out NAME,...]
    python -m relayish_tools.bench.pretrain evaluate data.db --model FILE [--hold-out NAME,...]
    python -m relayish_tools.bench.pretrain zero-shot MODEL... --model FILE [--db data.db --hold-out ...] [--json F]

collect: every task of the models (the tuner's tasks: tuning.tune.model_tasks), and per task its default schedule
and programs of the three generations' search spaces in turn: Ansor (random annotations of the sketches and
mutations of the default's program), MetaSchedule (replays of the design spaces' traces with fresh decisions) and
AutoTVM (random configurations of the task's template, where one fits). Each is measured with the tuner's own
measurement (tuning.measure: built and timed in worker processes, cold caches, outputs checked) into a records
database; DB.json beside it says which models, on which CPU, when, how many programs and how long it took.
Interrupted, it resumes: tasks already in the database are skipped; a later collect into the same database adds
its models to it.

train: an XGBoostModel (tuning.cost_model) on every measured program of the models not held out (--hold-out:
model file stems, held out whole: an architecture, not a shape), written with its provenance (default:
tuning/data/cost_model.json.gz, the file the package ships). evaluate: the pairwise ranking accuracy of a model
on the tasks that only held-out models have, against a model trained on nothing (random scores: 0.5).
zero-shot: each model compiled untuned and with zero-shot schedules (tuning.zero_shot), both timed beside
onnxruntime in steady state (bench.compare): what the pretrained model gives with no measurement; with --db and
--hold-out, the held-out ranking accuracy goes into the JSON too (docs/benchmarks.md reads it).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from compiler.codegen import host_target, vector_width
from compiler.records import RecordStore, target_key
from compiler.schedule import ScheduleError
from compiler.backend import untuned_schedule
from tuning.annotate import derive_program, mutate, random_programs
from tuning.autotvm.templates import find_template
from tuning.cost_model import XGBoostModel, featurize, normalized_throughput, pairwise_accuracy, stack_programs
from tuning.measure import measure
from tuning.metaschedule.search import MetaScheduleSearch
from tuning.pool import WorkerPool
from tuning.pretrained import DEFAULT_PATH, save_cost_model, task_kind
from tuning.search import SearchSpace
from tuning.tune import TUNE_PARAMS, model_tasks

from .report import command_line, provenance

GENERATIONS = ("ansor", "ansor-mutation", "metaschedule", "autotvm")
# boosting rounds of the shipped model: every tuner round predicts thousands of programs through all of its trees
# (and trains more on top), so it stays smaller than a per-run model may grow (tuning.cost_model.NUM_ROUNDS)
PRETRAINED_ROUNDS = 100  # held-out accuracy 0.710 at 100 rounds, 0.710 at 200, 0.717 at 600 (148 KB against 786 KB)


# ---------------------------------------------------------------------------------------------- collect

def sample_programs(task, n: int, rng: random.Random) -> list:
    """The default schedule, then up to n programs drawn from the generations in turn, all different."""
    default = untuned_schedule(task, vector_width())
    initial = task.initial_state()
    space = SearchSpace.of(task)
    pools = {g: [] for g in GENERATIONS}
    pools["ansor"] = [s for _, s in random_programs(space.sketches, initial, n, rng)]
    own = derive_program(space.sketches, default, initial)
    for _ in range(n if own is not None else 0):
        try:
            prog = mutate(space.sketches, own, rng)
            pools["ansor-mutation"].append(_concretize(space, prog, initial))
        except ScheduleError:
            continue
    pools["metaschedule"] = [s for _, s in MetaScheduleSearch(task, strategy="replay",
                                                              seed=rng.randrange(2**31)).next_batch(n)]
    template = find_template(task)
    if template is not None:
        cfg_space = template.space(task)
        for _ in range(n):
            try:
                pools["autotvm"].append(template.instantiate(task, cfg_space.sample(rng)))
            except (ScheduleError, ValueError):
                continue
    out, seen = [default], {default.to_json()}
    for k in range(n):
        for g in GENERATIONS:
            if k < len(pools[g]) and len(out) <= n and pools[g][k].to_json() not in seen:
                seen.add(pools[g][k].to_json())
                out.append(pools[g][k])
    return out


def _concretize(space, prog, initial):
    from tuning.annotate import concretize
    return concretize(space.sketches[prog.sketch_id], prog, initial)


def collect(models: list[str], out: str, per_task: int, seed: int, log=print) -> dict:
    t0 = time.perf_counter()
    tasks = model_tasks(models)
    target = host_target()
    rng = random.Random(seed)
    measured = 0
    with RecordStore(out, run_id="pretrain-collect") as store, WorkerPool(2) as pool:
        for i, task in enumerate(tasks):
            if store.count(task.key, target):
                continue  # resumed: this task is in already
            schedules = sample_programs(task, per_task, rng)
            results = measure(task, schedules, number=TUNE_PARAMS["num_measure_number"],
                              repeat=TUNE_PARAMS["num_measure_repeat"], timeout_s=TUNE_PARAMS["timeout_s"],
                              executor=pool, flush_cache=TUNE_PARAMS["cache_flush"])
            store.add_results(task, target, schedules, results)
            measured += len(schedules)
            ok = sum(r.error is None for r in results)
            log(f"[{i + 1}/{len(tasks)}] {task.name}: {ok}/{len(schedules)} measured "
                f"({time.perf_counter() - t0:.0f} s)")
        total = store.count(None, target)
    sidecar = Path(out + ".json")
    before = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    paths = list(dict.fromkeys(before.get("models", []) + [str(Path(m).resolve()) for m in models]))
    meta = {**provenance(command_line("python -m relayish_tools.bench.pretrain", sys.argv[1:])),
            "models": paths, "target": target_key(target), "tasks": len(model_tasks(paths)), "programs": total,
            "per_task": per_task, "seconds": round(before.get("seconds", 0) + time.perf_counter() - t0, 1),
            "runs": before.get("runs", []) + [{"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "models": models,
                                               "measured": measured, "load_average": list(os.getloadavg())}]}
    sidecar.write_text(json.dumps(meta, indent=1))
    return meta


# ---------------------------------------------------------------------------------------------- train, evaluate

def load_dataset(db: str, hold_out: set) -> tuple[dict, dict]:
    """(train, test): each {task key: (task, [(schedule, cost)])}; test holds the tasks that only held-out
    models have."""
    meta = json.loads(Path(db + ".json").read_text())
    by_model = {Path(m).stem: {t.key: t for t in model_tasks(m)} for m in meta["models"]}
    unknown = hold_out - set(by_model)
    if unknown:
        raise SystemExit(f"--hold-out {sorted(unknown)}: not models of {db} ({sorted(by_model)})")
    seen = {k: t for name, ts in by_model.items() if name not in hold_out for k, t in ts.items()}
    held = {k: t for name, ts in by_model.items() if name in hold_out for k, t in ts.items() if k not in seen}
    train, test = {}, {}
    with RecordStore(db) as store:
        for tasks, into in ((seen, train), (held, test)):
            for key, task in tasks.items():
                recs = store.records(key, meta.get("target"))
                if recs:
                    into[key] = (task, [(r.schedule, r.cost) for r in recs])
    return train, test


def features_of(data: dict) -> tuple[list, list, list]:
    feats, costs, groups = [], [], []
    for key, (task, programs) in data.items():
        for schedule, cost in programs:
            try:
                feats.append(featurize(task, schedule))
            except (ScheduleError, AssertionError):
                continue
            costs.append(cost)
            groups.append(key)
    return feats, costs, groups


def train(db: str, out: str, hold_out: set, log=print, rounds: int = PRETRAINED_ROUNDS) -> Path:
    t0 = time.perf_counter()
    train_set, _ = load_dataset(db, hold_out)
    feats, costs, groups = features_of(train_set)
    if not feats:
        raise SystemExit(f"{db}: no measured program to train on")
    model = XGBoostModel(num_rounds=rounds)
    rows, ids = stack_programs(feats)
    model.fit_arrays(rows, ids, normalized_throughput(costs, groups))
    data_meta = json.loads(Path(db + ".json").read_text())
    meta = {**provenance(command_line("python -m relayish_tools.bench.pretrain", sys.argv[1:])),
            "dataset": {k: data_meta.get(k) for k in ("date", "machine", "programs", "tasks", "seconds",
                                                       "command_line")},
            "trained_on": {"programs": len(feats), "tasks": len(train_set),
                           "models": sorted(Path(m).stem for m in data_meta["models"] if Path(m).stem not in hold_out),
                           "held_out": sorted(hold_out),
                           "task_kinds": sorted({task_kind(task) for task, _ in train_set.values()})},
            "training_seconds": round(time.perf_counter() - t0, 1)}
    path = save_cost_model(model, out, meta)
    log(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB): {len(feats)} programs of {len(train_set)} tasks")
    return path


def evaluate(db: str, model_path: str, hold_out: set, log=print) -> dict:
    from tuning.pretrained import load_cost_model
    _, test = load_dataset(db, hold_out)
    model = load_cost_model(model_path)
    per_task = []
    for key, (task, programs) in test.items():
        ok = [(s, c) for s, c in programs if np.isfinite(c)]
        if len(ok) < 3:
            continue
        scores = model.predict(task, [s for s, _ in ok])
        per_task.append(pairwise_accuracy(scores, [c for _, c in ok], rtol=0.05))
    result = {"held_out_tasks": len(per_task), "pairwise_accuracy": float(np.mean(per_task)) if per_task else None}
    log(f"held-out tasks: {result['held_out_tasks']}, mean pairwise accuracy {result['pairwise_accuracy']} "
        "(random scores: 0.5)")
    return result


def zero_shot_rows(models: list[str], model_path: str, threads: int, repeat: int, log=print) -> list[dict]:
    from compiler import compile_model
    from tuning.pretrained import load_cost_model
    from tuning.zero_shot import predict_schedules

    from .compare import compare_with_onnxruntime
    cm = load_cost_model(model_path)
    rows = []
    for path in models:
        t0 = time.perf_counter()
        chosen = predict_schedules(path, model=cm)
        predict_s = time.perf_counter() - t0
        untuned = compile_model(path, num_threads=threads)
        predicted = compile_model(path, num_threads=threads, records=chosen, cache=False)
        result = compare_with_onnxruntime(untuned, path, threads=threads, repeat=repeat,
                                          extra_engines=[("zero_shot", lambda x, m=predicted: m.run(None, x))])
        row = {"model": Path(path).stem, "tasks": len(chosen.report), "predicted_tasks": len(chosen.chosen),
               "predict_s": round(predict_s, 1), "untuned": result["ours"], "zero_shot": result["zero_shot"],
               "onnxruntime": result["onnxruntime"],
               "zero_shot_vs_untuned": result["zero_shot"]["median_ms"] / result["ours"]["median_ms"]}
        rows.append(row)
        log(f"{row['model']}: {row['predicted_tasks']}/{row['tasks']} tasks predicted in {predict_s:.0f} s; untuned "
            f"{row['untuned']['median_ms']:.2f} ms, zero-shot {row['zero_shot']['median_ms']:.2f} ms "
            f"({row['zero_shot_vs_untuned']:.2f}x), onnxruntime {row['onnxruntime']['median_ms']:.2f} ms")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.pretrain", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="measure programs of every task of the models")
    c.add_argument("models", nargs="+")
    c.add_argument("--out", required=True, help="records database to write (resumed if it exists)")
    c.add_argument("--per-task", type=int, default=24, help="programs per task besides the default")
    c.add_argument("--seed", type=int, default=0)
    for name in ("train", "evaluate"):
        s = sub.add_parser(name)
        s.add_argument("db")
        s.add_argument("--hold-out", default="", help="model file stems left out of training")
        if name == "train":
            s.add_argument("-o", "--out", default=str(DEFAULT_PATH))
            s.add_argument("--rounds", type=int, default=PRETRAINED_ROUNDS, help="boosting rounds at most")
        else:
            s.add_argument("--model", required=True)
    z = sub.add_parser("zero-shot", help="time models untuned and with zero-shot schedules beside onnxruntime")
    z.add_argument("models", nargs="+")
    z.add_argument("--model", required=True, help="the cost model file")
    z.add_argument("--db", help="its dataset, to report the held-out ranking accuracy too")
    z.add_argument("--hold-out", default="")
    z.add_argument("--threads", type=int, default=2)
    z.add_argument("--repeat", type=int, default=30)
    z.add_argument("--json", help="write the rows with provenance (docs/data/zero_shot.json)")
    args = p.parse_args(argv)
    hold = {h for h in getattr(args, "hold_out", "").split(",") if h}
    if args.cmd == "collect":
        collect(args.models, args.out, args.per_task, args.seed)
    elif args.cmd == "train":
        train(args.db, args.out, hold, rounds=args.rounds)
    elif args.cmd == "evaluate":
        evaluate(args.db, args.model, hold)
    else:
        rows = zero_shot_rows(args.models, args.model, args.threads, args.repeat)
        if args.json:
            from tuning.pretrained import read_cost_model
            doc = {"benchmark": "zero_shot",
                   **provenance(command_line("python -m relayish_tools.bench.pretrain", argv)),
                   "threads": args.threads, "repeat": args.repeat, "cost_model": read_cost_model(args.model)[1],
                   "held_out": evaluate(args.db, args.model, hold) if args.db else None, "rows": rows}
            Path(args.json).write_text(json.dumps(doc, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The end of a tuning run: the whole model, compiled with the records and without, timed side by side.

    check = check_in_model("resnet18.onnx", store, host_target(), estimate=result.best)
    print(check.format())

1. The model is compiled untuned (no records; the hand-written defaults, or the naive loop nest when the tuning
   started from it), and once per rank j < `candidates`: variant j runs each task's j-th best distinct program
   by recorded cost (variant 0: the records' best).
2. Each task's time inside each model: the runtime's per-kernel profile (a kernel's median over runs, in the
   model's own conditions: caches filled by the kernels before it, the executor's dispatch), summed over the
   task's calls; the least of `rounds` profiles taken in alternation, so a busy moment does not decide.
3. Per task, the fastest inside the model among its untuned schedule and its candidates wins. Its records say so
   (compiler/records.py verdicts): an untuned winner gets KEEP_DEFAULT on the best record, and compile_model keeps
   the untuned schedule; a candidate that wins gets APPLIES, and the better-ranked programs it beat get
   SUPERSEDED, so that compile_model(records=...) walks past them to it. The measured cost of a program alone
   ranks programs that differ by less than its error (ResNet-18 tuned from the naive loop nests: among a 3x3
   convolution's best ten records the fourth ran 20% faster in the model than the first). The tuned model is
   then compiled from the records.
4. Both models are timed end to end in strict alternation with idle gaps (runtime.timing.time_alternating).
5. If the tuned model was not faster end to end, every task it kept gets the verdict keep_default too: the
   records then compile the untuned model, so tuning never ends slower than it started (SqueezeNet after 15
   minutes: every kept task faster in its profile, the whole model 2% slower). "Faster" is the median of the
   rounds' ratios, tuned over untuned, each round's two runs back to back (runtime.timing.paired_ratio), below 1:
   a slow phase of the shared machine that starts mid-run, or one disturbed run, moves a ratio of the two medians
   (AlexNet's payoff run timed two compiles of the same schedules 2.6% apart by their medians) but not the median
   of the paired ratios.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from compiler import compile_model
from compiler.records import RecordStore
from runtime.timing import Engine, paired_ratio, time_alternating

CHECK_PARAMS = {"repeat": 30, "warmup": 3, "profile_repeat": 10, "profile_rounds": 3,
                "candidates": 4}  # each task's best programs by recorded cost, timed inside the model


@dataclass
class ModelCheck:
    """What timing the model said. kept / reverted: task keys whose tuned program won in the model / lost to the
    untuned one (reverted ones now keep their default); estimated_ms: the tuner's estimate for this model (sum
    over its kernel calls of the task's best measured cost), None if not given."""
    model: str
    untuned_ms: float
    tuned_ms: float
    estimated_ms: float | None
    kept: list = field(default_factory=list)
    reverted: list = field(default_factory=list)
    task_ms: dict = field(default_factory=dict)  # task key -> (untuned ms, tuned ms) inside the model
    model_reverted: bool = False  # the tuned model was not faster: every task keeps its default (step 5)
    paired: dict | None = None  # tuned / untuned by rounds: {"ratio", "low", "high", "rounds"} (paired_ratio)
    switched: list = field(default_factory=list)  # kept tasks that run another of their best programs than the first

    @property
    def speedup(self) -> float:
        return self.untuned_ms / self.tuned_ms

    def format(self) -> str:
        line = (f"model {self.model}: untuned {self.untuned_ms:.3f} ms, tuned {self.tuned_ms:.3f} ms "
                f"({self.speedup:.2f}x")
        if self.paired is not None:
            p = self.paired
            line += f"; paired tuned/untuned {p['ratio']:.3f} [{p['low']:.3f}-{p['high']:.3f}]"
        line += (f"); {len(self.kept)} tuned tasks kept ({len(self.switched)} with another of their best programs "
                 f"than the first), {len(self.reverted)} kept their default (slower in the model)")
        if self.estimated_ms is not None:
            error = (self.estimated_ms - self.tuned_ms) / self.tuned_ms
            line += f"; the tuner's estimate {self.estimated_ms:.3f} ms ({error:+.0%} of the measured)"
        if self.model_reverted:
            line += "; the tuned model was not faster: every task keeps its default schedule"
        return line


def task_times_ms(module, profile_rows) -> dict:
    """Per task key: the sum of its kernel calls' median times (ms) in one profile of the module."""
    out: dict[str, float] = {}
    for kernel, row in zip(module.kernels, profile_rows):
        out[kernel["task_key"]] = out.get(kernel["task_key"], 0.0) + row["median_ms"]
    return out


def in_model_task_times(modules: list, feed, repeat: int, rounds: int) -> list[dict]:
    """Per module, task key -> its least time (ms) over `rounds` profiles, the modules profiled in alternation."""
    best: list[dict[str, float]] = [{} for _ in modules]
    for _ in range(rounds):
        for module, times in zip(modules, best):
            for key, ms in task_times_ms(module, module.profile(repeat, feed)).items():
                times[key] = min(times.get(key, np.inf), ms)
    return best


def ranked_programs(store, target, keys, k: int) -> dict:
    """Task key -> its k best distinct successful schedules by recorded cost, in the order compile_model walks
    them (tasks without a record are left out)."""
    ranked = {}
    for key in keys:
        seen, programs = set(), []
        for record in sorted((r for r in store.records(key, target=target) if r.ok), key=lambda r: r.cost):
            text = record.schedule.to_json()
            if text not in seen:
                seen.add(text)
                programs.append(record.schedule)
            if len(programs) >= k:
                break
        if programs:
            ranked[key] = programs
    return ranked


def compile_variants(model, ranked: dict, target, options: dict) -> list:
    """Variant j: the model compiled with each task's j-th program of `ranked` (the tasks with fewer programs run
    their untuned schedule), from a records database of one record per task."""
    variants = []
    with tempfile.TemporaryDirectory(prefix="relayish-check-") as tmp:
        for j in range(max((len(p) for p in ranked.values()), default=0)):
            path = os.path.join(tmp, f"variant{j}.db")
            with RecordStore(path) as store:
                store.add_many([(SimpleNamespace(key=key, name=key), target, programs[j], [1e-9], None)
                                for key, programs in ranked.items() if len(programs) > j])
            variants.append(compile_model(model, records=path, cache=False, **options))
    return variants


def choose(store, target, ranked: dict, untuned_ms: dict, variant_ms: list) -> tuple[list, list, list, dict]:
    """Per task of `ranked`, the fastest inside the model of its untuned schedule and its programs; the verdicts
    that make compile_model apply it. Returns (kept, reverted, switched: kept tasks whose winner is not the
    records' best, task key -> the ms of its fastest program)."""
    kept, reverted, switched, best_ms = [], [], [], {}
    for key in sorted(ranked):
        programs = ranked[key]
        times = [variant_ms[j].get(key, np.inf) for j in range(len(programs))]
        j = int(np.argmin(times))
        best_ms[key] = times[j]
        if not times[j] < untuned_ms.get(key, np.inf):  # a tie keeps the untuned schedule
            store.add_verdict(key, target, programs[0], times[0], untuned_ms[key], keep_default=True)
            reverted.append(key)
            continue
        for i in range(j):
            store.supersede(key, target, programs[i], times[i], times[j])
        store.add_verdict(key, target, programs[j], times[j], untuned_ms[key], keep_default=False)
        kept.append(key)
        if j:
            switched.append(key)
    return kept, reverted, switched, best_ms


def check_in_model(model, store, target, input_shapes=None, layout: str = "NCHWc", winograd: bool = True,
                   start: str = "hand-written", estimate: dict | None = None, params: dict | None = None,
                   log=lambda msg: None) -> ModelCheck:
    """Compile `model` untuned and with the store's records, write per-task verdicts (see the module docstring),
    and time both end to end. estimate: task key -> the tuner's (best, untuned) costs in seconds, to compare the
    tuner's estimate of the model (best for the tasks kept, untuned for the others) with the measured time."""
    p = dict(CHECK_PARAMS, **(params or {}))
    options = dict(input_shapes=input_shapes, layout=layout, winograd=winograd, default_schedules=start)
    untuned = compile_model(model, **options)
    ranked = ranked_programs(store, target, sorted({k["task_key"] for k in untuned.kernels}), p["candidates"])
    variants = compile_variants(model, ranked, target, options)
    feed = untuned.random_inputs(0)
    untuned_ms, *variant_ms = in_model_task_times([untuned] + variants, feed, p["profile_repeat"],
                                                  p["profile_rounds"])
    del variants  # (their libraries: the tuned model is compiled from the records once decided)
    kept, reverted, switched, tuned_ms = choose(store, target, ranked, untuned_ms, variant_ms)
    if reverted:
        log(f"{len(reverted)} tuned tasks were slower inside the model: they keep their default schedules")
    if switched:
        log(f"{len(switched)} tasks run another of their {p['candidates']} best programs: it was faster inside the "
            f"model than the best measured alone")
    tuned = compile_model(model, records=store, **options)
    engines = [Engine("untuned", lambda: untuned.run(None, feed)), Engine("tuned", lambda: tuned.run(None, feed))]
    stats = time_alternating(engines, p["repeat"], p["warmup"])
    paired = paired_ratio(stats["tuned"], stats["untuned"])
    model_reverted = bool(kept) and not paired["ratio"] < 1.0
    if model_reverted:
        log(f"the tuned model was not faster end to end ({stats['tuned']['median_ms']:.3f} ms against "
            f"{stats['untuned']['median_ms']:.3f} untuned, paired ratio {paired['ratio']:.3f}): every task keeps its "
            f"default schedule")
        for key in kept:
            record = store.best_record(key, target)
            if record is not None:
                store.add_verdict(key, target, record.schedule, tuned_ms[key], untuned_ms[key], keep_default=True)
        kept, reverted, switched = [], reverted + kept, []
    estimated = None
    if estimate is not None:
        estimated = 1e3 * sum(estimate.get(k["task_key"], (np.nan, np.nan))[k.get("schedule") != "tuned"]
                              for k in tuned.kernels)
        estimated = None if not np.isfinite(estimated) else estimated
    name = model if isinstance(model, str) else getattr(getattr(model, "graph", None), "name", "model")
    return ModelCheck(str(name), stats["untuned"]["median_ms"], stats["tuned"]["median_ms"], estimated, kept,
                      reverted, {k: (untuned_ms[k], tuned_ms.get(k, np.nan)) for k in untuned_ms}, model_reverted,
                      paired, switched)

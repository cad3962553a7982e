"""The end of a tuning run: the whole model, compiled with the records and without, timed side by side.

    check = check_in_model("resnet18.onnx", store, host_target(), estimate=result.best)
    print(check.format())

1. The model is compiled twice: untuned (no records; the hand-written defaults, or the naive loop nest when the
   tuning started from it) and tuned (the store's best records).
2. Each task's time inside each model: the runtime's per-kernel profile (a kernel's median over runs, in the
   model's own conditions: caches filled by the kernels before it, the executor's dispatch), summed over the
   task's calls; the least of `rounds` profiles taken in alternation, so a busy moment does not decide.
3. A task whose tuned program is not faster inside the model than the untuned one gets the verdict keep_default
   in the records (compiler/records.py): compile_model(records=...) then keeps the untuned schedule for it. The
   others get a verdict that confirms them. If any task was reverted, the tuned model is compiled again.
4. Both models are timed end to end in steady state (runtime.timing.time_blocks: blocks of consecutive runs, the
   two models' blocks alternating with an idle gap), as a served model runs and as `relayish bench` times it; an
   idle gap before every single run (time_alternating) would time each run's wake-up as well.
5. If the tuned model was not faster end to end, every task it kept gets the verdict keep_default too: the
   records then compile the untuned model, so tuning never ends slower than it started (SqueezeNet after 15
   minutes: every kept task faster in its profile, the whole model 2% slower). "Faster" is the median of the
   rounds' ratios, tuned over untuned, each round's two runs back to back (runtime.timing.paired_ratio), below 1:
   a slow phase of the shared machine that starts mid-run, or one disturbed run, moves a ratio of the two medians
   (AlexNet's payoff run timed two compiles of the same schedules 2.6% apart by their medians) but not the median
   of the paired ratios.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compiler import DefaultSchedules, compile_model
from runtime.timing import Engine, format_paired, paired_ratio, time_blocks

CHECK_PARAMS = {"repeat": 30, "warmup": 3, "profile_repeat": 10, "profile_rounds": 3}


@dataclass
class ModelCheck:
    """What timing the model said. kept / reverted: task keys whose tuned program won in the model / lost to the
    untuned one (reverted ones now keep their default); estimated_ms: the tuner's estimate for this model (sum
    over its kernel calls of the given cost of the program it runs: tune.check_models gives each program's
    median reading), None if not given."""
    model: str
    untuned_ms: float
    tuned_ms: float
    estimated_ms: float | None
    kept: list = field(default_factory=list)
    reverted: list = field(default_factory=list)
    task_ms: dict = field(default_factory=dict)  # task key -> (untuned ms, tuned ms) inside the model
    model_reverted: bool = False  # the tuned model was not faster: every task keeps its default (step 5)
    paired: dict | None = None  # tuned / untuned by rounds: {"ratio", "low", "high", "rounds"} (paired_ratio)

    @property
    def speedup(self) -> float:
        return self.untuned_ms / self.tuned_ms

    def format(self) -> str:
        line = (f"model {self.model}: untuned {self.untuned_ms:.3f} ms, tuned {self.tuned_ms:.3f} ms "
                f"({self.speedup:.2f}x")
        if self.paired is not None:
            line += f"; paired tuned/untuned {format_paired(self.paired)}"
        line += (f"); {len(self.kept)} tuned tasks kept, {len(self.reverted)} kept their default "
                 f"(slower in the model)")
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


def in_model_task_times(untuned, tuned, feed, repeat: int, rounds: int) -> tuple[dict, dict]:
    """Per task key, its least time (ms) over `rounds` alternating profiles of each module."""
    best_u: dict[str, float] = {}
    best_t: dict[str, float] = {}
    for _ in range(rounds):
        for module, best in ((untuned, best_u), (tuned, best_t)):
            for key, ms in task_times_ms(module, module.profile(repeat, feed)).items():
                best[key] = min(best.get(key, np.inf), ms)
    return best_u, best_t


def decide(store, target, tuned, untuned_ms: dict, tuned_ms: dict) -> tuple[list, list]:
    """A verdict for every task the tuned module runs a record for: kept if faster in the model, else reverted
    (the store then keeps its default). Returns (kept, reverted) task keys."""
    kept, reverted = [], []
    tuned_keys = {k["task_key"] for k in tuned.kernels if k.get("schedule") == "tuned"}
    for key in sorted(tuned_keys):
        record = store.best_record(key, target)
        if record is None:  # decided by a concurrent writer since the compile: nothing to judge
            continue
        if store.add_verdict(key, target, record.schedule, tuned_ms[key], untuned_ms[key]):
            reverted.append(key)
        else:
            kept.append(key)
    return kept, reverted


def check_in_model(model, store, target, input_shapes=None, layout: str = "NCHWc", winograd: bool = True,
                   start: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN, estimate: dict | None = None, params: dict | None = None,
                   log=lambda msg: None) -> ModelCheck:
    """Compile `model` untuned and with the store's records, write per-task verdicts (see the module docstring),
    and time both end to end. estimate: task key -> the tuner's (best, untuned) costs in seconds, to compare the
    tuner's estimate of the model (best for the tasks kept, untuned for the others) with the measured time."""
    p = dict(CHECK_PARAMS, **(params or {}))
    options = dict(input_shapes=input_shapes, layout=layout, winograd=winograd, default_schedules=start)
    untuned = compile_model(model, **options)
    tuned = compile_model(model, records=store, **options)
    feed = untuned.random_inputs(0)
    untuned_ms, tuned_ms = in_model_task_times(untuned, tuned, feed, p["profile_repeat"], p["profile_rounds"])
    kept, reverted = decide(store, target, tuned, untuned_ms, tuned_ms)
    if reverted:
        log(f"{len(reverted)} tuned tasks were slower inside the model: they keep their default schedules")
        tuned = compile_model(model, records=store, **options)
    engines = [Engine("untuned", lambda: untuned.run(None, feed)), Engine("tuned", lambda: tuned.run(None, feed))]
    stats = time_blocks(engines, p["repeat"], p["warmup"])
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
        kept, reverted = [], reverted + kept
    estimated = None
    if estimate is not None:
        estimated = 1e3 * sum(estimate.get(k["task_key"], (np.nan, np.nan))[k.get("schedule") != "tuned"]
                              for k in tuned.kernels)
        estimated = None if not np.isfinite(estimated) else estimated
    name = model if isinstance(model, str) else getattr(getattr(model, "graph", None), "name", "model")
    return ModelCheck(str(name), stats["untuned"]["median_ms"], stats["tuned"]["median_ms"], estimated, kept,
                      reverted, {k: (untuned_ms[k], tuned_ms.get(k, np.nan)) for k in untuned_ms}, model_reverted,
                      paired)

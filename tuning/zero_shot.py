"""Zero-shot schedules: each task's schedule chosen by a pretrained cost model (tuning.pretrained), with no
measurement at all.

    sched = predict_schedules("model.onnx")                  # the shipped model, or model=load_cost_model(path)
    sess = compile_model("model.onnx", records=sched)        # tasks it chose run its schedule, others the default

Per task, the evolutionary search of the tuner (tuning.search) runs under the pretrained model from the default
schedule's program and random programs of the sketch space, without measuring, and the highest-scored programs
are the candidates. The rule that keeps the hand-written default: a task of a kind the model was never trained on
(its ops in order, tuning.pretrained.task_kind; a model file that does not list its kinds trusts every kind) keeps
it; else a candidate replaces it only if the model scores it at least (1 + MARGIN) times the default's score, the
default's score is positive (the model knows this kind of program), and it lowers to at most
MAX_UNROLLED_STATEMENTS statements (what the tuner's builder accepts). From the naive loop nests (start="naive",
template-free) there is no default worth keeping: every task takes its best-scored candidate that lowers within
MAX_UNROLLED_STATEMENTS, whatever its kind (ShuffleNet v1 g4, held out of the shipped model's training: 73.6 ms
naive -> 3.5 ms zero-shot, Zen 4). `PredictedSchedules.report` says, per task, what was chosen and why.
"""
from __future__ import annotations

import contextlib
import math
import random
import sys
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from compiler import DefaultSchedules, as_default_schedules
from compiler.backend import untuned_schedule
from compiler.codegen import vector_width
from compiler.codegen.analysis import unrolled_size
from compiler.lower import lower
from compiler.schedule import Schedule, ScheduleError
from runtime import default_num_threads

from .cost_model import parallel_featurization
from .measure import MAX_UNROLLED_STATEMENTS
from .pool import WorkerPool
from .pretrained import load_cost_model, task_kind
from .search import SearchSpace, evolutionary_search
from .tune import model_tasks, seed_space

# held-out crnn tasks: a margin of 0.10 chose 12 of 21, 8 slower than the default (worst 2.2x); 0.25 chose 1, none slower
MARGIN = 0.25
CANDIDATES = 32  # programs the search hands back per task (from a few hundred it scores)
# per task: the tuner's search with no random share and no time budget, so that the same seed and model give the
# same schedules on any machine however fast (a budget cut the generations short where predictions were slow);
# with no budget, min_population only sets how many programs one predict call scores: a whole generation, which
# parallel_featurization's workers then lower side by side
SEARCH = {"time_budget_s": math.inf, "eps_random": 0.0, "population": 64, "generations": 3, "min_population": 256}


@dataclass
class PredictedSchedules:
    """What compile_model(records=...) reads: best(task key) -> the chosen Schedule, or None (the default)."""
    chosen: dict = field(default_factory=dict)  # task key -> Schedule
    report: list = field(default_factory=list)  # per task: name, key, verdict, scores

    def best(self, task_key: str) -> Schedule | None:
        return self.chosen.get(task_key)

    def best_cost(self, task_key: str) -> None:
        """Nothing is measured: the channel block and convolution algorithms stay the rule's."""
        return None

    def summary(self) -> str:
        n = len(self.report)
        return f"{len(self.chosen)} of {n} tasks take a predicted schedule, {n - len(self.chosen)} keep the default"


def predict_schedules(models, model=None, input_shapes=None, layout: str = "NCHWc", winograd: bool = True,
                      seed: int = 0, log=None, start: DefaultSchedules | str = DefaultSchedules.HAND_WRITTEN,
                      progress: bool = False, workers: int | None = None) -> PredictedSchedules:
    """Zero-shot schedules for every task of `models` (a path or a list). model: a trained cost model
    (default: the one shipped with the package; ValueError when there is none). start: the default each task
    keeps unless a candidate passes the rule, and the search's starting program: the hand-written schedule, or
    the naive loop nest (template-free experiments: compile with default_schedules="naive" to match), which no
    rule keeps. progress: a tqdm bar of the tasks on stderr (a model of many tasks takes a minute or more:
    GoogLeNet's 70 from naive nests, 71 s on two cores of a Zen 4). workers: the processes that lower the
    programs the search scores (cost_model.parallel_featurization; default: one per core, 1: this process
    alone); the schedules chosen do not depend on it."""
    start = as_default_schedules(start)
    model = load_cost_model() if model is None else model
    if model is None:
        raise ValueError("no pretrained cost model ships with this installation: build one with python -m "
                         "relayish_tools.bench.pretrain, or pass model=tuning.pretrained.load_cost_model(PATH)")
    rng = random.Random(seed)
    out = PredictedSchedules()
    keep_default = start is DefaultSchedules.HAND_WRITTEN  # a naive nest is no default worth keeping
    known = (getattr(model, "metadata", None) or {}).get("trained_on", {}).get("task_kinds") if keep_default else None
    tasks = model_tasks(models, input_shapes, layout, winograd)
    bar = tqdm(tasks, desc="zero-shot", unit="task", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    if log and progress:
        log = _above(bar, log)
    with _lowering_workers(default_num_threads() if workers is None else workers):
        for task in bar:
            bar.set_postfix_str(task.name[:40])
            default = untuned_schedule(task, vector_width(), start)
            entry = {"task": task.name, "key": task.key}
            if known is not None and task_kind(task) not in known:
                entry.update(verdict="default", reason="a kind of task the cost model was never trained on")
                out.report.append(entry)
                if log:
                    log(f"{task.name}: default ({entry['reason']})")
                continue
            space = SearchSpace.of(task)
            seed_space(space, default, _NoRecords(), None)
            candidates = [s for _, s in evolutionary_search(space, model, CANDIDATES, rng, SEARCH)]
            scores = model.predict(task, [default] + candidates)
            entry["default_score"] = float(scores[0])
            chosen = _choose(task, candidates, scores[1:], float(scores[0]) if keep_default else None)
            if chosen is None:
                entry["verdict"] = "default"
            else:
                out.chosen[task.key] = chosen[0]
                entry.update(verdict="predicted", score=chosen[1])
            out.report.append(entry)
            if log:
                log(f"{task.name}: {entry['verdict']} (default score {entry['default_score']:.3g}"
                    + (f", chosen {entry['score']:.3g})" if chosen else ")"))
    return out


@contextlib.contextmanager
def _lowering_workers(n: int):
    """The block's programs lowered for their features on n worker processes (n > 1), or in this one."""
    if n <= 1:
        yield
        return
    with WorkerPool(n) as pool, parallel_featurization(pool):
        yield


def _choose(task, candidates: list, scores: np.ndarray, default_score: float | None):
    """(schedule, score) of the best-scored candidate that passes the rule (module doc), or None. default_score
    None: no default to keep, the best-scored candidate that lowers within MAX_UNROLLED_STATEMENTS."""
    if default_score is not None and not default_score > 0:
        return None
    for k in np.argsort(-scores):
        if default_score is not None and not scores[k] >= (1 + MARGIN) * default_score:
            return None
        try:
            size = unrolled_size(lower(candidates[k].apply(task.initial_state()), "zero_shot"))
        except (ScheduleError, AssertionError):
            continue
        if size <= MAX_UNROLLED_STATEMENTS:
            return candidates[k], float(scores[k])
    return None


def _above(bar, log):
    """log, writing above the progress bar instead of through it."""
    def write(msg: str) -> None:
        with bar.external_write_mode(file=sys.stderr):
            log(msg)
    return write


class _NoRecords:
    """seed_space's store when there are no records: no similar task's best."""

    @staticmethod
    def best_of_similar(*_args, **_kwargs) -> list:
        return []

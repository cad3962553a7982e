"""The learned cost model of the auto-scheduler (Ansor, OSDI'20, section 5.2).

A program (a task plus a schedule) is lowered and featurized statement by statement (`tuning.features`). A
gradient-boosted tree model f predicts one score per statement; the program's score is the sum over its
statements. The labels are normalized throughputs, y = (best cost of the task) / cost in [0, 1], so programs of
different tasks share one scale, and the loss weights each program by its label, so that the model spends its
capacity on ranking the fast programs right (the ones the search keeps):

    loss(f) = sum_i  w_i * (sum_{s in S(i)} f(s) - y_i)^2,    w_i = y_i

`predict` returns these scores: higher is better. `pairwise_accuracy` is how the model is judged: the fraction
of pairs of programs whose predicted order is their measured order, on a dataset of measured programs made by
the benchmark tools (`python -m relayish_tools.bench.cost_data --collect data.npz`, then `--evaluate data.npz`).
"""
from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from concurrent.futures import BrokenExecutor, Future, ThreadPoolExecutor
from typing import Iterable, Protocol, Sequence

import numpy as np

from compiler.codegen.library import gc_paused
from compiler.lower import lower
from compiler.schedule import Schedule, ScheduleError

from .features import NUM_FEATURES, extract_features
from .measure import TaskSpec, _task_of

# Ansor's settings, except for shallower trees, a smaller step, no split penalty and more rounds: on held-out
# measured programs (python -m relayish_tools.bench.cost_data --evaluate) this ranks random schedule variants better (pairwise
# accuracy 0.80 against Ansor's 0.76) and mutations of the default schedule as well (0.88 both).
# base_score 0: a program's score is a sum over its statements.
# One thread: on a busy machine, xgboost's OpenMP threads spin against each other (20x slower with two).
XGB_PARAMS = {
    "max_depth": 6, "gamma": 0.0, "min_child_weight": 0, "eta": 0.05, "base_score": 0.0,
    "verbosity": 0, "nthread": 1, "seed": 43, "disable_default_eval_metric": 1,
}
NUM_ROUNDS = 600
EARLY_STOPPING_ROUNDS = 50
FEATURE_CACHE_SIZE = 20000


# ---------------------------------------------------------------------------------------------- features

_FEATURE_CACHE: OrderedDict = OrderedDict()


def featurize(task, schedule: Schedule) -> np.ndarray:
    """Per-statement features of `schedule` applied to `task` (rows: Store statements). Cached by (task key,
    schedule JSON). Raises ScheduleError when the schedule does not apply to the task."""
    key = (task.key, schedule.to_json())
    got = _FEATURE_CACHE.get(key)
    if got is not None:
        _FEATURE_CACHE.move_to_end(key)
        return got
    with gc_paused():  # allocation-heavy, no garbage cycles: the GC's passes were ~40% of a Winograd program's
        feats = extract_features(lower(schedule.apply(task.initial_state()), "features"))
    feats.setflags(write=False)
    _remember_features(key, feats)
    return feats


def _remember_features(key: tuple, feats: np.ndarray) -> None:
    _FEATURE_CACHE[key] = feats
    _FEATURE_CACHE.move_to_end(key)
    if len(_FEATURE_CACHE) > FEATURE_CACHE_SIZE:
        _FEATURE_CACHE.popitem(last=False)


def stack_programs(features: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of all programs in one matrix, and the program index of every row."""
    if not features:
        return np.zeros((0, NUM_FEATURES), np.float32), np.zeros(0, np.int64)
    for k, f in enumerate(features):
        if np.ndim(f) != 2 or np.shape(f)[1] != NUM_FEATURES:
            raise ValueError(f"program {k}: feature matrix of shape {np.shape(f)}, expected (statements, "
                             f"{NUM_FEATURES}) as tuning.features makes them now")
    rows = np.concatenate([np.asarray(f, np.float32) for f in features])
    ids = np.repeat(np.arange(len(features)), [len(f) for f in features])
    return rows, ids


# ---------------------------------------------------------------------------------------------- the math

def normalized_throughput(costs: Sequence[float], groups: Sequence[str] | None = None) -> np.ndarray:
    """Labels: min cost of the program's group (task) / its cost, in [0, 1]; a failed program (cost inf, nan,
    None or <= 0) gets 0."""
    costs = np.array([np.inf if c is None or not c > 0 else c for c in costs], dtype=np.float64)
    groups = np.asarray(groups if groups is not None else [""] * len(costs), dtype=object)
    labels = np.zeros(len(costs))
    for g in set(groups.tolist()):
        mask = groups == g
        best = np.min(costs[mask])
        if np.isfinite(best):
            labels[mask] = np.where(np.isfinite(costs[mask]), best / costs[mask], 0.0)
    return labels


def program_sums(row_preds: np.ndarray, program_ids: np.ndarray, n_programs: int) -> np.ndarray:
    """Score of each program: the sum of its rows' predictions."""
    return np.bincount(program_ids, weights=row_preds, minlength=n_programs)


def pack_sum_loss(row_preds, program_ids, labels, weights) -> float:
    """sum_i w_i (sum_{rows r of program i} f_r - y_i)^2."""
    sums = program_sums(np.asarray(row_preds, np.float64), program_ids, len(labels))
    return float(np.sum(weights * (sums - labels) ** 2))


def pack_sum_grad_hess(row_preds, program_ids, labels, weights) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian diagonal of `pack_sum_loss` with respect to every row's prediction.

    d loss / d f_r = 2 w_i (s_i - y_i) for row r of program i (s_i its program's sum). The Hessian couples the rows
    of a program (d^2 loss / d f_r d f_q = 2 w_i for r, q both in i); xgboost takes its diagonal, 2 w_i."""
    sums = program_sums(np.asarray(row_preds, np.float64), program_ids, len(labels))
    residual = (weights * (sums - labels))[program_ids]
    return 2.0 * residual, 2.0 * np.asarray(weights, np.float64)[program_ids]


def pairwise_accuracy(scores: Sequence[float], costs: Sequence[float], rtol: float = 0.0) -> float:
    """Fraction of pairs of programs that the scores order right (higher score = lower cost), over the pairs
    whose costs differ by more than `rtol` (relative: pairs closer than the measurement noise are coin flips
    for any model); a tie in scores counts half. 1.0 when there is no such pair."""
    s = np.asarray(scores, np.float64)
    c = np.asarray(costs, np.float64)
    i, j = np.triu_indices(len(s), k=1)
    lo, hi = np.minimum(c[i], c[j]), np.maximum(c[i], c[j])
    valid = hi > lo * (1.0 + rtol)
    if not valid.any():
        return 1.0
    i, j = i[valid], j[valid]
    want = np.sign(c[j] - c[i])  # +1: program i is the faster one
    got = np.sign(s[i] - s[j])
    return float(np.mean(np.where(got == 0, 0.5, (got == want).astype(np.float64))))


# ---------------------------------------------------------------------------------------------- models

class CostModel(Protocol):
    def update(self, records: Iterable) -> None:
        """Learn from measured programs: (task, schedule, cost in seconds) triples, or objects with those
        attributes; a failed measurement has cost inf or None."""

    def predict(self, task, schedules: Sequence[Schedule]) -> np.ndarray:
        """One score per schedule, higher = predicted faster; -inf for a schedule that does not apply."""


class RandomModel:
    """No knowledge: uniform random scores (what the search uses before any measurement)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def update(self, records: Iterable, background: bool = False) -> None:
        pass

    def wait(self) -> None:
        pass

    def predict(self, task, schedules: Sequence[Schedule]) -> np.ndarray:
        return self.rng.random(len(schedules))


class XGBoostModel:
    """Per-statement gradient-boosted trees trained with Ansor's throughput-weighted pack-sum loss.

    Keeps every program it was given (features, cost, task key) and retrains from scratch on all of them after
    each `update`. Before any data it predicts like RandomModel.

    update(..., background=True) trains in a thread and leaves the model in use unchanged until `wait()`, which
    installs it: the tuner starts training after round k's measurements and waits before round k+1's, so round
    k+1's search runs beside the training on the other core, with the model trained through round k-1. (Training
    on everything grows with the data: 1.0 s at 100 programs of ResNet-18, 2.5 s at 200, 5.0 s at 800 on a Zen 3,
    one thread; a 15-minute template-free run spent ~3 s of every ~22 s round on it.) Which model a search uses
    depends only on the order of updates and waits, never on how fast a thread ran."""

    def __init__(self, params: dict | None = None, num_rounds: int = NUM_ROUNDS, seed: int = 0, base=None):
        """base: a trained xgboost Booster to start from (tuning.pretrained): it predicts until the first update,
        and every training adds trees to a copy of it instead of starting from nothing."""
        self.params = {**XGB_PARAMS, **(params or {})}
        self.num_rounds = num_rounds
        self.base = base
        self.booster = base
        self.metadata: dict | None = None  # what a pretrained base was trained on (tuning.pretrained)
        self.fallback = RandomModel(seed)
        self.features: list[np.ndarray] = []
        self.costs: list[float] = []
        self.groups: list[str] = []
        self._training: Future | None = None  # a background training not installed yet

    # ------------------------------------------------------------------ training
    def update(self, records: Iterable, background: bool = False) -> None:
        feats, costs, groups = [], [], []
        for task, schedule, cost in map(_as_triple, records):
            f = _try_featurize(task, schedule)
            if f is None:
                continue  # a record the current compiler cannot replay teaches nothing
            feats.append(f)
            costs.append(cost)
            groups.append(task.key)
        if feats:
            self.update_features(feats, costs, groups, background)

    def update_features(self, features: Sequence[np.ndarray], costs: Sequence[float],
                        groups: Sequence[str] | None = None, background: bool = False) -> None:
        """Add pre-computed programs (one feature matrix each) and retrain on everything: now, or in a thread
        whose model `wait()` installs (background)."""
        if len(features) != len(costs) or (groups is not None and len(groups) != len(costs)):
            raise ValueError(f"update_features: {len(features)} feature matrices, {len(costs)} costs, "
                             f"{len(groups) if groups is not None else '-'} groups: counts must match")
        self.wait()  # an earlier training, installed first: updates apply in order
        self.features += list(features)
        self.costs += [np.inf if c is None else float(c) for c in costs]
        self.groups += list(groups) if groups is not None else [""] * len(costs)
        rows, ids = stack_programs(self.features)
        labels = normalized_throughput(self.costs, self.groups)
        if background:
            # a thread of its own that ends with the training (no idle thread left for a fork to inherit)
            trainer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relayish-cost-model")
            self._training = trainer.submit(self._train, rows, ids, labels)
            trainer.shutdown(wait=False)
        else:
            self.fit_arrays(rows, ids, labels)

    def wait(self) -> None:
        """Install the model a background update is training (waiting for it); nothing when none is pending."""
        if self._training is not None:
            training, self._training = self._training, None
            self.booster = training.result()

    def fit_arrays(self, rows: np.ndarray, program_ids: np.ndarray, labels: np.ndarray) -> None:
        """Train from scratch: rows (n_rows, NUM_FEATURES), program id per row (0..n_programs-1), label per
        program. The weight of a program is its label (Ansor)."""
        self.wait()
        self.booster = self._train(rows, program_ids, labels)

    def _train(self, rows: np.ndarray, program_ids: np.ndarray, labels: np.ndarray):
        """A booster trained on these programs (None when none was measured successfully); touches no state."""
        import xgboost as xgb
        rows = np.asarray(rows, np.float32)
        program_ids = np.asarray(program_ids, np.int64)
        labels = np.asarray(labels, np.float64)
        if rows.ndim != 2 or rows.shape[1] != NUM_FEATURES or len(rows) != len(program_ids):
            raise ValueError(f"fit_arrays: rows must be (n, {NUM_FEATURES}) with one program id per row; got "
                             f"rows {rows.shape}, {len(program_ids)} ids")
        if len(program_ids) and (program_ids.min() < 0 or program_ids.max() >= len(labels)):
            raise ValueError(f"fit_arrays: program ids must lie in [0, {len(labels)})")
        if not np.any(labels > 0):
            return self.base  # nothing measured successfully: nothing to learn
        weights = labels.copy()

        def objective(preds, _dtrain):
            return pack_sum_grad_hess(preds, program_ids, labels, weights)

        def metric(preds, _dtrain):
            return "pack-sum-rmse", math.sqrt(pack_sum_loss(preds, program_ids, labels, weights) / weights.sum())

        dtrain = xgb.DMatrix(rows)
        base = None if self.base is None else self.base.copy()  # xgb.train grows the booster it is given
        return xgb.train(self.params, dtrain, num_boost_round=self.num_rounds, obj=objective,
                         custom_metric=metric, evals=[(dtrain, "train")], verbose_eval=False,
                         early_stopping_rounds=EARLY_STOPPING_ROUNDS, xgb_model=base)

    # ------------------------------------------------------------------ prediction
    def predict(self, task, schedules: Sequence[Schedule]) -> np.ndarray:
        feats = featurize_all(task, schedules)
        ok = np.array([f is not None for f in feats], bool)
        scores = np.full(len(schedules), -np.inf)
        if ok.any():
            scores[ok] = self.predict_features([f for f in feats if f is not None])
        return scores

    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Score of each program given its feature matrix: the sum of its statements' predictions."""
        if self.booster is None:
            return self.fallback.predict(None, features)
        import xgboost as xgb
        rows, ids = stack_programs(features)
        preds = self.booster.predict(xgb.DMatrix(rows), iteration_range=(0, trees_in_use(self.booster)))
        return program_sums(preds.astype(np.float64), ids, len(features))


def trees_in_use(booster) -> int:
    """The rounds a prediction uses: up to the best one when training stopped early, else all of them."""
    try:
        return booster.best_iteration + 1
    except AttributeError:  # no early stopping (a model saved without it)
        return booster.num_boosted_rounds()


def _try_featurize(task, schedule) -> np.ndarray | None:
    """featurize, or None for a program that does not apply or lower (it could not run either)."""
    try:
        return featurize(task, schedule)
    except (ScheduleError, AssertionError):  # lowering asserts on states the steps let through but it cannot lower
        return None


# Worker processes that featurize_all spreads its programs over (parallel_featurization), or None: this process
_FEATURE_WORKERS = None
FEATURE_CHUNK = 4  # programs per job: lowering a Winograd program takes ~0.1-0.5 s, a job's round trip ~1 ms


@contextlib.contextmanager
def parallel_featurization(pool):
    """Within the block, featurize_all (and so every model's predict) lowers the programs it has no features of
    on `pool`'s worker processes (a tuning.pool.WorkerPool) instead of in this one. Features are a function of
    the program alone: the scores, and what a search chooses, are the same as in one process."""
    global _FEATURE_WORKERS
    before, _FEATURE_WORKERS = _FEATURE_WORKERS, pool
    try:
        yield
    finally:
        _FEATURE_WORKERS = before


def featurize_all(task, schedules: Sequence[Schedule]) -> list:
    """_try_featurize of every schedule, in order: the ones not cached computed on the workers of
    parallel_featurization when it is on and more than one is missing, else here."""
    keys = [(task.key, s.to_json()) for s in schedules]
    feats = [_FEATURE_CACHE.get(key) for key in keys]
    todo = [k for k, f in enumerate(feats) if f is None]
    if _FEATURE_WORKERS is not None and len(todo) > 1:
        todo = _featurize_on_workers(_FEATURE_WORKERS, task, keys, todo, feats)
    for k in todo:
        feats[k] = _try_featurize(task, schedules[k])
    return feats


def _featurize_on_workers(pool, task, keys: list, todo: list, feats: list) -> list:
    """Fill feats[k] for k in todo from the pool's workers (and the cache); returns the k left to do here (those
    of jobs lost when a worker died, killed from outside)."""
    spec = TaskSpec.of(task)
    chunks = [todo[i:i + FEATURE_CHUNK] for i in range(0, len(todo), FEATURE_CHUNK)]
    done = set()
    try:
        futures = [pool.submit(_features_job, spec, [keys[k][1] for k in chunk]) for chunk in chunks]
        for chunk, future in zip(chunks, futures):
            for k, f in zip(chunk, future.result()):
                if f is not None:
                    f.setflags(write=False)
                    _remember_features(keys[k], f)
                feats[k] = f
                done.add(k)
    except BrokenExecutor:
        pool.restart()
    return [k for k in todo if k not in done]


def _features_job(spec: TaskSpec, schedule_jsons: list) -> list:
    """Worker: the features of each program of the task (None where it does not apply or lower)."""
    task = _task_of(spec)
    return [_try_featurize(task, Schedule.from_json(js)) for js in schedule_jsons]


def _as_triple(record) -> tuple:
    if isinstance(record, tuple):
        if len(record) != 3:
            raise ValueError(f"a training record is (task, schedule, cost); got a tuple of {len(record)}")
        return record
    return record.task, record.schedule, record.cost

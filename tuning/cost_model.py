"""The learned cost model of the auto-scheduler (Ansor, OSDI'20, section 5.2).

A program (a task plus a schedule) is lowered and featurized statement by statement (`tuning.features`). A
gradient-boosted tree model f predicts one score per statement; the program's score is the sum over its
statements. The labels are normalized throughputs, y = (best cost of the task) / cost in [0, 1], so programs of
different tasks share one scale, and the loss weights each program by its label, so that the model spends its
capacity on ranking the fast programs right (the ones the search keeps):

    loss(f) = sum_i  w_i * (sum_{s in S(i)} f(s) - y_i)^2,    w_i = y_i

`predict` returns these scores: higher is better. `pairwise_accuracy` is how the model is judged: the fraction
of pairs of programs whose predicted order is their measured order.

    python -m tuning.cost_model --collect data.npz [--count 250]   # measure variants of a ResNet-18 conv
    python -m tuning.cost_model --evaluate data.npz [--train 200]   # train, rank the held-out programs
"""
from __future__ import annotations

import math
import random
from collections import OrderedDict
from typing import Iterable, Protocol, Sequence

import numpy as np

from compiler.lower import lower
from compiler.schedule import Schedule, ScheduleError

from .features import NUM_FEATURES, extract_features

# Ansor's settings, except for shallower trees, a smaller step, no split penalty and more rounds: on held-out
# measured programs (python -m tuning.cost_model --evaluate) this ranks random schedule variants better (pairwise
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
    feats = extract_features(lower(schedule.apply(task.initial_state()), "features"))
    feats.setflags(write=False)
    _FEATURE_CACHE[key] = feats
    if len(_FEATURE_CACHE) > FEATURE_CACHE_SIZE:
        _FEATURE_CACHE.popitem(last=False)
    return feats


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

    def update(self, records: Iterable) -> None:
        pass

    def predict(self, task, schedules: Sequence[Schedule]) -> np.ndarray:
        return self.rng.random(len(schedules))


class XGBoostModel:
    """Per-statement gradient-boosted trees trained with Ansor's throughput-weighted pack-sum loss.

    Keeps every program it was given (features, cost, task key) and retrains from scratch on all of them after
    each `update` (a few hundred programs train in well under a second). Before any data it predicts like
    RandomModel."""

    def __init__(self, params: dict | None = None, num_rounds: int = NUM_ROUNDS, seed: int = 0):
        self.params = {**XGB_PARAMS, **(params or {})}
        self.num_rounds = num_rounds
        self.booster = None
        self.fallback = RandomModel(seed)
        self.features: list[np.ndarray] = []
        self.costs: list[float] = []
        self.groups: list[str] = []

    # ------------------------------------------------------------------ training
    def update(self, records: Iterable) -> None:
        feats, costs, groups = [], [], []
        for task, schedule, cost in map(_as_triple, records):
            f = _try_featurize(task, schedule)
            if f is None:
                continue  # a record the current compiler cannot replay teaches nothing
            feats.append(f)
            costs.append(cost)
            groups.append(task.key)
        if feats:
            self.update_features(feats, costs, groups)

    def update_features(self, features: Sequence[np.ndarray], costs: Sequence[float],
                        groups: Sequence[str] | None = None) -> None:
        """Add pre-computed programs (one feature matrix each) and retrain on everything."""
        if len(features) != len(costs) or (groups is not None and len(groups) != len(costs)):
            raise ValueError(f"update_features: {len(features)} feature matrices, {len(costs)} costs, "
                             f"{len(groups) if groups is not None else '-'} groups: counts must match")
        self.features += list(features)
        self.costs += [np.inf if c is None else float(c) for c in costs]
        self.groups += list(groups) if groups is not None else [""] * len(costs)
        rows, ids = stack_programs(self.features)
        self.fit_arrays(rows, ids, normalized_throughput(self.costs, self.groups))

    def fit_arrays(self, rows: np.ndarray, program_ids: np.ndarray, labels: np.ndarray) -> None:
        """Train from scratch: rows (n_rows, NUM_FEATURES), program id per row (0..n_programs-1), label per
        program. The weight of a program is its label (Ansor)."""
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
            self.booster = None  # nothing measured successfully: nothing to learn
            return
        weights = labels.copy()

        def objective(preds, _dtrain):
            return pack_sum_grad_hess(preds, program_ids, labels, weights)

        def metric(preds, _dtrain):
            return "pack-sum-rmse", math.sqrt(pack_sum_loss(preds, program_ids, labels, weights) / weights.sum())

        dtrain = xgb.DMatrix(rows)
        self.booster = xgb.train(self.params, dtrain, num_boost_round=self.num_rounds, obj=objective,
                                 custom_metric=metric, evals=[(dtrain, "train")], verbose_eval=False,
                                 early_stopping_rounds=EARLY_STOPPING_ROUNDS)

    # ------------------------------------------------------------------ prediction
    def predict(self, task, schedules: Sequence[Schedule]) -> np.ndarray:
        feats = [_try_featurize(task, s) for s in schedules]
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
        preds = self.booster.predict(xgb.DMatrix(rows), iteration_range=(0, self.booster.best_iteration + 1))
        return program_sums(preds.astype(np.float64), ids, len(features))


def _try_featurize(task, schedule) -> np.ndarray | None:
    """featurize, or None for a program that does not apply or lower (it could not run either)."""
    try:
        return featurize(task, schedule)
    except (ScheduleError, AssertionError):  # lowering asserts on states the steps let through but it cannot lower
        return None


def _as_triple(record) -> tuple:
    if isinstance(record, tuple):
        if len(record) != 3:
            raise ValueError(f"a training record is (task, schedule, cost); got a tuple of {len(record)}")
        return record
    return record.task, record.schedule, record.cost


# ---------------------------------------------------------------------------------------------- measured data
# Real measurements to train and judge the model on: variants of a convolution task's schedule (mutations of its
# default schedule, or random tilings, loop orders and annotations), built and timed.

def conv_task(in_blocks=4, size=8, out_blocks=4, block=16, kernel=3):
    """A conv2d_nchwc + bias + relu task of the given size (padding keeps the spatial size)."""
    from compiler.task import build_task
    from relayish.expr import Function, TensorType, Var, call
    x = Var("x", TensorType((1, in_blocks, size, size, block), "float32"))
    w = Var("w", TensorType((out_blocks, in_blocks, kernel, kernel, block, block), "float32"))
    b = Var("b", TensorType((1, out_blocks, 1, 1, block), "float32"))
    pad = kernel // 2
    y = call("nn.conv2d_nchwc", x, w, strides=(1, 1), padding=(pad,) * 4, dilation=(1, 1))
    return build_task(Function((x, w, b), call("nn.relu", call("add", y, b)), {"Primitive": 1}))


def resnet_conv_task(model_path: str = "models/resnet18.onnx"):
    """The cheapest 3x3 conv + bias + relu task of ResNet-18 with a 7x7 output (512 channels)."""
    from compiler.build import cg_vector_width, extract_tasks
    from compiler.passes import PassContext, run_pipeline
    from frontends import from_onnx
    ctx = PassContext(opt_level=3, layout="NCHWc", vector_width=cg_vector_width())
    tasks = extract_tasks(run_pipeline(from_onnx(model_path), ctx))
    convs = [t for t in tasks if t.ops == ["nn.conv2d_nchwc", "add", "nn.relu"] and
             t.inputs[1].shape[2:4] == (3, 3) and t.outputs[0].shape[2:4] == (7, 7)]
    if not convs:
        raise ValueError(f"{model_path}: no 3x3 conv + add + relu task with a 7x7 output")
    return min(convs, key=lambda t: t.flops)


class _Steps:
    """Applies steps to a working state as they are chosen; an illegal one is skipped (as a search would)."""

    def __init__(self, state):
        self.state, self.steps = state.copy(), []

    def add(self, step) -> bool:
        try:
            step.apply(self.state)
        except ScheduleError:
            return False
        self.steps.append(step)
        return True

    def leaves(self, stage: str) -> list[str]:
        return [i.name for i in self.state.stage(stage).leaves]


def random_variant(task, rng: random.Random) -> Schedule:
    """A random legal schedule of a (pad ->) reduction -> elementwise-epilogue task: the anchor computed at a
    random loop of a randomly tiled output stage, random loop orders and annotations."""
    from compiler.schedule import Annotate, CacheWrite, ComputeAt, ComputeInline, Fuse, Pragma, Reorder, Split
    b = _Steps(task.initial_state())
    stages = b.state.stages
    for st in reversed(stages):
        if not st.is_output and not st.is_reduction and (st.op.tag != "pad" or rng.random() < 0.3):
            b.add(ComputeInline(st.name))
    anchor = next(s for s in reversed(stages) if s.is_reduction)
    out = next(s for s in stages if s.is_output)
    if anchor is out:
        b.add(CacheWrite(anchor.name))
        anchor = b.state.stage(anchor.name + ".local")
    ext = out.leaf_extents()
    outer, inner = [], []
    for name in b.leaves(out.name):
        f = rng.choice(_tile_factors(ext[name]))
        if f == 1:
            outer.append(name)
        elif f >= ext[name]:
            inner.append(name)
        elif b.add(Split(out.name, name, (f,))):
            outer.append(f"{name}.0")
            inner.append(f"{name}.1")
    b.add(Reorder(out.name, tuple(outer + inner)))
    n_par = rng.randint(0, len(outer))
    if n_par > 1 and b.add(Fuse(out.name, tuple(outer[:n_par]))):
        outer = ["@".join(outer[:n_par])] + outer[n_par:]
        n_par = 1
    if n_par:
        b.add(Annotate(out.name, outer[0], "parallel"))
    if rng.random() < 0.9 and outer:
        b.add(ComputeAt(anchor.name, out.name, rng.choice(outer[max(n_par - 1, 0):])))
    if inner and rng.random() < 0.8:
        b.add(Annotate(out.name, inner[-1], "vectorize"))
    if len(inner) > 1 and rng.random() < 0.5:
        b.add(Annotate(out.name, inner[-2], "unroll"))
    _random_anchor_loops(b, anchor.name, rng)
    for st in stages:
        if st.op.tag == "pad" and st.loc.is_root:
            names = b.leaves(st.name)
            if b.add(Fuse(st.name, tuple(names[:3]))) and rng.random() < 0.8:
                b.add(Annotate(st.name, b.leaves(st.name)[0], "parallel"))
            if rng.random() < 0.8:
                b.add(Annotate(st.name, b.leaves(st.name)[-1], "vectorize"))
    if rng.random() < 0.3:
        b.add(Pragma(anchor.name, b.leaves(anchor.name)[0], "auto_unroll_max_step", rng.choice([16, 64, 512])))
    return Schedule(tuple(b.steps))


def _random_anchor_loops(b: _Steps, name: str, rng: random.Random) -> None:
    """Split a reduction loop, then order: [spatial outer] [reduce outer] [spatial mid] [reduce inner] [spatial
    inner] with random cut points; vectorize / unroll the innermost spatial loops sometimes."""
    from compiler.schedule import Annotate, Fuse, Reorder, Split
    st = b.state.stage(name)
    red = [i.name for i in st.leaves if i.kind == "reduce"]
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    ext = st.leaf_extents()
    splittable = [r for r in red if ext[r] >= 4]
    red_outer, red_inner = list(red), []
    if splittable and rng.random() < 0.5:
        r = rng.choice(splittable)
        if b.add(Split(name, r, (rng.choice([d for d in _divisors(ext[r]) if 1 < d < ext[r]] or [2]),))):
            red_outer = [x if x != r else f"{r}.0" for x in red]
            red_inner = [f"{r}.1"]
    rng.shuffle(red_outer)
    cut_inner = rng.randint(max(0, len(sp) - 3), len(sp))
    cut_outer = rng.randint(0, cut_inner)
    order = sp[:cut_outer] + red_outer + sp[cut_outer:cut_inner] + red_inner + sp[cut_inner:]
    b.add(Reorder(name, tuple(order)))
    leaves = b.leaves(name)
    if st.loc.is_root:  # not computed at the output: parallelize its own outer spatial loops
        if cut_outer >= 2 and b.add(Fuse(name, tuple(leaves[:cut_outer]))):
            leaves = b.leaves(name)
        if cut_outer >= 1:
            b.add(Annotate(name, leaves[0], "parallel"))
    if sp and leaves[-1] == sp[-1] and rng.random() < 0.8:
        b.add(Annotate(name, leaves[-1], "vectorize"))
    if len(leaves) > 1 and rng.random() < 0.5 and b.state.stage(name).leaves[-2].kind == "spatial":
        b.add(Annotate(name, leaves[-2], "unroll"))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile_factors(extent: int) -> list[int]:
    """Inner tile sizes to draw from: the divisors, and a non-divisor (a guarded tail) when there is one."""
    out = _divisors(extent)
    tail = next((f for f in (4, 3, 5, 6, 7) if f < extent and extent % f), None)
    return out + [tail] if tail else out


MAX_UNROLLED = 512  # statement copies after unrolling: a few thousand take LLVM minutes and gigabytes


def unrolled_size(func) -> int:
    """Statements in the kernel once unrolled: by annotation, and innermost loops of up to 16 iterations that
    LLVM unrolls fully on its own (vector loops that codegen vectorizes count once). A proxy of compile time."""
    from compiler.codegen import vectorize_blocker
    from compiler.codegen.analysis import walk_stmt
    from compiler.loopir import For, IfThenElse, Seq, Store

    def size(s, copies):
        if isinstance(s, Store):
            return copies
        if isinstance(s, Seq):
            return sum(size(x, copies) for x in s.stmts)
        if isinstance(s, IfThenElse):
            return size(s.then_case, copies) + (size(s.else_case, copies) if s.else_case is not None else 0)
        if isinstance(s, For):
            n = s.extent.value if hasattr(s.extent, "value") else 1
            innermost = not any(isinstance(x, For) for x in walk_stmt(s.body))
            vector = s.kind == "vectorize" and vectorize_blocker(s) is None
            if s.kind == "unroll" or (innermost and s.kind != "parallel" and not vector and n <= 16):
                copies *= n
        return size(s.body, copies)  # For, LetStmt, Allocate
    return size(func.body, 1)


def perturbed_variant(task, rng: random.Random, base: Schedule | None = None, max_mutations: int = 4) -> Schedule:
    """The task's default schedule (or `base`) after 1..max_mutations random mutations of its steps, as an
    evolutionary search makes them: a split's tile size, an annotation (none/unroll/vectorize), an extra unroll,
    a compute_at position, a reduction loop order, the padding inlined or not, an auto-unroll pragma. The steps
    are then replayed on the initial state; one that no longer applies is dropped."""
    from compiler.build import cg_vector_width
    from compiler.default_schedule import default_schedule
    steps = list((base or default_schedule(task.initial_state(), cg_vector_width())).steps)
    for _ in range(rng.randint(1, max_mutations)):
        steps = _mutate(task, steps, rng)
    b = _Steps(task.initial_state())
    for step in steps:
        b.add(step)
    return Schedule(tuple(b.steps))


def _mutate(task, steps: list, rng: random.Random) -> list:
    from compiler.schedule import Annotate, ComputeAt, ComputeInline, Pragma, Reorder, Split
    kind = rng.choice(["tile", "tile", "annotate", "annotate", "unroll", "compute_at", "order", "inline", "pragma"])
    picks = {"tile": Split, "annotate": Annotate, "compute_at": ComputeAt, "order": Reorder}
    if kind in picks:
        idx = [i for i, s in enumerate(steps) if isinstance(s, picks[kind])]
        if not idx:
            return steps
        k = rng.choice(idx)
        state = _replay(task, steps[:k])
        old = steps[k]
        try:
            st = state.stage(old.stage)
            if kind == "tile":
                new = Split(old.stage, old.iter, (rng.choice(_tile_factors(st.leaf_extents()[old.iter])),))
            elif kind == "annotate":
                new = Annotate(old.stage, old.iter, rng.choice(["none", "unroll", "vectorize"]))
            elif kind == "compute_at":
                new = ComputeAt(old.stage, old.target, rng.choice([i.name for i in state.stage(old.target).leaves]))
            else:
                new = Reorder(old.stage, _shuffle_reductions(st, old.order, rng))
        except ScheduleError:
            return steps
        return steps[:k] + [new] + steps[k + 1:]
    state = task.initial_state()
    if kind == "inline":
        pads = [st.name for st in state.stages if st.op.tag == "pad"]
        inlined = [s for s in steps if isinstance(s, ComputeInline) and s.stage in pads]
        return [s for s in steps if s not in inlined] if inlined else [ComputeInline(p) for p in pads] + steps
    final = _replay(task, steps)
    st = rng.choice([s for s in final.stages if not s.loc.is_inline])
    leaf = rng.choice(st.leaves).name
    if kind == "unroll":
        return steps + [Annotate(st.name, leaf, "unroll")]
    return steps + [Pragma(st.name, st.leaves[0].name, "auto_unroll_max_step", rng.choice([0, 16, 64, 512]))]


def _replay(task, steps: list):
    b = _Steps(task.initial_state())
    for step in steps:
        b.add(step)
    return b.state


def _shuffle_reductions(st, order: tuple, rng: random.Random) -> tuple:
    """The loop order with its reduction loops permuted among their own positions."""
    kinds = {i.name: i.kind for i in st.leaves}
    pos = [i for i, n in enumerate(order) if kinds.get(n) == "reduce"]
    red = [order[i] for i in pos]
    rng.shuffle(red)
    out = list(order)
    for i, n in zip(pos, red):
        out[i] = n
    return tuple(out)


def measure(task, schedules: Sequence[Schedule], threads: int = 1, cpu_clock: bool = True, rounds: int = 2,
            min_seconds: float = 0.02, max_repeat: int = 20, batch: int = 16, check: bool = True) -> np.ndarray:
    """Cost in seconds of each schedule: the min over `rounds` interleaved rounds of repeated runs of its kernel;
    inf when it does not apply, build or give the reference's results. Kernels are built `batch` at a time into
    one library, to amortize the build.

    The default clock is the process's CPU time with one thread: on a machine shared with other work, wall time
    counts the time the kernel waits for a core (seen here: the same kernel 1x to 4x apart on two runs, against
    +-10% in CPU time). With threads > 1 the CPU time would add up the threads' work: use cpu_clock=False."""
    import ctypes
    import tempfile
    import time

    from relayish.interp import evaluate
    if cpu_clock and threads != 1:
        raise ValueError(f"measure: the CPU-time clock needs threads=1 (got threads={threads}); pass cpu_clock=False")
    clock = time.process_time if cpu_clock else time.perf_counter
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in task.inputs]
    ref = np.asarray(evaluate(task.func, inputs)[0]) if check else None
    costs = np.full(len(schedules), np.inf)
    with tempfile.TemporaryDirectory(prefix="relayish_cost_model_") as tmp:
        for start in range(0, len(schedules), batch):
            kernels = _build_batch(task, schedules, range(start, min(start + batch, len(schedules))), tmp)
            libs = list({id(lib): lib for lib, _, _ in kernels}.values())
            for lib in libs:
                lib.relayish_set_num_threads(ctypes.c_int32(threads))
            runs = {i: _kernel_call(lib, func, inputs) for lib, i, func in kernels}
            for _ in range(rounds):
                for i, (run, out) in runs.items():
                    costs[i] = min(costs[i], _time_min(run, clock, min_seconds, max_repeat))
            for i, (run, out) in runs.items():
                if check and not _rel_error(out, ref) <= 1e-4:
                    costs[i] = np.inf
            for lib in libs:
                lib.relayish_pool_idle()
    return costs


def _build_batch(task, schedules, indices, directory: str) -> list:
    """[(library, index, PrimFunc)] of the schedules that apply and build; one library for all when possible."""
    import ctypes
    import os

    from compiler.codegen import build_library
    funcs = {}
    for i in indices:
        try:
            funcs[i] = lower(schedules[i].apply(task.initial_state()), f"variant{i}")
        except ScheduleError:
            pass
    groups = [list(funcs)]
    try:
        path = build_library(list(funcs.values()), None, os.path.join(directory, f"batch{min(indices)}.so"))
        libs = [ctypes.CDLL(path)]
    except Exception:  # a codegen failure of one kernel must not lose the batch: build them one by one
        groups, libs = [], []
        for i, f in funcs.items():
            try:
                libs.append(ctypes.CDLL(build_library([f], None, os.path.join(directory, f"{f.name}.so"))))
                groups.append([i])
            except Exception:
                continue
    return [(lib, i, funcs[i]) for lib, group in zip(libs, groups) for i in group]


def _kernel_call(lib, func, inputs: list):
    """(a no-argument function running the kernel once, its output array): 64-byte aligned arguments in
    parameter order (inputs, then zeroed outputs and scratch)."""
    import ctypes

    from runtime.aligned import aligned_empty
    args = [aligned_empty(b.shape, b.dtype) for b in func.params]
    for a, x in zip(args, inputs):
        a[...] = x
    for a in args[len(inputs):]:
        a[...] = 0
    fn = getattr(lib, func.name)
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in args]

    def run(_keep_alive=args):  # the arrays must outlive the raw pointers
        fn(*ptrs)
    return run, args[len(inputs)]


def _time_min(run, clock, min_seconds: float, max_repeat: int) -> float:
    """Min over at least 3 timed runs after a warm-up (page faults, pool start), more while under min_seconds."""
    run()
    best, total, n = math.inf, 0.0, 0
    while n < 3 or (total < min_seconds and n < max_repeat):
        t = clock()
        run()
        dt = clock() - t
        best, total, n = min(best, dt), total + dt, n + 1
    return best


def _rel_error(ours: np.ndarray, ref: np.ndarray) -> float:
    if ours.shape != ref.shape:
        return math.inf
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(ours.astype(np.float64) - ref))) / scale


def variants(task, count: int, seed: int = 0, kind: str = "perturb") -> list[Schedule]:
    """The default schedule, then distinct variants ("perturb": mutations of the default schedule; "random":
    random tilings, orders and annotations) whose unrolled code stays within MAX_UNROLLED."""
    from compiler.build import cg_vector_width
    from compiler.default_schedule import default_schedule
    make = {"perturb": perturbed_variant, "random": random_variant}[kind]
    rng = random.Random(seed)
    schedules = [default_schedule(task.initial_state(), cg_vector_width())]
    seen = {schedules[0].to_json()}
    while len(schedules) < count:
        s = make(task, rng)
        if s.to_json() not in seen and unrolled_size(lower(s.apply(task.initial_state()))) <= MAX_UNROLLED:
            seen.add(s.to_json())
            schedules.append(s)
    return schedules


def collect(task, count: int, seed: int = 0, threads: int = 1, kind: str = "perturb", log=None) -> dict:
    """Measure `count` variants of a task (see `variants`): a dataset dict."""
    schedules = variants(task, count, seed, kind)
    costs = []
    for k in range(0, count, 16):
        costs.extend(measure(task, schedules[k:k + 16], threads=threads, cpu_clock=threads == 1))
        if log:
            log(f"measured {len(costs)}/{count}, best so far {np.min(costs) * 1e3:.3f} ms")
    return {"schedules": np.array([s.to_json() for s in schedules]), "costs": np.asarray(costs),
            "task_key": np.array(task.key)}


def evaluate_split(features: list, costs: np.ndarray, n_train: int, seed: int = 0, rtol: float = 0.0) -> float:
    """Train on `n_train` random programs, return the pairwise accuracy on the others (the successful ones)."""
    order = np.random.default_rng(seed).permutation(len(costs))
    train, test = order[:n_train], np.array([i for i in order[n_train:] if np.isfinite(costs[i])])
    model = XGBoostModel()
    model.update_features([features[i] for i in train], [costs[i] for i in train])
    return pairwise_accuracy(model.predict_features([features[i] for i in test]), costs[test], rtol)


def main(argv=None) -> int:
    import argparse
    import os
    import sys
    p = argparse.ArgumentParser(prog="python -m tuning.cost_model", description=__doc__.split("\n\n")[0])
    p.add_argument("--collect", metavar="OUT.npz", help="measure variants of a ResNet-18 conv task")
    p.add_argument("--evaluate", metavar="DATA.npz", help="train on part of a dataset, rank the rest")
    p.add_argument("--model", default="models/resnet18.onnx")
    p.add_argument("--count", type=int, default=250)
    p.add_argument("--variants", choices=["perturb", "random"], default="perturb",
                   help="mutations of the default schedule (default), or random tilings/orders/annotations")
    p.add_argument("--train", type=int, default=200)
    p.add_argument("--threads", type=int, default=1,
                   help="1 (default): CPU time of one thread, robust on a shared machine; more: wall time")
    p.add_argument("--splits", type=int, default=5, help="random train/test splits to average over")
    args = p.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if not args.collect and not args.evaluate:
        p.error("give --collect OUT.npz or --evaluate DATA.npz")
    path = args.evaluate
    if args.collect:
        task = resnet_conv_task(args.model)
        log(f"task {task} inputs {[t.shape for t in task.inputs]}")
        data = collect(task, args.count, threads=args.threads, kind=args.variants, log=log)
        np.savez(args.collect, **data)
        path = args.collect
    if not os.path.isfile(path):
        p.error(f"{path}: no such dataset (make one with --collect)")
    data = np.load(path)
    task = resnet_conv_task(args.model)
    if str(data["task_key"]) != task.key:
        raise SystemExit(f"{path} holds programs of task {data['task_key']}, not of {task} from {args.model}")
    costs = data["costs"]
    features = [featurize(task, Schedule.from_json(str(s))) for s in data["schedules"]]  # with today's features
    ok = np.isfinite(costs)
    print(f"{len(costs)} programs of {task}, {int((~ok).sum())} failed; cost min {costs[ok].min() * 1e3:.3f} ms, "
          f"median {np.median(costs[ok]) * 1e3:.3f} ms, max {costs[ok].max() * 1e3:.3f} ms")
    for rtol in (0.0, 0.05):
        accs = [evaluate_split(features, costs, args.train, seed, rtol) for seed in range(args.splits)]
        pairs = "all pairs" if rtol == 0 else f"pairs whose costs differ by more than {rtol:.0%}"
        print(f"pairwise accuracy on the held-out programs ({pairs}), trained on {args.train}: mean "
              f"{np.mean(accs):.3f}, min {np.min(accs):.3f} over {args.splits} splits {np.round(accs, 3).tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

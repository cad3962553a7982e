"""AutoTVM's model-based tuner: XGBoost cost model + simulated annealing + diversity-aware batch selection.

Each batch (Chen et al., "Learning to Optimize Tensor Programs", algorithm 1):
  1. Q <- simulated annealing over the space under the model f (a walk that changes one knob at a time, accepting
     worse points with a probability that falls with the temperature), keeping the plan_size best unvisited points;
  2. S <- (1 - eps) b points of Q chosen for quality and diversity, maximizing
         L(S) = -sum_{s in S} f(s) + alpha * sum_j |union_{s in S} {s_j}|
     (f is a cost, the negated predicted score here; s_j the value of knob j), plus eps b random points;
  3. measure S; 4. retrain the model on everything measured.
The model learns from knob features (space.ConfigEntity.features); labels are the task's best cost / cost
(failures 0), regression ("reg") or pairwise rank ("rank") loss. Transfer learning: `load_history` trains a
global model on other workloads' configurations of the same template; the local model then fits on top of it
(xgboost base_margin), so that f = f_global + f_local, and the first batch is already guided.

`diversity_objective` and `select_diverse` are pure and tested against brute force.
"""
from __future__ import annotations

import heapq
import itertools
import math

import numpy as np

from .tuner import Tuner, load_configs

XGB_TUNER_PARAMS = {"plan_size": 64, "alpha": 0.05, "eps": 0.05, "sa_iters": 150, "sa_parallel": 64,
                    "sa_early_stop": 30, "num_rounds": 60, "node_budget": 5_000}
XGB_PARAMS = {"max_depth": 3, "eta": 0.3, "min_child_weight": 1, "gamma": 1e-4, "nthread": 1, "verbosity": 0,
              "seed": 0}


# ---------------------------------------------------------------------------------------------- selection

def diversity_objective(subset, scores, knobs, alpha: float) -> float:
    """L(S) with f = -score: the sum of the predicted scores of S plus alpha x the number of distinct
    (knob, value) pairs S covers."""
    subset = list(subset)
    if not subset:
        return 0.0
    covered = sum(len({knobs[i][j] for i in subset}) for j in range(len(knobs[subset[0]])))
    return float(sum(scores[i] for i in subset)) + alpha * covered


def select_diverse(scores, knobs, k: int, alpha: float, node_budget: int = XGB_TUNER_PARAMS["node_budget"]):
    """The k-subset of candidates maximizing diversity_objective, as sorted indices. Branch and bound over the
    candidates in score order, started from the greedy choice improved by swaps (coverage is submodular, so
    greedy alone is within 1 - 1/e); exact unless more than node_budget nodes are needed, then the best found."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return []
    order = sorted(range(n), key=lambda i: -scores[i])
    m = len(knobs[0])
    best = _greedy_swap(scores, knobs, k, alpha)
    best_val = diversity_objective(best, scores, knobs, alpha)
    nodes = 0

    def bound(pos, chosen, value, covered):
        left = k - len(chosen)
        rest = order[pos:]
        top = sum(sorted((scores[i] for i in rest), reverse=True)[:left])
        new_vals = sum(len({knobs[i][j] for i in rest} - covered[j]) for j in range(m))
        return value + top + alpha * min(new_vals, left * m)

    def dfs(pos, chosen, value, covered):
        nonlocal best, best_val, nodes
        nodes += 1
        if len(chosen) == k:
            if value > best_val + 1e-12:
                best, best_val = sorted(chosen), value
            return
        if pos >= n or n - pos < k - len(chosen) or nodes > node_budget:
            return
        if bound(pos, chosen, value, covered) <= best_val + 1e-12:
            return
        i = order[pos]
        gain = scores[i] + alpha * sum(knobs[i][j] not in covered[j] for j in range(m))
        dfs(pos + 1, chosen + [i], value + gain, [c | {knobs[i][j]} for j, c in enumerate(covered)])
        dfs(pos + 1, chosen, value, covered)

    dfs(0, [], 0.0, [set() for _ in range(m)])
    return sorted(best)


def _greedy_swap(scores, knobs, k, alpha):
    chosen = []
    for _ in range(k):
        rest = [i for i in range(len(scores)) if i not in chosen]
        chosen.append(max(rest, key=lambda i: diversity_objective(chosen + [i], scores, knobs, alpha)))
    improved = True
    while improved:
        improved = False
        val = diversity_objective(chosen, scores, knobs, alpha)
        for a, b in itertools.product(list(chosen), range(len(scores))):
            if b in chosen:
                continue
            trial = [b if x == a else x for x in chosen]
            if diversity_objective(trial, scores, knobs, alpha) > val + 1e-12:
                chosen, improved = trial, True
                break
    return sorted(chosen)


# ---------------------------------------------------------------------------------------------- the tuner

class XGBTuner(Tuner):
    def __init__(self, *args, loss: str = "reg", params: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if loss not in ("reg", "rank"):
            raise ValueError(f"XGBTuner loss must be 'reg' or 'rank', got {loss!r}")
        self.loss = loss
        self.params = {**XGB_TUNER_PARAMS, **(params or {})}
        self.local = self.base = None

    # ------------------------------------------------------------------ model
    def _fit(self, feats, labels, groups, base_margin=None):
        import xgboost as xgb
        params = dict(XGB_PARAMS, objective="reg:squarederror" if self.loss == "reg" else "rank:pairwise")
        dtrain = xgb.DMatrix(np.asarray(feats, np.float32), label=np.asarray(labels, np.float32), nthread=1)
        if self.loss == "rank":
            order = np.argsort(groups, kind="stable")
            dtrain = xgb.DMatrix(np.asarray(feats, np.float32)[order], label=np.asarray(labels, np.float32)[order],
                                 nthread=1)
            _, counts = np.unique(np.asarray(groups)[order], return_counts=True)
            dtrain.set_group(counts)
            base_margin = None if base_margin is None else np.asarray(base_margin)[order]
        if base_margin is not None:
            dtrain.set_base_margin(np.asarray(base_margin, np.float32))
        return xgb.train(params, dtrain, num_boost_round=self.params["num_rounds"])

    def _margin(self, booster, feats):
        return booster.inplace_predict(np.asarray(feats, np.float32), predict_type="margin")

    def predict(self, indices) -> np.ndarray:
        """Predicted score (higher is faster) of configurations: f_global + f_local."""
        feats = np.array([self.space.get(i).features() for i in indices])
        out = np.zeros(len(indices))
        if self.base is not None:
            out += self._margin(self.base, feats)
        if self.local is not None:
            out += self._margin(self.local, feats)
        return out

    def update(self, indices, costs):
        super().update(indices, costs)
        ys = np.array(self.ys)
        if not np.isfinite(ys).any():
            return
        labels = np.where(np.isfinite(ys), np.nanmin(ys[np.isfinite(ys)]) / ys, 0.0)
        feats = np.array([self.space.get(i).features() for i in self.xs])
        margin = self._margin(self.base, feats) if self.base is not None else None
        self.local = self._fit(feats, labels, np.zeros(len(ys)), margin)

    def load_history(self, records, **kwargs) -> None:
        """Transfer learning from a records file: the configurations other workloads measured with this
        tuner's template (log_to_records stores them) train the global model."""
        rows = [r for r in load_configs(records, self.template.name) if self.task is None or r[0] != self.task.key]
        self.load_history_arrays([f for _, f, _ in rows], [c for _, _, c in rows], [k for k, _, _ in rows])

    def load_history_arrays(self, features, costs, groups) -> None:
        """Train the global model on other workloads' (knob features, cost, workload) triples; labels are
        normalized per workload. Features of another length (another template) are skipped."""
        width = len(self.space.get(0).features())
        keep = [(np.asarray(f), c, g) for f, c, g in zip(features, costs, groups) if len(f) == width]
        if not keep:
            return
        best = {}
        for _, c, g in keep:
            if np.isfinite(c):
                best[g] = min(best.get(g, np.inf), c)
        labels = [best[g] / c if np.isfinite(c) and g in best else 0.0 for _, c, g in keep]
        codes = {g: n for n, g in enumerate(dict.fromkeys(g for _, _, g in keep))}
        self.base = self._fit(np.array([f for f, _, _ in keep]), labels, [codes[g] for _, _, g in keep])

    # ------------------------------------------------------------------ batches
    def next_batch(self, n):
        if self.local is None and self.base is None:
            return self._unvisited_random(n)
        p = self.params
        pool = self.simulated_annealing(max(p["plan_size"], 2 * n))
        n_model = min(len(pool), n - int(round(p["eps"] * n)))
        picked = []
        if n_model > 0:
            scores = self.predict(pool)
            knobs = [self.space.point2knob(i) for i in pool]
            picked = [pool[i] for i in select_diverse(list(scores), knobs, n_model, p["alpha"], p["node_budget"])]
        self.visited.update(picked)
        return picked + self._unvisited_random(n - len(picked))

    def simulated_annealing(self, n_keep: int) -> list[int]:
        """The n_keep best unvisited configurations found by a parallel simulated annealing walk under the
        model (AutoTVM's SimulatedAnnealingOptimizer), best first."""
        p, dims, size = self.params, self.space.dims, len(self.space)
        points = [self.rng.randrange(size) for _ in range(min(p["sa_parallel"], size))]
        scores = self.predict(points)
        heap, in_heap = [], set()
        stale, temp = 0, 1.0
        cool = 1.0 / max(p["sa_iters"], 1)

        def offer(pts, scs):
            changed = False
            for pt, sc in zip(pts, scs):
                if pt in self.visited or pt in in_heap:
                    continue
                if len(heap) < n_keep:
                    heapq.heappush(heap, (sc, pt))
                elif sc > heap[0][0]:
                    in_heap.discard(heapq.heapreplace(heap, (sc, pt))[1])
                else:
                    continue
                in_heap.add(pt)
                changed = True
            return changed

        offer(points, scores)
        for _ in range(p["sa_iters"]):
            new = [self._neighbour(pt, dims) for pt in points]
            new_scores = self.predict(new)
            accept = np.exp(np.minimum((new_scores - scores) / (temp + 1e-5), 0.0))
            for j in range(len(points)):
                if self.rng.random() < accept[j]:
                    points[j], scores[j] = new[j], new_scores[j]
            stale = 0 if offer(new, new_scores) else stale + 1
            if stale >= p["sa_early_stop"]:
                break
            temp = max(temp - cool, 0.0)
        return [pt for _, pt in sorted(heap, reverse=True)]

    def _neighbour(self, point: int, dims) -> int:
        knobs = self.space.point2knob(point)
        movable = [j for j, d in enumerate(dims) if d > 1]
        if not movable:
            return point
        j = self.rng.choice(movable)
        knobs[j] = self.rng.choice([v for v in range(dims[j]) if v != knobs[j]])
        return self.space.knob2point(knobs)


def trials_to_reach(costs, target: float) -> float:
    """How many trials a cost sequence took to reach cost <= target (inf if never)."""
    for n, c in enumerate(costs, 1):
        if c <= target:
            return n
    return math.inf

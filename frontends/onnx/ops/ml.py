"""Converters of classical machine-learning ops: TfIdfVectorizer (ai.onnx 9, integer n-grams) and the ai.onnx.ml
ops Binarizer, ArrayFeatureExtractor (1) and TreeEnsemble (5) (reviewed versions: frontends/onnx/versions/
domains.py).

Compositions of existing relayish ops following onnx's reference implementations, which generated the
conformance cases (onnx/reference/ops/op_tfidf_vectorizer.py, aionnxml/op_*.py).
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, const
from relayish.types import numpy_dtype

from ..builders import fold, reshape, shape_of
from ..registry import converter
from ..values import ConversionError
from .movement import gather

MAX_MATCH_ELEMENTS = 1 << 26  # n-gram comparisons (rows x pool n-grams x positions) of one size and skip


# ---- TfIdfVectorizer ----

def _pool_ngrams(pool: list[int], counts: list[int], min_len: int, max_len: int) -> tuple[dict[int, list], int]:
    """(size -> [(pool id, n-gram tuple)] of the sizes in [min_len, max_len], the number of ids), ids numbered
    over every size from 0 in pool order (as the reference's, which skips the ids of the sizes it does not load);
    a repeated n-gram keeps its last id only (the reference's trie overwrites it)."""
    if any(b < a for a, b in zip(counts, counts[1:])) or (counts and (counts[0] != 0 or counts[-1] > len(pool))):
        raise ConversionError(f"ngram_counts {counts} must start at 0 and be ascending start offsets into the "
                              f"{len(pool)} pool items")
    grams: dict[int, dict[tuple, int]] = {}
    next_id = 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        for i in range((end - start) // size):
            if min_len <= size <= max_len:
                grams.setdefault(size, {})[tuple(pool[start + i * size:start + (i + 1) * size])] = next_id
            next_id += 1
    return {size: [(i, g) for g, i in found.items()] for size, found in grams.items()}, next_id


def _ngram_counts(x: Expr, grams: list, size: int, skips: range) -> Expr:
    """[rows, len(grams)]: how often each n-gram of `size` occurs in each row of x, over every skip in `skips`
    (items skip + 1 apart)."""
    rows, length = shape_of(x)
    total = None
    for skip in skips:
        step = skip + 1
        positions = length - (size - 1) * step
        if positions <= 0:
            continue
        if rows * len(grams) * positions > MAX_MATCH_ELEMENTS:
            raise ConversionError(f"{rows} rows x {len(grams)} pool n-grams x {positions} positions: more than the "
                                  f"{MAX_MATCH_ELEMENTS} comparisons TfIdfVectorizer makes per size and skip")
        match = None
        for j in range(size):  # item j of every window, against item j of every pool n-gram
            items = fold("strided_slice", x, begin=(j * step,), end=(j * step + positions,), strides=(1,), axes=(1,))
            wanted = Constant(np.array([g[j] for _, g in grams], dtype=x.type.dtype).reshape(1, -1, 1))
            equal = fold("equal", reshape(items, (rows, 1, positions)), wanted)
            match = equal if match is None else fold("logical_and", match, equal)
        found = fold("sum", fold("cast", match, dtype="float32"), axes=(2,), keepdims=False)
        total = found if total is None else fold("add", total, found)
    return total


@converter("TfIdfVectorizer", since=9)
def tfidf_vectorizer(x, *, mode, min_gram_length, max_gram_length, max_skip_count, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None):
    """Counts of the pool's n-grams (sizes min_gram_length..max_gram_length, items up to max_skip_count apart;
    unigrams counted once) per row, each added into output position ngram_indexes[k] as TF its count, IDF
    weights[k] (or 1) if it occurs, TFIDF weights[k] (or 1) times its count."""
    if pool_strings is not None or pool_int64s is None:
        raise ConversionError("only integer pools (pool_int64s) are supported; string tensors are not")
    if x.type.dtype not in ("int32", "int64") or len(shape_of(x)) not in (1, 2):
        raise ConversionError(f"X must be a 1-D or 2-D int32/int64 tensor, got {x.type.dtype} {shape_of(x)}")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ConversionError(f"mode must be TF, IDF or TFIDF, got {mode!r}")
    if not 1 <= min_gram_length <= max_gram_length or max_skip_count < 0:
        raise ConversionError(f"need 1 <= min_gram_length ({min_gram_length}) <= max_gram_length "
                              f"({max_gram_length}) and max_skip_count ({max_skip_count}) >= 0")
    by_size, ids = _pool_ngrams(list(pool_int64s), list(ngram_counts), min_gram_length, max_gram_length)
    if len(ngram_indexes) != ids or min(ngram_indexes, default=0) < 0:
        raise ConversionError(f"ngram_indexes must hold one output position >= 0 per pool n-gram ({ids}), got "
                              f"{len(ngram_indexes)}")
    width = max(ngram_indexes) + 1
    weights = list(weights) if weights else [1.0] * ids  # an empty list: no weights
    if len(weights) != ids:
        raise ConversionError(f"weights must hold one value per pool n-gram ({ids}), got {len(weights)}")
    rows = reshape(x, (1, shape_of(x)[0])) if len(shape_of(x)) == 1 else x
    out = fold("broadcast_to", const(0.0, "float32"), shape=(shape_of(rows)[0], width))
    for size, grams in sorted(by_size.items()):
        found = _ngram_counts(rows, grams, size, range(1) if size == 1 else range(max_skip_count + 1))
        if found is None:
            continue
        if mode == "IDF":  # each n-gram counts once
            found = fold("minimum", found, const(1.0, "float32"))
        # n-gram k adds weights[k] * its count into output position ngram_indexes[k] (the schema's rule, and
        # onnxruntime's for TF and TFIDF; onnx's reference reads weights per output position, the same when
        # ngram_indexes is a permutation, as in the conformance cases)
        scatter = np.zeros((len(grams), width), np.float32)
        scatter[np.arange(len(grams)), [ngram_indexes[i] for i, _ in grams]] = \
            [weights[i] if mode != "TF" else 1.0 for i, _ in grams]
        out = fold("add", out, fold("nn.matmul", found, Constant(scatter)))
    return reshape(out, (width,)) if len(shape_of(x)) == 1 else out


# ---- ai.onnx.ml: Binarizer, ArrayFeatureExtractor ----

@converter("Binarizer", since=1, domain="ai.onnx.ml")
def binarizer(x, *, threshold=0.0):
    """1 where x > threshold, else 0 (NaN: 0), in x's dtype; integers compare as float64 (the reference's numpy
    promotion of an integer array against a float)."""
    if x.type.dtype not in ("float32", "float64", "float16", "int64", "int32"):
        raise ConversionError(f"X must be float, double, int64 or int32, got {x.type.dtype}")
    dtype = x.type.dtype
    values = x if dtype.startswith("float") else fold("cast", x, dtype="float64")
    above = fold("greater", values, _const(threshold, values.type.dtype))
    return fold("where", above, _const(1, dtype), _const(0, dtype))


@converter("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def array_feature_extractor(x, indices):
    """x's last axis taken at the (flattened) indices: [..., len(indices)], a 1-D x giving one row."""
    if indices.type.dtype != "int64":
        raise ConversionError(f"Y (the indices) must be int64, got {indices.type.dtype}")
    count = math.prod(shape_of(indices))
    taken = gather(x, reshape(indices, (count,)), axis=-1)
    return reshape(taken, (1, count)) if len(shape_of(x)) == 1 else taken


def _const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, numpy_dtype(dtype)))


# ---- ai.onnx.ml: TreeEnsemble ----

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
_COMPARE = ("less_equal", "less", "greater_equal", "greater", "equal", None)  # NEQ: not equal (true for NaN)
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
MAX_TREE_PATHS = 1 << 16  # root-to-leaf paths of all trees (a column each in the path matrices)


def _tree_paths(roots, true_ids, false_ids, true_leafs, false_leafs) -> list[tuple[int, dict[int, bool]]]:
    """(leaf, {node: the outcome its path requires}) for every root-to-leaf path of every tree (a root whose both
    branches are the same leaf is that leaf, always reached)."""
    paths = []
    for root in roots:
        if true_leafs[root] and false_leafs[root] and true_ids[root] == false_ids[root]:
            paths.append((true_ids[root], {}))
            continue
        stack = [(root, {})]
        while stack:
            node, required = stack.pop()
            if node in required or len(paths) > MAX_TREE_PATHS:
                raise ConversionError(f"the trees have a cycle at node {node} or more than {MAX_TREE_PATHS} paths")
            for outcome, ids, leafs in ((True, true_ids, true_leafs), (False, false_ids, false_leafs)):
                step = {**required, node: outcome}
                if leafs[node]:
                    paths.append((ids[node], step))
                else:
                    stack.append((ids[node], step))
    return paths


def _node_outcomes(x: Expr, modes, features, splits, members, missing_true) -> Expr:
    """[N, nodes] float 1 / 0: each node's comparison on each row of x (a member node: x in its set; NaN goes
    the true way where missing_true says so)."""
    n_nodes = len(modes)
    values = fold("take", x, Constant(np.asarray(features, np.int64)), axis=1)  # [N, nodes]
    threshold = _const(splits, x.type.dtype)
    outcome = None
    for mode in sorted(set(modes)):
        if mode == 6:
            continue
        test = fold("logical_not", fold("equal", values, threshold)) if mode == 5 else \
            fold(_COMPARE[mode], values, threshold)
        mine = Constant(np.asarray(modes) == mode)
        outcome = test if outcome is None else fold("where", mine, test, outcome)
    if members:  # (node, value) pairs: any equal value
        nodes = [k for k, _ in members]
        equal = fold("equal", fold("take", x, Constant(np.asarray([features[k] for k in nodes], np.int64)), axis=1),
                     _const([v for _, v in members], x.type.dtype))
        incidence = np.zeros((len(members), n_nodes), x.type.dtype)
        incidence[np.arange(len(members)), nodes] = 1
        hits = fold("nn.matmul", fold("cast", equal, dtype=x.type.dtype), _const(incidence, x.type.dtype))
        member = fold("greater", hits, _const(0, x.type.dtype))
        is_member = Constant(np.asarray(modes) == 6)
        outcome = member if outcome is None else fold("where", is_member, member, outcome)
    if any(missing_true):
        outcome = fold("logical_or", outcome, fold("logical_and", fold("isnan", values),
                                                   Constant(np.asarray(missing_true, bool))))
    return fold("cast", outcome, dtype=x.type.dtype)


@converter("TreeEnsemble", since=5, domain="ai.onnx.ml")
def tree_ensemble(x, *, nodes_splits, nodes_featureids, nodes_modes, nodes_truenodeids, nodes_falsenodeids,
                  nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets,
                  aggregate_function=1, post_transform=0, membership_values=None, nodes_missing_value_tracks_true=None,
                  nodes_hitrates=None):
    """Every node's comparison on every row at once; a leaf is reached where no node on its path disagrees with
    the outcome the path requires (counted by two matmuls with constant path matrices); the reached leaves'
    weights are summed (SUM, AVERAGE / number of trees) or reduced (MIN, MAX; 0 where none) per target, in x's
    dtype."""
    dtype = x.type.dtype
    if dtype not in ("float32", "float64") or len(shape_of(x)) != 2:
        raise ConversionError(f"X must be a 2-D float or double tensor, got {dtype} {shape_of(x)}")
    if post_transform != 0:
        raise ConversionError(f"post_transform {post_transform} is not supported (only 0, NONE)")
    if aggregate_function not in range(4):
        raise ConversionError(f"aggregate_function must be 0 to 3 ({', '.join(_AGGREGATES)}), got "
                              f"{aggregate_function}")
    modes = [int(m) for m in _array(nodes_modes)]
    splits, weights = _array(nodes_splits).astype(np.float64), _array(leaf_weights).astype(np.float64)
    n_nodes = len(modes)
    if any(len(a) != n_nodes for a in (splits, nodes_featureids, nodes_truenodeids, nodes_falsenodeids,
                                       nodes_trueleafs, nodes_falseleafs)) or not set(modes) <= set(range(7)):
        raise ConversionError(f"the nodes_* attributes must all hold {n_nodes} values, modes 0 to 6")
    if len(leaf_targetids) != len(weights) or not all(0 <= t < n_targets for t in leaf_targetids):
        raise ConversionError(f"leaf_targetids and leaf_weights must have one entry per leaf, targets in "
                              f"[0, {n_targets})")
    if min(nodes_featureids, default=0) < 0 or max(nodes_featureids, default=0) >= shape_of(x)[1]:
        raise ConversionError(f"nodes_featureids must be in [0, {shape_of(x)[1]})")
    for ids, leafs in ((nodes_truenodeids, nodes_trueleafs), (nodes_falsenodeids, nodes_falseleafs)):
        if any(not 0 <= i < (len(weights) if leaf else n_nodes) for i, leaf in zip(ids, leafs)):
            raise ConversionError("a node or leaf id of the trees is out of range")
    members = _members(modes, membership_values)
    missing = [bool(v) for v in nodes_missing_value_tracks_true] if nodes_missing_value_tracks_true else \
        [False] * n_nodes
    paths = _tree_paths(list(tree_roots), list(nodes_truenodeids), list(nodes_falsenodeids),
                        list(nodes_trueleafs), list(nodes_falseleafs))
    outcomes = _node_outcomes(x, modes, list(nodes_featureids), splits, members, missing)
    needs_true, needs_false = (np.zeros((n_nodes, len(paths)), dtype) for _ in range(2))
    for p, (_, required) in enumerate(paths):
        for node, outcome in required.items():
            (needs_true if outcome else needs_false)[node, p] = 1
    one = _const(1, dtype)
    wrong = fold("add", fold("nn.matmul", fold("subtract", one, outcomes), _const(needs_true, dtype)),
                 fold("nn.matmul", outcomes, _const(needs_false, dtype)))
    reached = fold("equal", wrong, _const(0, dtype))  # [N, paths]
    targets = np.zeros((len(paths), n_targets), bool)
    targets[np.arange(len(paths)), [leaf_targetids[leaf] for leaf, _ in paths]] = True
    values = np.asarray([weights[leaf] for leaf, _ in paths], np.float64)
    if aggregate_function in (0, 1):  # SUM, AVERAGE
        contribution = np.where(targets, values[:, None] / (len(tree_roots) if aggregate_function == 0 else 1), 0)
        return fold("nn.matmul", fold("cast", reached, dtype=dtype), _const(contribution, dtype))
    # MIN, MAX: a target no reached leaf names is 0, as onnxruntime's (onnx's reference leaves its start value,
    # the dtype's largest or smallest number)
    low = aggregate_function == 2
    start = np.finfo(numpy_dtype(dtype)).max if low else np.finfo(numpy_dtype(dtype)).min
    table = _const(np.where(targets, values[:, None], start), dtype)  # [paths, targets]
    n = shape_of(x)[0]
    chosen = fold("where", reshape(reached, (n, len(paths), 1)), table, _const(start, dtype))
    best = fold("min" if low else "max", chosen, axes=(1,), keepdims=False)
    named = fold("nn.matmul", fold("cast", reached, dtype=dtype), _const(targets, dtype))  # [N, targets]
    return fold("where", fold("greater", named, _const(0, dtype)), best, _const(0, dtype))


def _array(value) -> np.ndarray:
    """An attribute given as a TensorProto (TreeEnsemble's nodes_modes, nodes_splits...) or a list, as an array."""
    from onnx import numpy_helper
    return numpy_helper.to_array(value) if hasattr(value, "data_type") else np.asarray(value)


def _members(modes: list[int], membership_values) -> list[tuple[int, float]]:
    """(node, value) for the set of each BRANCH_MEMBER node, in node order: membership_values lists the sets one
    after the other, each ended by a NaN."""
    values = list(_array(membership_values).astype(np.float64)) if membership_values is not None else []
    sets, current = [], []
    for v in values:
        if np.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(v)
    member_nodes = [k for k, m in enumerate(modes) if m == 6]
    if len(sets) != len(member_nodes) or current:
        raise ConversionError(f"membership_values must hold one NaN-ended set per BRANCH_MEMBER node "
                              f"({len(member_nodes)}), got {len(sets)}")
    return [(k, v) for k, s in zip(member_nodes, sets) for v in s]

"""Converters of classical machine-learning ops: TfIdfVectorizer (ai.onnx 9, integer n-grams).

Compositions of existing relayish ops following onnx's reference implementations, which generated the
conformance cases (onnx/reference/ops/op_tfidf_vectorizer.py).
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, const

from .onnx_ops import _reshape, _shape, converter
from .onnx_ops_tensor import fold
from .onnx_values import ConversionError

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
    rows, length = _shape(x)
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
            equal = fold("equal", _reshape(items, (rows, 1, positions)), wanted)
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
    if x.type.dtype not in ("int32", "int64") or len(_shape(x)) not in (1, 2):
        raise ConversionError(f"X must be a 1-D or 2-D int32/int64 tensor, got {x.type.dtype} {_shape(x)}")
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
    rows = _reshape(x, (1, _shape(x)[0])) if len(_shape(x)) == 1 else x
    out = fold("broadcast_to", const(0.0, "float32"), shape=(_shape(rows)[0], width))
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
    return _reshape(out, (width,)) if len(_shape(x)) == 1 else out

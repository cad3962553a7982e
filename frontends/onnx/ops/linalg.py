"""Converters of Einsum (transpose / reshape / take / batch matmul / sum) and Det (Gaussian elimination unrolled),
compositions of existing relayish ops. Numerics follow onnx's reference implementations
(onnx/reference/ops/op_einsum.py, op_det.py), which generated the conformance cases. Conventions:
frontends/onnx/registry.py.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, const

from ..builders import astype, binary, fold, reshape, shape_of
from ..registry import converter
from ..values import ConversionError


# ---- Einsum ----

def _parse_einsum(equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """The equation's terms as lists of labels, one per dim of each operand, and the output's labels. The dims an
    ellipsis stands for get labels of their own (right-aligned across operands, as numpy broadcasts them); without
    '->' the output is the ellipsis dims then the labels that appear once, in alphabetical order (numpy's rule)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ConversionError(f"equation {equation!r} has {len(terms)} input terms but the node has {len(ranks)} "
                              f"inputs")
    ell_rank = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            ell_rank = max(ell_rank, rank - len(term.replace("...", "")))
    ell = [f"...{d}" for d in range(ell_rank)]  # ellipsis labels, outermost first

    def labels(term: str, rank: int | None, what: str) -> list[str]:
        head, dots, tail = term.partition("...")
        letters = head + tail
        if any(not c.isalpha() for c in letters) or "..." in tail:
            raise ConversionError(f"equation {equation!r}: bad term {term!r} of {what}")
        if not dots:
            if rank is not None and len(letters) != rank:
                raise ConversionError(f"equation {equation!r}: term {term!r} has {len(letters)} labels but {what} "
                                      f"has rank {rank}")
            return list(letters)
        n = (rank - len(letters)) if rank is not None else ell_rank
        if n < 0:
            raise ConversionError(f"equation {equation!r}: term {term!r} has more labels than {what}'s rank {rank}")
        return list(head) + ell[ell_rank - n:] + list(tail)

    inputs = [labels(t, r, f"input {i}") for i, (t, r) in enumerate(zip(terms, ranks))]
    if arrow:
        output = labels(rhs, None, "the output")
        for label in output:
            if not label.startswith("...") and not any(label in term for term in inputs):
                raise ConversionError(f"equation {equation!r}: output label {label!r} is in no input")
        if len(set(output)) != len(output):
            raise ConversionError(f"equation {equation!r}: the output repeats a label")
    else:
        counts = {}
        for term in inputs:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        output = ell + sorted(c for c, n in counts.items() if n == 1 and not c.startswith("..."))
    return inputs, output


def _diagonal(x: Expr, labels: list[str]) -> tuple[Expr, list[str]]:
    """x with each repeated label taken once: the diagonal of its dims, gathered from their flattened product."""
    while len(set(labels)) != len(labels):
        label = next(c for c in labels if labels.count(c) > 1)
        first, second = [i for i, c in enumerate(labels) if c == label][:2]
        shape = shape_of(x)
        if shape[first] != shape[second]:
            raise ConversionError(f"label {label!r} has sizes {shape[first]} and {shape[second]} in one operand")
        rest = [i for i in range(len(shape)) if i not in (first, second)]
        x = fold("transpose", x, axes=tuple(rest + [first, second])) if rest + [first, second] != \
            list(range(len(shape))) else x
        n = shape[first]
        x = reshape(x, tuple(shape[i] for i in rest) + (n * n,))
        x = fold("take", x, Constant(np.arange(n, dtype=np.int64) * (n + 1)), axis=len(rest))
        labels = [labels[i] for i in rest] + [label]
    return x, labels


def _sum_labels(x: Expr, labels: list[str], drop) -> tuple[Expr, list[str]]:
    axes = tuple(i for i, c in enumerate(labels) if c in drop)
    if not axes:
        return x, labels
    return fold("sum", x, axes=axes, keepdims=False), [c for c in labels if c not in drop]


def _arrange(x: Expr, labels: list[str], order: list[str]) -> Expr:
    """x transposed so that its labels follow `order` (a superset: the labels it lacks become dims of 1)."""
    mine = [c for c in order if c in labels]
    perm = tuple(labels.index(c) for c in mine)
    if perm != tuple(range(len(perm))):
        x = fold("transpose", x, axes=perm)
    sizes = dict(zip(mine, shape_of(x)))
    return reshape(x, tuple(sizes.get(c, 1) for c in order))


def _contract(a: Expr, la: list[str], b: Expr, lb: list[str], keep: set[str]) -> tuple[Expr, list[str]]:
    """a * b summed over the labels they share that are not kept: a batch matmul [batch, M, K] @ [batch, K, N]
    (a broadcast multiply when nothing is summed). Labels of one operand only that are not kept are summed first."""
    a, la = _sum_labels(a, la, {c for c in la if c not in lb and c not in keep})
    b, lb = _sum_labels(b, lb, {c for c in lb if c not in la and c not in keep})
    size_a, size_b = dict(zip(la, shape_of(a))), dict(zip(lb, shape_of(b)))
    shared = [c for c in la if c in lb]
    summed = [c for c in shared if c not in keep]
    for c in summed:  # a summed label broadcast from size 1 on one side: sum the other side first
        if size_a[c] != size_b[c]:
            if size_a[c] == 1:
                b = fold("sum", b, axes=(lb.index(c),), keepdims=True)
                size_b[c] = 1
            elif size_b[c] == 1:
                a = fold("sum", a, axes=(la.index(c),), keepdims=True)
                size_a[c] = 1
    batch = [c for c in shared if c in keep]
    only_a = [c for c in la if c not in lb]
    only_b = [c for c in lb if c not in la]
    out_labels = batch + only_a + only_b
    if not summed:
        return binary("multiply", _arrange(a, la, out_labels), _arrange(b, lb, out_labels)), out_labels
    batch_a = tuple(size_a[c] for c in batch)
    batch_b = tuple(size_b[c] for c in batch)
    m = int(np.prod([size_a[c] for c in only_a]))
    n = int(np.prod([size_b[c] for c in only_b]))
    k = int(np.prod([size_a[c] for c in summed]))
    a3 = reshape(_arrange(a, la, batch + only_a + summed), batch_a + (m, k))
    b3 = reshape(_arrange(b, lb, batch + summed + only_b), batch_b + (k, n))
    y = fold("nn.matmul", a3, b3)
    batch_out = shape_of(y)[:len(batch)]
    return reshape(y, batch_out + tuple(size_a[c] for c in only_a) + tuple(size_b[c] for c in only_b)), out_labels


@converter("Einsum", since=12)
def einsum(*inputs, equation):
    if not inputs:
        raise ConversionError("Einsum needs at least one input")
    dtypes = {x.type.dtype for x in inputs}
    if len(dtypes) != 1:
        raise ConversionError(f"the inputs must have one dtype, got {sorted(dtypes)}")
    terms, output = _parse_einsum(equation, [len(shape_of(x)) for x in inputs])
    operands = [_diagonal(x, labels) for x, labels in zip(inputs, terms)]
    sizes = {}
    for x, labels in operands:
        for c, d in zip(labels, shape_of(x)):
            if sizes.get(c, 1) not in (1, d) and d != 1:
                raise ConversionError(f"equation {equation!r}: label {c!r} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, 1), d)
    x, labels = operands[0]
    for i in range(1, len(operands)):
        later = {c for _, ls in operands[i + 1:] for c in ls}
        x, labels = _contract(x, labels, *operands[i], keep=set(output) | later)
    x, labels = _sum_labels(x, labels, {c for c in labels if c not in output})
    x = _arrange(x, labels, output)
    full = tuple(sizes[c] for c in output)
    return x if shape_of(x) == full else fold("broadcast_to", x, shape=full)


# ---- Det ----

MAX_DET_SIZE = 32


def _slice(x: Expr, axis: int, begin: int, end: int) -> Expr:
    return fold("strided_slice", x, begin=(begin,), end=(end,), strides=(1,), axes=(axis,))


@converter("Det", since=11)
def det(x):
    """The determinant of the [..., n, n] matrices, by Gaussian elimination with partial pivoting unrolled over the
    n columns (the pivot row picked by argmax of the column's magnitudes, swapped in by selects): the product of
    the pivots, negated for each swap. A zero pivot gives 0 (it is replaced by 1 in the divisions)."""
    shape, dtype = shape_of(x), x.type.dtype
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ConversionError(f"the input must be [..., n, n], got shape {shape}")
    if dtype not in ("float32", "float64", "float16"):
        raise ConversionError(f"the input must be float32, float64 or float16, got {dtype}")
    n, batch = shape[-1], shape[:-2]
    if n > MAX_DET_SIZE:
        raise ConversionError(f"matrices of size {n} are above the {MAX_DET_SIZE} that Det unrolls")
    work = "float32" if dtype == "float16" else dtype
    a = astype(x, work)
    zero, one = const(0.0, work), const(1.0, work)
    result = None
    for k in range(n):
        m = n - k
        column = reshape(_slice(a, -1, 0, 1), batch + (m,))
        pivot = fold("argmax", fold("abs", column), axis=-1, keepdims=True)  # [..., 1]
        chosen = fold("equal", pivot, Constant(np.arange(m, dtype=np.int64)))  # [..., m]
        chosen_rows = reshape(chosen, batch + (m, 1))
        pivot_row = fold("sum", fold("where", chosen_rows, a, zero), axes=(len(batch),), keepdims=True)  # [..., 1, m]
        first_row = _slice(a, -2, 0, 1)
        is_first = Constant((np.arange(m) == 0).reshape(m, 1))
        a = fold("where", is_first, pivot_row, fold("where", chosen_rows, first_row, a))
        p = reshape(_slice(pivot_row, -1, 0, 1), batch)
        sign = fold("where", fold("equal", reshape(pivot, batch), const(0, "int64")), one, const(-1.0, work))
        factor = binary("multiply", sign, p)
        result = factor if result is None else binary("multiply", result, factor)
        if m > 1:
            safe = fold("where", fold("equal", p, zero), one, p)
            below = _slice(_slice(a, -2, 1, m), -1, 0, 1)  # [..., m-1, 1]
            ratio = binary("divide", below, reshape(safe, batch + (1, 1)))
            a = binary("subtract", _slice(_slice(a, -2, 1, m), -1, 1, m),
                        binary("multiply", ratio, _slice(pivot_row, -1, 1, m)))
    return astype(result, dtype)

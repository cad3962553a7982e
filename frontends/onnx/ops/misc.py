"""Converters of miscellaneous ops, each a composition of existing relayish ops: TopK (a rank by pairwise
comparison, then a scatter of the indices to their ranks), Einsum (transpose / reshape / take / batch matmul /
sum), If and Loop (the taken branch inlined, the loop unrolled: conditions and trip counts known at import), the ops
whose output shape depends on the data (NonZero, Compress, Unique: folded at import), ReverseSequence, CenterCropPad,
Det (unrolled Gaussian elimination), and the integer ops MatMulInteger, QLinearMatMul, ConvInteger.

Conventions as in frontends/onnx_ops.py. Numerics follow onnx's reference implementations
(onnx/reference/ops/op_*.py), which generated the conformance cases.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, const, free_vars
from relayish.types import numpy_dtype

from ..builders import astype, binary, fold, normalize_axis, reshape, shape_of
from ..registry import converter
from ..values import ConversionError, RunTimeValueNeeded, constant_value, int_list_input
from .basic import conv, matmul

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


# ---- TopK ----

MAX_TOPK_COMPARISONS = 1 << 26  # the rank's [..., n, n] comparison tensors

def _topk(x: Expr, k: int, axis: int, largest: bool, sorted_: bool):
    """(values, int64 indices) of the k largest (smallest) elements along axis, in order, ties broken by the lower
    index and NaN greater than every number, as the reference's lexsort. Each element's rank is the count of the
    elements that come before it (O(n^2) comparisons along the axis); the ranks are a permutation, so scattering
    the positions to their ranks gives the sorted order, whose first k positions gather the values."""
    shape = shape_of(x)
    if not shape:
        raise ConversionError("the input must be at least 1-D, got a scalar")
    axis = normalize_axis(axis, len(shape))
    n = shape[axis]
    if not 0 <= k <= n:
        raise ConversionError(f"k = {k} must be in [0, {n}] (the size of axis {axis})")
    if k == 0 or n == 0:  # empty outputs: known without computing anything
        out = shape[:axis] + (k,) + shape[axis + 1:]
        return Constant(np.zeros(out, np.dtype(numpy_dtype(x.type.dtype)))), Constant(np.zeros(out, np.int64))
    # sorted=0 allows any order: the sorted one is given (as onnxruntime does)
    comparisons = int(np.prod(shape)) * n
    if comparisons > MAX_TOPK_COMPARISONS:
        raise ConversionError(f"TopK over axis {axis} of {n} elements of a {shape} input needs {comparisons} pairwise "
                              f"comparisons, more than the {MAX_TOPK_COMPARISONS} this composition allows")
    xi = reshape(x, shape[:axis + 1] + (1,) + shape[axis + 1:])  # element i on axis, j on axis + 1
    xj = reshape(x, shape[:axis] + (1,) + shape[axis:])
    better = fold("greater" if largest else "less", xj, xi)
    tie = fold("equal", xj, xi)
    if x.type.dtype in FLOAT_DTYPES:
        nan_i, nan_j = fold("isnan", xi), fold("isnan", xj)
        nan_first = fold("logical_and", nan_j, fold("logical_not", nan_i)) if largest else \
            fold("logical_and", nan_i, fold("logical_not", nan_j))
        better = fold("logical_or", better, nan_first)
        tie = fold("logical_or", tie, fold("logical_and", nan_i, nan_j))
    lower = np.arange(n)[None, :] < np.arange(n)[:, None]  # [i, j]: j < i
    lower = Constant(lower.reshape((n, n) + (1,) * (len(shape) - axis - 1)))
    before = fold("logical_or", better, fold("logical_and", tie, lower))
    rank = fold("sum", astype(before, "int64"), axes=(axis + 1,), keepdims=False)
    positions = np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (len(shape) - axis - 1))
    positions = Constant(np.ascontiguousarray(np.broadcast_to(positions, shape)))
    order = fold("scatter_elements", Constant(np.zeros(shape, np.int64)), rank, positions, axis=axis)
    if k < n:
        order = fold("strided_slice", order, begin=(0,), end=(k,), strides=(1,), axes=(axis,))
    return fold("gather_elements", x, order, axis=axis), order


@converter("TopK", since=1)
def topk_v1(x, *, k, axis=-1):
    return _topk(x, int(k), axis, True, True)


def _k_input(k) -> int:
    value = int_list_input(k, "K")
    if len(value) != 1:
        raise ConversionError(f"input 'K' must hold one value, got {len(value)}")
    return value[0]


@converter("TopK", since=10)
def topk_v10(x, k, *, axis=-1):
    return _topk(x, _k_input(k), axis, True, True)


@converter("TopK", since=11)
def topk_v11(x, k, *, axis=-1, largest=1, sorted=1):  # noqa: A002  (ONNX's attribute name)
    if largest not in (0, 1) or sorted not in (0, 1):
        raise ConversionError(f"largest and sorted must be 0 or 1, got {largest} and {sorted}")
    return _topk(x, _k_input(k), axis, bool(largest), bool(sorted))


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


# ---- If, Loop: control flow decided at import ----

MAX_UNROLL = 200  # loop iterations unrolled at most (each adds the body to the graph, whose passes recurse)


def _flag_value(expr: Expr, what: str) -> bool:
    value = constant_value(expr, what)
    if value.size != 1:
        raise ConversionError(f"input {what!r} must hold one value, got shape {value.shape}")
    return bool(value.reshape(-1)[0])


@converter("If", since=1)
def if_(cond, *, then_branch, else_branch, _scope=None):
    """The branch that cond takes, inlined. cond must be known at import (a constant, or computed from graph inputs
    whose values then select the compilation: compiler/specialize.py)."""
    taken, name = (then_branch, "then_branch") if _flag_value(cond, "cond") else (else_branch, "else_branch")
    if len(taken.input):
        raise ConversionError(f"{name} has inputs {[i.name for i in taken.input]}: a branch takes none")
    outputs = _scope.convert(taken, {}, f"subgraph {name}")
    return tuple(outputs)


@converter("Loop", since=1)
def loop(max_trip_count=None, cond=None, *v_initial, body, _scope=None):
    """The body unrolled (at most MAX_UNROLL times): the trip count and the condition (the input and each
    iteration's cond output) must be known at import. Scan outputs are the per-iteration values stacked on a new
    first axis; they must have one shape in every iteration. An absent cond input means true; the body's cond
    output is read in every iteration all the same (as onnxruntime does)."""
    if max_trip_count is None and cond is None:
        raise ConversionError("a Loop with neither a trip count nor a condition never ends")
    trips = None
    if max_trip_count is not None:
        value = constant_value(max_trip_count, "M")
        if value.size != 1:
            raise ConversionError(f"input 'M' must hold one value, got shape {value.shape}")
        trips = int(value.reshape(-1)[0])
        if trips > MAX_UNROLL:
            raise ConversionError(f"trip count {trips} is above the {MAX_UNROLL} iterations a loop is unrolled to")
    going = True if cond is None else _flag_value(cond, "cond")
    n_in, n_carried = len(body.input), len(v_initial)
    if n_in != n_carried + 2:
        raise ConversionError(f"the body has {n_in} inputs, expected 2 + {n_carried} loop-carried values")
    n_scan = len(body.output) - 1 - n_carried
    if n_scan < 0:
        raise ConversionError(f"the body has {len(body.output)} outputs, fewer than 1 + {n_carried}")
    iter_dtype = max_trip_count.type.dtype if max_trip_count is not None else "int64"
    carried, scans, i = list(v_initial), [[] for _ in range(n_scan)], 0
    names = [vi.name for vi in body.input]
    while going and (trips is None or i < trips):
        if i >= MAX_UNROLL:
            raise ConversionError(f"the loop runs more than the {MAX_UNROLL} iterations it is unrolled to")
        bound = {names[0]: const(i, iter_dtype), names[1]: Constant(np.array(going))}
        bound.update(zip(names[2:], carried))
        outs = _scope.convert(body, bound, f"body (iteration {i})")
        going = _flag_value(outs[0], "the body's cond output")
        carried = outs[1:1 + n_carried]
        for k, value in enumerate(outs[1 + n_carried:]):
            scans[k].append(value)
        i += 1
    stacked = []
    for k, values in enumerate(scans):
        if not values:
            raise ConversionError(f"scan output {k} of a loop that runs no iteration is empty (zero-size tensors "
                                  f"are not supported)")
        shapes = {shape_of(v) for v in values}
        if len(shapes) != 1:
            raise ConversionError(f"scan output {k} has different shapes in different iterations {sorted(shapes)}")
        stacked.append(fold("concatenate", *[reshape(v, (1,) + shape_of(v)) for v in values], axis=0))
    return tuple(carried + stacked)


# ---- NonZero, Compress, Unique: output shapes that depend on the data ----

def _data_value(x: Expr, what: str, op: str) -> np.ndarray:
    """The value of an input whose values decide the output's shape; RunTimeValueNeeded saying so otherwise."""
    if isinstance(x, Constant):
        return x.data
    inputs = tuple(sorted({v.name for v in free_vars(x)}))
    raise RunTimeValueNeeded(f"the output shape of {op} depends on the values of input {what!r}, which are "
                             f"computed at run time" + (f" from graph input(s) {list(inputs)}" if inputs else "")
                             + ": relayish compiles static shapes, so it must be a constant", inputs)


@converter("NonZero", since=9)
def nonzero(x):
    """The indices of the nonzero elements, [rank, count] (a scalar counts as 1-D)."""
    value = np.atleast_1d(_data_value(x, "X", "NonZero"))
    return Constant(np.array(np.nonzero(value), np.int64).reshape(value.ndim, -1))  # [rank, 0] if none


@converter("Compress", since=9)
def compress(x, condition, *, axis=None):
    """Only the condition decides the shape: the selected positions are a constant `take` of the input."""
    cond = _data_value(condition, "condition", "Compress")
    if cond.ndim != 1:
        raise ConversionError(f"input 'condition' must be 1-D, got shape {cond.shape}")
    if axis is None:
        x, axis = reshape(x, (int(np.prod(shape_of(x))),)), 0
    axis = normalize_axis(axis, len(shape_of(x)))
    if cond.size > shape_of(x)[axis]:
        raise ConversionError(f"condition has {cond.size} values, more than the {shape_of(x)[axis]} of axis {axis}")
    picked = np.nonzero(cond.astype(bool))[0].astype(np.int64)
    return fold("take", x, Constant(picked), axis=axis)  # nothing selected: an empty result


@converter("Unique", since=11)
def unique(x, *, axis=None, sorted=1):  # noqa: A002  (ONNX's attribute name)
    """(Y, indices, inverse_indices, counts) as np.unique; sorted=0 keeps the order of first occurrence (the
    spec)."""
    value = _data_value(x, "X", "Unique")
    if axis is not None:
        axis = normalize_axis(axis, value.ndim)
        flat = np.moveaxis(value, axis, 0).reshape(value.shape[axis], -1)
    else:
        flat = value.reshape(-1, 1)
    if sorted:
        _, first, inverse, counts = np.unique(value, True, True, True, **({} if axis is None else {"axis": axis}))
        inverse = inverse.reshape(-1)
    else:
        position, first, inverse, counts = {}, [], [], []
        keys = [row.tobytes() for row in (flat + 0 if flat.dtype.kind == "f" else flat)]  # -0.0 is 0.0
        for i, key in enumerate(keys):
            if key not in position:
                position[key] = len(first)
                first.append(i)
                counts.append(0)
            inverse.append(position[key])
            counts[position[key]] += 1
    first = np.asarray(first, np.int64)
    y = np.take(value.reshape(-1), first) if axis is None else np.take(value, first, axis=axis)
    return (Constant(np.ascontiguousarray(y)), Constant(first), Constant(np.asarray(inverse, np.int64)),
            Constant(np.asarray(counts, np.int64)))


# ---- ReverseSequence ----

@converter("ReverseSequence", since=10)
def reverse_sequence(x, sequence_lens, *, batch_axis=1, time_axis=0):
    """out[t, b] = x[len[b] - 1 - t, b] for t < len[b], else x[t, b]: a gather along the time axis of indices
    computed from the lengths. Lengths given at run time are clamped to [0, max_time] first, so the indices are
    always in range (onnxruntime refuses such lengths; no length can make native code read outside the input)."""
    shape = shape_of(x)
    if len(shape) < 2:
        raise ConversionError(f"the input must be at least 2-D, got shape {shape}")
    if sorted((batch_axis, time_axis)) != [0, 1]:
        raise ConversionError(f"batch_axis and time_axis must be 0 and 1 in some order, got {batch_axis} and "
                              f"{time_axis}")
    t_len, b_len = shape[time_axis], shape[batch_axis]
    if sequence_lens.type.dtype != "int64" or shape_of(sequence_lens) != (b_len,):
        raise ConversionError(f"input 'sequence_lens' must be int64 of shape ({b_len},), got "
                              f"{sequence_lens.type.dtype} of shape {shape_of(sequence_lens)}")
    if isinstance(sequence_lens, Constant) and np.any((sequence_lens.data < 0) | (sequence_lens.data > t_len)):
        raise ConversionError(f"sequence_lens {sequence_lens.data.tolist()} must be in [0, {t_len}]")
    lens = binary("minimum", binary("maximum", sequence_lens, const(0, "int64")), const(t_len, "int64"))
    both = (t_len, 1) if time_axis == 0 else (1, t_len)
    t = Constant(np.arange(t_len, dtype=np.int64).reshape(both))
    lens = reshape(lens, (1, b_len) if time_axis == 0 else (b_len, 1))
    index = fold("where", fold("less", t, lens), binary("subtract", binary("subtract", lens, const(1, "int64")),
                                                        t), t)
    index = reshape(index, shape_of(index) + (1,) * (len(shape) - 2))
    index = fold("broadcast_to", index, shape=shape)
    return fold("gather_elements", x, index, axis=time_axis)


# ---- CenterCropPad ----

@converter("CenterCropPad", since=18)
def center_crop_pad(x, shape, *, axes=None):
    """Each axis cropped or zero-padded to its target size, centered (an odd difference leaves the extra element at
    the end), as the reference: a slice, then a pad."""
    dims = shape_of(x)
    target = int_list_input(shape, "shape", (np.int64, np.int32))
    axes = tuple(range(len(dims))) if axes is None else tuple(normalize_axis(a, len(dims), "axes value") for a in axes)
    if len(set(axes)) != len(axes):
        raise ConversionError(f"repeated axes {axes}")
    if len(target) != len(axes):
        raise ConversionError(f"shape has {len(target)} values for {len(axes)} axes")
    begin, end, pads = [], [], [0] * (2 * len(dims))
    for a, size in zip(axes, target):
        if size < 1:
            raise ConversionError(f"target size {size} of axis {a} must be >= 1")
        if size < dims[a]:
            start = (dims[a] - size) // 2
            begin.append(start)
            end.append(start + size)
        else:
            begin.append(0)
            end.append(dims[a])
            pads[a] = (size - dims[a]) // 2
            pads[len(dims) + a] = size - dims[a] - pads[a]
    if any(b != 0 or e != dims[a] for a, b, e in zip(axes, begin, end)):
        x = fold("strided_slice", x, begin=tuple(begin), end=tuple(end), strides=(1,) * len(axes), axes=axes)
    if any(pads):
        x = fold("pad", x, pads=tuple(pads), mode="constant", value=0.0)
    return x


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


# ---- MatMulInteger, QLinearMatMul ----

QUANT_TYPES = ("int8", "uint8")


def _per_row_or_column(p: Expr, x: Expr, rows: bool, what: str) -> Expr:
    """A zero point or scale of a matmul operand made broadcastable to it: one value -> a scalar; 1-D of the
    operand's row count (a, per row: [M, 1]) or column count (b, per column: [N])."""
    shape, pshape = shape_of(x), shape_of(p)
    if int(np.prod(pshape)) == 1:
        return reshape(p, ())
    extent = shape[-2] if rows and len(shape) > 1 else shape[-1]
    if len(pshape) != 1 or pshape[0] != extent:
        raise ConversionError(f"{what} of shape {pshape} must be one value or 1-D of the {extent} "
                              f"{'rows' if rows else 'columns'} of the operand {shape}")
    return reshape(p, (extent, 1)) if rows and len(shape) > 1 else p


def _integer_operand(x: Expr, zero_point: Expr | None, rows: bool, name: str) -> Expr:
    """x - zero_point in int32."""
    if x.type.dtype not in QUANT_TYPES:
        raise ConversionError(f"input {name} must be int8 or uint8, got {x.type.dtype}")
    x32 = astype(x, "int32")
    if zero_point is None:
        return x32
    if zero_point.type.dtype != x.type.dtype:
        raise ConversionError(f"the zero point of {name} must be {x.type.dtype}, got {zero_point.type.dtype}")
    return binary("subtract", x32, astype(_per_row_or_column(zero_point, x, rows, f"{name}'s zero point"),
                                          "int32"))


@converter("MatMulInteger", since=10)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    """(A - a_zero_point) @ (B - b_zero_point) in int32 (exact: int8 products summed in int32, as the reference)."""
    return matmul(_integer_operand(a, a_zero_point, True, "A"),
                           _integer_operand(b, b_zero_point, False, "B"))


@converter("QLinearMatMul", since=10)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """The integer matmul, requantized as the reference: C * (a_scale * b_scale / y_scale) in float64 (numpy's
    promotion of int32 and the scales), plus the output zero point, rounded half to even and saturated to the
    output type."""
    scales = {s.type.dtype for s in (a_scale, b_scale, y_scale)}
    if len(scales) != 1 or not scales <= {"float32", "float16", "bfloat16"}:
        raise ConversionError(f"the scales must be float32, float16 or bfloat16, all of one type, got "
                              f"{sorted(scales)}")
    if y_zero_point.type.dtype not in QUANT_TYPES:
        raise ConversionError(f"y_zero_point must be int8 or uint8, got {y_zero_point.type.dtype}")
    c = matmul(_integer_operand(a, a_zero_point, True, "a"), _integer_operand(b, b_zero_point, False, "b"))
    sa = _per_row_or_column(a_scale, a, True, "a_scale")
    sb = _per_row_or_column(b_scale, b, False, "b_scale")
    if int(np.prod(shape_of(y_scale))) != 1:
        raise ConversionError(f"y_scale must hold one value, got shape {shape_of(y_scale)}")
    scale = binary("divide", binary("multiply", sa, sb), reshape(y_scale, ()))
    d = binary("multiply", astype(c, "float64"), astype(scale, "float64"))
    d = binary("add", d, astype(reshape(y_zero_point, ()) if int(np.prod(shape_of(y_zero_point))) == 1 else
                                _per_row_or_column(y_zero_point, b, False, "y_zero_point"), "float64"))
    out = y_zero_point.type.dtype
    lo, hi = (0.0, 255.0) if out == "uint8" else (-128.0, 127.0)
    return astype(fold("clip", fold("round", d), a_min=lo, a_max=hi), out)


@converter("ConvInteger", since=10)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """Conv of (x - x_zero_point) and (w - w_zero_point) in int32 (padding adds zeros after the shift, i.e. the
    zero point, as the reference). w_zero_point is one value or one per output channel."""
    for name, v in (("x", x), ("w", w)):
        if v.type.dtype not in QUANT_TYPES:
            raise ConversionError(f"input {name} must be int8 or uint8, got {v.type.dtype}")
    x32, w32 = astype(x, "int32"), astype(w, "int32")
    if x_zero_point is not None:
        if x_zero_point.type.dtype != x.type.dtype or int(np.prod(shape_of(x_zero_point))) != 1:
            raise ConversionError(f"x_zero_point must be one {x.type.dtype} value, got {x_zero_point.type.dtype} "
                                  f"of shape {shape_of(x_zero_point)}")
        x32 = binary("subtract", x32, astype(reshape(x_zero_point, ()), "int32"))
    if w_zero_point is not None:
        channels = shape_of(w)[0]
        if w_zero_point.type.dtype != w.type.dtype or int(np.prod(shape_of(w_zero_point))) not in (1, channels):
            raise ConversionError(f"w_zero_point must be one {w.type.dtype} value or one per output channel "
                                  f"({channels}), got {w_zero_point.type.dtype} of shape {shape_of(w_zero_point)}")
        zp = reshape(w_zero_point, () if int(np.prod(shape_of(w_zero_point))) == 1 else (channels, 1, 1, 1))
        w32 = binary("subtract", w32, astype(zp, "int32"))
    return conv(x32, w32, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                strides=strides)

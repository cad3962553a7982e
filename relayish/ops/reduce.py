"""Reductions over any set of axes: sum, prod, mean, max, min (ONNX ReduceSum/ReduceProd/ReduceMean/ReduceMax/
ReduceMin; the frontend composes ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp of them);
the index of the maximum or minimum along one axis (ArgMax, ArgMin); running sums and products (CumSum, CumProd)."""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..types import TensorType, is_float, is_static_dim
from ..op import OpError, Pattern, register_op
from .common import normalize_axis
from .rows import ROW_TAG, trailing_reduce


def _normalize(op):
    def normalize(attrs, arg_types):
        attrs = dict(attrs)
        ndim = arg_types[0].ndim
        axes = range(ndim) if attrs["axes"] is None else attrs["axes"]
        axes = tuple(sorted(normalize_axis(op, a, ndim) for a in axes))
        if len(set(axes)) != len(axes):
            raise OpError(f"{op}: repeated axes {attrs['axes']}")
        attrs["axes"], attrs["keepdims"] = axes, bool(attrs["keepdims"])
        return attrs
    return normalize


def reduced_shape(shape, axes, keepdims) -> tuple:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _infer(op):
    def infer(arg_types, attrs):
        x, = arg_types
        if op in ("mean",) and not is_float(x.dtype):
            raise OpError(f"{op}: input must be a float tensor, got {x.dtype}")
        return TensorType(reduced_shape(x.shape, attrs.axes, attrs.keepdims), x.dtype)
    return infer


def _ref(fn):
    def ref(x, axes, keepdims):
        if x.size == 0 and fn in _EMPTY_IDENTITY:  # numpy refuses max/min of nothing; ONNX gives the identity
            out = reduced_shape(x.shape, axes, keepdims)
            return np.full(out, _EMPTY_IDENTITY[fn](x.dtype), dtype=x.dtype)
        return np.asarray(fn(_widened(x), axis=tuple(axes), keepdims=keepdims), dtype=x.dtype)
    return ref


def _lowest(dtype):
    return -np.inf if np.dtype(dtype).kind in "fV" else False if dtype == np.bool_ else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if np.dtype(dtype).kind in "fV" else True if dtype == np.bool_ else np.iinfo(dtype).max


_EMPTY_IDENTITY = {np.max: _lowest, np.amax: _lowest, np.min: _highest, np.amin: _highest}  # (ONNX 18: the
# reduction of an empty set is its identity: -inf / the type's lowest for max, +inf / its highest for min)


def _widened(x):
    """x, in float32 if it is a 16-bit float: sums and products of those accumulate in float32 and round once
    (relayish/te.py compute, as onnxruntime)."""
    return x.astype(np.float32) if is_float(x.dtype) and x.dtype.itemsize == 2 else x


def _scale(scale, dtype: str):
    """A mean's scale: a number, or an expression of the run-time sizes."""
    return scale if isinstance(scale, te.PrimExpr) else te.const(scale, dtype)


def reduce_compute(x: te.Tensor, axes, keepdims, combiner, name, scale=None) -> te.Tensor:
    """combiner over `axes` of x (one reduce axis per reduced dim); scale multiplies the result (for mean)."""
    raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
    out_shape = reduced_shape(x.shape, axes, keepdims)
    kept = [d for d in range(x.ndim) if d not in axes]

    def index(i):
        out = []
        pos = iter(i if not keepdims else [i[d] for d in kept])
        for d in range(x.ndim):
            out.append(raxes[d].var if d in raxes else next(pos))
        return tuple(out)

    reducer = {"sum": te.sum, "prod": te.prod_reduce, "max": te.max_reduce, "min": te.min_reduce}[combiner]
    if not raxes:  # over no axes (all the axes of a 0-d tensor): x itself (a Reduce needs a reduction loop)
        return te.compute(out_shape, lambda *i: x[index(i)], name=name, tag="elemwise")
    if len(axes) == x.ndim and combiner in ("max", "min"):
        whole = _whole_tensor_reduce(x, combiner, name, out_shape)
        if whole is not None:
            return whole
    trailing = sorted(axes) == list(range(x.ndim - len(axes), x.ndim))  # (all of them: one row)
    if not trailing and x.ndim - 1 in axes and combiner in ("sum", "max", "min"):
        split = _rows_then_rest(x, axes, keepdims, combiner, name, scale, out_shape)
        if split is not None:
            return split
    rows = trailing_reduce(x, len(axes), combiner, name + "_rows") if trailing else None
    if rows is not None:  # over the last axes: per-lane partials of the contiguous row, vectorized

        def result(*i):  # the kept axes lead the output, with or without keepdims' trailing 1s
            value = rows[tuple(i[:len(kept)])]
            return value if scale is None else value * _scale(scale, x.dtype)
        return te.compute(out_shape, result, name=name, tag=ROW_TAG)
    total = te.compute(out_shape, lambda *i: reducer(x[index(i)], list(raxes.values())), name=name, tag="reduce")
    if scale is None:
        return total
    return te.compute(out_shape, lambda *i: total[i] * _scale(scale, x.dtype), name=name + "_scale",
                      tag="elemwise")


def _rows_then_rest(x: te.Tensor, axes, keepdims, combiner, name, scale, out_shape) -> te.Tensor | None:
    """A reduction over the last axes and others (axes 1 and 3 of NCHW) in two steps: the trailing run of reduced
    axes as rows (vectorized along each contiguous row), then the remaining axes of that result, whose last
    axis is kept (vectorized across the outputs). The one loop nest over both, its contiguous axis a reduction,
    took 2.2x onnxruntime's time for a max over axes 1 and 3 of 768 x 24 x 24. None when the rows are too short
    for the row form. A sum adds in another order (within float rounding of the one-step order)."""
    run = 0
    while x.ndim - 1 - run in axes:
        run += 1
    rows = trailing_reduce(x, run, combiner, name + "_rows")
    if rows is None:
        return None
    rest = reduce_compute(rows, [a for a in axes if a < x.ndim - run], False, combiner, name + "_rest")
    kept = [d for d in range(x.ndim) if d not in axes]

    def result(*i):
        value = rest[tuple(i[d] for d in kept) if keepdims else i]
        return value if scale is None else value * _scale(scale, x.dtype)
    return te.compute(out_shape, result, name=name, tag=ROW_TAG)


WHOLE_MIN_ROWS = 8  # rows of a whole-tensor max / min reduced in parallel (see _whole_tensor_reduce) ...
WHOLE_MIN_ROW = 512  # ... each at least this long: shorter rows cost more in per-row work than they share


def _whole_tensor_reduce(x: te.Tensor, combiner: str, name: str, out_shape) -> te.Tensor | None:
    """max / min of a whole tensor (a dynamically quantized tensor's range) as the max / min of its rows: the
    leading axes (at least WHOLE_MIN_ROWS rows) reduced in parallel, each row in vector partials
    (trailing_reduce), then the rows. The plain reduction to one value runs as one scalar loop on one thread
    (ResNet-18's 64 x 112 x 112 activations: two such passes per DynamicQuantizeLinear). Exact: max and min do
    not depend on the order. None when no split gives enough rows of WHOLE_MIN_ROW elements or more (a small
    tensor: one vectorized row on one thread; the max of 797 x 6 x 6 took 19 us as 797 rows of 36, 8.9 us as one
    row of 28,692, onnxruntime 13 us, Zen 4). None over a shape known only at run time too (the
    plain reduction)."""
    if not all(is_static_dim(d) for d in x.shape):
        return None
    rows, size = 1, int(np.prod(x.shape, dtype=np.int64))
    for k in range(1, x.ndim):
        rows *= x.shape[k - 1]
        if rows >= WHOLE_MIN_ROWS and size // max(rows, 1) >= WHOLE_MIN_ROW:
            per_row = trailing_reduce(x, x.ndim - k, combiner, name + "_rows")
            if per_row is None:
                return None
            reducer = te.max_reduce if combiner == "max" else te.min_reduce
            raxes = [te.reduce_axis(e, f"w{d}") for d, e in enumerate(per_row.shape)]
            return te.compute(out_shape, lambda *i: reducer(per_row[tuple(a.var for a in raxes)], raxes),
                              name=name, tag=ROW_TAG)
    return None


def _register(op, fn, combiner, doc):
    def compute(inputs, attrs, out_type):
        x, = inputs
        dims = [x.shape[a] for a in attrs.axes]
        if all(is_static_dim(d) for d in dims):
            count = int(np.prod(dims, dtype=np.int64))
            scale = 1.0 / count if op == "mean" else None
        else:  # reduced dims known at run time: the mean's scale is computed when it runs
            count = 1
            for d in dims:
                count = count * d
            scale = 1.0 / te.cast(x.dtype, count) if op == "mean" else None
            if combiner == "sum" and len(attrs.axes) > 1:  # the last axis summed first, then the others: rounding
                last = max(attrs.axes)  # grows with H + W, not H * W (see nn.global_avg_pool2d)
                x = reduce_compute(x, (last,), True, "sum", f"{op}_rows", None)
        return reduce_compute(x, attrs.axes, attrs.keepdims, combiner, op, scale)

    register_op(op, inputs=1, pattern=Pattern.COMM_REDUCE, op_class="normalization", infer=_infer(op), ref=_ref(fn),
                compute=compute, normalize=_normalize(op), attrs={"axes": None, "keepdims": True},
                flops=lambda arg_types, attrs, out: float(arg_types[0].size), doc=doc)


_register("sum", np.sum, "sum", "sum over axes (None: all)")
_register("prod", np.prod, "prod", "product over axes (None: all)")
_register("mean", np.mean, "sum", "mean over axes (None: all)")
_register("max", np.max, "max", "maximum over axes (None: all)")
_register("min", np.min, "min", "minimum over axes (None: all)")

# ---------------------------------------------------------------------------------------------- argmax, argmin


def _arg_normalize(op):
    def normalize(attrs, arg_types):
        attrs = dict(attrs)
        attrs["axis"] = normalize_axis(op, attrs["axis"], arg_types[0].ndim)
        attrs["keepdims"], attrs["select_last_index"] = bool(attrs["keepdims"]), bool(attrs["select_last_index"])
        return attrs
    return normalize


def _arg_infer(op):
    def infer(arg_types, attrs):
        x, = arg_types
        if x.dtype == "bool":
            raise OpError(f"{op}: input must be numeric, got bool")
        if x.shape[attrs.axis] == 0:
            raise OpError(f"{op}: reducing an empty axis of {x.shape}")
        return TensorType(reduced_shape(x.shape, (attrs.axis,), attrs.keepdims), "int64")
    return infer


def _arg_ref(fn):
    """numpy's argmax/argmin (a NaN is both the maximum and the minimum: the first one wins); the last index
    as numpy's of the reversed axis."""
    def ref(x, axis, keepdims, select_last_index):
        if select_last_index:
            out = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            out = fn(x, axis=axis, keepdims=keepdims)
        return np.asarray(out, dtype=np.int64)
    return ref


def _arg_compute(combiner):
    """Two reductions: the extreme value along the axis (NaN if any is NaN, as max/min), then the first (or last)
    position holding it, as a min (or max) over positions; NaN matches NaN."""
    def compute(inputs, attrs, out_type):
        x, = inputs
        ax, n = attrs.axis, x.shape[attrs.axis]
        best = reduce_compute(x, (ax,), False, combiner, f"arg{combiner}_value")
        k = te.reduce_axis(n, "k")
        floats = is_float(x.dtype)

        def body(*i):
            outer = tuple(i[:ax]) + tuple(i[ax + 1:]) if attrs.keepdims else tuple(i)
            v, b = x[outer[:ax] + (k.var,) + outer[ax:]], best[outer]
            hit = te.any_of(te.eq(v, b), te.all_of(te.ne(v, v), te.ne(b, b))) if floats else te.eq(v, b)
            pos = te.cast("int64", k.var)
            if attrs.select_last_index:
                return te.max_reduce(te.select(hit, pos, te.const(-1, "int64")), k)
            return te.min_reduce(te.select(hit, pos, te.const(n, "int64")), k)
        return te.compute(out_type.shape, body, name=f"arg{combiner}", tag="reduce")
    return compute


for _op, _fn, _combiner in (("argmax", np.argmax, "max"), ("argmin", np.argmin, "min")):
    register_op(_op, inputs=1, pattern=Pattern.OPAQUE, op_class="normalization", infer=_arg_infer(_op),
                ref=_arg_ref(_fn), compute=_arg_compute(_combiner), normalize=_arg_normalize(_op),
                attrs={"axis": 0, "keepdims": True, "select_last_index": False},
                flops=lambda arg_types, attrs, out: 2.0 * arg_types[0].size,
                doc=f"int64 index of the {_combiner}imum along axis (first, or last with select_last_index; NaN "
                    f"counts as the {_combiner}imum, as numpy)")

# ---------------------------------------------------------------------------------------------- cumsum, cumprod


def _cum_normalize(op):
    def normalize(attrs, arg_types):
        attrs = dict(attrs)
        attrs["axis"] = normalize_axis(op, attrs["axis"], arg_types[0].ndim)
        attrs["exclusive"], attrs["reverse"] = bool(attrs["exclusive"]), bool(attrs["reverse"])
        return attrs
    return normalize


def _cum_infer(op):
    def infer(arg_types, attrs):
        x, = arg_types
        if x.dtype == "bool":
            raise OpError(f"{op}: input must be numeric, got bool")
        return x
    return infer


def _cum_ref(fn, identity):
    """numpy's cumsum/cumprod (of the reversed axis for reverse; shifted by one, the identity first, for
    exclusive); 16-bit floats accumulate in float32."""
    def ref(x, axis, exclusive, reverse):
        y = _widened(np.flip(x, axis) if reverse else x)
        out = fn(y, axis=axis, dtype=y.dtype).astype(x.dtype)
        if exclusive:
            pad = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([pad, np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis=axis)
        return np.flip(out, axis) if reverse else out
    return ref


BLOCKED_SCAN_MIN = 64  # from this axis length on, a scan runs in blocks: n * sqrt(n) steps instead of n^2


def _cum_compute(combiner):
    """In running order (r = the position, or n - 1 - it for reverse), out at r combines the elements at s <= r
    (s < r for exclusive), the identity standing in for the others. A short axis (or a 16-bit float, which the
    block totals would round once more): one reduction over the whole axis per output, in the reference's
    order. A long one: in blocks of B ~ sqrt(n), the blocks' totals, the running total of the blocks before
    each, the running total within each block, and the two combined."""
    def compute(inputs, attrs, out_type):
        x, = inputs
        ax, n = attrs.axis, x.shape[attrs.axis]
        identity = te.reduce_identity(combiner, x.dtype)
        reducer = te.sum if combiner == "sum" else te.prod_reduce
        order = (lambda r: n - 1 - r) if attrs.reverse else (lambda r: r)  # running index <-> position (both ways)

        def at(i, s):  # i with its axis entry replaced by s
            return tuple(i[:ax]) + (s,) + tuple(i[ax + 1:])

        def upto(s, r):  # whether the element at running index s enters the result at r
            return s < r if attrs.exclusive else s <= r

        if n < BLOCKED_SCAN_MIN or x.dtype in ("float16", "bfloat16"):
            k = te.reduce_axis(n, "k")
            return te.compute(x.shape, lambda *i: reducer(
                te.select(upto(k.var, order(i[ax])), x[at(i, order(k.var))], identity), k),
                name=f"cum{combiner}", tag="reduce")
        block = math.isqrt(n - 1) + 1
        blocks = at(x.shape, -(-n // block))

        def read(i, s):  # x at running index s, clamped into the axis (read in bounds where it is not selected)
            return x[at(i, order(te.min_(s, n - 1)))]
        t, c, u = te.reduce_axis(block, "t"), te.reduce_axis(blocks[ax], "c"), te.reduce_axis(block, "u")
        totals = te.compute(blocks, lambda *i: reducer(
            te.select(i[ax] * block + t.var < n, read(i, i[ax] * block + t.var), identity), t),
            name=f"cum{combiner}_blocks", tag="reduce")
        before = te.compute(blocks, lambda *i: reducer(te.select(c.var < i[ax], totals[at(i, c.var)], identity), c),
                            name=f"cum{combiner}_before", tag="reduce")

        def within(*i):
            r = order(i[ax])
            s = r // block * block + u.var
            return reducer(te.select(upto(s, r), read(i, s), identity), u)
        part = te.compute(x.shape, within, name=f"cum{combiner}_within", tag="reduce")

        def combined(*i):
            prev = before[at(i, order(i[ax]) // block)]
            return prev + part[i] if combiner == "sum" else prev * part[i]
        return te.compute(x.shape, combined, name=f"cum{combiner}", tag="elemwise")
    return compute


def _scan_steps(n: int) -> int:
    """Combines per output element of a scan along an axis of n."""
    return n if n < BLOCKED_SCAN_MIN else 2 * (math.isqrt(n - 1) + 1) + 1


for _op, _fn, _combiner, _identity in (("cumsum", np.cumsum, "sum", 0), ("cumprod", np.cumprod, "prod", 1)):
    register_op(_op, inputs=1, pattern=Pattern.OPAQUE, op_class="normalization", infer=_cum_infer(_op),
                ref=_cum_ref(_fn, _identity), compute=_cum_compute(_combiner), normalize=_cum_normalize(_op),
                attrs={"axis": 0, "exclusive": False, "reverse": False},
                flops=lambda arg_types, attrs, out: float(out.size) * _scan_steps(out.shape[attrs.axis]),
                doc=f"running {_combiner} along axis (exclusive: without the element itself; reverse: from the end)")

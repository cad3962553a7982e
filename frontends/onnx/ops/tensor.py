"""Converters of the ops transformers use: integer and boolean tensors (Gather, Cast, comparisons, Where, Expand,
Slice, Split, Range, Trilu), reductions (Reduce*, ArgMax/ArgMin), scans (CumSum/CumProd), LogSoftmax and Hardmax,
LayerNormalization, Gelu, and the math they need (Erf, Pow, Mod...).

Conventions as in frontends/onnx_ops.py (one small function per op, opsets as `since=`). A call whose inputs
are all constants is evaluated at import with the op's numpy reference (`fold`), so shape arithmetic never
reaches the graph. A converter of a node with several outputs returns a tuple, one expression per output; one
that needs the node's output count declares the keyword `_outputs` (the importer passes it).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from relayish import Constant, Expr, call, const
from relayish.types import DTYPES, is_float, numpy_dtype

from ..builders import binary, fold, is_const, normalize_axis, reshape, shape_of
from ..registry import converter
from ..values import ConversionError, checked_elements, constant_value, int_list_input, int_tuple
from .basic import over_flattened_tail


def _optional_ints(expr: Expr | None, what: str):
    return None if expr is None else int_tuple(constant_value(expr, what))


# ---- elementwise math ----

@converter("Erf", since=9)
def erf(x):
    return fold("erf", x)


@converter("Abs")
def abs_(x):
    return fold("abs", x)


@converter("Log")
def log(x):
    return fold("log", x)


@converter("Reciprocal")
def reciprocal(x):
    return fold("reciprocal", x)


@converter("Pow")
def pow_(x, y):
    """The exponent may have another dtype than the base (ONNX's T1, T2): it is converted to the base's."""
    if y.type.dtype != x.type.dtype:
        y = fold("cast", y, dtype=x.type.dtype)
    return fold("power", x, y)


@converter("Mod", since=10)
def mod(a, b, *, fmod=0):
    if not fmod and is_float(a.type.dtype):
        raise ConversionError("fmod=0 on float inputs is defined by ONNX from opset 28 only (before, float inputs "
                              "need fmod=1)")
    return fold("mod", a, b, fmod=int(fmod))


@converter("Mod", since=28)
def mod_v28(a, b, *, fmod=0):
    """fmod=0 on floats: numpy.mod's floor remainder (the divisor's sign)."""
    return fold("mod", a, b, fmod=int(fmod))


@converter("Gelu", since=20)
def gelu(x, *, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ConversionError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return fold("nn.gelu", x, approximate=approximate)


# ---- comparisons and logic (bool results) ----

def _compare(op):
    return lambda a, b: fold(op, a, b)


for _onnx, _op in (("Equal", "equal"), ("Less", "less"), ("Greater", "greater"), ("LessOrEqual", "less_equal"),
                   ("GreaterOrEqual", "greater_equal"), ("And", "logical_and"), ("Or", "logical_or"),
                   ("Xor", "logical_xor")):
    converter(_onnx, since=12 if "OrEqual" in _onnx else 7)(_compare(_op))


@converter("Not")
def not_(x):
    return fold("logical_not", x)


@converter("Where", since=9)
def where(condition, x, y):
    return fold("where", condition, x, y)


# ---- casts, gathers, shapes ----

@converter("Cast")
def cast(x, *, to, saturate=1):
    """saturate only concerns float8 targets, which are refused (as are float4, int4 and int2)."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(to)).name
    if dtype not in DTYPES:
        raise ConversionError(f"casting to {dtype} is not supported (float8, float4, int4 and int2 types are not; "
                              f"supported: {', '.join(DTYPES)})")
    if is_const(x):
        return Constant(x.data.astype(numpy_dtype(dtype)))
    return x if dtype == x.type.dtype else call("cast", x, dtype=dtype)


@converter("CastLike", since=15)
def cast_like(x, target_type, *, saturate=1):
    """Cast to target_type's element type (its values are not read)."""
    dtype = np.dtype(numpy_dtype(target_type.type.dtype)).name
    return cast(x, to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), saturate=saturate)


@converter("Gather")
def gather(data, indices, *, axis=0):
    axis = normalize_axis(axis, len(shape_of(data)))
    if is_const(indices):  # run-time indices are checked at the boundary (runtime/feeds.py) or clamped
        index, n = indices.data, shape_of(data)[axis]
        if index.dtype not in (np.int32, np.int64):
            raise ConversionError(f"input 'indices' must be int32 or int64, got {index.dtype}")
        if index.size and (index.min() < -n or index.max() >= n):
            raise ConversionError(f"indices {int_tuple(index)} out of range for axis {axis} of size {n}")
    return fold("take", data, indices, axis=axis)


@converter("Expand", since=8)
def expand(x, shape):
    target = np.broadcast_shapes(shape_of(x), int_tuple(constant_value(shape, "shape")))
    return x if target == shape_of(x) else fold("broadcast_to", x, shape=target)


@converter("Range", since=11)
def range_(start, limit, delta):
    values = [constant_value(v, name).reshape(()) for v, name in ((start, "start"), (limit, "limit"),
                                                                  (delta, "delta"))]
    checked_elements((_range_length(*values),), f"the range from {values[0]} to {values[1]} by {values[2]}")
    return Constant(np.arange(*values).astype(values[0].dtype))


def _range_length(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    """max(ceil((limit - start) / delta), 0), the spec's element count, computed before anything is allocated (in
    Python ints for integer ranges: a float would round a long int64 range)."""
    if delta == 0:
        raise ConversionError("delta is 0: the range never reaches its limit")
    if start.dtype.kind in "iu":
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    span = (float(limit) - float(start)) / float(delta)
    if not np.isfinite(span):
        raise ConversionError(f"the range from {start} to {limit} by {delta} has no finite length")
    return max(math.ceil(span), 0)


@converter("Trilu", since=14)
def trilu(x, k=None, *, upper=1):
    k = 0 if k is None else int(constant_value(k, "k").reshape(()))
    return fold("trilu", x, upper=int(upper), k=k)


# ---- slicing ----

def _slice(data, starts, ends, axes, steps):
    axes = tuple(range(len(starts))) if axes is None else tuple(axes)
    steps = (1,) * len(starts) if steps is None else tuple(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ConversionError(f"starts {tuple(starts)}, ends {tuple(ends)}, axes {axes} and steps {steps} must "
                              f"have equal lengths")
    return fold("strided_slice", data, begin=tuple(starts), end=tuple(ends), strides=steps, axes=axes)


@converter("Slice")
def slice_v1(data, *, starts, ends, axes=None):
    return _slice(data, starts, ends, axes, None)


@converter("Slice", since=10)
def slice_v10(data, starts, ends, axes=None, steps=None):
    return _slice(data, int_tuple(constant_value(starts, "starts")), int_tuple(constant_value(ends, "ends")),
                  _optional_ints(axes, "axes"), _optional_ints(steps, "steps"))


def _split(data, axis, sizes, count):
    """One strided_slice per part: `sizes` along axis, or `count` parts (ONNX: equal, the last smaller)."""
    extent = shape_of(data)[normalize_axis(axis, len(shape_of(data)))]
    if sizes is None:
        if count < 1:
            raise ConversionError("no output to split into")
        part = -(-extent // count)
        sizes = [min(part, extent - i * part) for i in range(count)]
        if sizes[-1] <= 0:
            raise ConversionError(f"cannot split an axis of {extent} into {count} parts")
    if sum(sizes) != extent or any(s < 0 for s in sizes):
        raise ConversionError(f"split sizes {tuple(sizes)} do not add up to the axis extent {extent}")
    offsets = np.cumsum([0] + list(sizes)).tolist()
    return tuple(_slice(data, [offsets[i]], [offsets[i + 1]], [axis], None) for i in range(len(sizes)))


@converter("Split", since=2)
def split_v2(data, *, axis=0, split=None, _outputs=1):
    return _split(data, axis, None if split is None else list(split), _outputs)


@converter("Split", since=13)
def split_v13(data, split=None, *, axis=0, _outputs=1):
    return _split(data, axis, None if split is None else list(int_tuple(constant_value(split, "split"))), _outputs)


@converter("Split", since=18)
def split_v18(data, split=None, *, axis=0, num_outputs=None, _outputs=1):
    if (split is None) == (num_outputs is None):
        raise ConversionError("exactly one of the input 'split' and the attribute num_outputs must be given")
    if split is not None:
        return split_v13(data, split, axis=axis, _outputs=_outputs)
    if num_outputs != _outputs:
        raise ConversionError(f"num_outputs={num_outputs} but the node has {_outputs} outputs")
    return _split(data, axis, None, num_outputs)


# ---- reductions ----

def _reduce(op, data, axes, keepdims, noop_with_empty_axes=0):
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and noop_with_empty_axes:
        return data
    if op == "mean" and not is_float(data.type.dtype):
        raise ConversionError(f"ReduceMean of a {data.type.dtype} tensor is not supported")
    return fold(op, data, axes=None if axes is None else tuple(axes), keepdims=bool(keepdims))


def _register_reduce(onnx_name, op, input_axes_since):
    @converter(onnx_name)
    def attribute_form(data, *, axes=None, keepdims=1):
        return _reduce(op, data, axes, keepdims)

    @converter(onnx_name, since=input_axes_since)
    def input_form(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return _reduce(op, data, _optional_ints(axes, "axes"), keepdims, noop_with_empty_axes)


_register_reduce("ReduceSum", "sum", 13)
_register_reduce("ReduceMean", "mean", 18)
_register_reduce("ReduceMax", "max", 18)
_register_reduce("ReduceMin", "min", 18)
_register_reduce("ReduceProd", "prod", 18)


# The other reductions are compositions: an elementwise map, a sum, an elementwise map. With
# noop_with_empty_axes and no axes they reduce over an empty set of axes: the two maps alone (as the reference).

def _square(x):
    return fold("multiply", x, x)


def _l2_root(x):
    """sqrt of a sum of squares; of an integer sum in float64, truncated back (as the reference's astype)."""
    if is_float(x.type.dtype):
        return fold("sqrt", x)
    return fold("cast", fold("sqrt", fold("cast", x, dtype="float64")), dtype=x.type.dtype)


def _float_only(onnx_name):
    def check(x):
        if not is_float(x.type.dtype):
            raise ConversionError(f"{onnx_name} of {x.type.dtype} tensors is not supported (it is defined through "
                                  f"Log, a float op; onnx removed integer types from its schema in opset 28)")
        return x
    return check


def _log_sum_exp(data, axes, keepdims):
    """log(sum(exp(x - m))) + m with m the maximum over axes (so that no exp overflows), m taken as 0 where it
    is not finite (all -inf: log(0) + 0 = -inf; any +inf: +inf; NaN propagates)."""
    m = fold("max", data, axes=axes, keepdims=True)
    finite = fold("equal", binary("subtract", m, m), const(0, m.type.dtype))  # inf - inf and NaN - NaN are NaN
    shift = fold("where", finite, m, const(0, m.type.dtype))
    total = fold("sum", fold("exp", binary("subtract", data, shift)), axes=axes, keepdims=bool(keepdims))
    return binary("add", fold("log", total), reshape(shift, shape_of(total)))


def _register_composed_reduce(onnx_name, pre, post, reduce=None):
    """onnx_name(x) = post(sum(pre(x))) (pre/post None: identity); `reduce(data, axes, keepdims)` replaces the
    whole composition when given (it gets data after pre)."""
    def convert(data, axes, keepdims, noop_with_empty_axes=0):
        x = pre(data) if pre else data
        if axes is not None and len(axes) == 0:
            axes = None
        if axes is None and noop_with_empty_axes:
            return post(x) if post and not reduce else x
        axes = None if axes is None else tuple(axes)
        if reduce:
            return reduce(x, axes, keepdims)
        total = fold("sum", x, axes=axes, keepdims=bool(keepdims))
        return post(total) if post else total

    @converter(onnx_name)
    def attribute_form(data, *, axes=None, keepdims=1):
        return convert(data, axes, keepdims)

    @converter(onnx_name, since=18)
    def input_form(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return convert(data, _optional_ints(axes, "axes"), keepdims, noop_with_empty_axes)


_register_composed_reduce("ReduceL1", lambda x: fold("abs", x), None)
_register_composed_reduce("ReduceL2", _square, _l2_root)
_register_composed_reduce("ReduceSumSquare", _square, None)
_register_composed_reduce("ReduceLogSum", _float_only("ReduceLogSum"), lambda x: fold("log", x))
_register_composed_reduce("ReduceLogSumExp", _float_only("ReduceLogSumExp"), None, reduce=_log_sum_exp)


# ---- arg reductions and scans ----

def _register_arg(onnx_name, op):
    def convert(data, axis, keepdims, select_last_index):
        if data.type.dtype == "bool":
            raise ConversionError(f"{onnx_name} of bool tensors is not supported (ONNX defines it for numbers)")
        return fold(op, data, axis=normalize_axis(axis, len(shape_of(data))), keepdims=bool(keepdims),
                    select_last_index=bool(select_last_index))

    @converter(onnx_name)
    def without_last_index(data, *, axis=0, keepdims=1):
        return convert(data, axis, keepdims, 0)

    @converter(onnx_name, since=12)
    def with_last_index(data, *, axis=0, keepdims=1, select_last_index=0):
        return convert(data, axis, keepdims, select_last_index)


_register_arg("ArgMax", "argmax")
_register_arg("ArgMin", "argmin")


def _register_scan(onnx_name, op, since):
    @converter(onnx_name, since=since)
    def scan(x, axis, *, exclusive=0, reverse=0):
        """axis: a constant int32/int64 scalar (or 1-element 1-D tensor)."""
        axes = int_list_input(axis, "axis", (np.int32, np.int64))
        if len(axes) != 1:
            raise ConversionError(f"input 'axis' must hold one value, got {axes}")
        if x.type.dtype == "bool":
            raise ConversionError(f"{onnx_name} of bool tensors is not supported (ONNX defines it for numbers)")
        return fold(op, x, axis=normalize_axis(axes[0], len(shape_of(x))), exclusive=bool(exclusive),
                    reverse=bool(reverse))


_register_scan("CumSum", "cumsum", 11)
_register_scan("CumProd", "cumprod", 26)


# ---- softmax relatives ----

@converter("LogSoftmax")
def log_softmax_v1(x, *, axis=1):
    return over_flattened_tail(lambda v, a: fold("nn.log_softmax", v, axis=a), x, axis)


@converter("LogSoftmax", since=13)
def log_softmax_v13(x, *, axis=-1):
    return fold("nn.log_softmax", x, axis=normalize_axis(axis, len(shape_of(x))))


def _hardmax(x, axis):
    """1 where the first maximum along the axis is, 0 elsewhere: argmax (keepdims) compared with the positions."""
    if not is_float(x.type.dtype):
        raise ConversionError(f"Hardmax of {x.type.dtype} tensors is not supported (ONNX defines it for floats)")
    axis = normalize_axis(axis, len(shape_of(x)))
    n = shape_of(x)[axis]
    positions = Constant(np.arange(n, dtype=np.int64).reshape([n if d == axis else 1 for d in range(len(shape_of(x)))]))
    hit = fold("equal", fold("argmax", x, axis=axis, keepdims=True, select_last_index=False), positions)
    return fold("cast", hit, dtype=x.type.dtype)


@converter("Hardmax")
def hardmax_v1(x, *, axis=1):
    return over_flattened_tail(_hardmax, x, axis)


@converter("Hardmax", since=13)
def hardmax_v13(x, *, axis=-1):
    return _hardmax(x, axis)


# ---- normalization ----

@converter("LayerNormalization", since=17)
def layer_norm(x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """Outputs Y, Mean and InvStdDev (the statistics with the normalized axes kept as 1s); the statistics are
    only computed when the graph uses them."""
    axis = normalize_axis(axis, len(shape_of(x)))
    if bias is None:
        bias = Constant(np.zeros(shape_of(scale), dtype=scale.type.dtype))
    y = fold("nn.layer_norm", x, scale, bias, axis=axis, epsilon=float(epsilon))
    axes = tuple(range(axis, len(shape_of(x))))
    mean = fold("mean", x, axes=axes, keepdims=True)
    diff = binary("subtract", x, mean)
    var = fold("mean", binary("multiply", diff, diff), axes=axes, keepdims=True)
    inv_std = fold("reciprocal", fold("sqrt", binary("add", var, const(epsilon, x.type.dtype))))
    return y, mean, inv_std

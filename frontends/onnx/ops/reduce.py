"""Converters of the reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd (relayish's reductions),
ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp (compositions with a sum), ArgMax and ArgMin,
and the scans CumSum and CumProd. Their axes are an attribute up to the opset where they became an input (13 for
ReduceSum, 18 for the others). Conventions: frontends/onnx/registry.py.
"""
from __future__ import annotations

import numpy as np

from relayish import const
from relayish.types import is_float

from ..builders import binary, fold, normalize_axis, reshape, shape_of
from ..registry import converter
from ..values import ConversionError, int_list_input, optional_ints


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
        return _reduce(op, data, optional_ints(axes, "axes"), keepdims, noop_with_empty_axes)


_register_reduce("ReduceSum", "sum", 13)
_register_reduce("ReduceMean", "mean", 18)
_register_reduce("ReduceMax", "max", 18)
_register_reduce("ReduceMin", "min", 18)
_register_reduce("ReduceProd", "prod", 18)


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
        return convert(data, optional_ints(axes, "axes"), keepdims, noop_with_empty_axes)


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

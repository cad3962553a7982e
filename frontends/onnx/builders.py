"""The relayish expressions converters build, shared by the op modules of frontends/onnx/ops/: each is a relayish
call that is evaluated at import (with the op's numpy reference) when its inputs are all Constants, so the shape
arithmetic of exported models never reaches the graph; plus the checks of attributes every window op or typed
attribute makes. Each raises ConversionError (the importer adds the node) for what it cannot take.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from relayish import Constant, Expr, call, const, get_op
from relayish.prim_expr import PrimExpr
from relayish.op import infer_call_type
from relayish.ops.common import same_dim
from relayish.types import Attrs, dim, is_static_dim

from .shape_values import require
from .values import ConversionError


# ---- expressions that fold when their inputs are constants ----

def is_const(*exprs) -> bool:
    """Every expression is a Constant (its value known at import)."""
    return all(isinstance(e, Constant) for e in exprs)


def shape_of(x: Expr) -> tuple[int, ...]:
    """x's static shape."""
    return x.type.shape


def fold(op: str, *args: Expr, **attrs) -> Expr:
    """call(op, *args, **attrs), evaluated now with the op's reference when every argument is a Constant."""
    if not is_const(*args):
        return call(op, *args, **attrs)
    full, ty = infer_call_type(op, args, Attrs(attrs))
    with np.errstate(all="ignore"):  # IEEE results (log(0) = -inf, ...), as the compiled code gives them
        value = get_op(op).ref(*[a.data for a in args], **full.as_dict())
    return Constant(np.asarray(value, dtype=ty.dtype).reshape(ty.shape))


def reshape(x: Expr, newshape) -> Expr:
    """x viewed as newshape: x itself if the shape is the same, a Constant if x is one."""
    newshape = tuple(dim(d) for d in newshape)  # (a dim known only at run time: its canonical expression)
    if newshape == shape_of(x):
        return x
    if is_const(x):
        return Constant(x.data.reshape(newshape))
    return call("reshape", x, newshape=newshape)


def transpose(x: Expr, axes) -> Expr:
    """x with its axes permuted: x itself for the identity permutation, a Constant if x is one."""
    axes = tuple(int(a) for a in axes)
    if axes == tuple(range(len(axes))):
        return x
    if is_const(x):
        return Constant(np.transpose(x.data, axes))
    return call("transpose", x, axes=axes)


def matched_dims(x: Expr, dims: dict) -> Expr:
    """x sliced to `dims` (axis -> dim) on the axes where both its dim and the given one are known only at run
    time and cannot be shown equal: a feature pyramid adds 2 * ((h - 1) // 2 + 1) rows to h rows, equal at every
    size the model runs at (onnxruntime refuses the others). That they are equal is recorded for the generic module
    to check per call (shape_values.require, both ways); the slice is then the whole axis. x itself when every
    dim is the same already."""
    shape = shape_of(x)
    return _assumed_equal(x, {a: d for a, d in dims.items() if not is_static_dim(shape[a]) and not is_static_dim(d)
                              and not same_dim(shape[a], d)}, "the other input's")


def fixed_dims(x: Expr, dims: dict, what: str) -> Expr:
    """x sliced to `dims` (axis -> int) on the axes where its dim is known only at run time: a model of one input
    size made free, whose flattened features meet a dense layer's fixed weight (AlexNet, VGG) or whose shuffle
    reshapes to a fixed map (ShuffleNet), runs only at the sizes that give those dims (onnxruntime refuses the
    others). That they are equal is recorded for the generic module to check per call (shape_values.require,
    both ways: a size that breaks it is compiled for, and refused as onnxruntime does); the slice is then the whole
    axis. x itself when no such axis."""
    shape = shape_of(x)
    return _assumed_equal(x, {a: d for a, d in dims.items() if not is_static_dim(shape[a]) and isinstance(d, int)},
                          what)


def _assumed_equal(x: Expr, dims: dict, what: str) -> Expr:
    """x sliced to dims (axis -> dim) on those axes, each dim's equality with x's recorded as both inequalities
    for the generic module to check per call; x itself when dims is empty."""
    if not dims:
        return x
    shape, axes = shape_of(x), sorted(dims)
    for a in axes:
        for lhs, rhs in ((shape[a], dims[a]), (dims[a], shape[a])):
            require(lhs - rhs + 1, f"dim {a} of size {shape[a]} must equal {dims[a]} ({what})")
    return call("strided_slice", x, begin=(0,) * len(axes), end=tuple(dims[a] for a in axes),
                strides=(1,) * len(axes), axes=tuple(axes))


def binary(op: str, a: Expr, b: Expr) -> Expr:
    """The elementwise binary op (add, subtract, multiply, divide, maximum...) of a and b, broadcast; two
    constants of one dtype fold. Dims known only at run time that must be equal are matched (matched_dims)."""
    if not (a.type.is_static and b.type.is_static):
        sa, sb = shape_of(a), shape_of(b)
        k = min(len(sa), len(sb))
        b = matched_dims(b, {len(sb) - k + j: sa[len(sa) - k + j] for j in range(k)})
    if is_const(a, b):
        if a.data.dtype != b.data.dtype:
            raise ConversionError(f"{op}: inputs have different dtypes {a.data.dtype} and {b.data.dtype}")
        # the op's own reference: integer Div truncates toward zero as ONNX says (relayish/ops/elemwise.py)
        with np.errstate(all="ignore"):  # IEEE results (inf - inf = nan, ...), as the compiled code gives them
            return Constant(np.asarray(get_op(op).ref(a.data, b.data), dtype=a.data.dtype))
    return call(op, a, b)


def scalar_like(value: float, like: Expr) -> Constant:
    """A 0-d constant of `like`'s dtype."""
    return const(value, like.type.dtype)


def astype(x: Expr, dtype: str) -> Expr:
    """x cast to dtype (x itself if it has that dtype already)."""
    return x if x.type.dtype == dtype else fold("cast", x, dtype=dtype)


def slice_last_axis(x: Expr, begin: int, end: int, step: int = 1) -> Expr:
    """x[..., begin:end:step]."""
    return fold("strided_slice", x, begin=(begin,), end=(end,), strides=(step,), axes=(len(shape_of(x)) - 1,))


# ---- attributes ----

def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """An ONNX axis in [-ndim, ndim) -> its index in [0, ndim); `what` names it in the error."""
    if not -ndim <= axis < ndim:
        raise ConversionError(f"{what} {axis} out of range for a {ndim}-D input")
    return axis % ndim


def flag(value, name: str) -> bool:
    """A 0/1 attribute (ceil_mode, count_include_pad, transA...): other values are refused, not read as true."""
    if value not in (0, 1):
        raise ConversionError(f"attribute {name} must be 0 or 1, got {value}")
    return bool(value)


def elem_type_name(elem_type: int, what: str) -> str:
    """An ONNX element type (attribute value) -> its numpy-style name (float8_e4m3fn, int4, uint8...)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, ValueError, TypeError) as e:
        raise ConversionError(f"{what}={elem_type} is not an ONNX element type") from e


# ---- convolution and pooling windows ----

def _padding(auto_pad: str, pads, in_sizes, kernel, strides, dilations) -> tuple[int, ...]:
    """ONNX auto_pad/pads -> relayish (begins of every spatial axis, then their ends: top, left, bottom, right in
    2-D), the order of ONNX pads. SAME_*: output = ceil(in / stride), the odd pad element at the end (UPPER) or
    the beginning (LOWER)."""
    rank = len(in_sizes)
    if auto_pad != "NOTSET" and pads is not None:
        raise ConversionError(f"auto_pad={auto_pad} together with explicit pads {tuple(pads)}: ONNX allows "
                              f"one or the other")
    if auto_pad == "NOTSET":
        pads = tuple(pads) if pads is not None else (0,) * (2 * rank)
        if len(pads) != 2 * rank:
            raise ConversionError(f"pads must have {2 * rank} values for a {rank}-D window, got {pads}")
        return pads
    if auto_pad == "VALID":
        return (0,) * (2 * rank)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ConversionError(f"unknown auto_pad {auto_pad!r}")
    begin, end = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        if isinstance(size, PrimExpr):  # a size known at run time: SAME padding is a constant only at stride 1
            if s != 1:
                raise ConversionError(f"auto_pad={auto_pad} with stride {s} over a dim known only at run time "
                                      f"({size}): its padding would depend on the size")
            size = 1
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin + end)


MAX_WINDOW_TAPS = 1 << 24  # a 4096 x 4096 window; real models' windows are far smaller


def window_attrs(x, kernel_shape, strides, dilations, auto_pad, pads) -> dict:
    """The shared attrs of conv and pooling windows over x's spatial axes (2 of a 4-D input, 3 of a 5-D one)."""
    rank = len(shape_of(x)) - 2
    strides = tuple(strides) if strides is not None else (1,) * rank
    dilations = tuple(dilations) if dilations is not None else (1,) * rank
    if len(kernel_shape) != rank or len(strides) != rank or len(dilations) != rank:
        raise ConversionError(f"kernel_shape, strides and dilations must have {rank} values for a {rank}-D window, "
                              f"got {tuple(kernel_shape)}, {strides}, {dilations}")
    for name, values in (("kernel_shape", kernel_shape), ("strides", strides), ("dilations", dilations),
                         ("pads", pads or ())):
        if any(abs(v) >= 2**31 for v in values):
            raise ConversionError(f"attribute {name} {tuple(values)} has a value beyond the int32 range")
    for name, values in (("strides", strides), ("dilations", dilations)):
        if any(v < 1 for v in values):
            raise ConversionError(f"attribute {name} {tuple(values)} must be >= 1 on every axis")
    taps = math.prod(max(int(k), 1) for k in kernel_shape)
    if taps > MAX_WINDOW_TAPS:  # each output visits every tap: 2^31 x 2 taps is minutes per output, not an error
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} is a window of {taps} taps; at most "
                              f"{MAX_WINDOW_TAPS} (2^24) are supported")
    return dict(strides=strides, dilation=dilations,
                padding=_padding(auto_pad, pads, shape_of(x)[2:], kernel_shape, strides, dilations))

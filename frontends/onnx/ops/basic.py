"""Converters of the basic ONNX ops: elementwise arithmetic and activations, the 2-D convolution and pooling
windows (frontends/onnx/ops/conv.py registers them for every rank), Gemm, MatMul, Softmax, LRN, data movement
(Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Concat) and constants (Constant, ConstantOfShape, Shape, Size).
Conventions: frontends/onnx/registry.py.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, call

from ..builders import binary, flag, is_const, normalize_axis, reshape, scalar_like, shape_of, transpose, window_attrs
from ..registry import converter
from ..values import ConversionError, checked_elements, int_list_input, scalar_input, tensor_array


# ---- elementwise ----

@converter("Relu")
def relu(x):
    return call("nn.relu", x)


@converter("LeakyRelu")
def leaky_relu(x, *, alpha=0.01):
    return call("nn.leaky_relu", x, alpha=alpha)


@converter("Sigmoid")
def sigmoid(x):
    return call("sigmoid", x)


@converter("HardSigmoid", since=6)
def hard_sigmoid(x, *, alpha=0.2, beta=0.5):
    return call("hard_sigmoid", x, alpha=alpha, beta=beta)


@converter("Tanh")
def tanh(x):
    return call("tanh", x)


@converter("Exp")
def exp(x):
    return call("exp", x)


@converter("Sqrt")
def sqrt(x):
    return call("sqrt", x)


@converter("Neg")
def neg(x):
    return call("negative", x)


@converter("Clip")
def clip_v1(x, *, min=-math.inf, max=math.inf):  # noqa: A002  (ONNX's attribute names)
    return call("clip", x, a_min=float(min), a_max=float(max))


@converter("Clip", since=11)
def clip_v11(x, min=None, max=None):  # noqa: A002
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and bound.type.dtype != x.type.dtype:
            raise ConversionError(f"input {name!r} is {bound.type.dtype}, but input 'input' is {x.type.dtype}")
    lo = -math.inf if min is None else scalar_input(min, "min")
    hi = math.inf if max is None else scalar_input(max, "max")
    return call("clip", x, a_min=lo, a_max=hi)


@converter("Add")
def add(a, b):
    return binary("add", a, b)


@converter("Sub")
def sub(a, b):
    return binary("subtract", a, b)


@converter("Mul")
def mul(a, b):
    return binary("multiply", a, b)


@converter("Div")
def div(a, b):
    return binary("divide", a, b)


def _chain(op: str, inputs) -> Expr:
    out = inputs[0]
    for x in inputs[1:]:
        out = binary(op, out, x)
    return out


@converter("Sum")
def sum_(*inputs):
    return _chain("add", inputs)


@converter("Max")
def max_(*inputs):
    return _chain("maximum", inputs)


@converter("Min")
def min_(*inputs):
    return _chain("minimum", inputs)


@converter("Mean")
def mean(*inputs):
    total = _chain("add", inputs)
    return binary("divide", total, scalar_like(len(inputs), total))


# ---- nn ----

def _expect_spatial_2d(x: Expr, op: str):
    if len(shape_of(x)) != 4:
        raise ConversionError(f"only 2-D {op} (a 4-D NCHW input) is supported, got input shape {shape_of(x)}")


# ONNX Conv: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    _expect_spatial_2d(x, "Conv")
    kernel = shape_of(w)[2:]
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {shape_of(w)}")
    y = call("nn.conv2d", x, w, groups=group, **window_attrs(x, kernel, strides, dilations, auto_pad, pads))
    if b is None:
        return y
    if shape_of(b) != (shape_of(w)[0],):
        raise ConversionError(f"bias shape {shape_of(b)} does not match {shape_of(w)[0]} output channels")
    return binary("add", y, reshape(b, (shape_of(b)[0], 1, 1)))


# BatchNormalization and Dropout: frontends/onnx_ops_training.py


# ONNX MaxPool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def max_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0,
             strides=None):
    _expect_spatial_2d(x, "MaxPool")
    return call("nn.max_pool2d", x, pool_size=tuple(kernel_shape), ceil_mode=flag(ceil_mode, "ceil_mode"),
                **window_attrs(x, kernel_shape, strides, dilations, auto_pad, pads))


# ONNX AveragePool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def avg_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, pads=None,
             strides=None):
    _expect_spatial_2d(x, "AveragePool")
    return call("nn.avg_pool2d", x, pool_size=tuple(kernel_shape), ceil_mode=flag(ceil_mode, "ceil_mode"),
                count_include_pad=flag(count_include_pad, "count_include_pad"),
                **window_attrs(x, kernel_shape, strides, dilations, auto_pad, pads))


# ONNX GlobalAveragePool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def global_avg_pool(x):
    _expect_spatial_2d(x, "GlobalAveragePool")
    return call("nn.global_avg_pool2d", x)


# ONNX GlobalMaxPool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def global_max_pool(x):
    _expect_spatial_2d(x, "GlobalMaxPool")
    return call("nn.max_pool2d", x, pool_size=shape_of(x)[2:])


@converter("Gemm")
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803  (ONNX's names)
    """alpha * A' @ B' + beta * C -> dense(A', W) with W = B'^T in [N, K] layout, as nn.dense wants."""
    for name, v in (("A", a), ("B", b)):
        if len(shape_of(v)) != 2:
            raise ConversionError(f"input {name} must be 2-D, got shape {shape_of(v)}")
    x = transpose(a, (1, 0)) if flag(transA, "transA") else a
    w = b if flag(transB, "transB") else transpose(b, (1, 0))
    y = call("nn.dense", x, w)
    if c is not None:  # C broadcasts to Y = (M, N) one way only: a (5, 1) bias of a (1, 5) product is an error
        sc, sy = shape_of(c), shape_of(y)
        if len(sc) > 2 or any(d not in (1, e) for d, e in zip(reversed(sc), reversed(sy))):
            raise ConversionError(f"input C of shape {sc} does not broadcast to the product's shape {sy} "
                                  f"(unidirectional broadcasting)")
    if alpha != 1.0:
        y = binary("multiply", y, scalar_like(alpha, y))
    if c is not None and beta != 0.0:
        y = binary("add", y, c if beta == 1.0 else binary("multiply", c, scalar_like(beta, c)))
    return y


@converter("MatMul")
def matmul(a, b):
    """numpy matmul semantics; a 1-D operand is promoted to a matrix and the added axis removed after."""
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        raise ConversionError(f"MatMul operands must be at least 1-D, got shapes {sa} and {sb}")
    a2 = reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape(b, sb + (1,)) if len(sb) == 1 else b
    y = call("nn.matmul", a2, b2)
    out = shape_of(y)
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return reshape(y, out)


def over_flattened_tail(fn, x: Expr, axis: int) -> Expr:
    """fn(x', -1) for x' = x coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])], reshaped back: the
    Softmax, LogSoftmax and Hardmax of opsets before 13, which run over the whole flattened tail."""
    shape = shape_of(x)
    axis = normalize_axis(axis, len(shape))
    if axis == len(shape) - 1:
        return fn(x, -1)
    flat = reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return reshape(fn(flat, -1), shape)


@converter("Softmax")
def softmax_v1(x, *, axis=1):
    return over_flattened_tail(lambda v, a: call("nn.softmax", v, axis=a), x, axis)


@converter("Softmax", since=13)
def softmax_v13(x, *, axis=-1):
    return call("nn.softmax", x, axis=normalize_axis(axis, len(shape_of(x))))


@converter("LRN")
def lrn(x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    return call("nn.lrn", x, size=size, alpha=alpha, beta=beta, bias=bias)


@converter("Identity")
def identity(x):
    return x


# ---- data movement ----

@converter("Flatten")
def flatten(x, *, axis=1):
    shape = shape_of(x)
    if not -len(shape) <= axis <= len(shape):
        raise ConversionError(f"axis {axis} out of range for a {len(shape)}-D input")
    axis = axis + len(shape) if axis < 0 else axis
    return reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@converter("Reshape")
def reshape_(data, shape, *, allowzero=0):
    """0 copies the input's dim at that position (unless allowzero), -1 is inferred (at most one)."""
    target = list(int_list_input(shape, "shape"))
    in_shape = shape_of(data)
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ConversionError(f"shape {tuple(target)}: a 0 at position {i} has no input dim to copy "
                                      f"(input shape {in_shape})")
            target[i] = in_shape[i]
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise ConversionError(f"invalid shape {tuple(target)}")
    size, known = math.prod(in_shape), math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or size % known:
            raise ConversionError(f"cannot reshape {in_shape} to {tuple(target)}")
        target[target.index(-1)] = size // known
    if math.prod(target) != size:
        raise ConversionError(f"cannot reshape {in_shape} ({size} elements) to {tuple(target)}")
    return reshape(data, target)


@converter("Transpose")
def transpose_(data, *, perm=None):
    ndim = len(shape_of(data))
    perm = tuple(perm) if perm is not None else tuple(reversed(range(ndim)))
    if sorted(perm) != list(range(ndim)):
        raise ConversionError(f"perm {perm} is not a permutation of the {ndim} axes")
    return transpose(data, perm)


def _squeeze(data, axes):
    shape = shape_of(data)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {normalize_axis(a, len(shape), "squeeze axis") for a in axes}
    for a in sorted(axes):
        if shape[a] != 1:
            raise ConversionError(f"cannot squeeze axis {a} of size {shape[a]} (input shape {shape})")
    return reshape(data, [d for i, d in enumerate(shape) if i not in axes])


def _unsqueeze(data, axes):
    shape = shape_of(data)
    ndim = len(shape) + len(axes)
    axes = [normalize_axis(a, ndim, "unsqueeze axis") for a in axes]
    if len(set(axes)) != len(axes):
        raise ConversionError(f"duplicate unsqueeze axes {tuple(axes)}")
    dims = iter(shape)
    return reshape(data, [1 if i in axes else next(dims) for i in range(ndim)])


@converter("Squeeze")
def squeeze_v1(data, *, axes=None):
    return _squeeze(data, axes)


@converter("Squeeze", since=13)
def squeeze_v13(data, axes=None):
    return _squeeze(data, None if axes is None else int_list_input(axes, "axes"))


@converter("Unsqueeze")
def unsqueeze_v1(data, *, axes):
    return _unsqueeze(data, axes)


@converter("Unsqueeze", since=13)
def unsqueeze_v13(data, axes):
    return _unsqueeze(data, int_list_input(axes, "axes"))


@converter("Concat")
def concat(*inputs, axis):
    axis = normalize_axis(axis, len(shape_of(inputs[0])))
    nonempty = [x for x in inputs if shape_of(x)[axis] > 0]  # an empty part adds nothing (exporters slice shape[2:2])
    if nonempty and len(nonempty) < len(inputs):
        call("concatenate", *inputs, axis=axis)  # (the parts' shapes are checked all the same)
        inputs = tuple(nonempty)
    if len(inputs) == 1:
        return inputs[0]
    if is_const(*inputs):
        return Constant(np.concatenate([x.data for x in inputs], axis=axis))
    return call("concatenate", *inputs, axis=axis)


# ---- constants and shape computations (folded at import) ----

@converter("Constant")
def constant(*, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             sparse_value=None, value_string=None, value_strings=None):
    given = {k: v for k, v in locals().items() if v is not None}
    if len(given) != 1:
        raise ConversionError(f"exactly one value attribute must be set, got {sorted(given) or 'none'}")
    kind, v = given.popitem()
    if kind == "value":
        return Constant(tensor_array(v, "attribute value"))
    if kind in ("value_float", "value_floats"):
        return Constant(np.asarray(v, np.float32))
    if kind in ("value_int", "value_ints"):
        return Constant(np.asarray(v, np.int64))
    raise ConversionError(f"attribute {kind} is not supported (only numeric constants)")


@converter("ConstantOfShape")
def constant_of_shape(shape, *, value=None):
    fill = tensor_array(value, "attribute value").reshape(-1) if value is not None else np.zeros(1, np.float32)
    if fill.size != 1:
        raise ConversionError(f"value must have exactly one element, got {fill.size}")
    dims = int_list_input(shape, "shape")
    checked_elements(dims, "the output")
    return Constant(np.full(dims, fill[0], dtype=fill.dtype))


@converter("Shape")
def shape_(data, *, start=0, end=None):
    return Constant(np.asarray(shape_of(data)[start:end], np.int64))


@converter("Size")
def size(data):
    """The element count, known at import (shapes are static)."""
    return Constant(np.asarray(math.prod(shape_of(data)), np.int64))

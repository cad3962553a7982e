"""One small converter per ONNX op: ONNX inputs as positional arguments, ONNX attributes as keyword arguments with
their ONNX defaults. A converter returns the relayish expression of the node's first output.

Opset differences are an explicit table: `@converter("Squeeze", since=13)` registers the form used from opset 13
on; the importer picks, for a model's opset, the registration with the largest `since` not above it.

Inputs arrive as relayish expressions (initializers and folded values as `Constant`s), or None for an omitted
optional input. Computations whose inputs are all constants (the int64 shape arithmetic of exported models) are
folded here with numpy, so they never reach the graph. A converter that cannot handle its node raises
ConversionError; the importer adds the node's name and op type.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from relayish import Constant, Expr, call, const, get_op

from ..values import ConversionError, checked_elements, int_list_input, scalar_input, tensor_array


@dataclass(frozen=True)
class Converter:
    op_type: str
    since: int
    fn: Callable
    inputs: tuple[str, ...]  # positional parameter names, for messages
    required_inputs: int  # the first this many inputs must be given
    variadic: bool  # takes *inputs
    attrs: frozenset[str]  # keyword-only parameters = the ONNX attributes the converter knows
    required_attrs: frozenset[str]


_CONVERTERS: dict[str, list[Converter]] = {}  # the default domain (ai.onnx)
# other domains by name: com.microsoft, onnxruntime's contrib ops (frontends/onnx_ops_contrib*.py)
_DOMAIN_CONVERTERS: dict[str, dict[str, list[Converter]]] = {}
DEFAULT_DOMAINS = ("", "ai.onnx")


def _table(domain: str) -> dict[str, list[Converter]]:
    return _CONVERTERS if domain in DEFAULT_DOMAINS else _DOMAIN_CONVERTERS.setdefault(domain, {})


def converter(op_type: str, since: int = 1, domain: str = ""):
    """Register fn as the converter of op_type for opsets >= since (until a later registration takes over);
    `domain`: the op's domain (default: ai.onnx), whose own opset version `since` then counts in."""
    def register(fn):
        params = inspect.signature(fn).parameters.values()
        kw = [p for p in params if p.kind is p.KEYWORD_ONLY]
        table = _table(domain)
        table.setdefault(op_type, []).append(Converter(
            op_type, since, fn,
            inputs=tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD),
            required_inputs=sum(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params),
            variadic=any(p.kind is p.VAR_POSITIONAL for p in params),
            attrs=frozenset(p.name for p in kw),
            required_attrs=frozenset(p.name for p in kw if p.default is p.empty)))
        table[op_type].sort(key=lambda c: c.since)
        return fn
    return register


def lookup_converter(op_type: str, opset: int, domain: str = "") -> Converter | None:
    """The converter of op_type at this opset of its domain (default: ai.onnx), or None if the op is unsupported
    there."""
    found = None
    for conv in (_CONVERTERS if domain in DEFAULT_DOMAINS else _DOMAIN_CONVERTERS.get(domain, {})).get(op_type, ()):
        if conv.since <= opset:
            found = conv
    return found


def supported_ops(domain: str = "") -> list[str]:
    """The op types with a converter in `domain` (default: ai.onnx)."""
    return sorted(_CONVERTERS if domain in DEFAULT_DOMAINS else _DOMAIN_CONVERTERS.get(domain, {}))


# ---- building blocks: relayish calls that fold when their inputs are constants ----

def _is_const(*exprs) -> bool:
    return all(isinstance(e, Constant) for e in exprs)


def _shape(x: Expr) -> tuple[int, ...]:
    return x.type.shape


def _reshape(x: Expr, newshape) -> Expr:
    newshape = tuple(int(d) for d in newshape)
    if newshape == _shape(x):
        return x
    if _is_const(x):
        return Constant(x.data.reshape(newshape))
    return call("reshape", x, newshape=newshape)


def _transpose(x: Expr, axes) -> Expr:
    axes = tuple(int(a) for a in axes)
    if axes == tuple(range(len(axes))):
        return x
    if _is_const(x):
        return Constant(np.transpose(x.data, axes))
    return call("transpose", x, axes=axes)


def _binary(op: str, a: Expr, b: Expr) -> Expr:
    if _is_const(a, b):
        if a.data.dtype != b.data.dtype:
            raise ConversionError(f"{op}: inputs have different dtypes {a.data.dtype} and {b.data.dtype}")
        # the op's own reference: integer Div truncates toward zero as ONNX says (relayish/ops/elemwise.py)
        with np.errstate(all="ignore"):  # IEEE results (inf - inf = nan, ...), as the compiled code gives them
            return Constant(np.asarray(get_op(op).ref(a.data, b.data), dtype=a.data.dtype))
    return call(op, a, b)


def _scalar(value: float, like: Expr) -> Constant:
    return const(value, like.type.dtype)


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise ConversionError(f"{what} {axis} out of range for a {ndim}-D input")
    return axis % ndim


def _flag(value, name: str) -> bool:
    """A 0/1 attribute (ceil_mode, count_include_pad, transA...): other values are refused, not read as true."""
    if value not in (0, 1):
        raise ConversionError(f"attribute {name} must be 0 or 1, got {value}")
    return bool(value)


def _expect_spatial_2d(x: Expr, op: str):
    if len(_shape(x)) != 4:
        raise ConversionError(f"only 2-D {op} (a 4-D NCHW input) is supported, got input shape {_shape(x)}")


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
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin + end)


MAX_WINDOW_TAPS = 1 << 24  # a 4096 x 4096 window; real models' windows are far smaller


def _window(x, kernel_shape, strides, dilations, auto_pad, pads) -> dict:
    """The shared attrs of conv and pooling windows over x's spatial axes (2 of a 4-D input, 3 of a 5-D one)."""
    rank = len(_shape(x)) - 2
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
                padding=_padding(auto_pad, pads, _shape(x)[2:], kernel_shape, strides, dilations))


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
    return _binary("add", a, b)


@converter("Sub")
def sub(a, b):
    return _binary("subtract", a, b)


@converter("Mul")
def mul(a, b):
    return _binary("multiply", a, b)


@converter("Div")
def div(a, b):
    return _binary("divide", a, b)


def _chain(op: str, inputs) -> Expr:
    out = inputs[0]
    for x in inputs[1:]:
        out = _binary(op, out, x)
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
    return _binary("divide", total, _scalar(len(inputs), total))


# ---- nn ----

# ONNX Conv: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    _expect_spatial_2d(x, "Conv")
    kernel = _shape(w)[2:]
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ConversionError(f"kernel_shape {tuple(kernel_shape)} does not match the weight shape {_shape(w)}")
    y = call("nn.conv2d", x, w, groups=group, **_window(x, kernel, strides, dilations, auto_pad, pads))
    if b is None:
        return y
    if _shape(b) != (_shape(w)[0],):
        raise ConversionError(f"bias shape {_shape(b)} does not match {_shape(w)[0]} output channels")
    return _binary("add", y, _reshape(b, (_shape(b)[0], 1, 1)))


# BatchNormalization and Dropout: frontends/onnx_ops_training.py


# ONNX MaxPool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def max_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, storage_order=0,
             strides=None):
    _expect_spatial_2d(x, "MaxPool")
    return call("nn.max_pool2d", x, pool_size=tuple(kernel_shape), ceil_mode=_flag(ceil_mode, "ceil_mode"),
                **_window(x, kernel_shape, strides, dilations, auto_pad, pads))


# ONNX AveragePool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def avg_pool(x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, pads=None,
             strides=None):
    _expect_spatial_2d(x, "AveragePool")
    return call("nn.avg_pool2d", x, pool_size=tuple(kernel_shape), ceil_mode=_flag(ceil_mode, "ceil_mode"),
                count_include_pad=_flag(count_include_pad, "count_include_pad"),
                **_window(x, kernel_shape, strides, dilations, auto_pad, pads))


# ONNX GlobalAveragePool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def global_avg_pool(x):
    _expect_spatial_2d(x, "GlobalAveragePool")
    return call("nn.global_avg_pool2d", x)


# ONNX GlobalMaxPool: registered by frontends/onnx_ops_convnd.py, which calls this for 2-D windows
def global_max_pool(x):
    _expect_spatial_2d(x, "GlobalMaxPool")
    return call("nn.max_pool2d", x, pool_size=_shape(x)[2:])


@converter("Gemm")
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803  (ONNX's names)
    """alpha * A' @ B' + beta * C -> dense(A', W) with W = B'^T in [N, K] layout, as nn.dense wants."""
    for name, v in (("A", a), ("B", b)):
        if len(_shape(v)) != 2:
            raise ConversionError(f"input {name} must be 2-D, got shape {_shape(v)}")
    x = _transpose(a, (1, 0)) if _flag(transA, "transA") else a
    w = b if _flag(transB, "transB") else _transpose(b, (1, 0))
    y = call("nn.dense", x, w)
    if c is not None:  # C broadcasts to Y = (M, N) one way only: a (5, 1) bias of a (1, 5) product is an error
        sc, sy = _shape(c), _shape(y)
        if len(sc) > 2 or any(d not in (1, e) for d, e in zip(reversed(sc), reversed(sy))):
            raise ConversionError(f"input C of shape {sc} does not broadcast to the product's shape {sy} "
                                  f"(unidirectional broadcasting)")
    if alpha != 1.0:
        y = _binary("multiply", y, _scalar(alpha, y))
    if c is not None and beta != 0.0:
        y = _binary("add", y, c if beta == 1.0 else _binary("multiply", c, _scalar(beta, c)))
    return y


@converter("MatMul")
def matmul(a, b):
    """numpy matmul semantics; a 1-D operand is promoted to a matrix and the added axis removed after."""
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        raise ConversionError(f"MatMul operands must be at least 1-D, got shapes {sa} and {sb}")
    a2 = _reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = _reshape(b, sb + (1,)) if len(sb) == 1 else b
    y = call("nn.matmul", a2, b2)
    out = _shape(y)
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return _reshape(y, out)


def over_flattened_tail(fn, x: Expr, axis: int) -> Expr:
    """fn(x', -1) for x' = x coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])], reshaped back: the
    Softmax, LogSoftmax and Hardmax of opsets before 13, which run over the whole flattened tail."""
    shape = _shape(x)
    axis = _axis(axis, len(shape))
    if axis == len(shape) - 1:
        return fn(x, -1)
    flat = _reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return _reshape(fn(flat, -1), shape)


@converter("Softmax")
def softmax_v1(x, *, axis=1):
    return over_flattened_tail(lambda v, a: call("nn.softmax", v, axis=a), x, axis)


@converter("Softmax", since=13)
def softmax_v13(x, *, axis=-1):
    return call("nn.softmax", x, axis=_axis(axis, len(_shape(x))))


@converter("LRN")
def lrn(x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    return call("nn.lrn", x, size=size, alpha=alpha, beta=beta, bias=bias)


@converter("Identity")
def identity(x):
    return x


# ---- data movement ----

@converter("Flatten")
def flatten(x, *, axis=1):
    shape = _shape(x)
    if not -len(shape) <= axis <= len(shape):
        raise ConversionError(f"axis {axis} out of range for a {len(shape)}-D input")
    axis = axis + len(shape) if axis < 0 else axis
    return _reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@converter("Reshape")
def reshape(data, shape, *, allowzero=0):
    """0 copies the input's dim at that position (unless allowzero), -1 is inferred (at most one)."""
    target = list(int_list_input(shape, "shape"))
    in_shape = _shape(data)
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
    return _reshape(data, target)


@converter("Transpose")
def transpose(data, *, perm=None):
    ndim = len(_shape(data))
    perm = tuple(perm) if perm is not None else tuple(reversed(range(ndim)))
    if sorted(perm) != list(range(ndim)):
        raise ConversionError(f"perm {perm} is not a permutation of the {ndim} axes")
    return _transpose(data, perm)


def _squeeze(data, axes):
    shape = _shape(data)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {_axis(a, len(shape), "squeeze axis") for a in axes}
    for a in sorted(axes):
        if shape[a] != 1:
            raise ConversionError(f"cannot squeeze axis {a} of size {shape[a]} (input shape {shape})")
    return _reshape(data, [d for i, d in enumerate(shape) if i not in axes])


def _unsqueeze(data, axes):
    shape = _shape(data)
    ndim = len(shape) + len(axes)
    axes = [_axis(a, ndim, "unsqueeze axis") for a in axes]
    if len(set(axes)) != len(axes):
        raise ConversionError(f"duplicate unsqueeze axes {tuple(axes)}")
    dims = iter(shape)
    return _reshape(data, [1 if i in axes else next(dims) for i in range(ndim)])


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
    axis = _axis(axis, len(_shape(inputs[0])))
    nonempty = [x for x in inputs if _shape(x)[axis] > 0]  # an empty part adds nothing (exporters slice shape[2:2])
    if nonempty and len(nonempty) < len(inputs):
        call("concatenate", *inputs, axis=axis)  # (the parts' shapes are checked all the same)
        inputs = tuple(nonempty)
    if len(inputs) == 1:
        return inputs[0]
    if _is_const(*inputs):
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
    return Constant(np.asarray(_shape(data)[start:end], np.int64))


@converter("Size")
def size(data):
    """The element count, known at import (shapes are static)."""
    return Constant(np.asarray(math.prod(_shape(data)), np.int64))

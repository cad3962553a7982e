"""Converters of the dense layers, softmaxes, normalizations and losses of networks: Gemm, MatMul (nn.dense,
nn.matmul), Softmax, LogSoftmax, Hardmax, LRN, LayerNormalization, NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss. The losses are compositions of existing relayish ops whose numerics follow onnx's reference
implementations (onnx/reference/ops/op_negative_log_likelihood_loss.py etc.), which generated the conformance cases.
Convolutions and pools: conv.py; BatchNormalization and Dropout: training.py. Conventions:
frontends/onnx/registry.py.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr, call, const
from relayish.types import is_float

from ..builders import binary, fixed_dims, flag, fold, normalize_axis, reshape, scalar_like, shape_of, transpose
from ..registry import converter
from ..values import ConversionError


# ---- dense layers ----

@converter("Gemm")
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803  (ONNX's names)
    """alpha * A' @ B' + beta * C -> dense(A', W) with W = B'^T in [N, K] layout, as nn.dense wants."""
    for name, v in (("A", a), ("B", b)):
        if len(shape_of(v)) != 2:
            raise ConversionError(f"input {name} must be 2-D, got shape {shape_of(v)}")
    x = transpose(a, (1, 0)) if flag(transA, "transA") else a
    w = b if flag(transB, "transB") else transpose(b, (1, 0))
    x = fixed_dims(x, {1: shape_of(w)[1]}, "A's features")  # (a run-time size meeting a fixed weight)
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
    k_a, k_b = shape_of(a2)[-1], shape_of(b2)[-2]  # (a run-time size meeting a fixed one: fixed_dims)
    a2 = fixed_dims(a2, {len(shape_of(a2)) - 1: k_b}, "A's columns")
    b2 = fixed_dims(b2, {len(shape_of(b2)) - 2: k_a}, "B's rows")
    y = call("nn.matmul", a2, b2)
    out = shape_of(y)
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return reshape(y, out)


# ---- softmax and its relatives ----

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

@converter("LRN")
def lrn(x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    return call("nn.lrn", x, size=size, alpha=alpha, beta=beta, bias=bias)


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


# ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ----

def _check_labels(x: Expr, target: Expr, weight: Expr | None, ignore_index: int | None, reduction: str) -> None:
    shape = shape_of(x)
    if len(shape) < 2 or x.type.dtype not in ("float32", "float64", "float16"):
        raise ConversionError(f"the input must be a float32, float64 or float16 [N, C, d1...] tensor, got {shape} "
                              f"{x.type.dtype}")
    if reduction not in ("none", "sum", "mean"):
        raise ConversionError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    if target.type.dtype not in ("int32", "int64") or shape_of(target) != shape[:1] + shape[2:]:
        raise ConversionError(f"the target must be an int32 or int64 [N, d1...] = {shape[:1] + shape[2:]} tensor, "
                              f"got {shape_of(target)} {target.type.dtype}")
    if weight is not None and (shape_of(weight) != (shape[1],) or weight.type.dtype != x.type.dtype):
        raise ConversionError(f"the weight must be a [C={shape[1]}] tensor of {x.type.dtype}, got {shape_of(weight)} "
                              f"{weight.type.dtype}")
    if isinstance(target, Constant):  # run-time targets are checked by the runtime (compiler/index_bounds.py)
        labels, c = target.data, shape[1]
        bad = ((labels < -c) | (labels >= c)) & (labels != ignore_index if ignore_index is not None else True)
        if bad.any():
            raise ConversionError(f"target holds {int(labels[bad].flat[0])}, out of range for {c} classes "
                                  f"(ignore_index {ignore_index})")


def _nll(log_prob: Expr, target: Expr, weight: Expr | None, ignore_index: int | None, reduction: str) -> Expr:
    """The loss of log-probabilities [N, C, d1...] at the target classes [N, d1...], as onnx's reference: loss =
    -log_prob[n, target, d...] * weight[target] (0 where target == ignore_index), then summed, or divided by the
    sum of those weights (mean). The class of each label is `take`n from [0, C) (a negative label counts from the
    end, as onnxruntime's GatherElements): a label given at run time is checked against C by the runtime, with
    ignore_index allowed (compiler/index_bounds.py); the class axis is then picked by a one-hot select, so no label
    value can make native code read outside the input."""
    shape, dtype, tdtype = shape_of(log_prob), log_prob.type.dtype, target.type.dtype
    n, c, rest = shape[0], shape[1], shape[2:]
    ignored = None if ignore_index is None else fold("equal", target, const(ignore_index, tdtype))
    safe = target if ignored is None else fold("where", ignored, const(0, tdtype), target)
    classes = Constant(np.arange(c, dtype=tdtype))
    label_class = fold("take", classes, safe, axis=0)
    onehot = fold("equal", reshape(label_class, (n, 1) + rest), reshape(classes, (1, c) + (1,) * len(rest)))
    picked = fold("sum", fold("where", onehot, log_prob, const(0.0, dtype)), axes=(1,), keepdims=False)
    loss = fold("negative", picked)
    gathered = None if weight is None else fold("take", weight, safe, axis=0)
    if ignored is not None:
        gathered = fold("where", ignored, const(0.0, dtype), const(1.0, dtype) if gathered is None else gathered)
    if gathered is not None:
        loss = binary("multiply", gathered, loss)
    if reduction == "none":
        return loss
    total = fold("sum", loss, axes=None, keepdims=False)
    if reduction == "sum":
        return total
    if gathered is None:
        return binary("divide", total, const(float(np.prod(shape_of(target))), dtype))
    return binary("divide", total, fold("sum", gathered, axes=None, keepdims=False))


@converter("NegativeLogLikelihoodLoss", since=12)
def nll_loss(x, target, weight=None, *, ignore_index=None, reduction="mean"):
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    _check_labels(x, target, weight, ignore_index, reduction)
    return _nll(x, target, weight, ignore_index, reduction)


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    """Outputs (loss, log_prob): log_prob = log(softmax(scores) over the class axis 1), as onnx's reference (a log
    of the softmax, not a fused log-softmax); the loss is NegativeLogLikelihoodLoss of it."""
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    _check_labels(scores, labels, weights, ignore_index, reduction)
    log_prob = fold("log", fold("nn.softmax", scores, axis=1))
    return _nll(log_prob, labels, weights, ignore_index, reduction), log_prob

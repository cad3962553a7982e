"""Converters of the ops with a training mode: Dropout (with its mask output) and BatchNormalization (with the
batch statistics it normalizes by and the running statistics it outputs).

Training mode must be known when the model is imported: a constant, or a graph input whose value the session
specializes on (compiler/specialize.py). A random choice is a constant of the compiled model: training-mode
Dropout takes its mask from the node's `seed` as onnx's reference does (numpy's RandomState(seed) drawing uniform
numbers over the input's shape, a function of the seed and the shape only), so it is drawn once, at import;
without a seed every run would need new draws, which is refused.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, call
from relayish.types import numpy_dtype

from .onnx_ops import _shape, converter
from .onnx_ops_tensor import fold
from .onnx_values import ConversionError, scalar_input


def _const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, numpy_dtype(dtype)))


def _ones(x: Expr, dtype: str) -> Expr:
    """A tensor of ones of x's shape (Dropout's mask in inference: nothing dropped)."""
    return call("broadcast_to", _const(1, dtype), shape=_shape(x))


@converter("Dropout")
def dropout_v7(x, *, ratio=0.5, is_test=0):
    """Inference: x. The mask of opsets 7 to 11 is not taken (refused if used): no training mode defines it, and
    onnxruntime's (all false) and onnx's reference's (all true) differ."""
    return x


@converter("Dropout", since=12)
def dropout_v12(x, ratio=None, training_mode=None, *, seed=None):
    """x and a mask of ones, unless training_mode is true: then onnx's reference's mask, `uniform draws >= ratio`,
    and x * mask / (1 - ratio). The draws are a constant; ratio may be a run-time input."""
    if training_mode is None or not scalar_input(training_mode, "training_mode"):
        return x, _ones(x, "bool")
    if seed is None:
        raise ConversionError("training_mode=True without a seed is not supported: its mask would be new random "
                              "numbers at every run (give the node a seed: the mask is then drawn at import)")
    ratio = _const(0.5, x.type.dtype) if ratio is None else ratio
    if ratio.type.shape not in ((), (1,)):
        raise ConversionError(f"ratio must be a scalar, got shape {ratio.type.shape}")
    ratio = call("reshape", ratio, newshape=()) if ratio.type.shape else ratio
    mask = fold("greater_equal", *_draws_against(ratio, int(seed), _shape(x)))
    with np.errstate(divide="ignore"):  # ratio 1: an infinite scale, and NaN outputs, as the reference's
        scale = fold("divide", _const(1.0, ratio.type.dtype), fold("subtract", _const(1.0, ratio.type.dtype), ratio))
    if scale.type.dtype != x.type.dtype:
        scale = fold("cast", scale, dtype=x.type.dtype)
    # (x * mask) * scale, as the reference multiplies: a dropped element is 0 * x (-0 for negative x, NaN for
    # infinite x), and ratio 0 gives x exactly
    return fold("multiply", fold("multiply", x, fold("cast", mask, dtype=x.type.dtype)), scale), mask


def _draws_against(ratio: Expr, seed: int, shape: tuple) -> tuple[Expr, Expr]:
    """(the reference's uniform draws, ratio) in one dtype in which `draws >= ratio` is the reference's float64
    comparison: float64 for a float64 ratio; else float32 with each draw rounded down (toward -inf), for which
    `draw32 >= r` holds exactly when `draw >= r` does, r being representable in float32."""
    draws = np.random.RandomState(seed).uniform(0.0, 1.0, shape)
    if ratio.type.dtype == "float64":
        return _const(draws, "float64"), ratio
    down = draws.astype(np.float32)
    down = np.where(down.astype(np.float64) > draws, np.nextafter(down, np.float32(-np.inf)), down)
    ratio32 = ratio if ratio.type.dtype == "float32" else fold("cast", ratio, dtype="float32")
    return _const(down, "float32"), ratio32


@converter("BatchNormalization")
def batch_norm(x, scale, b, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1):
    """Inference: normalized by the given mean and var (the training outputs of opsets 7 and 9 are refused by the
    importer if used)."""
    if not spatial:
        raise ConversionError("spatial=0 (per-activation statistics) is not supported")
    return call("nn.batch_norm", x, scale, b, mean, var, axis=1, epsilon=epsilon)


@converter("BatchNormalization", since=14)
def batch_norm_v14(x, scale, b, mean, var, *, epsilon=1e-5, momentum=0.9, training_mode=0):
    """training_mode=1: normalized by the batch's statistics (mean and population variance over every axis but the
    channels'), and the running statistics `input * momentum + batch * (1 - momentum)` as outputs 1 and 2."""
    if training_mode not in (0, 1):
        raise ConversionError(f"training_mode must be 0 or 1, got {training_mode}")
    if not training_mode:
        return call("nn.batch_norm", x, scale, b, mean, var, axis=1, epsilon=epsilon)
    shape = _shape(x)
    if len(shape) < 2:
        raise ConversionError(f"X must have a channel axis (rank >= 2), got shape {shape}")
    axes = (0,) + tuple(range(2, len(shape)))
    dtype = x.type.dtype
    batch_mean = call("mean", x, axes=axes, keepdims=False)
    centered = call("subtract", x, call("reshape", batch_mean, newshape=(shape[1],) + (1,) * (len(shape) - 2)))
    batch_var = call("mean", call("multiply", centered, centered), axes=axes, keepdims=False)
    y = call("nn.batch_norm", x, scale, b, batch_mean, batch_var, axis=1, epsilon=epsilon)

    def running(given, batch):
        return call("add", call("multiply", given, _const(momentum, dtype)),
                    call("multiply", batch, _const(1.0 - momentum, dtype)))
    return y, running(mean, batch_mean), running(var, batch_var)

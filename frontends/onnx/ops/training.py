"""Converters of the ops with a training mode: Dropout (with its mask output) and BatchNormalization (with the
batch statistics it normalizes by and the running statistics it outputs); and the optimizers of the
ai.onnx.preview.training domain (Momentum, Adagrad, Adam: one update step).

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

from ..builders import fold, shape_of
from ..registry import converter
from ..values import ConversionError, scalar_input


def _const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, numpy_dtype(dtype)))


def _ones(x: Expr, dtype: str) -> Expr:
    """A tensor of ones of x's shape (Dropout's mask in inference: nothing dropped)."""
    return call("broadcast_to", _const(1, dtype), shape=shape_of(x))


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
    mask = fold("greater_equal", *_draws_against(ratio, int(seed), shape_of(x)))
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
    shape = shape_of(x)
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


# ---- optimizers (ai.onnx.preview.training 1): one update of n tensors, as onnx's reference applies it ----

def _groups(inputs: tuple, per: int, op: str) -> list[tuple]:
    """The variadic inputs (X1..Xn, G1..Gn, then the n states of each kind) as n tuples (X, G, states...)."""
    if not inputs or len(inputs) % per:
        raise ConversionError(f"{op} takes {per} groups of n tensors after R and T, got {len(inputs)} tensors")
    n = len(inputs) // per
    groups = [tuple(inputs[k * n + i] for k in range(per)) for i in range(n)]
    for group in groups:
        if len({shape_of(t) for t in group}) != 1 or len({t.type.dtype for t in group}) != 1 or \
                group[0].type.dtype not in ("float32", "float64"):
            raise ConversionError(f"{op}: each tensor, its gradient and its states must have one shape and one "
                                  f"float or double dtype")
    return groups


def _step_scalars(r: Expr, t: Expr, op: str) -> tuple[Expr, Expr]:
    """R as a float64 scalar and T (the step count, int64) as a float64 scalar."""
    if r.type.shape not in ((), (1,)) or t.type.shape not in ((), (1,)) or t.type.dtype != "int64" or \
            r.type.dtype not in ("float32", "float64"):
        raise ConversionError(f"{op}: R must be a float scalar and T an int64 scalar, got {r.type.dtype} "
                              f"{r.type.shape} and {t.type.dtype} {t.type.shape}")
    return (fold("cast", call("reshape", e, newshape=()) if e.type.shape else e, dtype="float64") for e in (r, t))


def _scaled(e: Expr, factor: Expr) -> Expr:
    """e times a float64 scalar factor, rounded to e's dtype first."""
    return fold("multiply", e, fold("cast", factor, dtype=e.type.dtype) if e.type.dtype != "float64" else factor)


def _f(value: float, like: Expr) -> Constant:
    return _const(value, like.type.dtype)


@converter("Momentum", since=1, domain="ai.onnx.preview.training")
def momentum(r, t, *inputs, alpha, beta, mode, norm_coefficient):
    """v' = alpha v + (beta, or 1 at step 0) (norm_coefficient x + g); standard: x' = x - r v'; nesterov:
    x' = x - r (g_regularized + alpha v'). Outputs X'1..n, V'1..n."""
    if mode not in ("standard", "nesterov"):
        raise ConversionError(f"mode must be 'standard' or 'nesterov', got {mode!r}")
    rate, step = _step_scalars(r, t, "Momentum")
    first = fold("greater", step, _const(0.0, "float64"))
    xs, vs = [], []
    for x, g, v in _groups(inputs, 3, "Momentum"):
        regularized = fold("add", fold("multiply", _f(norm_coefficient, x), x), g)
        gain = fold("where", first, _f(beta, x), _f(1.0, x))
        v_new = fold("add", fold("multiply", _f(alpha, x), v), fold("multiply", gain, regularized))
        change = v_new if mode == "standard" else fold("add", regularized, fold("multiply", _f(alpha, x), v_new))
        xs.append(fold("subtract", x, _scaled(change, rate)))
        vs.append(v_new)
    return tuple(xs + vs)


@converter("Adagrad", since=1, domain="ai.onnx.preview.training")
def adagrad(r, t, *inputs, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    """r' = r / (1 + t decay_factor); h' = h + g_r^2 with g_r = norm_coefficient x + g; x' = x - r' g_r /
    (sqrt(h') + epsilon). Outputs X'1..n, H'1..n."""
    rate, step = _step_scalars(r, t, "Adagrad")
    rate = fold("divide", rate, fold("add", _const(1.0, "float64"), fold("multiply", step,
                                                                         _const(decay_factor, "float64"))))
    xs, hs = [], []
    for x, g, h in _groups(inputs, 3, "Adagrad"):
        regularized = fold("add", fold("multiply", _f(norm_coefficient, x), x), g)
        h_new = fold("add", h, fold("multiply", regularized, regularized))
        root = fold("add", fold("sqrt", h_new), _f(epsilon, x))
        xs.append(fold("subtract", x, _scaled(fold("divide", regularized, root), rate)))
        hs.append(h_new)
    return tuple(xs + hs)


@converter("Adam", since=1, domain="ai.onnx.preview.training")
def adam(r, t, *inputs, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0, norm_coefficient_post=0.0):
    """v' = alpha v + (1 - alpha) g_r, h' = beta h + (1 - beta) g_r^2, the rate bias-corrected by
    sqrt(1 - beta^t) / (1 - alpha^t) from step 1 on; x' = (1 - norm_coefficient_post) (x - r' v' /
    (sqrt(h') + epsilon)). Outputs X'1..n, V'1..n, H'1..n."""
    rate, step = _step_scalars(r, t, "Adam")

    def power(base: float) -> Expr:
        return fold("power", _const(base, "float64"), step)
    one = _const(1.0, "float64")
    corrected = fold("divide", fold("multiply", rate, fold("sqrt", fold("subtract", one, power(beta)))),
                     fold("subtract", one, power(alpha)))
    rate = fold("where", fold("greater", step, _const(0.0, "float64")), corrected, rate)
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(inputs, 4, "Adam"):
        regularized = fold("add", fold("multiply", _f(norm_coefficient, x), x), g)
        v_new = fold("add", fold("multiply", _f(alpha, x), v), fold("multiply", _f(1.0 - alpha, x), regularized))
        h_new = fold("add", fold("multiply", _f(beta, x), h),
                     fold("multiply", _f(1.0 - beta, x), fold("multiply", regularized, regularized)))
        root = fold("add", fold("sqrt", h_new), _f(epsilon, x))
        x_new = fold("subtract", x, _scaled(fold("divide", v_new, root), rate))
        xs.append(fold("multiply", _f(1.0 - norm_coefficient_post, x), x_new))
        vs.append(v_new)
        hs.append(h_new)
    return tuple(xs + vs + hs)

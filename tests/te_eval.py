"""A numpy evaluator of relayish.te stage DAGs, for tests only (the compiler lowers te; this just runs it).

Each compute stage is evaluated vectorized: every axis (spatial, then reduce) becomes an open index grid, the
body is evaluated to an array over all of them, and reductions combine the trailing reduce dimensions.

It is deliberately strict: a tensor read with any index out of bounds raises, even in the arm of a select that
is not taken, because compute definitions promise in-bounds reads so that codegen may evaluate both arms.
Integer `//`, `/` and `%` floor, like the constant folder in relayish.te.
"""
from __future__ import annotations

import numpy as np

from relayish import te
from relayish.intrinsics import get_intrinsic
from relayish.types import numpy_dtype


def evaluate_te(outputs, feeds: dict) -> list[np.ndarray]:
    """Values of `outputs` (a te.Tensor or a list) given arrays for their placeholders (feeds: Tensor -> array)."""
    outputs = [outputs] if isinstance(outputs, te.Tensor) else list(outputs)
    values: dict[int, np.ndarray] = {}
    for t in te.stage_dag(outputs):
        if isinstance(t.op, te.PlaceholderOp):
            if t not in feeds:
                raise KeyError(f"no value fed for placeholder {t.name}")
            arr = np.asarray(feeds[t])
            if arr.shape != t.shape:
                raise ValueError(f"placeholder {t.name} has shape {t.shape}, fed {arr.shape}")
            values[id(t)] = arr.astype(t.dtype, copy=False)
        else:
            values[id(t)] = _eval_stage(t, values)
    return [values[id(t)] for t in outputs]


def _eval_stage(t: te.Tensor, values: dict) -> np.ndarray:
    op = t.op
    axes = list(op.axes) + list(op.reduce_axes)
    rank = len(axes)
    env = {}
    for d, iv in enumerate(axes):
        shape = [1] * rank
        shape[d] = iv.extent
        env[iv.var] = np.arange(iv.extent, dtype=np.int64).reshape(shape)
    body = op.body.body if isinstance(op.body, te.Reduce) else op.body
    full_shape = tuple(iv.extent for iv in axes)
    value = np.broadcast_to(_eval(body, env, values), full_shape)
    if isinstance(op.body, te.Reduce):
        red = tuple(range(len(op.axes), rank))
        value = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op.body.combiner](value, axis=red)
    return np.asarray(value).astype(op.dtype)


def _eval(e, env, values):
    if isinstance(e, te.IntImm):
        return np.bool_(e.value) if e.dtype == "bool" else np.int64(e.value)
    if isinstance(e, te.FloatImm):
        return np.dtype(e.dtype).type(e.value)
    if isinstance(e, te.Var):
        if e not in env:
            raise KeyError(f"unbound variable {e.name}")
        return env[e]
    if isinstance(e, te.BinOp):
        return _binop(e.op, _eval(e.a, env, values), _eval(e.b, env, values), e.dtype)
    if isinstance(e, te.Cmp):
        a, b = _eval(e.a, env, values), _eval(e.b, env, values)
        return {"<": np.less, "<=": np.less_equal, "==": np.equal, "!=": np.not_equal}[e.op](a, b)
    if isinstance(e, te.Logic):
        args = [_eval(a, env, values) for a in e.args]
        if e.op == "not":
            return np.logical_not(args[0])
        combine = np.logical_and if e.op == "and" else np.logical_or
        out = args[0]
        for a in args[1:]:
            out = combine(out, a)
        return out
    if isinstance(e, te.Select):
        return np.where(_eval(e.cond, env, values), _eval(e.true_value, env, values),
                        _eval(e.false_value, env, values))
    if isinstance(e, te.Cast):
        return np.asarray(_eval(e.value, env, values)).astype(e.dtype)
    if isinstance(e, te.BitCast):
        return reinterpret(_eval(e.value, env, values), e.value.dtype, e.dtype)
    if isinstance(e, te.Call):
        args = [_eval(a, env, values) for a in e.args]
        return np.asarray(get_intrinsic(e.name).numpy(*args)).astype(e.dtype)
    if isinstance(e, te.TensorRead):
        return _read(e, env, values)
    raise TypeError(f"cannot evaluate {type(e).__name__} {e}")


def reinterpret(value, src: str, dst: str):
    """The bits of value (as a src array) read as dst (te.BitCast); a byte read as bool is value != 0."""
    out = np.ascontiguousarray(np.asarray(value).astype(numpy_dtype(src))).view(numpy_dtype(dst))
    return out != 0 if dst == "bool" else out


def _binop(op, a, b, dtype):
    integer = not dtype.startswith("float")
    if op == "+": return a + b
    if op == "-": return a - b
    if op == "*": return a * b
    if op == "/": return np.floor_divide(a, b) if integer else np.true_divide(a, b)
    if op == "//": return np.floor_divide(a, b)
    if op == "%": return np.mod(a, b)
    if op == "min": return np.minimum(a, b)
    if op == "max": return np.maximum(a, b)
    if op in te.BITWISE_OPS: return bitwise(op, a, b, dtype)
    raise ValueError(f"unknown binary op {op}")


def bitwise(op, a, b, dtype):
    """a & | ^ << >> b on integers of `dtype`; a shift by an amount outside [0, bits) leaves 0, or -1 for >> of a
    negative signed value (te.shift_left / shift_right)."""
    a, b = np.asarray(a, dtype), np.asarray(b, dtype)
    if op in ("&", "|", "^"):
        return {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op](a, b)
    bits, unsigned = a.dtype.itemsize * 8, np.dtype(f"u{a.dtype.itemsize}")
    inside = (b >= 0) & (b < bits)
    amount = np.where(inside, b, 0).astype(unsigned)
    if op == "<<":
        return np.where(inside, np.left_shift(a.view(unsigned), amount).view(a.dtype), 0).astype(a.dtype)
    return np.where(inside, np.right_shift(a, amount.astype(a.dtype)), np.where(a < 0, -1, 0)).astype(a.dtype)


def _read(e: te.TensorRead, env, values):
    arr = values[id(e.tensor)]
    idx = []
    for d, (index, extent) in enumerate(zip(e.indices, e.tensor.shape)):
        i = np.asarray(_eval(index, env, values))
        if i.size and (i.min() < 0 or i.max() >= extent):
            raise IndexError(f"read of {e.tensor.name} dim {d} (extent {extent}) at indices "
                             f"[{i.min()}, {i.max()}]: {te.expr_str(index)}")
        idx.append(i)
    return arr[tuple(idx)] if idx else arr[()]

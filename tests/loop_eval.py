"""A slow, obviously-correct Python interpreter of the loop IR, for testing lowering without codegen."""
from __future__ import annotations

import numpy as np

from compiler import loopir as L
from relayish import te
from relayish.intrinsics import INTEGER_INTRINSICS, INTRINSICS
from te_eval import bitwise, reinterpret


def run_primfunc(func: L.PrimFunc, arrays: list[np.ndarray]) -> None:
    """Execute func on flat views of arrays (one per param, modified in place)."""
    bufs = {id(b): a.reshape(-1) for b, a in zip(func.params, arrays)}
    _exec(func.body, {}, bufs)


def _exec(s, env, bufs):
    if isinstance(s, L.Seq):
        for x in s.stmts:
            _exec(x, env, bufs)
    elif isinstance(s, L.For):
        start, extent = _ev(s.start, env, bufs), _ev(s.extent, env, bufs)
        for i in range(start, start + extent):
            env[s.var] = i
            _exec(s.body, env, bufs)
        env.pop(s.var, None)
    elif isinstance(s, L.Store):
        idx = _ev(s.index, env, bufs)
        buf = bufs[id(s.buffer)]
        if not 0 <= idx < buf.size:
            raise IndexError(f"store {s.buffer.name}[{idx}] out of bounds {buf.size}")
        buf[idx] = _ev(s.value, env, bufs)
    elif isinstance(s, L.IfThenElse):
        if _ev(s.cond, env, bufs):
            _exec(s.then_case, env, bufs)
        elif s.else_case is not None:
            _exec(s.else_case, env, bufs)
    elif isinstance(s, L.LetStmt):
        env[s.var] = _ev(s.value, env, bufs)
        _exec(s.body, env, bufs)
    elif isinstance(s, L.Allocate):
        bufs[id(s.buffer)] = np.full(s.buffer.size, np.nan, dtype=s.buffer.dtype)
        _exec(s.body, env, bufs)
    else:
        raise TypeError(s)


def _ev(e, env, bufs):
    if isinstance(e, (te.IntImm,)):
        return e.value
    if isinstance(e, te.FloatImm):
        return np.float32(e.value)
    if isinstance(e, te.Var):
        return env[e]
    if isinstance(e, L.Load):
        idx = _ev(e.index, env, bufs)
        buf = bufs[id(e.buffer)]
        if not 0 <= idx < buf.size:
            raise IndexError(f"load {e.buffer.name}[{idx}] out of bounds {buf.size}")
        return buf[idx]
    if isinstance(e, te.BinOp):
        a, b = _ev(e.a, env, bufs), _ev(e.b, env, bufs)
        if e.op == "+": return a + b
        if e.op == "-": return a - b
        if e.op == "*": return a * b
        if e.op == "/": return a / b if not isinstance(a, int) else a // b
        if e.op == "//": return a // b
        if e.op == "%": return a % b
        if e.op == "min": return min(a, b)
        if e.op == "max": return max(a, b)
        if e.op in te.BITWISE_OPS: return bitwise(e.op, a, b, e.dtype)[()]
    if isinstance(e, te.Cmp):
        a, b = _ev(e.a, env, bufs), _ev(e.b, env, bufs)
        return {"<": a < b, "<=": a <= b, "==": a == b, "!=": a != b}[e.op]
    if isinstance(e, te.Logic):
        vals = [_ev(x, env, bufs) for x in e.args]
        return all(vals) if e.op == "and" else any(vals) if e.op == "or" else not vals[0]
    if isinstance(e, te.Select):
        return _ev(e.true_value, env, bufs) if _ev(e.cond, env, bufs) else _ev(e.false_value, env, bufs)
    if isinstance(e, te.Cast):
        v = _ev(e.value, env, bufs)
        return np.dtype(e.dtype).type(v)
    if isinstance(e, te.BitCast):
        return reinterpret(_ev(e.value, env, bufs), e.value.dtype, e.dtype)[()]
    if isinstance(e, te.Call) and e.name in INTEGER_INTRINSICS:
        return np.int32(INTEGER_INTRINSICS[e.name].numpy(*[_ev(a, env, bufs) for a in e.args]))
    if isinstance(e, te.Call):
        args = [np.float64(_ev(a, env, bufs)) for a in e.args]
        return np.float32(INTRINSICS[e.name].numpy(*args))
    raise TypeError(e)

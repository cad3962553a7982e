"""Kernels written as loop IR by hand, for ops whose work is one pass in order that no te compute states: the
indices of the nonzero elements (relayish/ops/data_sized.py), a compaction whose output position is the count of
nonzero elements before.

    func = sequential_kernel(primitive_function, "nonzero_0")   # or None: not such an op

A task of such an op (compiler/task.py: it has no te stages) is lowered here, not scheduled: one serial loop over
the input, its counter in a local buffer. Only the generic tier makes these ops (compiler/generic.py).
"""
from __future__ import annotations

import math

from relayish import te
from relayish.expr import Call

from .loopir import Allocate, Buffer, For, IfThenElse, Load, PrimFunc, Seq, Store
from .lower import prim_func

SEQUENTIAL_OPS = ("nonzero", "slice_to_count")


def sequential_op(func) -> str | None:
    """The op of a primitive function that is one sequential op over its parameters, else None."""
    body = func.body
    if isinstance(body, Call) and body.op in SEQUENTIAL_OPS and len(body.args) == len(func.params) and \
            all(a is p for a, p in zip(body.args, func.params)):
        return body.op
    return None


def sequential_kernel(func, name: str) -> PrimFunc | None:
    """The loop IR kernel of a sequential op's primitive function (None if it is not one)."""
    op = sequential_op(func)
    if op == "nonzero":
        return _nonzero(func, name)
    if op == "slice_to_count":
        return _slice_to_count(func, name)
    return None


def _nonzero(func, name: str) -> PrimFunc:
    """out[r, j] = the r-th coordinate of the j-th nonzero element of x in row-major order: x walked in order,
    each nonzero element written at column `found` (a local counter), then counted. A count larger than the
    output's columns n (it cannot be: n is the count's value) writes nothing past them."""
    x_param, count_param = func.params
    x = Buffer("x", x_param.type.shape, x_param.type.dtype)
    count = Buffer("count", (), "int64")
    out = Buffer("out", func.body.type.shape, "int64")
    n = te.as_expr(te.dim(out.shape[1]))
    shape = tuple(te.as_expr(te.dim(d)) for d in x.shape) or (te.IntImm(1),)
    found = Buffer("found", (1,), "int32", "local")
    i = te.Var("i")
    coords, stride = [], te.IntImm(1)
    for d in reversed(shape):
        coords.append((i // stride) % d)
        stride = stride * d
    coords.reverse()
    at = Load(found, te.IntImm(0))
    element = Load(x, i)
    nonzero = te.Cmp("!=", te.cast("int32", element) if x.dtype == "bool" else element,
                     te.const(0, "int32" if x.dtype == "bool" else x.dtype))
    write = Seq([Store(out, te.IntImm(r) * n + at, te.cast("int64", c)) for r, c in enumerate(coords)])
    step = IfThenElse(nonzero, Seq([IfThenElse(te.Cmp("<", at, n), write), Store(found, te.IntImm(0), at + 1)]))
    total = math.prod(shape[1:], start=shape[0])
    body = Allocate(found, Seq([Store(found, te.IntImm(0), te.IntImm(0)), For(i, te.IntImm(0), total, "serial",
                                                                                step)]))
    return prim_func(name, [x, count], [out], [], body)


def _slice_to_count(func, name: str) -> PrimFunc:
    """out = x's first k elements along axis (k: the output's dim there, checked <= x's by the caller): one copy
    loop nest over the dims before the axis, k, and the dims after it."""
    x_param, k_param = func.params
    axis = func.body.attrs["axis"]
    x = Buffer("x", x_param.type.shape, x_param.type.dtype)
    k = Buffer("k", k_param.type.shape, "int64")
    out = Buffer("out", func.body.type.shape, x.dtype)
    dims = [te.as_expr(te.dim(d)) for d in x.shape]
    outer = math.prod(dims[:axis], start=te.IntImm(1))
    inner = math.prod(dims[axis + 1:], start=te.IntImm(1))
    n, count = dims[axis], te.as_expr(te.dim(out.shape[axis]))
    o, j, i = te.Var("o"), te.Var("j"), te.Var("i")
    copy = Store(out, (o * count + j) * inner + i, Load(x, (o * n + j) * inner + i))
    body = For(o, te.IntImm(0), outer, "serial", For(j, te.IntImm(0), count, "serial",
                                                       For(i, te.IntImm(0), inner, "serial", copy)))
    return prim_func(name, [x, k], [out], [], body)

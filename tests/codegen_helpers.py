"""Small builders shared by the codegen tests: loops, buffers and sequences of loop IR, seeded random arrays."""
from __future__ import annotations

import numpy as np

from compiler import loopir as L
from relayish import te


def loop(var, extent, body, kind="serial", start=0):
    return L.For(var, te.as_expr(start), te.as_expr(extent), kind, body)


def buf(name, n, dtype="float32", scope="global"):
    return L.Buffer(name, (n,), dtype, scope)


def seq(*stmts):
    return L.Seq(list(stmts))


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)

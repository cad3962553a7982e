"""Expressions are DAGs: a node may have several parents (an antialiased cubic Resize uses each tap weight in
every product of the taps of the other axis, normalized by their sum). Walking, substituting, lowering and
emitting must each cost the DAG's size: expanded into its tree, that Resize took 95 s to compile (~950,000 nodes
emitted) instead of 1 s. The chains below have 2**depth leaves as trees and depth + 2 nodes as DAGs, so a pass
that expands them never ends. (Structural equality and hashing of expressions still follow the tree: compare
large expressions by identity.)"""
from __future__ import annotations

import ctypes

import numpy as np

from compiler import loopir as L
from compiler.codegen import build_library, emit_llvm_ir
from relayish import te
from runtime.aligned import as_aligned

from codegen_helpers import buf, loop

DEPTH = 60


def doubled(x, depth=DEPTH):
    """x, then e + e for `depth` times: x * 2**depth, one new node per step."""
    e = x
    for _ in range(depth):
        e = e + e
    return e


def test_walk_and_substitute_visit_a_shared_node_once():
    v, w = te.Var("v"), te.Var("w")
    e = doubled(te.cast("float32", v))
    assert len(list(te.walk(e))) == DEPTH + 2  # the adds, the cast, the variable
    out = te.substitute_vars(e, {v: w})
    assert out.a is out.b  # the sharing survives the rebuild
    assert len(list(te.walk(out))) == DEPTH + 2
    nodes = {id(n) for n in te.walk(out)}  # (by identity: a structural hash would expand the tree)
    assert id(w) in nodes and id(v) not in nodes


def test_codegen_emits_a_shared_node_once_and_computes_it(tmp_path):
    n = 16
    A, C = buf("A", n), buf("C", n)
    i = te.Var("i")
    f = L.PrimFunc("dag", [A, C], loop(i, n, L.Store(C, i, doubled(L.Load(A, i), 20))))
    text = emit_llvm_ir([f])
    assert text.count("fadd") == 20, text.count("fadd")
    dll = ctypes.CDLL(build_library([f], None, str(tmp_path / "dag.so")))
    a = as_aligned(np.linspace(-1, 1, n, dtype=np.float32))
    c = as_aligned(np.zeros(n, np.float32))
    dll.dag(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(c.ctypes.data))
    np.testing.assert_array_equal(c, a * np.float32(2 ** 20))

"""Loops whose iterations are independent: the proof (analysis.carried_dependence), checked against brute force
over every pair of iterations, and what codegen tells LLVM about such loops (llvm.loop.parallel_accesses, every
access in an access group), with the built kernels' results."""
from __future__ import annotations

import itertools
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from compiler import loopir as L
from compiler.codegen import build_library, emit_llvm_ir
from compiler.codegen.analysis import carried_dependence
from relayish import te

from codegen_helpers import buf, loop, rand, seq
from codegen_kernels import Lib, k_closure, k_matmul, k_rowsum, k_unrolled_tile


def _tile_loop(c, extent, write, reads, inner):
    """for v in range(extent): for u in range(inner) unrolled: a[c*v + write(u)] = 1 + sum(a[r(v, u)] for r in
    reads), write (coef of u, const) and each read (coef of v, coef of u, const)."""
    a, v, u = buf("a", 4096), te.Var("v"), te.Var("u")
    at = lambda cv, cu, k: v * cv + u * cu + (k + 1024)  # (+1024: every index of the sweep stays positive)
    value = te.FloatImm(1.0)
    for read in reads:
        value = value + L.Load(a, at(*read))
    return loop(v, extent, loop(u, inner, L.Store(a, at(c, *write), value), "unroll"))


def _iterations_conflict(c, extent, write, reads, inner) -> bool:
    """Brute force: does an element written in one iteration of v get read or written in another?"""
    def elements(v, accesses):
        return {cv * v + cu * u + k for cv, cu, k in accesses for u in range(inner)}
    writes = [elements(v, [(c, *write)]) for v in range(extent)]
    touched = [elements(v, [(c, *write)] + reads) for v in range(extent)]
    return any(writes[v1] & touched[v2] for v1 in range(extent) for v2 in range(extent) if v1 != v2)


def test_the_proof_never_claims_a_loop_whose_iterations_conflict():
    """Every tile of strides and offsets in a small range: where carried_dependence finds no dependence, no
    element one iteration writes is touched by another (and it does prove some, or the test would be vacuous)."""
    proved = refused = 0
    for c, cu, k_w, k_r, cu_r, cv_r, inner in itertools.product((1, 2, 4, 8, -4), (0, 1, 2), (0, 3), (0, 1, -1, 5),
                                                               (0, 1, 2), (0, 1, 2), (1, 3, 4)):
        case = (c, 5, (cu, k_w), [(c * cv_r, cu_r, k_r)], inner)
        if carried_dependence(_tile_loop(*case)) is None:
            proved += 1
            assert not _iterations_conflict(*case), case
        else:
            refused += _iterations_conflict(*case)
    assert proved > 20 and refused > 20


def test_dependences_it_refuses():
    a, t = buf("a", 256), buf("t", 4, scope="local")
    v, u, w = te.Var("v"), te.Var("u"), te.Var("w")
    reduce = loop(v, 8, L.Store(a, 0, L.Load(a, 0) + L.Load(a, v + 1)))
    assert "independent of v" in carried_dependence(reduce)
    shifted = loop(v, 8, L.Store(a, v, L.Load(a, v + 1)))
    assert "span 2 elements" in carried_dependence(shifted)
    scratch = loop(v, 8, L.Allocate(t, seq(L.Store(t, 0, L.Load(a, v)), L.Store(a, v + 64, L.Load(t, 0)))))
    assert "buffer t is written at an index independent of v" in carried_dependence(scratch)
    inner_parallel = loop(v, 8, loop(u, 4, L.Store(a, v * 4 + u, 1.0), "parallel"))
    assert "parallel loop" in carried_dependence(inner_parallel)
    let = loop(v, 8, L.LetStmt(w, v * 2, L.Store(a, w, 1.0)))
    assert "let-bound" in carried_dependence(let)
    gathered = loop(v, 8, L.Store(a, L.Load(buf("idx", 8, "int32"), v), 1.0))
    assert "reads memory" in carried_dependence(gathered)
    outer = loop(v, 8, L.Store(a, w * 8 + v, L.Load(a, v)))  # w: an enclosing loop's (another row of a)
    assert "move differently" in carried_dependence(outer)
    halves = loop(v, 8, L.Store(a, v // 2, 1.0))
    assert "not affine in v" in carried_dependence(halves)
    ragged = loop(v, 8, loop(u, v, L.Store(a, v * 16 + u, 1.0)))
    assert "not constant" in carried_dependence(ragged)


def test_independent_loops_it_proves():
    a, b = buf("a", 256), buf("b", 256)
    v, u, j = te.Var("v"), te.Var("u"), te.Var("j")
    assert carried_dependence(loop(v, 8, L.Store(a, v, L.Load(b, v + 1) + L.Load(b, 0)))) is None
    # an accumulator per iteration, updated over an inner (rolled) reduction loop: a[v] += b[16 v + j]
    acc = loop(v, 8, loop(j, 16, L.Store(a, v, L.Load(a, v) + L.Load(b, v * 16 + j))))
    assert carried_dependence(acc) is None
    # a register tile: 4 vectors of 8 lanes per iteration, iterations 32 elements apart
    tile = loop(v, 8, loop(u, 4, loop(j, 8, L.Store(a, v * 32 + u * 8 + j, L.Load(a, v * 32 + u * 8 + j) * 2.0),
                                      "vectorize"), "unroll"))
    assert carried_dependence(tile) is None


def _loop_ids(ir_text: str) -> dict:
    """{loop ID metadata number: its parallel access group's number} of an LLVM module's text."""
    groups = dict(re.findall(r'^!(\d+) = !\{ !"llvm\.loop\.parallel_accesses", !(\d+) \}', ir_text, re.M))
    return {loop_id: groups[ref] for loop_id, ref in
            re.findall(r"^!(\d+) = distinct !\{ !\1, !(\d+) \}", ir_text, re.M) if ref in groups}


def _function(ir_text: str, name: str) -> str:
    return ir_text.split(f'define void @"{name}"')[1].split("\ndefine ")[0]


def test_codegen_marks_independent_loops_parallel_and_groups_their_accesses():
    text = emit_llvm_ir([k_unrolled_tile(), k_rowsum(), k_matmul()])
    loop_ids = _loop_ids(text)
    tile = _function(text, "unrolled_tile")  # for i: C[16i + 2u + 1] = A[...]: independent iterations
    back_edges = re.findall(r"br label %\"i\.head\", !llvm\.loop !(\d+)", tile)
    assert len(back_edges) == 1 and back_edges[0] in loop_ids
    group = loop_ids[back_edges[0]]
    accesses = [ln for ln in tile.splitlines() if re.match(r"\s+(%\S+ = load |store )", ln)]
    assert accesses and all(ln.endswith(f"!llvm.access.group !{group}") for ln in accesses)
    # row sums: the vectorize loop falls back to a serial reduction into acc[0], which stays unmarked; the
    # parallel row loop's chunk loop reuses acc each row (allocated once per chunk): unmarked too
    rowsum = text.split('define internal void @"rowsum.par1.chunk"')[1].split("\ndefine ")[0]
    assert "!llvm.loop" not in rowsum and "access.group" not in rowsum
    # matmul: the k loop updates one accumulator tile (a reduction), jo's iterations write disjoint tiles of C
    # but reuse acc: neither is marked
    matmul = text.split('define internal void @"matmul_64x64x64.par1.chunk"')[1].split("\ndefine ")[0]
    assert "parallel_accesses" not in matmul and "llvm.loop" not in matmul
    # outlined parallel bodies are not inlined into their task functions (each would be optimized twice)
    assert re.search(r'define internal void @"rowsum\.par1\.chunk"\(.*\) [a-z ]*noinline', text)


def test_annotated_modules_verify_and_compute_the_same(tmp_path):
    text = emit_llvm_ir([k_unrolled_tile(), k_closure()])
    llvm.parse_assembly(text).verify()
    lib = Lib(build_library([k_unrolled_tile(), k_closure()], None, str(tmp_path / "k.so")))
    a = rand(64, seed=3)
    c = lib.call("unrolled_tile", a, np.zeros(64, np.float32))[1]
    expected = np.zeros(64, np.float32)
    expected[1::2] = a[1::2] + a[0::2]
    np.testing.assert_allclose(c, expected, rtol=1e-6)


@pytest.mark.parametrize("c", [4, 8])
def test_a_tile_of_accumulators_under_a_spatial_loop_builds_right(tmp_path, c):
    """The shape that made LLVM's loop access analysis slow (a spatial loop over an unrolled tile of
    accumulators, inside a reduction loop): marked parallel, and its sums right."""
    n, red = 8, 5
    A, B, C = buf("A", n * c * red), buf("B", red), buf("C", n * c)
    r, v, u = te.Var("r"), te.Var("v"), te.Var("u")
    update = L.Store(C, v * c + u, L.Load(C, v * c + u) + L.Load(A, (r * n + v) * c + u) * L.Load(B, r))
    func = L.PrimFunc(f"acc_tile{c}", [A, B, C], seq(
        loop(v, n, loop(u, c, L.Store(C, v * c + u, te.FloatImm(0.0)), "unroll")),
        loop(r, red, loop(v, n, loop(u, c, update, "unroll")))))
    assert carried_dependence(func.body.stmts[1].body) is None  # the v loop inside r
    assert "independent of r" in carried_dependence(func.body.stmts[1])
    text = emit_llvm_ir([func])
    assert len(_loop_ids(text)) == 2  # both v loops; r is a reduction
    lib = Lib(build_library([func], None, str(tmp_path / "k.so")))
    a, b = rand(n * c * red, seed=1), rand(red, seed=2)
    out = lib.call(f"acc_tile{c}", a, b, np.full(n * c, 7.0, np.float32))[2]
    np.testing.assert_allclose(out, np.einsum("rx,r->x", a.reshape(red, n * c), b), rtol=1e-5, atol=1e-5)

"""Code generator: hand-written loop IR kernels compiled into one shared library, run via ctypes, vs numpy."""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import pytest

from compiler import loopir as L
from compiler.codegen import (build_library, emit_llvm_ir, host_target, vector_width, vectorize_blocker,
                              vectorize_report)
from relayish import te
from relayish.intrinsics import INTRINSICS
from runtime.aligned import as_aligned

from codegen_helpers import buf, loop, rand, seq

P = ctypes.c_void_p


# ---------------------------------------------------------------------------------------------- kernels

def k_ew(n=1024, name="ew"):
    """C = max(A + B, 0) * 2: parallel outer, vectorized inner (16 lanes)."""
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    o, v = te.Var("o"), te.Var("v")
    idx = o * 16 + v
    body = L.Store(C, idx, te.max_(L.Load(A, idx) + L.Load(B, idx), 0.0) * 2.0)
    return L.PrimFunc(name, [A, B, C], loop(o, n // 16, loop(v, 16, body, "vectorize"), "parallel"))


def k_ew_tail(n=1000):
    """Split with a tail guard whose condition depends on the vector lane: must fall back to a serial loop."""
    A, C = buf("A", n), buf("C", n)
    o, v = te.Var("o"), te.Var("v")
    idx = o * 16 + v
    guarded = L.IfThenElse(idx < n, L.Store(C, idx, L.Load(A, idx) * 3.0 - 1.0))
    return L.PrimFunc("ew_tail", [A, C], loop(o, (n + 15) // 16, loop(v, 16, guarded, "vectorize")))


def k_broadcast(m=6, n=32):
    """C[i, j] = A[i, j] * B[j] + D[i]: B contiguous in j, D broadcast (coefficient 0)."""
    A, B, D, C = buf("A", m * n), buf("B", n), buf("D", m), buf("C", m * n)
    i, j = te.Var("i"), te.Var("j")
    body = L.Store(C, i * n + j, L.Load(A, i * n + j) * L.Load(B, j) + L.Load(D, i))
    return L.PrimFunc("bcast", [A, B, D, C], loop(i, m, loop(j, n, body, "vectorize")))


def k_gather(m=5, n=16):
    """C[i, j] = A[j, i] (stride m) + A[(j * 5) % 17] (non-affine gather): both become lane-wise loads."""
    A, C = buf("A", n * m), buf("C", m * n)
    i, j = te.Var("i"), te.Var("j")
    body = L.Store(C, i * n + j, L.Load(A, j * m + i) + L.Load(A, (j * 5) % 17))
    return L.PrimFunc("gather", [A, C], loop(i, m, loop(j, n, body, "vectorize")))


def k_scatter(n=16):
    """C[(v * 7) % 16] = A[v] (non-affine store) and C2[2v] = -A[v] (strided store)."""
    A, C, C2 = buf("A", n), buf("C", n), buf("C2", 2 * n)
    v = te.Var("v")
    body = seq(L.Store(C, (v * 7) % 16, L.Load(A, v)), L.Store(C2, v * 2, 0.0 - L.Load(A, v)))
    return L.PrimFunc("scatter", [A, C, C2], loop(v, n, body, "vectorize"))


def k_colsum(m=37, n=48):
    """Column sums with a local vector accumulator acc[16]: init / update / write-back, all vectorized."""
    A, C = buf("A", m * n), buf("C", n)
    acc = buf("acc", 16, scope="local")
    jo, j, k = te.Var("jo"), te.Var("j"), te.Var("k")
    col = jo * 16 + j
    body = seq(
        loop(j, 16, L.Store(acc, j, te.FloatImm(0.0)), "vectorize"),
        loop(k, m, loop(j, 16, L.Store(acc, j, L.Load(acc, j) + L.Load(A, k * n + col)), "vectorize")),
        loop(j, 16, L.Store(C, col, L.Load(acc, j)), "vectorize"))
    return L.PrimFunc("colsum", [A, C], loop(jo, n // 16, L.Allocate(acc, body), "parallel"))


def k_rowsum(m=9, n=50):
    """Row sums into a scalar accumulator: the vectorized k loop stores at a lane-independent index (reduction),
    so codegen must fall back to a serial loop. The local buffer lives inside the parallel body."""
    A, C = buf("A", m * n), buf("C", m)
    acc = buf("acc", 1, scope="local")
    i, k = te.Var("i"), te.Var("k")
    body = L.Allocate(acc, seq(
        L.Store(acc, 0, te.FloatImm(0.0)),
        loop(k, n, L.Store(acc, 0, L.Load(acc, 0) + L.Load(A, i * n + k)), "vectorize"),
        L.Store(C, i, L.Load(acc, 0))))
    return L.PrimFunc("rowsum", [A, C], loop(i, m, body, "parallel"))


def k_unroll(n=64):
    """C[4i + u] = A[4i + u] * (u + 1), u unrolled; start of the outer loop is 2 (first 8 elements untouched)."""
    A, C = buf("A", n), buf("C", n)
    i, u = te.Var("i"), te.Var("u")
    body = L.Store(C, i * 4 + u, L.Load(A, i * 4 + u) * te.cast("float32", u + 1))
    return L.PrimFunc("unroll", [A, C], loop(i, n // 4 - 2, loop(u, 4, body, "unroll"), start=2))


def k_parallel_extent(extent):
    """C[i] = i + 0.5 for i in a parallel loop of the given extent (odd, 1 and 0 included)."""
    C = buf("C", max(extent, 1))
    i = te.Var("i")
    return L.PrimFunc(f"par{extent}", [C], loop(i, extent, L.Store(C, i, te.cast("float32", i) + 0.5), "parallel"))


def k_nested_parallel(m=7, n=5):
    """A parallel loop nested in a parallel loop (the inner one runs serially inside each task)."""
    C = buf("C", m * n)
    i, j = te.Var("i"), te.Var("j")
    body = L.Store(C, i * n + j, te.cast("float32", i * 100 + j))
    return L.PrimFunc("nested_par", [C], loop(i, m, loop(j, n, body, "parallel"), "parallel"))


def k_floordiv():
    """for i in [-20, 20): floor div / mod by 3 and -3 (Python semantics), and an if/else on (i // 3) parity."""
    D, M, D2, M2, S = (buf(x, 40) for x in ("D", "M", "D2", "M2", "S"))
    i = te.Var("i")
    at = i + 20
    f = lambda e: te.cast("float32", e)
    parity = L.IfThenElse(te.eq((i // 3) % 2, 0), L.Store(S, at, f(i)), L.Store(S, at, f(0 - i)))
    body = seq(L.Store(D, at, f(i // 3)), L.Store(M, at, f(i % 3)), L.Store(D2, at, f(i // -3)),
               L.Store(M2, at, f(i % -3)), parity)
    return L.PrimFunc("floordiv", [D, M, D2, M2, S], loop(i, 40, body, start=-20))


def k_vector_int():
    """Vectorized int math: floor div/mod of a lane vector with negative values, into an int32 buffer."""
    C = buf("C", 32, "int32")
    v = te.Var("v")
    x = v - 16
    return L.PrimFunc("vec_int", [C], loop(v, 32, L.Store(C, v, (x // 5) * 100 + x % 5), "vectorize"))


def k_select_logic(n=64):
    """Select on and/or/not of comparisons; NaN-aware min/max; float -> int cast into an int32 buffer."""
    A, B, C, Mx, Mn, Q = buf("A", n), buf("B", n), buf("C", n), buf("Mx", n), buf("Mn", n), buf("Q", n, "int32")
    v = te.Var("v")
    a, b = L.Load(A, v), L.Load(B, v)
    cond = te.Logic("or", (te.all_of(a < b, 0.0 <= a), te.logical_not(te.ne(b, b))))
    body = seq(L.Store(C, v, te.select(cond, a - b, a * b)), L.Store(Mx, v, te.max_(a, b)),
               L.Store(Mn, v, te.min_(a, b)), L.Store(Q, v, te.cast("int32", a * 10.0)))
    return L.PrimFunc("select_logic", [A, B, C, Mx, Mn, Q], loop(v, n, body, "vectorize"))


def k_let_bool(n=32):
    """LetStmt inside a vector body (lane-dependent let) and a bool output buffer."""
    A, C, Bo = buf("A", n), buf("C", n), buf("Bo", n, "bool")
    v, t = te.Var("v"), te.Var("t", "int32")
    body = L.LetStmt(t, v * 2 + 1, seq(L.Store(C, v, L.Load(A, v) * te.cast("float32", t)),
                                       L.Store(Bo, v, L.Load(A, v) < 0.0)))
    return L.PrimFunc("let_bool", [A, C, Bo], loop(v, n, body, "vectorize"))


def k_uniform_if(m=4, n=16):
    """An if/else on the outer variable inside a vector body (lane-uniform condition: stays vectorized)."""
    A, C = buf("A", m * n), buf("C", m * n)
    i, j = te.Var("i"), te.Var("j")
    idx = i * n + j
    body = L.IfThenElse(te.eq(i % 2, 0), L.Store(C, idx, L.Load(A, idx) + 1.0), L.Store(C, idx, L.Load(A, idx) * 2.0))
    return L.PrimFunc("uniform_if", [A, C], loop(i, m, loop(j, n, body, "vectorize")))


def k_closure(m=6, w=8):
    """What a parallel body captures: an enclosing serial loop var (triangular extents starting at i), a let var
    and a local buffer filled before the parallel loop; plus unroll/vectorize loops with non-constant extents."""
    C = buf("C", m * w)
    tab = buf("tab", w, scope="local")
    i, j, s, u, v = (te.Var(x) for x in "ijsuv")
    fill = loop(u, w, L.Store(tab, u, te.cast("float32", u * u)), "unroll")
    par = loop(j, w - i, L.Store(C, i * w + j, L.Load(tab, j) + te.cast("float32", s)), "parallel", start=i)
    clear = loop(v, i, L.Store(C, i * w + v, te.FloatImm(-1.0)), "vectorize")  # extent i: not constant
    body = L.LetStmt(s, i * 100, seq(par, loop(u, 1, clear, "unroll")))
    return L.PrimFunc("closure", [C], L.Allocate(tab, seq(fill, loop(i, m, body))))


def k_wide_types(n=32):
    """int64 and float64 buffers: C64 = f64(I64) * 0.5 + f64(A); K = I64 + v (i32 -> i64) in int64."""
    A, I64, C64, K = buf("A", n), buf("I", n, "int64"), buf("C64", n, "float64"), buf("K", n, "int64")
    v = te.Var("v")
    x = L.Load(I64, v)
    body = seq(L.Store(C64, v, te.cast("float64", x) * te.FloatImm(0.5, "float64") + te.cast("float64", L.Load(A, v))),
               L.Store(K, v, x + v))
    return L.PrimFunc("wide_types", [A, I64, C64, K], loop(v, n, body, "vectorize"))


def k_intrinsic(name, n=4096):
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    o, v = te.Var("o"), te.Var("v")
    idx = o * 16 + v
    args = (L.Load(A, idx), L.Load(B, idx))[:INTRINSICS[name].arity]
    body = L.Store(C, idx, te.intrin(name, *args))
    return L.PrimFunc(f"intrin_{name}", [A, B, C], loop(o, n // 16, loop(v, 16, body, "vectorize")))


ROOT_POWERS = (0.25, 0.5, 0.75)


def k_root_power(k, vectorize, n=4096):
    """C = pow(A, k) with a constant exponent k (compiled from square roots), vectorized or scalar."""
    A, C = buf("A", n), buf("C", n)
    o, v = te.Var("o"), te.Var("v")
    idx = o * 16 + v
    body = L.Store(C, idx, te.intrin("pow", L.Load(A, idx), te.FloatImm(k)))
    name = f"root_power_{int(k * 100)}_{'vector' if vectorize else 'scalar'}"
    return L.PrimFunc(name, [A, C], loop(o, n // 16, loop(v, 16, body, "vectorize" if vectorize else "serial")))


def k_scalar_exp(n=64):
    """exp in a plain scalar loop (the same IR path on scalars)."""
    A, C = buf("A", n), buf("C", n)
    i = te.Var("i")
    return L.PrimFunc("scalar_exp", [A, C], loop(i, n, L.Store(C, i, te.exp(L.Load(A, i)))))


def k_matmul(M=64, N=64, K=64, MR=4, NR=16):
    """C = A @ B, register-blocked: acc[MR x NR] local, i unrolled, j vectorized (MR FMAs of zmm per k)."""
    A, B, C = buf("A", M * K), buf("B", K * N), buf("C", M * N)
    acc = buf("acc", MR * NR, scope="local")
    io, jo, k, i, j = (te.Var(x) for x in ("io", "jo", "k", "i", "j"))
    row, col = io * MR + i, jo * NR + j
    tile = lambda body: loop(i, MR, loop(j, NR, body, "vectorize"), "unroll")
    update = L.Store(acc, i * NR + j, L.Load(acc, i * NR + j) + L.Load(A, row * K + k) * L.Load(B, k * N + col))
    body = L.Allocate(acc, seq(tile(L.Store(acc, i * NR + j, te.FloatImm(0.0))), loop(k, K, tile(update)),
                               tile(L.Store(C, row * N + col, L.Load(acc, i * NR + j)))))
    return L.PrimFunc(f"matmul_{M}x{N}x{K}", [A, B, C], loop(io, M // MR, loop(jo, N // NR, body), "parallel"))


PAR_EXTENTS = (0, 1, 3, 7)


def all_kernels():
    return ([k_ew(), k_ew_tail(), k_broadcast(), k_gather(), k_scatter(), k_colsum(), k_rowsum(), k_unroll(),
             k_nested_parallel(), k_floordiv(), k_vector_int(), k_select_logic(), k_let_bool(), k_scalar_exp(),
             k_matmul(), k_uniform_if(), k_closure(), k_wide_types()]
            + [k_root_power(k, vec) for k in ROOT_POWERS for vec in (True, False)]
            + [k_parallel_extent(e) for e in PAR_EXTENTS] + [k_intrinsic(nm) for nm in sorted(INTRINSICS)])


class Lib:
    """ctypes wrapper: call(name, *arrays) passes 64-byte aligned copies and returns them (outputs included)."""

    def __init__(self, path):
        self.dll = ctypes.CDLL(path)
        self.dll.relayish_get_num_threads.restype = ctypes.c_int32

    def call(self, name, *arrays):
        arrays = [as_aligned(np.ascontiguousarray(a)) for a in arrays]
        getattr(self.dll, name)(*[P(a.ctypes.data) for a in arrays])
        return arrays

    def set_threads(self, n):
        self.dll.relayish_set_num_threads(ctypes.c_int32(n))


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    path = build_library(all_kernels(), None, str(tmp_path_factory.mktemp("codegen") / "kernels.so"))
    return Lib(path)


# ---------------------------------------------------------------------------------------------- target

def test_host_target_and_vector_width():
    t = host_target()
    assert set(t) == {"triple", "cpu", "features"} and t["triple"] and t["cpu"]
    feats = t["features"].split(",")
    expected = 16 if "+avx512f" in feats else 8 if "+avx2" in feats else 4
    assert vector_width("float32") == expected
    assert vector_width("float64") == expected // 2
    with pytest.raises(ValueError, match="complex64"):
        vector_width("complex64")


# ---------------------------------------------------------------------------------------------- analysis

def test_vectorize_blocker_reasons():
    assert vectorize_report(k_ew()) == {"v": None}
    assert "depends on v" in vectorize_report(k_ew_tail())["v"]
    assert "reduction" in vectorize_report(k_rowsum())["k"]
    assert vectorize_report(k_colsum()) == {"j": None}
    assert vectorize_report(k_matmul()) == {"j": None}
    assert vectorize_report(k_uniform_if()) == {"j": None}
    assert "not a positive constant" in vectorize_report(k_closure())["v"]
    a, v, u = buf("a", 64), te.Var("v"), te.Var("u")
    nested = loop(v, 8, loop(u, 8, L.Store(a, v * 8 + u, 1.0)), "vectorize")
    assert "nested loop" in vectorize_blocker(nested)
    shifted = loop(v, 8, seq(L.Store(a, v, 1.0), L.Store(a, v + 1, L.Load(a, v + 1) * 2.0)), "vectorize")
    assert "different indices" in vectorize_blocker(shifted)


def test_vector_ir_is_emitted():
    ir_text = emit_llvm_ir([k_ew(), k_broadcast()])
    assert "load <16 x float>" in ir_text and "store <16 x float>" in ir_text
    assert "fadd contract <16 x float>" in ir_text
    assert "<32 x float>" in ir_text  # bcast vectorizes its 32-wide loop as one <32 x float> op
    assert '@"ew.par1"' in ir_text and "relayish_parallel_for" in ir_text


# ---------------------------------------------------------------------------------------------- kernels

def test_elementwise(lib):
    a, b = rand(1024, seed=1), rand(1024, seed=2)
    c = lib.call("ew", a, b, np.zeros(1024, np.float32))[2]
    np.testing.assert_allclose(c, np.maximum(a + b, 0) * 2, rtol=1e-6)


def test_tail_guard_falls_back(lib):
    a = rand(1000, seed=3)
    c = lib.call("ew_tail", a, np.full(1000, np.nan, np.float32))[1]
    np.testing.assert_allclose(c, a * 3 - 1, rtol=1e-6)


def test_broadcast_loads(lib):
    a, b, d = rand(6 * 32, seed=4), rand(32, seed=5), rand(6, seed=6)
    c = lib.call("bcast", a, b, d, np.zeros(6 * 32, np.float32))[3]
    np.testing.assert_allclose(c.reshape(6, 32), a.reshape(6, 32) * b + d[:, None], rtol=1e-6, atol=1e-6)


def test_strided_and_gather_loads(lib):
    a = rand(80, seed=7)
    c = lib.call("gather", a, np.zeros(80, np.float32))[1].reshape(5, 16)
    j = np.arange(16)
    expected = a.reshape(16, 5).T + a[(j * 5) % 17][None, :]
    np.testing.assert_allclose(c, expected, rtol=1e-6)


def test_scatter_stores(lib):
    a = rand(16, seed=8)
    c, c2 = lib.call("scatter", a, np.zeros(16, np.float32), np.ones(32, np.float32))[1:]
    expected = np.zeros(16, np.float32)
    expected[(np.arange(16) * 7) % 16] = a
    np.testing.assert_array_equal(c, expected)
    np.testing.assert_array_equal(c2[0::2], -a)
    np.testing.assert_array_equal(c2[1::2], 1.0)


def test_reduction_with_vector_accumulator(lib):
    a = rand(37, 48, seed=9)
    c = lib.call("colsum", a, np.zeros(48, np.float32))[1]
    np.testing.assert_allclose(c, a.sum(0), rtol=1e-5, atol=1e-5)


def test_scalar_reduction_falls_back(lib):
    a = rand(9, 50, seed=10)
    c = lib.call("rowsum", a, np.zeros(9, np.float32))[1]
    np.testing.assert_allclose(c, a.sum(1), rtol=1e-5, atol=1e-5)


def test_unroll(lib):
    a = rand(64, seed=11)
    c = lib.call("unroll", a, np.full(64, -7.0, np.float32))[1]
    expected = a * (np.arange(64) % 4 + 1)
    expected[:8] = -7.0
    np.testing.assert_allclose(c, expected, rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_odd_extents(lib, threads):
    lib.set_threads(threads)
    try:
        for e in PAR_EXTENTS:
            c = lib.call(f"par{e}", np.full(max(e, 1), -1.0, np.float32))[0]
            expected = np.arange(e) + 0.5 if e else np.array([-1.0])
            np.testing.assert_array_equal(c, expected.astype(np.float32))
    finally:
        lib.set_threads(os.cpu_count())


def test_nested_parallel(lib):
    c = lib.call("nested_par", np.zeros(35, np.float32))[0].reshape(7, 5)
    np.testing.assert_array_equal(c, np.arange(7)[:, None] * 100 + np.arange(5)[None, :])


def test_floor_div_mod_negative(lib):
    outs = lib.call("floordiv", *[np.zeros(40, np.float32) for _ in range(5)])
    i = np.arange(-20, 20)
    for got, expected in zip(outs, [i // 3, i % 3, i // -3, i % -3, np.where((i // 3) % 2 == 0, i, -i)]):
        np.testing.assert_array_equal(got, expected)


def test_vector_int_floor_div(lib):
    c = lib.call("vec_int", np.zeros(32, np.int32))[0]
    x = np.arange(32) - 16
    np.testing.assert_array_equal(c, (x // 5) * 100 + x % 5)


def test_select_logic_minmax_cast(lib):
    a, b = rand(64, seed=12), rand(64, seed=13)
    a[:4] = [np.nan, 1.0, np.nan, -2.0]
    b[:4] = [1.0, np.nan, np.nan, -3.0]
    c, mx, mn, q = lib.call("select_logic", a, b, *[np.zeros(64, np.float32) for _ in range(3)],
                            np.zeros(64, np.int32))[2:]
    cond = ((a < b) & (0 <= a)) | ~(b != b)
    np.testing.assert_allclose(c, np.where(cond, a - b, a * b), rtol=1e-6)
    # documented: max/min propagate a NaN from either operand, as numpy's maximum/minimum (and onnxruntime)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))
    assert np.isnan(mx[:3]).all() and np.isnan(mn[:3]).all()
    np.testing.assert_array_equal(q[4:], (a[4:] * np.float32(10)).astype(np.int32))


def test_let_and_bool_buffer(lib):
    a = rand(32, seed=14)
    c, bo = lib.call("let_bool", a, np.zeros(32, np.float32), np.full(32, 7, np.uint8))[1:]
    np.testing.assert_allclose(c, a * (np.arange(32) * 2 + 1), rtol=1e-6)
    np.testing.assert_array_equal(bo, (a < 0).astype(np.uint8))


def test_uniform_if_in_vector_body(lib):
    a = rand(64, seed=30)
    c = lib.call("uniform_if", a, np.zeros(64, np.float32))[1].reshape(4, 16)
    a2 = a.reshape(4, 16)
    np.testing.assert_allclose(c, np.where((np.arange(4) % 2 == 0)[:, None], a2 + 1, a2 * 2), rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_closure_captures(lib, threads):
    lib.set_threads(threads)
    try:
        c = lib.call("closure", np.full(48, 7.0, np.float32))[0].reshape(6, 8)
    finally:
        lib.set_threads(os.cpu_count())
    expected = np.full((6, 8), 7.0, np.float32)
    for i in range(6):
        expected[i, :i] = -1.0
        expected[i, i:] = np.arange(i, 8) ** 2 + 100 * i
    np.testing.assert_array_equal(c, expected)


def test_wide_types(lib):
    a = rand(32, seed=31)
    iv = np.arange(32, dtype=np.int64) * (2**33) - 5
    c64, k = lib.call("wide_types", a, iv, np.zeros(32, np.float64), np.zeros(32, np.int64))[2:]
    np.testing.assert_array_equal(c64, iv.astype(np.float64) * 0.5 + a.astype(np.float64))
    np.testing.assert_array_equal(k, iv + np.arange(32))


def test_forked_child_runs_parallel_kernels(lib):
    """After fork() the child has no workers; its pool must notice (pthread_atfork) instead of waiting forever."""
    a, b = rand(1024, seed=32), rand(1024, seed=33)
    lib.call("ew", a, b, np.zeros(1024, np.float32))  # workers exist in the parent
    pid = os.fork()
    if pid == 0:  # child: exit 0 only if the parallel kernel ran and was right
        try:
            c = lib.call("ew", a, b, np.zeros(1024, np.float32))[2]
            os._exit(0 if np.allclose(c, np.maximum(a + b, 0) * 2) else 1)
        except BaseException:
            os._exit(2)
    for _ in range(500):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        threading.Event().wait(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("parallel kernel in a forked child hung")


# ---------------------------------------------------------------------------------------------- intrinsics

def ulps(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ref (0 where both are NaN or equal, incl. infinities)."""
    with np.errstate(all="ignore"):
        ref32 = ref64.astype(np.float32)
        ref = np.where(np.isfinite(ref32), ref64, ref32)
        spacing = np.maximum(np.spacing(np.abs(ref32)).astype(np.float64), np.finfo(np.float32).smallest_subnormal)
        d = np.abs(got.astype(np.float64) - ref) / spacing
    d[(np.isnan(got) & np.isnan(ref64)) | (got == ref)] = 0
    return d


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, 3.4e38, -3.4e38, 0.5, -0.5]
RANGES = {  # the input range tested (None: log-uniform over all positive floats) of every unary intrinsic
    "exp": (-110, 95), "log": None, "tanh": (-12, 12), "sigmoid": (-120, 120), "erf": (-6, 6), "sqrt": None,
    "fabs": (-1e3, 1e3), "floor": (-1e3, 1e3), "ceil": (-1e3, 1e3),
    "sin": (-1e3, 1e3), "cos": (-1e3, 1e3), "tan": (-1e3, 1e3), "asin": (-1.1, 1.1), "acos": (-1.1, 1.1),
    "atan": (-50, 50),
}
MAX_ULPS = {"exp": 1.5, "log": 2, "tanh": 1.5, "sigmoid": 2.5, "erf": 1.5, "sqrt": 0.5, "fabs": 0, "floor": 0,
            "ceil": 0, "sin": 0.51, "cos": 0.51, "tan": 0.51, "asin": 0.51, "acos": 0.51, "atan": 0.51}


def test_every_intrinsic_is_tested():
    assert set(RANGES) | {"pow"} == set(INTRINSICS)


@pytest.mark.parametrize("name", sorted(RANGES))
def test_unary_intrinsic_accuracy(lib, name):
    fn, rng_ = INTRINSICS[name].numpy, RANGES[name]
    g = np.random.default_rng(15)
    x = (10 ** g.uniform(-44, 38.5, 4096) if rng_ is None else g.uniform(*rng_, 4096)).astype(np.float32)
    if rng_ is None:
        x[-100:] *= -1  # negative inputs: NaN
    x[:len(SPECIALS)] = SPECIALS
    y = lib.call(f"intrin_{name}", x, np.zeros_like(x), np.zeros_like(x))[2]
    with np.errstate(all="ignore"):
        ref = fn(x.astype(np.float64))
    assert np.array_equal(np.isnan(y), np.isnan(ref)), f"{name}: NaN pattern differs"
    err = ulps(y, ref)
    worst = int(np.argmax(err))
    assert err.max() <= MAX_ULPS[name], f"{name}({x[worst]!r}) = {y[worst]!r}, expected {ref[worst]!r}"


def test_pow_accuracy_and_special_cases(lib):
    g = np.random.default_rng(16)
    x = (10 ** g.uniform(-3, 3, 4096) * g.choice([-1, 1], 4096)).astype(np.float32)
    y = g.uniform(-20, 20, 4096).astype(np.float32)
    y[::3] = np.round(y[::3])
    sx = np.array([0, -0.0, 1, -1, np.inf, -np.inf, np.nan, 2, -2, 0.5, -0.5, 3, 1e-40], np.float32)
    sy = np.array([0, -0.0, 1, -1, np.inf, -np.inf, np.nan, 2, 3, -3, 0.5, -0.5, 1.5], np.float32)
    X, Y = np.meshgrid(sx, sy)
    x[:X.size], y[:Y.size] = X.ravel(), Y.ravel()
    out = lib.call("intrin_pow", x, y, np.zeros_like(x))[2]
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64))
        np_ref = np.power(x, y)
    assert np.array_equal(np.isnan(out), np.isnan(np_ref))
    special = ~np.isnan(np_ref[:X.size])  # signed zeros and infinities (a NaN's sign is meaningless)
    np.testing.assert_array_equal(np.signbit(out[:X.size])[special], np.signbit(np_ref[:X.size])[special])
    assert ulps(out, ref).max() <= 0.5001


@pytest.mark.parametrize("vectorize", [True, False])
@pytest.mark.parametrize("k", ROOT_POWERS)
def test_pow_by_a_root_exponent(lib, k, vectorize):
    """pow(x, 1/4 | 1/2 | 3/4) with a constant exponent is computed from square roots: within 0.5 ulp of float64,
    and C99's special cases (signed zeros, -inf, negatives) as numpy has them. The general pow's kernel (the
    exponent an array) is the other path, tested above."""
    g = np.random.default_rng(17)
    x = (10 ** g.uniform(-40, 38, 4096)).astype(np.float32)
    x[-200:] *= -1
    specials = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, 2.0, 16.0], np.float32)
    x[:specials.size] = specials
    name = f"root_power_{int(k * 100)}_{'vector' if vectorize else 'scalar'}"
    out = lib.call(name, x, np.zeros_like(x))[1]
    # C99 (F.9.4.4), which numpy's own power does not follow for a 0.5 exponent (it takes sqrt: sqrt(-0) = -0,
    # sqrt(-inf) = NaN): pow(+-0, k) = +0, pow(-inf, k) = +inf, a finite negative base gives NaN
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        ref = np.where(x64 == -np.inf, np.inf, np.where(x64 < 0, np.nan, np.power(np.abs(x64), k)))
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert not np.signbit(out[~np.isnan(out)]).any()
    assert ulps(out, ref).max() <= 0.5001
    assert out[10] == np.float32(2.0 ** (4 * k)) and out[5] == np.inf and out[1] == 0.0


def test_scalar_intrinsic_path(lib):
    x = np.linspace(-80, 80, 64).astype(np.float32)
    y = lib.call("scalar_exp", x, np.zeros_like(x))[1]
    assert ulps(y, np.exp(x.astype(np.float64))).max() <= 1.5


def test_no_libm_calls():
    text = emit_llvm_ir([k_intrinsic(nm) for nm in INTRINSICS], optimized=True)
    declared = {line.split("@")[1].split("(")[0].strip('"') for line in text.splitlines() if line.startswith("declare")}
    assert declared <= {"pthread_create", "pthread_atfork", "syscall", "sysconf"} | {
        d for d in declared if d.startswith("llvm.")}, declared


# ---------------------------------------------------------------------------------------------- matmul, threads

def test_matmul_microkernel(lib):
    a, b = rand(64, 64, seed=17), rand(64, 64, seed=18)
    c = lib.call("matmul_64x64x64", a, b, np.zeros(64 * 64, np.float32))[2].reshape(64, 64)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_thread_counts_give_same_results(lib):
    a, b = rand(64, 64, seed=19), rand(64, 64, seed=20)
    default = lib.dll.relayish_get_num_threads()
    assert default == os.sysconf("SC_NPROCESSORS_ONLN")
    results = []
    for n in (1, 2):
        lib.set_threads(n)
        assert lib.dll.relayish_get_num_threads() == n
        results.append(lib.call("matmul_64x64x64", a, b, np.zeros(64 * 64, np.float32))[2])
        results.append(lib.call("colsum", a[:37].ravel(), np.zeros(48, np.float32))[1])
    lib.set_threads(0)
    assert lib.dll.relayish_get_num_threads() == 1  # n < 1 is taken as 1
    lib.set_threads(default)
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_array_equal(results[1], results[3])


def test_workers_are_pinned_and_caller_is_not(lib):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    before = os.sched_getaffinity(0)
    lib.set_threads(2)
    lib.call("ew", rand(1024), rand(1024), np.zeros(1024, np.float32))
    assert os.sched_getaffinity(0) == before  # the caller's affinity is never touched
    single = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/status") as f:
            allowed = next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))
        single.append(allowed.isdigit())
    assert any(single), "no pool worker is pinned to a single CPU"


def test_concurrent_callers_are_safe(lib):
    """Two Python threads calling parallel kernels at once: the second runs serially (no deadlock, same result)."""
    a, b = rand(64, 64, seed=21), rand(64, 64, seed=22)
    expected = a @ b
    errors = []

    def work():
        for _ in range(50):
            c = lib.call("matmul_64x64x64", a, b, np.zeros(64 * 64, np.float32))[2].reshape(64, 64)
            if not np.allclose(c, expected, rtol=1e-4, atol=1e-4):
                errors.append("mismatch")
            lib.dll.relayish_pool_idle()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "parallel_for deadlocked"
    assert not errors


def test_polynomial_tables_are_their_fits():
    """The tables are the least-squares fits, up to the last bits that LAPACK's CPU-specific kernels change: the
    top coefficient of LOG_P, a small contribution fitted on a short interval, moved by 1.4e-6 relative between
    an Intel Xeon and a Zen 3 (the ops' ulp tests judge the polynomials themselves)."""
    from compiler.codegen import intrinsics
    for name, coeffs in intrinsics.fit_coefficients().items():
        np.testing.assert_allclose(getattr(intrinsics, name), coeffs, rtol=1e-5, atol=1e-9, err_msg=name)

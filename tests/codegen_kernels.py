"""The loop IR kernels of test_codegen.py: each k_*() builds one PrimFunc that exercises a codegen path (vector
loads of every kind, reductions, unrolling, parallel loops and closures, integer division, selects, intrinsics, a
matmul micro-kernel); all_kernels() is the library the tests compile once; Lib calls its functions via ctypes."""
from __future__ import annotations

import ctypes

import numpy as np

from compiler import loopir as L
from relayish import te
from relayish.intrinsics import INTRINSICS
from runtime.aligned import as_aligned

from codegen_helpers import buf, loop, seq

P = ctypes.c_void_p

def k_ew(n=1024, name="ew"):
    """C = max(A + B, 0) * 2: parallel outer, vectorized inner (16 lanes)."""
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    o, v = te.Var("o"), te.Var("v")
    idx = o * 16 + v
    body = L.Store(C, idx, te.max_(L.Load(A, idx) + L.Load(B, idx), 0.0) * 2.0)
    return L.PrimFunc(name, [A, B, C], loop(o, n // 16, loop(v, 16, body, "vectorize"), "parallel"))


def k_ew_tail(n=1000):
    """Split with a tail guard whose condition depends on the vector lane: vectorized, its body masked."""
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
    """C[i, j] = A[j, i] (stride m) + A[(j * 5) % 17] (non-affine gather): both become gathers."""
    A, C = buf("A", n * m), buf("C", m * n)
    i, j = te.Var("i"), te.Var("j")
    body = L.Store(C, i * n + j, L.Load(A, j * m + i) + L.Load(A, (j * 5) % 17))
    return L.PrimFunc("gather", [A, C], loop(i, m, loop(j, n, body, "vectorize")))


def k_every_other(m=3, n=16):
    """C[i, j] = A[2j + i]: a stride-2 vector load (two contiguous loads and a shuffle); A ends at the last lane's
    element of the last row, so a load past it would read outside the buffer."""
    A, C = buf("A", 2 * (n - 1) + m), buf("C", m * n)
    i, j = te.Var("i"), te.Var("j")
    body = L.Store(C, i * n + j, L.Load(A, j * 2 + i))
    return L.PrimFunc("every_other", [A, C], loop(i, m, loop(j, n, body, "vectorize")))


def k_padded_read(w=37, n=20, step=2, edge=0):
    """C[r, j] = A[min(max(step * j + r - 1, 0), w - 1)] if 0 <= step * j + r - 1 < w + edge else -1 (r < 3): a
    padded window's read, its clamps only a guard (masked vector loads); the last lanes of row 2 run past the
    end. With edge > 0 the lanes up to `edge` past the end take the last element (the clamp matters there)."""
    A, C = buf("A", w), buf("C", 3 * n)
    r, j = te.Var("r"), te.Var("j")
    x = j * step + r - 1
    inside = te.all_of(te.Cmp("<=", te.as_expr(0), x), te.Cmp("<", x, te.as_expr(w + edge)))
    read = L.Load(A, te.min_(te.max_(x, te.as_expr(0)), te.as_expr(w - 1)))
    body = L.Store(C, r * n + j, te.Select(inside, read, te.as_expr(-1.0, "float32")))
    return L.PrimFunc(f"padded_read{step}_{edge}", [A, C], loop(r, 3, loop(j, n, body, "vectorize")))


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


def k_unrolled_tile(n=64):
    """C[16i + 2u + 1] = A[16i + 2u + 1] + A[16i + 2u] for i serial, u unrolled 8 times: indices written with
    their constants in the middle ((u * 2 + i * 16) + 1), as lowering writes a tile's."""
    A, C = buf("A", n), buf("C", n)
    i, u = te.Var("i"), te.Var("u")
    at = (u * 2 + i * 16) + 1
    body = L.Store(C, at, L.Load(A, at) + L.Load(A, (u * 2 + 0) + i * 16))
    return L.PrimFunc("unrolled_tile", [A, C], loop(i, n // 16, loop(u, 8, body, "unroll")))


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


HEAVY_STEPS = 1 << 20


def k_parallel_heavy() -> L.PrimFunc:
    """C[i] = 1 + 1 + ... (HEAVY_STEPS float adds, a serial chain LLVM may not fold) for i in a parallel loop of 2:
    two tasks of ~1 ms each, so the caller finishes its own while a worker's is still running."""
    C = buf("C", 2)
    i, k = te.Var("i"), te.Var("k")
    body = seq(L.Store(C, i, te.FloatImm(0.0)),
               loop(k, HEAVY_STEPS, L.Store(C, i, L.Load(C, i) + te.FloatImm(1.0))))
    return L.PrimFunc("par_heavy", [C], loop(i, 2, body, "parallel"))


def k_parallel_increment() -> L.PrimFunc:
    """C[i] += 1 over a parallel loop of 64: a task run twice (or skipped) shows in C."""
    C = buf("C", 64)
    i = te.Var("i")
    return L.PrimFunc("par_inc", [C], loop(i, 64, L.Store(C, i, L.Load(C, i) + te.FloatImm(1.0)), "parallel"))


def all_kernels():
    return ([k_ew(), k_ew_tail(), k_broadcast(), k_gather(), k_every_other(), k_padded_read(step=1), k_padded_read(step=2), k_padded_read(step=2, edge=3), k_scatter(), k_colsum(), k_rowsum(), k_unroll(),
             k_unrolled_tile(),
             k_nested_parallel(), k_floordiv(), k_vector_int(), k_select_logic(), k_let_bool(), k_scalar_exp(),
             k_matmul(), k_uniform_if(), k_closure(), k_wide_types()]
            + [k_root_power(k, vec) for k in ROOT_POWERS for vec in (True, False)]
            + [k_parallel_extent(e) for e in PAR_EXTENTS] + [k_parallel_increment(), k_parallel_heavy()] + [k_intrinsic(nm) for nm in sorted(INTRINSICS)])


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

"""A whole library: the graph executor chaining kernels over a plan of input/param/workspace/output buffers, the
plan's checks, and the clear errors codegen gives for malformed loop IR."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from compiler import loopir as L
from compiler.codegen import BufferRef, ExecutorPlan, KernelCall, build_library, emit_llvm_ir, last_build_stats
from relayish import te
from runtime.aligned import aligned_empty, as_aligned

from codegen_helpers import buf, loop, rand

P = ctypes.c_void_p


def k_scale():
    X, W, T = buf("X", 40), buf("W", 40), buf("T", 40)
    i = te.Var("i")
    return L.PrimFunc("scale", [X, W, T], loop(i, 40, L.Store(T, i, L.Load(X, i) * L.Load(W, i)), "vectorize"))


def k_add_one():
    T, Y = buf("T", 40), buf("Y", 40)
    i = te.Var("i")
    return L.PrimFunc("add_one", [T, Y], loop(i, 40, L.Store(Y, i, L.Load(T, i) + 1.0), "parallel"))


def test_executor_chains_kernels(tmp_path):
    plan = ExecutorPlan([
        KernelCall("scale", [BufferRef("input", 0), BufferRef("param", offset=192), BufferRef("workspace", offset=64)]),
        KernelCall("add_one", [BufferRef("workspace", offset=64), BufferRef("output", 0)]),
    ])
    dll = ctypes.CDLL(build_library([k_scale(), k_add_one()], plan, str(tmp_path / "exec.so")))
    stats = last_build_stats()
    assert stats["total_s"] > 0 and stats["kernels"] == 2
    x, w = rand(40, seed=23), rand(40, seed=24)
    params = aligned_empty(192 + 160, np.uint8)
    params[:192] = 0
    params[192:].view(np.float32)[:] = w
    workspace = aligned_empty(64 + 160, np.uint8)
    xa, y = as_aligned(x), aligned_empty(40, np.float32)
    inputs, outputs = (P * 1)(xa.ctypes.data), (P * 1)(y.ctypes.data)
    dll.relayish_run(inputs, outputs, P(params.ctypes.data), P(workspace.ctypes.data))
    np.testing.assert_allclose(y, x * w + 1, rtol=1e-6)
    np.testing.assert_allclose(workspace[64:].view(np.float32), x * w, rtol=1e-6)
    y[:] = 0
    ns = (ctypes.c_int64 * 2)(-1, -1)
    dll.relayish_run_profiled(inputs, outputs, P(params.ctypes.data), P(workspace.ctypes.data), ns)
    np.testing.assert_allclose(y, x * w + 1, rtol=1e-6)
    assert all(0 <= t < 10**9 for t in ns)


def test_executor_rejects_bad_plans(tmp_path):
    with pytest.raises(ValueError, match="multiple of 64"):
        BufferRef("workspace", offset=4)
    with pytest.raises(ValueError, match="kind"):
        BufferRef("scratch")
    bad = ExecutorPlan([KernelCall("scale", [BufferRef("input", 0)])])
    with pytest.raises(ValueError, match="passes 1 buffers, the kernel takes 3"):
        build_library([k_scale()], bad, str(tmp_path / "bad.so"))
    with pytest.raises(ValueError, match="not in the module"):
        build_library([k_scale()], ExecutorPlan([KernelCall("nope", [])]), str(tmp_path / "bad.so"))


def test_clear_errors():
    A, C = buf("A", 8), buf("C", 8, "int32")
    i, j = te.Var("i"), te.Var("j")
    with pytest.raises(ValueError, match="variable j is not bound"):
        emit_llvm_ir([L.PrimFunc("unbound", [A], loop(i, 8, L.Store(A, j, 1.0)))])
    with pytest.raises(ValueError, match="into C of dtype int32"):
        emit_llvm_ir([L.PrimFunc("badstore", [A, C], loop(i, 8, L.Store(C, i, L.Load(A, i))))])
    with pytest.raises(NotImplementedError, match="unknown intrinsic 'gelu'"):
        emit_llvm_ir([L.PrimFunc("badcall", [A], loop(i, 8, L.Store(A, i, te.Call("gelu", (L.Load(A, i),)))))])
    with pytest.raises(ValueError, match="unknown intrinsic 'gelu'"):
        te.intrin("gelu", L.Load(A, i))  # te refuses it first
    with pytest.raises(ValueError, match="pow takes 2 argument"):
        te.intrin("pow", L.Load(A, i))
    with pytest.raises(ValueError, match="must be a C identifier"):
        emit_llvm_ir([L.PrimFunc("relayish_run", [A], loop(i, 8, L.Store(A, i, 1.0)))])
    with pytest.raises(ValueError, match="appears twice"):
        emit_llvm_ir([L.PrimFunc("twice", [A, A], loop(i, 8, L.Store(A, i, 1.0)))])
    loc = buf("loc", 4, scope="local")
    with pytest.raises(ValueError, match="buffer loc is neither a parameter"):
        emit_llvm_ir([L.PrimFunc("noalloc", [A], loop(i, 4, L.Store(loc, i, 1.0)))])

"""Parallel codegen (compiler/codegen/workers.py): a library built split, one object per kernel compiled in worker
processes, runs like the one-module build; LLVM errors surface with LLVM's message; a lost worker is replaced by
compiling in this process."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from compiler.codegen import BufferRef, ExecutorPlan, KernelCall, emit_objects, host_target, link_shared
from compiler.codegen import workers
from runtime.aligned import aligned_empty, as_aligned

from codegen_helpers import rand
from test_codegen_library import k_add_one, k_scale

P = ctypes.c_void_p
PLAN = ExecutorPlan([
    KernelCall("scale", [BufferRef("input", 0), BufferRef("param", offset=0), BufferRef("workspace", offset=0)]),
    KernelCall("add_one", [BufferRef("workspace", offset=0), BufferRef("output", 0)]),
])


def _run(path):
    dll = ctypes.CDLL(path)
    x, w = rand(40, seed=3), rand(40, seed=4)
    params, workspace, y = as_aligned(w), aligned_empty(160, np.uint8), aligned_empty(40, np.float32)
    xa = as_aligned(x)
    dll.relayish_run((P * 1)(xa.ctypes.data), (P * 1)(y.ctypes.data), P(params.ctypes.data),
                     P(workspace.ctypes.data))
    return y, x * w + 1


@pytest.mark.parametrize("n_workers", [0, 2])
def test_split_build_runs_like_one_module(tmp_path, n_workers):
    stats = {}
    objects = emit_objects([k_scale(), k_add_one()], PLAN, stats=stats, n_workers=n_workers)
    assert len(objects) == 4 and stats["objects"] == 4  # one per kernel + the pool + the executor
    path = str(tmp_path / f"split{n_workers}.so")
    link_shared(objects, path)
    y, expected = _run(path)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_an_object_compiled_before_is_not_compiled_again(tmp_path):
    """The thread pool's module is the same text in every build, and so is a kernel built before: the second build
    compiles only what changed (here: the executor of another plan), and its library still runs."""
    from compiler.codegen import library
    library._OBJECTS.clear()
    first, second = {}, {}
    emit_objects([k_scale(), k_add_one()], PLAN, stats=first, n_workers=0)
    other = ExecutorPlan(PLAN.calls[:])  # the same calls: an executor text identical too
    objects = emit_objects([k_scale(), k_add_one()], other, stats=second, n_workers=0)
    assert first["objects_remembered"] == 0 and second["objects_remembered"] == 4
    path = str(tmp_path / "again.so")
    link_shared(objects, path)
    y, expected = _run(path)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    third = {}  # another plan: its executor is new, the kernel and the pool are not
    emit_objects([k_scale()], ExecutorPlan(PLAN.calls[:1]), stats=third, n_workers=0)
    assert third["objects"] == 3 and third["objects_remembered"] == 2
    library._OBJECTS.clear()


def test_llvm_error_in_a_worker_is_raised_with_its_message():
    with pytest.raises(RuntimeError, match="LLVM rejected(.|\n)*parsing error"):
        workers.compile_texts(["define void @f() {\n  ret void %nope\n}\n"], host_target(), 3,
                              local=lambda text: pytest.fail("a worker was available"), workers=1)


def test_lost_worker_is_replaced_by_compiling_here():
    text = "define void @f() {\n  ret void\n}\n"
    local_calls = []

    def local(t):
        local_calls.append(t)
        return b"local"

    assert workers.compile_texts([text], host_target(), 3, local, workers=1)[0] != b"local"  # a worker did it
    pool = workers._pool(1)
    worker = pool.idle.get()
    worker.proc.kill()
    worker.proc.wait()
    pool.idle.put(worker)
    assert workers.compile_texts([text], host_target(), 3, local, workers=1) == [b"local"]
    assert workers.compile_texts([text], host_target(), 3, local, workers=1)[0] != b"local"  # a new worker


def test_prestart_starts_the_workers_once_and_they_serve_jobs():
    workers.prestart(workers=3)
    pool = workers._pool(3)
    assert pool.started == 3 and pool.idle.qsize() == 3
    workers.prestart(workers=3)  # started already: nothing more
    assert pool.started == 3 and pool.idle.qsize() == 3
    text = "define void @f() {\n  ret void\n}\n"
    assert workers.compile_texts([text] * 4, host_target(), 3, lambda t: pytest.fail("no worker"), workers=3)[0]
    workers.prestart(workers=0)  # no workers: a no-op


def test_loop_vectorizer_is_off_for_integer_loads_on_zen4_and_zen5_only():
    """LLVM's loop vectorizer miscompiled RoiAlign's gather (indices loaded from int64 tensors) when tuning for
    znver4/znver5 (objworker.NO_LOOP_VECTORIZER_CPUS): such modules are optimized without it there, float-only
    modules and other CPUs keep it."""
    from compiler.codegen.objworker import loop_vectorizer
    gather = '%".33" = load i64, i64* %".32"\n%".60" = load float, float* %".59"'
    floats = '%".60" = load float, float* %".59"\n%"v" = load <16 x float>, <16 x float>* %"p"'
    assert not loop_vectorizer(gather, "znver5") and not loop_vectorizer(gather, "znver4")
    assert loop_vectorizer(gather, "znver3") and loop_vectorizer(gather, "x86-64-v4")
    assert loop_vectorizer(floats, "znver5")


def test_llvm_leaves_the_unrolling_of_a_long_loop_to_the_schedule():
    """objworker.LLVM_OPTIONS: LLVM does not partially unroll a rolled loop (1000 serial steps kept one body; with
    partial unrolling allowed it made 25 copies on Zen 4), as the schedules decide what to unroll."""
    import llvmlite.binding as llvm
    from compiler.codegen import objworker
    text = """define float @f(float* noalias %a) {
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %x = phi float [0.0, %entry], [%x1, %loop]
  %p = getelementptr inbounds float, float* %a, i32 %i
  %v = load float, float* %p
  %m = fmul float %x, 1.5
  %x1 = fadd float %m, %v
  %i1 = add i32 %i, 1
  %c = icmp slt i32 %i1, 1000
  br i1 %c, label %loop, label %exit
exit:
  ret float %x1
}
"""
    target = {k: host_target()[k] for k in ("triple", "cpu", "features")}
    mod = llvm.parse_assembly(text)
    objworker.optimize(mod, objworker.machine_for(target, 3), 3)
    assert str(mod).count("fmul") == 1

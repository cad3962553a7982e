"""Code generator: hand-written loop IR kernels (codegen_kernels.py) compiled into one shared library, run via ctypes,
vs numpy."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from compiler import loopir as L
from compiler.codegen import (build_library, emit_llvm_ir, host_target, vector_width, vectorize_blocker,
                              vectorize_report)
from relayish import te
from relayish.intrinsics import INTRINSICS

from codegen_helpers import buf, loop, rand, seq
from codegen_kernels import (HEAVY_STEPS, PAR_EXTENTS, ROOT_POWERS, Lib, all_kernels, k_broadcast, k_closure, k_colsum,
                             k_every_other, k_ew, k_ew_tail, k_gather, k_intrinsic, k_matmul, k_padded_read, k_rowsum,
                             k_uniform_if, k_unrolled_tile)


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
    assert vectorize_report(k_ew_tail()) == {"v": None}  # a lane-dependent guard runs masked
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
    both = loop(v, 8, L.IfThenElse(v < 5, L.Store(a, v, 1.0), L.Store(a, v, 2.0)), "vectorize")
    assert "depends on v and has an else branch" in vectorize_blocker(both)


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


def test_tail_guard_runs_masked(lib):
    """The last vector (lanes 992..1007 of 1000) stores only its 8 valid lanes: the 16 floats after the output's
    end keep their NaN sentinel (an unmasked store would overwrite them), and its loads read only valid lanes."""
    a = rand(1000, seed=3)
    c = lib.call("ew_tail", a, np.full(1016, np.nan, np.float32))[1]
    np.testing.assert_allclose(c[:1000], a * 3 - 1, rtol=1e-6)
    assert np.isnan(c[1000:]).all()
    assert "llvm.masked.store.v16f32" in emit_llvm_ir([k_ew_tail()])


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
    ir = emit_llvm_ir([k_gather()])  # each gathering load: one masked.gather, not 16 scalar loads and inserts
    assert ir.count("call <16 x float> @\"llvm.masked.gather") == 2 and "= load float" not in ir


def test_stride_two_loads(lib):
    a = rand(33, seed=8)
    c = lib.call("every_other", a, np.zeros(48, np.float32))[1].reshape(3, 16)
    np.testing.assert_array_equal(c, np.stack([a[i:i + 32:2] for i in range(3)]))
    ir = emit_llvm_ir([k_every_other()])
    assert "shufflevector" in ir and ir.count("load <16 x float>") == 2, "stride-2 loads must not be scalar gathers"


@pytest.mark.parametrize("step, edge", [(1, 0), (2, 0), (2, 3)])
def test_padded_reads_are_masked_vector_loads(lib, step, edge):
    # edge 3: lanes past the end that the select keeps read the clamped last element (the gathering branch)
    a = rand(37, seed=9)
    c = lib.call(f"padded_read{step}_{edge}", a, np.zeros(60, np.float32))[1].reshape(3, 20)
    x = step * np.arange(20)[None, :] + np.arange(3)[:, None] - 1
    np.testing.assert_array_equal(c, np.where((x >= 0) & (x < 37 + edge), a[np.clip(x, 0, 36)], -1.0))
    ir = emit_llvm_ir([k_padded_read(step=step, edge=edge)])
    assert "llvm.masked.load" in ir, "a padded read must load whole vectors, masked"


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


def test_unrolled_tile_addresses_share_their_base(lib):
    """The accesses of an unrolled tile differ by constants: one i32 -> i64 extension of their common part
    (16 i) for the 24 accesses, each address that plus a constant, whatever the constant's place in the index."""
    body = emit_llvm_ir([k_unrolled_tile()]).split('define void @"unrolled_tile"')[1]
    assert body.count("sext i32") == 1
    assert body.count("add nsw i64") == 8 + 7  # C and A at 2u + 1 (u = 0..7), A at 2u (u = 1..7: 0 is the base)
    a = rand(64, seed=12)
    c = lib.call("unrolled_tile", a, np.zeros(64, np.float32))[1]
    expected = np.zeros(64, np.float32)
    expected[1::2] = a[1::2] + a[0::2]
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


def in_child(body, what: str, timeout_s: float) -> None:
    """Run body() in a forked child, which must return True (exit 0) within timeout_s."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if body() else 1)
        except BaseException:
            os._exit(2)
    for _ in range(int(timeout_s * 100)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, what
            return
        threading.Event().wait(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"{what} hung")


def test_forked_child_runs_parallel_kernels(lib):
    """After fork() the child has no workers; its pool must notice (pthread_atfork) instead of waiting forever."""
    a, b = rand(1024, seed=32), rand(1024, seed=33)
    lib.call("ew", a, b, np.zeros(1024, np.float32))  # workers exist in the parent
    in_child(lambda: np.allclose(lib.call("ew", a, b, np.zeros(1024, np.float32))[2], np.maximum(a + b, 0) * 2),
             "parallel kernel in a forked child", 5)


def test_parallel_kernels_with_more_threads_than_cpus(lib):
    """Workers that share one CPU with the caller (as when other processes hold the cores) run rarely: the
    caller takes the tasks they have not taken, and every result is still complete and right. In a child
    process, so that the affinity and thread count stay there; then the same on every CPU, where participants
    race for each task."""
    def body():
        cpus, ok = os.sched_getaffinity(0), True
        for rep in range(300):
            os.sched_setaffinity(0, {min(cpus)} if rep < 150 else cpus)
            lib.set_threads(2 + rep % 2)
            for e in PAR_EXTENTS:
                c = lib.call(f"par{e}", np.full(max(e, 1), -1.0, np.float32))[0]
                ok &= bool(np.array_equal(c, (np.arange(e) + 0.5 if e else np.array([-1.0])).astype(np.float32)))
            c = lib.call("nested_par", np.zeros(35, np.float32))[0].reshape(7, 5)
            ok &= bool(np.array_equal(c, np.arange(7)[:, None] * 100 + np.arange(5)[None, :]))
            ok &= bool(np.array_equal(lib.call("par_inc", np.full(64, rep, np.float32))[0], np.full(64, rep + 1)))
            if rep >= 290:  # the caller must wait for a worker's task still running when its own ends
                lib.set_threads(2)
                ok &= bool(np.array_equal(lib.call("par_heavy", np.full(2, -1.0, np.float32))[0],
                                          np.full(2, HEAVY_STEPS)))
        return ok
    in_child(body, "parallel kernels with more threads than CPUs", 30)


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
    "fabs": (-1e3, 1e3), "floor": (-1e3, 1e3), "ceil": (-1e3, 1e3), "roundeven": (-1e3, 1e3),
    "sin": (-1e3, 1e3), "cos": (-1e3, 1e3), "tan": (-1e3, 1e3), "asin": (-1.1, 1.1), "acos": (-1.1, 1.1),
    "atan": (-50, 50),
}
MAX_ULPS = {"exp": 1.5, "log": 2, "tanh": 1.5, "sigmoid": 2.5, "erf": 1.5, "sqrt": 0.5, "fabs": 0, "floor": 0,
            "ceil": 0, "roundeven": 0, "sin": 0.51, "cos": 0.51, "tan": 0.51, "asin": 0.51, "acos": 0.51, "atan": 0.51}


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

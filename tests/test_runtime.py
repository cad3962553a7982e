"""The runtime against a fake compiled model built from C (tests/fixtures_native.py) with the real native ABI."""
import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import runtime
from runtime import LoadError, MetadataError, Module, TargetMismatchError, load_module
from runtime.target import check_target, missing_features

from fixtures_native import (PARAMS, build_fixture_library, fixture_meta, have_compiler, probe, reference_outputs,
                             reseal)

pytestmark = pytest.mark.skipif(not have_compiler(), reason="needs a C compiler (cc) to build the fixture library")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory):
    return build_fixture_library(str(tmp_path_factory.mktemp("lib")))


@pytest.fixture()
def module(lib_path):
    return load_module(lib_path)


def feed(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32), "k": np.array([3, -4], dtype=np.int64)}


def unaligned_copy(array):
    """A C-contiguous copy of `array` whose data pointer is 4 bytes past a 64-byte boundary."""
    raw = runtime.aligned_empty(array.nbytes + 64, np.uint8)
    out = raw[4:4 + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


# ---- running ---------------------------------------------------------------------------------------------------
def test_run_computes_the_model(module):
    f = feed()
    y, s = module.run(None, f)
    want_y, want_s = reference_outputs(f["x"], f["k"])
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_allclose(s, want_s, rtol=1e-6)
    assert module.input_names == ["x", "k"] and module.output_names == ["y", "s"]
    assert module.input_shapes == {"x": (2, 3), "k": (2,)}
    assert module.output_dtypes == {"y": np.float32, "s": np.float32}


def test_run_selects_outputs_by_name_in_the_given_order(module):
    f = feed(1)
    y, s = module.run(None, f)
    s2, y2 = module.run(["s", "y"], f)
    np.testing.assert_array_equal(s2, s)
    np.testing.assert_array_equal(y2, y)
    with pytest.raises(ValueError, match=r"unknown output\(s\) 'z'.*'y', 's'"):
        module.run(["z"], f)
    with pytest.raises(ValueError, match="list of output names"):
        module.run("y", f)


@pytest.mark.parametrize("small", [True, False], ids=["one-by-one", "aligned-block"])
def test_outputs_are_fresh_arrays_and_one_native_call_per_run(module, lib_path, small, monkeypatch):
    # small outputs are allocated one by one (element-aligned), larger ones in one 64-byte-aligned block
    monkeypatch.setattr(module, "_small_outputs", small)
    f = feed(2)
    calls = probe(lib_path, "fixture_calls")
    first = module.run(None, f)
    first_y = first[0].copy()
    first[0][...] = 123.0  # must not leak into the next call's result
    second = module.run(None, f)
    assert probe(lib_path, "fixture_calls") == calls + 2
    assert all(a is not b and not np.shares_memory(a, b) for a, b in zip(first, second))
    np.testing.assert_array_equal(second[0], first_y)
    assert all(a.ctypes.data % a.itemsize == 0 and a.flags.c_contiguous and a.flags.writeable for a in second)
    assert small or all(runtime.is_aligned(a) for a in second)


def test_non_contiguous_and_unaligned_inputs_are_copied(module, lib_path, monkeypatch):
    monkeypatch.setattr(module, "_small_outputs", False)  # (the probe counts every pointer: outputs aligned too)
    f = feed(3)
    want = module.run(None, f)
    x_strided = np.asfortranarray(f["x"])
    assert not x_strided.flags.c_contiguous
    k_unaligned = unaligned_copy(f["k"])
    assert k_unaligned.ctypes.data % 64 != 0
    misaligned = probe(lib_path, "fixture_misaligned")
    got = module.run(None, {"x": x_strided, "k": k_unaligned})
    assert probe(lib_path, "fixture_misaligned") == misaligned
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad_feed, message", [
    ({"x": np.zeros((2, 3), np.float32)}, r"missing input\(s\) 'k'.*inputs are 'x', 'k'"),
    ({"x": np.zeros((2, 3), np.float32), "k": np.zeros(2, np.int64), "z": np.zeros(1)}, r"unknown input\(s\) 'z'"),
    ({"x": np.zeros((3, 2), np.float32), "k": np.zeros(2, np.int64)}, r"'x' has shape \(3, 2\), expected \(2, 3\)"),
    ({"x": np.zeros((2, 3), np.float64), "k": np.zeros(2, np.int64)}, r"'x' has dtype float64, expected float32"),
    ({"x": np.zeros((2, 3), np.float32), "k": np.zeros(2, np.int32)}, r"'k' has dtype int32, expected int64"),
    ({"x": [[0.0] * 2] * 3, "k": np.zeros(2, np.int64)}, r"'x' has shape \(3, 2\), expected \(2, 3\)"),
    ({"x": np.zeros((2, 3), np.float32), "k": [0.5, 1]}, r"'k' is a list holding a fraction"),
    ([np.zeros((2, 3), np.float32)], r"input_feed must be a dict"),
])
def test_bad_inputs_are_rejected_before_the_native_call(module, lib_path, bad_feed, message):
    calls = probe(lib_path, "fixture_calls")
    with pytest.raises(ValueError, match=message):
        module.run(None, bad_feed)
    assert probe(lib_path, "fixture_calls") == calls


def test_random_inputs_match_the_specs_and_are_reproducible(module):
    a, b = module.random_inputs(seed=5), module.random_inputs(seed=5)
    assert {n: (v.shape, v.dtype) for n, v in a.items()} == {"x": ((2, 3), np.float32), "k": ((2,), np.int64)}
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(a["x"], module.random_inputs(seed=6)["x"])


# ---- threads, benchmark, profile -------------------------------------------------------------------------------
def test_num_threads_defaults_to_all_cores_and_validates(module):
    assert module.num_threads == runtime.default_num_threads()
    module.num_threads = 1
    assert module.num_threads == 1
    module.num_threads = 3
    assert module.num_threads == 3
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_threads must be an integer >= 1"):
            module.num_threads = bad
    assert module.num_threads == 3


def test_benchmark_reports_sane_statistics(module, lib_path):
    calls = probe(lib_path, "fixture_calls")
    stats = module.benchmark(repeat=7, warmup=2)
    assert set(stats) == {"median_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "repeat"}
    assert stats["repeat"] == 7 and probe(lib_path, "fixture_calls") == calls + 9
    assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"] < 1000
    assert stats["min_ms"] <= stats["mean_ms"] <= stats["max_ms"] and stats["std_ms"] >= 0
    with pytest.raises(ValueError, match="repeat >= 1"):
        module.benchmark(repeat=0)


def test_profile_rows_follow_the_kernels(module):
    rows = module.profile(repeat=5, inputs=feed())
    assert [r["name"] for r in rows] == ["fused_multiply", "fused_add", "fused_sum_add"]
    assert rows[2]["ops"] == ["sum", "add"] and rows[2]["output_shape"] == [2] and rows[2]["flops"] == 8
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    for r in rows:
        assert r["median_ms"] > 0
        assert r["gflops"] == pytest.approx(r["flops"] / (r["median_ms"] * 1e6))
    table = runtime.format_profile(rows)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["Node", "Name"] and lines[-1].startswith("Total_time")
    assert len(lines) == 2 + 3 + 1 and "fused_sum_add" in lines[4] and "sum,add" in lines[4]


def test_profile_rows_math():
    kernels = fixture_meta("p")["kernels"]
    samples = np.array([[1000, 3000, 4000], [2000, 3000, 6000], [1000, 5000, 4000]])  # medians 1, 3, 4 us
    rows = runtime.profile_rows(kernels, samples)
    assert [r["median_ms"] for r in rows] == [0.001, 0.003, 0.004]
    assert [r["share"] for r in rows] == pytest.approx([0.125, 0.375, 0.5])
    assert rows[0]["gflops"] == pytest.approx(6 / 1000)


# ---- export and load -------------------------------------------------------------------------------------------
def test_export_then_load_in_a_fresh_process_gives_identical_outputs(module, tmp_path):
    f = feed(4)
    want = module.run(None, f)
    exported = module.export_library(str(tmp_path / "out" / "model.so"))
    assert sorted(os.listdir(tmp_path / "out")) == ["model.so", "model.so.json", "model.so.params"]
    assert json.loads((tmp_path / "out" / "model.so.json").read_text())["params_file"] == "model.so.params"
    np.savez(tmp_path / "in.npz", **f)
    script = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        t0 = time.perf_counter()
        import runtime
        m = runtime.load_module({exported!r})
        load_s = time.perf_counter() - t0
        feed = dict(np.load({str(tmp_path / 'in.npz')!r}))
        np.savez({str(tmp_path / 'out.npz')!r}, *m.run(None, feed))
        assert 'onnx' not in sys.modules and 'llvmlite' not in sys.modules, sorted(sys.modules)
        assert load_s < 1.0, load_s
    """)
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, env=dict(os.environ, PYTHONPATH=REPO))
    got = np.load(tmp_path / "out.npz")
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[f"arr_{i}"], w)


def test_in_memory_params_may_be_unaligned_but_must_have_the_right_size(lib_path):
    meta = json.loads(open(lib_path + ".json").read())
    m = Module(lib_path, meta, params=unaligned_copy(PARAMS))
    f = feed(5)
    np.testing.assert_array_equal(m.run(["y"], f)[0], reference_outputs(f["x"], f["k"])[0])
    with pytest.raises(ValueError, match="must be a numpy array of 8 bytes, got 4 bytes"):
        Module(lib_path, meta, params=PARAMS[:1])


def test_owned_dir_is_deleted_with_the_module(lib_path, tmp_path):
    owned = tmp_path / "owned"
    owned.mkdir()
    m = Module(lib_path, json.loads(open(lib_path + ".json").read()), owned_dir=str(owned))
    m.run(None, feed())
    assert owned.exists()
    del m
    gc.collect()
    assert not owned.exists()


def test_a_rebuilt_library_at_the_same_path_is_really_reloaded(tmp_path):
    path = build_fixture_library(str(tmp_path))
    f = feed(6)
    old = load_module(path).run(["y"], f)[0]
    build_fixture_library(str(tmp_path), extra=1.0)  # new code, same path: dlopen alone would return the old one
    new = load_module(path).run(["y"], f)[0]
    np.testing.assert_array_equal(old, reference_outputs(f["x"], f["k"])[0])
    np.testing.assert_array_equal(new, reference_outputs(f["x"], f["k"], extra=1.0)[0])


# ---- load errors -----------------------------------------------------------------------------------------------
@pytest.fixture()
def copy_of_lib(lib_path, tmp_path):
    """A private copy of the fixture files, free to be corrupted."""
    for suffix in ("", ".json", ".params"):
        with open(lib_path + suffix, "rb") as src, open(tmp_path / ("m.so" + suffix), "wb") as dst:
            dst.write(src.read())
    edit_meta(str(tmp_path / "m.so"), params_file="m.so.params")
    return str(tmp_path / "m.so")


def edit_meta(path, **changes):
    meta = json.loads(open(path + ".json").read())
    meta.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del meta[key]
    with open(path + ".json", "w") as f:
        json.dump(meta, f)


def test_missing_files_are_named(copy_of_lib):
    with pytest.raises(FileNotFoundError, match="compiled library not found: .*nope.so"):
        load_module(copy_of_lib.replace("m.so", "nope.so"))
    os.unlink(copy_of_lib + ".params")
    with pytest.raises(FileNotFoundError, match=r"params file not found: .*m\.so\.params"):
        load_module(copy_of_lib)
    os.unlink(copy_of_lib + ".json")
    with pytest.raises(FileNotFoundError, match=r"metadata file not found: .*m\.so\.json"):
        load_module(copy_of_lib)


@pytest.mark.parametrize("changes, message", [
    ({"outputs": None}, r"missing field\(s\) outputs"),
    ({"format_version": 2}, "format_version must be 1"),
    ({"inputs": [{"name": "x", "shape": [2, -3], "dtype": "float32"}]}, r"inputs\[0\]\.shape must be a list of non"),
    ({"inputs": [{"name": "x", "shape": [2], "dtype": "complex64"}]}, r"inputs\[0\]\.dtype must be a numeric"),
    ({"kernels": [{"name": "k"}]}, r"kernels\[0\] must be an object with name, ops"),
    ({"workspace_bytes": "24"}, "'workspace_bytes' must be a non-negative int"),
])
def test_corrupt_metadata_is_reported_with_file_and_field(copy_of_lib, changes, message):
    edit_meta(copy_of_lib, **changes)
    with pytest.raises(LoadError, match=message) as info:
        load_module(copy_of_lib)
    assert "m.so" in str(info.value)


def test_invalid_json_and_non_library_files_are_load_errors(copy_of_lib, tmp_path):
    with open(copy_of_lib + ".json", "w") as f:
        f.write('{"format_version": 1,')
    with pytest.raises(MetadataError, match=r"corrupt metadata in .*m\.so\.json: not valid JSON"):
        load_module(copy_of_lib)
    meta = fixture_meta("m.so.params")
    garbage = tmp_path / "garbage.so"
    garbage.write_bytes(b"\x7fELF not really")
    with pytest.raises(LoadError, match="cannot load compiled library .*garbage.so"):
        Module(str(garbage), meta, params=PARAMS)
    src = tmp_path / "other.c"
    src.write_text("int relayish_run(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "other.so"), str(src)], check=True)
    with pytest.raises(LoadError, match="other.so is not a relayish library: it does not export relayish_run_prof"):
        Module(str(tmp_path / "other.so"), meta, params=PARAMS)


# ---- target checks ---------------------------------------------------------------------------------------------
def test_a_library_for_missing_cpu_features_is_refused(copy_of_lib, monkeypatch):
    edit_meta(copy_of_lib, target={"triple": fixture_meta("")["target"]["triple"], "cpu": "skylake-avx512",
                                   "features": "+avx2,+avx512f,-xop,+evex512"})
    reseal(copy_of_lib)  # a library really built on another machine, not an edited one
    monkeypatch.setattr(runtime.target, "host_cpu_flags", lambda: frozenset({"sse2", "avx", "avx2"}))
    with pytest.raises(TargetMismatchError, match=r"m\.so was compiled for CPU 'skylake-avx512' with features this "
                                                  r"CPU lacks: avx512f"):
        load_module(copy_of_lib)


def test_target_checks():
    host = frozenset({"sse4_1", "avx2", "avx512f", "avx512_vnni", "pni"})
    assert missing_features("+sse4.1,+sse3,+avx512vnni,+avx512bw,-fma4,+fast-gather", host) == ["avx512bw"]
    assert missing_features(["avx2", "+fma"], host) == ["fma"]
    check_target({"triple": "x86_64-pc-linux-gnu", "features": "+avx2"}, "lib.so", host_flags=host, machine="x86_64")
    with pytest.raises(TargetMismatchError, match="lib.so was compiled for aarch64-unknown-linux-gnu, but this "
                                                  "machine is x86_64"):
        check_target({"triple": "aarch64-unknown-linux-gnu"}, "lib.so", host_flags=host, machine="x86_64")


def test_a_different_cpu_name_only_warns(monkeypatch):
    monkeypatch.setattr(runtime.target, "_host_cpu_name", lambda: "znver5")
    target = {"triple": "x86_64-unknown-linux-gnu", "cpu": "skylake", "features": "+avx2"}
    with pytest.warns(RuntimeWarning, match="lib.so was tuned for CPU 'skylake' but runs on 'znver5'"):
        check_target(target, "lib.so", host_flags=frozenset({"avx2"}), machine="x86_64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_target(dict(target, cpu="znver5"), "lib.so", host_flags=frozenset({"avx2"}), machine="x86_64")


def test_aligned_empty_is_aligned_for_every_shape():
    for shape in [(), 0, (0, 5), (1,), (3, 7), (2, 3, 5, 7)]:
        for dtype in (np.float32, np.int64, np.uint8):
            a = runtime.aligned_empty(shape, dtype)
            assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and a.dtype == dtype
            assert a.shape == ((shape,) if isinstance(shape, int) else shape)

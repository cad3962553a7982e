"""ResNet-18 end to end: compiled vs onnxruntime (both variants, both layouts, batch 2), export and load in a
fresh process, and the boundary checks of a compiled model."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest

from compiler import compile_model

TOL = 1e-4


def ort_run(path, feed):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feed)


def rel_err(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module")
def compiled(resnet18_path):
    return compile_model(str(resnet18_path))


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)


def test_resnet18_matches_onnxruntime(compiled, resnet18_path, image):
    ours, = compiled.run(None, {"input": image})
    ref, = ort_run(resnet18_path, {"input": image})
    assert ours.shape == (1, 1000)
    assert rel_err(ours, ref) <= TOL
    # the kernels are one per conv, with bias/residual/relu fused
    ops = [k["ops"] for k in compiled.kernels]
    assert sum(o[0] in ("nn.conv2d_nchwc", "nn.conv2d_winograd_nchwc") for o in ops) == 20
    assert not any(o in (["add"], ["nn.relu"], ["add", "nn.relu"]) for o in ops)


def test_resnet18_folded_and_nchw_match(resnet18_folded_path, image):
    ref, = ort_run(resnet18_folded_path, {"input": image})
    for layout in ("NCHWc", "NCHW"):
        ours, = compile_model(str(resnet18_folded_path), layout=layout).run(None, {"input": image})
        assert rel_err(ours, ref) <= TOL, layout


def test_symbolic_batch_bound_at_compile_time(resnet18_dynamic_path):
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
    sess = compile_model(str(resnet18_dynamic_path), input_shapes={"input": (2, 3, 224, 224)})
    ours, = sess.run(None, {"input": x})
    ref, = ort_run(resnet18_dynamic_path, {"input": x})
    assert ours.shape == (2, 1000) and rel_err(ours, ref) <= TOL


def test_export_and_load_in_a_fresh_process(compiled, image, tmp_path):
    lib = tmp_path / "resnet18.so"
    compiled.export_library(str(lib))
    np.save(tmp_path / "x.npy", image)
    ours, = compiled.run(None, {"input": image})
    script = textwrap.dedent(f"""
        import json, sys, time
        import numpy as np
        t = time.perf_counter()
        import runtime
        m = runtime.load_module({str(lib)!r})
        load_s = time.perf_counter() - t
        out, = m.run(None, {{"input": np.load({str(tmp_path / 'x.npy')!r})}})
        np.save({str(tmp_path / 'y.npy')!r}, out)
        print(json.dumps({{"load_s": load_s, "onnx": "onnx" in sys.modules, "llvmlite": "llvmlite" in sys.modules}}))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert not info["onnx"] and not info["llvmlite"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), ours)


@pytest.mark.parametrize("feed, message", [
    ({"image": None}, "input"),
    ({"input": np.zeros((1, 3, 224, 225), np.float32)}, "(1, 3, 224, 224)"),
    ({"input": np.zeros((1, 3, 224, 224), np.float64)}, "float32"),
    ({}, "input"),
])
def test_bad_inputs_are_rejected_before_native_code(compiled, feed, message):
    with pytest.raises(ValueError) as err:
        compiled.run(None, feed)
    assert message in str(err.value)


def test_threads_do_not_change_results(compiled, image):
    compiled.num_threads = 1
    one, = compiled.run(None, {"input": image})
    compiled.num_threads = 2
    two, = compiled.run(None, {"input": image})
    np.testing.assert_array_equal(one, two)

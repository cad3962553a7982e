"""bench/dispatch.py: its chains really are one kernel per op, serial at the tiny size and parallel at the small one,
and a tiny measurement gives positive times (no timing is asserted: this machine is shared)."""
from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import pytest

from relayish_tools.bench.dispatch import OPT_LEVEL, SIZES, chain_model, format_dispatch, measure_dispatch, parallel_kernels
from compiler import compile_model


@pytest.mark.parametrize("n", [1, 5])
def test_chain_compiles_to_one_kernel_per_op(n):
    module = compile_model(chain_model(n, SIZES["tiny"]), opt_level=OPT_LEVEL)
    assert len(module.kernels) == n
    assert all(k["ops"] == ["nn.relu"] for k in module.kernels)
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(SIZES["tiny"])
    y, = module.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_tiny_chain_is_serial_and_small_chain_parallel():
    assert parallel_kernels(chain_model(3, SIZES["tiny"])) == [False] * 3
    assert parallel_kernels(chain_model(3, SIZES["small"])) == [True] * 3


def test_bound_run_is_the_native_call_of_run():
    module = compile_model(chain_model(2, SIZES["small"]), opt_level=OPT_LEVEL)
    x = np.random.default_rng(0).standard_normal(SIZES["small"]).astype(np.float32)
    with module.bound_run({"x": x}) as call:
        call()
        np.testing.assert_array_equal(call.outputs["y"], module.run(None, {"x": x})[0])
    with pytest.raises(ValueError, match="input 'x'"):
        with module.bound_run({"x": x[..., :4]}):
            pass


def test_measure_dispatch_gives_positive_times():
    result = measure_dispatch(threads=2, repeat=2, chain=3, warmup=1, block=2, calls=2, idle_gap_s=0.001)
    assert set(result["sizes"]) == set(SIZES)
    for r in result["sizes"].values():
        assert r["agree"] and r["kernels"] == 3
        assert all(t > 0 for t in r["us"].values()), r["us"]
        assert all(math.isfinite(v) for v in r["per_kernel_us"].values())
        assert r["ort_run_us"] > 0 and math.isfinite(r["run_python_us"])
    assert result["sizes"]["small"]["parallel"] and not result["sizes"]["tiny"]["parallel"]
    assert "us/kernel" in format_dispatch(result)


def _running_threads() -> list[str]:
    """Threads of this process other than the calling one that are running or runnable (a spinning pool worker
    is; one asleep on its futex is not)."""
    me, running = threading.get_native_id(), []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        if int(task) != me and state == "R":
            running.append(task)
    return running


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_pool_sleeps_soon_after_a_run():
    """The executor's last call lets the workers linger (threadpool.LINGER_CYCLES, ~0.1 ms), not spin on: they
    are asleep well within a second after the run."""
    module = compile_model(chain_model(3, SIZES["small"]), opt_level=OPT_LEVEL)
    module.num_threads = 2
    x = np.ones(SIZES["small"], np.float32)
    for _ in range(20):
        module.run(None, {"x": x})
    deadline = time.monotonic() + 2.0
    while _running_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _running_threads()

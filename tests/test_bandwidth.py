"""The read-bandwidth micro-kernel (bench/bandwidth.py) and the roofline columns of bench/kernel_bench.py.

The kernel must really read every byte: its stored partial sums are compared exactly with numpy's sums of the same
chunks (small integers in float32, so every partial sum is exact whatever the order of additions)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.codegen import vector_width
from relayish_tools.bench.bandwidth import (bandwidth_assembly, granule, inner_loop_vector_loads, measure_bandwidth,
                              parse_size, round_to_granule, stream_sums)
from relayish_tools.bench.kernel_bench import format_roofline, header, roofline

LANES = vector_width("float32")


def integer_values(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, n).astype(np.float32)


@pytest.mark.parametrize("threads, accumulators, blocks", [(1, 8, 3), (2, 8, 5), (2, 4, 1), (3, 2, 7)])
def test_partial_sums_equal_numpy(threads, accumulators, blocks):
    """Row t of the stored sums is the lane-wise sum of chunk t: a skipped, repeated or shifted vector shows."""
    n = granule(threads, accumulators) // 4 * blocks
    values = integer_values(n)
    sums = stream_sums(values, threads, accumulators)
    expected = values.reshape(threads, -1, LANES).sum(axis=1, dtype=np.float64)
    assert sums.shape == (threads, LANES)
    np.testing.assert_array_equal(sums, expected)


def test_partial_sums_of_an_unaligned_view():
    values = integer_values(granule(2) // 4 * 2 + 1, seed=1)[1:]  # a view 4 bytes past an aligned start
    np.testing.assert_array_equal(stream_sums(values, 2).sum(axis=1),
                                  values.reshape(2, -1).sum(axis=1, dtype=np.float64))


@pytest.mark.parametrize("threads", [1, 2])
def test_bandwidth_is_positive_and_finite(threads):
    gbs = measure_bandwidth(granule(threads) * 64, threads, repeat=3, seconds=0.002)
    assert math.isfinite(gbs) and gbs > 0


def test_inner_loop_reads_with_vector_loads():
    """The innermost loop holds whole-vector loads only, one per accumulator (or a multiple, if unrolled)."""
    loads = inner_loop_vector_loads(bandwidth_assembly(accumulators=8))
    register = {16: "zmm", 8: "ymm", 4: "xmm"}[LANES]
    assert loads and len(loads) % 8 == 0, loads
    assert all(register in line for line in loads), loads


@pytest.mark.parametrize("call, message", [
    (lambda: measure_bandwidth(granule(2) + 4, 2), "multiple of"),
    (lambda: measure_bandwidth(0, 1), "multiple of"),
    (lambda: measure_bandwidth(granule(1), 0), "threads must be >= 1"),
    (lambda: measure_bandwidth(granule(1), 1, repeat=0), "repeat must be >= 1"),
    (lambda: measure_bandwidth(granule(1, 4), 1, accumulators=0), "accumulators must be >= 1"),
    (lambda: stream_sums(np.zeros(granule(1) // 4 + LANES, np.float32), 1), "multiple of"),
    (lambda: stream_sums(np.zeros(granule(1) // 8, np.float64), 1), "float32"),
    (lambda: stream_sums(np.zeros(granule(1) // 4, np.float32), -1), "threads must be >= 1"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_granule_and_rounding():
    assert granule(2, 8) == 2 * 8 * LANES * 4
    assert round_to_granule(1, 2) == granule(2)  # never zero
    assert round_to_granule(2_058_048, 2) % granule(2) == 0
    assert abs(round_to_granule(2_058_048, 2) - 2_058_048) <= granule(2) // 2


def test_parse_size():
    assert parse_size("256K") == 256 << 10 and parse_size("64M") == 64 << 20 and parse_size("4096") == 4096
    assert parse_size("2MiB") == 2 << 20
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("two megs")


def test_roofline_takes_the_lower_bound():
    assert roofline(0.5, 500.0, 250.0) == pytest.approx(125.0)  # memory bound
    assert roofline(10.0, 500.0, 250.0) == pytest.approx(500.0)  # compute bound
    assert roofline(0.5, None, 250.0) == pytest.approx(125.0)
    assert roofline(0.5, 500.0, None) == pytest.approx(500.0)
    assert roofline(0.5, None, None) is None


def test_roofline_columns():
    row = {"ai": 0.5, "bandwidth": 250.0, "roof": 125.0, "hand": {"roof": 0.9}, "default": {"roof": 0.45},
           "ort": {"roof": 0.6}}
    cells = format_roofline(row).split()
    assert cells == ["0.50", "250.0", "125.0", "90.0%", "45.0%", "60.0%"]
    no_bandwidth = format_roofline({"ai": 0.5, "bandwidth": None, "roof": None, "hand": {"roof": None},
                                    "default": {"roof": None}, "ort": {"roof": None}}).split()
    assert no_bandwidth == ["0.50"] + ["-"] * 5
    assert "AI" in header(False).splitlines()[0] and "% of roof" in header(True).splitlines()[1]

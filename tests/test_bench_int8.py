"""The int8 benchmarks' kernels (no timing here): bench.peak_int8's loop is vpdpbusd on registers only, and
bench.op_table_int8's engines are built and checked (ours exact, onnxruntime within a step) on small cases."""
from __future__ import annotations

import re

import pytest

from relayish_tools.bench.op_table_int8 import QConv, QMatMul, checked_engines
from relayish_tools.bench.peak_int8 import default_chains, int8_lanes, measure_int8_peak, peak_assembly
from compiler.codegen import vector_width


def test_int8_peak_loop_is_vpdpbusd_on_registers():
    if int8_lanes() is None:
        pytest.skip("the host has no AVX-512 VNNI or AVX-VNNI: there is no vpdpbusd peak to measure")
    chains = default_chains(int8_lanes())
    asm = peak_assembly(chains)
    # label: `chains` vpdpbusd on registers, the counter, a jump back to the label
    loop = re.compile(r"^(\.LBB\w+):.*\n(?:\s*#.*\n)*(?:\s*vpdpbusd\s+%[xyz]mm\d+, %[xyz]mm\d+, %[xyz]mm\d+.*\n){"
                      + str(chains) + r"}\s*\w+\s+[^\n]*\n\s*j\w+\s+\1\b", re.M)
    assert loop.search(asm), asm
    assert measure_int8_peak(1, chains, seconds=1e-4, repeat=1) > 0  # it runs (not a timing)


@pytest.mark.parametrize("case", [QConv("test", 12, 20, 9, 3, 2, 1), QConv("test rgb", 3, 16, 11, 7, 2, 3),
                                  QMatMul("test", 5, 30, 40), QMatMul("test batch 1", 1, 64, 100)],
                         ids=lambda c: c.shape())
def test_int8_op_table_engines_are_checked(case):
    engines, task = checked_engines(case, 2, vector_width())
    assert [e.name for e in engines] == ["ours", "ort"] and any(op.startswith("qnn.") for op in task.ops)

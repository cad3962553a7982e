"""Reductions of few, long rows (relayish/ops/rows.py row_chunks): a sum over every axis, a softmax or layer norm
of one or two rows, a global pool of few channels. Each row is cut into chunks with vector partials of their own
(the threads' work), reduced per lane, then over the lanes. Three ways (compiled vs the numpy interpreter vs
onnxruntime), against a float64 sum for accuracy, and the kernel's structure (parallel and vectorized)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen.analysis import walk_stmt
from compiler.default_schedule import default_schedule
from compiler.loopir import For
from compiler.lower import lower
from compiler.passes import PassContext, run_pipeline
from compiler.task import extract_tasks
from frontends import from_onnx
from harness import compiled_and_interpreted, make_model, relative_error, three_way_random
from relayish.ops.rows import ROW_CHUNK_VECTORS, row_accumulators, row_chunks


def reduce_model(op, shape, axes, keepdims=1):
    if op == "ReduceSum":  # opset 13: ReduceSum takes its axes as an input
        return make_model(op, {"x": shape}, {"keepdims": keepdims}, 13, {"axes": np.array(axes, np.int64)})
    return make_model(op, {"x": shape}, {"axes": axes, "keepdims": keepdims}, 13)


def test_row_chunks():
    assert row_chunks(1, 13312) == 8  # (1, 104, 2048) in vectors of 16: 8 chunks of 1,664 vectors
    assert row_chunks(2, 100_000) == 1  # two rows: each thread takes whole rows
    assert row_chunks(1, 2 * ROW_CHUNK_VECTORS - 1) == 1  # too short for two chunks
    chunks = row_chunks(1, 10_007 * 4, 4)  # a prime count of groups of 4 vectors: the chunks leave the fewest over
    assert 4 <= chunks <= 8 and 10_007 % chunks == min(10_007 % c for c in range(4, 9))


def test_row_accumulators():
    assert row_accumulators(803) == 4 and row_accumulators(10) == 2 and row_accumulators(7) == 1
    assert row_accumulators(803, "float16") == 1  # 16-bit floats round in the partials' order


@pytest.mark.parametrize("op, shape, axes", [
    ("ReduceSum", (1, 104, 2048), [0, 1, 2]),  # whole vectors, 64 chunks
    ("ReduceSum", (443, 384), [0, 1]),
    ("ReduceMax", (3, 5, 4099), [0, 1, 2]),  # vectors over the chunks, and a tail
    ("ReduceMin", (2, 70001), [1]),  # two rows, each chunked
    ("ReduceMean", (2, 1536), [0, 1]),
    ("ReduceMax", (1, 16, 3, 3), [0, 1, 2, 3]),  # one row, too short for chunks
])
def test_few_long_rows_three_ways(op, shape, axes):
    three_way_random(reduce_model(op, shape, axes, keepdims=len(shape) % 2))


@pytest.mark.parametrize("op, shape, attrs", [("Softmax", (2, 10860), {"axis": -1}),
                                              ("Softmax", (1, 65537), {"axis": -1}),
                                              ("GlobalAveragePool", (1, 3, 224, 224), {})])
def test_row_ops_of_few_long_rows_three_ways(op, shape, attrs):
    three_way_random(make_model(op, {"x": shape}, attrs, 17))


def test_layer_norm_of_one_long_row_three_ways():
    d = 30011
    rng = np.random.default_rng(3)
    consts = {"g": rng.standard_normal(d).astype(np.float32), "b": rng.standard_normal(d).astype(np.float32)}
    three_way_random(make_model("LayerNormalization", {"x": (1, 1, d)}, {"axis": -1}, 17, consts))


def test_a_sum_over_every_axis_is_accurate():
    """170,112 values that cancel to a sum of 20: one serial float32 loop (the plain reduction's, before chunks)
    is 1.2e-4 off the float64 sum; chunks and lanes of partials keep the result within 1e-5 of it."""
    x = np.random.default_rng(1).standard_normal((443, 384))
    x = (x - x.mean() + 20 / x.size).astype(np.float32)
    exact = x.astype(np.float64).sum(keepdims=True)
    assert relative_error(np.cumsum(x.ravel())[-1:].reshape(1, 1), exact) > 1e-4  # what a serial loop gives
    (ours,), _ = compiled_and_interpreted(reduce_model("ReduceSum", x.shape, [0, 1]), {"x": x})
    assert relative_error(ours, exact) <= 1e-5


def test_a_sum_over_every_axis_runs_in_parallel_vectors():
    fused = run_pipeline(from_onnx(reduce_model("ReduceSum", (1, 104, 2048), [0, 1, 2])), PassContext())
    task, = extract_tasks(fused)
    kernel = lower(default_schedule(task.initial_state(), 16).apply(task.initial_state()))
    kinds = {s.kind for s in walk_stmt(kernel.body) if isinstance(s, For)}
    assert {"parallel", "vectorize"} <= kinds


@pytest.mark.parametrize("op, shape", [("Softmax", (550, 728)), ("Softmax", (31, 12858)), ("LogSoftmax", (16, 1000)),
                                       ("Softmax", (2, 8, 4, 130)), ("LayerNormalization", (64, 769))])
def test_rows_computed_row_by_row_three_ways(op, shape):
    """Enough rows (compiler/row_schedule.py): one parallel loop over the rows, every stage of a row computed at
    it into a buffer of one row, partials in groups of vectors."""
    d = shape[-1]
    consts = {"g": np.linspace(0.5, 1.5, d, dtype=np.float32), "b": np.linspace(-1, 1, d, dtype=np.float32)} \
        if op == "LayerNormalization" else None
    model = make_model(op, {"x": shape}, {"axis": -1}, 17, consts)
    fused = run_pipeline(from_onnx(model), PassContext())
    task, = extract_tasks(fused)
    kernel = lower(default_schedule(task.initial_state(), 16).apply(task.initial_state()))
    assert [s.kind for s in walk_stmt(kernel.body) if isinstance(s, For) and s.kind == "parallel"] == ["parallel"]
    assert len(kernel.params) == len(task.inputs) + 1  # no global buffer of intermediates: they live in a row's
    three_way_random(model)

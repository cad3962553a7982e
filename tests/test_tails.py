"""Extents that are not multiples of the register tile: dense, matmul and softmax over N = 17, 41, 1001, K = 27,
147, odd rows. Three ways (compiled vs the numpy interpreter vs onnxruntime), and the structure that keeps them fast:
the full tiles of a split that does not divide run a copy of the nest without its guard (compiler/lower.py
tail_version), and a packed weight padded to whole blocks lets the last tile compute past the end of the output
instead of clamping every tile's base (lower.py _reads_in_bounds_past_end)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen.analysis import stmt_exprs, vectorize_blocker, walk_expr, walk_stmt
from compiler.default_schedule import default_schedule
from compiler.loopir import For, IfThenElse, Load
from compiler.lower import lower
from compiler.passes import PassContext, run_pipeline
from compiler.passes.layout import dense_block
from compiler.task import extract_tasks
from frontends import from_onnx
from harness import make_model, three_way_random
from relayish import te

RNG = np.random.default_rng(7)


def gemm_model(m, k, n):
    consts = {"w": RNG.standard_normal((n, k)).astype(np.float32), "b": RNG.standard_normal(n).astype(np.float32)}
    return make_model("Gemm", {"x": (m, k)}, dict(transB=1), 17, consts)


def matmul_model(batch, m, k, n):
    return make_model("MatMul", {"x": (batch, m, k)}, {}, 17, {"w": RNG.standard_normal((k, n)).astype(np.float32)})


@pytest.mark.parametrize("m, k, n", [(1, 27, 17), (1, 147, 1001), (1, 1021, 1863), (1, 780, 22), (4, 27, 41), (8, 147, 1001), (3, 64, 100),
                                     (32, 64, 8210)])
def test_dense_with_a_partial_column_tile(m, k, n):
    three_way_random(gemm_model(m, k, n))


@pytest.mark.parametrize("units, block", [(1000, 8), (8210, 16), (1863, 16), (22, 8), (17, 8), (3, 3), (64, 16)])
def test_a_batch_1_dense_packs_power_of_two_blocks(units, block):
    """Blocks of output features are whole vectors or half ones: a divisor such as 1863's 9 gave 9-lane vectors
    (bench.shapes: 16x onnxruntime's time); padding is cheap for a constant weight."""
    assert dense_block(units, 16) == block


@pytest.mark.parametrize("batch, m, k, n", [(1, 80, 32, 6625), (2, 6, 27, 41), (1, 77, 64, 77)])
def test_matmul_with_a_partial_column_tile(batch, m, k, n):
    three_way_random(matmul_model(batch, m, k, n))


@pytest.mark.parametrize("batch, m, k, n", [(16, 233, 128, 3), (4, 8, 128, 1), (3, 5, 9, 2), (1, 12, 64, 10),
                                             (2, 7, 33, 5)])
def test_matmul_narrower_than_a_vector(batch, m, k, n):
    """Fewer columns than a vector take the register tile with one partial vector of the narrowest width that
    holds them (B=16 M=233 K=128 N=3 ran 6x onnxruntime's time in the generic rule's scalar loops)."""
    three_way_random(make_model("MatMul", {"a": (batch, m, k), "c": (batch, k, n)}, {}, 17))


@pytest.mark.parametrize("n", [17, 1001, 6625])
def test_softmax_over_a_row_that_is_not_whole_vectors(n):
    three_way_random(make_model("Softmax", {"x": (3, n)}, dict(axis=-1), 17))


@pytest.mark.parametrize("n, lanes", [(10860, 16), (1583, 16), (4104, 16), (4096, 16)])
def test_a_long_row_runs_in_whole_vectors(n, lanes):
    """A row whose length only a quarter vector divides (10,860 = 4 x 2,715) runs in whole vectors with a masked
    last one, not in vectors of 4 (a tanh ran 3.4x slower so); two rows run as one flat run (flat_schedule.py)."""
    kernel = _kernel(make_model("Tanh", {"x": (2, n)}, {}, 17))
    assert {loop.extent.value for loop in _loops(kernel.body) if loop.kind == "vectorize"} == {lanes}
    three_way_random(make_model("Tanh", {"x": (2, n)}, {}, 17))


@pytest.mark.parametrize("n", [22, 41, 60])
def test_a_short_row_of_packed_blocks_runs_in_block_vectors(n):
    """A batch-1 dense of 22 units reads its packed weight in blocks of 8: the 22 columns are not one contiguous
    vector, so they run as 3 vectors of 8, the last masked (they ran as 22 scalar reductions, 8x slower)."""
    kernel = _kernel(gemm_model(1, 780, n))
    assert any(loop.kind == "vectorize" for loop in _loops(kernel.body))
    three_way_random(gemm_model(1, 780, n))


@pytest.mark.parametrize("shape, other, lanes", [((1, 768, 23, 23), None, 16), ((3, 5, 7), None, 16),
                                                  ((1, 40, 9, 9), (1, 40, 1, 1), 16), ((2, 9, 9), (9, 9), 16)])
def test_a_short_last_axis_runs_fused_with_the_axes_before_it(shape, other, lanes):
    """A last axis of 23 is no vector width: the axes before it that every read walks contiguously with it (all
    of them for a Tanh; H and W for a per-channel broadcast) run as one axis in whole vectors, the last masked
    (compiler/flat_schedule.py), not in vectors of 23 lanes (1.9x onnxruntime's time)."""
    model = make_model("Tanh", {"x": shape}, {}, 17) if other is None else \
        make_model("Add", {"x": shape, "y": other}, {}, 17)
    kernel = _kernel(model)
    assert {loop.extent.value for loop in _loops(kernel.body) if loop.kind == "vectorize"} == {lanes}
    three_way_random(model)


def test_few_rows_run_as_one_flat_run():
    """31 rows are too few for the parallel loop alone: rather than fusing each row's vectors into it (every
    vector's index then divided by the row length: a third of an Exp over 31 x 12858), the rows run as one flat
    run of vectors, its indices free of division."""
    kernel = _kernel(make_model("Exp", {"x": (31, 1001)}, {}, 17))
    indices = [te.expr_str(x.index) for st in walk_stmt(kernel.body) for x in stmt_exprs(st) for x in walk_expr(x)
               if isinstance(x, Load)]
    assert indices and not any("//" in i or "%" in i for i in indices)
    three_way_random(make_model("Exp", {"x": (31, 1001)}, {}, 17))


def test_flat_tail_stops_at_a_read_that_is_not_contiguous():
    from compiler.flat_schedule import flat_tail
    x = te.placeholder((4, 6, 5), name="x")
    b = te.placeholder((6, 1), name="b")
    y = te.compute((4, 6, 5), lambda i, j, k: x[i, j, k] + b[j, 0], name="y")  # b: per j, broadcast over k
    z = te.compute((4, 6, 5), lambda i, j, k: x[i, j, k] * 2.0, name="z")
    from compiler.schedule import initial_state
    state = initial_state([y], [x, b])
    assert flat_tail(state, state.stage("y")) == 1  # fusing (j, k) would read b at f // 5: not contiguous
    state = initial_state([z], [x])
    assert flat_tail(state, state.stage("z")) >= 2


def _kernel(model):
    fused = run_pipeline(from_onnx(model), PassContext())
    task, = extract_tasks(fused)
    return lower(default_schedule(task.initial_state(), 16).apply(task.initial_state()))


def _loops(stmt):
    return [s for s in walk_stmt(stmt) if isinstance(s, For)]


def test_full_tiles_run_unguarded_vector_loops():
    """N = 41 in tiles of 2 x 16 columns: the parallel loop's body is versioned; in the full-tile copy no
    vectorized loop holds a lane-dependent guard, the tail copy keeps one (codegen runs it masked)."""
    kernel = _kernel(gemm_model(32, 32, 41))
    versions = [s for s in _loops(kernel.body) if s.kind == "parallel"]
    assert len(versions) == 1
    version = next(s for s in walk_stmt(versions[0].body) if isinstance(s, IfThenElse))
    full = [loop for loop in _loops(version.then_case) if loop.kind == "vectorize"]
    tail = [loop for loop in _loops(version.else_case) if loop.kind == "vectorize"]
    assert full and tail and all(vectorize_blocker(loop) is None for loop in full + tail)
    assert not any(_lane_guards(loop) for loop in full)
    assert any(_lane_guards(loop) for loop in tail)


def test_a_matmul_too_small_for_the_fork_join_runs_serially():
    """8 x 32 x 41 = 10,496 multiply-adds cost about as much as handing them to the other thread."""
    assert not [s for s in _loops(_kernel(gemm_model(8, 32, 41)).body) if s.kind == "parallel"]
    assert [s for s in _loops(_kernel(gemm_model(32, 32, 41)).body) if s.kind == "parallel"]


def _lane_guards(loop) -> list:
    return [s for s in walk_stmt(loop.body) if isinstance(s, IfThenElse) and loop.var in
            {v for v in walk_expr(s.cond) if isinstance(v, te.Var)}]


def test_a_padded_weight_is_read_without_clamped_tile_bases():
    """The dense's weight is packed in whole blocks (zero columns past N): the tile's loads of it are affine in the
    loop variables, with no min/max of a clamped base (which would make every tile's vector load a gather)."""
    kernel = _kernel(gemm_model(8, 32, 41))
    weight = kernel.params[1]
    assert weight.shape[0] * weight.shape[2] == 64  # 41 columns padded to 2 blocks of 32
    loads = [e for st in walk_stmt(kernel.body) for x in stmt_exprs(st) for e in walk_expr(x)
             if isinstance(e, Load) and e.buffer is weight]
    assert loads
    for load in loads:
        assert not any(isinstance(n, te.BinOp) and n.op in ("min", "max") for n in walk_expr(load.index))



@pytest.mark.parametrize("op, shape, axes", [("ReduceMean", (5, 503), [1]), ("ReduceMax", (3, 7, 46, 46), [2, 3]),
                                             ("ReduceSum", (2, 3, 5, 41), [1, 2, 3]), ("ReduceMin", (4, 9, 33), [2])])
def test_reductions_over_trailing_axes_as_contiguous_rows(op, shape, axes):
    """A reduction over the last axes reads them as one contiguous row in vector partials plus a tail."""
    attrs = {"axes": axes, "keepdims": int(len(shape) % 2)}
    if op == "ReduceSum":  # opset 13: ReduceSum takes its axes as an input
        model = make_model(op, {"x": shape}, {"keepdims": attrs["keepdims"]}, 13,
                           {"axes": np.array(axes, np.int64)})
    else:
        model = make_model(op, {"x": shape}, attrs, 13)
    three_way_random(model)


@pytest.mark.parametrize("channels, size", [(1237, 46), (3, 7), (17, 13)])
def test_global_average_pool_over_rows(channels, size):
    three_way_random(make_model("GlobalAveragePool", {"x": (1, channels, size, size)}, {}, 17), layout="NCHW")


def test_a_reshaped_index_recombines_to_the_flat_one():
    from compiler.arith import simplify
    c, l = te.Var("c"), te.Var("l")
    q = l // 5
    index = c * 60 + (q // 3) * 15 + (q % 3) * 5 + l % 5  # x[c, l // 15, (l // 5) % 3, l % 5] of x (C, 4, 3, 5)
    assert te.expr_str(simplify(index, {c: 8, l: 60})) == "((c * 60) + l)"
    assert te.expr_str(simplify(q * 4 + l % 5, {l: 60})) == te.expr_str(simplify(q * 4 + l % 5, {l: 60}))
    assert "%" in te.expr_str(simplify(q * 4 + l % 5, {l: 60}))  # 4 is not the modulus: nothing to recombine

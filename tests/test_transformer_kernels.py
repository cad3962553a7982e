"""Default schedules of the transformer kernels: matmul register tiles (compiler/matmul_schedule.py) with their
epilogue in the same kernel, and the row form of softmax and layer norm (relayish/ops/rows.py), vectorized and
parallel. Structure checks, then every schedule compiled and compared with the numpy reference."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.default_schedule import default_schedule
from compiler.matmul_schedule import matmul_tile
from compiler.schedule import Annotate, CacheWrite, ComputeAt, ComputeInline
from compiler.task import build_task
from relayish.expr import Attrs, Function, TensorType, Var, call
from test_kernels import assert_matches_reference, run_compiled


def matmul_task(a_shape, b_shape, bias=True, gelu=False):
    a, b = Var("a", TensorType(a_shape)), Var("b", TensorType(b_shape))
    y, params = call("nn.matmul", a, b), [a, b]
    if bias:
        c = Var("c", TensorType((b_shape[-1],)))
        y, params = call("add", y, c), params + [c]
    if gelu:
        y = call("nn.gelu", y)
    return build_task(Function(tuple(params), y, Attrs(Primitive=1)))


def annotations(schedule) -> set:
    return {(s.stage, s.iter, s.annotation) for s in schedule.steps if isinstance(s, Annotate)}


def test_matmul_tile_divides_and_fills_registers():
    rows, cols, lane = matmul_tile(128, 1024, 1, 16)
    assert lane == 16 and 128 % rows == 0 and (1024 // 16) % cols == 0
    assert rows >= 4 and rows * cols >= 16  # a tile of several rows: each loaded vector of b feeds `rows` FMAs
    assert matmul_tile(64, 1000, 1, 16)[2] == 8  # 1000 columns: half vectors
    assert matmul_tile(12, 10, 1, 16)[1:] == (1, 16)  # no vector divides the columns: one partial vector
    assert matmul_tile(233, 3, 16, 16)[1:] == (1, 4)  # fewer columns than a vector: the narrowest that holds them


@pytest.mark.parametrize("vw", [8, 16])
def test_matmul_tile_prefers_few_loads_per_fma(vw):
    """Among tiles of the most accumulators, the one whose r broadcasts and c vector loads feed the r c FMAs
    with the fewest loads: BERT's 128 x 256 output on 8 lanes takes 4 x 2 (6 loads per 8 FMAs), not 8 x 1 (9)."""
    for m, n in ((128, 256), (128, 1024), (64, 4096)):
        rows, cols, lane = matmul_tile(m, n, 1, vw)
        assert (rows + cols) / (rows * cols) <= 0.75, (m, n, rows, cols)


def test_projection_matmul_is_register_tiled_with_bias_and_gelu_in_the_tile():
    task = matmul_task((1, 128, 256), (256, 1024), gelu=True)
    assert task.ops == ["nn.matmul", "add", "nn.gelu"]
    sched = default_schedule(task.initial_state())
    at = [s for s in sched.steps if isinstance(s, ComputeAt)]
    assert [(s.stage, s.target) for s in at] == [("matmul", "gelu")]  # the epilogue reads the tile's registers
    assert at[0].iter == "i@k.0.0@j.0"  # parallel over batch x column blocks x row blocks
    ann = annotations(sched)
    assert {("gelu", "i@k.0.0@j.0", "parallel"), ("matmul", "j", "unroll"), ("matmul", "k.0", "unroll"),
            ("matmul", "k.1", "vectorize"), ("matmul", "k1.1", "unroll")} <= ann
    assert ComputeInline("add") in sched.steps  # the bias add is computed in the epilogue, no buffer of its own


@pytest.mark.parametrize("a_shape,b_shape,bias", [
    ((1, 24, 40), (40, 48), True),  # projection: constant-shaped weight, bias epilogue
    ((2, 3, 12, 8), (2, 3, 8, 32), False),  # attention scores: batch x heads, the matmul is the output
    ((3, 16, 32), (32, 8), False),  # one vector of columns
    ((5, 7, 40), (40, 24), True),  # rows 7 (prime), 24 columns: half vectors
])
def test_matmul_default_schedules_match_the_reference(a_shape, b_shape, bias):
    task = matmul_task(a_shape, b_shape, bias=bias)
    sched = default_schedule(task.initial_state())
    if not bias:
        assert any(isinstance(s, CacheWrite) for s in sched.steps)  # the tile accumulates in a local copy
    assert_matches_reference(task, run_compiled(task, [sched]), ["default"])


def row_task(op, shape, **attrs):
    x = Var("x", TensorType(shape))
    if op == "nn.layer_norm":
        g, b = Var("g", TensorType(shape[-1:])), Var("b", TensorType(shape[-1:]))
        return build_task(Function((x, g, b), call(op, x, g, b, **attrs), Attrs(Primitive=1)))
    return build_task(Function((x,), call(op, x, **attrs), Attrs(Primitive=1)))


@pytest.mark.parametrize("op", ["nn.softmax", "nn.layer_norm"])
def test_row_ops_reduce_in_vectors_in_parallel(op):
    task = row_task(op, (1, 4, 32, 128))
    stages = [s.name for s in task.initial_state().stages]
    partials = [n for n in stages if n.endswith("_lanes")]
    assert len(partials) == 2  # softmax: max and sum; layer norm: sum and squares
    sched = default_schedule(task.initial_state())
    ann = annotations(sched)
    out = stages[-1]  # the rows in parallel, every other stage computed at the row (compiler/row_schedule.py)
    assert {(out, "l.1", "vectorize"), (out, "i@j@k", "parallel")} <= ann
    for p in partials:  # each walks its row with vector loads
        assert (p, "l", "vectorize") in ann and ComputeAt(p, out, "i@j@k") in sched.steps
    assert not any(isinstance(s, CacheWrite) for s in sched.steps)  # no scalar anchor tile
    if op == "nn.softmax":  # exp, read by the sum and the output, is computed once into a row's buffer
        assert ComputeInline("softmax_exp") not in sched.steps and ComputeInline("softmax_inv") in sched.steps
        assert ComputeAt("softmax_exp", out, "i@j@k") in sched.steps


@pytest.mark.parametrize("op,shape,attrs", [
    ("nn.softmax", (2, 3, 48), {"axis": -1}),
    ("nn.softmax", (4, 24), {"axis": 1}),  # rows of 24: partials of 8 lanes
    ("nn.softmax", (3, 5, 7), {"axis": -1}),  # 7: the plain form
    ("nn.softmax", (3, 32, 4), {"axis": 1}),  # not the last axis: the plain form
    ("nn.layer_norm", (2, 5, 64), {"axis": -1, "epsilon": 1e-5}),
    ("nn.layer_norm", (2, 5, 12), {"axis": -1, "epsilon": 1e-5}),  # 12: the plain form
])
def test_row_op_default_schedules_match_the_reference(op, shape, attrs):
    task = row_task(op, shape, **attrs)
    sched = default_schedule(task.initial_state())
    assert_matches_reference(task, run_compiled(task, [sched]), ["default"])


def test_softmax_rows_of_minus_infinity_give_nan_as_onnxruntime():
    task = row_task("nn.softmax", (2, 32), axis=-1)
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    x[1] = -np.inf
    out, = run_compiled(task, [default_schedule(task.initial_state())], inputs=[x])
    assert np.all(np.isnan(out[1])) and np.allclose(out[0].sum(), 1.0, atol=1e-5)


def test_constant_weight_matmul_becomes_packed_with_its_bias_and_gelu_in_one_kernel():
    """matmul(x, W const) + b -> gelu: the weight packed in blocks of the tile's columns at compile time, and the
    whole chain one task whose default schedule is the register tile."""
    from compiler import extract_tasks
    from compiler.passes import PassContext, run_pipeline
    from relayish import Constant, IRModule
    rng = np.random.default_rng(0)
    w, bias = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    x = Var("x", TensorType((1, 16, 32)))
    body = call("nn.gelu", call("add", call("nn.matmul", x, Constant(w)), Constant(bias)))
    task, = extract_tasks(run_pipeline(IRModule(Function([x], body)), PassContext()))
    assert task.ops == ["nn.matmul_pack", "add", "nn.gelu"]
    rows, cols, lane = matmul_tile(16, 64, 1, 16)
    packed = task.func.params[1].type.shape
    assert packed == (64 // (cols * lane), 32, cols * lane)
    sched = default_schedule(task.initial_state())
    assert any(isinstance(s, ComputeAt) and s.stage == "matmul" for s in sched.steps)
    assert_matches_reference(task, run_compiled(task, [sched]), ["default"])


@pytest.mark.parametrize("rows", [1, 8])
def test_dense_of_several_rows_takes_the_matmul_tile_and_one_row_streams_its_weight(rows):
    """dense(x[rows, K], W const) + b: with rows > 1 the weight is packed in blocks of the matmul tile's columns
    and the register tile reads each weight vector once per `tile rows` rows (before, every row streamed the whole
    weight: 3-7x slower than onnxruntime at batch 8-64); one row keeps the generic wide row tile (bandwidth-bound)."""
    from compiler import extract_tasks
    from compiler.passes import PassContext, run_pipeline
    from relayish import Constant, IRModule
    rng = np.random.default_rng(1)
    w, bias = rng.standard_normal((96, 64)).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    x = Var("x", TensorType((rows, 64)))
    body = call("add", call("nn.dense", x, Constant(w)), Constant(bias))
    task, = extract_tasks(run_pipeline(IRModule(Function([x], body)), PassContext()))
    assert task.ops == ["nn.dense_pack", "add"]
    sched = default_schedule(task.initial_state())
    at, = [s.iter for s in sched.steps if isinstance(s, ComputeAt) and s.stage == "dense_pack"]
    tiled = at == "j.0.0@i.0"  # the matmul rule: parallel over column blocks x row blocks
    if rows > 1:
        t_rows, cols, lane = matmul_tile(rows, 96, 1, 16)
        assert task.func.params[1].type.shape == (96 // (cols * lane), 64, cols * lane) and tiled
    else:
        assert task.func.params[1].type.shape == (6, 64, 16) and not tiled
    assert_matches_reference(task, run_compiled(task, [sched]), ["default"])

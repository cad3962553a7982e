"""Sketch generation, random annotation, mutation and crossover (tuning/sketch.py, tuning/annotate.py)."""
import random

import numpy as np
import pytest

from compiler.default_schedule import default_schedule
from compiler.lower import lower
from compiler.schedule import Loc, Schedule
from compiler.task import Task
from loop_eval import run_primfunc
from relayish import te
from relayish.ops.rows import ROW_TAG, row_reduce
from tuning.annotate import (concretize, crossover, derive_program, mutate, random_programs, sample_factors,
                             sample_program, tail_options)
from tuning.sketch import generate_sketches


def matmul_task(m, n, k, relu=True) -> Task:
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], r), name="C")
    out = te.compute((m, n), lambda i, j: te.max_(C[i, j], 0.0), name="D") if relu else C
    return Task("test", "matmul", None, [A, B], [out], 2.0 * m * n * k)


def test_matmul_relu_sketch_is_tiled_with_fused_consumer():
    sks = generate_sketches(matmul_task(16, 16, 16))
    assert sorted(" ".join(s.rules) for s in sks) == [
        "at(C->D)", "at(C->D) window-outside(C)", "register-tile(C->D)", "register-tile(C->D, lanes split)",
        "register-tile(C->D, lanes split, reduction unrolled)", "register-tile(C->D, reduction unrolled)",
        "tile+fuse(C->D)"]
    sk = next(s for s in sks if s.rules == ["tile+fuse(C->D)"])
    st = sk.state
    c, d = st.stage("C"), st.stage("D")
    assert c.loc == Loc.at("D", "j.1")  # computed at the consumer's second spatial level
    # consumer "SS" + tile, anchor R S R S inside the tile
    assert [i.name for i in d.leaves] == ["i.0", "j.0", "i.1", "j.1", "i.2", "j.2"]
    assert [i.name for i in c.leaves] == ["r.0", "i.0", "j.0", "r.1", "i.1", "j.1"]
    assert [i.kind for i in c.leaves] == ["reduce", "spatial", "spatial", "reduce", "spatial", "spatial"]


def test_matmul_alone_gets_a_cache_stage_and_a_plain_tiling():
    sks = generate_sketches(matmul_task(16, 16, 16, relu=False))
    kinds = sorted(" ".join(s.rules) for s in sks)
    assert any("cache(C)" in k for k in kinds) and any(k.startswith("tile(C)") for k in kinds)
    plain = next(s for s in sks if s.rules == ["tile(C)"])
    c = plain.state.stage("C")
    # SSRSRS: 2 spatial levels, a reduce level, a spatial level, a reduce level, a spatial level
    assert "".join("S" if i.kind == "spatial" else "R" for i in c.leaves) == "SSSSRSSRSS"
    cached = next(s for s in sks if s.rules == ["cache(C)", "tile+fuse(C.local->C)"])
    assert cached.state.stage("C.local").loc == Loc.at("C", "j.1")


def test_small_spatial_long_reduction_gets_rfactor():
    sks = generate_sketches(matmul_task(2, 2, 512, relu=False))
    rf = [s for s in sks if any(r.startswith("rfactor") for r in s.rules)]
    assert rf, [s.rules for s in sks]
    st = rf[0].state.stage("C.rf")
    assert st.leaves[0].kind == "spatial" and st.op.shape[0] in (16, 8, 4, 2)


def test_sample_factors_multiply_to_extent():
    rng = random.Random(0)
    for extent in (1, 7, 12, 56, 512):
        for _ in range(20):
            f = sample_factors(extent, 4, rng)
            assert int(np.prod(f)) == extent and f[-1] <= 64


@pytest.mark.parametrize("relu", [True, False])
def test_random_annotations_and_mutations_are_legal_and_correct(relu):
    task = matmul_task(6, 8, 12, relu)
    sks = generate_sketches(task)
    init = task.initial_state()
    rng = random.Random(1)
    a = np.random.default_rng(0).standard_normal((6, 12)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((12, 8)).astype(np.float32)
    ref = a @ b
    ref = np.maximum(ref, 0) if relu else ref
    progs = random_programs(sks, init, 12, rng)
    assert len(progs) == 12
    children = []
    for prog, _ in progs:
        children.append(mutate(sks, prog, rng))
        other = rng.choice(progs)[0]
        children.append(crossover(sks, prog, other, rng))
    for prog in [p for p, _ in progs] + children:
        sch = concretize(sks[prog.sketch_id], prog, init)
        func = lower(sch.apply(init))
        bufs = [a, b, np.zeros((6, 8), np.float32)] + [np.zeros(x.shape, np.float32) for x in func.params[3:]]
        run_primfunc(func, bufs)
        np.testing.assert_allclose(bufs[2], ref, rtol=1e-5, atol=1e-5, err_msg=sch.to_json())
        assert Schedule.from_json(sch.to_json()) == sch


def test_register_tile_columns_may_leave_a_partial_tile():
    """The register tile's column variable is a tail variable: its inner factor is drawn from the divisors and from
    2..8 (4 columns of a 7-wide row, as the hand-written tile of a 7x7 convolution), and the loop nest with the
    partial last tile computes the same result; sampling and mutation both reach such factors."""
    assert tail_options(7) == [1, 2, 3, 4, 5, 6, 7] and tail_options(56)[-1] == 56 and 9 not in tail_options(56)
    rng = random.Random(0)
    for extent in (7, 13, 14):
        for _ in range(30):
            outer, inner = sample_factors(extent, 2, rng, tail=True)
            assert inner in tail_options(extent) and outer == extent // inner
    task = matmul_task(7, 8, 12)
    sks = generate_sketches(task)
    ids = [k for k, sk in enumerate(sks) if any(r.startswith("register-tile") and "lanes split" not in r
                                                for r in sk.rules)]
    assert ids
    tv = next(t for t in sks[ids[0]].tiles if t.tail)
    assert tv.extent == 7 and tv.levels == 2
    init = task.initial_state()
    a = np.random.default_rng(0).standard_normal((7, 12)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((12, 8)).astype(np.float32)
    ref = np.maximum(a @ b, 0)
    progs = [sample_program(sks, ids[0], rng) for _ in range(40)]
    progs += [mutate(sks, p, rng) for p in progs]
    k = sks[ids[0]].tiles.index(tv)
    partial = [p for p in progs if 7 % p.tiles[k][1]]
    assert partial, "no sampled or mutated program has a partial column tile"
    for prog in partial[:6]:
        sch = concretize(sks[prog.sketch_id], prog, init)
        func = lower(sch.apply(init))
        bufs = [a, b, np.zeros((7, 8), np.float32)] + [np.zeros(x.shape, np.float32) for x in func.params[3:]]
        run_primfunc(func, bufs)
        np.testing.assert_allclose(bufs[2], ref, rtol=1e-5, atol=1e-5, err_msg=sch.to_json())


def tagged_matmul_relu_task(m, n, k) -> Task:
    """D = relu(A @ B) with the matmul stage tagged as nn.matmul's compute tags it (the matmul-tile condition)."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], r), name="C", tag="matmul")
    D = te.compute((m, n), lambda i, j: te.max_(C[i, j], 0.0), name="D")
    return Task("test", "matmul", None, [A, B], [D], 2.0 * m * n * k)


def test_matmul_tile_sketch_is_rows_by_column_vectors_with_the_epilogue_at_the_tile():
    """matmul-tile: D's loops [column blocks, row blocks | rows, column vectors, lanes], the outer two fused and
    parallel; C computed there, its reduction outside its own rows x vectors x lanes tile; replays correctly."""
    task = tagged_matmul_relu_task(8, 64, 12)
    sks = generate_sketches(task)
    names = [" ".join(s.rules) for s in sks]
    assert "matmul-tile(C->D)" in names and "matmul-tile(C->D, reduction unrolled)" in names
    sk = sks[names.index("matmul-tile(C->D, reduction unrolled)")]
    d, c = sk.state.stage("D"), sk.state.stage("C")
    assert [i.name for i in d.leaves] == ["j.0.0@i.0", "i.1", "j.0.1", "j.1"]
    assert c.loc == Loc.at("D", "j.0.0@i.0")
    assert [i.name for i in c.leaves] == ["r.0", "r.1", "i", "j.0", "j.1"]
    init = task.initial_state()
    a = np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((12, 64)).astype(np.float32)
    rng = random.Random(0)
    for _ in range(3):
        prog = sample_program(sks, sks.index(sk), rng)
        func = lower(concretize(sk, prog, init).apply(init))
        bufs = [a, b, np.zeros((8, 64), np.float32)] + [np.zeros(x.shape, np.float32) for x in func.params[3:]]
        run_primfunc(func, bufs)
        np.testing.assert_allclose(bufs[2], np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


def softmax_rows_task(rows, length) -> Task:
    """Softmax over the last axis built as relayish/ops/nn.py builds it: two row reductions, exp read twice."""
    X = te.placeholder((rows, length), name="X")
    xmax = row_reduce((rows,), length, lambda i, l: X[i[0], l], "max", "smax")
    ex = te.compute((rows, length), lambda i, j: te.exp(X[i, j] - xmax[i]), name="sexp", tag=ROW_TAG)
    total = row_reduce((rows,), length, lambda i, l: ex[i[0], l], "sum", "ssum")
    inv = te.compute((rows,), lambda i: 1.0 / total[i], name="sinv", tag=ROW_TAG)
    out = te.compute((rows, length), lambda i, j: ex[i, j] * inv[i], name="softmax", tag=ROW_TAG)
    return Task("test", "softmax", None, [X], [out], 4.0 * rows * length)


def test_row_stages_sketch_inlines_stages_read_once_and_keeps_the_rest_as_simple_roots():
    """rows: two sketches. Stage by stage: the reciprocal (read once) inlined, exp (read twice), the six
    reduction stages and the output left to the simple-root annotation. Row by row (the default's with 64 rows,
    compiler/row_schedule.py): every other stage computed at the output's rows, nothing left to decide; the
    default schedule is its program."""
    task = softmax_rows_task(64, 128)
    sks = generate_sketches(task)
    assert len(sks) == 2
    staged = next(sk for sk in sks if sk.simple_roots)
    assert staged.state.stage("sinv").loc.is_inline
    assert sorted(staged.simple_roots) == ["sexp", "smax", "smax_groups", "smax_lanes", "softmax", "ssum",
                                           "ssum_groups", "ssum_lanes"]  # (groups of 4 vectors, folded to one)
    whole = next(sk for sk in sks if not sk.simple_roots)
    assert whole.rules == ["row_by_row"] and whole.state.stage("sexp").loc.is_at("softmax")
    default = default_schedule(task.initial_state())
    prog = derive_program(sks, default, task.initial_state())
    assert prog is not None and concretize(sks[prog.sketch_id], prog, task.initial_state()) == default
    assert sks[prog.sketch_id] is whole


@pytest.mark.parametrize("pad", [0, 1])
def test_an_nchw_pool_of_stride_two_is_vectorized_along_its_row(pad):
    """Stride-2 rows (and their padding's clamps) are vectors: default_schedule.contiguous_last accepts a pool's
    read at stride 2 once its clamps are set aside (codegen: every_other, padded_read)."""
    x = te.placeholder((1, 4, 33, 33), name="x")
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")

    def at(i):  # the padded coordinate i - pad, clamped into the row, as the pool's inlined padding reads it
        return te.min_(te.max_(i - pad, te.as_expr(0)), te.as_expr(32))
    size = 16 + pad
    pool = te.compute((1, 4, size, size), lambda n, c, y, w: te.max_reduce(
        x[n, c, at(y * 2 + ry), at(w * 2 + rx)], (ry, rx)), name="pool", tag="pool")
    task = Task("pool", "pool", None, [x], [pool], 1.0)
    state = task.initial_state()
    schedule = default_schedule(state, 16)
    assert any(getattr(step, "annotation", None) == "vectorize" and step.stage == "pool.local"
               for step in schedule.steps), schedule.steps
    data = np.random.default_rng(0).standard_normal((1, 4, 33, 33)).astype(np.float32)
    got = np.zeros((1, 4, size, size), np.float32)
    run_primfunc(lower(schedule.apply(state), "k"), [data, got])
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge")
    want = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-1, -2))
    np.testing.assert_array_equal(got, want[:, :, :size, :size])


def test_an_nchw_pool_runs_its_window_outside_its_row_and_the_space_contains_that():
    """A max pool whose row is not a vector (NCHW, stride 3: stride 2 rows are vectors, two loads and a shuffle)
    updates a row of accumulators per window step
    (default_schedule.window_outside); the sketches offer that form, and it computes the pool."""
    x = te.placeholder((1, 4, 12, 12), name="x")
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    pool = te.compute((1, 4, 4, 4), lambda n, c, y, w: te.max_reduce(x[n, c, y * 3 + ry, w * 3 + rx], (ry, rx)),
                      name="pool", tag="pool")
    task = Task("pool", "pool", None, [x], [pool], 1.0)
    state = task.initial_state()
    schedule = default_schedule(state, 8)
    scheduled = schedule.apply(state)
    local = scheduled.stage("pool.local")
    assert [i.kind for i in local.leaves][-3:] == ["reduce", "reduce", "spatial"]
    assert derive_program(generate_sketches(task), schedule, state) is not None
    data = np.random.default_rng(0).standard_normal((1, 4, 12, 12)).astype(np.float32)
    got = np.zeros((1, 4, 4, 4), np.float32)
    run_primfunc(lower(scheduled, "k"), [data, got])
    want = np.lib.stride_tricks.sliding_window_view(data, (3, 3), axis=(2, 3))[:, :, ::3, ::3].max(axis=(-1, -2))
    np.testing.assert_array_equal(got, want)

"""Sketch generation, random annotation, mutation and crossover (tuning/sketch.py, tuning/annotate.py)."""
import random

import numpy as np
import pytest

from compiler.lower import lower
from compiler.schedule import Loc, Schedule
from compiler.task import Task
from loop_eval import run_primfunc
from relayish import te
from tuning.annotate import concretize, crossover, mutate, random_programs, sample_factors
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
        "at(C->D)", "register-tile(C->D)", "register-tile(C->D, lanes split)",
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

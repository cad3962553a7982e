"""Schedule steps: JSON round trip, legality errors, and random legal schedules that must keep results
(checked with the loop-IR interpreter, so that lowering is tested apart from codegen)."""
import json
import random

import numpy as np
import pytest

from compiler.lower import lower
from compiler.schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, ComputeRoot, Fuse, Loc, Pragma,
                               Reorder, Rfactor, Schedule, ScheduleError, Split, initial_state)
from loop_eval import run_primfunc
from relayish import te


def matmul_relu(m=6, n=10, k=7):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], r), name="C")
    D = te.compute((m, n), lambda i, j: te.max_(C[i, j], 0.0), name="D")
    return [A, B], D


def run(state, inputs):
    func = lower(state)
    arrays = list(inputs) + [np.zeros(b.shape, np.float32) for b in func.params[len(inputs):]]
    run_primfunc(func, arrays)
    return arrays[len(inputs)]


def data(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_unscheduled_matches_numpy():
    (A, B), D = matmul_relu()
    a, b = data((6, 7), (7, 10))
    out = run(initial_state([D], [A, B]), [a, b])
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


def test_json_round_trip_and_replay_is_deterministic():
    (A, B), D = matmul_relu()
    s0 = initial_state([D], [A, B])
    sch = Schedule((Split("D", "i", (4,)), Fuse("D", ("i.0", "i.1")), Split("D", "j", (3, 2)),
                    ComputeAt("C", "D", "j.0"), Annotate("D", "j.2", "vectorize"), Pragma("D", "j.0", "auto_unroll_max_step", 16)))
    text = sch.to_json()
    again = Schedule.from_json(text)
    assert again == sch and json.loads(again.to_json()) == json.loads(text)
    assert str(lower(sch.apply(s0))) == str(lower(again.apply(s0))).replace("kernel", "kernel")


def test_stored_step_lists_load():
    """The records' format: a schedule is a JSON list of [step name, field values...]."""
    text = '[["Split", "D", "j", [3, 2], false], ["ComputeAt", "C", "D", "j.0"], ["ComputeRoot", "C"]]'
    assert Schedule.from_json(text) == Schedule((Split("D", "j", (3, 2)), ComputeAt("C", "D", "j.0"), ComputeRoot("C")))
    assert json.loads(Schedule.from_json(text).to_json()) == json.loads(text)


def test_compute_location_steps_set_the_stage_location():
    (A, B), D = matmul_relu()
    s0 = initial_state([D], [A, B])
    assert s0.stage("C").loc == Loc.ROOT and s0.stage("C").loc.is_root
    at = Schedule((ComputeAt("C", "D", "j"),)).apply(s0)
    assert at.stage("C").loc == Loc.at("D", "j") and at.stage("C").loc.is_at("D") and not at.stage("C").loc.is_root
    assert at.attached_at(at.stage("D"), "j") == [at.stage("C")]
    fused = Schedule((ComputeAt("C", "D", "j"), Fuse("D", ("i", "j")))).apply(s0)
    assert fused.stage("C").loc == Loc.at("D", "i@j")  # the attachment follows the fused loop
    assert Schedule((ComputeAt("C", "D", "j"), ComputeRoot("C"))).apply(s0).stage("C").loc == Loc.ROOT
    (X,), Y = _elementwise_chain()
    assert Schedule((ComputeInline("E"),)).apply(initial_state([Y], [X])).stage("E").loc.is_inline


@pytest.mark.parametrize("args", [("at",), ("at", "D"), ("root", "D", "j"), ("nowhere",)])
def test_a_location_is_root_inline_or_at_a_loop(args):
    with pytest.raises(ValueError, match="compute location"):
        Loc(*args)


def test_state_prints_locations_and_loops():
    (A, B), D = matmul_relu()
    state = Schedule((Split("D", "j", (5,)), ComputeAt("C", "D", "j.0"), Annotate("D", "j.1", "vectorize"),
                      Annotate("D", "i", "parallel"))).apply(initial_state([D], [A, B]))
    assert str(state).splitlines() == ["C at(D, j.0): i[6], j[10], r[7]",
                                       "D root: i[6] parallel, j.0[2], j.1[5] vectorize"]


def _elementwise_chain():
    X = te.placeholder((4, 4), name="X")
    E = te.compute((4, 4), lambda i, j: X[i, j] * 2.0, name="E")
    return [X], te.compute((4, 4), lambda i, j: E[i, j] + 1.0, name="F")


def test_non_dividing_split_is_guarded_and_correct():
    (A, B), D = matmul_relu(m=7, n=11, k=5)
    s0 = initial_state([D], [A, B])
    sch = Schedule((Split("D", "i", (3,)), Split("D", "j", (4,)), Reorder("D", ("i.0", "j.0", "i.1", "j.1")),
                    ComputeAt("C", "D", "j.0"), Split("C", "r", (2,))))
    a, b = data((7, 5), (5, 11))
    out = run(sch.apply(s0), [a, b])
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    assert "if " in str(lower(sch.apply(s0)))


@pytest.mark.parametrize("step, message", [
    (Annotate("C", "r", "vectorize"), "rfactor"),
    (Annotate("C", "r", "parallel"), "race"),
    (Split("D", "i", (0,)), "positive"),
    (Split("D", "zz", (2,)), "no iterator 'zz'"),
    (Fuse("D", ("j", "i")), "consecutive"),
    (Reorder("D", ("i",)), "permutation"),
    (ComputeInline("C"), "reduction cannot be inlined"),
    (ComputeInline("D"), "output"),
    (Annotate("D", "i", "vectorize"), "innermost"),
    (ComputeAt("D", "C", "i"), "output"),
])
def test_illegal_steps_are_rejected_with_reason(step, message):
    (A, B), D = matmul_relu()
    s0 = initial_state([D], [A, B])
    with pytest.raises(ScheduleError) as err:
        Schedule((step,)).apply(s0)
    assert message in str(err.value) and type(step).__name__ in str(err.value)


def test_reorder_across_compute_at_is_rejected():
    (A, B), D = matmul_relu()
    s0 = initial_state([D], [A, B])
    with pytest.raises(ScheduleError, match="across the compute_at"):
        Schedule((ComputeAt("C", "D", "i"), Reorder("D", ("j", "i")))).apply(s0)


def test_cache_write_and_rfactor_keep_results():
    (A, B), D = matmul_relu(m=2, n=3, k=12)
    s0 = initial_state([D], [A, B])
    a, b = data((2, 12), (12, 3))
    ref = np.maximum(a @ b, 0)
    sch = Schedule((CacheWrite("C"), ComputeAt("C.local", "C", "j")))
    np.testing.assert_allclose(run(sch.apply(s0), [a, b]), ref, rtol=1e-5, atol=1e-5)
    state = Schedule((Rfactor("C", "r", 4),)).apply(s0)
    rf = state.stage("C.rf")
    assert rf.leaves[0].kind == "spatial" and rf.leaves[0].name.endswith("i")
    np.testing.assert_allclose(run(state, [a, b]), ref, rtol=1e-5, atol=1e-5)
    # the rfactor'd axis is spatial: it may now be vectorized once innermost
    names = [i.name for i in rf.leaves]
    order = tuple(names[1:] + names[:1])
    state2 = Schedule((Rfactor("C", "r", 4), Reorder("C.rf", order), Annotate("C.rf", names[0], "vectorize"))).apply(s0)
    np.testing.assert_allclose(run(state2, [a, b]), ref, rtol=1e-5, atol=1e-5)


def random_schedule(state, rng: random.Random) -> Schedule:
    """A random sequence of legal steps (illegal picks are skipped, as a search would)."""
    steps = []
    cur = state.copy()
    for _ in range(rng.randint(1, 8)):
        st = rng.choice(cur.stages)
        kind = rng.choice(["split", "fuse", "reorder", "at", "unroll", "vec", "par", "pragma", "inline"])
        names = [i.name for i in st.leaves]
        if kind == "split":
            step = Split(st.name, rng.choice(names), tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 2))))
        elif kind == "fuse" and len(names) >= 2:
            k = rng.randrange(len(names) - 1)
            step = Fuse(st.name, (names[k], names[k + 1]))
        elif kind == "reorder":
            perm = names[:]
            rng.shuffle(perm)
            step = Reorder(st.name, tuple(perm))
        elif kind == "at":
            other = rng.choice(cur.stages)
            step = ComputeAt(st.name, other.name, rng.choice([i.name for i in other.leaves]))
        elif kind == "unroll":
            step = Annotate(st.name, rng.choice(names), "unroll")
        elif kind == "vec":
            step = Annotate(st.name, names[-1], "vectorize")
        elif kind == "par":
            step = Annotate(st.name, names[0], "parallel")
        elif kind == "pragma":
            step = Pragma(st.name, names[0], "auto_unroll_max_step", rng.choice([0, 4, 16]))
        elif kind == "inline":
            step = ComputeInline(st.name) if rng.random() < 0.5 else ComputeRoot(st.name)
        else:
            continue
        try:
            step.apply(cur)
            steps.append(step)
        except ScheduleError:
            pass
    return Schedule(tuple(steps))


def test_random_legal_schedules_match_reference():
    rng = random.Random(0)
    (A, B), D = matmul_relu(m=5, n=6, k=4)
    # a producer stage to inline or compute_at as well
    s0 = initial_state([D], [A, B])
    a, b = data((5, 4), (4, 6))
    ref = np.maximum(a @ b, 0)
    for trial in range(40):
        sch = random_schedule(s0, rng)
        out = run(sch.apply(s0), [a, b])
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=sch.to_json())


def padded_conv1d(n=9, k=3, pad=1):
    """pad -> conv (reduce) -> bias+relu: an injective producer with a window read, a reduction, a consumer."""
    X = te.placeholder((2, n), name="X")
    W = te.placeholder((3, 2, k), name="W")
    P = te.compute((2, n + 2 * pad), lambda c, i: te.select(te.all_of(i >= pad, i < n + pad),
                                                             X[c, i - pad], 0.0),
                   name="P", tag="pad")
    rc, rk = te.reduce_axis(2, "rc"), te.reduce_axis(k, "rk")
    out_n = n + 2 * pad - k + 1
    C = te.compute((3, out_n), lambda o, i: te.sum(P[rc, i + rk] * W[o, rc, rk], (rc, rk)), name="C")
    R = te.compute((3, out_n), lambda o, i: te.max_(C[o, i] + 1.0, 0.0), name="R")
    return [X, W], R


def test_random_legal_schedules_of_a_padded_conv_match_reference():
    rng = random.Random(1)
    (X, W), R = padded_conv1d()
    s0 = initial_state([R], [X, W])
    x, w = data((2, 9), (3, 2, 3))
    xp = np.pad(x, ((0, 0), (1, 1)))
    ref = np.maximum(np.stack([sum(np.convolve(xp[c], w[o, c][::-1], "valid") for c in range(2))
                               for o in range(3)]) + 1.0, 0)
    for trial in range(40):
        sch = random_schedule(s0, rng)
        out = run(sch.apply(s0), [x, w])
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=sch.to_json())


def test_cache_write_after_a_compute_at_into_the_stage_is_rejected():
    (A, B), D = matmul_relu()
    s0 = initial_state([D], [A, B])
    with pytest.raises(ScheduleError, match="CacheWrite must come before those compute_at steps"):
        Schedule((ComputeAt("C", "D", "j"), CacheWrite("D"))).apply(s0)


def test_a_reduction_over_no_axes_is_its_body():
    # nothing to accumulate: the value is stored as it is (an accumulator never initialized would add to whatever
    # the buffer held, e.g. the previous run's result)
    A = te.placeholder((3, 4), name="A")
    S = te.compute((3, 4), lambda i, j: te.sum(A[i, j] * 2.0, ()), name="S")
    a, = data((3, 4))
    out = np.full((3, 4), 5.0, np.float32)
    run_primfunc(lower(initial_state([S], [A])), [a, out])
    np.testing.assert_allclose(out, a * 2)


# ---------------------------------------------------------------------------------------------- tile versioning

def test_a_condition_is_decided_for_a_whole_tile_from_the_outer_variables():
    from compiler.loop_nest import _holds_throughout
    o, i = te.Var("o"), te.Var("i")
    inner = {i: 4}
    # 1 <= o + i for every i in [0, 4): 1 <= o;  o + i < 10 for every i: o + 3 < 10
    both = te.all_of(te.Cmp("<=", te.IntImm(1), o + i), te.Cmp("<", o + i, te.IntImm(10)))
    cond = _holds_throughout(both, inner)
    values = {k: all(1 <= k + j < 10 for j in range(4)) for k in range(-3, 12)}
    assert {k: bool(run_cond(cond, o, k)) for k in values} == values
    assert _holds_throughout(te.Cmp("<", i, te.IntImm(4)), inner) is True  # the inner variables alone: decided
    assert _holds_throughout(te.Cmp("<", i, te.IntImm(3)), inner) is False
    assert _holds_throughout(te.Cmp("<", i * i, te.IntImm(3)), inner) is None  # not affine in i
    assert _holds_throughout(te.Cmp("==", o + i, te.IntImm(3)), inner) is None
    from compiler.loopir import Buffer, Load  # a value read at an index of the inner loop: never hoisted
    idx = Load(Buffer("idx", (4,), "int32"), i)
    assert _holds_throughout(te.Cmp("<", idx, o), inner) is None


def run_cond(cond, var, value):
    """cond (and / < / <= of integer expressions) at var = value."""
    from compiler.arith import simplify
    if isinstance(cond, te.Logic):
        return all(run_cond(a, var, value) for a in cond.args)
    folded = simplify(te.substitute_vars(cond.a - cond.b, {var: te.IntImm(value)}), {})
    return folded.value < 0 if cond.op == "<" else folded.value <= 0


def test_inline_padding_is_versioned_per_tile_and_stays_correct():
    """A strided depthwise convolution reads its padding inline and is computed at the tiles of its output: the
    interior tiles run a copy of its nest without selects, the border ones the nest with them; the loop IR
    (interpreted) and the compiled kernel both give the reference's result."""
    from compiler.codegen.analysis import walk_stmt
    from compiler.default_schedule import default_schedule
    from compiler.loopir import IfThenElse
    from compiler.passes import PassContext, run_pipeline
    from compiler.task import extract_tasks
    from relayish import Constant, Function, IRModule, TensorType, Var, call
    from relayish.interp import evaluate
    x = Var("x", TensorType((1, 16, 11, 13)))
    w = np.random.default_rng(0).standard_normal((16, 1, 3, 3)).astype(np.float32)
    body = call("nn.relu", call("nn.conv2d", x, Constant(w), padding=(1, 1, 1, 1), groups=16, strides=(2, 2)))
    fused = run_pipeline(IRModule(Function([x], body)), PassContext(vector_width=8))
    task, = [t for t in extract_tasks(fused) if t.ops[0] == "nn.depthwise_conv2d_nchwc"]
    state = default_schedule(task.initial_state(), 8).apply(task.initial_state())
    func = lower(state)
    versioned = [s for s in walk_stmt(func.body) if isinstance(s, IfThenElse) and s.else_case is not None]
    assert versioned, str(func)
    assert not any(isinstance(n, te.Select) for s in walk_stmt(versioned[0].then_case) for e in _exprs(s)
                   for n in te.walk(e)), "the interior copy still selects"
    inputs = [np.random.default_rng(1).standard_normal(p.type.shape).astype(np.float32) for p in task.func.params]
    want = evaluate(task.func, inputs)[0]
    arrays = inputs + [np.full(b.shape, np.nan, np.float32) for b in func.params[len(inputs):]]
    run_primfunc(func, arrays)
    np.testing.assert_allclose(arrays[len(inputs)], want, rtol=1e-5, atol=1e-5)


def _exprs(stmt):
    from compiler.codegen.analysis import stmt_exprs
    return stmt_exprs(stmt)


def _diamond(n=5, m=12):
    """A row diamond: S = max over the row of X, E = exp(X - S), T = sum of E, Y = E / T: E has two readers."""
    X = te.placeholder((n, m), name="X")
    r1, r2 = te.reduce_axis(m, "r1"), te.reduce_axis(m, "r2")
    S = te.compute((n,), lambda i: te.max_reduce(X[i, r1], r1), name="S")
    E = te.compute((n, m), lambda i, j: te.exp(X[i, j] - S[i]), name="E")
    T = te.compute((n,), lambda i: te.sum(E[i, r2], r2), name="T")
    Y = te.compute((n, m), lambda i, j: E[i, j] / T[i], name="Y")
    return X, Y


def test_a_stage_is_computed_where_all_its_readers_are():
    """E is read by Y and by T: it may be computed at Y's row once T is; each stage of the row then lives in a
    buffer of one row, and the result is the reference's."""
    X, Y = _diamond()
    s0 = initial_state([Y], [X])
    steps = (ComputeAt("T", "Y", "i"), ComputeAt("E", "Y", "i"), ComputeAt("S", "Y", "i"))
    state = Schedule(steps).apply(s0)
    x, = data((5, 12))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run(state, [x]), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    assert len(lower(state).params) == 2  # X and Y only: the rest in local buffers of a row
    with pytest.raises(ScheduleError, match="computed at the same loop"):
        Schedule((ComputeAt("E", "Y", "i"),)).apply(s0)  # T, its other reader, is not at Y's row

"""Winograd convolution: the transform matrices, which convolutions take it, compiled kernels (default schedule and
random tuner programs) against the direct convolution, whole models three ways, and the codegen folding that makes
the transforms cheap. (tests/test_ops.py checks the ops' compute against their references.)"""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

from compiler.codegen import emit_llvm_ir
from compiler.default_schedule import branch_axes, default_schedule
from compiler.lower import lower
from compiler.passes import PassContext, run_pipeline
from compiler.passes.layout import winograd_tile
from compiler.schedule import Annotate, Loc, Reorder, Schedule, initial_state
from compiler.task import build_task
from frontends import from_onnx
from harness import make_model, three_way_random
from relayish import te
from relayish.expr import Attrs, Call, Function, TensorType, Var, call, post_order
from relayish.interp import evaluate
from relayish.ops.layout import _cn_ref
from relayish.ops.winograd import _wt_ref, winograd_matrices
from test_kernels import TOLERANCE, run_compiled
from tuning.annotate import random_programs
from tuning.sketch import generate_sketches


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_compute_a_1d_correlation(m):
    """A^T [(G g) . (B^T d)] = the valid correlation of d (m + 2 values) with g (3 taps)."""
    at, g, bt = winograd_matrices(m)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, w = rng.standard_normal(m + 2), rng.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"), atol=1e-12)


def _conv_node(size, ic=64, oc=64, kernel=3, stride=1, dilation=1, groups=1):
    x = Var("x", TensorType((1, ic, size, size)))
    w = Var("w", TensorType((oc, ic // groups, kernel, kernel)))
    return call("nn.conv2d", x, w, strides=(stride, stride), padding=(1, 1, 1, 1), dilation=(dilation, dilation),
                groups=groups)


def test_which_convolutions_take_winograd():
    # ResNet-18's 3x3 stride-1 shapes: the largest tile that leaves >= 32 tiles
    assert [winograd_tile(_conv_node(s)) for s in (56, 28, 14, 7)] == [4, 4, 2, 0]
    assert winograd_tile(_conv_node(28, stride=2)) == 0
    assert winograd_tile(_conv_node(28, kernel=1)) == 0
    assert winograd_tile(_conv_node(28, dilation=2)) == 0
    assert winograd_tile(_conv_node(28, groups=2)) == 0
    assert winograd_tile(_conv_node(28, ic=8)) == 0  # too few channels for the transforms to pay


def _one_conv_model(ic=16, oc=32, size=(13, 11), batch=1):
    rng = np.random.default_rng(3)
    consts = {"w": rng.standard_normal((oc, ic, 3, 3)).astype(np.float32),
              "b": rng.standard_normal(oc).astype(np.float32)}
    return make_model("Conv", {"x": (batch, ic, *size)}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 17, consts)


def test_pipeline_uses_winograd_unless_disabled():
    model = _one_conv_model()

    def ops(ctx):
        mod = run_pipeline(from_onnx(model), ctx, stop_after="fold_constants_2")
        return {n.op for n in post_order(mod.main.body) if isinstance(n, Call)}
    assert "nn.conv2d_winograd_nchwc" in ops(PassContext())
    assert "nn.winograd_weight_transform" not in ops(PassContext())  # folded into a constant at compile time
    assert "nn.conv2d_winograd_nchwc" not in ops(PassContext(winograd=False))
    assert "nn.conv2d_nchwc" in ops(PassContext(winograd=False))


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_a_convolution_whose_weights_are_not_finite_stays_direct(bad):
    """One Inf (or NaN) weight: Winograd's transforms would spread it to whole output tiles (Inf - Inf = NaN);
    the direct convolution puts non-finite values where onnx's reference does (onnxruntime skips the zero-padding
    taps, so at the border it gives Inf where IEEE gives Inf * 0 = NaN: see the README's Reliability section)."""
    from onnx.reference import ReferenceEvaluator
    from compiler import compile_model
    model = _one_conv_model(size=(12, 12))
    w = next(t for t in model.graph.initializer if t.name == "w")
    values = np.frombuffer(w.raw_data, np.float32).copy() if w.raw_data else np.array(w.float_data, np.float32)
    values[7] = bad
    w.ClearField("float_data")
    w.raw_data = values.tobytes()
    mod = run_pipeline(from_onnx(model), PassContext(), stop_after="fold_constants_2")
    assert "nn.conv2d_winograd_nchwc" not in {n.op for n in post_order(mod.main.body) if isinstance(n, Call)}
    x = np.random.default_rng(0).standard_normal((1, 16, 12, 12)).astype(np.float32)
    got, = compile_model(model, cache=False).run(None, {"x": x})
    want, = ReferenceEvaluator(model).run(None, {"x": x})
    assert (~np.isfinite(want)).sum() == 12 * 12  # the weight's output channel, everywhere
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch,size", [(1, (13, 11)), (2, (8, 8)), (1, (5, 9))])
def test_models_match_onnxruntime_and_interpreter(batch, size):
    """Compiled (Winograd) vs onnxruntime vs the numpy interpreter; odd sizes leave partial tiles."""
    three_way_random(_one_conv_model(size=size, batch=batch))


# ---------------------------------------------------------------------------------------------- kernels

def winograd_task(m, ic=32, oc=48, size=(10, 9), pad=(1, 1, 1, 1), residual=False):
    """conv2d_winograd_nchwc + bias [+ residual] + relu, as the fusion pass groups them."""
    h, w = size
    x = Var("x", TensorType((1, ic // 16, h, w, 16)))
    u = Var("u", TensorType((m + 2, m + 2, oc // 16, ic // 16, 16, 16)))
    b = Var("b", TensorType((1, oc // 16, 1, 1, 16)))
    y = call("add", call("nn.conv2d_winograd_nchwc", x, u, tile_size=m, padding=pad), b)
    params = [x, u, b]
    if residual:
        r = Var("r", y.type)
        y = call("add", y, r)
        params.append(r)
    return build_task(Function(tuple(params), call("nn.relu", y), Attrs(Primitive=1)))


def _inputs(task, m, pad, seed=0):
    """Inputs whose weight is the Winograd transform of a direct weight; returns (inputs, direct result)."""
    rng = np.random.default_rng(seed)
    shapes = [tuple(p.type.shape) for p in task.func.params]
    x = rng.standard_normal(shapes[0]).astype(np.float32)
    kb, cb = shapes[1][2], shapes[1][3]
    weight = rng.standard_normal((kb, cb, 3, 3, 16, 16)).astype(np.float32)
    rest = [rng.standard_normal(s).astype(np.float32) for s in shapes[2:]]
    y = _cn_ref(x, weight, (1, 1), pad, (1, 1)).astype(np.float64) + rest[0]
    if len(rest) > 1:
        y = y + rest[1]
    return [x, _wt_ref(weight, m)] + rest, np.maximum(y, 0)


def _check(task, schedules, m, pad, labels):
    inputs, direct = _inputs(task, m, pad)
    interp = evaluate(task.func, inputs)[0]
    scale = float(np.abs(direct).max())
    assert float(np.abs(interp - direct).max()) / scale <= TOLERANCE, "interpreter vs direct convolution"
    for out, label in zip(run_compiled(task, schedules, inputs=inputs), labels):  # outputs NaN-filled first
        err = float(np.max(np.abs(out - direct))) / scale  # NaN (an unwritten element) fails the comparison
        assert err <= TOLERANCE, f"{label}: max relative error {err:.3g} vs the direct convolution"


@pytest.mark.parametrize("m,size,pad,residual", [(4, (10, 9), (1, 1, 1, 1), False), (2, (7, 7), (1, 1, 1, 1), True),
                                                 (4, (8, 8), (0, 1, 2, 1), True), (4, (9, 50), (1, 1, 1, 1), True),
                                                 (2, (6, 37), (1, 1, 1, 1), False), (4, (13, 64), (1, 1, 1, 1), False)])
def test_default_schedule_matches_direct_convolution(m, size, pad, residual):
    """Against the direct convolution. 48 output channels are 3 blocks, so the product's tile is 3 blocks x 5
    tiles: the wide ones run several chunks per row of tiles, 4 tiles each that divide 16 (64 columns, m = 4),
    or 5 that straddle rows of 13 or 19 tiles (the last chunk past the end)."""
    task = winograd_task(m, size=size, pad=pad, residual=residual)
    _check(task, [default_schedule(task.initial_state())], m, pad, ["default"])


def _transforms_unrolled(state):
    for name in ("data_pack", "inverse"):
        st = state.stage(name)
        unrolled = [i.name for i in st.leaves if i.annotation == "unroll"]
        assert len(unrolled) == 2 and [i.name for i in st.leaves][-3:-1] == unrolled, name
        assert st.leaves[-1].annotation == "vectorize"


def test_default_schedule_computes_chunks_of_tiles_in_cache():
    """The output in parallel chunks of a row of tiles; at each chunk the input transform, the batched product
    and the inverse transform into local buffers (compiler/winograd_schedule.py), the product's reduction
    outside its unrolled tile of tiles x output blocks; the transforms' tile-position axes unrolled inside. The
    padding has a buffer of its own (the input transform reads without bounds checks): the chunk's when chunks
    are whole parts of a row of tiles (5 tiles per row, 3 output blocks x 5 tiles), else the whole image's (7
    tiles per row in chunks of 5: the chunk's rows of the padded input are not a box)."""
    for size, pad_at_chunk in (((18, 17), True), ((18, 27), False)):
        task = winograd_task(4, size=size)
        state = default_schedule(task.initial_state()).apply(task.initial_state())
        out = state.stages[-1]
        chunk = next(i.name for i in out.leaves if i.annotation == "parallel")
        locs = {st.name: st.loc for st in state.stages}
        assert locs["pad"].is_at(out.name, chunk) if pad_at_chunk else locs["pad"] == Loc.ROOT
        for name in ("data_pack", "batch_gemm", "inverse"):
            assert locs[name].is_at(out.name, chunk), name
        kinds = [(i.kind, i.annotation) for i in state.stage("batch_gemm").leaves]
        assert kinds[-5:] == [("reduce", "none"), ("reduce", "none"), ("spatial", "unroll"),
                              ("spatial", "unroll"), ("spatial", "vectorize")]
        _transforms_unrolled(state)


def test_default_schedule_of_wide_weights_runs_stage_by_stage(monkeypatch):
    """Transformed weights too big for L2 (every chunk would read them all): each stage over the whole image,
    the batched product a register tile (cache_write), and still the direct convolution's result."""
    monkeypatch.setattr("compiler.winograd_schedule.MAX_WEIGHT_BYTES", 0)
    task = winograd_task(4)
    sched = default_schedule(task.initial_state())
    state = sched.apply(task.initial_state())
    locs = {st.name: st.loc for st in state.stages}
    assert locs["pad"] == locs["data_pack"] == locs["inverse"] == locs["batch_gemm"] == Loc.ROOT
    assert locs["batch_gemm.local"].is_at("batch_gemm")
    _transforms_unrolled(state)
    _check(task, [sched], 4, (1, 1, 1, 1), ["stage by stage"])


def test_random_tuner_programs_are_legal_and_correct():
    """Sketches keep the transforms in their own buffers; random annotations of every sketch compile and match
    the direct convolution."""
    task = winograd_task(2, size=(6, 7))
    sketches = generate_sketches(task)
    assert sketches
    for sk in sketches:
        locs = {st.name: st.loc for st in sk.state.stages}
        assert not locs["data_pack"].is_inline and not locs["inverse"].is_inline
    programs = random_programs(sketches, task.initial_state(), 6, random.Random(0))
    assert len(programs) == 6
    _check(task, [s for _, s in programs], 2, (1, 1, 1, 1), [f"program {k}" for k in range(6)])


# ---------------------------------------------------------------------------------------------- codegen

def test_selects_on_unrolled_axes_fold_away():
    """A select over an axis that indexes nothing (a tile position) is found by branch_axes; unrolled, the
    codegen emits only the branch taken (no select instruction, one load per position)."""
    x = te.placeholder((4, 16), name="x")
    y = te.compute((4, 8, 16), lambda i, j, k: te.select(te.eq(i, 0), x[j % 4, k],
                                                          te.select(te.eq(i, 1), x[j % 4, k] * 2.0, -x[j % 4, k])),
                   name="y")
    task_state = initial_state([y], [x])
    st = task_state.stage("y")
    assert branch_axes(st) == [0]
    steps = Schedule((Reorder("y", ("j", "i", "k")), Annotate("y", "i", "unroll"), Annotate("y", "k", "vectorize")))
    ir_text = emit_llvm_ir([lower(steps.apply(task_state), "k")])
    body = ir_text[ir_text.index("define"):]
    assert not re.search(r"= select .*float", body)  # (integer selects come from the floor modulo j % 4)
    assert body.count("load <16 x float>") == 4  # (a select evaluated at run time loads every branch: 3 per i)


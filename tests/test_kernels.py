"""Compiled kernels of conv2d_nchwc and dense_pack tasks against the ops' numpy references: the hand schedules,
the default schedules, explicit tiles that do not divide, and random legal schedules, all through real codegen
(tests/test_schedule.py checks random schedules with the loop-IR interpreter instead)."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

from compiler.codegen import emit_assembly, host_target, vectorize_report
from compiler.default_schedule import default_schedule
from relayish_tools.bench.hand_schedules import ConvTile, conv_schedule, conv_tile, dense_schedule, hand_schedule
from compiler.lower import lower
from compiler.matmul_schedule import matmul_tile
from compiler.registers import conv_tile_budget, vector_registers
from compiler.schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, ComputeRoot, Fuse, Pragma, Reorder,
                               Rfactor, Schedule, ScheduleError, Split)
from compiler.task import build_task
from relayish.expr import Attrs, Function, TensorType, Var, call
from relayish.interp import evaluate
from relayish_tools.bench.native import NativeKernels

TOLERANCE = 1e-4  # max|ours - ref| / max|ref|, the project's fp32 criterion


def conv_task(ic=32, oc=64, size=(10, 10), kernel=3, stride=1, pad=1, in_block=16, out_block=16, residual=False,
              relu=True):
    """conv2d_nchwc + bias [+ residual] [+ relu], as the fusion pass groups them (ResNet's pattern)."""
    h, w = size
    x = Var("x", TensorType((1, ic // in_block, h, w, in_block)))
    wt = Var("w", TensorType((oc // out_block, ic // in_block, kernel, kernel, in_block, out_block)))
    b = Var("b", TensorType((1, oc // out_block, 1, 1, out_block)))
    y = call("add", call("nn.conv2d_nchwc", x, wt, strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1)), b)
    params = [x, wt, b]
    if residual:
        r = Var("r", y.type)
        y = call("add", y, r)
        params.append(r)
    if relu:
        y = call("nn.relu", y)
    return build_task(Function(tuple(params), y, Attrs(Primitive=1)))


def dense_task(m=1, k=40, n=24, block=8):
    x = Var("x", TensorType((m, k)))
    w = Var("w", TensorType((n // block, k, block)))
    b = Var("b", TensorType((n,)))
    return build_task(Function((x, w, b), call("add", call("nn.dense_pack", x, w), b), Attrs(Primitive=1)))


def inputs_of(task, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(p.type.shape)).astype(np.float32) for p in task.func.params]


def run_compiled(task, schedules: list[Schedule], threads=2, inputs=None) -> list[np.ndarray]:
    """Build every schedule of the task into one library, run each on the same inputs (default: inputs_of(task)),
    return the outputs."""
    state = task.initial_state()
    funcs = [lower(s.apply(state), f"k{i}") for i, s in enumerate(schedules)]
    lib = NativeKernels(funcs)
    lib.set_threads(threads)
    inputs = inputs_of(task) if inputs is None else inputs
    outs = []
    for f in funcs:
        args = lib.arguments(f.name, inputs)
        args[f.attrs["num_inputs"]][...] = np.nan  # a kernel that skips an output element cannot pass
        lib.caller(f.name, args)()
        outs.append(args[f.attrs["num_inputs"]])
    lib.idle()
    return outs


def assert_matches_reference(task, outs, labels):
    ref = evaluate(task.func, inputs_of(task))[0].astype(np.float64)
    scale = float(np.max(np.abs(ref)))
    assert scale > 0
    for out, label in zip(outs, labels):
        err = float(np.max(np.abs(out - ref))) / scale  # NaN (an unwritten element) fails the comparison
        assert err <= TOLERANCE, f"{label}: max relative error {err:.3g} > {TOLERANCE}"


CONV_CASES = {
    "3x3s1": dict(ic=32, oc=64, size=(10, 10)),
    "3x3s1_residual_odd_oc_blocks": dict(ic=32, oc=48, size=(7, 9), residual=True),
    "3x3s2": dict(ic=32, oc=64, size=(11, 13), stride=2),
    "1x1s2_no_relu": dict(ic=32, oc=64, size=(12, 12), kernel=1, stride=2, pad=0, relu=False),
    "7x7s2_rgb": dict(ic=3, oc=32, size=(20, 20), kernel=7, stride=2, pad=3, in_block=3),
}


@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_conv_hand_default_and_non_dividing_tiles(case):
    task = conv_task(**CONV_CASES[case])
    state = task.initial_state()
    n, ocb, oh, ow, _ = task.outputs[0].shape
    # tiles that do not divide the output: tails in the oc blocks and in the columns
    odd = [ConvTile(2, 4, 1), ConvTile(3, 3, 1, oc_inner=False)]
    schedules = [hand_schedule(task), default_schedule(state)] + [conv_schedule(state, t) for t in odd]
    assert ow % 4 or ocb % 2 or ow % 3 or ocb % 3, "the odd tiles must leave a tail somewhere"
    outs = run_compiled(task, schedules)
    assert_matches_reference(task, outs, ["hand", "default", *map(str, odd)])


@pytest.mark.parametrize("shape", [(1, 40, 24, 8), (2, 37, 40, 8), (1, 64, 48, 16)])
def test_dense_hand_default_and_odd_tiles(shape):
    m, k, n, block = shape
    task = dense_task(m, k, n, block)
    state = task.initial_state()
    schedules = [hand_schedule(task), default_schedule(state), dense_schedule(state, jb_tile=2)]
    outs = run_compiled(task, schedules)
    assert_matches_reference(task, outs, ["hand", "default", "jb_tile=2"])


@pytest.mark.parametrize("n,tile", [(1000, 5), (4096, 8), (80, 5)])
def test_batch_1_dense_column_tile_divides_the_columns(n, tile):
    """A batch-1 dense streams its weight once: its column tile divides the column vectors (1000 = 125 vectors of
    8: tiles of 5, not 8 with a last one clamped) and still gives 16 parallel tiles where it can."""
    task = dense_task(1, 32, n, 8)
    splits = [s.lengths[0] for s in default_schedule(task.initial_state(), 8).steps
              if isinstance(s, Split) and s.iter == "j.0"]
    assert splits == [tile]
    if n == 1000:
        outs = run_compiled(task, [default_schedule(task.initial_state(), 8)])
        assert_matches_reference(task, outs, ["default"])


def test_hand_conv_schedule_is_a_vectorized_register_tile():
    """The hand conv kernel: every vectorize loop really becomes vector code, the accumulators are one local
    buffer of oc_tile x ow_tile x 16 floats, and the tile follows the shape rule."""
    task = conv_task(ic=64, oc=128, size=(14, 14))
    tile = conv_tile(task.outputs[0].shape, 16)
    assert (tile.oc_tile, tile.ow_tile, tile.ici_unroll) == (2, 14, 1)
    assert conv_tile((1, 32, 7, 7, 16), 16) == ConvTile(2, 7, 4)  # a narrow tile: ici unrolled
    func = lower(hand_schedule(task).apply(task.initial_state()), "k")
    assert vectorize_report(func) and all(why is None for why in vectorize_report(func).values()), \
        vectorize_report(func)
    text = str(func)
    assert f"local float32[{2 * 14 * 16}]" in text and " parallel:" in text
    assert conv_tile((1, 4, 112, 112, 16), 3).ow_tile <= 8  # RGB input: a smaller tile (LLVM unrolls ici fully)


def hottest_loop(asm: str) -> list[str]:
    """The instructions of the innermost assembly loop (label to its back edge) with the most FMAs."""
    lines, loops = asm.splitlines(), []
    for i, line in enumerate(lines):
        label = re.match(r"^(\.LBB\w+):", line)
        if label:
            for j in range(i + 1, len(lines)):
                if re.search(rf"\sj\w+\s+{re.escape(label.group(1))}$", lines[j]):
                    loops.append((i, j))
                    break
    innermost = [(i, j) for i, j in loops if not any(i < a and b <= j for a, b in loops if (a, b) != (i, j))]
    i, j = max(innermost, key=lambda ij: sum("vfmadd" in line for line in lines[ij[0]:ij[1]]))
    return lines[i + 1:j + 1]


@pytest.mark.skipif("+avx512f" not in host_target()["features"].split(","), reason="needs AVX-512")
def test_hand_conv_inner_loop_is_all_registers():
    """The 2 x 14 tile's inner loop: 28 zmm FMAs per ici step, each input pixel broadcast once for its two FMAs,
    two weight vectors loaded, and no stack access (a spill would show as an (%rsp) operand)."""
    task = conv_task(ic=64, oc=128, size=(14, 14))
    loop = hottest_loop(emit_assembly([lower(hand_schedule(task).apply(task.initial_state()), "k")]))
    fmas = [line for line in loop if "vfmadd" in line]
    assert len(fmas) % 28 == 0 and fmas and all("zmm" in line for line in fmas), loop
    assert sum("vbroadcastss" in line or "{1to16}" in line for line in loop) * 2 == len(fmas), loop
    assert not any("rsp" in line for line in loop), "spills in the inner loop:\n" + "\n".join(loop)


@pytest.mark.parametrize("vw", [8, 16])
def test_default_tiles_fit_the_register_file(vw):
    """The default conv tile keeps at most conv_tile_budget accumulators (28 of 32 zmm; 10 of 16 ymm), and a
    matmul tile's accumulators, loaded column vectors and broadcast fit in the file."""
    for size in ((14, 14), (7, 7), (28, 28)):
        task = conv_task(ic=64, oc=128, size=size, in_block=vw, out_block=vw)
        func = lower(default_schedule(task.initial_state(), vw).apply(task.initial_state()), "k")
        floats = [int(n) for n in re.findall(r"local float32\[(\d+)\]", str(func))]
        assert floats and max(floats) // vw <= conv_tile_budget(vw, True), (size, floats)
    for m, n in ((128, 1024), (64, 256), (6, 96)):
        rows, cols, lane = matmul_tile(m, n, 1, vw)
        assert rows * cols + cols + 1 <= vector_registers(vw) and lane == vw


def test_default_conv_tile_on_a_7_column_output_is_guarded_not_narrowed():
    """With 16 ymm registers the widest tile is 2 blocks x 4 columns; 7 columns take 4 + a guarded 3 rather
    than the divisor 1 (1.5x slower on a Zen 3), and the result matches the reference."""
    task = conv_task(ic=32, oc=64, size=(9, 7), in_block=8, out_block=8, residual=True)
    sched = default_schedule(task.initial_state(), 8)
    out = task.initial_state().stages[-1]
    column = [i.name for i in out.leaves][3]  # (n, oc blocks, rows, columns, lanes)
    splits = {(s.stage, s.iter): tuple(s.lengths) for s in sched.steps if isinstance(s, Split)}
    assert splits[(out.name, column)] == (4,), splits
    assert_matches_reference(task, run_compiled(task, [sched]), ["default, 8 lanes"])


def test_default_1x1_conv_tile_takes_3_blocks_of_16_ymm():
    """A 1x1 convolution whose output blocks divide by 3 takes 3 blocks x 4 columns with 16 registers (12
    accumulators, 3 weights, 1 broadcast), its reduction unrolled; a 3x3 one keeps 2 blocks (conv_tile_budget),
    even over one input-channel block;
    32 registers keep 2 x 14. Each still matches the reference, and the 1x1 tile's hottest loop does not spill."""
    def tile(task, vw):
        out = task.initial_state().stages[-1]
        _, blocks, _, column, _ = [i.name for i in out.leaves]
        sched = default_schedule(task.initial_state(), vw)
        splits = {(s.stage, s.iter): s.lengths[0] for s in sched.steps if isinstance(s, Split)}
        return (splits.get((out.name, blocks)), splits.get((out.name, column)),
                any(s.iter == "rii" for s in sched.steps if isinstance(s, Split))), sched
    pointwise = conv_task(ic=32, oc=96, size=(14, 14), kernel=1, pad=0, in_block=8, out_block=8)
    window = conv_task(ic=32, oc=96, size=(14, 14), kernel=3, pad=1, in_block=8, out_block=8)
    (t1, s1), (t3, s3) = tile(pointwise, 8), tile(window, 8)
    assert t1 == (3, 4, True) and t3[0] == 2, (t1, t3)
    one_block = conv_task(ic=8, oc=96, size=(14, 14), kernel=3, pad=1, in_block=8, out_block=8)
    assert tile(one_block, 8)[0][0] == 2  # a window over a single input-channel block is still a window
    assert tile(conv_task(ic=32, oc=96, size=(14, 14), kernel=1, pad=0), 16)[0][:2] == (2, 14)
    assert_matches_reference(pointwise, run_compiled(pointwise, [s1]), ["1x1, 3 x 4"])
    assert_matches_reference(window, run_compiled(window, [s3]), ["3x3, 2 blocks"])
    loop = hottest_loop(emit_assembly([lower(s1.apply(pointwise.initial_state()), "k")]))
    assert any("vfmadd" in line for line in loop), loop
    assert not any("rsp" in line for line in loop), "spills in the inner loop:\n" + "\n".join(loop)


def test_default_conv_inner_loop_is_all_registers():
    """On the host's own register file the default conv tile's hottest loop has no stack access (a spill
    shows as an (%rsp) operand): a budget sized for 32 registers spilled on every step with 16."""
    from compiler.codegen import vector_width
    vw = vector_width()
    task = conv_task(ic=64, oc=128, size=(14, 14), in_block=vw, out_block=vw)
    loop = hottest_loop(emit_assembly([lower(default_schedule(task.initial_state(), vw).apply(task.initial_state()),
                                             "k")]))
    assert any("vfmadd" in line for line in loop), loop
    assert not any("rsp" in line for line in loop), "spills in the inner loop:\n" + "\n".join(loop)


def test_hand_schedule_is_none_for_other_tasks():
    x = Var("x", TensorType((2, 16)))
    assert hand_schedule(build_task(Function((x,), call("nn.relu", x), Attrs(Primitive=1)))) is None


# ---------------------------------------------------------------------------------------------- random schedules

PRIMITIVES = ("split", "fuse", "reorder", "unroll", "vectorize", "parallel", "compute_at", "inline", "root",
              "cache_write", "rfactor", "pragma")


def random_step(state, rng: random.Random):
    """One random step on the current state (possibly illegal: the caller applies it and skips ScheduleErrors)."""
    kind = rng.choice(PRIMITIVES)
    st = rng.choice(state.stages)
    names = [i.name for i in st.leaves]
    ext = st.leaf_extents()
    if kind == "split":
        it = rng.choice(names)
        lengths = tuple(rng.choice([2, 3, 4, 5]) for _ in range(rng.randint(1, 2)))
        return kind, Split(st.name, it, lengths, nparts=rng.random() < 0.2 and len(lengths) == 1)
    if kind == "fuse" and len(names) >= 2:
        k = rng.randrange(len(names) - 1)
        return kind, Fuse(st.name, tuple(names[k:k + rng.randint(2, min(3, len(names) - k))]))
    if kind == "reorder":
        order = names[:]
        rng.shuffle(order)
        return kind, Reorder(st.name, tuple(order))
    if kind == "unroll":
        return kind, Annotate(st.name, rng.choice([n for n in names if ext[n] <= 16] or names), "unroll")
    if kind == "vectorize":
        return kind, Annotate(st.name, names[-1], "vectorize")
    if kind == "parallel":
        return kind, Annotate(st.name, names[rng.randrange(min(2, len(names)))], "parallel")
    if kind == "compute_at":
        target = rng.choice(state.stages)
        return kind, ComputeAt(st.name, target.name, rng.choice([i.name for i in target.leaves]))
    if kind == "inline":
        return kind, ComputeInline(st.name)
    if kind == "root":
        return kind, ComputeRoot(st.name)
    if kind == "cache_write":
        return kind, CacheWrite(st.name)
    if kind == "rfactor":
        red = [it for it, ax in zip(st.roots, st.root_axes) if it.kind == "reduce"]
        if red:
            it = rng.choice(red)
            extent = st.root_extents()[it.name]
            factor = rng.choice([d for d in range(1, extent + 1) if extent % d == 0])
            return kind, Rfactor(st.name, it.name, factor)
    if kind == "pragma":
        return kind, Pragma(st.name, names[0], "auto_unroll_max_step", rng.choice([0, 8, 64]))
    return None, None


def random_schedule(state, rng: random.Random, n_steps: int) -> tuple[Schedule, set]:
    """A schedule of up to n_steps legal random steps and the set of primitive kinds it uses."""
    cur, steps, kinds = state.copy(), [], set()
    for _ in range(n_steps * 4):
        if len(steps) == n_steps:
            break
        kind, step = random_step(cur, rng)
        if step is None:
            continue
        trial = cur.copy()
        try:
            step.apply(trial)
        except ScheduleError:
            continue
        cur = trial
        steps.append(step)
        kinds.add(kind)
    return Schedule(tuple(steps)), kinds


# dense + bias has no stage that can be inlined (a reduction and the output) unless a cache_write makes one
@pytest.mark.parametrize("which, count, never", [("conv", 36, set()), ("dense", 24, {"inline"})])
def test_random_legal_schedules_compile_and_keep_results(which, count, never):
    task = conv_task(ic=8, oc=12, size=(5, 6), in_block=4, out_block=4, residual=True) if which == "conv" \
        else dense_task(m=3, k=12, n=12, block=4)
    state = task.initial_state()
    rng = random.Random(1234 if which == "conv" else 99)
    schedules, used = [], set()
    while len(schedules) < count:
        sched, kinds = random_schedule(state, rng, rng.randint(2, 9))
        schedules.append(sched)
        used |= kinds
    # the sample must exercise every primitive, or this test would check less than it claims
    assert used | never == set(PRIMITIVES), f"primitives never drawn: {set(PRIMITIVES) - used - never}"
    outs = run_compiled(task, schedules)
    assert_matches_reference(task, outs, [s.to_json() for s in schedules])

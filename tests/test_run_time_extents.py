"""Kernels with run-time extents: a dim of a task may be a size variable (te.size_var), known only when the kernel
runs. The kernel reads it from its last parameter (`sizes`, int32), loops over it, and splits it by constants into
whole tiles and a guarded last tile. Each kernel here is scheduled once (the default schedule of the same task at
a typical size, replayed on the symbolic one), built once, and run at sizes it was not built for, against numpy;
rows past the end of every output hold NaN sentinels that the kernel must leave alone."""
from __future__ import annotations

import re

import numpy as np
import pytest

from compiler.arith import evaluate
from compiler.codegen import build_library, vector_width
from compiler.run_time_schedule import default_schedule_for_sizes
from compiler.generic import _lower_for_sizes
from compiler.lower import LoweringError, lower, size_vars
from compiler.schedule import Annotate, Schedule, ScheduleError, Split, initial_state
from relayish import te

from codegen_kernels import Lib

HINT = 97  # the size the schedules are made for (more than a vector of lanes: an axis of it gets split)
SIZES = (1, 3, 16, 67, 200)  # none of them HINT; 1 and 3: fewer than a tile
SENTINEL_ROWS = 3


def ew(n):
    """An elementwise op over rows of 37 (a vector and a 5-lane tail per row)."""
    a = te.placeholder((n, 37), name="a")
    out = te.compute((n, 37), lambda i, j: te.max_(a[i, j], te.const(0.0)) * 3.0, name="out")
    return [a], [out], lambda a: [np.maximum(a, 0) * 3]


def both_free(n, m):
    """Two size variables, the inner one contiguous (run-time strides, a vector loop with a run-time tail)."""
    a, b = te.placeholder((n, m), name="a"), te.placeholder((m,), name="b")
    out = te.compute((n, m), lambda i, j: a[i, j] - b[j], name="out")
    return [a, b], [out], lambda a, b: [a - b]


def row_sum(n):
    a = te.placeholder((n, 50), name="a")
    r = te.reduce_axis(50, "r")
    return [a], [te.compute((n,), lambda i: te.sum(a[i, r], r), name="out")], lambda a: [a.sum(1)]


def column_sum(n):
    """A reduction over the run-time extent."""
    a = te.placeholder((n, 40), name="a")
    r = te.reduce_axis(n, "r")
    return [a], [te.compute((40,), lambda j: te.sum(a[r, j], r), name="out")], lambda a: [a.sum(0)]


def softmax(n):
    """Rows of a softmax, its max and sum stages kept in buffers of n (scratch parameters of run-time size)."""
    a = te.placeholder((n, 50), name="a")
    r1, r2 = te.reduce_axis(50, "r1"), te.reduce_axis(50, "r2")
    mx = te.compute((n,), lambda i: te.max_reduce(a[i, r1], r1), name="mx")
    e = te.compute((n, 50), lambda i, j: te.exp(a[i, j] - mx[i]), name="e")
    s = te.compute((n,), lambda i: te.sum(e[i, r2], r2), name="s")

    def ref(a):
        x = np.exp(a - a.max(1, keepdims=True))
        return [x / x.sum(1, keepdims=True)]
    return [a], [te.compute((n, 50), lambda i, j: e[i, j] / s[i], name="out")], ref


def matmul(n):
    """Rows of a matmul: the register tile of rows x column vectors, its last tile of rows past n guarded."""
    a, w = te.placeholder((n, 64), name="a"), te.placeholder((64, 48), name="w")
    k = te.reduce_axis(64, "k")
    return [a, w], [te.compute((n, 48), lambda i, j: te.sum(a[i, k] * w[k, j], k), name="out")], \
        lambda a, w: [a @ w]


def wide_matmul(n):
    """A classifier's rows (a CTC head): many column blocks, the rows known only at run time."""
    a, w = te.placeholder((n, 64), name="a"), te.placeholder((64, 1024), name="w")
    k = te.reduce_axis(64, "k")
    return [a, w], [te.compute((n, 1024), lambda i, j: te.sum(a[i, k] * w[k, j], k), name="out", tag="matmul")], \
        lambda a, w: [a @ w]


def blocked(n):
    """A transposing copy to 6 blocks of 16 channels over a run-time width (NCHW -> NCHW16c): too few blocks to run
    in parallel alone."""
    a = te.placeholder((96, n), name="a")
    return [a], [te.compute((6, n, 16), lambda j, k, m: a[j * 16 + m, k], name="layout_transform")], \
        lambda a: [np.ascontiguousarray(a.reshape(6, 16, -1).transpose(0, 2, 1))]


TASKS = {"blocked": (blocked, 1), "ew": (ew, 1), "both_free": (both_free, 2), "row_sum": (row_sum, 1), "column_sum": (column_sum, 1),
         "softmax": (softmax, 1), "matmul": (matmul, 1), "wide_matmul": (wide_matmul, 1)}


def generic_kernel(name: str):
    """(PrimFunc, the numpy reference): the task built over size variables, with the default schedule of the
    same task at HINT."""
    make, nvars = TASKS[name]
    sizes = [te.size_var(v) for v in "nm"[:nvars]]
    ins, outs, ref = make(*sizes)
    state = initial_state(outs, ins)
    sched = default_schedule_for_sizes(state, {v: HINT for v in sizes}, vector_width())
    return lower(sched.apply(state), name), ref


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    built = {name: generic_kernel(name) for name in TASKS}
    path = build_library([f for f, _ in built.values()], None, str(tmp_path_factory.mktemp("rte") / "k.so"))
    return Lib(path), built


def run(lib: Lib, func, ref, sizes: dict, seed: int):
    """Call func with random inputs at `sizes` ({size var name: value}); returns (outputs, expected), each output
    with SENTINEL_ROWS rows of NaN past its end checked untouched."""
    values = {v: sizes[v.name] for v in size_vars(func.params)}
    shapes = [tuple(evaluate(d, values) for d in p.shape) for p in func.params[:-1]]
    rng = np.random.default_rng(seed)
    n_in, n_out = func.attrs["num_inputs"], func.attrs["num_outputs"]
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes[:n_in]]
    padded = [np.full((s[0] + SENTINEL_ROWS,) + s[1:] if s else (1,), np.nan, np.float32)
              for s in shapes[n_in:]]
    sizes_arg = np.array([values[v] for v in size_vars(func.params)], np.int32)
    got = lib.call(func.name, *inputs, *padded, sizes_arg)[n_in:n_in + n_out]
    for g, s in zip(got, shapes[n_in:]):
        assert np.isnan(g[s[0]:]).all() if s else True, "wrote past the end of an output"
    return [g[:s[0]] if s else g[:1].reshape(()) for g, s in zip(got, shapes[n_in:])], ref(*inputs)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_one_kernel_runs_every_size(kernels, name):
    lib, built = kernels
    func, ref = built[name]
    for k, n in enumerate(SIZES):
        sizes = {"n": n, "m": SIZES[-1 - k]}
        got, want = run(lib, func, ref, sizes, seed=k)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"{name} at {sizes}")


def test_sizes_are_the_last_parameter_in_first_seen_order(kernels):
    _, built = kernels
    func, _ = built["both_free"]
    assert func.attrs["size_vars"] == ("n", "m")
    assert func.params[-1].name == "sizes" and func.params[-1].dtype == "int32"
    assert func.params[-1].shape == (2,)
    ins, outs, _ = ew(8)
    static = lower(initial_state(outs, ins))
    assert "size_vars" not in static.attrs and static.params[-1].name == "out"


def test_whole_tiles_run_unguarded_and_the_last_tile_guarded(kernels):
    """The matmul's row tiles: the split of n versions the nest, so a guard `< n` appears once, in the tail copy
    (an unguarded copy of the same loops runs the whole tiles)."""
    _, built = kernels
    text = str(built["matmul"][0])
    assert "n = sizes[0]" in text
    assert text.count("if (") >= 2 and " < n)" in text


def test_a_matmul_with_run_time_rows_runs_its_static_column_blocks_in_parallel(kernels):
    """At the typical size the parallel loop fuses column blocks with row tiles; over run-time rows it keeps the
    column blocks alone (the row tiles loop inside), so a block's weight panel is the parallel index times a
    constant: no clamp, no division by a run-time count in any index."""
    _, built = kernels
    text = str(built["wide_matmul"][0])
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("for ")]
    parallel = [line for line in loops if line.endswith("parallel:")]
    assert len(parallel) == 1 and not re.search(r"\bn\b", parallel[0]), parallel
    assert "min(" not in text and "max(" not in text


def test_a_parallel_loop_takes_run_time_loops_outside_few_static_ones(kernels):
    """A layout transform's 6 channel blocks fused with its run-time tiles of rows: the tiles go outside, so a block
    is the fused index modulo 6 (bounded), not the fused index divided by the run-time tile count."""
    _, built = kernels
    text = str(built["blocked"][0])
    parallel = [line.strip() for line in text.splitlines() if line.strip().endswith("parallel:")]
    assert len(parallel) == 1 and parallel[0].startswith("for layout_transform_j_0_i in "), parallel
    assert "layout_transform_j_0_i % 6" in text


def test_a_static_extent_that_is_asked_for_at_run_time_is_refused_clearly():
    ins, outs, _ = both_free(te.size_var("n"), te.size_var("m"))
    state = initial_state(outs, ins)
    with pytest.raises(ScheduleError, match="its extent m is known only at run time; split it by a constant and "
                                            "vectorize the inner part"):
        Schedule((Annotate("out", "j", "vectorize"),)).apply(state)
    with pytest.raises(ScheduleError, match="parts of an extent known only at run time"):
        Schedule((Split("out", "i", (4,), nparts=True),)).apply(state)


def test_a_local_buffer_of_run_time_size_is_refused_clearly():
    """A stage computed at a loop outside the run-time axis would need a local buffer of n elements."""
    from compiler.schedule import ComputeAt
    n = te.size_var("n")
    a = te.placeholder((n, 8), name="a")
    mid = te.compute((n, 8), lambda i, j: a[i, j] + 1.0, name="mid")
    r = te.reduce_axis(n, "r")
    out = te.compute((8,), lambda j: te.sum(mid[r, j], r), name="out")
    state = Schedule((ComputeAt("mid", "out", "i"),)).apply(initial_state([out], [a]))
    with pytest.raises(LoweringError, match="known only at run time"):
        lower(state)


def test_evaluate_dims():
    n, m = te.size_var("n"), te.size_var("m")
    assert evaluate((n + 3) // 4 * m - n % 3, {n: 10, m: 7}) == 3 * 7 - 1
    assert evaluate(te.max_(n, m) - te.min_(n, m), {n: 2, m: 9}) == 7
    assert evaluate(12, {}) == 12
    with pytest.raises(KeyError, match="'m'"):
        evaluate(n * m, {n: 1})


def test_the_sizes_parameter_is_read_not_assumed(kernels):
    """Two calls of one kernel with different sizes on the same buffers: the second sees its own size (a kernel
    that baked the first call's n in would leave rows unwritten or write past them)."""
    lib, built = kernels
    func, _ = built["ew"]
    a = np.ones((20, 37), np.float32)
    out = np.full((20, 37), np.nan, np.float32)
    lib.call("ew", a, out, np.array([20], np.int32))
    got = lib.call("ew", a, np.full((20, 37), np.nan, np.float32), np.array([7], np.int32))[1]
    assert (got[:7] == 3).all() and np.isnan(got[7:]).all()


def _tasks_of(model_nodes, inputs, inits, symbols):
    """The tasks of a small ONNX graph imported over size variables (the generic tier's path up to scheduling)."""
    from onnx import helper
    from compiler.backend import materialize_outputs
    from compiler.passes import PassContext, run_pipeline
    from compiler.task import extract_task_calls
    from frontends import from_onnx
    graph = helper.make_graph(model_nodes, "g", inputs, [helper.make_tensor_value_info("y", 1, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    variables = {s: te.size_var(s) for s in symbols}
    shapes = {v.name: tuple(variables.get(d.dim_param, d.dim_value) for d in v.type.tensor_type.shape.dim)
              for v in inputs}
    ctx = PassContext(opt_level=3, layout="NCHWc", vector_width=vector_width(), winograd=True)
    return extract_task_calls(materialize_outputs(run_pipeline(from_onnx(model, input_shapes=shapes), ctx))).tasks, \
        {v: HINT for v in variables.values()}


def test_a_convolution_over_run_time_sizes_keeps_the_typical_sizes_schedule_step_for_step():
    """The conv's register tile is computed at its output tile, whose extents are constants: its unrolled and
    vectorized loops stay as the typical size's twin has them (only a root stage's run-time loop is refitted)."""
    from onnx import TensorProto, helper, numpy_helper
    from compiler.default_schedule import default_schedule
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    tasks, hints = _tasks_of([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                              helper.make_node("Relu", ["c"], ["y"])],
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, "H", "W"))], [w], "HW")
    convs = [t for t in tasks if any("conv" in op for op in t.ops)]
    assert convs
    for task in convs:
        state = task.initial_state()
        twin = te.bind_sizes(state.outputs + state.inputs, hints)
        typical = default_schedule(initial_state([twin[id(t)] for t in state.outputs],
                                                 [twin[id(t)] for t in state.inputs]), vector_width())
        assert default_schedule_for_sizes(state, hints, vector_width()).steps == typical.steps
        assert any(isinstance(s, Annotate) and s.annotation == "unroll" for s in typical.steps)


@pytest.mark.parametrize("shape, hint", [((3, "T"), HINT), ((3, "T"), 16), ((2, "T", "T"), 16)],
                         ids=["rows", "rows_of_a_vector", "attention"])
def test_a_row_of_run_time_length_is_vectorized_in_whole_vectors_and_a_tail(tmp_path, shape, hint):
    """Softmax over rows of length T: the twin vectorizes its row loop whole; over T the loop is split by the
    vector width and the inner part vectorized, and the kernel runs rows of lengths that are no multiple of it.
    Attention scores (heads, T, T): their parallel loop fuses heads with the run-time rows. A hint of 16 (a size
    range's bound) makes the twin's rows one vector each."""
    from onnx import TensorProto, helper
    tasks, hints = _tasks_of([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], [], "T")
    hints = {v: hint for v in hints}
    (task,) = tasks
    state = task.initial_state()
    sched = default_schedule_for_sizes(state, hints, vector_width())
    vectorized = [s for s in sched.steps if isinstance(s, Annotate) and s.annotation == "vectorize"]
    assert vectorized and all(s.iter.endswith(".1") for s in vectorized)
    func = _lower_for_sizes(state, hints, vector_width(), "softmax_rows")  # as the generic module lowers it
    lib = Lib(build_library([func], None, str(tmp_path / "softmax.so")))

    def ref(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return [e / e.sum(-1, keepdims=True)]
    for length in (1, 5, vector_width() + 3):
        (got,), (want,) = run(lib, func, ref, {"T": length}, seed=length)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"T={length}")

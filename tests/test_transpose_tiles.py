"""Transposing copies in square register tiles (compiler/transpose_schedule.py, compiler/codegen/transpose.py):
Transpose ops and the layout transforms around blocked convolutions (NCHW -> NCHW16c, NCHW16c -> NCHW with the
padding dropped) load rows as vectors, transpose them with shuffles and store columns as vectors; partial tiles
(extents that are not multiples of the side) run the same code with masks. Three ways over perms, tails, dtypes
and both layouts; the schedule's choice; and the kernels' structure."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen.analysis import stmt_exprs, walk_expr, walk_stmt
from compiler.codegen.transpose import transposable, transpose_vectors
from compiler.default_schedule import default_schedule
from compiler.loopir import For, Load
from compiler.lower import lower
from compiler.passes import PassContext, run_pipeline
from compiler.task import extract_tasks
from compiler.transpose_schedule import transpose_tile
from frontends import from_onnx
from harness import assert_exactly, feeds_for, make_model, three_way, three_way_random, typed_model
from relayish import te
from relayish.expr import post_order

RNG = np.random.default_rng(5)


def kernels(model):
    """(task, scheduled state, lowered kernel) of every task of a model, default schedules."""
    out = []
    for task in extract_tasks(run_pipeline(from_onnx(model), PassContext())):
        state = default_schedule(task.initial_state(), 16).apply(task.initial_state())
        out.append((task, state, lower(state)))
    return out


def tiles(kernel) -> list:
    return [t for s in walk_stmt(kernel.body) if isinstance(s, For) and s.kind == "unroll"
            for t in [transposable(s)] if t is not None]


@pytest.mark.parametrize("shape, perm", [((1, 64, 47, 47), [0, 3, 1, 2]), ((33, 40), [1, 0]),
                                         ((2, 17, 35), [0, 2, 1]), ((5, 8, 12), [0, 2, 1]),
                                         ((3, 4, 6, 5), [3, 2, 1, 0]), ((16, 16), [1, 0]),
                                         ((182, 192), [1, 0])])
def test_transposes_three_ways(shape, perm):
    three_way_random(make_model("Transpose", {"x": shape}, {"perm": perm}, 17), close=assert_exactly)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16", "int64", "bool", "float64"])
def test_transposes_of_every_element_size(dtype):
    model = typed_model("Transpose", {"x": ((3, 37, 21), dtype)}, {"perm": [0, 2, 1]})
    three_way(model, feeds_for({"x": ((3, 37, 21), dtype)}, RNG), close=assert_exactly)


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("c, o, size", [(48, 487, 47), (16, 241, 24), (36, 64, 30), (8, 20, 5)])
def test_convolutions_between_transposing_layout_transforms(c, o, size, layout):
    consts = {"w": RNG.standard_normal((o, c, 1, 1)).astype(np.float32),
              "b": RNG.standard_normal(o).astype(np.float32)}
    three_way_random(make_model("Conv", {"x": (1, c, size, size)}, {"kernel_shape": [1, 1]}, 17, consts),
                     layout=layout)


def test_a_transpose_runs_in_tiles_partial_ones_included():
    """(1, 64, 47, 47) -> (1, 47, 64, 47): 47 = 2 x 16 + 15 along both tile axes: the whole tiles and the three
    kinds of partial ones (a guard on u, on v, on both) are all transposing tiles; no lane-by-lane copy is left."""
    (task, state, kernel), = kernels(make_model("Transpose", {"x": (1, 64, 47, 47)}, {"perm": [0, 3, 1, 2]}, 17))
    found = tiles(kernel)
    assert len(found) == 4 and {(t.cond_u is None, t.cond_v is None) for t in found} == \
        {(True, True), (True, False), (False, True), (False, False)}
    assert all(t.u.extent.value == 16 for t in found)


def test_the_layout_transforms_of_a_blocked_convolution_are_tiles():
    consts = {"w": RNG.standard_normal((487, 48, 1, 1)).astype(np.float32)}
    model = make_model("Conv", {"x": (1, 48, 47, 47)}, {"kernel_shape": [1, 1]}, 17, consts)
    transforms = [k for task, _, k in kernels(model) if "conv" not in task.name]
    assert len(transforms) == 2 and all(tiles(k) for k in transforms)


def test_transpose_tile_is_only_for_transposing_copies():
    def tile_of(model):
        (task, _, _), = kernels(model)
        state = task.initial_state()
        return transpose_tile(state, state.stages[-1], 16)
    assert tile_of(make_model("Transpose", {"x": (40, 33)}, {"perm": [1, 0]}, 17)) is not None
    assert tile_of(make_model("Transpose", {"x": (40, 33, 20)}, {"perm": [1, 0, 2]}, 17)) is None  # rows stay
    assert tile_of(make_model("Relu", {"x": (40, 33)}, {}, 17)) is None
    assert tile_of(make_model("Transpose", {"x": (3, 40)}, {"perm": [1, 0]}, 17)) is None  # 3 < 4 lanes


def test_transpose_vectors_is_the_transpose():
    from llvmlite import ir
    n = 8
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    rows = [ir.Constant(ir.VectorType(ir.IntType(32), n), [i * n + j for j in range(n)]) for i in range(n)]
    columns = transpose_vectors(b, rows)
    # follow the shuffles symbolically: each column's lane k must be row k's element of that column
    values = {id(r): [i * n + j for j in range(n)] for i, r in enumerate(rows)}
    for instr in fn.blocks[0].instructions:
        a, c, mask = instr.operands
        both = values[id(a)] + values[id(c)]
        values[id(instr)] = [both[m.constant] for m in mask.constant]
    assert [values[id(col)] for col in columns] == [[k * n + e for k in range(n)] for e in range(n)]


def test_a_conv1d_result_leaves_its_blocks_in_tiles():
    """Conv1d 3 -> 1097 (k 5) over 829: its result (1, 70, 1, 829, 16) goes back to (1, 1097, 829) through
    layout_transform, unpad_channels and the reshape that drops the unit axis; that reshape's index maps the
    length straight through (no `% 829`: a dim after unit dims needs no wrap), so the copy is a tile."""
    consts = {"w": RNG.standard_normal((1097, 3, 5)).astype(np.float32)}
    model = make_model("Conv", {"x": (1, 3, 829)}, {"kernel_shape": [5], "pads": [2, 2]}, 17, consts)
    last = kernels(model)[-1][2]
    assert tiles(last)
    three_way_random(model)


@pytest.mark.parametrize("op, channels, size, attrs", [
    ("AveragePool", 113, 33, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", 128, 20, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", 17, 9, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", 3, 8, {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1],
                           "count_include_pad": 1}),
])
def test_windowed_pools_run_blocked(op, channels, size, attrs):
    """A max or average pool runs blocked even alone (passes/layout.py pool_blocked): in NCHW its strided windows
    were read element by element (a 3x3 / 2 max pool of 128 channels over 56x56: 430 us, 63 us blocked). Its
    odd channels are padded (113 -> 128), and the padding transform before it is a tile too: rows of padded
    channels load nothing and are zeros."""
    model = make_model(op, {"x": (1, channels, size, size)}, attrs, 17)
    blocked = run_pipeline(from_onnx(model), PassContext(), stop_after="propagate_layout")
    pools = [n for n in post_order(blocked.main.body) if getattr(n, "op", None) in ("nn.max_pool2d", "nn.avg_pool2d")]
    assert pools and all(p.attrs.layout.startswith("NCHW") and p.attrs.layout != "NCHW" for p in pools)
    first = kernels(model)[0][2]
    assert tiles(first) and (channels % 16 == 0 or any(t.pick is not None for t in tiles(first)))
    three_way_random(model)


def test_a_transpose_that_moves_a_unit_axis_is_a_contiguous_copy():
    """(1, 151, 34, 34) -> (151, 1, 34, 34) moves nothing in memory: its rows of 34 x 34 run as vector copies
    (flat_schedule.py), no index divided (a fused unit axis's f // 1156 is 0 only below 1156, not over the
    partial last vector: flat_tail keeps it out)."""
    model = make_model("Transpose", {"x": (1, 151, 34, 34)}, {"perm": [1, 0, 2, 3]}, 17)
    (task, state, kernel), = kernels(model)
    loads = [te.expr_str(x.index) for st in walk_stmt(kernel.body) for x in stmt_exprs(st) for x in walk_expr(x)
             if isinstance(x, Load)]
    assert loads and not any("//" in i or "%" in i for i in loads)
    three_way_random(model, close=assert_exactly)


def test_a_grouped_unpadding_runs_in_tiles_of_each_group():
    """36 -> 68 channels in 4 groups: each group's 17 outputs padded to 24 (3 blocks of 8). Back to NCHW, the
    position of channel j is (j // 17) * 24 + j % 17, contiguous within a group only: the tile first splits the
    channels by groups (TransposeTile.period), and in the whole tiles of a group lowering simplifies the index
    to an affine one (lower.py _resimplified), so the copy is a tile there (3x faster than element by element).
    The tuner's space holds that schedule."""
    from tuning.annotate import concretize, derive_program
    from tuning.sketch import generate_sketches
    consts = {"w": RNG.standard_normal((68, 9, 1, 1)).astype(np.float32)}
    model = make_model("Conv", {"x": (1, 36, 20, 21)}, {"kernel_shape": [1, 1], "group": 4}, 17, consts)
    task, state, kernel = kernels(model)[-1]
    schedule = default_schedule(task.initial_state(), 16)
    assert any(t.pick is None and t.cond_u is None for t in tiles(kernel))  # a whole tile, transposed
    assert any(getattr(s, "lengths", None) == (17,) for s in schedule.steps)  # split by the group
    sketches = generate_sketches(task)
    program = derive_program(sketches, schedule, task.initial_state())
    assert program is not None and concretize(sketches[program.sketch_id], program, task.initial_state()) == schedule
    three_way_random(model)


@pytest.mark.parametrize("quantized", [True, False], ids=["quantize", "sigmoid"])
def test_a_computed_transposing_copy_computes_on_the_rows_it_loads(quantized):
    """An elementwise function of one read fused into a transposing copy (a model's float input quantized on its
    way to NCHW4c; here QuantizeLinear or Sigmoid before a Transpose) stays a transposing tile: the rows are loaded
    as vectors, computed (float -> uint8 included), then transposed; the result is the interpreter's and
    onnxruntime's (the quantized one exactly)."""
    from onnx import TensorProto, helper
    first = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]) if quantized else \
        helper.make_node("Sigmoid", ["x"], ["q"])
    out_type = TensorProto.UINT8 if quantized else TensorProto.FLOAT
    graph = helper.make_graph([first, helper.make_node("Transpose", ["q"], ["y"], perm=[1, 0])], "qt",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 35])],
                              [helper.make_tensor_value_info("y", out_type, [35, 40])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [0.02]),
                               helper.make_tensor("z", TensorProto.UINT8, [], [119])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (task, state, kernel), = kernels(model)
    found = tiles(kernel)
    assert found and all(t.compute is not None for t in found)
    x = RNG.standard_normal((40, 35)).astype(np.float32) * 3
    x[0, :4] = [0.01, 0.03, -0.05, 0.07]  # ties of x / 0.02 (to even)
    three_way(model, {"x": x}, **({"close": assert_exactly} if quantized else {}))

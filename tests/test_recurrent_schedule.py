"""The default schedule of a recurrent cell (compiler/recurrent_schedule.py): the gates in a register tile at the
cell's column tiles, the reduction outside the tile, lanes vectorized; directions x tiles in parallel only for a
step with enough multiply-adds; and the kernel it makes matches the cell's numpy reference."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.default_schedule import default_schedule
from compiler.passes import PassContext, run_pipeline
from compiler.recurrent_schedule import PARALLEL_MACS
from compiler.task import extract_task_calls
from frontends import from_onnx
from relayish.interp import evaluate
from test_compile_rnn import make_case


def cell_task(op, attrs, sizes):
    model, _ = make_case(op, attrs, 14, ("B",), sizes=sizes)
    fused = run_pipeline(from_onnx(model), PassContext(vector_width=16))
    tasks = extract_task_calls(fused).tasks
    return next(t for t in tasks if t.ops == [f"nn.{op.lower()}_cell"])


@pytest.mark.parametrize("op,attrs,sizes,tiled", [
    ("LSTM", {"direction": "bidirectional"}, (4, 1, 8, 128), "gates"),
    ("GRU", {"linear_before_reset": 1}, (4, 3, 8, 64), "gates"),
    ("GRU", {}, (4, 2, 8, 64), "gates_h"),  # z, r first, over every unit: a root stage
    ("RNN", {}, (4, 1, 8, 40), "gates"),
])
def test_gates_are_a_register_tile_at_the_cells_column_tiles(op, attrs, sizes, tiled):
    task = cell_task(op, attrs, sizes)
    state = default_schedule(task.initial_state(), 16).apply(task.initial_state())
    cell, gates = state.stage("cell"), state.stage(tiled)
    assert gates.loc.is_at("cell", "i@j@m.0")
    assert cell.leaves[-1].annotation == gates.leaves[-1].annotation == "vectorize"
    kinds = [it.kind for it in gates.leaves]
    assert kinds.index("reduce") < len(kinds) - 4 and kinds[-4:] == ["spatial"] * 4  # rows, gates, vectors, lanes
    assert all(it.annotation == "unroll" for it in gates.leaves[-4:-1])
    macs = sum(np.prod([a.extent for a in list(s.op.axes) + list(s.op.reduce_axes)]) for s in state.stages
               if s.is_reduction)
    assert (cell.leaves[0].annotation == "parallel") == (macs >= PARALLEL_MACS)


def test_small_steps_run_serially_large_ones_in_parallel():
    small = default_schedule(cell_task("LSTM", {}, (4, 1, 8, 32)).initial_state(), 16)
    large = default_schedule(cell_task("LSTM", {}, (4, 1, 8, 256)).initial_state(), 16)
    assert not any(getattr(s, "annotation", None) == "parallel" for s in small.steps)
    assert any(getattr(s, "annotation", None) == "parallel" for s in large.steps)


def test_the_scheduled_kernel_matches_the_reference():
    """Through compile: the interpreter runs the cells' numpy references on the same module."""
    from compiler import compile_model
    model, feeds = make_case("GRU", {"direction": "bidirectional"}, 14, ("B", "initial_h"), sizes=(6, 5, 7, 40))
    ours = compile_model(model).run(None, feeds)
    for a, r in zip(ours, evaluate(from_onnx(model), feeds)):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5)

"""The back half of the pipeline (compiler/backend.py): its steps, task extraction, schedule choice, memory plan."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.task
from compiler import compile_model
from compiler.backend import BACKEND, STEP_NAMES, Products, choose_schedule, run_backend
from compiler.codegen import vector_width
from compiler.memory import nbytes
from compiler.passes import PASS_NAMES, PassContext, run_pipeline
from compiler.schedule import Schedule, Split
from frontends import from_onnx
from relayish.interp import evaluate

SHAPE = (1, 4, 6, 6)
GIVEN = ("fused", "records", "vector_width", "lib_path", "log", "default_schedules")


def conv_chain(n: int) -> onnx.ModelProto:
    """x -> conv -> conv -> ... (n same-shaped 3x3 convolutions with different weights): n calls, one task."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"y{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        prev = f"y{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def fused_chain(n: int):
    return run_pipeline(from_onnx(conv_chain(n)), PassContext(layout="NCHW", vector_width=vector_width()))


def test_every_step_reads_only_what_is_given_or_made_before():
    fields = {f.name for f in dataclasses.fields(Products)}
    available = set(GIVEN)
    for step in BACKEND:
        missing = set(step.reads) - available
        assert not missing, f"step {step.name} reads {missing} before any step makes it"
        assert step.makes in fields, f"step {step.name} makes {step.makes!r}, not a field of Products"
        available.add(step.makes)
    assert available == fields


def test_identical_calls_are_one_task_built_once(monkeypatch):
    built = []
    real = compiler.task.build_task
    monkeypatch.setattr(compiler.task, "build_task", lambda func, name=None: built.append(func) or real(func, name))
    calls = compiler.task.extract_task_calls(fused_chain(3))
    assert len(calls.calls) == 3 and calls.task_of == [0, 0, 0]
    assert len(built) == 1 and len(calls.tasks) == 1 and calls.tasks[0].weight == 3


def test_run_backend_times_each_step_and_stops_after_one():
    timings = {}
    made = run_backend(fused_chain(2), vector_width(), timings=timings, stop_after="plan_memory")
    assert list(timings) == STEP_NAMES[:STEP_NAMES.index("plan_memory") + 1]
    assert made.object_code is None and made.library is None
    assert [c.kernel for c in made.memory.executor.calls] == [made.kernels[0].name] * 2
    with pytest.raises(ValueError, match="unknown backend step 'codegen'; steps are materialize_outputs"):
        run_backend(fused_chain(1), vector_width(), stop_after="codegen")
    with pytest.raises(ValueError, match="link step needs lib_path"):
        run_backend(fused_chain(1), vector_width())


def test_compile_info_times_every_pass_and_every_step():
    model = conv_chain(2)
    module = compile_model(model, layout="NCHW")
    assert list(module.meta["compile_info"]["timings"]) == PASS_NAMES + STEP_NAMES
    feeds = {"x": np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)}
    expected = evaluate(from_onnx(model), feeds)[0]
    assert np.max(np.abs(module.run(None, feeds)[0] - expected)) <= 1e-4 * np.max(np.abs(expected))


def test_a_record_that_no_longer_fits_the_task_falls_back_to_the_default():
    task = compiler.task.extract_tasks(fused_chain(1))[0]

    class Records:
        def __init__(self, schedule):
            self.schedule = schedule

        def best(self, key):
            return self.schedule

    stale = Records(Schedule((Split("no_such_stage", "i", (2,)),)))
    chosen = choose_schedule(task, stale, vector_width())
    assert chosen.source == "default" and len(chosen.schedule) > 0
    naive = choose_schedule(task, Records(Schedule()), vector_width())  # no steps: fits every task
    assert naive.source == "tuned" and len(naive.schedule) == 0
    assert [s.name for s in naive.state.stages] == [s.name for s in task.initial_state().stages]


def test_workspace_blocks_are_reused_and_never_shared_within_a_call():
    made = run_backend(fused_chain(4), vector_width(), stop_after="plan_memory")
    kernel = made.kernels[0]
    size = [buf.size * np.dtype(buf.dtype).itemsize for buf in kernel.params]  # of each argument, in bytes
    for call in made.memory.executor.calls:  # inputs, output and scratch of one call: disjoint
        regions = sorted((ref.offset, ref.offset + n) for ref, n in zip(call.args, size) if ref.kind == "workspace")
        assert all(end <= start for (_, end), (start, _) in zip(regions, regions[1:])), call
    n_fixed = kernel.attrs["num_inputs"] + kernel.attrs["num_outputs"]
    unshared = 3 * size[n_fixed - 1] + 4 * sum(size[n_fixed:])  # 3 intermediates (the last call writes the output)
    assert 0 < made.memory.workspace_bytes < unshared  # blocks were reused

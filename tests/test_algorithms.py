"""A convolution's algorithm as a decision of the search (compiler/algorithms.py, issue 13 item 3): sites, the
tasks of every algorithm, the choice from records, the estimate that counts a site once, and compile_model
following the records' choice with correct outputs."""
import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.algorithms import (alternative_of, block_choices, block_variants, choose_algorithms, conv_sites,
                                 estimated_latency, tasks_with_alternatives)
from compiler.backend import untuned_schedule
from compiler.codegen import host_target, vector_width
from compiler.passes import PassContext, run_pipeline
from compiler.records import RecordStore
from compiler.task import Task, extract_tasks
from frontends import from_onnx
from relayish.interp import evaluate

CTX = PassContext(vector_width=vector_width())  # the host's: compile_model's tasks must be these tasks


def _model() -> onnx.ModelProto:
    """x -> conv3x3 -> relu -> conv3x3 (+x) -> relu, 32 channels on 16x16: two convolutions of one signature
    (the rule gives them Winograd F(2x2): 64 tiles, F(4x4) would leave 16), and a 1x1 conv without a choice."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, f"w{i}")
         for i, s in enumerate([(32, 32, 3, 3), (32, 32, 3, 3), (16, 32, 1, 1)])]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Relu", ["d"], ["e"]),
             helper.make_node("Conv", ["e", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "two_sites", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], w)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _site_tasks(tasks):
    return {(t.alternative[1], t.key) for t in tasks if t.alternative is not None}


def test_one_site_with_the_rules_choice_and_every_algorithm_as_a_tagged_task():
    mod = from_onnx(_model())
    sites = conv_sites(mod)
    assert len(sites) == 1 and list(sites.values()) == [(2, 2)]  # rule F(2x2), two convolutions
    tasks = tasks_with_alternatives(mod, CTX)
    tiles = sorted({t.alternative[1] for t in tasks if t.alternative})
    assert tiles == [0, 2, 4]
    # each algorithm: the conv+relu and the conv+add+relu task, distinct keys; the 1x1 conv has no choice
    assert len(_site_tasks(tasks)) == 6 and len({k for _, k in _site_tasks(tasks)}) == 6
    assert all(t.alternative[2] == 2 for t in tasks if t.alternative)
    plain = [t for t in tasks if t.alternative is None]
    assert plain and all(alternative_of(t) is None for t in plain)
    rule_keys = {t.key for t in extract_tasks(run_pipeline(mod, CTX))}
    assert rule_keys <= {t.key for t in tasks}


def _costs(tasks, fast_tile):
    """A cost per task key: the site's tasks of fast_tile cost 1, the other site tasks 3, the rest 1."""
    return {t.key: (1.0 if t.alternative[1] == fast_tile else 3.0) if t.alternative else 1.0 for t in tasks}


@pytest.mark.parametrize("fast_tile", [0, 4])
def test_choose_algorithms_picks_the_cheapest_and_compiles_it(fast_tile):
    mod = from_onnx(_model())
    costs = _costs(tasks_with_alternatives(mod, CTX), fast_tile)
    ctx = choose_algorithms(mod, CTX, costs.get)
    assert [m for _, m in ctx.conv_algorithms] == [fast_tile]
    ops = {op for t in extract_tasks(run_pipeline(mod, ctx)) for op in t.ops}
    assert ("nn.conv2d_winograd_nchwc" in ops) == (fast_tile != 0)


def test_choose_algorithms_keeps_the_rule_when_it_cannot_compare():
    mod = from_onnx(_model())
    tasks = tasks_with_alternatives(mod, CTX)
    costs = _costs(tasks, 4)
    rule_site_keys = {t.key for t in tasks if t.alternative and t.alternative[1] == 2}
    unknown_rule = {k: (None if k in rule_site_keys else c) for k, c in costs.items()}
    assert choose_algorithms(mod, CTX, unknown_rule.get) == CTX  # the rule's algorithm was never measured
    assert choose_algorithms(mod, CTX, _costs(tasks, 2).get) == CTX  # the rule is the cheapest


def test_estimate_counts_each_site_once_cheapest_or_rule():
    def task(key, weight, alt=None):
        return Task(key, key, None, [], [], 1.0, weight, [], alt)
    tasks = [task("plain", 2), task("d", 1, ("s", 0, 2)), task("w2", 1, ("s", 2, 2)), task("w4", 1, ("s", 4, 2))]
    cost = {"plain": 1.0, "d": 5.0, "w2": 4.0, "w4": 3.0}
    assert estimated_latency(tasks, lambda t: cost[t.key]) == 2.0 + 3.0
    assert estimated_latency(tasks, lambda t: cost[t.key], "rule") == 2.0 + 4.0
    cost["w4"] = float("nan")  # not measured yet: the best known algorithm counts
    assert estimated_latency(tasks, lambda t: cost[t.key]) == 2.0 + 4.0


def test_compile_model_follows_the_records_choice(tmp_path):
    model = _model()
    mod = from_onnx(model)
    tasks = tasks_with_alternatives(mod, CTX)
    costs = _costs(tasks, 0)  # direct is the fastest here, against the rule's Winograd
    db = str(tmp_path / "records.db")
    with RecordStore(db) as store:
        for t in tasks:
            store.add(t, host_target(), untuned_schedule(t, CTX.vector_width), costs=[costs[t.key]])
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype(np.float32)
    want = evaluate(mod, {"x": x})[0]
    for records, winograd_expected in ((None, True), (db, False)):
        module = compile_model(model, records=records, cache=False)
        ops = {op for k in module.kernels for op in k["ops"]}
        assert ("nn.conv2d_winograd_nchwc" in ops) == winograd_expected
        np.testing.assert_allclose(module.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------- channel blocks

def _blocks_of(mod, block):
    return {t.key for t in extract_tasks(run_pipeline(mod, dataclasses.replace(CTX, channel_block=block)))}


def test_channel_blocks_are_model_variants_with_tagged_tasks():
    """With blocks=True every task knows its calls in the model of each channel block (half, one and two
    vectors); the tasks of a block are exactly that model's tasks, the rule's block being the vector width."""
    mod = from_onnx(_model())
    vw = CTX.vector_width
    assert set(block_variants(mod, CTX)) == set(block_choices(vw)) == {vw // 2, vw, 2 * vw}
    tasks = tasks_with_alternatives(mod, CTX, blocks=True)
    tagged = [t for t in tasks if t.blocks]
    assert tagged and all(t.blocks[0] == vw for t in tagged)
    for b in block_choices(vw):
        assert {t.key for t in tagged if b in t.blocks[1]} == _blocks_of(mod, b), b
    assert _blocks_of(mod, vw) != _blocks_of(mod, 2 * vw)  # another layout: other kernels


def test_estimate_takes_the_cheapest_block_whose_tasks_are_all_known():
    def task(key, blocks, alt=None):
        return Task(key, key, None, [], [], 1.0, 1, [], alt, blocks)
    rule = 8
    tasks = [task("shared", (rule, {4: 1, 8: 1, 16: 1})), task("r", (rule, {8: 2})),
             task("w2", (rule, {8: 1}), ("s", 2, 2)), task("d", None, ("s", 0, 2)),  # a site inside the rule block
             task("b16", (rule, {16: 1})), task("b4", (rule, {4: 3}))]
    cost = {"shared": 1.0, "r": 1.0, "w2": 2.0, "d": 1.5, "b16": 5.0, "b4": float("nan")}
    assert estimated_latency(tasks, lambda t: cost[t.key], "rule") == 1 + 2 + 2
    assert estimated_latency(tasks, lambda t: cost[t.key]) == 1 + 2 + 1.5  # rule block, direct; 16: 6; 4: unknown
    cost["b16"] = 1.0
    assert estimated_latency(tasks, lambda t: cost[t.key]) == 2.0  # block 16 is cheapest now
    assert estimated_latency(tasks, lambda t: cost[t.key], "rule") == 5.0


def test_compile_model_follows_the_records_block(tmp_path):
    """Records of every task of the rule's block and of two vectors, the latter cheaper: compile_model takes the
    wider block (the outputs of its convolutions whose channels fill it are NCHW{2 vw}c) and still computes the model."""
    model = _model()
    mod = from_onnx(model)
    vw = CTX.vector_width
    wide = _blocks_of(mod, 2 * vw)
    db = str(tmp_path / "records.db")
    with RecordStore(db) as store:
        for t in tasks_with_alternatives(mod, CTX, blocks=True):
            if t.blocks and (vw in t.blocks[1] or 2 * vw in t.blocks[1]):
                store.add(t, host_target(), untuned_schedule(t, vw), costs=[0.1 if t.key in wide else 1.0])
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype(np.float32)
    want = evaluate(mod, {"x": x})[0]
    module = compile_model(model, records=db, cache=False)
    # (channels, block) of each convolution; the 1x1 one's 16 outputs fill no 32-channel block with AVX-512
    convs = [(k["output_shape"][1] * k["output_shape"][-1], k["output_shape"][-1]) for k in module.kernels
             if k["ops"][0].startswith("nn.conv2d")]
    wide_enough = {block for channels, block in convs if channels % (2 * vw) == 0}
    assert wide_enough == {2 * vw}, module.kernels
    np.testing.assert_allclose(module.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)


def test_tune_model_weighs_channel_blocks_and_compile_model_applies_the_records(tmp_path):
    """tune_model(algorithms=True) on a model of two 1x1 convolutions measures the tasks of every channel block's
    model; its estimate is finite once each is measured, and the model compiled with the records (whatever
    block they favour) computes the reference's result."""
    from tuning.tune import tune_model
    rng = np.random.default_rng(5)
    w = [numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.3, f"w{i}")
         for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["y"])]
    graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], w)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path, db = str(tmp_path / "blocks.onnx"), str(tmp_path / "blocks.db")
    onnx.save(model, path)
    mod = from_onnx(model)
    tasks = tasks_with_alternatives(mod, CTX, blocks=True)
    assert {b for t in tasks if t.blocks for b in t.blocks[1]} == set(block_choices(CTX.vector_width))
    result = tune_model(path, db, trials=len(tasks), algorithms=True, progress=False, check_model=False,
                        params={"batch_size": 1, "final_remeasure": 0})
    assert len(result.tasks) == len(tasks) and result.estimated_latency() == result.estimated_latency()  # not NaN
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(compile_model(path, records=db, cache=False).run(None, {"x": x})[0],
                               evaluate(mod, {"x": x})[0], rtol=1e-4, atol=1e-4)

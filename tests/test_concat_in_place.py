"""Concatenation in place (compiler/memory.py): the producers of a concatenation's inputs write straight into
their slices of its output, and the concatenation does not run. Numerics three ways (compiled vs interpreter vs
onnxruntime), the plan's offsets, and the cases that must keep the copy."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.backend import run_backend
from compiler.codegen import vector_width
from compiler.memory import nbytes
from compiler.passes import PassContext, run_pipeline
from frontends import from_onnx
from harness import three_way_random

C = 16  # channels of every convolution: one 16-channel block


def graph(nodes, inits, outputs, shape=(1, 8, 6, 6)):
    rng = np.random.default_rng(0)
    tensors = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k) for k, s in inits.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["n", "c", "h", "w"]) for o in outputs], tensors)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv(x, w, y, k=1):
    return helper.make_node("Conv", [x, w], [y], kernel_shape=[k, k], pads=[k // 2] * 4)


def fire_and_dense(batch=1):
    """SqueezeNet's fire (two convolutions of one input, concatenated) nested in a DenseNet-style concatenation
    (the first concatenation and a convolution of it); `a` is also read after both concatenations."""
    n = helper.make_node
    nodes = [conv("x", "w0", "a0"), n("Relu", ["a0"], ["a"]), conv("x", "w1", "b0", 3), n("Relu", ["b0"], ["b"]),
             n("Concat", ["a", "b"], ["c"], axis=1), conv("c", "w2", "d"), n("Concat", ["c", "d"], ["e"], axis=1),
             conv("e", "w3", "y"), conv("a", "w4", "z")]
    inits = {"w0": (C, 8, 1, 1), "w1": (C, 8, 3, 3), "w2": (C, 2 * C, 1, 1), "w3": (C, 3 * C, 1, 1),
             "w4": (C, C, 1, 1)}
    return graph(nodes, inits, ["y", "z"], (batch, 8, 6, 6))


def in_place_calls(model, layout="NCHWc") -> list:
    return [k["ops"] for k in compile_model(model, layout=layout).kernels if k.get("in_place")]


@pytest.mark.parametrize("layout,op", [("NCHWc", "nn.concat_blocked"), ("NCHW", "concatenate")])
def test_nested_concatenations_run_in_place_and_match(layout, op):
    three_way_random(fire_and_dense(), layout=layout)
    assert in_place_calls(fire_and_dense(), layout) == [[op], [op]]


def test_inputs_are_written_into_their_slices_of_the_outermost_output():
    fused = run_pipeline(from_onnx(fire_and_dense()), PassContext(vector_width=vector_width()))
    made = run_backend(fused, vector_width(), stop_after="plan_memory")
    calls, plan = made.task_calls.calls, made.memory.executor.calls
    out_ref = {id(c): p.args[len(c.args)] for c, p in zip(calls, plan)}  # each call's output buffer
    concats = [(c, p) for c, p in zip(calls, plan) if p.elided]
    assert len(concats) == 2
    outer_call, _ = concats[1]
    outer = out_ref[id(outer_call)]
    for c, _ in concats:  # every input at its offset inside the outermost region, and the regions nest
        offset = out_ref[id(c)].offset
        assert outer.offset <= offset and offset + nbytes(c.type) <= outer.offset + nbytes(outer_call.type)
        for a in c.args:
            assert out_ref[id(a)].kind == "workspace" and out_ref[id(a)].offset == offset
            offset += nbytes(a.type)


def two_inputs(kind):
    n = helper.make_node
    if kind == "graph output":  # the concatenation is the model's output: the caller's buffer, not ours
        return graph([conv("x", "w0", "a"), conv("x", "w1", "b"), n("Concat", ["a", "b"], ["y"], axis=1)],
                     {"w0": (C, 8, 1, 1), "w1": (C, 8, 1, 1)}, ["y"])
    if kind == "same value twice":
        return graph([conv("x", "w0", "a"), n("Concat", ["a", "a"], ["c"], axis=1), conv("c", "w2", "y")],
                     {"w0": (C, 8, 1, 1), "w2": (C, 2 * C, 1, 1)}, ["y"])
    if kind == "input also an output":  # (in NCHW: blocked, the output is a transform of the concatenated value)
        return graph([conv("x", "w0", "a"), conv("x", "w1", "b"), n("Concat", ["a", "b"], ["c"], axis=1),
                      conv("c", "w2", "y")], {"w0": (C, 8, 1, 1), "w1": (C, 8, 1, 1), "w2": (C, 2 * C, 1, 1)},
                     ["y", "a"])
    if kind == "in two concatenations":
        return graph([conv("x", "w0", "a"), conv("x", "w1", "b"), n("Concat", ["a", "b"], ["c"], axis=1),
                      n("Concat", ["b", "a"], ["d"], axis=1), conv("c", "w2", "y"), conv("d", "w2", "z")],
                     {"w0": (C, 8, 1, 1), "w1": (C, 8, 1, 1), "w2": (C, 2 * C, 1, 1)}, ["y", "z"])
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["graph output", "same value twice", "input also an output"])
def test_concatenations_that_must_copy(kind):
    layout = "NCHW" if kind == "input also an output" else "NCHWc"
    three_way_random(two_inputs(kind), layout=layout)
    assert in_place_calls(two_inputs(kind), layout) == []


def test_a_value_in_two_concatenations_goes_in_place_into_one():
    three_way_random(two_inputs("in two concatenations"))
    assert len(in_place_calls(two_inputs("in two concatenations"))) == 1


def test_batch_two_keeps_the_copy():
    """With 2 images the slices of an input are not contiguous in the output."""
    three_way_random(fire_and_dense(batch=2))
    assert in_place_calls(fire_and_dense(batch=2)) == []

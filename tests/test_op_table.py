"""The op-class kernel table (bench/op_table.py): its rows, their FLOP counts, and tiny versions of every class
checked against the numpy reference (ours and onnxruntime) through the benchmark's own build path. No timing."""
from __future__ import annotations

import math

import numpy as np
import pytest

from relayish_tools.bench.op_table import (CASES, CLASSES, Conv, Dense, MatMul, checked_engines, format_row, header, model_bytes,
                            roof_bound, select)
from compiler.codegen import vector_width

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def inferred_output_shape(model) -> tuple:
    """The output shape onnx's shape inference gives the model's nodes, from the shapes of its inputs and
    initializers alone (the declared output shape and the weights' data left out)."""
    from onnx import helper
    g = model.graph
    shapes = [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in g.initializer]
    graph = helper.make_graph(g.node, "bare", [*g.input, *shapes], [helper.make_empty_tensor_value_info("y")])
    bare = helper.make_model(graph, opset_imports=model.opset_import)
    inferred = onnx.shape_inference.infer_shapes(bare, strict_mode=True)
    return tuple(d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim)


def independent_flops(case) -> int:
    """2 x multiply-adds from onnx's inferred output shape: each conv output sums (cin/g) x kh x kw products (the
    weight's size per output channel), each dense / matmul output k products."""
    model = case.model()
    out = math.prod(inferred_output_shape(model))
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    if isinstance(case, Conv):
        return 2 * out * math.prod(weights["w"][1:])
    if isinstance(case, Dense):
        return 2 * out * weights["w"][1]
    a = next(v for v in model.graph.input if v.name == "a")
    return 2 * out * a.type.tensor_type.shape.dim[-1].dim_value


def has_case(**fields) -> bool:
    return any(all(getattr(c, k, None) == v for k, v in fields.items()) for c in CASES)


def test_every_class_has_rows():
    assert {c.op_class for c in CASES} == set(CLASSES)
    assert select(CASES, ["depthwise"]) == [c for c in CASES if c.op_class == "depthwise"]
    assert [c.source for c in select(CASES, ["fc6", "P @ V"])] == ["AlexNet fc6", "BERT P @ V"]
    assert select(CASES, []) == CASES


@pytest.mark.parametrize("fields", [
    dict(op_class="dense", batch=1, din=9216, dout=4096), dict(op_class="dense", batch=1, din=4096, dout=4096),
    dict(kernel=7, stride=2, cin=3), dict(kernel=11, stride=4, cin=3), dict(kernel=5, stride=1, group=1),
    dict(kernel=3, stride=2, group=1), dict(op_class="first conv", cin=3),
    dict(op_class="depthwise", stride=1), dict(op_class="depthwise", stride=2),
    dict(op_class="grouped", kernel=5, group=2), dict(op_class="grouped", kernel=1, group=3),
    dict(op_class="1x1", kernel=1), dict(op_class="3x3", kernel=3, stride=1),
    dict(op_class="batch matmul", batch=(1, 4), m=128, k=64, n=128),
    dict(op_class="batch matmul", batch=(1, 4), m=128, k=128, n=64),
    dict(op_class="matmul", m=128, k=256, n=1024, gelu=True), dict(op_class="matmul", m=128, k=256, n=256),
    dict(op_class="matmul", m=128, k=1024, n=256),
])
def test_asked_for_shape_is_a_row(fields):
    assert has_case(**fields), fields


def test_a_dense_row_above_batch_1():
    assert any(isinstance(c, Dense) and c.batch > 1 for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op_class} {c.shape()}")
def test_flops_and_declared_shape(case):
    model = case.model()
    assert inferred_output_shape(model) == tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim)
    assert case.flops() == independent_flops(case)


def test_known_flop_counts():
    """A few by hand: AlexNet conv1 (96 x 54 x 54 outputs of 3 x 11 x 11), fc6, BERT's Q @ K^T."""
    assert Conv("x", "", 3, 96, 224, 11, 4, 0).flops() == 2 * 96 * 54 * 54 * 3 * 121
    assert Dense("x", "", 1, 9216, 4096).flops() == 2 * 9216 * 4096
    assert MatMul("x", "", (1, 4), 128, 64, 128).flops() == 2 * 4 * 128 * 64 * 128
    assert Conv("x", "", 144, 144, 56, 3, 2, 1, group=144).flops() == 2 * 144 * 28 * 28 * 9


def test_model_bytes_counts_inputs_weights_and_output_once():
    case = Dense("dense", "", 2, 8, 4)  # x 2x8, w 4x8, bias 4, y 2x4
    assert model_bytes(case.model()) == 4 * (16 + 32 + 4 + 8)


TINY = [
    Conv("depthwise", "", 32, 32, 9, 3, 1, 1, group=32),
    Conv("depthwise", "", 32, 32, 9, 3, 2, 1, group=32),
    Conv("grouped", "", 32, 32, 7, 5, 1, 2, group=2),
    Conv("grouped", "", 24, 12, 6, 1, group=3),
    Conv("strided/large", "", 3, 16, 23, 7, 2, 3),
    Conv("strided/large", "", 3, 16, 27, 11, 4, 0),
    Conv("3x3", "", 16, 32, 8, 3, 1, 1, batch=2),
    Conv("1x1", "", 24, 16, 7, 1),
    Dense("dense", "", 1, 96, 40),
    Dense("dense", "", 5, 64, 48),
    MatMul("batch matmul", "", (1, 2), 16, 8, 16),
    MatMul("matmul", "", (1,), 16, 32, 48, weights=True, gelu=True),
]


@pytest.mark.parametrize("case", TINY, ids=lambda c: f"{c.op_class} {c.shape()}")
def test_tiny_versions_match_the_reference(case):
    """Our default-schedule kernel and onnxruntime's session on the case's model, built and checked as the table
    builds them (checked_engines raises on a wrong output); the task is the op plus its epilogue."""
    engines, errors, task = checked_engines(case, case.model(), 1, vector_width())
    assert [e.name for e in engines] == ["ours", "ort"]
    assert set(errors) == {"ours", "ort"} and all(e <= 1e-4 for e in errors.values())
    assert task.flops >= case.flops()  # plus the epilogue's ops (and padded channels, if any)


def test_roof_bound():
    assert roof_bound(1.0, 500.0, 20.0) == "mem"
    assert roof_bound(100.0, 500.0, 20.0) == "peak"
    assert roof_bound(1.0, 500.0, None) == "peak"
    assert roof_bound(1.0, None, 20.0) == "mem"


def test_row_format_lines_up_with_the_header():
    ours = {"ms": 2.0, "gflops": 50.0, "peak": 0.1, "roof": 0.5}
    row = {"class": "dense", "shape": "4096->4096 batch 1", "source": "AlexNet fc7", "flops": 2 * 4096 * 4096,
           "ai": 0.5, "bandwidth": 200.0, "roof": 100.0, "bound": "mem", "ours": ours,
           "ort": {"ms": 4.0, "gflops": 25.0, "peak": 0.05, "roof": 0.25}}
    line = format_row(row)
    names, units = header().splitlines()
    assert len(line) == len(names) == len(units)
    assert line.split()[-5:] == ["50.0", "50.0", "25.0", "25.0", "0.50"]  # GFLOP/s and % of roof; half the time

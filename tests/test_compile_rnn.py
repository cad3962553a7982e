"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the recurrent ops RNN, GRU and LSTM:
directions, layouts, activations with their alpha/beta, clip, input_forget, linear_before_reset, peepholes,
initial states, sequence_lens given as a constant or at run time (shorter than the sequence), every output;
the fused form (one kernel per time step: relayish/ops/recurrent.py) over batch 1 and 3, 1-512 steps, hidden sizes
that are and are not blocks of 16, and its structure. Bad nodes are refused with a clear error.

A case: (op type, attributes, opset, which optional inputs to give, sequence_lens values or None, whether
sequence_lens is a graph input). Shapes: seq 4, batch 3, input 5, hidden 6.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import assert_close, assert_three_way, case_id, python_planned, run_ort, three_way
from relayish import te
from relayish.interp import evaluate

SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OPTIONAL = {"RNN": ["B", "sequence_lens", "initial_h"], "GRU": ["B", "sequence_lens", "initial_h"],
            "LSTM": ["B", "sequence_lens", "initial_h", "initial_c", "P"]}


def make_case(op, attrs, opset, given=(), lens=None, lens_at_run_time=False, dtype=np.float32, seed=0, sizes=None):
    """(model, feeds): X is a graph input, the weights initializers; the optional inputs in `given` are graph
    inputs (sequence_lens an initializer unless lens_at_run_time). sizes: (seq, batch, input, hidden), default
    (SEQ, BATCH, INPUT, HIDDEN)."""
    seq, batch, inputs, hidden = sizes or (SEQ, BATCH, INPUT, HIDDEN)
    scale = min(0.5, 2.0 / np.sqrt(max(inputs, hidden)))  # pre-activations of order 1 at any size
    rng = np.random.default_rng(seed)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    g = GATES[op]
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    shapes = {"X": (batch, seq, inputs) if layout else (seq, batch, inputs), "B": (dirs, 2 * g * hidden),
              "initial_h": state, "initial_c": state, "P": (dirs, 3 * hidden)}
    weights = {"W": rng.standard_normal((dirs, g * hidden, inputs)) * scale,
               "R": rng.standard_normal((dirs, g * hidden, hidden)) * scale}
    feeds = {"X": rng.standard_normal(shapes["X"]).astype(dtype)}
    for name in given:
        if name != "sequence_lens":
            feeds[name] = (rng.standard_normal(shapes[name]) * 0.5).astype(dtype)
    inits = [numpy_helper.from_array(v.astype(dtype), n) for n, v in weights.items()]
    if lens is not None:
        lens = np.array(lens, np.int32)
        if lens_at_run_time:
            feeds["sequence_lens"] = lens
        else:
            inits.append(numpy_helper.from_array(lens, "sequence_lens"))
    names = ["X", "W", "R"] + [n if n in feeds or (n == "sequence_lens" and lens is not None) else ""
                               for n in OPTIONAL[op]]
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h", "Y_c"][:2 if op != "LSTM" else 3]
    node = helper.make_node(op, names, outputs, hidden_size=hidden, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, elem, None) for n in outputs], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    for out in model.graph.output:
        out.type.tensor_type.shape.SetInParent()
    return model, feeds


ALL = ("B", "initial_h", "initial_c", "P")
CASES = [
    ("RNN", {}, 7, (), None, False),
    ("RNN", {"direction": "reverse"}, 14, ("B", "initial_h"), None, False),
    ("RNN", {"direction": "bidirectional", "layout": 1}, 14, ("B", "initial_h"), None, False),
    ("RNN", {"activations": ["Relu"], "clip": 1.5}, 22, ("B",), None, False),
    ("RNN", {"activations": ["LeakyRelu", "Affine"], "activation_alpha": [0.2, 0.7], "activation_beta": [0.3],
             "direction": "bidirectional"}, 14, ("B",), None, False),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [1.5], "activation_beta": [0.5]}, 14, (), None,
     False),
    ("RNN", {"direction": "bidirectional"}, 14, ("B", "initial_h"), [4, 2, 1], True),
    ("RNN", {"activations": ["Elu"], "activation_alpha": [0.5]}, 14, (), [2, 4, 3], False),
    ("GRU", {}, 7, (), None, False),
    ("GRU", {"linear_before_reset": 1}, 14, ("B", "initial_h"), None, False),
    ("GRU", {"direction": "reverse", "layout": 1}, 14, ("B", "initial_h"), None, False),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 22, ("B",), None, False),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4],
             "clip": 0.8}, 14, ("B",), None, False),
    ("GRU", {"activations": ["Sigmoid", "Softplus", "ThresholdedRelu", "Tanh"], "activation_alpha": [0.1],
             "direction": "bidirectional"}, 14, ("B",), None, False),
    ("GRU", {"direction": "bidirectional", "layout": 1}, 14, ("B", "initial_h"), [1, 4, 3], True),
    ("GRU", {"direction": "reverse", "linear_before_reset": 1}, 14, ("B",), [3, 3, 2], False),
    ("LSTM", {}, 7, (), None, False),
    ("LSTM", {}, 14, ALL, None, False),
    ("LSTM", {"direction": "reverse", "layout": 1}, 14, ALL, None, False),
    ("LSTM", {"direction": "bidirectional"}, 22, ALL, None, False),
    ("LSTM", {"input_forget": 1}, 14, ALL, None, False),
    ("LSTM", {"clip": 0.5}, 14, ("B", "P"), None, False),
    ("LSTM", {"activations": ["HardSigmoid", "Relu", "Softsign"], "activation_alpha": [0.25],
              "activation_beta": [0.45]}, 14, ("B",), None, False),
    ("LSTM", {"direction": "bidirectional", "layout": 1}, 14, ALL, [4, 1, 2], True),
    ("LSTM", {"direction": "reverse"}, 14, ("B", "P"), [3, 4, 2], False),
    # a length of 0: zero outputs and zero final states (onnxruntime's choice), constant or at run time
    ("LSTM", {"direction": "reverse", "clip": 0.2}, 14, ALL, [0, 3, 4], False),
    ("GRU", {"direction": "bidirectional"}, 14, ("B", "initial_h"), [0, 4, 2], True),
    ("RNN", {}, 14, ("B", "initial_h"), [3, 0, 1], True),
]


def ort_outputs(case, feeds, sizes=None):
    """onnxruntime's outputs; it refuses layout=1, so a batch-major case runs as its layout-0 twin (the same
    weights) on transposed inputs, its outputs transposed back."""
    op, attrs, opset, given, lens, run_time = case
    if not attrs.get("layout"):
        return run_ort(make_case(*case, sizes=sizes)[0], feeds)
    twin, _ = make_case(op, {k: v for k, v in attrs.items() if k != "layout"}, opset, given, lens, run_time,
                        sizes=sizes)
    seq_major = {n: (np.swapaxes(v, 0, 1) if n in ("X", "initial_h", "initial_c") else v) for n, v in feeds.items()}
    y, *states = run_ort(twin, seq_major)
    return [np.transpose(y, (2, 0, 1, 3))] + [np.swapaxes(s, 0, 1) for s in states]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    model, feeds = make_case(*case)
    three_way(model, feeds, reference=lambda _, feeds: ort_outputs(case, feeds))


# ---- the fused form: one kernel per time step for every direction (frontends/onnx/ops/rnn_cells.py) ----
# (op, attrs, given, sequence_lens, (seq, batch, input, hidden)): the default activations, no clip and full
# lengths (omitted or a constant of the sequence length); hidden sizes that are and are not whole blocks of 16

FUSED = [
    ("LSTM", {}, (), None, (7, 1, 5, 17)),
    ("LSTM", {"direction": "bidirectional"}, ("B", "initial_h", "initial_c"), None, (7, 3, 5, 17)),
    ("LSTM", {"direction": "reverse"}, ("B",), None, (64, 1, 8, 64)),
    ("LSTM", {"direction": "bidirectional"}, ("B", "initial_h", "initial_c"), None, (1, 3, 16, 128)),
    ("LSTM", {"direction": "bidirectional", "layout": 1}, ("B", "initial_c"), [64, 64, 64], (64, 3, 12, 128)),
    ("GRU", {"linear_before_reset": 1}, ("B",), None, (64, 1, 9, 17)),
    ("GRU", {"direction": "bidirectional"}, ("B", "initial_h"), None, (7, 3, 6, 64)),
    ("GRU", {"direction": "reverse", "linear_before_reset": 1, "layout": 1}, ("B", "initial_h"), None,
     (1, 3, 4, 128)),
    ("GRU", {"direction": "bidirectional"}, ("B",), [64], (64, 1, 20, 128)),
    ("RNN", {}, ("B",), None, (7, 3, 5, 17)),
    ("RNN", {"direction": "bidirectional"}, ("B", "initial_h"), None, (64, 1, 7, 64)),
    ("RNN", {"direction": "reverse"}, (), None, (1, 1, 3, 128)),
    # batches beyond the register tile's rows: blocks of 4 and of 3 rows
    ("LSTM", {}, ("B", "initial_h", "initial_c"), None, (7, 8, 5, 64)),
    ("GRU", {"direction": "bidirectional"}, ("B",), None, (5, 6, 4, 64)),
]


def cell_calls(module, op: str) -> list[dict]:
    return [k for k in module.meta["kernels"] if k["ops"] == [f"nn.{op.lower()}_cell"]]


@pytest.mark.parametrize("case", FUSED, ids=case_id)
def test_fused_three_way(case):
    op, attrs, given, lens, sizes = case
    model, feeds = make_case(op, attrs, 14, given, lens, sizes=sizes)
    runs = three_way(model, feeds,
                     reference=lambda _, feeds: ort_outputs((op, attrs, 14, given, lens, False), feeds, sizes))
    assert len(cell_calls(runs.session, op)) == sizes[0]  # the fused form: one kernel per step


def test_a_bidirectional_lstm_is_one_kernel_per_step():
    """Both directions of a step in one kernel, every step the same task; the states written in place into the
    history Y is read from. The unrolled composition (clip) takes several kernels per step and direction."""
    seq = 24
    model, _ = make_case("LSTM", {"direction": "bidirectional"}, 14, ("B",), sizes=(seq, 1, 8, 32))
    kernels = compile_model(model).meta["kernels"]
    cells = [k for k in kernels if k["ops"] == ["nn.lstm_cell"]]
    assert len(cells) == seq and len({k["task_key"] for k in cells}) == 1
    assert len(kernels) <= seq + 8
    history = [k for k in kernels if k["ops"] == ["concatenate"]]
    assert len(history) == 1 and history[0].get("in_place")
    clipped, _ = make_case("LSTM", {"direction": "bidirectional", "clip": 3.0}, 14, ("B",), sizes=(seq, 1, 8, 32))
    assert len(compile_model(clipped).meta["kernels"]) >= 4 * seq


def test_zero_peepholes_take_the_fused_form():
    model, feeds = make_case("LSTM", {}, 14, ("B",), sizes=(5, 2, 4, 16))
    node = model.graph.node[0]
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 48), np.float32), "P"))
    node.input.extend(["", "", "", "P"])
    module = compile_model(model)
    assert len(cell_calls(module, "LSTM")) == 5
    for a, r in zip(module.run(None, feeds), run_ort(model, feeds)):
        assert_close(a, r, "vs onnxruntime")


def test_float64():
    model, feeds = make_case("GRU", {"direction": "bidirectional"}, 14, ("B", "initial_h"), dtype=np.float64)
    ours = compile_model(model).run(None, feeds)
    for a, i in zip(ours, evaluate(from_onnx(model), feeds)):
        assert a.dtype == np.float64
        assert_close(a, i, "vs interpreter")


def test_run_time_lengths_zero_outputs_and_keep_the_last_valid_state():
    model, feeds = make_case("LSTM", {}, 14, ("B",), [2, 4, 1], True)
    sess = compile_model(model)
    y, y_h, y_c = sess.run(None, feeds)
    assert not y[2:, 0, 0].any() and not y[1:, 0, 2].any()  # Y is [seq, directions, batch, hidden]
    np.testing.assert_allclose(y_h[0, 0], y[1, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(y_h[0, 2], y[0, 0, 2], rtol=1e-6)
    # other lengths at run time, same compiled model
    feeds["sequence_lens"] = np.array([4, 4, 3], np.int32)
    for a, r in zip(sess.run(None, feeds), run_ort(model, feeds)):
        assert_close(a, r, "vs onnxruntime")


@pytest.mark.parametrize("op,attrs,given,lens,message", [
    ("RNN", {"direction": "sideways"}, (), None, "direction must be 'forward', 'reverse' or 'bidirectional'"),
    ("RNN", {"activations": ["Gelu"]}, (), None, r"unsupported activation\(s\) \['Gelu'\]"),
    ("RNN", {"activations": ["Affine"]}, (), None, "Affine needs its alpha and beta"),
    ("GRU", {"activations": ["Sigmoid"]}, (), None, "must list 2 function"),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Tanh"], "direction": "bidirectional"}, (), None,
     r"must list 3 function\(s\) per direction \(2 direction\(s\)\)"),
    ("GRU", {"linear_before_reset": 2}, (), None, "linear_before_reset must be 0 or 1"),
    ("LSTM", {"input_forget": 3}, (), None, "input_forget must be 0 or 1"),
    ("LSTM", {"clip": -1.0}, (), None, "clip must be positive"),
    ("LSTM", {}, (), [1, 5, 2], r"sequence_lens \[1, 5, 2\] must lie in \[0, seq_length=4\]"),
    ("LSTM", {"layout": 2}, (), None, "layout must be 0 or 1"),
])
def test_bad_nodes_are_refused_clearly(op, attrs, given, lens, message):
    model, _ = make_case(op, attrs, 14, given, lens)
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(model)


def test_hidden_size_must_match_r():
    model, _ = make_case("GRU", {}, 14)
    model.graph.node[0].attribute[0].i = HIDDEN + 1
    with pytest.raises(OnnxImportError, match="hidden_size=7 does not match R's shape"):
        from_onnx(model)


def test_float16_is_refused():
    model, _ = make_case("RNN", {}, 14, dtype=np.float16)
    with pytest.raises(OnnxImportError, match="X must be float32 or float64, got float16"):
        from_onnx(model)


# ---- Scan ----

def _vi(name, shape, dtype=onnx.TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def scan_model(opset, attrs, state_shapes, scan_shapes, body_nodes, body_outputs, body_inits=(), outer=None):
    """A Scan over graph inputs s0.. (states) and x0.. (scan inputs), the body reading the states as bs0.., the
    slices as bx0.., and an outer-scope graph input 'w' if `outer` gives its shape."""
    body_in = [_vi(f"bs{i}", None) for i in range(len(state_shapes))]
    body_in += [_vi(f"bx{i}", None) for i in range(len(scan_shapes))]
    body = helper.make_graph(body_nodes, "body", body_in, [_vi(n, None) for n in body_outputs], list(body_inits))
    names = [f"s{i}" for i in range(len(state_shapes))] + [f"x{i}" for i in range(len(scan_shapes))]
    n_outputs = len(body_outputs)
    outputs = [f"y{i}" for i in range(n_outputs)]
    if opset == 8:
        names = [""] + names
    node = helper.make_node("Scan", names, outputs, body=body, num_scan_inputs=len(scan_shapes), **attrs)
    inputs = [_vi(f"s{i}", s) for i, s in enumerate(state_shapes)] + [_vi(f"x{i}", s) for i, s in
                                                                       enumerate(scan_shapes)]
    if outer is not None:
        inputs.append(_vi("w", outer))
    graph = helper.make_graph([node], "t", inputs, [_vi(n, None) for n in outputs])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    for out in model.graph.output:
        out.type.tensor_type.shape.SetInParent()
    rng = np.random.default_rng(1)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
             for vi in inputs}
    return model, feeds


TWO = numpy_helper.from_array(np.array(2.0, np.float32), "two")
SCANS = {
    "states-axes-directions-outer": (11, {"scan_input_axes": [0, -2], "scan_input_directions": [0, 1],
                                          "scan_output_axes": [0, -1], "scan_output_directions": [0, 1]},
                                     [(2, 3)], [(4, 2, 3), (2, 4, 3)],
                                     [helper.make_node("Mul", ["bx0", "w"], ["p"]),
                                      helper.make_node("Add", ["bs0", "p"], ["ns"]),
                                      helper.make_node("Mul", ["bx1", "two"], ["o2"]),
                                      helper.make_node("Identity", ["ns"], ["o1"])],
                                     ["ns", "o1", "o2"], [TWO], (2, 3)),
    "no-state": (9, {}, [], [(3, 5)], [helper.make_node("Relu", ["bx0"], ["r"])], ["r"], [], None),
    "two-states-matmul": (16, {"scan_output_axes": [1]}, [(2, 2), (1, 2)], [(5, 2, 2)],
                          [helper.make_node("MatMul", ["bs0", "bx0"], ["m"]),
                           helper.make_node("Tanh", ["m"], ["t"]),
                           helper.make_node("ReduceSum", ["t", "axes"], ["r"], keepdims=1),
                           helper.make_node("Add", ["bs1", "r"], ["acc"])],
                          ["t", "acc", "r"], [numpy_helper.from_array(np.array([0], np.int64), "axes")], None),
    "opset8-batch": (8, {"directions": [1]}, [(2, 3)], [(2, 4, 3)],
                     [helper.make_node("Add", ["bs0", "bx0"], ["ns"]), helper.make_node("Sigmoid", ["ns"], ["o"])],
                     ["ns", "o"], [], None),
}


@pytest.mark.parametrize("name", SCANS)
def test_scan_three_way(name):
    three_way(*scan_model(*SCANS[name]))


def test_scan_refuses_bad_bodies_clearly():
    unsupported = scan_model(11, {}, [], [(3, 2)], [helper.make_node("Multinomial", ["bx0"], ["r"])], ["r"])[0]
    with pytest.raises(OnnxImportError, match=r"body graph: node .* has unsupported op type Multinomial"):
        from_onnx(unsupported)
    growing = scan_model(11, {}, [(2,)], [(3, 2)], [helper.make_node("Concat", ["bs0", "bx0"], ["c"], axis=0)],
                         ["c"])[0]
    with pytest.raises(OnnxImportError, match=r"state 0: the body turns \(2,\) float32 into \(4,\) float32"):
        from_onnx(growing)
    uneven = scan_model(11, {}, [], [(3, 2), (4, 2)], [helper.make_node("Add", ["bx0", "bx1"], ["r"])], ["r"])[0]
    with pytest.raises(OnnxImportError, match=r"different lengths \[3, 4\]"):
        from_onnx(uneven)


def test_long_sequences_import_in_linear_time_without_recursion():
    # the unroll is a DAG deeper than Python's recursion limit whose steps share every state: the importer's
    # constant folding must visit each node once and iteratively (it was exponential, then recursed too deep). A
    # clip keeps the unrolled composition (the fused form's chain of cells is as deep)
    for attrs in ({"clip": 50.0}, {}):
        model, feeds = make_case("LSTM", attrs, 14, ("B",), sizes=(150, BATCH, INPUT, HIDDEN))
        module = from_onnx(model)
        for a, r in zip(evaluate(module, feeds), run_ort(model, feeds)):
            assert_close(a, r, "vs onnxruntime")


def test_long_sequences_compile():
    # a 512-input concatenation was a RecursionError in lowering (now a balanced tree of selects); the fused
    # form's history is compiled but never run (written in place)
    model, feeds = make_case("GRU", {"direction": "bidirectional"}, 14, ("B",), sizes=(512, 1, 3, 8))
    module = compile_model(model)
    assert len(cell_calls(module, "GRU")) == 512
    for a, r in zip(module.run(None, feeds), run_ort(model, feeds)):
        assert_close(a, r, "vs onnxruntime")


# ---- a sequence length known only at run time: a scan of the fused cell (relayish/ops/recurrent.py) ----

FREE_LENGTH = [("LSTM", {"direction": "bidirectional"}, ("B", "initial_h", "initial_c")),
               ("LSTM", {"direction": "reverse", "layout": 1}, ("B",)),
               ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, ("B", "initial_h")),
               ("GRU", {}, ("B",)),
               ("RNN", {"direction": "reverse"}, ("B", "initial_h"))]


def free_length(model, layout: int):
    """The model with X's sequence axis a named dim T, its outputs' shapes left to inference."""
    model.graph.input[0].type.tensor_type.shape.dim[1 if layout else 0].dim_param = "T"
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return model


@pytest.mark.parametrize("case", FREE_LENGTH, ids=case_id)
def test_a_free_sequence_length_runs_every_length_on_one_scan(case):
    """One compile serves lengths it never saw (none of them the hint size), each step the cell's kernel."""
    op, attrs, given = case
    layout, sizes = attrs.get("layout", 0), (9, 3, 5, 17)
    model, _ = make_case(op, attrs, 14, given, sizes=sizes)
    x = (sizes[1], None, sizes[2]) if layout else (None, sizes[1], sizes[2])
    sess = compile_model(free_length(model, layout), input_shapes={"X": x}, cache=False)
    assert sess.generic_tier["kind"] == "run-time extents", sess.generic_tier
    for seq in (1, 4, 11):
        _, feeds = make_case(op, attrs, 14, given, sizes=(seq,) + sizes[1:], seed=seq)
        ours = sess.run(None, feeds)
        ref = ort_outputs((op, attrs, 14, given, None, False), feeds, (seq,) + sizes[1:])
        interp = evaluate(from_onnx(model, input_shapes={k: v.shape for k, v in feeds.items()}), feeds)
        assert ours[0].shape == ref[0].shape
        for k, (a, r, i) in enumerate(zip(ours, ref, interp)):
            assert_three_way(a, r, np.asarray(i), f"T={seq} output {k}")
        # the scan's steps run in generated code (compiler/generic_runner.py): the step-by-step loop's results
        with python_planned(sess._extents) as module:
            slow = module.run(None, feeds)
        for a, b in zip(ours, slow):
            np.testing.assert_array_equal(a, b)
    assert sess.specializations() == []  # nothing compiled on the calls


def test_a_free_sequence_length_outside_the_fused_form_is_refused_naming_the_layer():
    model, _ = make_case("LSTM", {"clip": 2.0}, 14, ("B",))
    with pytest.raises(OnnxImportError, match=r"over a sequence length known only at run time .* runs in its fused "
                                              r"form only: the default activations, no clip"):
        from_onnx(free_length(model, 0), input_shapes={"X": (te.size_var("T"), BATCH, INPUT), "B": (1, 8 * HIDDEN)})

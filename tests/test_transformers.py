"""BERT- and GPT-style models (small configurations) compiled and checked against onnxruntime and the numpy
interpreter: random ids, a padded mask, a fully masked row, batch 2; int64 inputs checked at the boundary (an id
outside the embedding table is a ValueError naming the input); a computed index out of range is clamped in native
code, never read out of bounds; softmax of a fully -inf row is NaN as in onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from frontends import from_onnx
from harness import assert_close, with_output_shapes
from models.bert import make_bert
from models.gpt import make_gpt
from relayish.interp import evaluate

VOCAB, SEQ = 50, 16
SMALL = dict(seq_len=SEQ, layers=2, d_model=32, heads=4, vocab_size=VOCAB)
MODELS = {
    "bert": lambda: make_bert(batch=2, ffn=64, **SMALL),
    "bert_decomposed_layernorm": lambda: make_bert(batch=2, ffn=64, decomposed_layernorm=True, **SMALL),
    "gpt": lambda: make_gpt(batch=2, **SMALL),
}


def ort_session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def feeds_for(model, seed=0):
    """Random ids; for BERT a mask with row 0 padded after 10 tokens and row 1 fully masked."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, VOCAB, (2, SEQ)).astype(np.int64)}
    if any(i.name == "attention_mask" for i in model.graph.input):
        mask = np.ones((2, SEQ), np.int64)
        mask[0, 10:] = 0
        mask[1, :] = 0
        feeds["attention_mask"] = mask
    return feeds


@pytest.fixture(scope="module", params=sorted(MODELS))
def compiled(request):
    model = MODELS[request.param]()
    return request.param, model, compile_model(model)


def test_model_matches_onnxruntime_and_interpreter(compiled):
    name, model, sess = compiled
    for seed in (0, 1):
        feeds = feeds_for(model, seed)
        ref = ort_session(model).run(None, feeds)[0]
        ours = sess.run(None, feeds)[0]
        assert_close(ours, ref, f"{name} seed {seed} vs onnxruntime")
        assert_close(ours, evaluate(from_onnx(model), feeds)[0], f"{name} seed {seed} vs interpreter")


def test_negative_ids_count_from_the_end(compiled):
    name, model, sess = compiled
    feeds = feeds_for(model)
    feeds["input_ids"][0, :3] = [-1, -VOCAB, -7]
    assert_close(sess.run(None, feeds)[0], ort_session(model).run(None, feeds)[0], f"{name} negative ids")


@pytest.mark.parametrize("bad", [VOCAB, -VOCAB - 1, 2**40])
def test_id_outside_the_table_is_refused_before_native_code(compiled, bad):
    name, model, sess = compiled
    feeds = feeds_for(model)
    feeds["input_ids"][1, 5] = bad
    with pytest.raises(ValueError, match=rf"input 'input_ids' holds {bad} at \(1, 5\), outside \[-{VOCAB}, "
                                         rf"{VOCAB}\)"):
        sess.run(None, feeds)
    with pytest.raises(Exception, match="out of"):  # onnxruntime refuses it too
        ort_session(model).run(None, feeds)


def _gather_of_computed_ids():
    """y = Gather(table[5, 3], ids + offset): the indices are computed in the graph, not a graph input."""
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    nodes = [helper.make_node("Add", ["ids", "offset"], ["shifted"]),
             helper.make_node("Gather", ["table", "shifted"], ["y"], axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, (4,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(table, "table"),
                               numpy_helper.from_array(np.array(2, np.int64), "offset")])
    return with_output_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_computed_index_out_of_range_is_clamped_not_read_out_of_bounds():
    model = _gather_of_computed_ids()
    sess = compile_model(model)
    ids = np.array([0, -3, 10**6, -(10**6)], np.int64)  # shifted: 2, -1, 10**6 + 2, -10**6 + 2
    y = sess.run(None, {"ids": ids})[0]
    np.testing.assert_array_equal(y, np.arange(15, dtype=np.float32).reshape(5, 3)[[2, 4, 4, 0]])
    ok = np.array([0, 1, -2, -7], np.int64)  # in range after the shift: as onnxruntime
    np.testing.assert_array_equal(sess.run(None, {"ids": ok})[0], ort_session(model).run(None, {"ids": ok})[0])


def test_softmax_of_a_fully_masked_row_is_nan_as_in_onnxruntime():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 4))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[0, 1, 2, 3], [-np.inf] * 4, [-np.inf, 0, -np.inf, 1]], np.float32)
    ref = ort_session(model).run(None, {"x": x})[0]
    ours = compile_model(model).run(None, {"x": x})[0]
    assert np.isnan(ref[1]).all() and not np.isnan(ref[[0, 2]]).any()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_allclose(ours[[0, 2]], ref[[0, 2]], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.isnan(evaluate(from_onnx(model), {"x": x})[0]), np.isnan(ref))


@pytest.mark.parametrize("bounds,ok", [([-5, 5], True), ([0, 5], True), ([1, 5], False), ([-5, 0], False),
                                       ([-5, 5.0], False), ([True, 5], False)])
def test_metadata_index_bounds_are_validated(bounds, ok):
    from runtime.metadata import MetadataError, validate_metadata
    meta = {"format_version": 1, "inputs": [{"name": "ids", "shape": [4], "dtype": "int64",
                                             "index_bounds": bounds}],
            "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}], "workspace_bytes": 0, "params_bytes": 0,
            "kernels": [], "target": {"triple": "x", "cpu": "y", "features": ""}}
    if ok:
        validate_metadata(meta)
    else:
        with pytest.raises(MetadataError, match="index_bounds"):
            validate_metadata(meta)

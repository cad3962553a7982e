"""The reference model builders: ResNet-18 (topology, calibrated statistics, BN folding) and the suite (validity,
running in onnxruntime, the structure each model claims, BN calibration, transformer semantics, the CLI)."""
from __future__ import annotations

import functools
import inspect
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from models.__main__ import main as models_main
from models._builder import calibration_images
from models.suite import SUITE, builder


def _run(path, x):
    """Logits of each image of x, one at a time (the models have batch 1)."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


def test_resnet18_topology(resnet18_path, resnet18_folded_path):
    model = onnx.load(str(resnet18_path))
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == 17
    counts = Counter(n.op_type for n in model.graph.node)
    assert counts == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "Add": 8, "MaxPool": 1,
                      "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    assert [i.name for i in model.graph.input] == ["input"] and [o.name for o in model.graph.output] == ["logits"]
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 11_600_000 < params < 11_800_000  # torchvision's resnet18: 11.69 M (+ BN running stats)
    folded = Counter(n.op_type for n in onnx.load(str(resnet18_folded_path)).graph.node)
    assert "BatchNormalization" not in folded and folded["Conv"] == 20


def test_resnet18_logits_are_sane_and_folding_is_exact(resnet18_path, resnet18_folded_path):
    x = np.random.default_rng(5).standard_normal((2, 3, 224, 224)).astype(np.float32)
    logits, folded = _run(resnet18_path, x), _run(resnet18_folded_path, x)
    assert logits.shape == (2, 1000)
    assert 0.3 < logits.std() < 30, logits.std()  # calibrated BN: neither vanishing nor exploding
    assert np.abs(logits[0] - logits[1]).max() > 0.05  # the output depends on the input
    assert np.abs(folded - logits).max() <= 1e-4 * np.abs(logits).max()


def test_resnet18_symbolic_batch_dim(resnet18_dynamic_path):
    dims = onnx.load(str(resnet18_dynamic_path)).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N"
    sess = ort.InferenceSession(str(resnet18_dynamic_path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"input": np.zeros((3, 3, 224, 224), np.float32)})[0].shape == (3, 1000)


# ----------------------------------------------------------------------------------------------- the model suite
# Each suite model in a small configuration (the tests stay fast; the topology code is the same at full size).
SMALL = {
    "mobilenet_v2": ("make_mobilenet_v2", dict(width_mult=0.5, image_size=96)),
    "shufflenet_v1": ("make_shufflenet_v1", dict(image_size=64)),
    "squeezenet1_1": ("make_squeezenet", dict(image_size=64)),
    "googlenet": ("make_googlenet", dict(image_size=64)),
    "densenet": ("make_densenet", dict(image_size=64, block_config=(2, 3, 2, 2), growth_rate=8,
                                       num_init_features=16, bn_size=2)),
    "alexnet": ("make_alexnet", dict(classifier_width=64)),  # 224x224: the real 9216 features into fc6
    "vgg11": ("make_vgg", dict(image_size=32, classifier_width=64)),
    "vgg11_bn": ("make_vgg", dict(image_size=32, classifier_width=64, batch_norm=True)),
    "bert": ("make_bert", dict(seq_len=32, d_model=64, heads=4, ffn=128)),
    "bert_decomposed": ("make_bert", dict(seq_len=32, d_model=64, heads=4, ffn=128, decomposed_layernorm=True)),
    "gpt": ("make_gpt", dict(seq_len=32, d_model=64, heads=4)),
}
CNNS = [n for n in SMALL if not n.startswith(("bert", "gpt"))]


@functools.lru_cache(maxsize=None)
def small_model(name) -> onnx.ModelProto:
    make, options = SMALL[name]
    return getattr(models, make)(**options)


def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def feeds(model, seed=0):
    """Random inputs for every graph input: N(0, 1) images, token ids below 1000, masks with the last 5 padded."""
    rng, out = np.random.default_rng(seed), {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "input":
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
        elif i.name == "input_ids":
            out[i.name] = rng.integers(0, 1000, shape)
        else:
            mask = np.ones(shape, np.int64)
            mask[:, -5:] = 0
            out[i.name] = mask
    return out


def producers(model):
    return {o: n for n in model.graph.node for o in n.output}


def attr(node, name, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def convs(model):
    """(node, weight dims, group) of every Conv."""
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    return [(n, dims[n.input[1]], attr(n, "group", 1)) for n in model.graph.node if n.op_type == "Conv"]


def check_mobilenet_v2(m, ops):
    depthwise = [n for n, w, g in convs(m) if g == w[0] and w[1] == 1 and w[2:] == [3, 3]]
    assert len(depthwise) == 17 and ops["Add"] == 10 and ops["Clip"] == 35
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    clip = next(n for n in m.graph.node if n.op_type == "Clip")
    assert (inits[clip.input[1]], inits[clip.input[2]]) == (0.0, 6.0)  # ReLU6


def check_shufflenet_v1(m, ops):
    assert sum(g == 3 and w[2:] == [1, 1] for _, w, g in convs(m)) == 31  # all 1x1 but the 24-channel stem input's
    assert sum(g == w[0] and w[1] == 1 for _, w, g in convs(m)) == 16  # one depthwise 3x3 per unit
    prod = producers(m)
    shuffles = [n for n in m.graph.node if n.op_type == "Reshape" and prod[n.input[0]].op_type == "Transpose"
                and prod[prod[n.input[0]].input[0]].op_type == "Reshape"]
    assert len(shuffles) == 16 and attr(prod[shuffles[0].input[0]], "perm") == [0, 2, 1, 3, 4]
    assert ops["AveragePool"] == ops["Concat"] == 3  # the stride-2 units' shortcuts


def check_squeezenet1_1(m, ops):
    prod = producers(m)
    concats = [n for n in m.graph.node if n.op_type == "Concat"]
    assert len(concats) == 8 and "BatchNormalization" not in ops
    for c in concats:  # fire modules: ReLU(1x1 expand) and ReLU(3x3 expand) of one squeeze
        e1, e3 = (prod[prod[i].input[0]] for i in c.input)
        assert attr(e1, "kernel_shape") == [1, 1] and attr(e3, "kernel_shape") == [3, 3] and e1.input[0] == e3.input[0]


def check_googlenet(m, ops):
    assert [len(n.input) for n in m.graph.node if n.op_type == "Concat"] == [4] * 9
    assert {w[2] for _, w, _ in convs(m)} == {1, 3, 5, 7} and ops["BatchNormalization"] == ops["Conv"] == 57


def check_densenet(m, ops):
    prod = producers(m)
    concat_sizes = [len(n.input) for n in m.graph.node if n.op_type == "Concat"]
    assert concat_sizes == [2, 3, 2, 3, 4, 2, 3, 2, 3]  # each layer reads all earlier features; block ends
    for conv, _, _ in convs(m)[1:]:  # BN -> ReLU -> conv everywhere but the stem
        relu = prod[conv.input[0]]
        assert relu.op_type == "Relu" and prod[relu.input[0]].op_type == "BatchNormalization"
    assert ops["AveragePool"] == 3


def check_alexnet(m, ops):
    first, w, _ = convs(m)[0]
    assert w[2:] == [11, 11] and attr(first, "strides") == [4, 4]
    assert sum(g == 2 for _, _, g in convs(m)) == 3 and ops["LRN"] == 2
    gemms = {t.name: list(t.dims) for t in m.graph.initializer if t.name.startswith("fc")}
    assert gemms["fc6.weight"] == [64, 9216] and gemms["fc7.weight"] == [64, 64]


def check_vgg11(m, ops):
    assert ops["Conv"] == 8 and {tuple(w[2:]) for _, w, _ in convs(m)} == {(3, 3)} and ops["MaxPool"] == 5
    assert ops["Gemm"] == 3 and "BatchNormalization" not in ops


def check_vgg11_bn(m, ops):
    assert ops["Conv"] == ops["BatchNormalization"] == 8


def check_bert(m, ops):
    assert m.opset_import[0].version == 17 and ops["LayerNormalization"] == 5 and ops["Erf"] == 2
    assert ops["Softmax"] == 2 and ops["Gather"] == 4  # 3 tables, and the length of input_ids' Shape
    assert ops["Shape"] == 1 and ops["Slice"] == 2  # position and token-type ids cut to the input's length
    assert [i.type.tensor_type.elem_type for i in m.graph.input] == [TensorProto.INT64] * 2
    prod, chain, t = producers(m), [], "mask.bias"
    while t in prod and prod[t].op_type != "Constant":  # the additive mask bias, back to the graph input
        chain.append(prod[t].op_type)
        t = next(i for i in prod[t].input if i in prod and prod[i].op_type != "Constant" or i == "attention_mask")
    assert t == "attention_mask" and chain[::-1] == ["Unsqueeze", "Unsqueeze", "Cast", "Sub", "Mul"]


def check_bert_decomposed(m, ops):
    assert m.opset_import[0].version == 13 and "LayerNormalization" not in ops
    assert ops["ReduceMean"] == 10 and ops["Pow"] == ops["Sqrt"] == 5 and ops["Erf"] == 2


def check_gpt(m, ops):
    splits = [n for n in m.graph.node if n.op_type == "Split"]
    assert len(splits) == 2 and all(len(n.input) == 2 and len(n.output) == 3 for n in splits)  # sizes as input
    assert ops["Trilu"] == 1 and ops["Where"] == 2 and ops["Tanh"] == 2 and ops["LayerNormalization"] == 5
    assert ops["Shape"] == 1 and ops["ConstantOfShape"] == 1  # the causal mask is sized to the input's length
    prod = producers(m)
    tied = prod[prod["logits"].input[1]]
    table = next(n.input[0] for n in m.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids")
    assert tied.op_type == "Transpose" and tied.input[0] == table  # the output projection reads the token table


@pytest.mark.parametrize("name", SMALL)
def test_suite_model_is_valid_runs_and_has_its_structure(name):
    model = small_model(name)
    onnx.checker.check_model(model, full_check=True)
    (out,) = session(model).run(None, feeds(model))
    assert out.shape == tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim)
    assert np.isfinite(out).all() and 0.05 < out.std() < 100, out.std()  # neither vanishing nor exploding
    globals()[f"check_{name}"](model, Counter(n.op_type for n in model.graph.node))


@pytest.mark.parametrize("name", CNNS)
def test_cnn_logits_depend_on_the_image(name):
    model = small_model(name)
    assert model.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 1000
    sess = session(model)
    a, b = (sess.run(None, feeds(model, seed))[0] for seed in (1, 2))
    assert np.abs(a - b).max() > 0.01 * np.abs(a).max()


@pytest.mark.parametrize("name", [n for n in CNNS if n not in ("squeezenet1_1", "alexnet", "vgg11")])
def test_calibrated_batchnorms_normalize_their_inputs(name):
    """Every BN's running mean/var are the per-channel statistics of its real input on the calibration images,
    measured after the BNs before it were calibrated (so each BN normalizes, through the whole network)."""
    model = onnx.ModelProto()
    model.CopyFrom(small_model(name))
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    model.graph.output.extend(helper.make_tensor_value_info(n.input[0], TensorProto.FLOAT, None) for n in bns)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    images = calibration_images(model.graph.input[0].type.tensor_type.shape.dim[2].dim_value)
    for bn, act in zip(bns, session(model).run([n.input[0] for n in bns], {"input": images})):
        mean, var = inits[bn.input[3]], inits[bn.input[4]]
        # tolerance relative to the input's scale: running the network whole rather than in the calibration's
        # pieces rounds differently, and deep max pools turn near-ties into ~1e-3 differences (GoogLeNet);
        # statistics from a miscalibrated network are off by O(1)
        rms = np.sqrt(mean ** 2 + var)
        assert np.all(np.abs(act.mean(axis=(0, 2, 3)) - mean) <= 5e-3 * rms), bn.name
        assert np.all(np.abs(act.std(axis=(0, 2, 3)) - np.sqrt(var)) <= 5e-3 * rms), bn.name


def test_bert_layernorm_forms_agree_with_padding_and_a_fully_masked_row():
    fused, decomposed = session(small_model("bert")), session(small_model("bert_decomposed"))
    padded = feeds(small_model("bert"))
    fully_masked = dict(padded, attention_mask=np.zeros_like(padded["attention_mask"]))
    for x in (padded, fully_masked):
        a, b = fused.run(None, x)[0], decomposed.run(None, x)[0]
        assert np.isfinite(a).all() and np.abs(a - b).max() <= 1e-4


def test_bert_padded_tokens_do_not_reach_the_others():
    model = small_model("bert")
    sess, x = session(model), feeds(model)
    y = dict(x, input_ids=x["input_ids"].copy())
    y["input_ids"][:, -5:] = (y["input_ids"][:, -5:] + 1) % 1000  # the padded positions (feeds masks the last 5)
    a, b = sess.run(None, x)[0], sess.run(None, y)[0]
    assert np.abs(a[:, :-5] - b[:, :-5]).max() < 1e-5 and np.abs(a[:, -5:] - b[:, -5:]).max() > 0.01


def test_gpt_is_causal():
    model = small_model("gpt")
    sess, x = session(model), feeds(model)
    y = {"input_ids": x["input_ids"].copy()}
    y["input_ids"][:, 20] = (y["input_ids"][:, 20] + 1) % 1000
    a, b = sess.run(None, x)[0], sess.run(None, y)[0]
    assert np.abs(a[:, :20] - b[:, :20]).max() < 1e-5 and np.abs(a[:, 20:] - b[:, 20:]).max() > 0.01


def test_suite_entries_bind_to_their_builders():
    for name, entry in SUITE.items():
        make = getattr(models, f"make_{entry.module}")
        inspect.signature(make).bind(**entry.options)
        assert builder(name).__name__ == f"build_{entry.module}"


def test_models_cli(tmp_path, capsys, resnet18_path):
    models_main(["--list"])
    assert set(SUITE) <= {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    models_main(["squeezenet1_1", "gpt", "--out", str(tmp_path / "suite")])
    assert sorted(p.name for p in (tmp_path / "suite").iterdir()) == ["gpt.onnx", "squeezenet1_1.onnx"]
    models_main([str(tmp_path / "default")])  # the old form: ResNet-18 both ways into OUT_DIR (calibration cached)
    assert (tmp_path / "default" / "resnet18.onnx").read_bytes() == resnet18_path.read_bytes()
    assert (tmp_path / "default" / "resnet18_folded.onnx").exists()
    for bad in (["nosuchnet"] * 2, ["squeezenet1_1", "out_dir"]):
        with pytest.raises(SystemExit):
            models_main(bad)

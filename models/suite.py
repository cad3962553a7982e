"""The model suite: every reference model by name, with the builder and options that make it.

A name is also the file stem `python -m models NAME` writes (NAME.onnx). Builders live in models/<module>.py as
build_<module>(path, **options); DEFAULT is what a bare `python -m models` builds (the README's quick start and CI
use it, so it stays fast)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import NamedTuple


class Entry(NamedTuple):
    module: str  # models/<module>.py, holding build_<module> and make_<module>
    options: dict
    description: str


SUITE = {
    "resnet18": Entry("resnet18", {}, "ResNet-18, torchvision v1, BN kept (11.7 M params)"),
    "resnet18_folded": Entry("resnet18", {"fold_bn": True}, "ResNet-18 with every BN folded into its conv"),
    "mobilenet_v2": Entry("mobilenet_v2", {}, "MobileNetV2 1.0: inverted residuals, depthwise 3x3, ReLU6 as Clip"),
    "shufflenet_v1": Entry("shufflenet_v1", {}, "ShuffleNet v1, groups=3: grouped 1x1, channel shuffle, depthwise"),
    "shufflenet_v1_g4": Entry("shufflenet_v1", {"groups": 4},
                              "ShuffleNet v1, groups=4: stages 272/544/1088, grouped 1x1 of 17-272 inputs a group"),
    "shufflenet_v1_g8": Entry("shufflenet_v1", {"groups": 8},
                              "ShuffleNet v1, groups=8: stages 384/768/1536, grouped 1x1 of 12-192 inputs a group"),
    "squeezenet1_1": Entry("squeezenet", {}, "SqueezeNet 1.1: fire modules (1x1 squeeze, 1x1/3x3 expand concat)"),
    "googlenet": Entry("googlenet", {}, "GoogLeNet / Inception v1: nine 4-branch inception modules, with BN"),
    "densenet121": Entry("densenet", {}, "DenseNet-121: dense blocks (6, 12, 24, 16), growth 32, BN-ReLU-conv"),
    "alexnet": Entry("alexnet", {}, "AlexNet (Caffe): 11x11/4, group=2 convs, LRN, 9216x4096 + 4096x4096 dense"),
    "zfnet512": Entry("zfnet512", {}, "ZFNet-512 (the ONNX zoo's): 7x7/2, 5x5/2, 3x512 convs, 4096x18432 fc6 (349 MB)"),
    "vgg11": Entry("vgg", {}, "VGG-11 convs, classifier 1024 wide (torchvision's 4096: classifier_width=4096)"),
    "bert": Entry("bert", {}, "BERT-style encoder, 2 layers, d 256, 4 heads, seq 128, LayerNormalization (opset 17)"),
    "bert_decomposed": Entry("bert", {"decomposed_layernorm": True},
                             "the same BERT with LayerNorm decomposed as older exporters emit it (opset 13)"),
    "bert_d768": Entry("bert", {"d_model": 768, "heads": 12, "ffn": 3072},
                       "BERT-style encoder, 2 layers of BERT-base width (d 768, 12 heads, ffn 3072), seq 128"),
    "crnn": Entry("crnn", {},
                  "CRNN on a 3x32x320 line: VGG convs, 2 bidirectional LSTMs (hidden 128), 6,625-class softmax"),
    "bytecnn": Entry("bytecnn", {},
                     "byte-level text CNN: Gather embedding, six 1-D convs on (N, C, L), max pools, global max"),
    "bytecnn_conv2d": Entry("bytecnn", {"conv2d": True},
                            "the same byte CNN as 2-D convs of height 1 (older exporters' Conv1D)"),
    "gpt": Entry("gpt", {}, "GPT-style decoder, 2 pre-LN blocks, d 256, 4 heads, seq 64, causal mask, tied output"),
    # integer variants, quantized by onnxruntime's tool (models/quantized.py)
    "resnet18_int8": Entry("quantized", {"base": "resnet18", "per_channel": True},
                           "ResNet-18, static QDQ by onnxruntime.quantization (u8 activations, s8 weights per channel)"),
    "mobilenet_v2_int8": Entry("quantized", {"base": "mobilenet_v2", "per_channel": True},
                               "MobileNetV2, static QDQ by onnxruntime.quantization (per-channel s8 weights)"),
    "resnet18_int8_dynamic": Entry("quantized", {"base": "resnet18", "mode": "dynamic"},
                                   "ResNet-18, dynamic: DynamicQuantizeLinear + ConvInteger (u8 weights)"),
    "gpt_int8_dynamic": Entry("quantized", {"base": "gpt", "mode": "dynamic"},
                              "the GPT-style decoder, dynamic: DynamicQuantizeLinear + MatMulInteger"),
}
DEFAULT = ("resnet18", "resnet18_folded")


def builder(name):
    """The build_<module> function of suite entry `name`."""
    entry = SUITE[name]
    return getattr(importlib.import_module(f"models.{entry.module}"), f"build_{entry.module}")


def build(name, out_dir) -> Path:
    """Build suite model `name` into out_dir/<name>.onnx and return the path."""
    if name not in SUITE:
        raise KeyError(f"no model {name!r} in the suite; known: {', '.join(SUITE)}")
    return builder(name)(Path(out_dir) / f"{name}.onnx", **SUITE[name].options)

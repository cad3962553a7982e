"""ResNet-18 (torchvision v1 topology) as an ONNX model, built with onnx.helper from seeded random weights.

Topology: 7x7/2 conv 64 + BN + relu, 3x3/2 max pool (pad 1); four stages of two BasicBlocks (64, 128, 256, 512
channels; the first block of stages 2-4 has stride 2 and a 1x1/2 conv + BN shortcut); global average pool;
flatten; Gemm 512 -> 1000 (transB=1). Input "input" Bx3x224x224 float32, output "logits" Bx1000, opset 17.

Weights are He-normal. BatchNorm running statistics are *calibrated*: each BN's mean/var are the per-channel
statistics of its actual input on a few random images, measured with onnxruntime on the graph prefix ending
at that BN after the earlier BNs were calibrated. So every BN really normalizes, activations keep an O(1) scale
through all 18 layers, and the logits have a sane spread (as a trained network's would), which makes numeric
comparisons meaningful. The folded variant (fold_bn=True) is the same function with each BN folded into the
preceding conv's weights and a conv bias.
"""
from __future__ import annotations

import argparse
import functools
from pathlib import Path

import numpy as np
import onnx

from ._builder import BN_EPSILON, CALIBRATION_BATCH, Graph, make_model, save, tensor_info

STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (channels, stride of the first block)
NUM_CLASSES = 1000


def _basic_block(g: Graph, prefix, x, cin, cout, stride):
    y = g.conv(f"{prefix}.conv1", x, cin, cout, 3, stride, 1)
    y = g.op("Relu", f"{prefix}.relu1", [g.bn(f"{prefix}.bn1", y, cout)])
    y = g.bn(f"{prefix}.bn2", g.conv(f"{prefix}.conv2", y, cout, cout, 3, 1, 1), cout)
    if stride != 1 or cin != cout:
        x = g.bn(f"{prefix}.downsample.1", g.conv(f"{prefix}.downsample.0", x, cin, cout, 1, stride, 0), cout)
    return g.op("Relu", f"{prefix}.relu2", [g.op("Add", f"{prefix}.add", [y, x])])


def _topology(rng) -> Graph:
    g = Graph(rng)
    x = g.conv("conv1", "input", 3, 64, 7, 2, 3)
    x = g.op("Relu", "relu", [g.bn("bn1", x, 64)])
    x = g.op("MaxPool", "maxpool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (cout, stride) in enumerate(STAGES, start=1):
        for block in range(2):
            x = _basic_block(g, f"layer{stage}.{block}", x, cin, cout, stride if block == 0 else 1)
            cin = cout
    x = g.op("Flatten", "flatten", [g.op("GlobalAveragePool", "avgpool", [x])], axis=1)
    g.gemm("fc", x, 512, NUM_CLASSES, out="logits")
    return g


def _calibrate(g: Graph, rng):
    """Set each BN's running mean/var to the statistics of its input, BN by BN in topological order.

    Each BN runs the whole graph prefix before it: slower than _builder.calibrate (which runs the network about
    once) and equal to it up to float rounding (~1e-7 relative), but it defines the published ResNet-18 weights
    byte for byte, so it stays."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    images = rng.standard_normal((CALIBRATION_BATCH, 3, 224, 224)).astype(np.float32)
    for name in g.batchnorms:
        end = next(i for i, n in enumerate(g.nodes) if n.name == name)
        bn_input = g.nodes[end].input[0]
        prefix = make_model(g.nodes[:end], g.params, [tensor_info("input", np.float32, ["N", 3, 224, 224])],
                            [tensor_info(bn_input, np.float32, None)], "resnet18")
        sess = ort.InferenceSession(prefix.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        act = sess.run(None, {"input": images})[0].astype(np.float64)
        g.params[f"{name}.running_mean"] = act.mean(axis=(0, 2, 3))
        g.params[f"{name}.running_var"] = act.var(axis=(0, 2, 3))


def _fold_batchnorms(g: Graph) -> tuple[list, dict]:
    """conv(x, w) -> bn  ==>  conv(x, w * s, beta - mean * s) with s = gamma / sqrt(var + eps) (float64 math).

    The graph is cached and shared, so its nodes and params are copied, never mutated."""
    params = dict(g.params)
    conv_of_bn = {n.name: n.input[0] for n in g.nodes if n.op_type == "BatchNormalization"}  # conv name == output
    for bn, conv in conv_of_bn.items():
        scale = params.pop(f"{bn}.weight") / np.sqrt(params.pop(f"{bn}.running_var") + BN_EPSILON)
        params[f"{conv}.weight"] = params[f"{conv}.weight"] * scale[:, None, None, None]
        params[f"{conv}.bias"] = params.pop(f"{bn}.bias") - params.pop(f"{bn}.running_mean") * scale
    folded_convs = set(conv_of_bn.values())
    nodes = []
    for node in g.nodes:
        if node.op_type == "BatchNormalization":
            continue
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.input[:] = [conv_of_bn.get(i, i) for i in node.input]  # consumers of a BN now read its conv
        if node.name in folded_convs:
            new.input.append(f"{node.name}.bias")
        nodes.append(new)
    return nodes, params


@functools.lru_cache(maxsize=2)
def _calibrated_graph(seed: int) -> Graph:
    """The calibrated graph of a seed (cached: calibration dominates build time; callers must not mutate it)."""
    rng = np.random.default_rng(seed)
    g = _topology(rng)
    _calibrate(g, rng)
    return g


def make_resnet18(fold_bn: bool = False, seed: int = 0, batch: int | str = 1) -> onnx.ModelProto:
    """The ResNet-18 ModelProto. batch: an int (a fixed dim) or a name such as "N" (a symbolic dim)."""
    if isinstance(batch, str) and batch.isdigit():
        batch = int(batch)
    g = _calibrated_graph(seed)
    nodes, params = _fold_batchnorms(g) if fold_bn else (g.nodes, g.params)
    model = make_model(nodes, params, [tensor_info("input", np.float32, [batch, 3, 224, 224])],
                       [tensor_info("logits", np.float32, [batch, NUM_CLASSES])], "resnet18")
    onnx.checker.check_model(model)
    return model


def build_resnet18(path, fold_bn: bool = False, seed: int = 0, batch: int | str = 1) -> Path:
    """Write ResNet-18 to `path` (see make_resnet18) and return the path."""
    return save(path, make_resnet18(fold_bn, seed, batch))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m models.resnet18", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="output file (default: models/resnet18[_folded].onnx)")
    p.add_argument("--fold-bn", action="store_true", help="fold BatchNorm into the conv weights")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", default="1", help='batch size, or a symbolic name such as "N"')
    args = p.parse_args(argv)
    out = args.out or str(Path(__file__).parent / ("resnet18_folded.onnx" if args.fold_bn else "resnet18.onnx"))
    print(build_resnet18(out, args.fold_bn, args.seed, args.batch))


if __name__ == "__main__":
    main()

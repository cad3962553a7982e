"""Kernel table by op class: a representative kernel of each class, ours against onnxruntime, judged on a roofline.

    python -m relayish_tools.bench.op_table [--only CLASS ...] [--threads 2] [--repeat 25] [--warmup 3] [--no-peak] [--no-bandwidth]
                             [--max-busy 0.1] [--list]

One row per kernel of CASES: depthwise, grouped, strided or large-kernel and first (3-channel) convolutions, 1x1
and 3x3 convolutions, dense layers at batch 1 and above, the attention's batched matmuls and the transformer's
projection and MLP matmuls, each with the shape of a layer of the model suite (`source` names it). A row is a
one-op ONNX model in NCHW with seeded weights: Conv + bias + Relu, Gemm + bias, MatMul of two inputs, or MatMul by
a constant weight + bias [+ GELU as exported at opset 17], as the suite's models have them.

Ours: the model through the graph passes (winograd=False: direct convolutions, as bench.kernel_bench), its one
compute task (the layout transforms at the model's edges are not timed) under the default schedule. onnxruntime:
the same ONNX model, inputs and output I/O-bound. Both are checked against the numpy reference (the relayish
interpreter) first and timed as bench.kernel_bench times them (bursts of back-to-back calls, engines alternating
with an idle gap, disturbed samples taken again).

Figures. FLOPs = 2 x the op's multiply-adds (the epilogue's few per output element are not counted); bytes = the
ONNX model's input(s), weights, bias and output, each once, unpadded (the channels our layout pads are not useful
work); AI = FLOPs / bytes; roof = min(FMA peak, AI x read bandwidth measured at the working-set size) with `bound`
saying which of the two it is ("peak" or "mem"); each engine's GFLOP/s and % of the roof; t ours/ort = our time
over onnxruntime's (below 1: ours is faster). As in bench.kernel_bench, a one-op model makes onnxruntime convert
NCHW to its blocked layout and back around a Conv, which its time includes and ours does not.
"""
from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass

import numpy as np

from compiler import extract_tasks
from compiler.codegen import vector_width as cg_vector_width
from compiler.passes import PassContext, run_pipeline
from compiler.task import Task
from frontends import from_onnx
from relayish.interp import evaluate

from .kernel_bench import (GAP_S, OrtKernel, checked_errors, default_kernel, machine_busy, machine_peak,
                           native_engines, ort_engine, random_inputs, reference, sampling_notes, timed_figures,
                           working_set_bandwidth)

OPSET = 17  # as the suite's models (PyTorch's export)
CLASSES = ("depthwise", "grouped", "strided/large", "first conv", "1x1", "3x3", "dense", "batch matmul", "matmul")


# ---------------------------------------------------------------------------------------------- the kernels

@dataclass(frozen=True)
class Conv:
    """Conv (N, cin, size, size) -> (N, cout, out, out) + bias + Relu; group == cin == cout is depthwise."""
    op_class: str
    source: str
    cin: int
    cout: int
    size: int
    kernel: int
    stride: int = 1
    pad: int = 0
    group: int = 1
    batch: int = 1

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    def shape(self) -> str:
        """e.g. '11x11/4 3->96 224' or '3x3 dw 144 56'."""
        k = f"{self.kernel}x{self.kernel}" + (f"/{self.stride}" if self.stride > 1 else "")
        if self.group == self.cin == self.cout:
            return f"{k} dw {self.cin} {self.size}"
        g = f" g{self.group}" if self.group > 1 else ""
        return f"{k} {self.cin}->{self.cout}{g} {self.size}" + (f" N{self.batch}" if self.batch > 1 else "")

    def flops(self) -> int:
        return 2 * self.batch * self.cout * self.out_size ** 2 * (self.cin // self.group) * self.kernel ** 2

    def model(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        std = math.sqrt(2.0 / (self.cin // self.group * self.kernel ** 2))  # He-normal: activations stay O(1)
        weights = {"w": normal(rng, std, (self.cout, self.cin // self.group, self.kernel, self.kernel)),
                   "bias": normal(rng, 0.1, self.cout)}
        k, p, s = self.kernel, self.pad, self.stride
        nodes = [("Conv", ["x", "w", "bias"], "conv", dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                                                           group=self.group)),
                 ("Relu", ["conv"], "y", {})]
        return one_op_model(nodes, {"x": (self.batch, self.cin, self.size, self.size)}, weights,
                            (self.batch, self.cout, self.out_size, self.out_size))


@dataclass(frozen=True)
class Dense:
    """Gemm (batch, din) x (dout, din)^T + bias: a fully connected layer as the CNNs export it."""
    op_class: str
    source: str
    batch: int
    din: int
    dout: int

    def shape(self) -> str:
        return f"{self.din}->{self.dout} batch {self.batch}"

    def flops(self) -> int:
        return 2 * self.batch * self.din * self.dout

    def model(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        bound = 1.0 / math.sqrt(self.din)
        weights = {"w": uniform(rng, bound, (self.dout, self.din)), "bias": uniform(rng, bound, self.dout)}
        return one_op_model([("Gemm", ["x", "w", "bias"], "y", dict(transB=1))], {"x": (self.batch, self.din)},
                            weights, (self.batch, self.dout))


@dataclass(frozen=True)
class MatMul:
    """MatMul (*batch, m, k) @ (*batch, k, n) of two inputs (attention), or, with `weights`, (*batch, m, k) @ a
    constant (k, n) + bias [+ GELU (erf form, as torch exports it at opset 17)] (a transformer's linear layer)."""
    op_class: str
    source: str
    batch: tuple
    m: int
    k: int
    n: int
    weights: bool = False
    gelu: bool = False

    def shape(self) -> str:
        heads = f"{math.prod(self.batch)}x " if math.prod(self.batch) > 1 else ""
        epilogue = ("+bias" if self.weights else "") + ("+gelu" if self.gelu else "")
        return f"{heads}{self.m}x{self.k} @ {self.k}x{self.n}{epilogue}"

    def flops(self) -> int:
        return 2 * math.prod(self.batch) * self.m * self.k * self.n

    def model(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        a, out = (*self.batch, self.m, self.k), (*self.batch, self.m, self.n)
        if not self.weights:
            return one_op_model([("MatMul", ["a", "b"], "y", {})], {"a": a, "b": (*self.batch, self.k, self.n)}, {},
                                out)
        bound = 1.0 / math.sqrt(self.k)
        weights = {"w": uniform(rng, bound, (self.k, self.n)), "bias": uniform(rng, bound, self.n)}
        nodes = [("MatMul", ["a", "w"], "mm", {}), ("Add", ["mm", "bias"], "linear", {})]
        if self.gelu:  # x * (erf(x / sqrt 2) + 1) * 0.5
            weights.update(sqrt2=np.array(math.sqrt(2.0)), one=np.array(1.0), half=np.array(0.5))
            nodes += [("Div", ["linear", "sqrt2"], "scaled", {}), ("Erf", ["scaled"], "erf", {}),
                      ("Add", ["erf", "one"], "erf1", {}), ("Mul", ["linear", "erf1"], "prod", {}),
                      ("Mul", ["prod", "half"], "gelu", {})]
        nodes[-1] = (*nodes[-1][:2], "y", nodes[-1][3])
        return one_op_model(nodes, {"a": a}, weights, out)


CASES = [
    Conv("depthwise", "MobileNetV2 block 2", 144, 144, 56, 3, 1, 1, group=144),
    Conv("depthwise", "MobileNetV2 block 3", 144, 144, 56, 3, 2, 1, group=144),
    Conv("depthwise", "MobileNetV2 block 16", 960, 960, 7, 3, 1, 1, group=960),
    Conv("grouped", "AlexNet conv2", 96, 256, 27, 5, 1, 2, group=2),
    Conv("grouped", "ShuffleNet g3 stage 2", 240, 60, 28, 1, group=3),
    Conv("grouped", "ShuffleNet g3 stage 2", 60, 240, 28, 1, group=3),
    Conv("strided/large", "ResNet-18 conv1", 3, 64, 224, 7, 2, 3),
    Conv("strided/large", "AlexNet conv1", 3, 96, 224, 11, 4, 0),
    Conv("strided/large", "GoogLeNet 3b 5x5", 32, 96, 28, 5, 1, 2),
    Conv("strided/large", "ResNet-18 layer2.0", 64, 128, 56, 3, 2, 1),
    Conv("first conv", "VGG-11 conv1", 3, 64, 224, 3, 1, 1),
    Conv("first conv", "MobileNetV2 conv1", 3, 32, 224, 3, 2, 1),
    Conv("1x1", "MobileNetV2 block 2 expand", 24, 144, 56, 1),
    Conv("1x1", "MobileNetV2 block 2 project", 144, 24, 56, 1),
    Conv("1x1", "DenseNet-121 block 2", 256, 128, 28, 1),
    Conv("3x3", "ResNet-18 layer1", 64, 64, 56, 3, 1, 1),
    Conv("3x3", "ResNet-18 layer3", 256, 256, 14, 3, 1, 1),
    Conv("3x3", "VGG-11 conv8", 512, 512, 14, 3, 1, 1),
    Dense("dense", "AlexNet fc6", 1, 9216, 4096),
    Dense("dense", "AlexNet fc7", 1, 4096, 4096),
    Dense("dense", "AlexNet fc7, batch 8", 8, 4096, 4096),
    Dense("dense", "AlexNet fc7, batch 64", 64, 4096, 4096),
    MatMul("batch matmul", "BERT Q @ K^T", (1, 4), 128, 64, 128),
    MatMul("batch matmul", "BERT P @ V", (1, 4), 128, 128, 64),
    MatMul("matmul", "BERT Q/K/V/out proj", (1,), 128, 256, 256, weights=True),
    MatMul("matmul", "BERT FFN up", (1,), 128, 256, 1024, weights=True, gelu=True),
    MatMul("matmul", "BERT FFN down", (1,), 128, 1024, 256, weights=True),
]


def select(cases: list, only=()) -> list:
    """The cases whose 'class kernel source' contains one of the texts `only` (all if none)."""
    return [c for c in cases if not only or any(t in f"{c.op_class} {c.shape()} {c.source}" for t in only)]


def normal(rng, std: float, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


def uniform(rng, bound: float, shape) -> np.ndarray:
    """Uniform in [-bound, bound), drawn in float32 (AlexNet's fc6 has 38 M weights)."""
    return (rng.random(shape, dtype=np.float32) * 2 - 1) * np.float32(bound)


def one_op_model(nodes: list, inputs: dict, weights: dict, out_shape: tuple):
    """An ONNX model of `nodes` ((op, inputs, output, attrs), the last one's output named "y"), float32 graph
    inputs {name: shape} and initializers {name: array}. (from_onnx and onnxruntime check it.)"""
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node(op, args, [out], **attrs) for op, args, out, attrs in nodes], "op_table",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v, np.float32), name) for name, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def model_bytes(model) -> int:
    """Bytes of the model's float32 inputs, initializers and outputs, each once: the data the op must move."""
    def dims(value_info):
        return math.prod(d.dim_value for d in value_info.type.tensor_type.shape.dim)
    values = [dims(v) for v in (*model.graph.input, *model.graph.output)]
    values += [math.prod(t.dims) for t in model.graph.initializer]
    return 4 * sum(values)


def random_feed(model, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
            for v in model.graph.input}


# ---------------------------------------------------------------------------------------------- building and timing

def compute_task(module, vector_width: int) -> Task:
    """The one task of an imported one-op model that is not a layout transform (ValueError if not exactly one)."""
    fused = run_pipeline(module, PassContext(vector_width=vector_width, winograd=False))
    tasks = [t for t in extract_tasks(fused) if t.ops != ["layout_transform"]]
    if len(tasks) != 1:
        raise ValueError(f"expected one compute task, got {[t.name for t in tasks]}")
    return tasks[0]


def checked_engines(case, model, threads: int, vector_width: int) -> tuple[list, dict, Task]:
    """Our kernel (default schedule) and onnxruntime's session of the case's model, each run once and checked
    against the numpy reference: (engines "ours", "ort"; relative errors; our task). AssertionError if wrong."""
    module = from_onnx(model)
    task = compute_task(module, vector_width)
    inputs = random_inputs(task)
    engines, outputs = native_engines({"ours": default_kernel(task, vector_width)}, inputs, threads)
    feed = random_feed(model)
    ort_kernel = OrtKernel(model, feed, threads)
    engines.append(ort_engine(ort_kernel))
    errors = checked_errors(f"{case.op_class} {case.shape()}",
                            {"ours": (outputs["ours"], reference(task, inputs)),
                             "ort": (ort_kernel.output(), evaluate(module, feed)[0])})
    return engines, errors, task


def bench_case(case, threads: int, repeat: int, warmup: int, vector_width: int = 16, gap_s: float = GAP_S,
               peak: float | None = None, bandwidth: bool = True) -> dict:
    """Build, check and time one case; `bandwidth`: measure the read bandwidth at its working-set size (roof)."""
    model = case.model()
    nbytes = model_bytes(model)
    engines, errors, task = checked_engines(case, model, threads, vector_width)
    gbs = working_set_bandwidth(nbytes, threads) if bandwidth else None
    flops = case.flops()
    row = {"class": case.op_class, "shape": case.shape(), "source": case.source, "flops": flops, "bytes": nbytes,
           "task_flops": task.flops, "errors": errors}
    row.update(timed_figures(engines, flops, flops / nbytes, repeat, warmup, gap_s, peak, gbs))
    row["bound"] = roof_bound(row["ai"], peak, gbs)
    return row


def roof_bound(ai: float, peak: float | None, bandwidth: float | None) -> str:
    """Which bound the roofline's roof is: "peak" (compute) or "mem" (AI x bandwidth), "" if neither is known."""
    if bandwidth is None:
        return "peak" if peak else ""
    return "peak" if peak is not None and peak <= ai * bandwidth else "mem"


# ---------------------------------------------------------------------------------------------- the table

COLUMNS = [("class", "", -13), ("kernel", "", -28), ("source", "", -28), ("GFLOP", "", 7), ("AI", "FLOP/B", 6),
           ("GB/s", "read", 6), ("roof", "GFLOP/s", 7), ("bound", "", 5), ("ours", "GFLOP/s", 7), ("%roof", "", 6),
           ("ort", "GFLOP/s", 7), ("%roof", "", 6), ("ours/ort", "time", 8)]
"""(name, unit, width): a negative width is left-aligned."""


def table_line(cells: list[str]) -> str:
    return " ".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, (_, _, w) in zip(cells, COLUMNS, strict=True))


def header() -> str:
    return table_line([name for name, _, _ in COLUMNS]) + "\n" + table_line([unit for _, unit, _ in COLUMNS])


def format_row(row: dict) -> str:
    def optional(value, fmt):
        return "-" if value is None else format(value, fmt)

    def engine(label):
        r = row[label]
        return [f"{r['gflops']:.1f}", optional(r["roof"] and 100 * r["roof"], ".1f")]

    return table_line([row["class"], row["shape"], row["source"], f"{row['flops'] / 1e9:.3f}", f"{row['ai']:.2f}",
                       optional(row["bandwidth"], ".1f"), optional(row["roof"], ".1f"), row["bound"],
                       *engine("ours"), *engine("ort"), f"{row['ours']['ms'] / row['ort']['ms']:.2f}"])


def list_cases(cases: list) -> str:
    lines = [f"{'class':<13} {'kernel':<28} {'source':<28} {'GFLOP':>7} {'MB':>7}"]
    for c in cases:
        lines.append(f"{c.op_class:<13} {c.shape():<28} {c.source:<28} {c.flops() / 1e9:7.3f} "
                     f"{model_bytes(c.model()) / 2 ** 20:7.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayish_tools.bench.op_table", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[],
                        help=f"rows whose 'class kernel source' contains this text (repeatable); classes: "
                             f"{', '.join(CLASSES)}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=25, help="timed samples per engine (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-peak", action="store_true", help="skip measuring the FMA peak")
    parser.add_argument("--no-bandwidth", action="store_true",
                        help="skip measuring the read bandwidth at each kernel's working-set size (roofline)")
    parser.add_argument("--max-busy", type=float, default=None,
                        help="before each row, wait (up to 10 min) until other processes use at most this fraction "
                             "of the CPUs (e.g. 0.1)")
    parser.add_argument("--list", action="store_true", help="list the rows (FLOPs, working set) without timing")
    args = parser.parse_args(argv)
    cases = select(CASES, args.only)
    if not cases:
        parser.error(f"no row matches --only {' / '.join(args.only)}")
    if args.list:
        print(list_cases(cases))
        return 0
    if args.repeat < 20:
        print(f"note: --repeat {args.repeat}: medians of fewer than 20 samples are too noisy to compare closely")
    peak = machine_peak(args.threads, not args.no_peak, args.max_busy)
    print(header(), flush=True)
    for case in cases:
        busy = machine_busy(args.max_busy)
        row = bench_case(case, args.threads, args.repeat, args.warmup, cg_vector_width(), peak=peak,
                         bandwidth=not args.no_bandwidth)
        print(format_row(row) + sampling_notes(row, busy), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

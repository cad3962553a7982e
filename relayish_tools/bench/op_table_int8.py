"""int8 kernel table: our packed int8 convolutions and matmuls against onnxruntime's, as a fraction of the int8 peak.

    python -m relayish_tools.bench.op_table_int8 [--only TEXT ...] [--threads 2] [--repeat 25] [--warmup 3] [--no-peak] [--list]

One row per kernel of CASES, each a one-op ONNX model with seeded int8 weights, shaped as a layer of ResNet-18 or
of the transformers of the suite:
- conv: QLinearConv, uint8 input (zero point 128), int8 weights per output channel, int32 bias, uint8 output:
  quantize_static's convolution, requantized in its epilogue (onnxruntime: its QLinearConv kernel, MLAS's
  u8s8 convolution);
- matmul: MatMulInteger, uint8 A (zero point 128) x constant int8 B -> int32: quantize_dynamic's projections
  (onnxruntime: MLAS's u8s8 QGEMM).
Ours: the model through the graph passes, its one compute task (qnn.conv2d_nchwc, qnn.conv2d_rows for 1-3 input
channels, or qnn.matmul_pack, and the epilogue) under the default schedule, timed as bench.op_table times kernels
(bursts of back-to-back calls, engines alternating with an idle gap, disturbed samples taken again). Both engines'
outputs are checked against the numpy reference (the relayish interpreter) first: ours exactly, onnxruntime's
within one quantization step.

Figures: GOP = 2 x the multiply-adds (the epilogue not counted); GOP/s; % of the int8 peak of the same threads
(bench.peak_int8, vpdpbusd; "-" without VNNI); t ours/ort = our time over onnxruntime's (below 1: ours is faster).
As in bench.op_table, onnxruntime's one-op Conv converts NCHW to its blocked layout and back around the op.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np

from compiler import extract_tasks
from compiler.codegen import vector_width as cg_vector_width
from compiler.passes import PassContext, run_pipeline
from frontends import from_onnx
from relayish.interp import evaluate

from .kernel_bench import (GAP_S, OrtKernel, default_kernel, machine_busy, native_engines, ort_engine, reference,
                           sampling_notes, timed_figures)
from .op_table import select
from .peak_int8 import int8_lanes, measure_int8_peak

OPSET = 17


@dataclass(frozen=True)
class QConv:
    source: str
    cin: int
    cout: int
    size: int
    kernel: int
    stride: int = 1
    pad: int = 0
    op_class: str = "conv"

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    def shape(self) -> str:
        k = f"{self.kernel}x{self.kernel}" + (f"/{self.stride}" if self.stride > 1 else "")
        return f"{k} {self.cin}->{self.cout} {self.size}"

    def ops(self) -> int:
        return 2 * self.cout * self.out_size ** 2 * self.cin * self.kernel ** 2

    def model(self, seed: int = 0):
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(seed)
        k, o = self.kernel, self.out_size
        inits = {"xs": np.float32(0.02), "xz": np.uint8(128),
                 "w": rng.integers(-127, 128, (self.cout, self.cin, k, k)).astype(np.int8),
                 "ws": (rng.random(self.cout) * 0.002 + 0.001).astype(np.float32), "wz": np.zeros(self.cout, np.int8),
                 "ys": np.float32(0.5), "yz": np.uint8(100),
                 "b": rng.integers(-2000, 2000, self.cout).astype(np.int32)}
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                                kernel_shape=[k, k], strides=[self.stride] * 2, pads=[self.pad] * 4)
        graph = helper.make_graph(
            [node], "qconv",
            [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, self.cin, self.size, self.size])],
            [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, self.cout, o, o])],
            [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


@dataclass(frozen=True)
class QMatMul:
    source: str
    rows: int
    k: int
    n: int
    op_class: str = "matmul"

    def shape(self) -> str:
        return f"{self.rows}x{self.k} @ {self.k}x{self.n}"

    def ops(self) -> int:
        return 2 * self.rows * self.k * self.n

    def model(self, seed: int = 0):
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(seed)
        inits = {"b": rng.integers(-127, 128, (self.k, self.n)).astype(np.int8), "az": np.uint8(128)}
        node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
        graph = helper.make_graph(
            [node], "qmatmul", [helper.make_tensor_value_info("a", TensorProto.UINT8, [self.rows, self.k])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, [self.rows, self.n])],
            [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


CASES = [
    QConv("ResNet-18 conv1", 3, 64, 224, 7, 2, 3),
    QConv("ResNet-18 layer1", 64, 64, 56, 3, 1, 1),
    QConv("ResNet-18 layer2", 128, 128, 28, 3, 1, 1),
    QConv("ResNet-18 layer3", 256, 256, 14, 3, 1, 1),
    QConv("ResNet-18 layer4", 512, 512, 7, 3, 1, 1),
    QConv("ResNet-18 layer3 downsample", 128, 256, 28, 1, 2, 0),
    QMatMul("GPT c_attn (seq 64)", 64, 256, 768),
    QMatMul("GPT mlp c_fc (seq 64)", 64, 256, 1024),
    QMatMul("BERT-base ffn (seq 128)", 128, 768, 3072),
    QMatMul("ResNet-18 fc (batch 1)", 1, 512, 1000),
]


def _feed(model, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    v = model.graph.input[0]
    return {v.name: rng.integers(0, 256, [d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.uint8)}


def _task_inputs(task, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for p in task.func.params:
        shape, dtype = tuple(p.type.shape), p.type.dtype
        if dtype.startswith("float"):
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            info = np.iinfo(dtype)
            out.append(rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype))
    return out


def compute_task(module, vector_width: int):
    """The task of the integer product (the model's edges: layout transforms, RGB's channel padding)."""
    fused = run_pipeline(module, PassContext(vector_width=vector_width))
    tasks = [t for t in extract_tasks(fused) if any(op.startswith("qnn.") for op in t.ops)]
    if len(tasks) != 1:
        raise ValueError(f"expected one integer task, got {[t.name for t in tasks]}")
    return tasks[0]


def checked_engines(case, threads: int, vector_width: int):
    """Our kernel and onnxruntime's session, each run once and checked (ours exactly against the task's
    reference; onnxruntime's within one step of the interpreter's model output)."""
    model = case.model()
    module = from_onnx(model)
    task = compute_task(module, vector_width)
    inputs = _task_inputs(task)
    engines, outputs = native_engines({"ours": default_kernel(task, vector_width)}, inputs, threads)
    np.testing.assert_array_equal(outputs["ours"], reference(task, inputs), err_msg=f"{case.shape()}: ours")
    feed = _feed(model)
    ort_kernel = OrtKernel(model, feed, threads)
    engines.append(ort_engine(ort_kernel))
    ours_model = evaluate(module, feed)[0].astype(np.int64)
    apart = int(np.max(np.abs(ort_kernel.output().astype(np.int64) - ours_model)))
    if apart > (1 if case.op_class == "conv" else 0):
        raise AssertionError(f"{case.shape()}: onnxruntime's output is {apart} steps from the reference")
    return engines, task


def bench_case(case, threads: int, repeat: int, warmup: int, vector_width: int, peak: float | None,
               gap_s: float = GAP_S) -> dict:
    engines, task = checked_engines(case, threads, vector_width)
    ops = case.ops()
    row = {"class": case.op_class, "shape": case.shape(), "source": case.source, "ops": ops}
    row.update(timed_figures(engines, ops, 1.0, repeat, warmup, gap_s, peak, None))
    return row


def format_row(row: dict) -> str:
    ours, ort = row["ours"], row["ort"]
    pct = "-" if ours["peak"] is None else f"{100 * ours['peak']:.1f}"
    ort_pct = "-" if ort["peak"] is None else f"{100 * ort['peak']:.1f}"
    return (f"{row['class']:<7} {row['shape']:<22} {row['source']:<28} {row['ops'] / 1e9:7.3f} {ours['gflops']:8.1f} "
            f"{pct:>6} {ort['gflops']:8.1f} {ort_pct:>6} {ours['ms'] / ort['ms']:8.2f}")


HEADER = (f"{'class':<7} {'kernel':<22} {'source':<28} {'GOP':>7} {'ours':>8} {'%peak':>6} {'ort':>8} {'%peak':>6} "
          f"{'ours/ort':>8}\n{'':<7} {'':<22} {'':<28} {'':>7} {'GOP/s':>8} {'':>6} {'GOP/s':>8} {'':>6} {'time':>8}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayish_tools.bench.op_table_int8", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="rows whose 'class kernel source' contains this")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=25, help="timed samples per engine (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-peak", action="store_true", help="skip measuring the int8 peak")
    parser.add_argument("--max-busy", type=float, default=None,
                        help="before each row, wait until other processes use at most this fraction of the CPUs")
    parser.add_argument("--list", action="store_true", help="list the rows without timing")
    args = parser.parse_args(argv)
    cases = select(CASES, args.only)
    if not cases:
        parser.error(f"no row matches --only {' / '.join(args.only)}")
    if args.list:
        print("\n".join(f"{c.op_class:<7} {c.shape():<22} {c.source:<28} {c.ops() / 1e9:7.3f} GOP" for c in cases))
        return 0
    peak = None if args.no_peak or int8_lanes() is None else measure_int8_peak(args.threads)
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.2f}, vpdpbusd lanes {int8_lanes()}"
          + (f", measured int8 peak {peak:.1f} GOP/s" if peak else ""), flush=True)
    print(HEADER, flush=True)
    for case in cases:
        busy = machine_busy(args.max_busy)
        row = bench_case(case, args.threads, args.repeat, args.warmup, cg_vector_width(), peak)
        print(format_row(row) + sampling_notes(row, busy), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

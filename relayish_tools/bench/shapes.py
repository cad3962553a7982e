"""Shape robustness: one-node models of random realistic shapes, relayish against onnxruntime, per op class.

    python -m relayish_tools.bench.shapes [--seed S] [--n N] [--classes conv1x1,dense,...] [--threads 2] [--repeat 30]
                           [--json FILE] [--list]

For each op class (CLASSES: 1x1, 3x3, k x k strided, grouped, depthwise and 1-D convolutions, dense and batched
matmul, LSTM and GRU, pooling, elementwise and broadcast, reductions, softmax, LayerNorm, transposes) it draws N
seeded shapes: channel counts from 1 to 2048, half of them "round" (powers of two and their 1.5x) and half odd
(prime ones included), spatial sizes 1-224, sequence lengths 1-512, groups, windows, strides. Each shape is a
one-node ONNX model with seeded weights as initializers (Conv + bias, Gemm + bias, MatMul of two inputs, LSTM ...),
capped at MAX_FLOPS and MAX_ELEMENTS so that a case times in well under a second. Each case is compiled untuned,
checked against onnxruntime (max |ours - ort| / max |ort|), and both engines are timed in one process, same inputs
and threads, in steady state (runtime.timing.time_blocks, as `relayish bench`); the ratio is ours over onnxruntime
(below 1: ours is faster). Printed per class: cases, geomean, P90 and worst ratio, the worst shape; then the
overall geomean. A case that fails (compile, run, or an output beyond 1e-4) is listed as a failure and counts in
no ratio. --json writes every case and the summary, with the machine and versions (docs/benchmarks.md is
generated from it: python -m relayish_tools.bench.report_docs).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MAX_FLOPS = 4e8  # per case: a conv or matmul of more multiply-adds draws smaller spatial sizes / rows
MAX_ELEMENTS = 1 << 22  # per tensor
ROUND_CHANNELS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
TOLERANCE = 1e-4
OPSET = 17


@dataclass
class Case:
    cls: str
    shape: str  # what a reader needs to rebuild it, e.g. "conv3x3 c=17 o=136 28x28 s1"
    model: object  # onnx.ModelProto
    feeds: dict
    flops: float = 0.0


# ---------------------------------------------------------------------------------------------- shape draws

def _primes_below(n: int) -> list[int]:
    sieve = np.ones(n, bool)
    sieve[:2] = False
    for p in range(2, int(n ** 0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = False
    return [int(p) for p in np.flatnonzero(sieve)]


PRIMES = _primes_below(2048)


def channels(rng, lo: int = 1, hi: int = 2048) -> int:
    """A channel count: round (half), odd and log-uniform (a third of those prime)."""
    if rng.random() < 0.5:
        options = [c for c in ROUND_CHANNELS if lo <= c <= hi]
        if options:
            return int(rng.choice(options))
    if rng.random() < 0.33:
        options = [p for p in PRIMES if lo <= p <= hi]
        if options:
            return int(rng.choice(options))
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def log_int(rng, lo: int, hi: int) -> int:
    hi = max(lo, hi)
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 0.999)) - 0.499))) if hi > lo else lo


def _spatial(rng, macs_per_pixel: float, lo: int = 1, hi: int = 224) -> int:
    """A square spatial size whose work stays under MAX_FLOPS."""
    cap = int(math.sqrt(MAX_FLOPS / 2 / max(macs_per_pixel, 1.0)))
    return log_int(rng, lo, max(lo, min(hi, cap)))


def _f32(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def one_node(op: str, inputs: dict, consts: dict, attrs: dict, out_shape=None, n_out: int = 1,
             domain_opset: int = OPSET):
    """A one-node model: float32 graph inputs (name -> array, fed), initializers (name -> array, "" = omitted)."""
    node = helper.make_node(op, list(inputs) + list(consts), [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)],
        [numpy_helper.from_array(a, n) for n, a in consts.items() if n])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid(
        "", domain_opset)]))
    for out in model.graph.output:  # the checker wants a shape on every output, inferred or not
        out.type.tensor_type.shape.SetInParent()
    return model


def conv_case(rng, cls: str, k: int, stride: int = 1, groups_kind: str = "none", dims: int = 2) -> Case:
    if groups_kind == "depthwise":
        c = channels(rng, 8, 1024)
        o, g = c, c
    elif groups_kind == "grouped":
        g = int(rng.choice([2, 3, 4, 8, 16, 32]))
        c = g * channels(rng, 1, max(1, 1024 // g))
        o = g * channels(rng, 1, max(1, 1024 // g))
    else:
        c = 3 if (k >= 5 and rng.random() < 0.3) else channels(rng)
        o, g = channels(rng), 1
    macs = (c // g) * o * k ** (dims) / stride ** dims
    if dims == 1:
        length = log_int(rng, k, min(4096, int(MAX_FLOPS / 2 / max(macs, 1))))
        x_shape, w_shape = (1, c, max(length, k)), (o, c // g, k)
        attrs = dict(kernel_shape=[k], strides=[stride], pads=[k // 2] * 2, group=g)
        desc = f"{cls} c={c} o={o} L={x_shape[2]} k={k} s{stride}" + (f" g={g}" if g > 1 else "")
    else:
        size = max(_spatial(rng, macs), k if stride > 1 else 1)
        x_shape, w_shape = (1, c, size, size), (o, c // g, k, k)
        attrs = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4, group=g)
        desc = f"{cls} c={c} o={o} {size}x{size} k={k} s{stride}" + (f" g={g}" if g > 1 else "")
    x = _f32(rng, x_shape)
    model = one_node("Conv", {"x": x}, {"w": _f32(rng, w_shape) * (1 / math.sqrt(c // g * k ** dims)),
                                       "b": _f32(rng, (o,))}, attrs)
    out_pixels = math.prod(-(-s // stride) for s in x_shape[2:])
    return Case(cls, desc, model, {"x": x}, 2.0 * (c // g) * o * k ** dims * out_pixels)


def dense_case(rng) -> Case:
    k, n = channels(rng), channels(rng, 1, 32768) if rng.random() < 0.3 else channels(rng)
    m = int(rng.choice([1, 1, 2, 8, 32, log_int(rng, 1, 512)]))
    m = max(1, min(m, int(MAX_FLOPS / 2 / (k * n)) or 1))
    x = _f32(rng, (m, k))
    model = one_node("Gemm", {"x": x}, {"w": _f32(rng, (n, k)) / math.sqrt(k), "b": _f32(rng, (n,))},
                     dict(transB=1))
    return Case("dense", f"dense M={m} K={k} N={n}", model, {"x": x}, 2.0 * m * k * n)


def batch_matmul_case(rng) -> Case:
    b = int(rng.choice([1, 4, 8, 12, 16]))
    m, k, n = log_int(rng, 1, 512), int(rng.choice([32, 64, 80, 96, 128, log_int(rng, 1, 256)])), log_int(rng, 1, 512)
    while 2.0 * b * m * k * n > MAX_FLOPS:
        m, n = max(1, m // 2), max(1, n // 2)
    a, c = _f32(rng, (b, m, k)), _f32(rng, (b, k, n))
    return Case("batch_matmul", f"matmul B={b} M={m} K={k} N={n}", one_node("MatMul", {"a": a, "c": c}, {}, {}),
                {"a": a, "c": c}, 2.0 * b * m * k * n)


def rnn_case(rng, op: str) -> Case:
    gates = {"LSTM": 4, "GRU": 3}[op]
    t, batch = log_int(rng, 1, 512), int(rng.choice([1, 1, 2, 4]))
    inp, hid = channels(rng, 8, 512), channels(rng, 8, 512)
    direction = str(rng.choice(["forward", "reverse", "bidirectional"]))
    d = 2 if direction == "bidirectional" else 1
    x = _f32(rng, (t, batch, inp))
    consts = {"W": _f32(rng, (d, gates * hid, inp)) / math.sqrt(inp),
              "R": _f32(rng, (d, gates * hid, hid)) / math.sqrt(hid), "B": _f32(rng, (d, 2 * gates * hid))}
    model = one_node(op, {"x": x}, consts, dict(hidden_size=hid, direction=direction))
    return Case(op.lower(), f"{op} T={t} B={batch} I={inp} H={hid} {direction}", model, {"x": x},
                2.0 * t * batch * d * gates * hid * (inp + hid))


def pool_case(rng) -> Case:
    c = channels(rng)
    kind = str(rng.choice(["MaxPool", "AveragePool", "GlobalAveragePool"]))
    size = _spatial(rng, c / 4, 2, 112)
    x = _f32(rng, (1, c, size, size))
    if kind == "GlobalAveragePool":
        return Case("pool", f"{kind} c={c} {size}x{size}", one_node(kind, {"x": x}, {}, {}), {"x": x})
    k, s = int(rng.choice([2, 3])), 2
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[k // 2 if k == 3 else 0] * 4)
    return Case("pool", f"{kind} c={c} {size}x{size} k={k} s={s}", one_node(kind, {"x": x}, {}, attrs), {"x": x})


def _nd_shape(rng, rank: int, cap: int = MAX_ELEMENTS) -> tuple:
    """An activation-like shape: (1, C, S, S) of a CNN, (batch, sequence, width) of a transformer, (rows, features)."""
    if rank == 4:
        shape = [1, channels(rng, 1, 1024), log_int(rng, 1, 112)]
        shape.append(shape[-1])
    elif rank == 3:
        shape = [int(rng.choice([1, 2, 4])), log_int(rng, 1, 512), channels(rng, 16, 4096)]
    else:
        shape = [log_int(rng, 1, 1024), channels(rng, 1, 4096)]
    while math.prod(shape) > cap:
        shape[int(np.argmax(shape))] //= 2
    return tuple(max(1, s) for s in shape)


def elementwise_case(rng) -> Case:
    op = str(rng.choice(["Add", "Mul", "Relu", "Sigmoid", "Tanh", "Erf"]))
    shape = _nd_shape(rng, int(rng.choice([2, 3, 4])), 1 << 21)
    a = _f32(rng, shape)
    if op in ("Add", "Mul"):
        other = tuple(s if rng.random() < 0.5 else 1 for s in shape)[-int(rng.integers(1, len(shape) + 1)):]
        b = _f32(rng, other)
        return Case("elementwise", f"{op} {shape} by {other}", one_node(op, {"a": a, "b": b}, {}, {}),
                    {"a": a, "b": b})
    return Case("elementwise", f"{op} {shape}", one_node(op, {"a": a}, {}, {}), {"a": a})


def reduce_case(rng) -> Case:
    op = str(rng.choice(["ReduceMean", "ReduceSum", "ReduceMax"]))
    shape = _nd_shape(rng, int(rng.choice([2, 3, 4])), 1 << 21)
    axes = sorted(int(a) for a in rng.choice(len(shape), size=int(rng.integers(1, len(shape) + 1)), replace=False))
    x = _f32(rng, shape)
    if op == "ReduceSum":  # at opset 13, ReduceSum takes its axes as an input, the others as an attribute
        model = one_node(op, {"x": x}, {"axes": np.array(axes, np.int64)}, {}, domain_opset=13)
    else:
        model = one_node(op, {"x": x}, {}, dict(axes=axes), domain_opset=13)
    return Case("reduce", f"{op} {shape} axes={axes}", model, {"x": x})


def softmax_case(rng) -> Case:
    rows, length = log_int(rng, 1, 4096), log_int(rng, 2, 32768)
    while rows * length > MAX_ELEMENTS:
        rows = max(1, rows // 2)
    x = _f32(rng, (rows, length))
    return Case("softmax", f"Softmax {rows}x{length}", one_node("Softmax", {"x": x}, {}, dict(axis=-1)), {"x": x})


def layer_norm_case(rng) -> Case:
    rows, d = log_int(rng, 1, 1024), channels(rng, 16, 4096)
    while rows * d > MAX_ELEMENTS:
        rows = max(1, rows // 2)
    x = _f32(rng, (1, rows, d))
    model = one_node("LayerNormalization", {"x": x}, {"g": _f32(rng, (d,)), "b": _f32(rng, (d,))}, dict(axis=-1))
    return Case("layer_norm", f"LayerNorm {rows}x{d}", model, {"x": x})


def transpose_case(rng) -> Case:
    rank = int(rng.choice([2, 3, 4]))
    shape = _nd_shape(rng, rank, 1 << 21)
    perm = [int(p) for p in rng.permutation(rank)]
    x = _f32(rng, shape)
    return Case("transpose", f"Transpose {shape} perm={perm}", one_node("Transpose", {"x": x}, {}, dict(perm=perm)),
                {"x": x})


CLASSES = {
    "conv1x1": lambda rng: conv_case(rng, "conv1x1", 1),
    "conv3x3": lambda rng: conv_case(rng, "conv3x3", 3),
    "conv_strided": lambda rng: conv_case(rng, "conv_strided", int(rng.choice([3, 5, 7])), 2),
    "conv_grouped": lambda rng: conv_case(rng, "conv_grouped", int(rng.choice([1, 3])), groups_kind="grouped"),
    "conv_depthwise": lambda rng: conv_case(rng, "conv_depthwise", int(rng.choice([3, 5])),
                                            int(rng.choice([1, 2])), "depthwise"),
    "conv1d": lambda rng: conv_case(rng, "conv1d", int(rng.choice([1, 3, 5, 7])), int(rng.choice([1, 1, 2])),
                                    dims=1),
    "dense": dense_case,
    "batch_matmul": batch_matmul_case,
    "lstm": lambda rng: rnn_case(rng, "LSTM"),
    "gru": lambda rng: rnn_case(rng, "GRU"),
    "pool": pool_case,
    "elementwise": elementwise_case,
    "reduce": reduce_case,
    "softmax": softmax_case,
    "layer_norm": layer_norm_case,
    "transpose": transpose_case,
}


def draw_cases(seed: int, n: int, classes=None) -> list[Case]:
    """n cases per class, each class from its own generator seeded by (seed, class index): adding a class or
    changing n of one leaves the others' shapes as they were."""
    names = list(CLASSES) if classes is None else classes
    unknown = [c for c in names if c not in CLASSES]
    if unknown:
        raise ValueError(f"unknown class(es) {unknown}; classes: {', '.join(CLASSES)}")
    cases = []
    for name in names:
        rng = np.random.default_rng([seed, list(CLASSES).index(name)])
        cases += [CLASSES[name](rng) for _ in range(n)]
    return cases


# ---------------------------------------------------------------------------------------------- running

def run_case(case: Case, threads: int, repeat: int, warmup: int) -> dict:
    """Compile, check against onnxruntime, time both: the case's row (ratio None and `error` on failure)."""
    from relayish_tools.bench.compare import compare_with_onnxruntime
    from compiler import compile_model
    row = {"class": case.cls, "shape": case.shape, "flops": case.flops, "ratio": None}
    data = case.model.SerializeToString()
    try:
        module = compile_model(case.model, num_threads=threads, cache=False)
        result = compare_with_onnxruntime(module, data, inputs=case.feeds, threads=threads, repeat=repeat,
                                          warmup=warmup, tolerance=TOLERANCE)
    except Exception as e:  # noqa: BLE001 - a case's failure is its row; the benchmark goes on
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return row
    row["max_rel_error"] = max(o["max_rel"] for o in result["outputs"].values())
    row.update(ours_ms=result["ours"]["median_ms"], ort_ms=result["onnxruntime"]["median_ms"])
    if not all(o["passed"] for o in result["outputs"].values()):
        row["error"] = f"outputs differ from onnxruntime: max relative error {row['max_rel_error']:.2e}"
        return row
    row["ratio"] = row["ours_ms"] / row["ort_ms"]
    return row


def summarize(rows: list[dict]) -> list[dict]:
    """Per class: cases, failures, geomean/P90/worst ratio and the worst shape; then an "all" row."""
    out = []
    for cls in list(dict.fromkeys(r["class"] for r in rows)) + ["all"]:
        mine = [r for r in rows if cls in ("all", r["class"])]
        ratios = np.array([r["ratio"] for r in mine if r["ratio"] is not None])
        worst = max((r for r in mine if r["ratio"] is not None), key=lambda r: r["ratio"], default=None)
        out.append({"class": cls, "cases": len(mine), "failures": sum(r["ratio"] is None for r in mine),
                    "geomean": float(np.exp(np.log(ratios).mean())) if ratios.size else None,
                    "p90": float(np.percentile(ratios, 90)) if ratios.size else None,
                    "worst": float(ratios.max()) if ratios.size else None,
                    "worst_shape": worst["shape"] if worst else None})
    return out


def format_summary(summary: list[dict]) -> str:
    lines = [f"{'class':15s} {'cases':>5s} {'fail':>4s} {'geomean':>8s} {'P90':>6s} {'worst':>6s}  worst shape"]
    for s in summary:
        fmt = (lambda v: f"{v:.2f}" if v is not None else "-")
        lines.append(f"{s['class']:15s} {s['cases']:5d} {s['failures']:4d} {fmt(s['geomean']):>8s} "
                     f"{fmt(s['p90']):>6s} {fmt(s['worst']):>6s}  {s['worst_shape'] or ''}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.shapes", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=8, help="shapes per class (default 8)")
    p.add_argument("--classes", help=f"comma-separated subset of: {', '.join(CLASSES)}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30, help="timed runs per engine and case (default 30)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", metavar="FILE", help="write every case, the summary, the machine and versions")
    p.add_argument("--list", action="store_true", help="print the drawn shapes and exit")
    args = p.parse_args(argv)
    try:
        cases = draw_cases(args.seed, args.n, args.classes.split(",") if args.classes else None)
    except ValueError as e:
        p.error(str(e))
    if args.list:
        print("\n".join(f"{c.cls:15s} {c.shape}" for c in cases))
        return 0
    rows, start = [], time.perf_counter()
    for i, case in enumerate(cases, 1):
        row = run_case(case, args.threads, args.repeat, args.warmup)
        rows.append(row)
        status = f"{row['ratio']:.2f}x" if row["ratio"] is not None else f"FAILED {row['error']}"
        print(f"[{i}/{len(cases)}] {case.cls:15s} {case.shape:55s} {status}", flush=True)
    summary = summarize(rows)
    print(f"\nrelayish / onnxruntime, {args.threads} threads, steady state, median of {args.repeat} runs each, seed "
          f"{args.seed}, {args.n} shapes per class ({time.perf_counter() - start:.0f} s)")
    print(format_summary(summary))
    if args.json:
        import json

        from relayish_tools.bench.report import provenance
        with open(args.json, "w") as f:
            json.dump({"benchmark": "shapes", **provenance("python -m relayish_tools.bench.shapes " + " ".join(argv or sys.argv[1:])),
                       "seed": args.seed, "n": args.n, "threads": args.threads, "repeat": args.repeat,
                       "summary": summary, "cases": rows}, f, indent=1, default=float)
    return 1 if any(r["ratio"] is None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

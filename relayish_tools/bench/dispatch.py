"""Per-kernel overhead: what one kernel call and one `run` call cost us, against onnxruntime's cost per op.

    python -m relayish_tools.bench.dispatch [--threads 2] [--repeat 30] [--chain 101] [--json FILE]

A model of ~100 small kernels (MobileNet-class) must not lose its time between kernels. The measure: chains of N
Relu ops built in memory, compiled with opt_level=0 so that every op is its own kernel (nothing fuses), for N = 1
and N = --chain, at two sizes: "tiny" (64 floats, a serial kernel) and "small" (1x64x16x16: the default schedule
runs it as a parallel loop on the thread pool; `parallel_kernels` checks both in the loop IR). The cost of one
kernel is (t(N) - t(1)) / (N - 1): the kernel's own work plus its dispatch, the executor's call and, for the
parallel size, one fork/join of the pool. onnxruntime runs the same chains (same threads, same inputs; its
graph optimizations keep every Relu) for its cost per op. `run`'s Python work is the time of `module.run(None,
feed)` minus that of the bare native call on buffers bound once (Module.bound_run): checking the feed, taking a
workspace, binding, allocating the outputs.

All engines are timed in one process in steady state (runtime.timing.time_blocks: blocks of consecutive calls
per engine, engines alternating block by block with an idle gap); a sample is the median of a burst of CALLS
back-to-back calls, and every figure is the median of --repeat samples.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from compiler import compile_model
from compiler.backend import run_backend
from compiler.codegen import vector_width, walk_stmt
from compiler.passes import PassContext, run_pipeline
from frontends import from_onnx
from runtime import default_num_threads
from runtime.accuracy import compare_outputs
from runtime.timing import BLOCK_RUNS, IDLE_GAP_S, Engine, describe_timing, time_blocks

from .compare import make_ort_session

SIZES = {"tiny": (1, 64), "small": (1, 64, 16, 16)}  # a serial kernel; a parallel one (checked by parallel_kernels)
CHAIN = 101
OP = "Relu"
CALLS = 10  # back-to-back calls per sample (a sample is their median)
OPT_LEVEL = 0  # no fusion: one kernel per op


def chain_model(n: int, shape, op: str = OP) -> onnx.ModelProto:
    """x -> op -> op -> ... -> y: n unary float32 ops of `shape` in a row."""
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [prev], [out]))
        prev = out
    graph = helper.make_graph(nodes, f"{op.lower()}_chain_{n}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def parallel_kernels(model: onnx.ModelProto) -> list[bool]:
    """Per kernel call of `model` compiled at OPT_LEVEL, in order: whether its kernel has a parallel loop."""
    fused = run_pipeline(from_onnx(model), PassContext(opt_level=OPT_LEVEL, vector_width=vector_width()))
    made = run_backend(fused, vector_width(), stop_after="lower")
    parallel = [any(getattr(s, "kind", None) == "parallel" for s in walk_stmt(k.body)) for k in made.kernels]
    return [parallel[t] for t in made.task_calls.task_of]


def measure_dispatch(threads: int, repeat: int = 30, chain: int = CHAIN, sizes: dict = SIZES, warmup: int = 5,
                     block: int = BLOCK_RUNS, calls: int = CALLS, idle_gap_s: float = IDLE_GAP_S) -> dict:
    """Time chains of 1 and `chain` ops per size, ours (run and bare native call) and onnxruntime's, in one
    rotation per size. Returns {"threads", "chain", "op", "repeat", "warmup", "block", "calls", "sizes": {size:
    {"shape", "kernels", "parallel", "agree", "us": {engine: median us}, "per_kernel_us": {"relayish",
    "relayish_native", "onnxruntime"}, "ratio": relayish / onnxruntime per kernel, "run_python_us": run minus
    bare native call (chain of 1), "ort_run_us": onnxruntime's whole run of 1 op}}}."""
    if chain < 2:
        raise ValueError(f"measure_dispatch needs a chain of at least 2 ops, got {chain}")
    result = {"threads": threads, "chain": chain, "op": OP, "repeat": repeat, "warmup": warmup, "block": block,
              "calls": calls, "sizes": {}}
    for size, shape in sizes.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        feed, engines, agree = {"x": x}, [], True
        with contextlib.ExitStack() as stack:
            for n in (1, chain):
                model = chain_model(n, shape)
                module = compile_model(model, opt_level=OPT_LEVEL)
                module.num_threads = threads
                if len(module.kernels) != n:
                    raise RuntimeError(f"the chain of {n} {OP} ops compiled to {len(module.kernels)} kernels")
                session = make_ort_session(model.SerializeToString(), threads)
                native = stack.enter_context(module.bound_run(feed))
                ours = dict(zip(module.output_names, module.run(None, feed)))
                agree &= all(e["passed"] for e in compare_outputs(ours, {"y": session.run(["y"], feed)[0]}).values())
                engines += [Engine(f"relayish_{n}", lambda m=module: m.run(None, feed), calls),
                            Engine(f"native_{n}", native, calls),
                            Engine(f"onnxruntime_{n}", lambda s=session: s.run(["y"], feed), calls)]
            stats = time_blocks(engines, repeat, warmup, block, idle_gap_s)
        us = {name: s["median_ms"] * 1e3 for name, s in stats.items()}
        per_kernel = {engine: (us[f"{engine}_{chain}"] - us[f"{engine}_1"]) / (chain - 1)
                      for engine in ("relayish", "native", "onnxruntime")}
        flags = parallel_kernels(chain_model(1, shape))
        result["sizes"][size] = {
            "shape": list(shape), "kernels": chain, "parallel": all(flags), "agree": agree, "us": us,
            "per_kernel_us": {"relayish": per_kernel["relayish"], "relayish_native": per_kernel["native"],
                              "onnxruntime": per_kernel["onnxruntime"]},
            "ratio": _ratio(per_kernel["relayish"], per_kernel["onnxruntime"]),
            "run_python_us": us["relayish_1"] - us["native_1"], "ort_run_us": us["onnxruntime_1"]}
    return result


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def format_dispatch(result: dict) -> str:
    """The table of a measure_dispatch result."""
    lines = [f"chains of 1 and {result['chain']} {result['op']} ops (opt_level={OPT_LEVEL}: one kernel each), "
             f"threads {result['threads']}, a sample = median of {result['calls']} back-to-back calls; "
             + describe_timing("steady", result["repeat"], result["warmup"], result["block"]),
             f"{'size':<16}{'parallel':>9}{'us/kernel':>11}{'(native)':>10}{'ort us/op':>11}{'ratio':>8}"
             f"{'run us (1 op)':>15}{'native us':>11}{'run Python us':>15}{'ort run us':>12}"]
    for size, r in result["sizes"].items():
        k, us = r["per_kernel_us"], r["us"]
        label = f"{size} {'x'.join(map(str, r['shape']))}"
        lines.append(f"{label:<16}{'yes' if r['parallel'] else 'no':>9}{k['relayish']:>11.3f}"
                     f"{k['relayish_native']:>10.3f}{k['onnxruntime']:>11.3f}{r['ratio']:>8.2f}"
                     f"{us['relayish_1']:>15.2f}{us['native_1']:>11.2f}{r['run_python_us']:>15.2f}"
                     f"{r['ort_run_us']:>12.2f}" + ("" if r["agree"] else "  OUTPUTS DISAGREE"))
    lines.append("us/kernel = (t(chain) - t(1)) / (chain - 1) through run(); (native): the same through the bare "
                 "native call; ratio = relayish / onnxruntime per kernel; run Python us = run() - native call, "
                 "chain of 1; ort run us: onnxruntime's whole run of 1 op")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.dispatch", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=default_num_threads())
    p.add_argument("--repeat", type=int, default=30, help="timed samples per engine (default 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--chain", type=int, default=CHAIN, help=f"ops in the long chain (default {CHAIN})")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = p.parse_args(argv)
    result = measure_dispatch(args.threads, args.repeat, args.chain, warmup=args.warmup)
    print(format_dispatch(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all(r["agree"] for r in result["sizes"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Kernel benchmark of ResNet-18's convolutions and dense layer: hand schedule, default schedule, onnxruntime.

Every distinct convolution of the model and its dense layer, as the fused tasks compile_model builds (with their
bias / residual / relu), timed with our hand schedule, our default schedule and the same ops in onnxruntime, side
by side:

    python -m relayish_tools.bench.kernel_bench [--model models/resnet18.onnx] [--threads 2] [--repeat 25] [--only conv3x3]
                                  [--in-model] [--max-busy 0.1] [--no-peak] [--no-bandwidth]

How a kernel is timed. Our two kernels of a task are built into one shared library (one thread pool for both) and
called through ctypes with 64-byte aligned numpy buffers, parameters in the kernel's order: inputs, outputs, then
scratch (`func.attrs` counts). onnxruntime runs a one-node-group ONNX model (Conv [+ Add] [+ Relu], or Gemm) with
the same shapes in NCHW, with I/O binding so that only the op is timed. One sample is the median call of a burst of
back-to-back calls lasting about BURST_S (the pool is hot between kernels inside a model; a lone call would time
the workers' wake-up and the clock ramping up after idle); engines alternate sample by sample, each after a GAP_S
sleep and then until no thread of the process spins (runtime.timing.idle_wait), because onnxruntime's workers spin
for 40-60 ms after a run and would slow whoever runs next (our pool is told to go idle after each burst). A sample
disturbed by another process is taken again (runtime.timing).
The figure is the median of the samples after warm-up: a steady-state time, with the kernel's weights warm in the
caches. --in-model adds each kernel's time inside the compiled model (its own profile: weights cold, as in an
inference). All outputs are checked against the task's numpy reference (the relayish interpreter) first.

Roofline. Each task also gets its arithmetic intensity AI = FLOPs / bytes of distinct data it must read and write
(inputs, weights, output: task_bytes) and its roof min(FMA peak, AI x bandwidth), where the bandwidth is the read
bandwidth measured by bench/bandwidth.py for a warm working set of the task's size, on the same threads. Every
engine's figure is then also given as a % of that roof: a kernel of low AI (the dense layer at batch 1 does 0.5
FLOP per weight byte) is judged against what the memory level its data sits in can deliver, not against the FMA
peak it can never reach. The roof is a bound for warm data; the --in-model times (cold weights) have a lower one.

Caveat on onnxruntime's figure: a one-op model makes it convert NCHW to its blocked layout and back around the op
(inside a whole model those conversions happen once), which weighs most on the short 1x1 convolutions.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import time

import numpy as np

from compiler import compile_model, extract_tasks
from compiler.codegen import vector_width as cg_vector_width
from compiler.default_schedule import default_schedule
from compiler.lower import lower
from compiler.passes import PassContext, run_pipeline
from compiler.task import Task
from frontends import from_onnx
from relayish.expr import Call, Var, post_order
from relayish.interp import evaluate
from runtime import default_num_threads
from runtime.accuracy import DEFAULT_TOLERANCE, relative_error
from runtime.timing import Engine, burst_calls, time_alternating

from .bandwidth import measure_bandwidth, round_to_granule
from .hand_schedules import hand_schedule
from .native import NativeKernels
from .peak import cpu_info, measure_peak

BURST_S = 0.005  # one sample: back-to-back calls for about this long
MIN_BURST_CALLS = 8
GAP_S = 0.05  # idle time before each sample, then until no thread spins (runtime.timing.idle_wait: onnxruntime's
# workers spin 40-60 ms after a run)
MAX_RETAKES = 5  # a sample disturbed by another process is taken again, up to this many times


# ---------------------------------------------------------------------------------------------- tasks

def benchmark_tasks(model_path: str) -> list[Task]:
    """The distinct conv2d_nchwc and dense_pack tasks of the model, compiled as compile_model(winograd=False)
    does: this benchmark is about direct convolution kernels (Winograd's gain shows in `relayish bench
    --compare-layouts`, row "fused NCHWc direct")."""
    fused = run_pipeline(from_onnx(model_path), PassContext(vector_width=cg_vector_width(), winograd=False))
    return [t for t in extract_tasks(fused) if t.ops[0] in ("nn.conv2d_nchwc", "nn.dense_pack")]


def describe(task: Task) -> str:
    """e.g. 'conv3x3s1 64->64 56x56+add+add+relu' or 'dense 512->1000+add'."""
    anchor = _anchor_call(task)
    epilogue = "".join("+" + o.replace("nn.", "") for o in task.ops[1:])
    if task.ops[0] == "nn.dense_pack":
        w = anchor.args[1].type.shape
        return f"dense {w[1]}->{w[0] * w[2]}{epilogue}"
    x, w, out = anchor.args[0].type.shape, anchor.args[1].type.shape, anchor.type.shape
    kh, kw, s = w[2], w[3], anchor.attrs.strides[0]
    return f"conv{kh}x{kw}s{s} {x[1] * x[4]}->{out[1] * out[4]} {out[2]}x{out[3]}{epilogue}"


def _anchor_call(task: Task):
    return next(n for n in post_order(task.func.body) if isinstance(n, Call) and n.op == task.ops[0])


def random_inputs(task: Task, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(p.type.shape)).astype(np.float32) for p in task.func.params]


def reference(task: Task, inputs: list[np.ndarray]) -> np.ndarray:
    return evaluate(task.func, inputs)[0]


def task_bytes(task: Task) -> int:
    """Bytes of distinct data the task must move at least once: every parameter (inputs, weights, bias,
    residual) and every output, each counted once however often the kernel touches it."""
    params = sum(math.prod(p.type.shape) * np.dtype(p.type.dtype).itemsize for p in task.func.params)
    outputs = sum(math.prod(t.shape) * np.dtype(t.dtype).itemsize for t in task.outputs)
    return int(params + outputs)


def arithmetic_intensity(task: Task) -> float:
    """FLOPs per byte of distinct data (task_bytes): the AI of the roofline model."""
    return task.flops / task_bytes(task)


def roofline(ai: float, peak_gflops: float | None, bandwidth_gbs: float | None) -> float | None:
    """Attainable GFLOP/s = min(peak, AI x bandwidth), using whichever bounds are known (None if neither)."""
    bounds = [] if peak_gflops is None else [peak_gflops]
    if bandwidth_gbs is not None:
        bounds.append(ai * bandwidth_gbs)  # FLOP/byte x 1e9 byte/s = GFLOP/s
    return min(bounds) if bounds else None


# ---------------------------------------------------------------------------------------------- onnxruntime

def nchwc_to_nchw(x: np.ndarray) -> np.ndarray:
    n, cb, h, w, c = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * c, h, w))


def nchw_to_nchwc(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def onnx_equivalent(task: Task, inputs: list[np.ndarray]):
    """(ONNX model, feed, output converter to our layout) computing the task in plain NCHW ONNX ops.

    Supports the patterns of ResNet-18: conv2d_nchwc -> add(bias) [-> add(residual)] [-> relu], and
    dense_pack -> add(bias)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    params = {id(p): v for p, v in zip(task.func.params, inputs)}
    nodes, inits, graph_inputs, feed = [], [], [], {}
    names: dict[int, str] = {}
    calls = [n for n in post_order(task.func.body) if isinstance(n, Call)]

    def constant(value, name):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    for k, c in enumerate(calls):
        out = f"t{k}"
        if c.op == "nn.conv2d_nchwc":
            x, w = (params[id(a)] for a in c.args)
            ob_n, icb, kh, kw, ib, ob = w.shape
            w_oihw = w.transpose(0, 5, 1, 4, 2, 3).reshape(ob_n * ob, icb * ib, kh, kw)
            graph_inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, nchwc_to_nchw(x).shape))
            feed["x"] = nchwc_to_nchw(x)
            pt, pl, pb, pr = c.attrs.padding
            nodes.append(helper.make_node("Conv", ["x", constant(w_oihw, "w")], [out], kernel_shape=[kh, kw],
                                          strides=list(c.attrs.strides), pads=[pt, pl, pb, pr],
                                          dilations=list(c.attrs.dilation)))
            block = ob
        elif c.op == "nn.dense_pack":
            x, w = (params[id(a)] for a in c.args)
            nb_n, k_, nb = w.shape
            graph_inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape))
            feed["x"] = x
            nodes.append(helper.make_node("Gemm", ["x", constant(w.transpose(1, 0, 2).reshape(k_, nb_n * nb), "w")],
                                          [out]))
            block = None
        elif c.op in ("add", "nn.relu"):
            args = []
            for a in c.args:
                if id(a) in names:
                    args.append(names[id(a)])
                elif isinstance(a, Var) and id(a) in params:
                    v = params[id(a)]
                    if block is not None and v.ndim == 5 and v.shape[2:4] == (1, 1):  # per-channel bias
                        args.append(constant(nchwc_to_nchw(v), f"b{k}"))
                    elif block is not None and v.ndim == 5:  # residual: a graph input
                        name = f"r{k}"
                        feed[name] = nchwc_to_nchw(v)
                        graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, feed[name].shape))
                        args.append(name)
                    else:
                        args.append(constant(v, f"b{k}"))
                else:
                    raise NotImplementedError(f"onnx_equivalent: {c.op} argument {a!r} of task {task.name}")
            nodes.append(helper.make_node("Add" if c.op == "add" else "Relu", args, [out]))
        else:
            raise NotImplementedError(f"onnx_equivalent: op {c.op} in task {task.name}")
        names[id(c)] = out
    result, shape = names[id(calls[-1])], tuple(calls[-1].type.shape)
    if block is not None:
        shape = (shape[0], shape[1] * shape[4], shape[2], shape[3])
    graph = helper.make_graph(nodes, task.name, graph_inputs,
                              [helper.make_tensor_value_info(result, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    convert = (lambda y: nchw_to_nchwc(y, block)) if block else (lambda y: y)
    return model, feed, convert


class OrtKernel:
    """An onnxruntime session on an ONNX model, inputs and output bound once (I/O binding); `output()` is its
    output through `convert` (e.g. back to our layout)."""

    def __init__(self, model, feed: dict[str, np.ndarray], threads: int, convert=None):
        import onnxruntime as ort
        self.convert = convert or (lambda y: y)
        options = ort.SessionOptions()
        # With all cores, onnxruntime's own default (0) pins its threads one per physical core; an explicit 2
        # leaves them unpinned, and on this VM Linux then often stacks both on one core (half speed in about a
        # third of the sessions, measured). Our pool pins its workers too, so this is the fair setting.
        options.intra_op_num_threads = 0 if threads == default_num_threads() else threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.binding = self.session.io_binding()
        for name, value in feed.items():
            self.binding.bind_cpu_input(name, value)
        self.binding.bind_output(self.session.get_outputs()[0].name, "cpu")
        self.session.run_with_iobinding(self.binding)

    def __call__(self):
        self.session.run_with_iobinding(self.binding)

    def output(self) -> np.ndarray:
        return self.convert(self.binding.copy_outputs_to_cpu()[0])


# ---------------------------------------------------------------------------------------------- one task

def default_kernel(task: Task, vector_width: int, name: str = "k_default"):
    """The task's kernel (PrimFunc) under the default schedule compile_model gives it without records."""
    state = task.initial_state()
    return lower(default_schedule(state, vector_width).apply(state), name)


def native_engines(funcs: dict, inputs: list[np.ndarray], threads: int) -> tuple[list[Engine], dict]:
    """{label: PrimFunc} built into one library (one thread pool), each an Engine on its own aligned copy of the
    inputs, run once: (engines, {label: output}). The pool goes idle after each sample."""
    lib = NativeKernels(list(funcs.values()))
    lib.set_threads(threads)
    engines, outputs = [], {}
    for label, func in funcs.items():
        args = lib.arguments(func.name, inputs)
        call = lib.caller(func.name, args)
        call()
        outputs[label] = args[func.attrs["num_inputs"]]
        engines.append(Engine(label, call, burst_calls(call, BURST_S, MIN_BURST_CALLS), lib.idle))
    return engines, outputs


def ort_engine(kernel: OrtKernel, label: str = "ort") -> Engine:
    return Engine(label, kernel, burst_calls(kernel, BURST_S, MIN_BURST_CALLS))


def checked_errors(what: str, results: dict) -> dict:
    """{label: relative error} of {label: (output, reference)}; AssertionError naming `what` if any exceeds the
    fp32 tolerance: a wrong kernel is never timed."""
    errors = {label: relative_error(out, ref) for label, (out, ref) in results.items()}
    bad = {k: v for k, v in errors.items() if not v <= DEFAULT_TOLERANCE}
    if bad:
        raise AssertionError(f"{what}: outputs differ from the reference: {bad}")
    return errors


def timed_figures(engines: list[Engine], flops: float, ai: float, repeat: int, warmup: int, gap_s: float = GAP_S,
                  peak: float | None = None, bandwidth: float | None = None) -> dict:
    """Time the engines alternately (time_alternating) and judge them: {"ai", "bandwidth", "roof", "retaken",
    "noisy", "samples", label: {"ms", "gflops", "peak", "roof"}} with "peak"/"roof" as fractions (None unknown)."""
    stats: dict = {}
    medians = time_alternating(engines, repeat, warmup, gap_s, MAX_RETAKES, stats)
    roof = roofline(ai, peak, bandwidth)
    figures = {"ai": ai, "bandwidth": bandwidth, "roof": roof, "retaken": stats["retaken"], "noisy": stats["noisy"],
               "samples": repeat * len(engines)}
    for label, s in medians.items():
        seconds = s["median_ms"] / 1e3
        gflops = flops / seconds / 1e9
        figures[label] = {"ms": seconds * 1e3, "gflops": gflops, "peak": gflops / peak if peak else None,
                          "roof": gflops / roof if roof else None}
    return figures


def bench_task(task: Task, threads: int, repeat: int, warmup: int, vector_width: int = 16, gap_s: float = GAP_S,
               peak: float | None = None, bandwidth: float | None = None) -> dict:
    """Build, check and time the hand, default and onnxruntime versions of one task. `peak` (GFLOP/s) and
    `bandwidth` (GB/s at the task's working-set size) give each engine's fraction of the peak and of the roof."""
    funcs = {"default": default_kernel(task, vector_width)}
    hand = hand_schedule(task, vector_width)
    if hand is not None:
        state = task.initial_state()
        funcs["hand"] = lower(hand.apply(state), "k_hand")
    inputs = random_inputs(task)
    ref = reference(task, inputs)
    engines, outputs = native_engines(funcs, inputs, threads)
    model, feed, convert = onnx_equivalent(task, inputs)
    ort_kernel = OrtKernel(model, feed, threads, convert)
    engines.append(ort_engine(ort_kernel))
    outputs["ort"] = ort_kernel.output()
    errors = checked_errors(describe(task), {label: (out, ref) for label, out in outputs.items()})
    row = {"task": describe(task), "flops": task.flops, "weight": task.weight, "errors": errors}
    row.update(timed_figures(engines, task.flops, arithmetic_intensity(task), repeat, warmup, gap_s, peak, bandwidth))
    return row


# ---------------------------------------------------------------------------------------------- in the model

class HandRecords:
    """A records-like object for compile_model(records=...): `best(task_key)` answers with our hand schedule."""

    def __init__(self, tasks: list[Task], vector_width: int = 16):
        self._tasks = {t.key: t for t in tasks}
        self._vw = vector_width

    def best(self, key: str):
        task = self._tasks.get(key)
        return hand_schedule(task, self._vw) if task is not None else None


def _signature(ops, output_shape, flops) -> tuple:
    return tuple(ops), tuple(output_shape), int(flops)


def in_model_times(model_path: str, tasks: list[Task], threads: int, repeat: int = 20, rounds: int = 3) -> dict:
    """{"hand" | "default": {task key: median seconds per call}} from the compiled model's own per-kernel profile:
    the kernels run in sequence as in an inference, so weights come from DRAM (ResNet-18's 46 MB exceed the L3)
    and inputs from whatever the previous kernel left in cache. Kernels are matched to tasks by (ops, output
    shape, flops); tasks of several calls get the mean of their calls."""
    by_sig = {_signature(t.ops, t.outputs[0].shape, t.flops): t.key for t in tasks}
    modules = {"hand": compile_model(model_path, records=HandRecords(tasks, cg_vector_width()), winograd=False),
               "default": compile_model(model_path, winograd=False)}
    samples: dict = {label: {} for label in modules}
    for _ in range(rounds):  # alternate the two models, as the engines above
        for label, module in modules.items():
            module.num_threads = threads
            for row, kernel in zip(module.profile(repeat), module.kernels):
                key = by_sig.get(_signature(kernel["ops"], kernel["output_shape"], kernel["flops"]))
                if key is not None:
                    samples[label].setdefault(key, []).append(row["median_ms"] / 1e3)
    return {label: {k: float(np.median(v)) for k, v in per.items()} for label, per in samples.items()}


def format_row(row: dict) -> str:
    cells = [f"{row['task']:<40}"]
    for label in ("hand", "default", "ort"):
        r = row.get(label)
        if r is None:
            cells.append(f"{'-':>21}")
            continue
        pct = f"{100 * r['peak']:5.1f}%" if r["peak"] is not None else ""
        cells.append(f"{r['gflops']:7.1f} GF/s {pct:>6}")
    ours = row.get("hand", row["default"])["ms"]
    cells.append(f"{ours / row['ort']['ms']:6.2f}  {row['default']['ms'] / row['ort']['ms']:6.2f}")
    if "model" in row:
        cells.append(" ".join(f"{row['flops'] / row['model'][k] / 1e9:7.1f}" if k in row["model"] else f"{'-':>7}"
                              for k in ("hand", "default")))
    cells.append(format_roofline(row))
    return " ".join(cells)


def format_roofline(row: dict) -> str:
    """' AI  GB/s  roof  %hand %def %ort': FLOP/byte, measured GB/s, roof GFLOP/s, each engine's % of the roof."""
    bw = f"{row['bandwidth']:6.1f}" if row.get("bandwidth") else f"{'-':>6}"
    roof = f"{row['roof']:6.1f}" if row.get("roof") else f"{'-':>6}"
    pcts = []
    for label in ("hand", "default", "ort"):
        r = row.get(label)
        pcts.append(f"{100 * r['roof']:5.1f}%" if r is not None and r.get("roof") else f"{'-':>6}")
    return f" {row['ai']:6.2f} {bw} {roof} " + " ".join(pcts)


def header(in_model: bool) -> str:
    head = f"{'task':<40} {'hand':>21} {'default':>21} {'onnxruntime':>21} {'hand/ort':>6} {'def/ort':>6}"
    sub = f"{'':<40} {'(GFLOP/s, % of peak, ratios of times)':>43}"
    if in_model:
        head += f"  {'in model: hand default':>22}"
    head += f"  {'AI':>6} {'GB/s':>6} {'roof':>6} {'hand':>6} {'def':>6} {'ort':>6}"
    sub += "(FLOP/byte, read GB/s, roof GFLOP/s, % of roof)".rjust(len(head) - len(sub))
    return head + "\n" + sub


def busy_fraction(seconds: float = 0.5) -> float:
    """Fraction of all CPUs' time spent busy (not idle or iowait) during the next `seconds`, from /proc/stat: the
    machine is shared, and a figure taken while others compute is not a kernel's speed."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_until_quiet(max_busy: float, timeout_s: float = 600.0) -> float:
    """Sleep until the other processes use at most max_busy of the machine (or timeout); returns the last value."""
    deadline = time.monotonic() + timeout_s
    busy = busy_fraction()
    while busy > max_busy and time.monotonic() < deadline:
        time.sleep(2.0)
        busy = busy_fraction()
    return busy


def machine_busy(max_busy: float | None) -> float:
    """Before a row: wait until the machine is quiet enough (max_busy given), or just read how busy it is."""
    return wait_until_quiet(max_busy) if max_busy is not None else busy_fraction()


def sampling_notes(row: dict, busy: float) -> str:
    """What a row's timing went through: the machine's load before it, samples retaken and kept though noisy."""
    return f"  busy {100 * busy:3.0f}%, retaken {row['retaken']}, noisy {row['noisy']}/{row['samples']}"


@functools.lru_cache(maxsize=None)
def working_set_bandwidth(nbytes: int, threads: int) -> float:
    """Read GB/s of `threads` threads over a warm working set of about nbytes (measured once per size)."""
    return measure_bandwidth(round_to_granule(nbytes, threads), threads)


def machine_peak(threads: int, measure: bool = True, max_busy: float | None = None) -> float | None:
    """The fp32 FMA peak of `threads` threads (None unless `measure`), measured once the machine is quiet enough
    (max_busy), after printing the CPU, thread count and load average on one line."""
    info = cpu_info()
    if max_busy is not None:
        wait_until_quiet(max_busy)
    peak = measure_peak(threads) if measure else None
    print(f"cpu {info['cpu']}, threads {threads}, load average {os.getloadavg()[0]:.2f}"
          + (f", measured fp32 FMA peak {peak:.1f} GFLOP/s" if peak else ""), flush=True)
    return peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayish_tools.bench.kernel_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "models", "resnet18.onnx"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=25, help="timed samples per engine (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--only", default="", help="run the tasks whose description contains this text")
    parser.add_argument("--no-peak", action="store_true", help="skip measuring the FMA peak")
    parser.add_argument("--no-bandwidth", action="store_true",
                        help="skip measuring the read bandwidth at each task's working-set size (roofline)")
    parser.add_argument("--in-model", action="store_true",
                        help="also time every kernel inside the compiled model (cold weights), hand and default")
    parser.add_argument("--max-busy", type=float, default=None,
                        help="before each task, wait (up to 10 min) until other processes use at most this fraction "
                             "of the CPUs (e.g. 0.1)")
    args = parser.parse_args(argv)
    if args.repeat < 20:
        parser.error("--repeat must be >= 20 (medians of fewer samples are too noisy to compare)")
    peak = machine_peak(args.threads, not args.no_peak, args.max_busy)
    tasks = [t for t in benchmark_tasks(args.model) if args.only in describe(t)]
    model = None
    if args.in_model:
        if args.max_busy is not None:
            wait_until_quiet(args.max_busy)
        model = in_model_times(args.model, tasks, args.threads)
    print(header(model is not None))
    for task in tasks:
        busy = machine_busy(args.max_busy)
        bandwidth = None if args.no_bandwidth else working_set_bandwidth(task_bytes(task), args.threads)
        row = bench_task(task, args.threads, args.repeat, args.warmup, cg_vector_width(), peak=peak,
                         bandwidth=bandwidth)
        if model is not None:
            row["model"] = {label: per[task.key] for label, per in model.items() if task.key in per}
        print(format_row(row) + sampling_notes(row, busy), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The cost model's dataset harness: measured programs to train and judge tuning.cost_model on.

    python -m relayish_tools.bench.cost_data --collect data.npz [--count 250]   # measure variants of a ResNet-18 conv
    python -m relayish_tools.bench.cost_data --evaluate data.npz [--train 200]   # train, rank the held-out programs

A dataset is variants of one convolution task's schedule ("perturb": mutations of its default schedule, as an
evolutionary search makes them; "random": random tilings, loop orders and annotations), built into shared
libraries in batches (bench.native) and timed with the CPU-time clock of one thread (runtime.timing), every
output checked against the numpy interpreter (runtime.accuracy). `--evaluate` trains the XGBoost model on part
of it and reports the pairwise ranking accuracy on the rest (docs/history/earlier-znver5.md: "cost model, pairwise
ranking accuracy").
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Sequence

import numpy as np

from compiler import extract_tasks
from compiler.codegen import vector_width as cg_vector_width
from compiler.codegen import vectorize_blocker, walk_stmt
from compiler.default_schedule import ScheduleBuilder, default_schedule
from compiler.loopir import For, IfThenElse, Seq, Store
from compiler.lower import lower
from compiler.passes import PassContext, run_pipeline
from compiler.schedule import (Annotate, CacheWrite, ComputeAt, ComputeInline, Fuse, Pragma, Reorder, Schedule,
                               ScheduleError, Split, divisors)
from compiler.task import build_task
from frontends import from_onnx
from relayish.expr import Function, TensorType, Var, call
from relayish.interp import evaluate
from runtime.accuracy import DEFAULT_TOLERANCE, relative_error
from runtime.timing import time_calls
from tuning.cost_model import XGBoostModel, featurize, pairwise_accuracy

from .native import NativeKernels


# ---------------------------------------------------------------------------------------------- tasks and variants

def conv_task(in_blocks=4, size=8, out_blocks=4, block=16, kernel=3):
    """A conv2d_nchwc + bias + relu task of the given size (padding keeps the spatial size)."""
    x = Var("x", TensorType((1, in_blocks, size, size, block), "float32"))
    w = Var("w", TensorType((out_blocks, in_blocks, kernel, kernel, block, block), "float32"))
    b = Var("b", TensorType((1, out_blocks, 1, 1, block), "float32"))
    pad = kernel // 2
    y = call("nn.conv2d_nchwc", x, w, strides=(1, 1), padding=(pad,) * 4, dilation=(1, 1))
    return build_task(Function((x, w, b), call("nn.relu", call("add", y, b)), {"Primitive": 1}))


def resnet_conv_task(model_path: str = "models/resnet18.onnx"):
    """The cheapest 3x3 conv + bias + relu task of ResNet-18 with a 7x7 output (512 channels)."""
    ctx = PassContext(opt_level=3, layout="NCHWc", vector_width=cg_vector_width())
    tasks = extract_tasks(run_pipeline(from_onnx(model_path), ctx))
    convs = [t for t in tasks if t.ops == ["nn.conv2d_nchwc", "add", "nn.relu"] and
             t.inputs[1].shape[2:4] == (3, 3) and t.outputs[0].shape[2:4] == (7, 7)]
    if not convs:
        raise ValueError(f"{model_path}: no 3x3 conv + add + relu task with a 7x7 output")
    return min(convs, key=lambda t: t.flops)


class _Steps(ScheduleBuilder):
    """The default schedules' builder, except that a step which does not apply is skipped (as a search would)."""

    def try_add(self, step) -> bool:
        """Apply and keep `step`; False (and nothing kept) when it does not apply."""
        try:
            self.add(step)
        except ScheduleError:
            return False
        return True

    def leaves(self, stage: str) -> list[str]:
        return [i.name for i in self.state.stage(stage).leaves]


def random_variant(task, rng: random.Random) -> Schedule:
    """A random legal schedule of a (pad ->) reduction -> elementwise-epilogue task: the anchor computed at a
    random loop of a randomly tiled output stage, random loop orders and annotations."""
    b = _Steps(task.initial_state())
    stages = b.state.stages
    for st in reversed(stages):
        if not st.is_output and not st.is_reduction and (st.op.tag != "pad" or rng.random() < 0.3):
            b.try_add(ComputeInline(st.name))
    anchor = next(s for s in reversed(stages) if s.is_reduction)
    out = next(s for s in stages if s.is_output)
    if anchor is out:
        b.try_add(CacheWrite(anchor.name))
        anchor = b.state.stage(anchor.name + ".local")
    ext = out.leaf_extents()
    outer, inner = [], []
    for name in b.leaves(out.name):
        f = rng.choice(_tile_factors(ext[name]))
        if f == 1:
            outer.append(name)
        elif f >= ext[name]:
            inner.append(name)
        elif b.try_add(Split(out.name, name, (f,))):
            outer.append(f"{name}.0")
            inner.append(f"{name}.1")
    b.try_add(Reorder(out.name, tuple(outer + inner)))
    n_par = rng.randint(0, len(outer))
    if n_par > 1 and b.try_add(Fuse(out.name, tuple(outer[:n_par]))):
        outer = ["@".join(outer[:n_par])] + outer[n_par:]
        n_par = 1
    if n_par:
        b.try_add(Annotate(out.name, outer[0], "parallel"))
    if rng.random() < 0.9 and outer:
        b.try_add(ComputeAt(anchor.name, out.name, rng.choice(outer[max(n_par - 1, 0):])))
    if inner and rng.random() < 0.8:
        b.try_add(Annotate(out.name, inner[-1], "vectorize"))
    if len(inner) > 1 and rng.random() < 0.5:
        b.try_add(Annotate(out.name, inner[-2], "unroll"))
    _random_anchor_loops(b, anchor.name, rng)
    for st in stages:
        if st.op.tag == "pad" and st.loc.is_root:
            names = b.leaves(st.name)
            if b.try_add(Fuse(st.name, tuple(names[:3]))) and rng.random() < 0.8:
                b.try_add(Annotate(st.name, b.leaves(st.name)[0], "parallel"))
            if rng.random() < 0.8:
                b.try_add(Annotate(st.name, b.leaves(st.name)[-1], "vectorize"))
    if rng.random() < 0.3:
        b.try_add(Pragma(anchor.name, b.leaves(anchor.name)[0], "auto_unroll_max_step", rng.choice([16, 64, 512])))
    return Schedule(tuple(b.steps))


def _random_anchor_loops(b: _Steps, name: str, rng: random.Random) -> None:
    """Split a reduction loop, then order: [spatial outer] [reduce outer] [spatial mid] [reduce inner] [spatial
    inner] with random cut points; vectorize / unroll the innermost spatial loops sometimes."""
    st = b.state.stage(name)
    red = [i.name for i in st.leaves if i.kind == "reduce"]
    sp = [i.name for i in st.leaves if i.kind == "spatial"]
    ext = st.leaf_extents()
    splittable = [r for r in red if ext[r] >= 4]
    red_outer, red_inner = list(red), []
    if splittable and rng.random() < 0.5:
        r = rng.choice(splittable)
        if b.try_add(Split(name, r, (rng.choice([d for d in divisors(ext[r]) if 1 < d < ext[r]] or [2]),))):
            red_outer = [x if x != r else f"{r}.0" for x in red]
            red_inner = [f"{r}.1"]
    rng.shuffle(red_outer)
    cut_inner = rng.randint(max(0, len(sp) - 3), len(sp))
    cut_outer = rng.randint(0, cut_inner)
    order = sp[:cut_outer] + red_outer + sp[cut_outer:cut_inner] + red_inner + sp[cut_inner:]
    b.try_add(Reorder(name, tuple(order)))
    leaves = b.leaves(name)
    if st.loc.is_root:  # not computed at the output: parallelize its own outer spatial loops
        if cut_outer >= 2 and b.try_add(Fuse(name, tuple(leaves[:cut_outer]))):
            leaves = b.leaves(name)
        if cut_outer >= 1:
            b.try_add(Annotate(name, leaves[0], "parallel"))
    if sp and leaves[-1] == sp[-1] and rng.random() < 0.8:
        b.try_add(Annotate(name, leaves[-1], "vectorize"))
    if len(leaves) > 1 and rng.random() < 0.5 and b.state.stage(name).leaves[-2].kind == "spatial":
        b.try_add(Annotate(name, leaves[-2], "unroll"))


def _tile_factors(extent: int) -> list[int]:
    """Inner tile sizes to draw from: the divisors, and a non-divisor (a guarded tail) when there is one."""
    out = divisors(extent)
    tail = next((f for f in (4, 3, 5, 6, 7) if f < extent and extent % f), None)
    return out + [tail] if tail else out


MAX_UNROLLED = 512  # statement copies after unrolling: a few thousand take LLVM minutes and gigabytes


def unrolled_size(func) -> int:
    """Statements in the kernel once unrolled: by annotation, and innermost loops of up to 16 iterations that
    LLVM unrolls fully on its own (vector loops that codegen vectorizes count once). A proxy of compile time."""

    def size(s, copies):
        if isinstance(s, Store):
            return copies
        if isinstance(s, Seq):
            return sum(size(x, copies) for x in s.stmts)
        if isinstance(s, IfThenElse):
            return size(s.then_case, copies) + (size(s.else_case, copies) if s.else_case is not None else 0)
        if isinstance(s, For):
            n = s.extent.value if hasattr(s.extent, "value") else 1
            innermost = not any(isinstance(x, For) for x in walk_stmt(s.body))
            vector = s.kind == "vectorize" and vectorize_blocker(s) is None
            if s.kind == "unroll" or (innermost and s.kind != "parallel" and not vector and n <= 16):
                copies *= n
        return size(s.body, copies)  # For, LetStmt, Allocate
    return size(func.body, 1)


def perturbed_variant(task, rng: random.Random, base: Schedule | None = None, max_mutations: int = 4) -> Schedule:
    """The task's default schedule (or `base`) after 1..max_mutations random mutations of its steps, as an
    evolutionary search makes them: a split's tile size, an annotation (none/unroll/vectorize), an extra unroll,
    a compute_at position, a reduction loop order, the padding inlined or not, an auto-unroll pragma. The steps
    are then replayed on the initial state; one that no longer applies is dropped."""
    steps = list((base or default_schedule(task.initial_state(), cg_vector_width())).steps)
    for _ in range(rng.randint(1, max_mutations)):
        steps = _mutate(task, steps, rng)
    return Schedule(tuple(_replay(task, steps).steps))


def _mutate(task, steps: list, rng: random.Random) -> list:
    kind = rng.choice(["tile", "tile", "annotate", "annotate", "unroll", "compute_at", "order", "inline", "pragma"])
    picks = {"tile": Split, "annotate": Annotate, "compute_at": ComputeAt, "order": Reorder}
    if kind in picks:
        idx = [i for i, s in enumerate(steps) if isinstance(s, picks[kind])]
        if not idx:
            return steps
        k = rng.choice(idx)
        state = _replay(task, steps[:k]).state
        old = steps[k]
        try:
            st = state.stage(old.stage)
            if kind == "tile":
                new = Split(old.stage, old.iter, (rng.choice(_tile_factors(st.leaf_extents()[old.iter])),))
            elif kind == "annotate":
                new = Annotate(old.stage, old.iter, rng.choice(["none", "unroll", "vectorize"]))
            elif kind == "compute_at":
                new = ComputeAt(old.stage, old.target, rng.choice([i.name for i in state.stage(old.target).leaves]))
            else:
                new = Reorder(old.stage, _shuffle_reductions(st, old.order, rng))
        except ScheduleError:
            return steps
        return steps[:k] + [new] + steps[k + 1:]
    state = task.initial_state()
    if kind == "inline":
        pads = [st.name for st in state.stages if st.op.tag == "pad"]
        inlined = [s for s in steps if isinstance(s, ComputeInline) and s.stage in pads]
        return [s for s in steps if s not in inlined] if inlined else [ComputeInline(p) for p in pads] + steps
    final = _replay(task, steps).state
    st = rng.choice([s for s in final.stages if not s.loc.is_inline])
    leaf = rng.choice(st.leaves).name
    if kind == "unroll":
        return steps + [Annotate(st.name, leaf, "unroll")]
    return steps + [Pragma(st.name, st.leaves[0].name, "auto_unroll_max_step", rng.choice([0, 16, 64, 512]))]


def _replay(task, steps: list) -> _Steps:
    """The steps applied to the task's initial state, those that do not apply skipped."""
    b = _Steps(task.initial_state())
    for step in steps:
        b.try_add(step)
    return b


def _shuffle_reductions(st, order: tuple, rng: random.Random) -> tuple:
    """The loop order with its reduction loops permuted among their own positions."""
    kinds = {i.name: i.kind for i in st.leaves}
    pos = [i for i, n in enumerate(order) if kinds.get(n) == "reduce"]
    red = [order[i] for i in pos]
    rng.shuffle(red)
    out = list(order)
    for i, n in zip(pos, red):
        out[i] = n
    return tuple(out)


# ---------------------------------------------------------------------------------------------- measuring

def measure(task, schedules: Sequence[Schedule], threads: int = 1, cpu_clock: bool = True, rounds: int = 2,
            min_seconds: float = 0.02, max_repeat: int = 20, batch: int = 16, check: bool = True) -> np.ndarray:
    """Cost in seconds of each schedule: the min over `rounds` interleaved rounds of repeated runs of its kernel
    (each round: one warm-up call, then at least 3 timed calls, more while under min_seconds, up to max_repeat);
    inf when it does not apply, build or give the reference's results. Kernels are built `batch` at a time into
    one library, to amortize the build.

    The default clock is the process's CPU time with one thread: on a machine shared with other work, wall time
    counts the time the kernel waits for a core (seen here: the same kernel 1x to 4x apart on two runs, against
    +-10% in CPU time). With threads > 1 the CPU time would add up the threads' work: use cpu_clock=False."""
    if cpu_clock and threads != 1:
        raise ValueError(f"measure: the CPU-time clock needs threads=1 (got threads={threads}); pass cpu_clock=False")
    clock = time.process_time if cpu_clock else time.perf_counter
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in task.inputs]
    ref = np.asarray(evaluate(task.func, inputs)[0]) if check else None
    costs = np.full(len(schedules), np.inf)
    for start in range(0, len(schedules), batch):
        kernels = _build_batch(task, schedules, range(start, min(start + batch, len(schedules))))
        libs = list({id(lib): lib for lib, _, _ in kernels}.values())
        for lib in libs:
            lib.set_threads(threads)
        runs = {}
        for lib, i, func in kernels:
            args = lib.arguments(func.name, inputs)
            runs[i] = (lib.caller(func.name, args), args[len(inputs)])
        for _ in range(rounds):
            for i, (run, _) in runs.items():
                run()  # warm-up: page faults, the pool's start
                costs[i] = min(costs[i], min(time_calls(run, 3, min_seconds, max_repeat, clock)))
        for i, (_, out) in runs.items():
            if check and not relative_error(out, ref) <= DEFAULT_TOLERANCE:
                costs[i] = np.inf
        for lib in libs:
            lib.idle()
    return costs


def _build_batch(task, schedules, indices) -> list:
    """[(NativeKernels, index, PrimFunc)] of the schedules that apply and build; one library for all when
    possible."""
    funcs = {}
    for i in indices:
        try:
            funcs[i] = lower(schedules[i].apply(task.initial_state()), f"variant{i}")
        except ScheduleError:
            pass
    try:
        lib = NativeKernels(list(funcs.values()))
        return [(lib, i, f) for i, f in funcs.items()]
    except Exception:  # a codegen failure of one kernel must not lose the batch: build them one by one
        built = []
        for i, f in funcs.items():
            try:
                built.append((NativeKernels([f]), i, f))
            except Exception:
                continue
        return built


# ---------------------------------------------------------------------------------------------- datasets

def variants(task, count: int, seed: int = 0, kind: str = "perturb") -> list[Schedule]:
    """The default schedule, then distinct variants ("perturb": mutations of the default schedule; "random":
    random tilings, orders and annotations) whose unrolled code stays within MAX_UNROLLED."""
    make = {"perturb": perturbed_variant, "random": random_variant}[kind]
    rng = random.Random(seed)
    schedules = [default_schedule(task.initial_state(), cg_vector_width())]
    seen = {schedules[0].to_json()}
    while len(schedules) < count:
        s = make(task, rng)
        if s.to_json() not in seen and unrolled_size(lower(s.apply(task.initial_state()))) <= MAX_UNROLLED:
            seen.add(s.to_json())
            schedules.append(s)
    return schedules


def collect(task, count: int, seed: int = 0, threads: int = 1, kind: str = "perturb", log=None) -> dict:
    """Measure `count` variants of a task (see `variants`): a dataset dict."""
    schedules = variants(task, count, seed, kind)
    costs = []
    for k in range(0, count, 16):
        costs.extend(measure(task, schedules[k:k + 16], threads=threads, cpu_clock=threads == 1))
        if log:
            log(f"measured {len(costs)}/{count}, best so far {np.min(costs) * 1e3:.3f} ms")
    return {"schedules": np.array([s.to_json() for s in schedules]), "costs": np.asarray(costs),
            "task_key": np.array(task.key)}


def evaluate_split(features: list, costs: np.ndarray, n_train: int, seed: int = 0, rtol: float = 0.0) -> float:
    """Train on `n_train` random programs, return the pairwise accuracy on the others (the successful ones)."""
    order = np.random.default_rng(seed).permutation(len(costs))
    train, test = order[:n_train], np.array([i for i in order[n_train:] if np.isfinite(costs[i])])
    model = XGBoostModel()
    model.update_features([features[i] for i in train], [costs[i] for i in train])
    return pairwise_accuracy(model.predict_features([features[i] for i in test]), costs[test], rtol)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.cost_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--collect", metavar="OUT.npz", help="measure variants of a ResNet-18 conv task")
    p.add_argument("--evaluate", metavar="DATA.npz", help="train on part of a dataset, rank the rest")
    p.add_argument("--model", default="models/resnet18.onnx")
    p.add_argument("--count", type=int, default=250)
    p.add_argument("--variants", choices=["perturb", "random"], default="perturb",
                   help="mutations of the default schedule (default), or random tilings/orders/annotations")
    p.add_argument("--train", type=int, default=200)
    p.add_argument("--threads", type=int, default=1,
                   help="1 (default): CPU time of one thread, robust on a shared machine; more: wall time")
    p.add_argument("--splits", type=int, default=5, help="random train/test splits to average over")
    args = p.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if not args.collect and not args.evaluate:
        p.error("give --collect OUT.npz or --evaluate DATA.npz")
    path = args.evaluate
    if args.collect:
        task = resnet_conv_task(args.model)
        log(f"task {task} inputs {[t.shape for t in task.inputs]}")
        data = collect(task, args.count, threads=args.threads, kind=args.variants, log=log)
        np.savez(args.collect, **data)
        path = args.collect
    if not os.path.isfile(path):
        p.error(f"{path}: no such dataset (make one with --collect)")
    data = np.load(path)
    task = resnet_conv_task(args.model)
    if str(data["task_key"]) != task.key:
        raise SystemExit(f"{path} holds programs of task {data['task_key']}, not of {task} from {args.model}")
    costs = data["costs"]
    features = [featurize(task, Schedule.from_json(str(s))) for s in data["schedules"]]  # with today's features
    ok = np.isfinite(costs)
    print(f"{len(costs)} programs of {task}, {int((~ok).sum())} failed; cost min {costs[ok].min() * 1e3:.3f} ms, "
          f"median {np.median(costs[ok]) * 1e3:.3f} ms, max {costs[ok].max() * 1e3:.3f} ms")
    for rtol in (0.0, 0.05):
        accs = [evaluate_split(features, costs, args.train, seed, rtol) for seed in range(args.splits)]
        pairs = "all pairs" if rtol == 0 else f"pairs whose costs differ by more than {rtol:.0%}"
        print(f"pairwise accuracy on the held-out programs ({pairs}), trained on {args.train}: mean "
              f"{np.mean(accs):.3f}, min {np.min(accs):.3f} over {args.splits} splits {np.round(accs, 3).tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

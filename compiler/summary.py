"""What a module looks like after any pass: op counts, kernels (fused groups), layout transforms, FLOPs, pass times.

    mod, seconds = run_until(module, after="propagate_layout", layout="NCHWc")
    print(format_summary(summarize(mod, seconds)))

`summarize` is a pure function of the graph (plus the pass times it is given); it works on a graph at any stage:
before fusion there are no kernels yet, after it every op lives in exactly one primitive function (one kernel).
"""
from __future__ import annotations

from collections import Counter

from relayish import Call, Constant, Function, IRModule, Tuple, TupleGetItem, Var, get_op
from relayish.expr import Expr, post_order

from .codegen import vector_width as codegen_vector_width
from .passes import PASS_NAMES, PassContext, run_pipeline

IMPORT = "import"  # the pseudo-pass name that stops before every pass: the graph as imported


def run_until(mod: IRModule, after: str | None = None, layout: str = "NCHWc", opt_level: int = 3,
              vector_width: int | None = None, winograd: bool = True) -> tuple[IRModule, dict]:
    """Run the pipeline up to and including pass `after` (None: all of it; "import": none).

    Returns (module, seconds): seconds maps the name of every pass up to `after`, in pipeline order, to its
    time in seconds, or to None when the opt level skipped it."""
    if after is not None and after != IMPORT and after not in PASS_NAMES:
        raise ValueError(f"unknown pass {after!r}; passes are {IMPORT}, {', '.join(PASS_NAMES)}")
    if after == IMPORT:
        return mod, {}
    if vector_width is None:
        vector_width = codegen_vector_width()
    ctx = PassContext(opt_level=opt_level, layout=layout, vector_width=vector_width, winograd=winograd)
    timings: dict[str, float] = {}
    mod = run_pipeline(mod, ctx, stop_after=after, timings=timings)
    names = PASS_NAMES if after is None else PASS_NAMES[:PASS_NAMES.index(after) + 1]
    return mod, {name: timings.get(name) for name in names}


# ---------------------------------------------------------------------------------------------- summary

def op_flops(call: Call) -> float:
    """The registry's FLOPs of one op call (one per output element when the op declares none), as tasks count."""
    opdef = get_op(call.op)
    if opdef.flops is None:
        return float(call.type.size)
    return float(opdef.flops([a.type for a in call.args], call.attrs, call.type))


def _is_kernel(node) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Function)


def _output_op(fn: Function) -> str:
    """The op that computes a primitive function's result (its body's root)."""
    body = fn.body
    while isinstance(body, TupleGetItem):
        body = body.tuple_value
    if isinstance(body, Tuple):
        return "tuple"
    return body.op if isinstance(body, Call) and isinstance(body.op, str) else type(body).__name__


class _Walker:
    """One pass over a module's graph, entering primitive functions, collecting ops, kernels and transforms."""

    def __init__(self):
        self.ops: Counter = Counter()
        self.flops = 0.0
        self.kernels: list[dict] = []
        self.transforms: list[dict] = []
        self.kernel_index: dict[int, int] = {}  # id(primitive call) -> kernel number

    def describe(self, value: Expr, params: dict) -> str:
        """What a value is, for a reader: an op, a graph input, a constant, or a kernel's output."""
        if isinstance(value, Var):
            return params[id(value)] if id(value) in params else f"input %{value.name}"
        if isinstance(value, Constant):
            return "constant"
        if isinstance(value, TupleGetItem):
            return f"{self.describe(value.tuple_value, params)}.{value.index}"
        if isinstance(value, Tuple):
            return "tuple"
        if _is_kernel(value):
            return f"{_output_op(value.op)} (kernel {self.kernel_index[id(value)]})"
        return value.op

    def walk(self, body: Expr, params: dict, kernel: int | None):
        for node in post_order(body):
            if _is_kernel(node):
                self.enter_kernel(node, params)
            elif isinstance(node, Call):
                self.ops[node.op] += 1
                self.flops += op_flops(node)
                if node.op == "layout_transform":
                    self.transforms.append({
                        "src": node.attrs.src_layout, "dst": node.attrs.dst_layout,
                        "reads": self.describe(node.args[0], params), "shape": list(node.type.shape),
                        "kernel": kernel})

    def enter_kernel(self, call: Call, params: dict):
        k = self.kernel_index[id(call)] = len(self.kernels)
        fn = call.op
        inner = {id(p): self.describe(a, params) for p, a in zip(fn.params, call.args)}
        before = self.flops
        ops = [n.op for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, str)]
        self.walk(fn.body, inner, k)
        self.kernels.append({"ops": ops, "output_shape": list(call.type.shape) if hasattr(call.type, "shape")
                             else None, "flops": self.flops - before})


def summarize(module: IRModule, pass_seconds: dict | None = None) -> dict:
    """A summary of the graph, as plain data:

      ops: {op name: count} over the whole graph, primitive functions included;
      flops: the sum of every op's registry FLOPs;
      fused: whether the graph is made of primitive-function calls (kernels);
      kernels: per primitive call in execution order {ops, output_shape, flops} ([] when not fused);
      layout_transforms: per layout_transform op {src, dst, reads, shape, kernel}: `reads` says what its input is
        ("nn.conv2d_nchwc", "input %x", "constant", or "nn.global_avg_pool2d (kernel 23)" across kernels), and
        kernel is the number of the kernel holding it (None before fusion);
      pass_seconds: {pass name: seconds or None (skipped)}, as given.
    """
    w = _Walker()
    w.walk(module.main.body, {}, None)
    return {"ops": dict(w.ops.most_common()), "flops": w.flops, "fused": bool(w.kernels), "kernels": w.kernels,
            "layout_transforms": w.transforms, "pass_seconds": dict(pass_seconds or {})}


# ---------------------------------------------------------------------------------------------- text

def _flops_text(flops: float) -> str:
    for unit, scale in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOP"


def format_summary(summary: dict) -> str:
    """The summary as text: op counts, kernels with their ops, layout transforms, total FLOPs, pass times."""
    ops = summary["ops"]
    lines = [f"ops: {sum(ops.values())} calls of {len(ops)} ops"]
    lines += [f"  {name:<24} {count:>5}" for name, count in ops.items()]
    kernels = summary["kernels"]
    if summary["fused"]:
        lines.append(f"kernels (fused groups): {len(kernels)}")
        width = max(len(", ".join(k["ops"])) for k in kernels)
        for i, k in enumerate(kernels):
            shape = "(" + ", ".join(map(str, k["output_shape"])) + ")" if k["output_shape"] is not None else "tuple"
            lines.append(f"  {i:>3}  {', '.join(k['ops']):<{width}}  {shape:<24} {_flops_text(k['flops'])}")
    else:
        lines.append("kernels (fused groups): none yet (the graph is fused by the 'fuse' pass)")
    transforms = summary["layout_transforms"]
    lines.append(f"layout transforms: {len(transforms)}")
    same = Counter((t["src"], t["dst"], t["reads"], t["kernel"]) for t in transforms)  # first-seen order
    for (src, dst, reads, kernel), n in same.items():
        where = f"  in kernel {kernel}" if kernel is not None else ""
        lines.append(f"  {src} -> {dst}  reads {reads}{where}" + (f"  (x{n})" if n > 1 else ""))
    lines.append(f"total: {_flops_text(summary['flops'])}")
    seconds = summary["pass_seconds"]
    if seconds:
        lines.append("passes (ms):")
        width = max(map(len, seconds))
        for name, s in seconds.items():
            lines.append(f"  {name:<{width}}  " + ("skipped (opt level)" if s is None else f"{s * 1e3:8.2f}"))
    return "\n".join(lines)


"""Property-based tests of the graph passes and the compiler on RANDOM graphs (hypothesis).

A graph is drawn op by op from the supported ops: conv2d (random kernel, strides, pads, dilation, groups, with or
without a bias), relu, add/multiply/subtract/maximum with a broadcast constant (scalar, per channel, along W, along
H and W) or of two values (diamonds, shared inputs), batch_norm, max/avg pooling, global pooling, concatenate and
reshape, on inputs of batch 1 or 2. Each op reads a value already in the graph (usually the newest), so values are
shared and branches meet. Weights and inputs come from a seeded numpy generator: hypothesis shrinks the structure,
not the numbers.

(a) The numpy interpreter gives the same result after every pass of the pipeline as before it, and the fused
    kernels respect the group limits (max_fused_ops, one anchor op).
(b) The compiled module matches the interpreter, in both layouts: max|a-b| / max|ref| <= 1e-4.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import build
from compiler.summary import summarize
from compiler.passes import PASS_NAMES, PassContext, run_pipeline
from relayish import (Constant, Function, IRModule, OpError, Pattern, TensorType, Tuple, Var, call, free_vars,
                      get_op)
from relayish.interp import evaluate

TOL = 1e-4
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class RandomGraph:
    """A drawn graph and its inputs; prints as the graph's text (what a shrunk failure should show)."""

    def __init__(self, module: IRModule, inputs: dict):
        self.module, self.inputs = module, inputs

    def __repr__(self):
        shapes = ", ".join(f"{k}: {v.shape}" for k, v in self.inputs.items())
        return f"RandomGraph(inputs {shapes}):\n{self.module.astext(show_types=False)}"


class _Builder:
    """The graph under construction: a pool of values (Vars and Calls), weights from a seeded generator."""

    def __init__(self, draw, seed: int):
        self.draw = draw
        self.rng = np.random.default_rng(seed)
        self.params: list[Var] = []
        self.pool: list = []

    def weight(self, *shape, scale=1.0) -> Constant:
        return Constant((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def pick(self, predicate=lambda v: True):
        """A value of the pool, the newest one more often than not (deep graphs), or None if none qualifies."""
        choices = [v for v in self.pool if predicate(v)]
        if not choices:
            return None
        newest = self.draw(st.booleans())
        return choices[-1] if newest else choices[self.draw(st.integers(0, len(choices) - 1))]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _conv(b: _Builder, x):
    _, c, h, w = x.type.shape
    k = b.draw(st.sampled_from([1, 3]))
    groups = b.draw(st.sampled_from([1, 1, c] + _divisors(c)))
    out = groups * b.draw(st.sampled_from([1, 2])) if groups > 1 else b.draw(st.sampled_from([4, 6, 8, 16]))
    strides = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    dilation = (b.draw(st.integers(1, 2)),) * 2 if k == 3 and min(h, w) >= 5 else (1, 1)
    padding = tuple(b.draw(st.integers(0, k - 1)) for _ in range(4))
    wt = b.weight(out, c // groups, k, k, scale=(c // groups * k * k) ** -0.5)
    y = call("nn.conv2d", x, wt, strides=strides, padding=padding, dilation=dilation, groups=groups)
    return call("add", y, b.weight(out, 1, 1)) if b.draw(st.booleans()) else y


def _constant_like(b: _Builder, x) -> Constant:
    _, c, h, w = x.type.shape
    shapes = [(), (c, 1, 1), (1, c, 1, 1), (w,), (h, w), (1, 1, h, 1), (1, 1, 1, 1), (1, 1, 1)]
    shape = b.draw(st.sampled_from(shapes))
    return b.weight(*shape)


BINARY = ["add", "multiply", "subtract", "maximum"]


def _binary_const(b, x):
    op = b.draw(st.sampled_from(BINARY))
    c = _constant_like(b, x)
    return call(op, x, c) if b.draw(st.booleans()) else call(op, c, x)


def _binary_values(b, x):
    other = b.pick(lambda v: v.type.shape == x.type.shape)  # may be x itself: a shared input
    return call(b.draw(st.sampled_from(BINARY)), x, other)


def _batch_norm(b, x):
    c = x.type.shape[1]
    var = Constant(b.rng.uniform(0.5, 2.0, c).astype(np.float32))
    return call("nn.batch_norm", x, b.weight(c), b.weight(c), b.weight(c), var)


def _pool(b, x):
    k = b.draw(st.integers(1, 3))
    attrs = dict(pool_size=(k, k), strides=(b.draw(st.integers(1, 2)),) * 2,
                 padding=tuple(b.draw(st.integers(0, k - 1)) for _ in range(4)), ceil_mode=b.draw(st.booleans()))
    if b.draw(st.booleans()):
        return call("nn.max_pool2d", x, **attrs)
    return call("nn.avg_pool2d", x, count_include_pad=b.draw(st.booleans()), **attrs)


def _concat(b, x):
    n, _, h, w = x.type.shape
    other = b.pick(lambda v: (v.type.shape[0], v.type.shape[2:]) == (n, (h, w)))
    return call("concatenate", x, other, axis=1)


def _reshape(b, x):
    # a reinterpretation that mixes channels with rows: no blocked layout may leak through it
    # (not of a reshape: two would merge into one, or vanish into an output that is an input, see
    # test_an_output_that_simplifies_to_an_input_compiles)
    if getattr(x, "op", None) == "reshape":
        return None
    n, c, h, w = x.type.shape
    shape = b.draw(st.sampled_from([(n, h, c, w), (n, c * h, w, 1), (n, 1, c * h, w)]))
    return call("reshape", x, newshape=shape) if shape != x.type.shape else None


OPS = {  # simplest first: hypothesis shrinks towards the first
    "relu": lambda b, x: call("nn.relu", x), "conv2d": _conv, "binary_const": _binary_const,
    "binary_values": _binary_values, "batch_norm": _batch_norm, "pool": _pool, "concat": _concat,
    "reshape": _reshape, "global_pool": lambda b, x: call("nn.global_avg_pool2d", x),
}
OP_CHOICES = ["relu", "conv2d", "conv2d", "conv2d", "binary_const", "binary_values", "binary_values", "batch_norm",
              "pool", "concat", "reshape", "global_pool"]  # convolutions (the layout pass's subject) more often


@st.composite
def graphs(draw, max_ops: int = 8):
    """A RandomGraph: 1-2 NCHW inputs, 2-max_ops ops (fewer if some do not fit); the outputs are the ops no op
    reads (so always op results, each once)."""
    b = _Builder(draw, draw(st.integers(0, 2 ** 31)))
    batch, channels = draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([3, 4, 8, 16]))
    h, w = draw(st.integers(4, 8)), draw(st.integers(4, 8))
    for i in range(draw(st.integers(1, 2))):
        b.params.append(Var(f"x{i}", TensorType((batch, channels, h, w))))
    b.pool = list(b.params)
    calls = []
    for _ in range(draw(st.integers(2, max_ops))):
        name = draw(st.sampled_from(OP_CHOICES))
        x = b.pick()
        try:
            y = OPS[name](b, x)
        except OpError:  # e.g. a window larger than the (padded) input: not a graph
            continue
        if y is not None:
            b.pool.append(y)
            calls.append(y)
    if not calls:
        calls.append(call("nn.relu", b.params[0]))
    # every value nothing reads is an output, so that no drawn op is dropped as dead code
    read = {id(a) for c in calls for a in c.args}
    outputs = [c for c in calls if id(c) not in read]
    body = outputs[0] if len(outputs) == 1 else Tuple(outputs)
    used = [p for p in b.params if p in free_vars(body)]  # Vars compare by identity
    mod = IRModule(Function(used, body))
    inputs = {p.name: b.rng.standard_normal(p.type.shape).astype(np.float32) for p in used}
    return RandomGraph(mod, inputs)


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    assert got.shape == ref.shape, f"shape {got.shape} vs reference {ref.shape}"
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
    return err / scale if scale > 0 else err


def assert_close(got: list, ref: list, what: str, mod: IRModule):
    assert len(got) == len(ref), f"{what}: {len(got)} outputs, reference {len(ref)}"
    for i, (a, r) in enumerate(zip(got, ref)):
        e = rel_error(a, r)
        assert e <= TOL, f"{what}: output {i} off by {e:.3g} (max|a-b|/max|ref|)\n{mod.astext(show_types=False)}"


# every graph goes through each of these (drawn contexts would mostly be the simplest one)
CONTEXTS = [PassContext(opt_level=3, layout="NCHWc", vector_width=16),
            PassContext(opt_level=2, layout="NCHWc", vector_width=4, max_fused_ops=3),
            PassContext(opt_level=3, layout="NCHW"),
            PassContext(opt_level=0, layout="NCHW")]


def assert_kernels_well_formed(fused: IRModule, ctx: PassContext, mod: IRModule):
    """At most max_fused_ops ops and one anchor (reduction, conv, pool, opaque op) per kernel; no layout transform
    unless the context asks for the blocked layout."""
    summary = summarize(fused)
    for k in summary["kernels"]:
        anchors = [op for op in k["ops"] if get_op(op).pattern >= Pattern.COMM_REDUCE]
        assert len(k["ops"]) <= ctx.max_fused_ops and len(anchors) <= 1, f"kernel {k['ops']} ({ctx})\n{mod}"
    if ctx.layout == "NCHW" or ctx.opt_level < 2:
        assert "layout_transform" not in summary["ops"], f"{ctx}\n{mod}"


@settings(max_examples=200, **SETTINGS)
@given(graphs())
def test_every_pass_preserves_the_interpreted_result(graph):
    mod, inputs = graph.module, graph.inputs
    ref = evaluate(mod, inputs)
    for ctx in CONTEXTS:
        for name in PASS_NAMES:
            after = run_pipeline(mod, ctx, stop_after=name)
            assert_close(evaluate(after, inputs), ref, f"after pass {name} ({ctx})", mod)
        assert_kernels_well_formed(after, ctx, mod)


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@settings(max_examples=40, **SETTINGS)
@given(graph=graphs(max_ops=6), opt_level=st.sampled_from([0, 3]))
def test_compiled_module_matches_the_interpreter(layout, graph, opt_level):
    mod, inputs = graph.module, graph.inputs
    ref = evaluate(mod, inputs)
    compiled = build(mod, layout=layout, opt_level=opt_level)
    got = compiled.run(None, inputs)
    assert_close(got, ref, f"compiled, layout {layout}, opt_level {opt_level}", mod)


def test_an_output_that_simplifies_to_an_input_compiles():
    # found by the property above: reshape there and back is dropped by eliminate_identity_ops, leaving %x as output
    x = Var("x", TensorType((1, 3, 4, 4)))
    mod = IRModule(Function([x], call("reshape", call("reshape", x, newshape=(1, 4, 3, 4)), newshape=(1, 3, 4, 4))))
    feed = {"x": np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)}
    np.testing.assert_array_equal(build(mod).run(None, feed)[0], feed["x"])

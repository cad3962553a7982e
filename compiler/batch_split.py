"""Whether a model computes each item of its batch on its own: then one module compiled for batch 1 serves any batch.

A model whose only free dim is the batch (dim 0 of every graph input, one symbol) runs item by item on its batch-1
module when every op of its graph keeps the items apart: the i-th item of every output depends only on the i-th
item of every input. compiler/dynamic.py uses this as the generic tier of a session with a free batch: a batch
size never seen runs at once, on the batch-1 kernels, with no compile.

The check is on the relayish graph imported at batch 2 (`batch_axis_of_outputs`): each value gets its batch axis
(None for a value computed from constants only), propagated through the ops by the rules below; an op that mixes
items (a reduction, softmax or concatenation over the batch axis, a reshape that splits or merges it, a matmul that
contracts it), or any op without a rule, makes the model not separable, and the reason names the op and its result. A
rule is only ever conservative: the worst outcome of a missing rule is a compile per batch size.
"""
from __future__ import annotations

import math

from relayish import Call, Constant, Var
from relayish.expr import Tuple, TupleGetItem, post_order
from relayish.op import Pattern, get_op

BATCH = 2  # the batch the graph is imported at for the check (1 would not tell the batch axis from others)

# ops with one batched data argument whose batch axis must be 0 (N of NCHW / NHWC) and stays 0; the other
# arguments (weights, scales) must not depend on the batch
_NCHW_OPS = ("nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d",
             "nn.lrn", "nn.batch_norm")
_ROW_OPS = ("nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.hardmax")  # normalize along attrs.axis
_REDUCE_OPS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "l1_norm", "l2_norm", "variance")


class NotSeparable(Exception):
    """Why a model's batch items are not computed apart (the op and its node)."""


def batch_axis_of_outputs(mod) -> tuple:
    """The batch axis of each output of `mod` (a relayish IRModule imported with batch BATCH at dim 0 of every
    graph input). Raises NotSeparable naming the first op that mixes the items, or that has no rule."""
    axes: dict[int, int | None] = {}
    for p in mod.main.params:
        if not p.type.shape or p.type.shape[0] != BATCH:
            raise NotSeparable(f"input {p.name!r} has shape {p.type.shape}: no batch of {BATCH} at dim 0")
        axes[id(p)] = 0
    for node in post_order(mod.main.body):
        if isinstance(node, Var):
            continue
        if isinstance(node, Constant):
            axes[id(node)] = None
        elif isinstance(node, Tuple):
            axes[id(node)] = tuple(axes[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            axes[id(node)] = axes[id(node.tuple_value)][node.index]
        elif isinstance(node, Call) and isinstance(node.op, str):
            args = [axes[id(a)] for a in node.args]
            axes[id(node)] = None if all(a is None for a in args) else _rule(node, args)
        else:
            raise NotSeparable(f"{type(node).__name__} in the graph has no batch rule")
    out = axes[id(mod.main.body)]
    return out if isinstance(out, tuple) else (out,)


def _mixes(node: Call, why: str):
    raise NotSeparable(f"{node.op} (giving {node.type}) {why}")


def _rule(node: Call, args: list) -> int:
    """The batch axis of node's result from its arguments' (None: not batched; at least one is batched)."""
    op, attrs, out = node.op, node.attrs, node.type
    if any(isinstance(a, tuple) for a in args) or not hasattr(out, "shape"):
        _mixes(node, "takes or gives a tuple")
    pattern = get_op(op).pattern
    if pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and op not in _NCHW_OPS:
        return _broadcast(node, args)
    if op in _NCHW_OPS:
        if args[0] != 0 or any(a is not None for a in args[1:]):
            _mixes(node, "reads its batch other than as the data's dim 0")
        return _kept(node, 0)
    if op in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
        return _matmul(node, args)
    if op in _ROW_OPS:
        a = _single(node, args)
        if attrs.axis % len(node.args[0].type.shape) == a:
            _mixes(node, "normalizes over the batch axis")
        return _kept(node, a)
    if op in _REDUCE_OPS:
        a = _single(node, args)
        rank = len(node.args[0].type.shape)
        reduced = set(range(rank)) if attrs.axes is None else {x % rank for x in attrs.axes}
        if a in reduced:
            _mixes(node, "reduces over the batch axis")
        return _kept(node, a if attrs.keepdims else a - sum(1 for x in reduced if x < a))
    if op == "transpose":
        a = _single(node, args)
        perm = list(attrs.axes) if attrs.axes is not None else list(range(len(node.args[0].type.shape)))[::-1]
        return _kept(node, perm.index(a))
    if op == "reshape":
        return _reshape(node, _single(node, args))
    if op == "concatenate":
        if len(set(args)) != 1:
            _mixes(node, "joins batched and unbatched values (or batches on different axes)")
        a = args[0]
        if attrs.axis % len(out.shape) == a:
            _mixes(node, "concatenates along the batch axis")
        return _kept(node, a)
    if op == "take":
        data, idx = args
        rank = len(node.args[0].type.shape)
        k = attrs.axis % rank
        if data is not None and idx is None and k != data:
            return _kept(node, data if data < k else data - 1 + len(node.args[1].type.shape))
        if data is None and idx is not None:  # a lookup table indexed by batched ids (an embedding)
            return _kept(node, k + idx)
        _mixes(node, "gathers along the batch axis")
    _mixes(node, "has no batch rule")


def _single(node: Call, args: list) -> int:
    if sum(a is not None for a in args) != 1 or args[0] is None:
        _mixes(node, "has batched arguments besides its data")
    return args[0]


def _kept(node: Call, axis: int) -> int:
    shape = node.type.shape
    if not 0 <= axis < len(shape) or shape[axis] != BATCH:
        _mixes(node, f"gives shape {shape}, whose axis {axis} is not the batch")
    return axis


def _broadcast(node: Call, args: list) -> int:
    """Elementwise with numpy broadcasting: every batched argument's axis lands on one output axis, where every
    unbatched argument has size 1 (or no dim)."""
    rank = len(node.type.shape)
    landed = {a + rank - len(arg.type.shape) for a, arg in zip(args, node.args) if a is not None}
    if len(landed) != 1:
        _mixes(node, "broadcasts batched arguments onto different axes")
    p = landed.pop()
    for a, arg in zip(args, node.args):
        shape = arg.type.shape
        at = p - (rank - len(shape))
        if a is None and 0 <= at < len(shape) and shape[at] != 1:
            _mixes(node, f"broadcasts an unbatched value of shape {shape} along the batch axis")
    return _kept(node, p)


def _matmul(node: Call, args: list) -> int:
    """a [.., M, K] x b [.., K, N] (dense: b is [N, K]): the batch may be a leading axis of either (not the
    contracted or the row/column axes), or an axis shared by both at the same leading position."""
    a, b = args
    ra, rb, r = len(node.args[0].type.shape), len(node.args[1].type.shape), len(node.type.shape)
    if node.op == "nn.dense":
        if b is not None or a is None or a == ra - 1:
            _mixes(node, "contracts the batch axis or multiplies by a batched weight")
        return _kept(node, a)
    landed = set()
    if a is not None:
        if a == ra - 1 or (ra >= 2 and a == ra - 2 and b is not None):
            _mixes(node, "contracts the batch axis")
        landed.add(a + r - ra)
    if b is not None:
        if b >= rb - 2:
            _mixes(node, "contracts the batch axis")
        landed.add(b + r - rb)
    if len(landed) != 1:
        _mixes(node, "multiplies values batched on different axes")
    return _kept(node, landed.pop())


def _reshape(node: Call, a: int) -> int:
    """The batch axis survives a reshape whole: the elements before it, and the axis itself, unchanged."""
    src, dst = node.args[0].type.shape, node.type.shape
    before = math.prod(src[:a])
    p = next((k for k in range(len(dst) + 1) if math.prod(dst[:k]) >= before), len(dst))
    if p >= len(dst) or math.prod(dst[:p]) != before or dst[p] != src[a]:
        _mixes(node, f"reshapes {src} to {dst}, splitting or merging the batch axis {a}")
    return _kept(node, p)

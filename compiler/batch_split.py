"""Whether a model computes each item of its batch on its own: then one module compiled for batch 1 serves any batch.

A model whose only free dim is the batch (dim 0 of every graph input, one symbol) runs item by item on its batch-1
module when every op of its graph keeps the items apart: the i-th item of every output depends only on the i-th
item of every input. compiler/dynamic.py uses this as the generic tier of a session with a free batch: a batch
size never seen runs at once, on the batch-1 kernels, with no compile.

The check is on the relayish graph imported at batch 2 (`batch_axis_of_outputs`): each value gets where its batch
is (None for a value computed from constants only): an axis, and the part of it the batch is. An axis may hold
the batch merged with other dims, the batch its outer factor or not (PyTorch's attention reshapes (T, B, E) to
(T, B x heads, E / heads): `Where(axis, inner)`, index = (outer x B + b) x inner + i). The rules below propagate
it through the ops; an op that mixes items (a reduction, softmax or concatenation over the batch's axis, a
reshape that splits the batch itself, a matmul that contracts it), or any op without a rule, makes the model not
separable, and the reason names the op and its result. A rule is only ever conservative: the worst outcome of a
missing rule is a compile per batch size.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from relayish import Call, Constant, Var
from relayish.expr import Tuple, TupleGetItem, post_order
from relayish.op import Pattern, get_op

BATCH = 2  # the batch the graph is imported at for the check (1 would not tell the batch axis from others)

# ops with one batched data argument whose batch axis must be 0 (N of NCHW / NHWC) and stays 0; the other
# arguments (weights, scales) must not depend on the batch
_NCHW_OPS = ("nn.conv2d", "qnn.conv2d", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d",
             "nn.lrn", "nn.batch_norm")
_ROW_OPS = ("nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.hardmax")  # normalize along attrs.axis
_CELL_OPS = ("nn.lstm_cell", "nn.gru_cell", "nn.rnn_cell")  # relayish/ops/recurrent.py: one time step
_REDUCE_OPS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "l1_norm", "l2_norm", "variance")


class NotSeparable(Exception):
    """Why a model's batch items are not computed apart (the op and its result)."""


class Where(NamedTuple):
    """The batch's place in a value: along `axis`, whose index is (outer x BATCH + b) x inner + i."""
    axis: int
    inner: int = 1


def batch_axis_of_outputs(mod, item=None) -> tuple:
    """The batch axis of each output of `mod` (a relayish IRModule imported with batch BATCH at dim 0 of every
    graph input): the items' outputs joined along it are the batch's (the batch may be merged with the dims after
    it, as a detector's export flattens [N, anchors] into one axis, but not with dims before it). Raises
    NotSeparable naming the first op that mixes the items, or that has no rule, or an output whose batch is
    inside another dim. item: the same model imported at batch 1, whose outputs must then be one item's part of
    each output (an export that bakes batch 1 into a reshape can spread the items over other dims too)."""
    where: dict = {}
    for p in mod.main.params:
        if not p.type.shape or p.type.shape[0] != BATCH:
            raise NotSeparable(f"input {p.name!r} has shape {p.type.shape}: no batch of {BATCH} at dim 0")
        where[id(p)] = Where(0)
    for node in post_order(mod.main.body):
        if isinstance(node, Var):
            continue
        if isinstance(node, Constant):
            where[id(node)] = None
        elif isinstance(node, Tuple):
            where[id(node)] = tuple(where[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            where[id(node)] = where[id(node.tuple_value)][node.index]
        elif isinstance(node, Call) and isinstance(node.op, str):
            args = [where[id(a)] for a in node.args]
            where[id(node)] = None if all(a is None for a in args) else _rule(node, args)
        else:
            raise NotSeparable(f"{type(node).__name__} in the graph has no batch rule")
    out = where[id(mod.main.body)]
    outs = out if type(out) is tuple else (out,)
    values = _output_values(mod)
    result = []
    for w, v in zip(outs, values):
        # joining the items' outputs along the axis gives index b x inner + i: the batch must be its outer factor
        if w is None or v.type.shape[w.axis] != BATCH * w.inner:
            raise NotSeparable(f"an output of shape {v.type.shape} " + ("does not depend on the batch" if w is None
                                                                        else "holds the batch inside another dim"))
        result.append(w.axis)
    if item is not None:
        for axis, v, one in zip(result, values, _output_values(item)):
            part = v.type.shape[:axis] + (v.type.shape[axis] // BATCH,) + v.type.shape[axis + 1:]
            if tuple(one.type.shape) != tuple(part):
                raise NotSeparable(f"an output of shape {v.type.shape} at batch {BATCH} is not {BATCH} of its "
                                   f"batch-1 shape {one.type.shape} joined along axis {axis}")
    return tuple(result)


def _output_values(mod) -> tuple:
    return mod.main.body.fields if isinstance(mod.main.body, Tuple) else (mod.main.body,)


def _mixes(node: Call, why: str):
    raise NotSeparable(f"{node.op} (giving {node.type}) {why}")


def _rule(node: Call, args: list) -> Where:
    """Where the batch is in node's result from where it is in its arguments (None: not batched; at least one
    is batched)."""
    op, attrs, out = node.op, node.attrs, node.type
    if any(type(a) is tuple for a in args) or not hasattr(out, "shape"):
        _mixes(node, "takes or gives a tuple")
    pattern = get_op(op).pattern
    if pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and op not in _NCHW_OPS:
        return _broadcast(node, args)
    if op in _NCHW_OPS:
        if args[0] != Where(0) or node.args[0].type.shape[0] != BATCH or any(a is not None for a in args[1:]):
            _mixes(node, "reads its batch other than as the data's dim 0")
        return _kept(node, Where(0))
    if op in ("nn.dense", "nn.matmul", "nn.batch_matmul", "qnn.matmul"):
        return _matmul(node, args)
    if op in _ROW_OPS:
        w = _single(node, args)
        if attrs.axis % len(node.args[0].type.shape) == w.axis:
            _mixes(node, "normalizes along the batch's axis")
        return _kept(node, w)
    if op in _REDUCE_OPS:
        w = _single(node, args)
        rank = len(node.args[0].type.shape)
        reduced = set(range(rank)) if attrs.axes is None else {x % rank for x in attrs.axes}
        if w.axis in reduced:
            _mixes(node, "reduces along the batch's axis")
        return _kept(node, w if attrs.keepdims else w._replace(axis=w.axis - sum(1 for x in reduced if x < w.axis)))
    if op == "transpose":
        w = _single(node, args)
        perm = list(attrs.axes) if attrs.axes is not None else list(range(len(node.args[0].type.shape)))[::-1]
        return _kept(node, w._replace(axis=perm.index(w.axis)))
    if op == "reshape":
        return _reshape(node, _single(node, args))
    if op == "concatenate":
        if len(set(args)) != 1:
            _mixes(node, "joins batched and unbatched values (or batches in different places)")
        if attrs.axis % len(out.shape) == args[0].axis:
            _mixes(node, "concatenates along the batch's axis")
        return _kept(node, args[0])
    if op in _CELL_OPS:  # xp [T x B, ...] (row t x B + b), steps, state [1, D, S, B, H], weights (, bias)
        xp, steps, state = args[:3]
        if xp not in (None, Where(0)) or state not in (None, Where(3)) or steps is not None or \
                any(a is not None for a in args[3:]):
            _mixes(node, "reads its batch other than in the input projection's rows and the state's batch axis")
        if attrs.get("quantize_state"):
            _mixes(node, "quantizes its state over the range of every batch item")
        return _kept(node, Where(3))
    if op == "nn.recurrent_output":  # the history [T, D, S, B, H] -> [T, D, B, H] or [B, T, D, H]
        if _single(node, args) != Where(3):
            _mixes(node, "reads a history batched other than along its batch axis")
        return _kept(node, Where(0) if attrs.batch_major else Where(2))
    if op == "strided_slice":  # any slice of the other axes; the batch's axis whole
        from relayish.ops.tensor import slice_ranges
        w = _single(node, args)
        shape = node.args[0].type.shape
        if slice_ranges(shape, attrs.begin, attrs.end, attrs.strides, attrs.axes)[w.axis] != (0, 1, shape[w.axis]):
            _mixes(node, "slices the batch's axis")
        return _kept(node, w)
    if op == "resize":  # resizes other axes; the batch's one kept as it is (scale 1, no crop)
        w = _single(node, args)
        if w.inner != 1 or node.type.shape[w.axis] != node.args[0].type.shape[w.axis] or \
                float(attrs.scales[w.axis]) != 1.0 or attrs.coordinate_transformation_mode == "tf_crop_and_resize":
            _mixes(node, "resizes the batch's axis")
        return _kept(node, w)
    if op == "take":
        data, idx = args
        rank = len(node.args[0].type.shape)
        k = attrs.axis % rank
        if data is not None and idx is None and k != data.axis:
            return _kept(node, data if data.axis < k else
                         data._replace(axis=data.axis - 1 + len(node.args[1].type.shape)))
        if data is None and idx is not None:  # a lookup table indexed by batched ids (an embedding)
            return _kept(node, idx._replace(axis=k + idx.axis))
        _mixes(node, "gathers along the batch's axis")
    _mixes(node, "has no batch rule")


def _single(node: Call, args: list) -> Where:
    if sum(a is not None for a in args) != 1 or args[0] is None:
        _mixes(node, "has batched arguments besides its data")
    return args[0]


def _kept(node: Call, w: Where) -> Where:
    shape = node.type.shape
    if not 0 <= w.axis < len(shape) or shape[w.axis] % (BATCH * w.inner):
        _mixes(node, f"gives shape {shape}, whose axis {w.axis} does not hold the batch")
    return w


def _broadcast(node: Call, args: list) -> Where:
    """Elementwise with numpy broadcasting: every batched argument's batch lands on one output axis, where every
    unbatched argument has size 1 (or no dim)."""
    rank = len(node.type.shape)
    landed = {Where(w.axis + rank - len(arg.type.shape), w.inner) for w, arg in zip(args, node.args) if w is not None}
    if len(landed) != 1:
        _mixes(node, "broadcasts batched arguments onto different places")
    w = landed.pop()
    for a, arg in zip(args, node.args):
        shape = arg.type.shape
        at = w.axis - (rank - len(shape))
        if a is None and 0 <= at < len(shape) and shape[at] != 1:
            _mixes(node, f"broadcasts an unbatched value of shape {shape} along the batch's axis")
        if a is not None and shape[at] != node.type.shape[w.axis]:
            _mixes(node, f"broadcasts a batched value of shape {shape} along the batch's axis")
    return _kept(node, w)


def _matmul(node: Call, args: list) -> Where:
    """a [.., M, K] x b [.., K, N] (dense: b is [N, K]): the batch may be in a leading axis of either, or in a's
    rows (M), never in a contracted axis; batched in both, it must be in the same leading axis."""
    a, b = args
    ra, rb, r = len(node.args[0].type.shape), len(node.args[1].type.shape), len(node.type.shape)
    if node.op == "nn.dense":
        if b is not None or a is None or a.axis == ra - 1:
            _mixes(node, "contracts the batch's axis or multiplies by a batched weight")
        return _kept(node, a)
    landed = set()
    if a is not None:
        if a.axis == ra - 1 or (ra >= 2 and a.axis == ra - 2 and b is not None):
            _mixes(node, "contracts the batch's axis")
        landed.add(a._replace(axis=a.axis + r - ra))
    if b is not None:
        if b.axis >= rb - 2:
            _mixes(node, "contracts the batch's axis")
        landed.add(b._replace(axis=b.axis + r - rb))
    if len(landed) != 1:
        _mixes(node, "multiplies values batched in different places")
    return _kept(node, landed.pop())


def _reshape(node: Call, w: Where) -> Where:
    """The batch survives a reshape that keeps it a whole factor of one axis: in row-major order its elements sit
    `stride` apart (the stride of its axis times its inner part), and some output axis must hold the range
    [stride, stride x BATCH) of strides whole."""
    src, dst = node.args[0].type.shape, node.type.shape
    stride = w.inner * math.prod(src[w.axis + 1:])
    for p in range(len(dst)):
        below = math.prod(dst[p + 1:])  # the stride of output axis p
        if stride % below == 0 and (stride * BATCH) <= below * dst[p] and (below * dst[p]) % (stride * BATCH) == 0:
            return _kept(node, Where(p, stride // below))
    _mixes(node, f"reshapes {src} to {dst}, splitting the batch (axis {w.axis}, inner {w.inner})")

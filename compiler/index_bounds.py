"""Which graph inputs are used as indices, and the range their values must lie in.

Compiled `take` clamps an index out of range (no read ever leaves the table: relayish/ops/tensor.py); an index
that comes from the caller is checked before native code runs instead, as onnxruntime's Gather does it: the
metadata of each such input carries `index_bounds` [lo, hi) and runtime/feeds.py refuses a value outside them.
Indices computed inside the graph stay clamped (documented in the op's table entry).

One computed index is recognised: `where(equal(ids, c), k, ids)` with constants c and k (k in range), the labels of
a loss whose ignore_index c is replaced by a harmless k before the gather: ids may hold c besides [lo, hi), and its
metadata says so with `index_ignored` c.
"""
from __future__ import annotations

from relayish import Call, Constant, IRModule, Var
from relayish.expr import post_order

# ops that move index values without changing them: an input reaching a take through these is its index
_VALUE_PRESERVING = ("reshape", "transpose", "broadcast_to", "strided_slice", "copy", "concatenate")


_NOT_SEEN = object()


def input_index_bounds(mod: IRModule) -> dict[str, tuple[int, int]]:
    """Graph input name -> (lo, hi): its values index an axis of a take, and must satisfy lo <= v < hi (the
    intersection over every take it reaches; negative values count from the end, as in ONNX Gather)."""
    return {name: (lo, hi) for name, (lo, hi, _) in input_index_ranges(mod).items()}


def input_index_ranges(mod: IRModule) -> dict[str, tuple[int, int, int | None]]:
    """Graph input name -> (lo, hi, ignored): as input_index_bounds, and `ignored` a value also allowed (a loss's
    ignore_index, replaced before the take; None if there is none, or if some take sees the input unmasked)."""
    bounds: dict[str, tuple[int, int, object]] = {}
    for node in post_order(mod.main.body):
        if isinstance(node, Call) and node.op == "take":
            extent = node.args[0].type.shape[node.attrs.axis]
            for var, ignored in _sources(node.args[1], extent):
                lo, hi, seen = bounds.get(var.name, (-extent, extent, _NOT_SEEN))
                kept = ignored if seen is _NOT_SEEN or seen == ignored else None
                bounds[var.name] = (max(lo, -extent), min(hi, extent), kept)
    return {name: (lo, hi, None if ignored is _NOT_SEEN else ignored) for name, (lo, hi, ignored) in bounds.items()}


def _sources(expr, extent: int) -> list[tuple[Var, int | None]]:
    """The graph inputs whose values `expr` holds unchanged (through value-preserving ops), each with the value
    replaced on the way by an in-range constant (where(equal(ids, c), k, ids)), or None."""
    if isinstance(expr, Var):
        return [(expr, None)]
    if isinstance(expr, Call) and expr.op in _VALUE_PRESERVING:
        return [s for a in expr.args for s in _sources(a, extent)]
    ignored = _replaced_value(expr, extent)
    if ignored is not None:
        return [(var, ignored) for var, inner in _sources(expr.args[2], extent) if inner is None]
    return []


def _replaced_value(expr, extent: int) -> int | None:
    """c if expr is where(equal(ids, c), k, ids) with scalar constants c and -extent <= k < extent, else None."""
    if not (isinstance(expr, Call) and expr.op == "where"):
        return None
    cond, then, other = expr.args
    if not (isinstance(cond, Call) and cond.op == "equal" and cond.args[0] is other):
        return None
    c = cond.args[1]
    if not (isinstance(c, Constant) and c.data.size == 1 and isinstance(then, Constant) and then.data.size == 1):
        return None
    k = int(then.data.reshape(()))
    return int(c.data.reshape(())) if -extent <= k < extent else None

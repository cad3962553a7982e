"""Which graph inputs are used as indices, and the range their values must lie in.

Compiled `take` clamps an index out of range (no read ever leaves the table: relayish/ops/tensor.py), as do
gather_elements and gather_nd; scatters write nothing for it (relayish/ops/movement.py). An index
that comes from the caller is checked before native code runs instead, as onnxruntime's Gather does it: the
metadata of each such input carries `index_bounds` [lo, hi) and runtime/feeds.py refuses a value outside them.
Indices computed inside the graph stay clamped (documented in the op's table entry).

One computed index is seen through: `where(equal(ids, c), k, ids)` with scalar constants c and k, the labels of a
loss whose ignore_index c is replaced by a harmless k before the gather (frontends/onnx/ops/nn.py). Its values
are bounded as those of ids, and ids may hold c besides: `input_index_ignored` names c, the metadata carries it as
`index_ignored` and runtime/feeds.py lets it through.
"""
from __future__ import annotations

from relayish import Call, Constant, IRModule, Var
from relayish.expr import post_order

# ops that move index values without changing them: an input reaching a take through these is its index
_VALUE_PRESERVING = ("reshape", "transpose", "broadcast_to", "strided_slice", "copy", "concatenate")


def _nd_extent(data_shape, first: int, index_shape) -> tuple[int, ...]:
    """The index tuples of gather_nd / scatter_nd address dims first..first+k of data: one extent per position
    of the indices' last axis."""
    return tuple(data_shape[first:first + index_shape[-1]])


# op -> (which argument holds indices, the extent of the axis they index, or one extent per position of their
# last axis) of a call
_INDEX_ARGS = {
    "take": lambda node: (1, node.args[0].type.shape[node.attrs.axis]),
    "gather_elements": lambda node: (1, node.args[0].type.shape[node.attrs.axis]),
    "scatter_elements": lambda node: (1, node.args[0].type.shape[node.attrs.axis]),
    "gather_nd": lambda node: (1, _nd_extent(node.args[0].type.shape, node.attrs.batch_dims,
                                             node.args[1].type.shape)),
    "scatter_nd": lambda node: (1, _nd_extent(node.args[0].type.shape, 0, node.args[1].type.shape)),
}


def _intersect(a, b):
    """Two bounds, each (lo, hi) or one (lo, hi) per position of the last axis: values must satisfy both."""
    if isinstance(a[0], tuple) or isinstance(b[0], tuple):
        n = len(a) if isinstance(a[0], tuple) else len(b)
        a = a if isinstance(a[0], tuple) else (a,) * n
        b = b if isinstance(b[0], tuple) else (b,) * n
        if len(a) != len(b):  # two index-tuple uses of different lengths cannot both hold: keep the narrowest
            lo, hi = max(x[0] for x in a + b), min(x[1] for x in a + b)
            return (lo, hi)
        return tuple(_intersect(x, y) for x, y in zip(a, b))
    return (max(a[0], b[0]), min(a[1], b[1]))


def input_index_bounds(mod: IRModule) -> dict[str, tuple]:
    """Graph input name -> (lo, hi): its values index an axis of a take (or another op of _INDEX_ARGS), and must
    satisfy lo <= v < hi (the intersection over every such op it reaches; negative values count from the end, as
    in ONNX Gather). An input that is itself the index tuples of a gather_nd / scatter_nd gets one (lo, hi) per
    position of its last axis instead."""
    bounds: dict[str, tuple[int, int]] = {}
    for node in post_order(mod.main.body):
        if isinstance(node, Call) and node.op in _INDEX_ARGS:
            arg, extent = _INDEX_ARGS[node.op](node)
            index = node.args[arg]
            if not _sources(index):  # computed indices (clamped): no input to check
                continue
            if isinstance(extent, tuple) and not isinstance(index, Var):  # its last axis may not be the input's:
                extent = min(extent)  # one bound for every value, the narrowest
            new = tuple((-e, e) for e in extent) if isinstance(extent, tuple) else (-extent, extent)
            for var in _sources(index):
                bounds[var.name] = _intersect(bounds[var.name], new) if var.name in bounds else new
    return bounds


def _sources(expr) -> list[Var]:
    """The graph inputs whose values `expr` holds unchanged (through value-preserving ops)."""
    if isinstance(expr, Var):
        return [expr]
    if isinstance(expr, Call) and expr.op in _VALUE_PRESERVING:
        return [v for a in expr.args for v in _sources(a)]
    if _masked_value(expr) is not None:  # the masked value never reaches the gather
        return _sources(expr.args[2])
    return []


def input_index_ignored(mod: IRModule) -> dict[str, int]:
    """Graph input name -> c: every gather its values index reaches them through where(equal(ids, c), k, ids), so
    that ids may hold c besides the values input_index_bounds allows (a loss's ignore_index)."""
    masks: dict[str, set] = {}
    for node in post_order(mod.main.body):
        if isinstance(node, Call) and node.op == "take":
            for var, c in _masked_sources(node.args[1]):
                masks.setdefault(var.name, set()).add(c)
    return {name: next(iter(cs)) for name, cs in masks.items() if len(cs) == 1 and None not in cs}


def _masked_sources(expr, mask: int | None = None) -> list[tuple[Var, int | None]]:
    """_sources, each graph input with the value masked on its way (None if it is not)."""
    if isinstance(expr, Var):
        return [(expr, mask)]
    if isinstance(expr, Call) and expr.op in _VALUE_PRESERVING:
        return [s for a in expr.args for s in _masked_sources(a, mask)]
    c = _masked_value(expr)
    if c is not None and mask is None:
        return _masked_sources(expr.args[2], c)
    return []


def _masked_value(expr) -> int | None:
    """c if expr is where(equal(ids, c), k, ids) with scalar constants c and k, else None."""
    if not (isinstance(expr, Call) and expr.op == "where"):
        return None
    cond, then, ids = expr.args
    if not (isinstance(cond, Call) and cond.op == "equal" and cond.args[0] is ids):
        return None
    c = cond.args[1]
    if isinstance(c, Constant) and c.data.size == 1 and isinstance(then, Constant) and then.data.size == 1:
        return int(c.data.reshape(()))
    return None

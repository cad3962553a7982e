"""Which graph inputs are used as indices, and the range their values must lie in.

Compiled `take` clamps an index out of range (no read ever leaves the table: relayish/ops/tensor.py), as do
gather_elements and gather_nd; scatters write nothing for it (relayish/ops/movement.py). An index
that comes from the caller is checked before native code runs instead, as onnxruntime's Gather does it: the
metadata of each such input carries `index_bounds` [lo, hi) and runtime/feeds.py refuses a value outside them.
Indices computed inside the graph stay clamped (documented in the op's table entry).
"""
from __future__ import annotations

from relayish import Call, IRModule, Var
from relayish.expr import post_order

# ops that move index values without changing them: an input reaching a take through these is its index
_VALUE_PRESERVING = ("reshape", "transpose", "broadcast_to", "strided_slice", "copy", "concatenate")


def _nd_extent(data_shape, first: int, index_shape) -> int:
    """The index tuples of gather_nd / scatter_nd address dims first..first+k of data: one bound for all of them
    (the smallest; a value valid for a larger dim only is refused, as the bounds are one range per input)."""
    return min(data_shape[first:first + index_shape[-1]])


# op -> (which argument holds indices, the extent of the axis they index) of a call
_INDEX_ARGS = {
    "take": lambda node: (1, node.args[0].type.shape[node.attrs.axis]),
    "gather_elements": lambda node: (1, node.args[0].type.shape[node.attrs.axis]),
    "scatter_elements": lambda node: (1, node.args[0].type.shape[node.attrs.axis]),
    "gather_nd": lambda node: (1, _nd_extent(node.args[0].type.shape, node.attrs.batch_dims,
                                             node.args[1].type.shape)),
    "scatter_nd": lambda node: (1, _nd_extent(node.args[0].type.shape, 0, node.args[1].type.shape)),
}


def input_index_bounds(mod: IRModule) -> dict[str, tuple[int, int]]:
    """Graph input name -> (lo, hi): its values index an axis of a take (or another op of _INDEX_ARGS), and must
    satisfy lo <= v < hi (the intersection over every such op it reaches; negative values count from the end, as
    in ONNX Gather)."""
    bounds: dict[str, tuple[int, int]] = {}
    for node in post_order(mod.main.body):
        if isinstance(node, Call) and node.op in _INDEX_ARGS:
            arg, extent = _INDEX_ARGS[node.op](node)
            for var in _sources(node.args[arg]):
                lo, hi = bounds.get(var.name, (-extent, extent))
                bounds[var.name] = (max(lo, -extent), min(hi, extent))
    return bounds


def _sources(expr) -> list[Var]:
    """The graph inputs whose values `expr` holds unchanged (through value-preserving ops)."""
    if isinstance(expr, Var):
        return [expr]
    if isinstance(expr, Call) and expr.op in _VALUE_PRESERVING:
        return [v for a in expr.args for v in _sources(a)]
    return []

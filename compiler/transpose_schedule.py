"""Transposing copies: a stage that writes its last axis contiguously while reading it with a stride (a layout
transform NCHW16c -> NCHW or back, a Transpose, an unpad of channels) gets a square register tile.

    out[.., u, .., v] = in[.. u + S * v ..]     (v: the stage's last axis; u: an axis the read walks with stride 1)

is tiled L x L: u split by L and unrolled, v split by L and vectorized, innermost. Codegen recognizes that nest
(compiler/codegen/transpose.py): it loads L contiguous vectors along u, transposes them in registers and stores
L contiguous vectors along v, instead of gathering every element by a scalar load (the NCHW16c -> NCHW transform of
a (487, 47, 47) result ran at 3 cycles an element so, as long as the 1x1 convolution that wrote it).

`transpose_tile` finds (u, v, L) on the stage as the schedule sees it (reads through inlined stages composed);
`tile_loops` gives the splits that make the tile. default_schedule's root rule applies them, and the tuner's
annotation of simple root stages (tuning/annotate.py) may.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

from relayish import te

from .arith import coefficient, simplify
from .schedule import Split

TRANSPOSE_LANES = (16, 8, 4)  # the tile's side: the widest that both axes fill and the target's vectors hold


class TransposeTile(NamedTuple):
    u: str  # the axis the read walks contiguously: split by lanes, its inner part unrolled
    v: str  # the stage's last axis (written contiguously): split by lanes, its inner part vectorized
    lanes: int
    period: int = 0  # u is first split by this (a group's channels: the read is contiguous within a group only)


def transpose_tile(state, st, vector_width: int) -> TransposeTile | None:
    """The tile of a root stage without reduction whose body is one read (a copy) that walks the last axis v with
    a stride other than 0 and 1 and some other axis u with stride 1 (the innermost such u), both at least `lanes`
    long; None otherwise. Strides are of the read's row-major flat index once u and v are split by lanes (so that
    a blocked layout's c // 16, c % 16 become the outer and inner parts), over the whole tiles."""
    op = st.op
    if op.reduce_axes or len(op.axes) < 2 or st.leaves != st.roots:
        return None
    read = _single_read(state, op)
    if read is None:
        return None
    tensor, indices = read
    axes = list(op.axes)
    v = axes[-1]
    for lanes in (n for n in TRANSPOSE_LANES if n <= vector_width):
        if v.extent < lanes:
            continue
        for u in reversed(axes[:-1]):
            if u.extent < lanes:
                continue
            for period in [0] + _periods(indices, u, lanes):
                if _strides(tensor, tuple(indices), u, v, lanes, period) is not None:
                    return TransposeTile(_name(st, u), _name(st, v), lanes, period)
    return None


def _periods(indices, u: te.IterVar, lanes: int) -> list[int]:
    """Divisors d of u in the read's indices (u // d: the unpadding of channel groups of d, whose padded
    positions are contiguous within a group only), at least `lanes`, below u's extent."""
    found = {n.b.value for i in indices for n in te.walk(i) if isinstance(n, te.BinOp) and n.op == "//"
             and isinstance(n.b, te.IntImm) and u.var in set(te.walk(n.a))}
    return sorted(d for d in found if lanes <= d < u.extent and u.extent % d == 0)


def _name(st, axis: te.IterVar) -> str:
    return st.roots[list(st.op.axes).index(axis)].name


@functools.lru_cache(maxsize=4096)
def _strides(tensor, indices: tuple, u: te.IterVar, v: te.IterVar, lanes: int, period: int = 0):
    """(1, S) with S the stride of v's inner part (not 0, not 1; None if not affine) when the read walks u's inner
    part with stride 1; else None. Remembered (a pure function of its arguments, which hash by identity, the
    indices structurally): the tuner's annotation asks it of every program it draws for a copy stage, the same
    few questions thousands of times (simplifying the flat index took a third of a template-free zero-shot)."""
    uo, ui, vo, vi, ug = te.Var("uo"), te.Var("ui"), te.Var("vo"), te.Var("vi"), te.Var("ug")
    mapping = {u.var: uo * lanes + ui, v.var: vo * lanes + vi if v.extent > lanes else vi}
    ranges = {uo: u.extent // lanes, ui: lanes, vo: v.extent // lanes, vi: lanes}  # the whole tiles (a partial
    # last one is a separate version of the nest, lower.py tail_version, and keeps its lane-by-lane copy)
    if period:  # u = group * period + tile * lanes + lane
        mapping[u.var] = ug * period + uo * lanes + ui
        ranges.update({ug: u.extent // period, uo: period // lanes})
    flat, stride = te.IntImm(0), 1
    for index, size in reversed(list(zip(indices, tensor.shape))):
        flat = flat + te.substitute_vars(index, mapping) * stride
        stride *= size
    flat = simplify(flat, ranges)
    su, sv = coefficient(flat, ui), coefficient(flat, vi)
    return (su, sv) if su == 1 and sv not in (0, 1) else None  # (sv None: v reaches the read through a clamp)


def _single_read(state, op: te.ComputeOp):
    """(tensor, indices) when op's body is a single tensor read, composed through reads of inlined stages that
    are single reads too (unpad_channels of a layout transform), or a read or a constant chosen by a condition
    (pad_channels' zeros), or an elementwise function of one read and constants (the quantization of a model's
    float input on its way to NCHW4c: codegen/transpose.py computes it on the rows it loads); None otherwise."""
    body, mapping = op.body, None
    while True:
        if isinstance(body, te.Select) and isinstance(body.false_value, (te.FloatImm, te.IntImm)):
            body = body.true_value  # (the condition picks a constant instead: codegen loads nothing there)
        if not isinstance(body, te.TensorRead):  # a computation: of one read of a stage that is not inlined?
            read = _the_read_of(_expanded(state, te.substitute_vars(body, mapping) if mapping else body))
            return None if read is None else (read.tensor, list(read.indices))
        indices = [te.substitute_vars(i, mapping) if mapping else i for i in body.indices]
        producer = state.stage_of(body.tensor)
        if producer is None or not producer.loc.is_inline or producer.op.reduce_axes:
            return body.tensor, indices
        mapping = {ax.var: i for ax, i in zip(producer.op.axes, indices)}
        body = producer.op.body


def _expanded(state, body: te.PrimExpr) -> te.PrimExpr:
    """body with every read of an inlined stage (no reduction) replaced by that stage's body, recursively."""
    def expand(node):
        if not isinstance(node, te.TensorRead):
            return None
        producer = state.stage_of(node.tensor)
        if producer is None or not producer.loc.is_inline or producer.op.reduce_axes:
            return None
        inner = te.substitute_vars(producer.op.body, {ax.var: i for ax, i in zip(producer.op.axes, node.indices)})
        return _expanded(state, inner)
    return te.substitute(body, expand)


def _the_read_of(body: te.PrimExpr) -> te.TensorRead | None:
    """The one tensor read of an elementwise body (the same read wherever it occurs: a NaN guard reads its value
    twice) whose other leaves are constants, else None."""
    reads, others, stack = {}, False, [body]
    while stack:
        node = stack.pop()
        if isinstance(node, te.TensorRead):  # (its indices are the read's business)
            reads[(id(node.tensor), tuple(str(i) for i in node.indices))] = node
        elif isinstance(node, (te.Var, te.IterVar, te.Reduce)):
            others = True
        else:
            stack.extend(te.expr_children(node))
    if len(reads) != 1 or others:
        return None
    return next(iter(reads.values()))


def tile_loops(st, tile: TransposeTile, spatial: list) -> tuple[list, list, list]:
    """(the Split steps, the stage's spatial loops with each split axis's outer part in its place and the tile's
    loops taken out, [u's inner loop, v's inner loop]): u and v are split by the lanes where they are longer."""
    steps, inner = [], []
    extents = st.leaf_extents()
    group_tiles = None
    if tile.period:  # u's groups outside, each group's channels in tiles (the last one partial), the tiles of a
        # group innermost of the outer loops: a loop of its own, whose whole tiles lowering simplifies the index
        # over (compiler/lower.py _resimplified), not a part of the parallel loop
        steps.append(Split(st.name, tile.u, (tile.period,)))
        spatial = [f"{tile.u}.0" if n == tile.u else n for n in spatial] + [f"{tile.u}.1"]
        extents = {**extents, f"{tile.u}.1": tile.period}
        tile = tile._replace(u=f"{tile.u}.1")
        group_tiles = f"{tile.u}.0"
    for name in (tile.u, tile.v):
        if extents[name] > tile.lanes:
            steps.append(Split(st.name, name, (tile.lanes,)))
            spatial = [f"{name}.0" if n == name else n for n in spatial]
            inner.append(f"{name}.1")
        else:
            spatial = [n for n in spatial if n != name]
            inner.append(name)
    if group_tiles in spatial:
        spatial = [n for n in spatial if n != group_tiles] + [group_tiles]
    return steps, spatial, inner

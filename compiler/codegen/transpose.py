"""In-register transposes of copy tiles (compiler/transpose_schedule.py makes them):

    for u in range(n) unroll:                          n in TILE_SIDES; one Store of one Load, same dtype
      [if cond_u(u):]                                  (a partial tile's guards, from lower.py's tail versions)
        for v in range(n) vectorize:
          [if cond_v(v):]
            out[a + v + p * u] = in[b + u + S * v]     (store: stride 1 in v; load: stride 1 in u, S not 0 or 1)
                           [or select(pick(v), in[..], c)]   (pad_channels: c = 0 where v is a padded channel)

Emitted lane by lane, the load is a gather of n scalar loads per vector. Instead the n rows in[b + S * v .. + n]
(contiguous in u) are loaded as n vectors, transposed by log2(n) rounds of two-source shuffles (each round swaps
one bit of the row index with that bit of the lane index), and stored as the n vectors out[a + p * u .. + n]:
2n memory operations and n log2(n) shuffles for n^2 elements instead of n^2 scalar loads and inserts. Guards
become masks: a row loads only the lanes (u) that cond_u keeps, and only if cond_v keeps its v; a column stores
only the lanes (v) that cond_v keeps, and only if cond_u keeps its u (masked loads and stores touch nothing
elsewhere); a row that cond_v drops or the select does not pick loads nothing (a branch) and is the constant.
Any dtype: the elements are moved, never converted.
"""
from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

from relayish.te import BinOp, FloatImm, IntImm, PrimExpr, Select, Var, expr_children

from ..arith import coefficient, variables
from ..loopir import For, IfThenElse, Load, Store
from .analysis import walk_expr
from .cgutils import nbytes
from .dtypes import memory_type

TILE_SIDES = (4, 8, 16)
I1, I32 = ir.IntType(1), ir.IntType(32)


class Tile(NamedTuple):
    u: For  # the unrolled loop
    v: For  # the vectorized loop
    store: Store
    load: Load
    cond_u: PrimExpr | None  # the guard between them (depends on u only)
    cond_v: PrimExpr | None  # the guard around the store (depends on v, not on u)
    pick: PrimExpr | None = None  # the stored value is select(pick, load, other): pick depends on v, not on u
    other: PrimExpr | None = None  # (a constant: pad_channels' zeros)
    compute: PrimExpr | None = None  # the stored value is compute(load) (None: the load itself)


def _guarded(stmt):
    """(condition, body) of an if without else, or (None, stmt)."""
    if isinstance(stmt, IfThenElse) and stmt.else_case is None:
        return stmt.cond, stmt.then_case
    return None, stmt


def transposable(loop: For) -> Tile | None:
    """The tile when `loop` (an unrolled loop) is one; else None."""
    cond_u, inner = _guarded(loop.body)
    if not (isinstance(loop.extent, IntImm) and loop.extent.value in TILE_SIDES and isinstance(inner, For)
            and inner.kind == "vectorize" and isinstance(inner.extent, IntImm)
            and inner.extent.value == loop.extent.value):
        return None
    cond_v, store = _guarded(inner.body)
    if not isinstance(store, Store):
        return None
    value, pick, other = store.value, None, None
    if isinstance(value, Select) and isinstance(value.false_value, (FloatImm, IntImm)):
        value, pick, other = value.true_value, value.cond, value.false_value
        if isinstance(value, Load):  # the arm's clamp (lower.py _guard_select_loads) keeps an unpicked load in
            value = Load(value.buffer, _unclamped(value.index, value.buffer.size))  # bounds: none is emitted
    compute = None
    if not isinstance(value, Load):  # an elementwise function of one load (a quantization): computed on the rows
        load = _the_load(value)
        if load is None:
            return None
        compute, value = value, Load(load.buffer, _unclamped(load.index, load.buffer.size))
    elif value.buffer.dtype != store.buffer.dtype:
        return None
    load, u, v = value, loop.var, inner.var
    if any(c is not None and u in variables(c) for c in (cond_v, pick)):
        return None
    if coefficient(store.index, v) != 1 or coefficient(load.index, u) != 1 or coefficient(store.index, u) is None:
        return None
    if coefficient(load.index, v) in (0, 1):  # (None: v reaches the load through a clamp; rows load one by one)
        return None
    return Tile(loop, inner, store, load, cond_u, cond_v, pick, other, compute)


def _the_load(value: PrimExpr) -> Load | None:
    """The one load of an elementwise expression (the same buffer and index wherever it occurs; lowering clamps
    it in a select's arm) whose other leaves are constants; None otherwise."""
    loads, stack = {}, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Load):
            loads[(node.buffer.name, str(_unclamped(node.index, node.buffer.size)))] = node
        elif isinstance(node, Var):
            return None
        else:
            stack.extend(expr_children(node))
    return next(iter(loads.values())) if len(loads) == 1 else None


def _computed(em, tile: Tile, row, n: int):
    """tile.compute on a row loaded as it is (its loads are the row: em's shared values by node), in the store's
    memory type."""
    if tile.compute is None:
        return row
    value = em.from_memory(row, tile.load.buffer)
    loads = [e for e in walk_expr(tile.compute, unique=True) if isinstance(e, Load)]
    saved = em.lanes, em.vec_var, em.lets, em._shared
    em.lanes, em.vec_var, em.lets, em._shared = n, tile.u.var, {}, {id(e): (e, value) for e in loads}
    try:
        out = em.expr(tile.compute)
    finally:
        em.lanes, em.vec_var, em.lets, em._shared = saved
    return em.to_memory(out if isinstance(out.type, ir.VectorType) else _splat(em.b, out, n), tile.store.buffer)


def _unclamped(index, size: int):
    """e for max(0, min(e, size - 1)), else the index as it is."""
    if isinstance(index, BinOp) and index.op == "max" and isinstance(index.a, IntImm) and index.a.value == 0 and \
            isinstance(index.b, BinOp) and index.b.op == "min" and isinstance(index.b.b, IntImm) and \
            index.b.b.value == size - 1:
        return index.b.a
    return index


def transpose_vectors(b: ir.IRBuilder, rows: list) -> list:
    """The columns of the square matrix whose rows are the n vectors `rows`."""
    n = len(rows)
    rows = list(rows)
    s = n // 2
    while s:
        low = ir.Constant(ir.VectorType(I32, n), [(n + j - s) if j & s else j for j in range(n)])
        high = ir.Constant(ir.VectorType(I32, n), [(n + j) if j & s else (j + s) for j in range(n)])
        for i in (i for i in range(n) if not i & s):
            a, c = rows[i], rows[i + s]
            rows[i], rows[i + s] = b.shuffle_vector(a, c, low), b.shuffle_vector(a, c, high)
        s //= 2
    return rows


def emit_transpose(em, tile: Tile) -> None:
    """Emit `tile` with em, a codegen.llvm function emitter outside any vector body."""
    n = tile.u.extent.value
    u, v = tile.u.var, tile.v.var
    u0, v0 = em.expr(tile.u.start), em.expr(tile.v.start)
    vty = ir.VectorType(memory_type(tile.store.buffer.dtype), n)  # the rows as computed, the columns stored
    in_ty = ir.VectorType(memory_type(tile.load.buffer.dtype), n)  # the rows as loaded
    align, in_align = nbytes(vty.element), nbytes(in_ty.element)  # (kernel parameters: aligned to their element)
    mask_u, mask_v = _lane_mask(em, tile.cond_u, u, u0, n), _lane_mask(em, tile.cond_v, v, v0, n)

    def bind(du: int, dv: int):
        em.env[u] = em.b.add(u0, I32(du), flags=("nsw",)) if du else u0
        em.env[v] = em.b.add(v0, I32(dv), flags=("nsw",)) if dv else v0

    def pointer(access, ty=vty):
        return em.b.bitcast(em.addr(em.buffer_ptr(access.buffer), em.expr(access.index)), ty.as_pointer())

    pick = _lane_mask(em, tile.pick, v, v0, n)  # a row that select(pick, load, other) does not pick: other
    other = em.to_memory(em.expr(tile.other), tile.store.buffer) if tile.other is not None else None
    fill = _splat(em.b, other, n) if other is not None else ir.Constant(vty, None)
    rows = []
    for j in range(n):  # row j: in[b + S * j + (0 .. n-1)], the lanes along u
        needed = [em.b.extract_element(m, I32(j)) for m in (mask_v, pick) if m is not None]
        rows.append(_row(em, lambda: (bind(0, j), pointer(tile.load, in_ty))[1], in_ty, in_align, mask_u, fill,
                         em.b.and_(*needed) if len(needed) == 2 else needed[0] if needed else None,
                         lambda row: _computed(em, tile, row, n)))
    for e, column in enumerate(transpose_vectors(em.b, rows)):  # column e: out[a + p * e + (0 .. n-1)]
        def store(e=e, column=column):
            bind(e, 0)
            if mask_v is None:
                em.b.store(column, pointer(tile.store), align=align)
            else:
                em.b.call(em.masked_intrinsic("store", vty), [column, pointer(tile.store), I32(align), mask_v])
        if mask_u is None:
            store()
        else:  # a column past the tile's end stores nothing (and computes no address: see _row)
            with em.b.if_then(em.b.extract_element(mask_u, I32(e))):
                store()
    del em.env[u], em.env[v]


def _row(em, address, vty, align: int, lanes, fill, needed, computed=lambda row: row):
    """One row: loaded as vty (its lanes masked by `lanes` if given) from address() and computed(row), emitted
    where it is loaded, or `fill` (of computed's type) where `needed` (an i1, None: always) is false. A row that is not needed issues no load at all: its
    address may lie far past the buffer (v past the tile's end, a padded channel), and a masked load there cost
    a microcode assist per row on a Zen 4 (an average pool's padding transform ran 80 us instead of 9)."""
    def load():
        if lanes is None:
            return computed(em.b.load(address(), align=align))
        passthrough = fill if fill.type == vty else ir.Constant(vty, None)
        return computed(em.b.call(em.masked_intrinsic("load", vty), [address(), I32(align), lanes, passthrough]))
    if needed is None:
        return load()
    start = em.b.block
    then = em.b.append_basic_block("row")
    merge = em.b.append_basic_block("row_done")
    em.b.cbranch(needed, then, merge)
    em.b.position_at_end(then)
    value = load()
    loaded = em.b.block
    em.b.branch(merge)
    em.b.position_at_end(merge)
    row = em.b.phi(fill.type)
    row.add_incoming(value, loaded)
    row.add_incoming(fill, start)
    return row


def _lane_mask(em, cond, var, start, n: int):
    """<n x i1>: cond at var = start + lane (None for no condition)."""
    if cond is None:
        return None
    em.env[var] = em.b.add(_splat(em.b, start, n), ir.Constant(ir.VectorType(I32, n), list(range(n))),
                           flags=("nsw",))
    em.lanes, em.vec_var, em.lets = n, var, {}
    try:
        value = em.as_bool(em.expr(cond))
    finally:
        em.lanes, em.vec_var, em.lets = None, None, {}
        del em.env[var]
    return value if isinstance(value.type, ir.VectorType) else _splat(em.b, value, n)


def _splat(b: ir.IRBuilder, value, n: int):
    vec = b.insert_element(ir.Constant(ir.VectorType(value.type, n), None), value, I32(0))
    return b.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(I32, n), [0] * n))

"""Flattened copies: an elementwise stage whose last axes every read walks contiguously (as one row-major run of
memory) runs them as one axis, vectorized in whole vectors.

A Tanh over (1, 768, 23, 23) vectorized along its last axis alone ran vectors of 23 lanes (LLVM splits them into
16 + 4 + 2 + 1) and was 1.9x onnxruntime's time; the same data as 768 x 529 or as one run of 406,272 elements is
whole vectors but for one masked tail. `flat_tail` says how many trailing axes fuse so; default_schedule's root
rule fuses them when the last axis is short (at most 64) and not a whole number of vectors, or when the rows are
too few for its parallel loop (which would otherwise divide each vector's index by the row length), in
`flat_lane`'s vectors; the tuner's simple-root annotation may too (tuning/annotate.py).
"""
from __future__ import annotations

from relayish import te

from .arith import coefficient, simplify


def inlined_reads(state, op: te.ComputeOp) -> list[tuple]:
    """(tensor, indices) of every tensor op's body reads, reads of inlined stages replaced by their own reads
    (indices composed); None entries where a read cannot be composed (an inlined reduction)."""
    body = op.body.body if isinstance(op.body, te.Reduce) else op.body
    out = []

    def visit(expr, mapping):
        for r in (n for n in te.walk(expr) if isinstance(n, te.TensorRead)):
            indices = [te.substitute_vars(i, mapping) if mapping else i for i in r.indices]
            producer = state.stage_of(r.tensor)
            if producer is not None and producer.loc.is_inline:
                if producer.op.reduce_axes:
                    out.append(None)
                    continue
                visit(producer.op.body, {ax.var: i for ax, i in zip(producer.op.axes, indices)})
            else:
                out.append((r.tensor, indices))
    visit(body, None)
    return out


def flat_index(tensor: te.Tensor, indices) -> te.PrimExpr:
    """The row-major element offset of tensor[indices]."""
    flat, stride = te.IntImm(0), 1
    for index, size in reversed(list(zip(indices, tensor.shape))):
        flat = flat + index * stride
        stride *= size
    return flat


def flat_tail(state, st) -> int:
    """How many of the stage's trailing axes (at least 1) every read walks as one contiguous run (or not at all: a
    broadcast), in row-major order: fused into one axis f (each axis an // and % of f), each read's flat offset
    steps by 1 or 0 per step of f. Only for a stage without reduction whose loops are its axes as they are."""
    op = st.op
    if op.reduce_axes or st.leaves != st.roots or len(op.axes) < 2:
        return 1
    reads = inlined_reads(state, op)
    if not reads or any(r is None for r in reads):
        return 1
    best = 1
    for count in range(2, len(op.axes) + 1):
        if not _fuses(reads, op.axes[-count:]):
            break
        best = count
    return best


def _fuses(reads, axes) -> bool:
    f = te.Var("f")
    extent, mapping, stride = 1, {}, 1
    for ax in reversed(axes):
        extent *= ax.extent
    for ax in reversed(axes):  # f = ((a0 * e1 + a1) * e2 + a2) ...: a_k = f // (e_{k+1} ...) % e_k
        mapping[ax.var] = (f // stride) % ax.extent if stride * ax.extent < extent else f // stride
        stride *= ax.extent
    # the range f has once split into vectors with a partial last one (what lowering's simplifier sees): a unit
    # axis's f // extent is 0 only below the extent, so it must not count on that
    ranges = {f: -(-extent // 64) * 64}
    for tensor, indices in reads:
        flat = simplify(flat_index(tensor, [te.substitute_vars(i, mapping) for i in indices]), ranges)
        if coefficient(flat, f) not in (0, 1):
            return False
    return True


def flat_lane(shape, vector_width: int) -> int:
    """The vector of a run of `shape`'s elements: all of them when at most a vector, else a whole vector (the last
    one masked where it does not divide: one partial vector in a long run)."""
    extent = 1
    for n in shape:
        extent *= n
    return min(extent, vector_width)

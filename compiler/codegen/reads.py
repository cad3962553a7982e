"""The reading half of the kernel emitter: vector reads of buffers, from one contiguous load to a gather.
llvm.py's _FunctionEmitter subclasses ReadEmitter (itself an addressing.AddressEmitter) and provides the state used
here besides the address emitter's: `k` (the kernel: coefficients of the lanes' variable), `lanes` and `mask` (the
vector body's width and its tail's lanes, or None), `lets`, and the methods `buffer_ptr`, `from_memory` and
`masked_intrinsic`.

A Load in a vector body is read by its index's coefficient in the lanes' variable: 0, one scalar load for every
lane; 1, one vector load (masked in a tail); 2, two loads and a shuffle (every_other); else a gather. A padded
window's read (a select of a clamped load, as lowering writes a padded convolution's or pool's taps) is
padded_read's: a plain vector load in the rows' interior and masked loads at their borders.
"""
from __future__ import annotations

from llvmlite import ir

from relayish import te

from ..arith import coefficient, implies_limits, unclamped
from ..loopir import Load
from .addressing import AddressEmitter
from .cgutils import is_vector, nbytes, splat
from .dtypes import memory_type

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)


class ReadEmitter(AddressEmitter):
    """Reads of buffers in scalar and vector bodies (see the module docstring for what a subclass provides)."""

    def every_other(self, ptr, start, vty: ir.VectorType):
        """Lanes start, start + 2, ..., start + 2 (N - 1) of ptr (a stride-2 row, as a schedule that vectorizes the
        columns of an NCHW strided convolution reads it): two contiguous loads, of [start, start + N) and of
        [start + N - 1, start + 2N - 1), which end at the last lane's element (never past it), and one shuffle of
        their even and odd positions (vpermt2ps on AVX-512), instead of N scalar loads and inserts."""
        low = self.vector_load(ptr, start, vty)
        high = self.vector_load(ptr, self.b.add(start, ir.Constant(start.type, vty.count - 1)), vty)
        return self.even_lanes(low, high)

    def vector_load(self, ptr, start, vty: ir.VectorType):
        """Elements [start, start + N) of ptr as one vector (element-aligned)."""
        return self.b.load(self.b.bitcast(self.addr(ptr, start), vty.as_pointer()), align=nbytes(vty.element))

    def even_lanes(self, low, high):
        """The even positions of low's elements [0, N) and high's [N - 1, 2N - 1) (high starts at low's last
        element): lane i is element 2i of their span."""
        n = low.type.count
        picks = [2 * i for i in range(n // 2)] + [n + 2 * i - (n - 1) for i in range(n // 2, n)]
        return self.b.shuffle_vector(low, high, ir.Constant(ir.VectorType(I32, n), picks))

    def padded_read(self, e: te.Select):
        """select(cond, x[index], other) in a vector body where index clamps a lane-dependent value c into the
        tensor and is affine in the lanes (stride 1 or 2) without its clamps: a padded window's read, x[min(max(2
        * l + rx - 1, 0), W - 1)] where 1 <= 2 * l + rx <= W. Three versions, chosen per vector:
        - no clamp bites at the first or the last lane (c is affine: at none): the unclamped index's plain vector
          load (two and a shuffle at stride 2), the rows' interior;
        - else, where no lane that cond selects is clamped: masked loads of the elements whose c is in range (c
          moves one per element), the rest `other`: no lane reads outside the tensor, the rows' borders;
        - else (an edge value repeated, not padding): the clamped elements, lane by lane; a version compiled only
          where cond does not imply the clamps' limits (arith.implies_limits). Its mere test and branch made a
          20-column max pool's kernel 7x slower.
        In a tail, the lanes past its mask read nothing but in the first version, where every lane's element is in
        the tensor. The values the emitter shares (which must dominate their uses) are computed before the
        branches; the border's masks are built in their block from those, the edge's index with a memo of its
        own."""
        load = e.true_value
        if not self.lanes or not isinstance(load, Load) or load.buffer.dtype == "bool" \
                or self.k.coefficient(load.index, self.vec_var, self.lets) is not None:
            return None
        stripped, limits = unclamped(load.index, self.vec_var)
        step = coefficient(stripped, self.vec_var, self.lets)
        slopes = [coefficient(x, self.vec_var, self.lets) for x, _, _ in limits]
        if not limits or step not in (1, 2) or any(slope != step for slope in slopes):
            return None
        n, b = self.lanes, self.b
        cond = splat(b, self.as_bool(self.expr(e.cond)), n)
        if self.mask is not None:
            cond = b.and_(cond, self.mask)
        other = self.expr(e.false_value)
        start = self.lane0_index(stripped)
        firsts = [self.lane0_index(x) for x, _, _ in limits]  # c at lane 0 of each limit (c moves `step` a lane)
        ity = firsts[0].type
        whole = ir.Constant(I1, 1)  # no clamp bites at the first or the last lane
        for (x, bound, is_lower), first in zip(limits, firsts):
            last = b.add(first, ir.Constant(ity, step * (n - 1)))
            for value in (first, last):
                whole = b.and_(whole, b.icmp_signed(">=" if is_lower else "<=", value, ir.Constant(ity, bound)))
        # A clamp of the whole index into the buffer (lowering's, where a tile's lanes may run past a row's end)
        # decides the interior version above; in the border's, an element whose coordinates are inside their
        # axes' clamps and whose lane is active is inside the buffer, and a selected lane that only it would
        # clamp reads outside the tensor, not an edge. Its vector tests made 1 of 3 taps of a 23-column max pool
        # 3x slower there (LLVM no longer unswitched the window's loop on them).
        if len(limits) > 1:
            kept = [k for k, lim in enumerate(limits) if not (lim[0] is stripped and lim[1] == (
                0 if lim[2] else load.buffer.size - 1))]
            if kept:
                limits, firsts = [limits[k] for k in kept], [firsts[k] for k in kept]
        edge_case = not implies_limits(e.cond, limits)  # (a padding guard implies its clamps: never an edge)
        ptr = self.buffer_ptr(load.buffer)
        vty = ir.VectorType(memory_type(load.buffer.dtype), n)
        results = []
        interior = b.append_basic_block("padded.interior")
        border = b.append_basic_block("padded.border")
        edge = b.append_basic_block("padded.edge") if edge_case else None
        merge = b.append_basic_block("padded.merge")
        pick = b.append_basic_block("padded.pick") if edge_case else border
        b.cbranch(whole, interior, pick)
        # in the border's versions only (the interior skips this work): per element of the loads (c of element j is
        # c(lane 0) + j) and per lane, inside every limit
        b.position_at_end(pick)
        span = n * step  # (2N: a power of two of lanes, where the loads need 2N - 1)
        iota = ir.Constant(ir.VectorType(ity, span), list(range(span)))
        elements = ir.Constant(ir.VectorType(I1, span), [1] * span)
        lanes = ir.Constant(ir.VectorType(I1, n), [1] * n)
        for (x, bound, is_lower), first in zip(limits, firsts):
            op = ">=" if is_lower else "<="
            at = b.add(splat(b, first, span), iota)
            elements = b.and_(elements, b.icmp_signed(op, at, ir.Constant(at.type, [bound] * span)))
            if edge_case:
                lane_c = b.shuffle_vector(at, at, ir.Constant(ir.VectorType(I32, n), [step * i for i in range(n)]))
                lanes = b.and_(lanes, b.icmp_signed(op, lane_c, ir.Constant(lane_c.type, [bound] * n)))
        if self.mask is not None:  # elements of no active lane are not read either
            active = b.shuffle_vector(self.mask, ir.Constant(self.mask.type, [0] * n), ir.Constant(
                ir.VectorType(I32, span), [j // step if j % step == 0 else min(j // step + 1, n - 1)
                                           for j in range(span)]))
            elements = b.and_(elements, active)
        if edge_case:
            clamped = b.and_(cond, b.not_(lanes))
            any_clamped = b.icmp_unsigned("!=", b.bitcast(clamped, ir.IntType(n)), ir.Constant(ir.IntType(n), 0))
            b.cbranch(any_clamped, edge, border)
        b.position_at_end(interior)
        results.append((self.every_other(ptr, start, vty) if step == 2 else self.vector_load(ptr, start, vty),
                        b.block))
        b.branch(merge)
        b.position_at_end(border)
        results.append((self.masked_span(ptr, start, vty, elements, step), b.block))
        b.branch(merge)
        if edge_case:  # the clamped index is computed here, where it is needed: every vector paid for it (a
            b.position_at_end(edge)  # 16 + 7 column max pool ran 2.3x slower), with values of this block only
            shared, self._shared = self._shared, {}
            try:
                index = splat(b, self.expr(load.index), n)
            finally:
                self._shared = shared
            if self.mask is not None:  # (lane 0 is in every tail; its element is always there)
                index = b.select(self.mask, index, splat(b, b.extract_element(index, I32(0)), n))
            results.append((self.gather(ptr, index, vty), b.block))
            b.branch(merge)
        b.position_at_end(merge)
        raw = b.phi(vty)
        for value, block in results:
            raw.add_incoming(value, block)
        t, f = self.unify(self.from_memory(raw, load.buffer), other, load.dtype, e.false_value.dtype)
        return b.select(cond, t, splat(b, f, n))

    def masked_span(self, ptr, start, vty: ir.VectorType, elements, step: int):
        """Lane i holds element start + step * i, read only where `elements` (<span x i1>, span = N at step 1,
        2N at step 2: the elements from start on) says so, undefined elsewhere: one masked load at step 1;
        at step 2, every_other's two loads, of elements [0, N) and [N - 1, 2N - 1), each masked."""
        n, load = vty.count, self.masked_intrinsic("load", vty)
        undef, align = ir.Constant(vty, ir.Undefined), I32(nbytes(vty.element))
        span = elements.type.count

        def masked(offset):
            mask = elements if span == n else self.b.shuffle_vector(elements, elements, ir.Constant(
                ir.VectorType(I32, n), list(range(offset, offset + n))))
            at = self.b.add(start, ir.Constant(start.type, offset)) if offset else start
            return self.b.call(load, [self.b.bitcast(self.addr(ptr, at), vty.as_pointer()), align, mask, undef])

        return masked(0) if step == 1 else self.even_lanes(masked(0), masked(n - 1))

    def load(self, e: Load):
        ptr = self.buffer_ptr(e.buffer)
        if not self.lanes:
            return self.from_memory(self.b.load(self.index_addr(ptr, e.index)), e.buffer)
        coeff = self.k.coefficient(e.index, self.vec_var, self.lets)
        if coeff == 0:  # one address (lane 0's) for every lane
            return self.from_memory(self.b.load(self.index_addr(ptr, e.index, lane0=True)), e.buffer)
        elem = memory_type(e.buffer.dtype)
        vty = ir.VectorType(elem, self.lanes)
        if coeff == 1:  # contiguous, from lane 0's address: one vector load
            vptr = self.b.bitcast(self.index_addr(ptr, e.index, lane0=True), vty.as_pointer())
            if self.mask is not None and e.buffer.scope != "local":  # the lanes past a tail read nothing (they may
                # lie past the buffer's end; a local buffer's slack holds them: LOCAL_SLACK)
                return self.from_memory(self.b.call(self.masked_intrinsic("load", vty), [
                    vptr, I32(nbytes(elem)), self.mask, ir.Constant(vty, None)]), e.buffer)
            return self.from_memory(self.b.load(vptr, align=nbytes(elem)), e.buffer)
        if coeff == 2 and self.mask is None and self.lanes >= 4:
            return self.from_memory(self.every_other(ptr, self.lane0_index(e.index), vty), e.buffer)
        index = self.expr(e.index)
        if not is_vector(index):
            return self.from_memory(self.b.load(self.addr(ptr, index)), e.buffer)
        if self.mask is not None:  # a masked-off lane reads element 0 (always there) instead of its own index
            index = self.b.select(self.mask, index, ir.Constant(index.type, None))
        return self.from_memory(self.gather(ptr, index, vty), e.buffer)

    def gather(self, ptr, index, vty: ir.VectorType):
        """Lane i reads element index[i]: one llvm.masked.gather of the lanes' addresses (a vector GEP), every lane
        on. LLVM emits a gather instruction where the CPU's is fast (AVX-512: vgatherdps) and scalar loads where it
        is not, after its IR passes in either case. Emitted as scalar loads inserted lane by lane, a candidate's
        unrolled gathers (a softmax reading 32 lanes 16 apart, 2,000 inserts) kept LLVM's SLP vectorizer 2 s on one
        build (2.7 -> 0.2 s; bench.build_rate's set 25.2 -> 22.0 s of LLVM time), and the models whose kernels
        gather (ShuffleNet's channel shuffles and blocked concatenations, PP-OCRv6 rec, ddddocr) ran as fast or
        faster (Zen 4)."""
        n = vty.count
        wide = self.b.sext(index, ir.VectorType(I64, n)) if index.type.element.width < 64 else index
        addresses = _VectorGep(self.b.block, ir.VectorType(vty.element.as_pointer(), n), "getelementptr",
                               [ptr, wide])
        self.b._insert(addresses)
        every_lane = ir.Constant(ir.VectorType(I1, n), [1] * n)
        return self.b.call(self.masked_intrinsic("gather", vty), [addresses, I32(nbytes(vty.element)), every_lane,
                                                                   ir.Constant(vty, None)])


class _VectorGep(ir.Instruction):
    """`getelementptr inbounds T, T* %base, <N x i64> %index`: a vector of N addresses (llvmlite's gep takes
    scalar indices only)."""

    def descr(self, buf):
        base, index = self.operands
        buf.append(f"getelementptr inbounds {base.type.pointee}, {base.type} {base.get_reference()}, "
                   f"{index.type} {index.get_reference()}\n")

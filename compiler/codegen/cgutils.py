"""Small helpers for emitting LLVM IR with llvmlite: type tests, scalar-to-vector splats, entry-block allocas and a
counted loop (as numba's cgutils). Used by the kernel emitter (llvm.py)."""
from __future__ import annotations

import contextlib

from llvmlite import ir

from .mathbase import F32, F64, I32, const, vector_constant

ALIGN = 64  # every kernel parameter and local buffer is 64-byte aligned


def is_vector(v) -> bool:
    return isinstance(v.type, ir.VectorType)


def scalar_type(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def is_float(ty: ir.Type) -> bool:
    return isinstance(scalar_type(ty), (ir.FloatType, ir.DoubleType))


def shaped(ty: ir.Type, lanes: int | None) -> ir.Type:
    return ir.VectorType(ty, lanes) if lanes else ty


def bit_width(ty: ir.Type) -> int:
    """Bit width of a scalar int or float type (the wider of two wins when operands are unified)."""
    return 64 if ty == F64 else 32 if ty == F32 else ty.width


def nbytes(ty: ir.Type) -> int:
    return bit_width(ty) // 8


def splat(b: ir.IRBuilder, v, lanes: int):
    """Broadcast scalar v to <lanes x T> (constants fold to a constant vector)."""
    if is_vector(v):
        return v
    if isinstance(v, ir.Constant):
        return vector_constant(ir.VectorType(v.type, lanes), v.constant)
    vec = b.insert_element(vector_constant(ir.VectorType(v.type, lanes), ir.Undefined), v, I32(0))
    return b.shuffle_vector(vec, vec, vector_constant(ir.VectorType(I32, lanes), 0))


def entry_alloca(fn: ir.Function, ty: ir.Type, name: str = "", align: int = ALIGN):
    """An alloca in fn's entry block: allocated once per call, and promotable by SROA/mem2reg. Emitters keep the
    entry block for allocas only (code starts in the next block), so appending here never reorders code."""
    entry = fn.entry_basic_block
    b = ir.IRBuilder(entry)
    if entry.is_terminated:
        b.position_before(entry.terminator)
    slot = b.alloca(ty, name=name)
    slot.align = align
    return slot


@contextlib.contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i"):
    """`for i in range(start, stop)` (i32, step 1); yields the induction variable; builder ends after the loop."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    end = b.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(start.type, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, end)
    b.position_at_end(body)
    yield i
    i.add_incoming(b.add(i, const(start.type, 1), flags=("nsw",)), b.block)
    b.branch(head)
    b.position_at_end(end)

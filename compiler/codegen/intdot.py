"""The int8 dot product of integer kernels: te.dot4_u8s8 (relayish/intrinsics.py) in LLVM IR.

`acc + dot4_u8s8(a0, a1, a2, a3, w)` adds, per lane, a0 * w.byte0 + ... + a3 * w.byte3 (a_t uint8, the bytes of the
int32 word w int8) to the int32 accumulator: one lane of `vpdpbusd`. Where the host has it for the vector width
(AVX-512 VNNI: 16 lanes, and 8 and 4 with AVX-512 VL; AVX-VNNI: 8 and 4) the whole vector is that one
instruction: llvm.x86.avx512.vpdpbusd.{512,256,128} (AVX-VNNI shares the intrinsic; LLVM picks its VEX
encoding). The four a_t of a lane-uniform operand (a convolution's input pixel, a matmul's row element) are four
consecutive bytes in memory: they are combined into one int32 (zext, shl, or), which LLVM turns into a single
broadcast load (vpbroadcastd, or vpdpbusd's {1toN} memory operand).

Elsewhere (scalars, other widths, hosts without VNNI) the fallback widens to int32 and multiplies: exact, as
vpdpbusd is (its products are at most 255 * 128 in magnitude and it sums them in 32 bits without saturation);
no vpmaddubsw, whose int16 pair sums saturate.

USE_VNNI = False forces the fallback on every width (tests of the fallback on a VNNI host).
"""
from __future__ import annotations

import functools

from llvmlite import ir

from .host import host_target

I8, I32 = ir.IntType(8), ir.IntType(32)
USE_VNNI = True


@functools.lru_cache(maxsize=None)
def host_vnni_lanes() -> tuple[int, ...]:
    """The int32 lane counts for which the host has a vpdpbusd."""
    features = set(host_target()["features"].split(","))
    lanes = set()
    if "+avx512vnni" in features:
        lanes.add(16)
        if "+avx512vl" in features:
            lanes.update((8, 4))
    if "+avxvnni" in features:
        lanes.update((8, 4))
    return tuple(sorted(lanes))


def vnni_lanes() -> tuple[int, ...]:
    """The lane counts emitted as vpdpbusd (none when USE_VNNI is off)."""
    return host_vnni_lanes() if USE_VNNI else ()


def _lanes(v) -> int | None:
    return v.type.count if isinstance(v.type, ir.VectorType) else None


def _splat(b: ir.IRBuilder, v, n: int):
    if isinstance(v.type, ir.VectorType):
        return v
    vty = ir.VectorType(v.type, n)
    one = b.insert_element(ir.Constant(vty, ir.Undefined), v, I32(0))
    return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(I32, n), [0] * n))


def _shaped(ty, n):
    return ir.VectorType(ty, n) if n else ty


def emit_dot4(b: ir.IRBuilder, acc, a: list | None, w, lanes: int | None, flip: bool = False, word=None):
    """acc + dot4_u8s8(a, w) (acc None: 0). a: 4 uint8 values (i8, scalars or <N x i8>), w: int32 (i32 or
    <N x i32>), acc: int32 or None; flip: a holds int8 data whose top bits are to be flipped first (x + 128, as
    the packed ops read int8 data): one xor of the combined word instead of four of its bytes, which would keep
    LLVM from seeing one 4-byte load. word: the 4 bytes already loaded as one i32 (a None; VNNI lanes only).
    Returns i32 or <N x i32> (N: the widest operand's lanes)."""
    n = max((_lanes(v) or 0 for v in (*(a or ()), w, *(() if acc is None else (acc,)))), default=0) or None
    if word is not None:
        if n not in vnni_lanes():
            raise ValueError(f"dot4_u8s8: a loaded word needs a vpdpbusd of {n} lanes")
        return _vpdpbusd(b, acc, None, w, n, flip, word)
    if n is not None and lanes is not None and n != lanes:
        raise ValueError(f"dot4_u8s8: operands of {n} lanes in a {lanes}-lane vector body")
    if n in vnni_lanes():
        return _vpdpbusd(b, acc, a, w, n, flip)
    if flip:
        a = [b.xor(v, _int(v.type, -128)) for v in a]
    return _widening(b, acc, a, w, n)


def _vpdpbusd(b: ir.IRBuilder, acc, a: list | None, w, n: int, flip: bool = False, word=None):
    for t, v in enumerate(a or ()):  # the 4 bytes of a as one int32 per lane (a_t in byte t)
        part = b.zext(v, _shaped(I32, _lanes(v)))
        if t:
            part = b.shl(part, _int(part.type, 8 * t))
        word = part if word is None else b.or_(*_same(b, word, part, n))
    if flip:
        word = b.xor(word, _int(word.type, -0x7F7F7F80))  # 0x80808080 as an i32
    vi32 = ir.VectorType(I32, n)
    vi8 = ir.VectorType(I8, 4 * n)
    acc = ir.Constant(vi32, None) if acc is None else _splat(b, acc, n)
    name = f"llvm.x86.avx512.vpdpbusd.{32 * n}"
    module = b.module
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(vi32, [vi32, vi8, vi8]), name)
    return b.call(fn, [acc, b.bitcast(_splat(b, word, n), vi8), b.bitcast(_splat(b, w, n), vi8)])


def _same(b: ir.IRBuilder, x, y, n):
    """x, y brought to one shape (a scalar splat beside a vector)."""
    if (_lanes(x) is None) != (_lanes(y) is None):
        x, y = _splat(b, x, n), _splat(b, y, n)
    return x, y


def _widening(b: ir.IRBuilder, acc, a: list, w, n: int | None):
    """acc + sum_t zext(a_t) * sext(byte t of w), in int32."""
    total = acc
    w = w if n is None else _splat(b, w, n)
    for t, v in enumerate(a):
        shift = 24 - 8 * t
        byte = b.shl(w, _int(w.type, shift)) if shift else w
        byte = b.ashr(byte, _int(w.type, 24))  # byte t of w, sign-extended
        x = b.zext(v, _shaped(I32, _lanes(v)))
        x, byte = _same(b, x, byte, n)
        prod = b.mul(x, byte)
        if total is None:
            total = prod
        else:
            total, prod = _same(b, total, prod, n)
            total = b.add(total, prod)
    return total


def _int(ty, value: int):
    return ir.Constant(ty, [value] * ty.count) if isinstance(ty, ir.VectorType) else ir.Constant(ty, value)

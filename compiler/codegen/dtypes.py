"""Tensor dtypes in LLVM: the register and memory type of each dtype, and the conversions between them.

Invariants (every emitter relies on them):
- Integers: intN / uintN are iN in registers and in memory; the signedness lives in the dtype only, so every
  operation whose meaning depends on it (compare, divide, widen, convert) asks `is_unsigned(dtype)`.
  bool is i1 in registers and one byte (0 or 1) in memory.
- float32 and float64 are float and double. float16 and bfloat16 are 16-bit patterns (i16) in memory and float32
  in registers: a load widens exactly, arithmetic runs in float32, and a store (or a Cast to them) rounds to
  nearest even as ONNX specifies (NaN stays a quiet NaN, overflow goes to inf).
"""
from __future__ import annotations

from llvmlite import ir

from .mathbase import const

I1, I8, I16, I32, I64 = (ir.IntType(w) for w in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()

_INT_WIDTHS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32,
               "uint64": 64}
_VALUE_TYPES = {"float32": F32, "float64": F64, "float16": F32, "bfloat16": F32, "bool": I1,
                **{name: ir.IntType(width) for name, width in _INT_WIDTHS.items()}}
HALF_DTYPES = ("float16", "bfloat16")  # 16-bit in memory, float32 in registers


def value_type(dtype: str) -> ir.Type:
    """LLVM type of a value of `dtype` in registers."""
    try:
        return _VALUE_TYPES[dtype]
    except KeyError:
        raise TypeError(f"codegen: unsupported dtype {dtype!r}; supported: {sorted(_VALUE_TYPES)}") from None


def register_bits(dtype: str) -> int:
    """Bits of one value of `dtype` in a vector register (bool counts as a byte; float16 computes in float32)."""
    ty = value_type(dtype)
    return 64 if ty == F64 else 32 if ty == F32 else max(ty.width, 8)


def memory_type(dtype: str) -> ir.Type:
    """LLVM type of one element of a buffer of `dtype` (bool is a byte, float16/bfloat16 are 16-bit patterns)."""
    if dtype == "bool":
        return I8
    return I16 if dtype in HALF_DTYPES else value_type(dtype)


def is_unsigned(dtype: str) -> bool:
    """uintN and bool compare, divide, widen and convert as unsigned numbers."""
    return dtype == "bool" or dtype.startswith("uint")


def int_constant(ty: ir.Type, value: int) -> ir.Constant:
    """An integer constant of (vector) type ty; values of unsigned dtypes >= 2^(N-1) become their two's
    complement pattern, which is what LLVM's textual IR accepts."""
    width = _scalar(ty).width
    value &= (1 << width) - 1
    if width > 1 and value >= 1 << (width - 1):
        value -= 1 << width
    return const(ty, value)


def _lanes(v) -> int | None:
    return v.type.count if isinstance(v.type, ir.VectorType) else None


def _scalar(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _shaped(ty: ir.Type, lanes: int | None) -> ir.Type:
    return ir.VectorType(ty, lanes) if lanes else ty


def from_memory(b: ir.IRBuilder, raw, dtype: str):
    """The register value of an element (or vector of elements) loaded from a buffer of `dtype`."""
    lanes = _lanes(raw)
    if dtype == "bool":
        return b.icmp_unsigned("!=", raw, const(raw.type, 0))
    if dtype == "float16":
        return b.fpext(b.bitcast(raw, _shaped(F16, lanes)), _shaped(F32, lanes))
    if dtype == "bfloat16":  # the upper half of a float32: exact
        wide = b.shl(b.zext(raw, _shaped(I32, lanes)), const(_shaped(I32, lanes), 16))
        return b.bitcast(wide, _shaped(F32, lanes))
    return raw


def to_memory(b: ir.IRBuilder, value, dtype: str):
    """The memory pattern of register value `value` (already of `dtype`'s register type) for a buffer of dtype."""
    lanes = _lanes(value)
    if dtype == "bool":
        return b.zext(value, _shaped(I8, lanes))
    if dtype == "float16":  # fptrunc rounds to nearest even (vcvtps2ph with F16C)
        return b.bitcast(b.fptrunc(value, _shaped(F16, lanes)), _shaped(I16, lanes))
    if dtype == "bfloat16":
        return _bfloat16_bits(b, value)
    return value


def _bfloat16_bits(b: ir.IRBuilder, value):
    """float32 -> bfloat16 bit pattern, rounded to nearest even: add 0x7FFF plus the lowest kept bit, keep the
    upper 16 bits (a carry into the exponent rounds up to inf correctly); NaN keeps its sign and top payload
    bits and is made quiet (the addition could carry a NaN into inf)."""
    lanes = _lanes(value)
    i32 = _shaped(I32, lanes)
    bits = b.bitcast(value, i32)
    lsb = b.and_(b.lshr(bits, const(i32, 16)), const(i32, 1))
    rounded = b.lshr(b.add(b.add(bits, const(i32, 0x7FFF)), lsb), const(i32, 16))
    quiet_nan = b.or_(b.lshr(bits, const(i32, 16)), const(i32, 0x40))
    out = b.select(b.fcmp_unordered("uno", value, value), quiet_nan, rounded)
    return b.trunc(out, _shaped(I16, lanes))


def _to_float32_round_to_odd(b: ir.IRBuilder, value):
    """double -> float rounded to odd: truncated toward zero, with the last bit set when inexact. Rounding that
    to nearest even at <= 22 bits equals rounding the double directly (float16 keeps 11 bits, bfloat16 8)."""
    lanes = _lanes(value)
    f32, i32 = _shaped(F32, lanes), _shaped(I32, lanes)
    near = b.fptrunc(value, f32)
    back = b.fpext(near, value.type)
    bits = b.bitcast(near, i32)
    away = b.fcmp_ordered(">", b.call(_fabs(b, value.type), [back]), b.call(_fabs(b, value.type), [value]))
    bits = b.select(away, b.sub(bits, const(i32, 1)), bits)  # one step toward zero (sign-magnitude)
    inexact = b.fcmp_ordered("!=", back, value)
    return b.bitcast(b.select(inexact, b.or_(bits, const(i32, 1)), bits), f32)


def _fabs(b: ir.IRBuilder, ty: ir.Type) -> ir.Function:
    name = f"llvm.fabs.{'v%d' % ty.count if isinstance(ty, ir.VectorType) else ''}f64"
    fn = b.module.globals.get(name)
    return fn or ir.Function(b.module, ir.FunctionType(ty, [ty]), name)


def round_to(b: ir.IRBuilder, value, dtype: str):
    """A float32 register value rounded to the precision of float16 / bfloat16 (still a float32 value)."""
    return from_memory(b, to_memory(b, value, dtype), dtype)


def widen_int(b: ir.IRBuilder, value, dtype: str, ty: ir.Type):
    """An integer of `dtype` widened to the wider integer type ty (zero-extended if unsigned)."""
    ty = _shaped(ty, _lanes(value))
    return b.zext(value, ty) if is_unsigned(dtype) else b.sext(value, ty)


def bitcast(b: ir.IRBuilder, value, src: str, dst: str):
    """ONNX BitCast of a register value from `src` to `dst`, dtypes of one width: its memory pattern read as dst
    (a 16-bit float's pattern is the rounded float32 register value's; bool's byte is 0 or 1, and a nonzero
    byte read as bool is true)."""
    if _bits(memory_type(src)) != _bits(memory_type(dst)):
        raise TypeError(f"codegen: bitcast from {src} to {dst}: their widths differ")
    bits = to_memory(b, value, src)
    return from_memory(b, b.bitcast(bits, _shaped(memory_type(dst), _lanes(bits))), dst)


def _bits(ty: ir.Type) -> int:
    return {F32: 32, F64: 64}.get(ty) or ty.width


def convert(b: ir.IRBuilder, value, src: str, dst: str, within_int32: bool = False):
    """ONNX Cast of a register value from `src` to `dst` (both supported dtypes): float -> int truncates toward
    zero, int -> narrower int wraps, anything -> bool is `x != 0` (NaN is true), to float16 / bfloat16 rounds once
    to nearest even (float64 goes through float32 rounded to odd, which keeps that single rounding exact: numpy
    agrees for float16; ml_dtypes rounds float64 -> bfloat16 twice and can differ by one unit next to a tie; ints
    beyond 2^24 go through float32 rounded to nearest, a double rounding only bfloat16 can see). within_int32: the
    caller knows a float value lies in int32's range (or is NaN): a narrower integer goes through int32."""
    lanes = _lanes(value)
    to = _shaped(value_type(dst), lanes)
    src_float, dst_float = src.startswith(("float", "bfloat")), dst.startswith(("float", "bfloat"))
    if dst == "bool":
        if src_float:
            return b.fcmp_unordered("!=", value, const(value.type, 0.0))
        return value if src == "bool" else b.icmp_unsigned("!=", value, const(value.type, 0))
    if src_float and dst_float:
        if src == "float64" and dst in HALF_DTYPES:
            return round_to(b, _to_float32_round_to_odd(b, value), dst)
        if value.type != to:
            value = b.fpext(value, to) if value_type(dst) == F64 else b.fptrunc(value, to)
        return round_to(b, value, dst) if dst in HALF_DTYPES and src != dst else value
    if src_float:  # to an integer: through int64 for narrower types, so out-of-range values wrap as in numpy
        if _scalar(to).width == 64:
            return b.fptoui(value, to) if is_unsigned(dst) else b.fptosi(value, to)
        wide = I32 if within_int32 and _scalar(to).width < 32 else I64
        return b.trunc(b.fptosi(value, _shaped(wide, lanes)), to) if _scalar(to).width < wide.width else \
            b.fptosi(value, to)
    if dst_float:
        value = b.uitofp(value, to) if is_unsigned(src) else b.sitofp(value, to)
        return round_to(b, value, dst) if dst in HALF_DTYPES else value
    src_width, dst_width = _scalar(value.type).width, _scalar(to).width
    if dst_width < src_width:
        return b.trunc(value, to)
    if dst_width > src_width:
        return widen_int(b, value, src, _scalar(to))
    return value

"""sin, cos, tan, asin, acos, atan as inline LLVM IR (intrinsics.emit_intrinsic dispatches here).

sin, cos, tan, asin, acos, atan of a float32 compute in double and round once (like pow): the series below are
Taylor's (no fitted coefficients), taken far enough that their truncation error is below 1e-11 relative on the
reduced ranges, so the float32 results are within 0.51 ulp. The argument reduction of sin / cos / tan is exact
enough for every float32: Cody-Waite in double below TRIG_HUGE, Payne-Hanek on integers above it.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .mathbase import F32, F64, I32, I64, Math, const


def _pi_scaled(bits: int) -> int:
    """floor(pi * 2^bits) (to within 1), from Machin's formula in integer arithmetic."""
    def arctan_inv(k: int) -> int:  # atan(1/k) * 2^(bits + 16)
        total, n, term = 0, 0, (1 << (bits + 16)) // k
        while term:
            total += term // (2 * n + 1) * (-1) ** n
            n, term = n + 1, term // (k * k)
        return total
    return (16 * arctan_inv(5) - 4 * arctan_inv(239)) >> 16


_PI_BITS = 400
_PI_INT = _pi_scaled(_PI_BITS)
_TWO_OVER_PI_INT = (1 << (2 * _PI_BITS + 1)) // _PI_INT  # floor(2/pi * 2^_PI_BITS)
TRIG_HUGE = 2.0**19  # |x| below: Cody-Waite reduction in double (|n| < 2^19, so n * PIO2_1 and n * PIO2_2 are exact)


def _pio2_split() -> tuple[float, float, float]:
    """pi/2 = PIO2_1 + PIO2_2 + PIO2_3 (+ ~2^-120): the first two of 33 significant bits each, the third rounded."""
    pio2 = _PI_INT  # pi/2 * 2^(_PI_BITS + 1)
    scale = _PI_BITS + 1
    p1 = pio2 >> (scale - 32) << (scale - 32)  # pi/2 is in [1, 2): 33 significant bits are 32 fraction bits
    rest = pio2 - p1
    keep = rest.bit_length() - 33
    p2 = rest >> keep << keep
    return tuple(float(v) / 2.0**scale for v in (p1, p2, rest - p2))


PIO2_1, PIO2_2, PIO2_3 = _pio2_split()


def two_over_pi_word(j: int) -> int:
    """floor(2/pi * 2^(8j + 30)) mod 2^32: the Payne-Hanek windows of 2/pi, one every 8 bits."""
    return (_TWO_OVER_PI_INT >> (_PI_BITS - 8 * j - 30)) & 0xFFFFFFFF


_HUGE_K = range(-1, 14)  # floor(s / 8) for x = mant * 2^s, TRIG_HUGE <= |x| <= inf (s in [-4, 105])
SIN_TERMS = [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, 7)]  # sin r = r + r z S(z), z = r^2
COS_TERMS = [(-1) ** k / math.factorial(2 * k) for k in range(8)]  # cos r = C(z)
ASIN_TERMS = [math.comb(2 * k, k) / (4**k * (2 * k + 1)) for k in range(16)]  # asin t = t A(t^2), |t| <= 1/2
ATAN_TERMS = [(-1) ** k / (2 * k + 1) for k in range(14)]  # atan t = t T(t^2), |t| <= tan(pi/8)


def _lookup(m: Math, index, table: dict, ty):
    """table[index] per lane for a small integer table, as a chain of selects (no memory, vectorizes)."""
    items = list(table.items())
    out = const(ty, items[0][1])
    for key, value in items[1:]:
        out = m.b.select(m.b.icmp_signed("==", index, m.i32(key)), const(ty, value), out)
    return out


def _reduce_huge(m: Math, md: Math, ax):
    """Payne-Hanek for |x| = ax >= TRIG_HUGE: (n mod 4 as i32, r in double) with |x| = n pi/2 + r, |r| <= pi/4.
    ax = mant * 2^s; mant31 = mant << (s mod 8), s8 = s - s mod 8 = 8k; with V = floor(2/pi 2^(s8 + 94)) mod 2^96
    (words w(k), w(k+4), w(k+8)), the top 64 bits of mant31 * V mod 2^96 are |x| 2/pi mod 4 in fixed point 2.62."""
    b, i64 = m.b, m._shape(I64)
    bits = b.bitcast(ax, m._shape(I32))
    s = b.sub(b.lshr(bits, m.i32(23)), m.i32(150))
    mant = b.or_(b.and_(bits, m.i32(0x7FFFFF)), m.i32(0x800000))
    mant = b.zext(b.shl(mant, b.and_(s, m.i32(7))), i64)
    k = b.ashr(s, m.i32(3))
    words = [_lookup(m, k, {j: two_over_pi_word(j + d) for j in _HUGE_K}, i64) for d in (0, 4, 8)]
    hi, mid, lo = (b.mul(mant, w) for w in words)
    c = lambda v: const(i64, v)
    p = b.add(b.add(b.shl(hi, c(32)), mid), b.lshr(lo, c(32)))  # mod 2^64
    q = b.lshr(b.add(p, c(1 << 61)), c(62))
    frac = b.sub(p, b.shl(q, c(62)))  # in [-2^61, 2^61) as a signed number
    r = md.mul(b.sitofp(frac, md.ty), md.f(math.pi / 2 * 2.0**-62))
    return b.trunc(q, m._shape(I32)), r


def _double(m: Math) -> Math:
    """The Math of double with m's lanes (m itself if it is double)."""
    return m if m.ity.width == 64 else Math(m.b, ir.VectorType(F64, m.lanes) if m.lanes else F64)


def _single(m: Math) -> Math:
    return m if m.ity.width == 32 else Math(m.b, ir.VectorType(F32, m.lanes) if m.lanes else F32)


def _convert(m_from: Math, m_to: Math, v):
    if m_from.ty == m_to.ty:
        return v
    return m_from.b.fpext(v, m_to.ty) if m_to.ity.width == 64 else m_from.b.fptrunc(v, m_to.ty)


def _reduce_pio2(m: Math, x, x32):
    """x = n pi/2 + r: (n mod 4 as i32, r in double, the Math of double); n and r take x's sign. x32 is x as a
    float32: where |x| >= TRIG_HUGE, Payne-Hanek reduces x32 (a float64 x is rounded: documented limitation)."""
    b, md, m32 = m.b, _double(m), _single(m)
    ax = m.call("fabs", x)
    huge = b.not_(m.lt(ax, m.f(TRIG_HUGE)))  # NaN too: the caller returns it
    xd = _convert(m, md, m.sel(huge, m.f(0.0), x))
    n = md.call("floor", md.add(md.mul(xd, md.f(2 / math.pi)), md.f(0.5)))
    # x - n PIO2_1 is exact (n PIO2_1 is, and x is within a factor 2 of it or n = 0); so is n PIO2_2
    r = md.sub(md.sub(md.sub(xd, md.mul(n, md.f(PIO2_1))), md.mul(n, md.f(PIO2_2))), md.mul(n, md.f(PIO2_3)))
    q = b.fptosi(n, m._shape(I32))
    q_huge, r_huge = _reduce_huge(m32, md, m32.call("fabs", x32))
    negative = m.lt(x, m.f(0.0))
    q_huge = b.select(negative, b.sub(m.i32(0), q_huge), q_huge)
    r_huge = md.sel(negative, b.fneg(r_huge), r_huge)
    return b.select(huge, q_huge, q), md.sel(huge, r_huge, r), md


def _sin_cos_of_reduced(md: Math, r):
    z = md.mul(r, r)
    return md.add(r, md.mul(md.mul(r, z), md.poly(z, SIN_TERMS))), md.poly(z, COS_TERMS)


def _trig(m: Math, x, which: str):
    """sin, cos or tan of x: by quadrant q = n mod 4, sin x = (sin r, cos r, -sin r, -cos r)[q], cos x = sin of
    quadrant q + 1, tan x = sin r / cos r (q even) or -cos r / sin r (q odd)."""
    b, m32 = m.b, _single(m)
    x32 = _convert(m, m32, x)
    q, r, md = _reduce_pio2(m, x, x32)
    sin_r, cos_r = _sin_cos_of_reduced(md, r)
    if which == "cos":
        q = b.add(q, m.i32(1))
    odd = b.trunc(b.and_(q, m.i32(1)), m._shape(ir.IntType(1)))
    if which == "tan":
        res = md.sel(odd, md.div(b.fneg(cos_r), sin_r), md.div(sin_r, cos_r))
    else:
        res = md.sel(odd, cos_r, sin_r)
        res = md.sel(b.trunc(b.lshr(q, m.i32(1)), m._shape(ir.IntType(1))), b.fneg(res), res)
    res = _convert(md, m, res)
    if which != "cos":  # sin and tan are odd: +-0 -> +-0 (the series would give +0 for -0)
        res = m.sel(m.eq(x, m.f(0.0)), x, res)
    # infinities (and float64 arguments beyond the float32 range, which the reduction sees as such) give NaN
    res = m.sel(m32.eq(m32.call("fabs", x32), m32.f(math.inf)), m.f(math.nan), res)
    return m.sel(m.isnan(x), x, res)


def _asin_series(md: Math, t, z):
    return md.mul(t, md.poly(z, ASIN_TERMS))


def _asin_acos(m: Math, x, which: str):
    """|x| <= 1/2: asin x = x A(x^2), acos x = pi/2 - asin x; beyond, with z = (1 - |x|) / 2 and t = sqrt(z):
    asin |x| = pi/2 - 2 t A(z), acos x = 2 t A(z) (x > 0) or pi - 2 t A(z) (x < 0). |x| > 1 gives sqrt(< 0) = NaN."""
    md = _double(m)
    xd = _convert(m, md, x)
    ad = md.call("fabs", xd)
    small = md.b.fcmp_ordered("<=", ad, md.f(0.5))
    near = _asin_series(md, xd, md.mul(xd, xd))  # asin x
    z = md.mul(md.sub(md.f(1.0), ad), md.f(0.5))
    far = md.mul(md.f(2.0), _asin_series(md, md.call("sqrt", z), z))  # 2 asin sqrt(z)
    if which == "asin":
        res = md.sel(small, near, md.call("copysign", md.sub(md.f(math.pi / 2), far), xd))
    else:
        res = md.sel(small, md.sub(md.f(math.pi / 2), near),
                     md.sel(md.gt(xd, md.f(0.0)), far, md.sub(md.f(math.pi), far)))
    return m.sel(m.isnan(x), x, _convert(md, m, res))


def _asin(m: Math, x):
    return _asin_acos(m, x, "asin")


def _acos(m: Math, x):
    return _asin_acos(m, x, "acos")


def _atan(m: Math, x):
    """atan |x| = y0 + atan t: |x| > tan(3pi/8): y0 = pi/2, t = -1/|x|; |x| > tan(pi/8): y0 = pi/4,
    t = (|x| - 1) / (|x| + 1); else y0 = 0, t = |x|. Then |t| <= tan(pi/8) and atan t = t T(t^2)."""
    md = _double(m)
    xd = _convert(m, md, x)
    a = md.call("fabs", xd)
    big = md.gt(a, md.f(1 + math.sqrt(2)))
    mid = md.gt(a, md.f(math.sqrt(2) - 1))
    t = md.sel(big, md.div(md.f(-1.0), a), md.sel(mid, md.div(md.sub(a, md.f(1.0)), md.add(a, md.f(1.0))), a))
    y0 = md.sel(big, md.f(math.pi / 2), md.sel(mid, md.f(math.pi / 4), md.f(0.0)))
    res = md.add(y0, md.mul(t, md.poly(md.mul(t, t), ATAN_TERMS)))
    res = _convert(md, m, md.call("copysign", res, xd))
    return m.sel(m.isnan(x), x, res)

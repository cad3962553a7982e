"""Math intrinsics as inline LLVM IR, for float scalars and float vectors alike.

`emit_intrinsic(builder, name, args)` emits the code of one `te.Call` in place; the names, arities and cost
classes are relayish/intrinsics.py's table. The "instruction" ones map to `llvm.*` intrinsics (single
instructions on x86-64 with SSE4.1). The "polynomial" ones (`_POLYNOMIAL` below) are written out here as range reduction + polynomial, so that they vectorize with the code around them and the module
never calls libm: a compiled model depends on no library for compute.

Accuracy (float32, max error against float64 references over 1M random inputs across each function's range):
exp 1.22 ulp, log 1.78, tanh 1.36, sigmoid 2.36, erf 1.09, pow 0.50 (evaluated in double, rounded once; a
constant exponent 1/4, 1/2 or 3/4 from square roots in double, rounded once); relative
error <= 2.1e-7 everywhere. sin, cos, tan, asin, acos, atan are evaluated in double and rounded once: <= 0.5000040
ulp over 1M inputs spanning every float32 exponent (sin / cos / tan of huge arguments included). tests/test_codegen.py holds them to 1.5-2.5 ulp. Special values follow
C99 / numpy: NaN in -> NaN out, exp(-inf) = 0, exp(+large) = inf, log(0) = -inf, log(<0) = NaN, tanh(+-inf) = +-1,
pow per C99 Annex F (pow(x, 0) = 1, pow(1, y) = 1, pow(-8, 1/3) = NaN, signed zeros and infinities).
float64 arguments are computed in float32 precision (rounded down, computed, widened): documented limitation.
The trigonometric functions take float64 arguments as they are (their series are good to ~1e-11 relative, better
than float32, not float64), except that sin / cos / tan reduce |x| >= 2^19 after rounding x to float32.

Polynomial coefficients are not magic numbers: `fit_coefficients()` derives them (least-squares fits on Chebyshev
nodes in float64, close to minimax, rounded to float32); the tables are its output, written out.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from relayish.intrinsics import INTRINSICS

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)

FAST = ("contract",)  # the only fast-math flag we use: lets a*b+c become one FMA; never reassociates


# Polynomial coefficients, float32. They are the output of fit_coefficients() below (checked by a test), written
# out so that importing the compiler runs no least-squares solve (which would also wake numpy's BLAS threads).
EXP_P = (0.5, 0.1666666716337204, 0.04166646674275398, 0.008333372883498669, 0.0013933581067249179,
         0.00019849518139380962)
LOG_P = (0.6666666865348816, 0.4000012278556824, 0.2855083644390106, 0.23330119252204895)
TANH_P = (-0.3333333432674408, 0.1333330273628235, -0.05395911633968353, 0.02176789566874504,
          -0.008340982720255852, 0.0022897333838045597)
ERF_SMALL_P = (0.12837916612625122, -0.3761262595653534, 0.11283597350120544, -0.02685432881116867,
               0.005189312156289816, -0.0008018855005502701, 7.882497448008507e-05)
ERF_LARGE_Q = (0.3059529662132263, 0.38228341937065125, -0.1723913997411728, 0.04380027949810028,
               0.023184191435575485, -0.04780292883515358, 0.045502085238695145, -0.01872330531477928,
               -0.010075770318508148)

_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
TANH_SMALL = 0.625  # tanh: polynomial below, exp-based formula above
ERF_U_CENTER = 0.625  # erf tail: Q is a polynomial in 1/x - ERF_U_CENTER
ERF_CLAMP = 4.0  # erf(x) rounds to 1.0f for x >= 3.92


def _fit(f, lo: float, hi: float, degree: int, relative: bool = True, samples: int = 2000) -> tuple:
    """Coefficients c0..c_degree (float32-representable) of a polynomial ~ f on [lo, hi]; least squares on
    relative (or absolute) error at Chebyshev nodes, which is close to the minimax polynomial."""
    t = np.cos(np.pi * (np.arange(samples) + 0.5) / samples) * (hi - lo) / 2 + (hi + lo) / 2
    y = f(t)
    weight = 1.0 / np.abs(y) if relative else np.ones_like(y)
    a = np.vander(t, degree + 1, increasing=True)
    coeffs = np.linalg.lstsq(a * weight[:, None], y * weight, rcond=None)[0]
    return tuple(float(np.float32(c)) for c in coeffs)


def _safe(z, small, exact):
    """exact(z) except near z = 0 where the series `small` avoids 0/0."""
    zz = np.where(np.abs(z) < 1e-6, 1e-3, z)  # any harmless point: masked out below
    return np.where(np.abs(z) < 1e-6, small(z), exact(zz))


def fit_coefficients() -> dict:
    """Derive the polynomial tables above (what each polynomial approximates, on which interval)."""
    erf, erfc = np.vectorize(math.erf), np.vectorize(math.erfc)
    sqrt = np.sqrt
    log_t_max = (_SQRT2 - 1) / (_SQRT2 + 1)  # |f / (2 + f)| for a mantissa 1 + f in [1/sqrt2, sqrt2]
    erfcx_u = lambda v: erfc(1 / (v + ERF_U_CENTER)) * np.exp(1 / (v + ERF_U_CENTER) ** 2)
    return {
        # e^r = 1 + r + r^2 P(r), |r| <= ln2 / 2
        "EXP_P": _fit(lambda r: _safe(r, lambda r: 0.5 + r / 6, lambda r: (np.expm1(r) - r) / r**2),
                      -_LN2 / 2, _LN2 / 2, 5),
        # log(1 + f) = 2t + t z P(z), t = f / (2 + f), z = t^2
        "LOG_P": _fit(lambda z: _safe(z, lambda z: 2 / 3 + 2 * z / 5,
                                      lambda z: (2 * np.arctanh(sqrt(z)) - 2 * sqrt(z)) / sqrt(z) ** 3),
                      0.0, log_t_max**2, 3),
        # tanh(x) = x + x z P(z), z = x^2, |x| < TANH_SMALL
        "TANH_P": _fit(lambda z: _safe(z, lambda z: -1 / 3 + 2 * z / 15,
                                       lambda z: (np.tanh(sqrt(z)) / sqrt(z) - 1) / z), 0.0, TANH_SMALL**2, 5),
        # erf(x) = x + x P(x^2), |x| < 1 (P = erf(x)/x - 1 changes sign: absolute fit)
        "ERF_SMALL_P": _fit(lambda z: _safe(z, lambda z: 2 / math.sqrt(math.pi) * (1 - z / 3) - 1,
                                            lambda z: erf(sqrt(z)) / sqrt(z) - 1), 0.0, 1.0, 6, relative=False),
        # erf(x) = 1 - exp(-x^2) Q(1/x - ERF_U_CENTER), 1 <= x <= ERF_CLAMP (Q ~ erfcx(x) = e^(x^2) erfc(x))
        "ERF_LARGE_Q": _fit(erfcx_u, 1 / ERF_CLAMP - ERF_U_CENTER, 1.0 - ERF_U_CENTER, 8),
    }


class _Math:
    """Emission helpers over one float type (scalar or vector): constants splat themselves to the right shape."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.Type):
        self.b = builder
        self.ty = ty
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else None
        scalar = ty.element if self.lanes else ty
        self.ity = ir.IntType(64 if scalar == F64 else 32)
        self.mant_bits, self.bias = (52, 1023) if scalar == F64 else (23, 127)

    def _shape(self, t):
        return ir.VectorType(t, self.lanes) if self.lanes else t

    def f(self, v):
        return ir.Constant(self.ty, [float(v)] * self.lanes if self.lanes else float(v))

    def i(self, v):
        ity = self._shape(self.ity)
        return ir.Constant(ity, [int(v)] * self.lanes if self.lanes else int(v))

    def i32(self, v):
        t = self._shape(I32)
        return ir.Constant(t, [int(v)] * self.lanes if self.lanes else int(v))

    def add(self, a, b): return self.b.fadd(a, b, flags=FAST)
    def sub(self, a, b): return self.b.fsub(a, b, flags=FAST)
    def mul(self, a, b): return self.b.fmul(a, b, flags=FAST)
    def div(self, a, b): return self.b.fdiv(a, b)
    def lt(self, a, b): return self.b.fcmp_ordered("<", a, b)
    def gt(self, a, b): return self.b.fcmp_ordered(">", a, b)
    def eq(self, a, b): return self.b.fcmp_ordered("==", a, b)
    def isnan(self, a): return self.b.fcmp_unordered("uno", a, a)
    def sel(self, c, a, b): return self.b.select(c, a, b)

    def call(self, name: str, *args):
        suffix = (f"v{self.lanes}" if self.lanes else "") + ("f64" if self.ity.width == 64 else "f32")
        full = f"llvm.{name}.{suffix}"
        module = self.b.module
        fn = module.globals.get(full)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(self.ty, [self.ty] * len(args)), full)
        return self.b.call(fn, list(args))

    def poly(self, x, coeffs):
        """Horner: c0 + x (c1 + x (c2 + ...)); with `contract` each step is one FMA."""
        acc = self.f(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.add(self.mul(acc, x), self.f(c))
        return acc

    def pow2i(self, n_int):
        """2^n as a float for an integer vector/scalar n in the normal exponent range."""
        biased = self.b.add(n_int, self.i(self.bias))
        return self.b.bitcast(self.b.shl(biased, self.i(self.mant_bits)), self.ty)

    def to_int(self, x):
        return self.b.fptosi(x, self._shape(self.ity))

    def clamp(self, x, lo, hi):
        """min(max(x, lo), hi) with NaN mapped to lo (callers restore NaN at the end)."""
        x = self.sel(self.b.fcmp_unordered("<", x, self.f(lo)), self.f(lo), x)
        return self.sel(self.gt(x, self.f(hi)), self.f(hi), x)


# ----------------------------------------------------------------------------------------------- float32 kernels

def _exp(m: _Math, x):
    """exp(x) = 2^n e^r, n = round(x / ln2), r = x - n ln2 (Cody-Waite: ln2 split so n * hi is exact)."""
    xc = m.clamp(x, -104.0, 89.0)  # beyond: the result is 0 or inf after scaling
    n = m.call("floor", m.add(m.mul(xc, m.f(1 / _LN2)), m.f(0.5)))
    r = m.sub(xc, m.mul(n, m.f(0.693359375)))
    r = m.sub(r, m.mul(n, m.f(-2.12194440e-4)))
    p = m.add(m.add(m.f(1.0), r), m.mul(m.mul(r, r), m.poly(r, EXP_P)))
    ni = m.to_int(n)
    n1 = m.b.ashr(ni, m.i(1))  # scale in two steps so 2^n1, 2^n2 are normal floats and denormal results round once
    n2 = m.b.sub(ni, n1)
    res = m.mul(m.mul(p, m.pow2i(n1)), m.pow2i(n2))
    return m.sel(m.isnan(x), x, res)


def _frexp(m: _Math, x):
    """x > 0 -> (mantissa in [1/sqrt2, sqrt2), integer exponent as float); denormals are pre-scaled by 2^25."""
    tiny = m.lt(x, m.f(1.1754943508222875e-38))
    xs = m.sel(tiny, m.mul(x, m.f(2.0**25)), x)
    bits = m.b.bitcast(xs, m._shape(I32))
    e = m.b.sub(m.b.lshr(bits, m.i32(23)), m.i32(127))
    e = m.b.sub(e, m.b.select(tiny, m.i32(25), m.i32(0)))
    mant = m.b.bitcast(m.b.or_(m.b.and_(bits, m.i32(0x7FFFFF)), m.i32(0x3F800000)), m.ty)
    big = m.gt(mant, m.f(_SQRT2))
    mant = m.sel(big, m.mul(mant, m.f(0.5)), mant)
    e = m.b.add(e, m.b.zext(big, m._shape(I32)))
    return mant, m.b.sitofp(e, m.ty)


def _log(m: _Math, x):
    mant, e = _frexp(m, x)
    f = m.sub(mant, m.f(1.0))
    t = m.div(f, m.add(m.f(2.0), f))
    z = m.mul(t, t)
    logm = m.add(m.mul(m.f(2.0), t), m.mul(m.mul(t, z), m.poly(z, LOG_P)))
    res = m.add(m.mul(e, m.f(0.693359375)), m.add(m.mul(e, m.f(-2.12194440e-4)), logm))
    res = m.sel(m.eq(x, m.f(math.inf)), m.f(math.inf), res)
    res = m.sel(m.eq(x, m.f(0.0)), m.f(-math.inf), res)
    res = m.sel(m.lt(x, m.f(0.0)), m.f(math.nan), res)
    return m.sel(m.isnan(x), x, res)


def _tanh(m: _Math, x):
    a = m.call("fabs", x)
    z = m.mul(x, x)
    small = m.add(x, m.mul(m.mul(x, z), m.poly(z, TANH_P)))
    e = _exp(m, m.mul(m.f(2.0), a))  # overflows to inf for large |x|: 2 / inf = 0 gives exactly 1
    large = m.call("copysign", m.sub(m.f(1.0), m.div(m.f(2.0), m.add(e, m.f(1.0)))), x)
    return m.sel(m.lt(a, m.f(TANH_SMALL)), small, large)


def _sigmoid(m: _Math, x):
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) for x < 0: exp never overflows, tiny results keep precision."""
    e = _exp(m, m.sub(m.f(0.0), m.call("fabs", x)))
    return m.div(m.sel(m.lt(x, m.f(0.0)), e, m.f(1.0)), m.add(m.f(1.0), e))


def _erf(m: _Math, x):
    a = m.call("fabs", x)
    small = m.add(x, m.mul(x, m.poly(m.mul(x, x), ERF_SMALL_P)))
    ac = m.sel(m.gt(a, m.f(ERF_CLAMP)), m.f(ERF_CLAMP), a)  # NaN passes through
    q = m.poly(m.sub(m.div(m.f(1.0), ac), m.f(ERF_U_CENTER)), ERF_LARGE_Q)
    tail = m.mul(_exp(m, m.sub(m.f(0.0), m.mul(ac, ac))), q)
    large = m.call("copysign", m.sub(m.f(1.0), tail), x)
    return m.sel(m.lt(a, m.f(1.0)), small, large)


# ----------------------------------------------------------------------------------------------- pow (in double)

def _log_f64(md: _Math, mant32, e32):
    """log(mant * 2^e) in double from a float32 mantissa in [1/sqrt2, sqrt2): 2 atanh series to ~1e-15."""
    f = md.sub(md.b.fpext(mant32, md.ty), md.f(1.0))
    t = md.div(f, md.add(md.f(2.0), f))
    z = md.mul(t, t)
    series = md.poly(z, [1.0 / (2 * k + 1) for k in range(9)])
    return md.add(md.mul(md.b.fpext(e32, md.ty), md.f(_LN2)), md.mul(md.mul(md.f(2.0), t), series))


def _exp_f64(md: _Math, w):
    """exp(w) in double for w clamped to [-200, 200] (enough for any float32 result); Taylor to ~1e-15."""
    wc = md.clamp(w, -200.0, 200.0)
    n = md.call("floor", md.add(md.mul(wc, md.f(1 / _LN2)), md.f(0.5)))
    r = md.sub(wc, md.mul(n, md.f(_LN2)))
    p = md.poly(r, [1.0 / math.factorial(k) for k in range(13)])
    return md.mul(p, md.pow2i(md.to_int(n)))


_ROOT_POWERS = (0.25, 0.5, 0.75)  # constant exponents computed from square roots


def _splat_value(v) -> float | None:
    """The value of a float constant, or of a vector constant with one value in every lane; None otherwise."""
    if not isinstance(v, ir.Constant):
        return None
    values = v.constant if isinstance(v.constant, (list, tuple)) else [v]
    values = [c.constant if isinstance(c, ir.Constant) else c for c in values]
    if not values or any(not isinstance(c, float) for c in values) or len(set(values)) != 1:
        return None
    return values[0]


def _root_power(m: _Math, x, k: float):
    """pow(x, k) for k in _ROOT_POWERS from square roots in double, rounded once (<= 0.5 ulp, like the general pow,
    which takes ~40 double operations: LRN's x / (1 + s)^0.75): sqrt(x), sqrt(sqrt(x)), sqrt(x) * sqrt(sqrt(x)).
    C99's cases: a negative base gives NaN (sqrt's), pow(+-0, k) = +0 (x + 0 turns -0 into +0), pow(-inf, k) = +inf."""
    b = m.b
    md = _Math(b, ir.VectorType(F64, m.lanes) if m.lanes else F64)
    x64 = b.fpext(b.fadd(x, m.f(0.0)), md.ty)  # no fast-math flag: -0 + 0 must give +0
    s = md.call("sqrt", x64)
    r = s if k == 0.5 else md.call("sqrt", s)
    if k == 0.75:
        r = md.mul(s, r)
    return m.sel(m.eq(x, m.f(-math.inf)), m.f(math.inf), b.fptrunc(r, m.ty))


def _pow(m: _Math, x, y):
    """pow(x, y) = sign * exp(y log|x|), the product and exp in double; special cases per C99 Annex F. A constant
    exponent of _ROOT_POWERS takes square roots instead (_root_power)."""
    k = _splat_value(y)
    if k in _ROOT_POWERS:
        return _root_power(m, x, k)
    b = m.b
    dty = ir.VectorType(F64, m.lanes) if m.lanes else F64
    md = _Math(b, dty)
    ax = m.call("fabs", x)
    mant, e = _frexp(m, ax)
    w = md.mul(b.fpext(y, dty), _log_f64(md, mant, e))
    mag = b.fptrunc(_exp_f64(md, w), m.ty)
    # |x| = 0 or inf: log is -inf/+inf, handled by the sign of y (frexp cannot see them)
    zero_or_inf = m.sel(m.gt(y, m.f(0.0)), m.f(0.0), m.f(math.inf))
    inf_case = m.sel(m.gt(y, m.f(0.0)), m.f(math.inf), m.f(0.0))
    mag = m.sel(m.eq(ax, m.f(0.0)), zero_or_inf, mag)
    mag = m.sel(m.eq(ax, m.f(math.inf)), inf_case, mag)
    # y = +-inf: |x| < 1 -> 0 / inf, |x| > 1 -> inf / 0, |x| = 1 -> 1
    y_inf = m.eq(m.call("fabs", y), m.f(math.inf))
    grows = b.icmp_unsigned("==", m.gt(ax, m.f(1.0)), m.gt(y, m.f(0.0)))
    mag = m.sel(y_inf, m.sel(grows, m.f(math.inf), m.f(0.0)), mag)
    mag = m.sel(b.and_(y_inf, m.eq(ax, m.f(1.0))), m.f(1.0), mag)
    # negative base: odd integer y flips the sign; a non-integer y gives NaN (not for -0 or -inf)
    y_int = m.eq(m.call("floor", y), y)
    half = m.mul(y, m.f(0.5))
    y_odd = b.and_(y_int, b.not_(m.eq(m.call("floor", half), half)))
    neg = b.icmp_signed("<", b.bitcast(x, m._shape(I32)), m.i32(0))
    res = m.sel(b.and_(neg, y_odd), b.fneg(mag), mag)  # fneg, not 0 - mag: keeps -0.0
    finite_neg = b.and_(m.lt(x, m.f(0.0)), m.gt(x, m.f(-math.inf)))
    nan = m.f(math.nan)
    res = m.sel(b.and_(finite_neg, b.not_(y_int)), nan, res)
    res = m.sel(b.or_(m.isnan(x), m.isnan(y)), nan, res)
    res = m.sel(m.eq(x, m.f(1.0)), m.f(1.0), res)
    return m.sel(m.eq(y, m.f(0.0)), m.f(1.0), res)


# ----------------------------------------------------------------------------------------------- trigonometry (in double)
# sin, cos, tan, asin, acos, atan of a float32 compute in double and round once (like pow): the series below are
# Taylor's (no fitted coefficients), taken far enough that their truncation error is below 1e-11 relative on the
# reduced ranges, so the float32 results are within 0.51 ulp. The argument reduction of sin / cos / tan is exact
# enough for every float32: Cody-Waite in double below TRIG_HUGE, Payne-Hanek on integers above it.

def _pi_scaled(bits: int) -> int:
    """floor(pi * 2^bits) (to within 1), from Machin's formula in integer arithmetic."""
    def arctan_inv(k: int) -> int:  # atan(1/k) * 2^(bits + 16)
        one, total, n, term = 1 << (bits + 16), 0, 0, (1 << (bits + 16)) // k
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


def _lookup(m: _Math, index, table: dict, ty):
    """table[index] per lane for a small integer table, as a chain of selects (no memory, vectorizes)."""
    items = list(table.items())
    out = const(ty, items[0][1])
    for key, value in items[1:]:
        out = m.b.select(m.b.icmp_signed("==", index, m.i32(key)), const(ty, value), out)
    return out


def _reduce_huge(m: _Math, md: _Math, ax):
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


def _double(m: _Math) -> _Math:
    """The _Math of double with m's lanes (m itself if it is double)."""
    return m if m.ity.width == 64 else _Math(m.b, ir.VectorType(F64, m.lanes) if m.lanes else F64)


def _single(m: _Math) -> _Math:
    return m if m.ity.width == 32 else _Math(m.b, ir.VectorType(F32, m.lanes) if m.lanes else F32)


def _convert(m_from: _Math, m_to: _Math, v):
    if m_from.ty == m_to.ty:
        return v
    return m_from.b.fpext(v, m_to.ty) if m_to.ity.width == 64 else m_from.b.fptrunc(v, m_to.ty)


def _reduce_pio2(m: _Math, x, x32):
    """x = n pi/2 + r: (n mod 4 as i32, r in double, the _Math of double); n and r take x's sign. x32 is x as a
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


def _sin_cos_of_reduced(md: _Math, r):
    z = md.mul(r, r)
    return md.add(r, md.mul(md.mul(r, z), md.poly(z, SIN_TERMS))), md.poly(z, COS_TERMS)


def _trig(m: _Math, x, which: str):
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


def _asin_series(md: _Math, t, z):
    return md.mul(t, md.poly(z, ASIN_TERMS))


def _asin_acos(m: _Math, x, which: str):
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


def _asin(m: _Math, x):
    return _asin_acos(m, x, "asin")


def _acos(m: _Math, x):
    return _asin_acos(m, x, "acos")


def _atan(m: _Math, x):
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


# ----------------------------------------------------------------------------------------------- max / min

def _non_nan_constant(v) -> bool:
    """v is a float constant (scalar or vector) none of whose lanes is NaN."""
    if not isinstance(v, ir.Constant):
        return False
    values = v.constant if isinstance(v.constant, (list, tuple)) else [v.constant]
    values = [c.constant if isinstance(c, ir.Constant) else c for c in values]
    return all(isinstance(c, (int, float)) and not math.isnan(c) for c in values)


def float_max_min(builder: ir.IRBuilder, op: str, a, b) -> ir.Value:
    """max(a, b) or min(a, b) of two floats of one type, NaN if either is NaN (numpy's maximum/minimum, and
    onnxruntime's Max, Min, Relu and Clip). `a < b ? b : a` is one vmaxps (its NaN-in-`a` case is `a`); the NaN
    test of `b` is one compare into a mask register and a masked move, and is left out when `b` (or `a`, then
    swapped) is a constant that is not NaN: relu's max(x, 0) and clip's bounds stay one instruction each.
    Signed zeros: max(-0, +0) is whichever the select picks (both compare equal), as in onnxruntime."""
    if _non_nan_constant(a):
        a, b = b, a
    pick_b = builder.fcmp_ordered("<", a, b) if op == "max" else builder.fcmp_ordered("<", b, a)
    result = builder.select(pick_b, b, a)
    if _non_nan_constant(b):
        return result
    return builder.select(builder.fcmp_unordered("uno", b, b), b, result)


def const(ty: ir.Type, value) -> ir.Constant:
    """A constant of scalar or vector type `ty` (vectors get `value` in every lane)."""
    if isinstance(ty, ir.VectorType):
        return vector_constant(ty, value)
    return ir.Constant(ty, value)


_VECTOR_CONSTANTS: dict = {}


def vector_constant(ty: ir.VectorType, value) -> ir.Constant:
    """<N x T> with `value` in every lane, made once per (type, value): an ir.Constant caches its text, and
    formatting a 16-lane constant anew at each use was a third of emitting an unrolled Winograd kernel.
    Keyed by repr(value) so that 0.0 and -0.0 (equal, same hash) stay apart."""
    key = (ty, type(value), repr(value))
    c = _VECTOR_CONSTANTS.get(key)
    if c is None:
        c = _VECTOR_CONSTANTS[key] = ir.Constant(ty, value if value is ir.Undefined else [value] * ty.count)
    return c


def _floor_divmod(builder: ir.IRBuilder, a, b, want_mod: bool) -> ir.Value:
    """Python's // or %: truncating sdiv/srem, then one step down where the remainder's sign differs from b's."""
    q, r = builder.sdiv(a, b), builder.srem(a, b)
    zero = const(a.type, 0)
    fix = builder.and_(builder.icmp_signed("!=", r, zero), builder.icmp_signed("<", builder.xor(r, b), zero))
    if want_mod:
        return builder.select(fix, builder.add(r, b), r)
    return builder.sub(q, builder.zext(fix, a.type))


def _unsigned_divmod(builder: ir.IRBuilder, a, b, want_mod: bool) -> ir.Value:
    """a // b or a % b on unsigned integers; a divisor of 0 divides by 1 and gives 0 (udiv traps on 0)."""
    zero = const(a.type, 0)
    if isinstance(b, ir.Constant):
        return builder.urem(a, b) if want_mod else builder.udiv(a, b)
    is_zero = builder.icmp_unsigned("==", b, zero)
    safe = builder.select(is_zero, const(a.type, 1), b)
    return builder.select(is_zero, zero, builder.urem(a, safe) if want_mod else builder.udiv(a, safe))


def int_floor_divmod(builder: ir.IRBuilder, a, b, want_mod: bool, unsigned: bool = False) -> ir.Value:
    """a // b or a % b on integers (scalars or vectors), as Python. A divisor known only at run time (data, not
    index arithmetic) may be 0 or -1, on which x86's idiv traps (x / 0, INT_MIN / -1): it divides by 1 instead
    and the result is fixed up: x // 0 = x % 0 = 0 (numpy's answer), x // -1 = -x (wrapping), x % -1 = 0.
    unsigned: udiv / urem (floor and truncation agree), a divisor of 0 likewise giving 0."""
    if unsigned:
        return _unsigned_divmod(builder, a, b, want_mod)
    if isinstance(b, ir.Constant):
        return _floor_divmod(builder, a, b, want_mod)
    zero, one, minus_one = (const(a.type, v) for v in (0, 1, -1))
    is_zero, is_m1 = builder.icmp_signed("==", b, zero), builder.icmp_signed("==", b, minus_one)
    traps = builder.or_(is_zero, is_m1)
    result = _floor_divmod(builder, a, builder.select(traps, one, b), want_mod)
    if want_mod:
        return builder.select(traps, zero, result)
    return builder.select(is_zero, zero, builder.select(is_m1, builder.sub(zero, a), result))


# ----------------------------------------------------------------------------------------------- dispatch

_POLYNOMIAL = {"exp": _exp, "log": _log, "tanh": _tanh, "sigmoid": _sigmoid, "erf": _erf, "pow": _pow,
               "sin": lambda m, x: _trig(m, x, "sin"), "cos": lambda m, x: _trig(m, x, "cos"),
               "tan": lambda m, x: _trig(m, x, "tan"), "asin": _asin, "acos": _acos, "atan": _atan}


_DOUBLE_ARGUMENTS = {"sin", "cos", "tan", "asin", "acos", "atan"}  # computed in double anyway: take float64 as is


def emit_intrinsic(builder: ir.IRBuilder, name: str, args: list) -> ir.Value:
    """Emit intrinsic `name` on float args of one type (scalar or <N x float|double>); returns a value of that type."""
    if name not in INTRINSICS:
        raise NotImplementedError(f"codegen: unknown intrinsic {name!r}; known: {sorted(INTRINSICS)}")
    intrinsic = INTRINSICS[name]
    if len(args) != intrinsic.arity:
        raise ValueError(f"codegen: intrinsic {name} takes {intrinsic.arity} argument(s), got {len(args)}")
    ty = args[0].type
    scalar = ty.element if isinstance(ty, ir.VectorType) else ty
    if scalar not in (F32, F64) or any(a.type != ty for a in args):
        got = [str(a.type) for a in args]
        raise TypeError(f"codegen: intrinsic {name} needs float arguments of one type, got {got}")
    if intrinsic.cost == "instruction":
        return _Math(builder, ty).call(name, *args)
    if scalar == F64 and name not in _DOUBLE_ARGUMENTS:  # computed in float32 precision (module docstring)
        narrow = ir.VectorType(F32, ty.count) if isinstance(ty, ir.VectorType) else F32
        res = emit_intrinsic(builder, name, [builder.fptrunc(a, narrow) for a in args])
        return builder.fpext(res, ty)
    return _POLYNOMIAL[name](_Math(builder, ty), *args)

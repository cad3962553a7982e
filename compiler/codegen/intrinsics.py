"""Math intrinsics as inline LLVM IR, for float scalars and float vectors alike.

`emit_intrinsic(builder, name, args)` emits the code of one `te.Call` in place; the names, arities and cost classes
are relayish/intrinsics.py's table. The "instruction" ones map to `llvm.*` intrinsics (single instructions on x86-64
with SSE4.1). The "polynomial" ones (`_POLYNOMIAL` below) are written out here as range reduction + polynomial, so
that they vectorize with the code around them and the module never calls libm: a compiled model depends on no
library for compute.

Accuracy (float32, max error against float64 references over 1M random inputs across each function's range): exp
1.22 ulp, log 1.78, tanh 1.36, sigmoid 2.36, erf 1.09 (on AVX-512 vectors, where exp scales by vscalefps and tanh
and erf take reciprocals by vrcp14ps and a Newton step: exp 1.21, tanh 1.28, erf 1.04), pow 0.50 (evaluated in double, rounded once; a constant
exponent 1/4, 1/2 or 3/4 from square roots in double, rounded once); relative error <= 2.1e-7 everywhere. sin, cos,
tan, asin, acos, atan are evaluated in double and rounded once: <= 0.5000040 ulp over 1M inputs spanning every
float32 exponent (sin / cos / tan of huge arguments included; trig.py). tests/test_codegen.py holds them to 1.5-2.5
ulp. Special values follow C99 / numpy: NaN in -> NaN out, exp(-inf) = 0, exp(+large) = inf, log(0) = -inf, log(<0)
= NaN, tanh(+-inf) = +-1, pow per C99 Annex F (pow(x, 0) = 1, pow(1, y) = 1, pow(-8, 1/3) = NaN, signed zeros and
infinities). float64 arguments are computed in float32 precision (rounded down, computed, widened): documented
limitation. The trigonometric functions take float64 arguments as they are (their series are good to ~1e-11
relative, better than float32, not float64), except that sin / cos / tan reduce |x| >= 2^19 after rounding x to
float32.

Polynomial coefficients are not magic numbers: `fit_coefficients()` derives them (least-squares fits on Chebyshev
nodes in float64, close to minimax, rounded to float32); the tables are its output, written out.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from relayish.intrinsics import INTRINSICS

from .mathbase import F32, F64, I32, Math, const
from .trig import _acos, _asin, _atan, _trig

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
TANH_CLAMP = 20.0  # tanh(x) rounds to +-1 for |x| >= 9.02: 2|x| clamped here, e^(2|x|) + 1 stays finite
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


# ----------------------------------------------------------------------------------------------- float32 kernels

def _exp(m: Math, x):
    """exp(x) = 2^n e^r, n = round(x / ln2), r = x - n ln2 (Cody-Waite: ln2 split so n * hi is exact). Where
    vscalefps scales (AVX-512), a NaN passes through the clamp and every step after it, so no final NaN test:
    two instructions of ~19 per vector (softmax of long rows is bound by its exp)."""
    xc = m.clamp(x, -104.0, 89.0, keep_nan=m.has_scalef())  # beyond: the result is 0 or inf after scaling
    n = m.call("floor", m.add(m.mul(xc, m.f(1 / _LN2)), m.f(0.5)))
    r = m.sub(xc, m.mul(n, m.f(0.693359375)))
    r = m.sub(r, m.mul(n, m.f(-2.12194440e-4)))
    p = m.add(m.add(m.f(1.0), r), m.mul(m.mul(r, r), m.poly(r, EXP_P)))
    scaled = m.scalef(p, n)  # AVX-512: one instruction for the two-step scaling below
    if scaled is not None:
        return scaled
    ni = m.to_int(n)
    n1 = m.b.ashr(ni, m.i(1))  # scale in two steps so 2^n1, 2^n2 are normal floats and denormal results round once
    n2 = m.b.sub(ni, n1)
    res = m.mul(m.mul(p, m.pow2i(n1)), m.pow2i(n2))
    return m.sel(m.isnan(x), x, res)


def _frexp(m: Math, x):
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


def _log(m: Math, x):
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


def _tanh(m: Math, x):
    a = m.call("fabs", x)
    z = m.mul(x, x)
    small = m.add(x, m.mul(m.mul(x, z), m.poly(z, TANH_P)))
    a2 = m.mul(m.f(2.0), a)
    a2 = m.sel(m.gt(a2, m.f(TANH_CLAMP)), m.f(TANH_CLAMP), a2)  # tanh rounds to 1 there; keeps e + 1 finite
    e = _exp(m, a2)
    large = m.call("copysign", m.sub(m.f(1.0), m.mul(m.f(2.0), m.recip(m.add(e, m.f(1.0))))), x)
    return m.sel(m.lt(a, m.f(TANH_SMALL)), small, large)


def _sigmoid(m: Math, x):
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) for x < 0: exp never overflows, tiny results keep precision."""
    e = _exp(m, m.sub(m.f(0.0), m.call("fabs", x)))
    return m.div(m.sel(m.lt(x, m.f(0.0)), e, m.f(1.0)), m.add(m.f(1.0), e))


def _erf(m: Math, x):
    a = m.call("fabs", x)
    small = m.add(x, m.mul(x, m.poly(m.mul(x, x), ERF_SMALL_P)))
    ac = m.sel(m.gt(a, m.f(ERF_CLAMP)), m.f(ERF_CLAMP), a)  # NaN passes through
    q = m.poly(m.sub(m.recip(ac), m.f(ERF_U_CENTER)), ERF_LARGE_Q)
    tail = m.mul(_exp(m, m.sub(m.f(0.0), m.mul(ac, ac))), q)
    large = m.call("copysign", m.sub(m.f(1.0), tail), x)
    return m.sel(m.lt(a, m.f(1.0)), small, large)


# ----------------------------------------------------------------------------------------------- pow (in double)

def _log_f64(md: Math, mant32, e32):
    """log(mant * 2^e) in double from a float32 mantissa in [1/sqrt2, sqrt2): 2 atanh series to ~1e-15."""
    f = md.sub(md.b.fpext(mant32, md.ty), md.f(1.0))
    t = md.div(f, md.add(md.f(2.0), f))
    z = md.mul(t, t)
    series = md.poly(z, [1.0 / (2 * k + 1) for k in range(9)])
    return md.add(md.mul(md.b.fpext(e32, md.ty), md.f(_LN2)), md.mul(md.mul(md.f(2.0), t), series))


def _exp_f64(md: Math, w):
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


def _root_power(m: Math, x, k: float):
    """pow(x, k) for k in _ROOT_POWERS from square roots in double, rounded once (<= 0.5 ulp, like the general pow,
    which takes ~40 double operations: LRN's x / (1 + s)^0.75): sqrt(x), sqrt(sqrt(x)), sqrt(x) * sqrt(sqrt(x)).
    C99's cases: a negative base gives NaN (sqrt's), pow(+-0, k) = +0 (x + 0 turns -0 into +0), pow(-inf, k) = +inf."""
    b = m.b
    md = Math(b, ir.VectorType(F64, m.lanes) if m.lanes else F64)
    x64 = b.fpext(b.fadd(x, m.f(0.0)), md.ty)  # no fast-math flag: -0 + 0 must give +0
    s = md.call("sqrt", x64)
    r = s if k == 0.5 else md.call("sqrt", s)
    if k == 0.75:
        r = md.mul(s, r)
    return m.sel(m.eq(x, m.f(-math.inf)), m.f(math.inf), b.fptrunc(r, m.ty))


def _pow(m: Math, x, y):
    """pow(x, y) = sign * exp(y log|x|), the product and exp in double; special cases per C99 Annex F. A constant
    exponent of _ROOT_POWERS takes square roots instead (_root_power)."""
    k = _splat_value(y)
    if k in _ROOT_POWERS:
        return _root_power(m, x, k)
    b = m.b
    dty = ir.VectorType(F64, m.lanes) if m.lanes else F64
    md = Math(b, dty)
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
        return Math(builder, ty).call(name, *args)
    if scalar == F64 and name not in _DOUBLE_ARGUMENTS:  # computed in float32 precision (module docstring)
        narrow = ir.VectorType(F32, ty.count) if isinstance(ty, ir.VectorType) else F32
        res = emit_intrinsic(builder, name, [builder.fptrunc(a, narrow) for a in args])
        return builder.fpext(res, ty)
    return _POLYNOMIAL[name](Math(builder, ty), *args)

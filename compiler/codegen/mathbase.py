"""What the math intrinsics' emitters share: the LLVM types, the one fast-math flag, constants of scalar or vector
type (`const`, `vector_constant`) and `Math`, emission helpers over one float type (scalar or vector) whose
constants splat themselves to the right shape."""
from __future__ import annotations

import functools

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
FAST = ("contract",)  # the only fast-math flag we use: lets a*b+c become one FMA; never reassociates


class Math:
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

    def has_scalef(self) -> bool:
        """Whether scalef is one instruction here (see scalef)."""
        return self._avx512_vector()

    def scalef(self, x, n):
        """x * 2^n for a float n holding an integer, one AVX-512 vscalefps (rounded once, overflow to inf, tiny
        results denormal), or None where the type or the host has none: vectors of 16 float32 lanes with
        avx512f, of 8 or 4 with avx512vl too."""
        if not self._avx512_vector():
            return None
        name = f"llvm.x86.avx512.mask.scalef.ps.{self.lanes * 32}"
        mask = ir.IntType(16 if self.lanes == 16 else 8)
        extra = [I32] if self.lanes == 16 else []  # the 512-bit form takes a rounding mode (4: the current one)
        module = self.b.module
        fn = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(self.ty, [self.ty, self.ty, self.ty, mask] + extra), name)
        return self.b.call(fn, [x, n, x, ir.Constant(mask, -1)] + [I32(4)] * len(extra))

    def recip(self, d):
        """1 / d: on AVX-512 vectors vrcp14ps (14 bits) and one Newton step (error ~2^-28, under half an ulp before
        the caller's rounding), for finite d only (rcp(inf) = 0 makes the step 0 x inf = NaN); else a division."""
        if not self._avx512_vector():
            return self.div(self.f(1.0), d)
        name = f"llvm.x86.avx512.rcp14.ps.{self.lanes * 32}"
        mask = ir.IntType(16 if self.lanes == 16 else 8)
        module = self.b.module
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(self.ty, [self.ty, self.ty, mask]), name)
        r = self.b.call(fn, [d, d, ir.Constant(mask, -1)])
        err = self.sub(self.f(1.0), self.mul(d, r))  # (contract: one FMA each)
        return self.add(r, self.mul(r, err))

    def _avx512_vector(self) -> bool:
        """A vector of 16 float32 lanes on an avx512f host, or of 8 or 4 with avx512vl too."""
        return self.lanes in (4, 8, 16) and self.ty.element == F32 and _host_has("avx512f") and \
            (self.lanes == 16 or _host_has("avx512vl"))

    def pow2i(self, n_int):
        """2^n as a float for an integer vector/scalar n in the normal exponent range."""
        biased = self.b.add(n_int, self.i(self.bias))
        return self.b.bitcast(self.b.shl(biased, self.i(self.mant_bits)), self.ty)

    def to_int(self, x):
        return self.b.fptosi(x, self._shape(self.ity))

    def clamp(self, x, lo, hi, keep_nan: bool = False):
        """min(max(x, lo), hi) with NaN mapped to lo (callers restore NaN at the end), or kept (keep_nan: one
        vmaxps and one vminps either way)."""
        below = self.b.fcmp_ordered("<", x, self.f(lo)) if keep_nan else self.b.fcmp_unordered("<", x, self.f(lo))
        x = self.sel(below, self.f(lo), x)
        return self.sel(self.gt(x, self.f(hi)), self.f(hi), x)


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


@functools.lru_cache(maxsize=None)
def _host_has(feature: str) -> bool:
    """Whether this machine's CPU has `feature` (kernels are compiled for the host: codegen.host.host_target)."""
    from .host import host_target
    return f"+{feature}" in host_target()["features"].split(",")

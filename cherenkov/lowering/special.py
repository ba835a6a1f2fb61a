"""Special functions as compositions of elementwise ops, following ATen's CPU formulas
(digamma, and polygamma of order 0; i0 and i0e, the modified Bessel function of order 0 and its
exponentially scaled form: Cephes' Chebyshev series over [0, 8] and, in 32 / |x|, beyond).

digamma (ATen's calc_digamma): 0 -> -copysign(inf, x); negative integers (and -inf) -> NaN;
other negatives by reflection, digamma(1 - x) - pi / tan(pi * frac(x)); positives pushed to
>= 10 by ten unrolled steps of digamma(x) = digamma(x + 1) - 1 / x (a step applies only while
x < 10), then exactly PSI_10 at 10, else the asymptotic series. 16-bit inputs compute in fp32.
"""
from __future__ import annotations

import math

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten
PSI_10 = 2.25175258906672110764
ASYMPTOTIC = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)


@lowering(aten.digamma.default, aten.special_digamma.default)
def _digamma(ctx, x):
    out_dtype = ctx.out.dtype
    if not out_dtype.is_floating_point:
        raise Unsupported(f"digamma into {out_dtype}")
    d = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    b = lambda op, p, q: ctx.binary(op, p, q, d)                        # noqa: E731
    test = lambda op, p, q: ctx.pointwise(op, [p, q], torch.bool, d)    # noqa: E731
    x = ctx.cast(x, d)
    negative = test(Op.LT, x, 0.0)
    v = ctx.where(negative, b(Op.SUB, 1.0, x), x, d)
    result = ctx.const(0.0, d)
    for _ in range(10):
        small = test(Op.LT, v, 10.0)
        result = b(Op.SUB, result, ctx.where(small, ctx.unary(Op.RECIPROCAL, v, d), 0.0, d))
        v = ctx.where(small, b(Op.ADD, v, 1.0), v, d)
    z = ctx.unary(Op.RECIPROCAL, b(Op.MUL, v, v), d)
    poly = ctx.const(ASYMPTOTIC[0], d)
    for a in ASYMPTOTIC[1:]:
        poly = b(Op.ADD, b(Op.MUL, poly, z), a)
    y = ctx.where(test(Op.LT, v, 1.0e17), b(Op.MUL, z, poly), 0.0, d)
    series = b(Op.SUB, b(Op.SUB, b(Op.ADD, result, ctx.unary(Op.LOG, v, d)),
                         b(Op.DIV, 0.5, v)), y)
    value = ctx.where(test(Op.EQ, v, 10.0), b(Op.ADD, result, PSI_10), series, d)
    whole = ctx.unary(Op.TRUNC, x, d)
    frac = b(Op.SUB, x, whole)
    reflected = b(Op.SUB, value, b(Op.DIV, math.pi, ctx.unary(Op.TAN, b(Op.MUL, frac, math.pi),
                                                               d)))
    value = ctx.where(negative, ctx.where(test(Op.EQ, x, whole), float("nan"), reflected, d),
                      value, d)
    pole = ctx.pointwise(Op.COPYSIGN, [float("inf"), ctx.unary(Op.NEG, x, d)], d)
    return ctx.cast(ctx.where(test(Op.EQ, x, 0.0), pole, value, d), out_dtype)


# Cephes' Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and of exp(-x) sqrt(x) I0(x) on
# [8, inf) (in 32 / x), as ATen's calc_i0 has them
I0E_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
         1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
         9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
         1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
         -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
         1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
         -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
         1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
I0E_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
         7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
         3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
         2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
         8.04490411014108831608E-1)


def _chebyshev(ctx, y, coefficients, d):
    """Cephes' chbevl: the Chebyshev series with these coefficients at y (Clenshaw)."""
    b0, b1, b2 = ctx.const(coefficients[0], d), ctx.const(0.0, d), ctx.const(0.0, d)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = ctx.binary(Op.ADD, ctx.binary(Op.SUB, ctx.binary(Op.MUL, y, b1, d), b2, d), c, d)
    return ctx.binary(Op.MUL, ctx.binary(Op.SUB, b0, b2, d), 0.5, d)


@lowering(aten.i0.default, aten.special_i0e.default)
def _i0(ctx, x):
    """i0(x) = exp(|x|) chbevl(|x| / 2 - 2, A) for |x| <= 8, else exp(|x|) chbevl(32 / |x| - 2,
    B) / sqrt(|x|); i0e without the exp. 16-bit and integer inputs compute in fp32."""
    out_dtype = ctx.out.dtype
    if not out_dtype.is_floating_point:
        raise Unsupported(f"i0 into {out_dtype}")
    d = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    a = ctx.unary(Op.ABS, ctx.cast(x, d), d)
    near = _chebyshev(ctx, ctx.binary(Op.SUB, ctx.binary(Op.DIV, a, 2.0, d), 2.0, d), I0E_A, d)
    far = ctx.binary(Op.DIV, _chebyshev(ctx, ctx.binary(Op.SUB, ctx.binary(Op.DIV, 32.0, a, d),
                                                        2.0, d), I0E_B, d),
                     ctx.unary(Op.SQRT, a, d), d)
    value = ctx.where(ctx.pointwise(Op.LE, [a, 8.0], torch.bool, d), near, far, d)
    if ctx.target.overloadpacket is aten.i0:
        value = ctx.binary(Op.MUL, ctx.unary(Op.EXP, a, d), value, d)
    return ctx.cast(value, out_dtype)


@lowering(aten.polygamma.default)
def _polygamma(ctx, n, x):
    """polygamma(0, x) is digamma; higher orders stay PyTorch's."""
    if n != 0:
        raise Unsupported(f"polygamma of order {n}")
    return _digamma(ctx, x)


@lowering(aten.angle.default)
def _angle(ctx, x):
    """A real number's argument: pi below 0 (-inf too), 0 at or above (-0.0 too), NaN kept."""
    out_dtype = ctx.out.dtype
    if not out_dtype.is_floating_point:
        raise Unsupported(f"angle into {out_dtype}")
    below = ctx.pointwise(Op.LT, [x, 0], torch.bool, x.dtype)
    value = ctx.where(below, math.pi, 0.0, out_dtype)
    if not x.dtype.is_floating_point:
        return value
    return ctx.where(ctx.pointwise(Op.ISNAN, [x], torch.bool, x.dtype), ctx.cast(x, out_dtype),
                     value, out_dtype)

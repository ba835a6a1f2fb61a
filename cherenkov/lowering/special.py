"""Special functions as compositions of elementwise ops, following ATen's CPU formulas
(digamma, and polygamma of order 0).

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

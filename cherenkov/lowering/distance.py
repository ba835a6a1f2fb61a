"""Lowerings of cdist (`_cdist_forward`, `_cdist_backward`): every pair's p-norm distance
computed directly -- |x1[i] - x2[j]| over the feature dim, raised, summed, rooted -- in one
reduction over that dim, for any compute_mode (eager's p = 2 above 25 rows expands the square
through a matmul instead; the direct sum rounds no worse). p = 0 counts the differing
features, p = inf takes their largest difference. The backward sums ATen's per-pair terms
over x2's rows.

    cdist(x1 (*B, P, D), x2 (*B, R, D), p)  ->  (*B, P, R)
"""
from __future__ import annotations

import math

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten


def _pair_differences(ctx, x1, x2, p, distances):
    """x1[..., i, :] - x2[..., j, :] over (*B, P, R, D), in the output's dtype; Unsupported
    for 16-bit floats, a negative p, or batch dims that broadcast (`distances`: the (*B, P, R)
    shape the pairs' distances have)."""
    dtype = ctx.out.dtype
    if dtype not in (torch.float32, torch.float64) or p < 0:
        raise Unsupported("cdist of 16-bit floats or with a negative p")
    *batch, P, D = x1.shape
    R = x2.shape[-2]
    if tuple(x2.shape[:-2]) != tuple(batch) or tuple(distances) != (*batch, P, R):
        raise Unsupported("cdist with broadcast batch dims")
    shape = (*batch, P, R, D)
    a = ctx.expand(ctx.reshape(x1, (*batch, P, 1, D)), shape)
    b = ctx.expand(ctx.reshape(x2, (*batch, 1, R, D)), shape)
    return ctx.pointwise(Op.SUB, [a, b], dtype)


@lowering(aten._cdist_forward.default)
def _cdist_forward(ctx, x1, x2, p, compute_mode=None):
    dtype = ctx.out.dtype
    diff = ctx.pointwise(Op.ABS, [_pair_differences(ctx, x1, x2, p, ctx.out.shape)], dtype)
    last = len(diff.shape) - 1
    if p == 0:
        nonzero = ctx.cast(ctx.pointwise(Op.NE, [diff, 0.0], torch.bool, dtype), dtype)
        return ctx.reduce(Op.SUM, nonzero, [last], False, dtype)
    if math.isinf(p):
        return ctx.reduce(Op.MAX, diff, [last], False, dtype)
    if p == 1:
        return ctx.reduce(Op.SUM, diff, [last], False, dtype)
    if p == 2:
        squares = ctx.pointwise(Op.MUL, [diff, diff], dtype)
        return ctx.pointwise(Op.SQRT, [ctx.reduce(Op.SUM, squares, [last], False, dtype)], dtype)
    powered = ctx.pointwise(Op.POW, [diff, float(p)], dtype)
    total = ctx.reduce(Op.SUM, powered, [last], False, dtype)
    return ctx.pointwise(Op.POW, [total, 1.0 / p], dtype)


@lowering(aten._cdist_backward.default)
def _cdist_backward(ctx, grad, x1, x2, p, dist):
    """x1's gradient, ATen's per-pair terms summed over x2's rows: for diff = x1[i] - x2[j],
    p = 1 sign(diff); p = 2 diff / dist; p = inf sign(diff) where |diff| is the distance;
    other p sign(diff) |diff|^(p-1) / dist^(p-1) (p < 2; 0 where diff is 0 and p < 1) or
    diff |diff|^(p-2) / dist^(p-1); 0 where the distance is 0, and for p = 0."""
    dtype = ctx.out.dtype
    diff = _pair_differences(ctx, x1, x2, p, dist.shape)
    if p == 0:
        return ctx.const(0.0, dtype, tuple(x1.shape))
    shape = diff.shape
    d = ctx.expand(ctx.reshape(dist, (*dist.shape, 1)), shape)
    g = ctx.expand(ctx.reshape(grad, (*dist.shape, 1)), shape)
    size = ctx.pointwise(Op.ABS, [diff], dtype)
    sign = ctx.pointwise(Op.SIGN, [diff], dtype)
    if p == 1:
        term = sign
    elif math.isinf(p):
        term = ctx.where(ctx.pointwise(Op.EQ, [size, d], torch.bool, dtype), sign, 0.0, dtype)
    elif p == 2:
        term = ctx.pointwise(Op.DIV, [diff, d], dtype)
    elif p < 2:
        term = ctx.pointwise(Op.DIV, [ctx.pointwise(Op.MUL, [sign, ctx.pointwise(
            Op.POW, [size, p - 1], dtype)], dtype), ctx.pointwise(Op.POW, [d, p - 1], dtype)],
            dtype)
        if p < 1:
            zero_diff = ctx.pointwise(Op.EQ, [diff, 0.0], torch.bool, dtype)
            term = ctx.where(zero_diff, 0.0, term, dtype)
    else:
        term = ctx.pointwise(Op.DIV, [ctx.pointwise(Op.MUL, [diff, ctx.pointwise(
            Op.POW, [size, p - 2], dtype)], dtype), ctx.pointwise(Op.POW, [d, p - 1], dtype)],
            dtype)
    if not math.isinf(p) and p != 1:
        term = ctx.where(ctx.pointwise(Op.EQ, [d, 0.0], torch.bool, dtype), 0.0, term, dtype)
    parts = ctx.pointwise(Op.MUL, [g, term], dtype)
    return ctx.reduce(Op.SUM, parts, [len(shape) - 2], False, dtype)

"""Lowering of cdist's forward (`_cdist_forward`): every pair's p-norm distance computed
directly -- |x1[i] - x2[j]| over the feature dim, raised, summed, rooted -- in one reduction
over that dim, for any compute_mode (eager's p = 2 above 25 rows expands the square through a
matmul instead; the direct sum rounds no worse). p = 0 counts the differing features, p = inf
takes their largest difference. The backward stays PyTorch's.

    cdist(x1 (*B, P, D), x2 (*B, R, D), p)  ->  (*B, P, R)
"""
from __future__ import annotations

import math

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten


@lowering(aten._cdist_forward.default)
def _cdist_forward(ctx, x1, x2, p, compute_mode=None):
    dtype = ctx.out.dtype
    if dtype not in (torch.float32, torch.float64) or p < 0:
        raise Unsupported("cdist of 16-bit floats or with a negative p")
    *batch, P, D = x1.shape
    R = x2.shape[-2]
    if tuple(x2.shape[:-2]) != tuple(batch) or tuple(ctx.out.shape) != (*batch, P, R):
        raise Unsupported("cdist with broadcast batch dims")
    shape = (*batch, P, R, D)
    a = ctx.expand(ctx.reshape(x1, (*batch, P, 1, D)), shape)
    b = ctx.expand(ctx.reshape(x2, (*batch, 1, R, D)), shape)
    diff = ctx.pointwise(Op.ABS, [ctx.pointwise(Op.SUB, [a, b], dtype)], dtype)
    last = len(shape) - 1
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

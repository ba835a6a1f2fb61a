"""Lowerings of bucketize and searchsorted: each value's position among sorted boundaries,
counted instead of binary-searched -- the number of boundaries below it (left, or `right=False`)
or at most it (right) -- a comparison per (value, boundary) pair reduced over the boundaries,
which a kernel fuses with the values' producer. A NaN value goes past every boundary, as in
eager. Up to MAX_BOUNDARIES boundaries per row (the count does M comparisons where a search
does log M); more stay PyTorch's. Boundaries that are not sorted give a count where eager's
binary search gives some other index (eager documents neither).

    bucketize(x, b)         # x: (*S), b: (M,)  ->  SUM over j of (b[j] < x), (*S, M)
    searchsorted(s, v)      # s: (*L, M), v: (*L, K): the same per row of s
"""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten
MAX_BOUNDARIES = 1024


def _positions(ctx, values, sorted_rows, right: bool, out_int32: bool):
    """values (*L, K) placed among sorted_rows (*L, M) (or (M,) for every value)."""
    M = sorted_rows.shape[-1]
    if M > MAX_BOUNDARIES:
        raise Unsupported(f"{M} boundaries: a binary search's work, not a count's")
    if values.dtype != sorted_rows.dtype:
        raise Unsupported("values and boundaries of different dtypes")
    shape = (*values.shape, M)
    v = ctx.expand(ctx.reshape(values, (*values.shape, 1)), shape)
    if len(sorted_rows.shape) == 1:
        b = ctx.expand(sorted_rows, shape)
    else:
        b = ctx.expand(ctx.reshape(sorted_rows, (*sorted_rows.shape[:-1], 1, M)), shape)
    below = ctx.pointwise(Op.LE if right else Op.LT, [b, v], torch.bool, values.dtype)
    count = ctx.reduce(Op.SUM, ctx.cast(below, torch.int64), [len(shape) - 1], False, torch.int64)
    if values.dtype.is_floating_point:         # NaN: past every boundary
        nan = ctx.pointwise(Op.ISNAN, [values], torch.bool, values.dtype)
        count = ctx.where(nan, M, count, torch.int64)
    return ctx.cast(count, torch.int32 if out_int32 else torch.int64)


@lowering(aten.bucketize.Tensor)
def _bucketize(ctx, x, boundaries, *, out_int32=False, right=False):
    if len(boundaries.shape) != 1:
        raise Unsupported("bucketize with boundaries that are not 1-d")
    return _positions(ctx, x, boundaries, right, out_int32)


@lowering(aten.searchsorted.Tensor)
def _searchsorted(ctx, sorted_sequence, values, *, out_int32=False, right=False, side=None,
                  sorter=None):
    if sorter is not None:
        raise Unsupported("searchsorted with a sorter")
    if len(sorted_sequence.shape) > 1 and (
            len(values.shape) != len(sorted_sequence.shape)
            or tuple(values.shape[:-1]) != tuple(sorted_sequence.shape[:-1])):
        raise Unsupported("searchsorted rows that do not match the values' leading dims")
    return _positions(ctx, values, sorted_sequence, right or side == "right", out_int32)

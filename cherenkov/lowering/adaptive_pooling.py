"""Lowerings of adaptive pooling: _adaptive_avg_pool{2,3}d, adaptive_max_pool{2,3}d and their
backwards (1-d through 2-d), on pooling.py's pieces.

Window o along a dim of S elements pooled into O is [o*S // O, ceil((o+1)*S / O)), as eager
has it. Where every O divides its S the windows are a plain pooling's (kernel = stride =
S / O: `Op.WINDOW`, affine addresses). Otherwise each window's elements are read at run-time
positions, up to the longest window's count, the rest masked; the backward gathers, for each
input element, the (at most `most`) windows that hold it.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import numel
from cherenkov.ir.ops import Op
from cherenkov.lowering.pooling import (at_windows, average, average_backward, both, clamp,
                                        compare, flat_index, floats_only, gradient_of_maxima,
                                        int_op, max_of_windows, offset, spatial_dims,
                                        sum_dtype)
from cherenkov.lowering.registry import lowering

aten = torch.ops.aten


def _even(in_spatial, out_spatial) -> tuple[int, ...] | None:
    """kernel = stride = in / out where every output size divides its input size."""
    if any(o == 0 or i % o for i, o in zip(in_spatial, out_spatial)):
        return None
    return tuple(i // o for i, o in zip(in_spatial, out_spatial))


def _bounds(S: int, O: int):
    return [((o * S) // O, -(-((o + 1) * S) // O)) for o in range(O)]


def _window_of(ctx, o, S: int, O: int):
    """Window o's [start, end) along a dim (nodes)."""
    times = int_op(ctx, Op.MUL, o, S)
    return (int_op(ctx, Op.FLOORDIV, times, O),
            int_op(ctx, Op.FLOORDIV, int_op(ctx, Op.ADD, times, S + O - 1), O))


def _members(ctx, S, O):
    """Over (*O, *longest) -- window o, its k-th element --: whether there is one, its
    position along each dim (clamped into the input), and the window's element count."""
    nd = len(S)
    longest = [max(e - b for b, e in _bounds(S[i], O[i])) for i in range(nd)]
    B = (*O, *longest)
    valid, at, count = None, [], None
    for i in range(nd):
        start, end = _window_of(ctx, ctx.iota(B, i), S[i], O[i])
        pos = int_op(ctx, Op.ADD, start, ctx.iota(B, nd + i))
        ok = compare(ctx, Op.LT, pos, end)
        valid = ok if valid is None else both(ctx, valid, ok)
        at.append(int_op(ctx, Op.MINIMUM, pos, S[i] - 1))
        n = int_op(ctx, Op.SUB, end, start)
        count = n if count is None else int_op(ctx, Op.MUL, count, n)
    return valid, at, count, longest


def _holders(ctx, S, O):
    """Over (*S, *most) -- input element e, its j-th window --: whether that window holds
    e, the window along each dim (clamped into the output), and its element count."""
    nd = len(S)
    most = []
    for i in range(nd):
        bounds = _bounds(S[i], O[i])
        most.append(max(sum(b <= e < f for b, f in bounds) for e in range(S[i])))
    B = (*S, *most)
    valid, outs, count = None, [], None
    for i in range(nd):
        e = ctx.iota(B, i)
        o = int_op(ctx, Op.ADD, int_op(ctx, Op.FLOORDIV, int_op(ctx, Op.MUL, e, O[i]), S[i]),
                   ctx.iota(B, nd + i))
        start, end = _window_of(ctx, o, S[i], O[i])
        ok = both(ctx, compare(ctx, Op.LT, o, O[i]),
                  both(ctx, compare(ctx, Op.LE, start, e), compare(ctx, Op.LT, e, end)))
        valid = ok if valid is None else both(ctx, valid, ok)
        outs.append(int_op(ctx, Op.MINIMUM, o, O[i] - 1))
        n = int_op(ctx, Op.SUB, end, start)
        count = n if count is None else int_op(ctx, Op.MUL, count, n)
    return valid, outs, count


def _trailing(t, n: int) -> list[int]:
    return list(range(len(t.shape) - n, len(t.shape)))


@lowering(aten._adaptive_avg_pool2d, aten._adaptive_avg_pool3d)
def _adaptive_avg_pool(ctx, x, output_size):
    nd = spatial_dims(ctx)
    acc = sum_dtype(x.dtype)
    S, O = tuple(x.shape[-nd:]), tuple(ctx.out.shape[-nd:])
    k = _even(S, O)
    if k is not None:
        return average(ctx, x, nd, k, k, (0,) * nd, True, None, acc)
    valid, at, count, _ = _members(ctx, S, O)
    parts = ctx.where(valid, at_windows(ctx, ctx.cast(x, acc), at, nd), 0.0, acc)
    total = ctx.reduce(Op.SUM, parts, _trailing(parts, nd), False, acc)
    count = ctx.reshape(ctx.slice_to_shape(count, (*O, *(1,) * nd)), O)   # per window
    return ctx.cast(ctx.binary(Op.DIV, total, ctx.cast(count, acc), acc), ctx.out.dtype)


@lowering(aten._adaptive_avg_pool2d_backward, aten._adaptive_avg_pool3d_backward)
def _adaptive_avg_pool_backward(ctx, grad, x):
    nd = spatial_dims(ctx)
    acc = sum_dtype(grad.dtype)
    S, O = tuple(x.shape[-nd:]), tuple(grad.shape[-nd:])
    k = _even(S, O)
    if k is not None:
        return average_backward(ctx, grad, x, nd, k, k, (0,) * nd, True, None, acc)
    valid, outs, count = _holders(ctx, S, O)
    share = ctx.binary(Op.DIV, at_windows(ctx, ctx.cast(grad, acc), outs, nd),
                       ctx.cast(count, acc), acc)
    parts = ctx.where(valid, share, 0.0, acc)
    total = ctx.reduce(Op.SUM, parts, _trailing(parts, nd), False, acc)
    return ctx.cast(total, ctx.out.dtype)


@lowering(aten.adaptive_max_pool2d, aten.adaptive_max_pool3d)
def _adaptive_max_pool(ctx, x, output_size):
    nd = spatial_dims(ctx)
    floats_only(x.dtype)
    S, O = tuple(x.shape[-nd:]), tuple(ctx.out[0].shape[-nd:])
    k = _even(S, O)
    if k is not None:
        return max_of_windows(ctx, x, nd, k, k, (0,) * nd, (1,) * nd, O)
    valid, at, _, longest = _members(ctx, S, O)
    read = ctx.where(valid, at_windows(ctx, x, at, nd), float("-inf"), x.dtype)
    flat = ctx.reshape(read, (*read.shape[: len(read.shape) - nd], numel(longest)))
    last = len(flat.shape) - 1
    values = ctx.reduce(Op.MAX, flat, [last], False, x.dtype)
    arg = ctx.reduce(Op.ARGMAX, flat, [last], False, torch.int64)
    lead = len(x.shape) - nd
    positions = []
    for i in range(nd):
        # the first window element wins a window of -inf, as eager's does
        start, _ = _window_of(ctx, ctx.iota(values.shape, lead + i), S[i], O[i])
        pos = int_op(ctx, Op.ADD, start, offset(ctx, arg, tuple(longest), i))
        positions.append(clamp(ctx, pos, 0, S[i] - 1))
    return [values, flat_index(ctx, positions, S)]


@lowering(aten.adaptive_max_pool2d_backward, aten.adaptive_max_pool3d_backward)
def _adaptive_max_pool_backward(ctx, grad, x, indices):
    nd = spatial_dims(ctx)
    acc = sum_dtype(grad.dtype)
    S, O = tuple(x.shape[-nd:]), tuple(grad.shape[-nd:])
    valid, outs, _ = _holders(ctx, S, O)
    return gradient_of_maxima(ctx, grad, indices, valid, outs, S, acc)

"""Lowerings of pooling: max_pool{2,3}d_with_indices, avg_pool{2,3}d, their backwards, and
_adaptive_avg_pool{2,3}d (and backward) where the output size divides the input's.

Forward: `Op.WINDOW` views the input as (*lead, *O, K) -- window o's K elements, the fill
(-inf, or 0 for a sum) where a window reaches past the input -- and a reduction over K gives
the max (with the argmax turned into eager's flat index into the input plane) or the sum,
divided as eager divides (the window's size within the padding, or within the input).

Backward, gathered (no atomics, as eager's kernels): each input element i and kernel offset k
name at most one window, o = (i + padding - k * dilation) / stride when that divides and lies
in the output; the element sums, over k, that window's gradient -- where the window's argmax
is i (max) or divided by the window's divisor (avg).

    dx = max_pool2d_backward(dy, x, 3, 2, 1, ...)       # x: (N, C, H, W), dy: (N, C, OH, OW)
    # IR: SUM over k of where(valid & (index[o(i, k)] == i), dy[o(i, k)], 0), (N, C, H, W, 9)

16-bit inputs sum in fp32 (as eager's kernels). When a window holds several NaNs, eager's max
index is the last, ours the first (the values agree: NaN).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, numel
from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten
LOW = (torch.float16, torch.bfloat16)


def _tuple(value, nd: int, default=None) -> tuple[int, ...]:
    v = list(value) if isinstance(value, (list, tuple)) else [value]
    if not v:
        v = list(default)
    if len(v) == 1:
        v = v * nd
    if len(v) != nd:
        raise Unsupported(f"pooling parameter {value!r} for {nd} dims")
    return tuple(int(e) for e in v)


def _params(nd, kernel, stride, padding, dilation=1):
    k = _tuple(kernel, nd)
    return k, _tuple(stride, nd, k), _tuple(padding, nd), _tuple(dilation, nd)


def _nd(ctx) -> int:
    return 3 if "3d" in ctx.target.overloadpacket.__name__ else 2


def _acc(dtype: torch.dtype) -> torch.dtype:
    if not dtype.is_floating_point:
        raise Unsupported("pooling of non-float tensors")
    return torch.float32 if dtype in LOW else dtype


def _windows(ctx, x, nd, k, s, p, d, out_spatial, fill):
    """x's windows as (*lead, *O, prod(k))."""
    lead = tuple(x.shape[: len(x.shape) - nd])
    w = Node(Op.WINDOW, (x,), (k, s, d, p, fill), ctx.meta((*lead, *out_spatial, *k), x.dtype))
    return ctx.reshape(w, (*lead, *out_spatial, numel(k)))


def _int(ctx, op, a, b):
    return ctx.pointwise(op, [a, b], torch.int64)


def _cmp(ctx, op, a, b):
    return ctx.pointwise(op, [a, b], torch.bool, torch.int64)


def _and(ctx, a, b):
    return ctx.pointwise(Op.AND, [a, b], torch.bool)


def _clamp(ctx, a, lo, hi):
    return _int(ctx, Op.MINIMUM, _int(ctx, Op.MAXIMUM, a, lo), hi)


def _offset(ctx, kk, k, i):
    """Kernel offset along dim i of the flat kernel index kk (row-major over k)."""
    return _int(ctx, Op.REMAINDER, _int(ctx, Op.FLOORDIV, kk, numel(k[i + 1:])), k[i])


@lowering(aten.max_pool2d_with_indices, aten.max_pool3d_with_indices)
def _max_pool(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    nd = _nd(ctx)
    _acc(x.dtype)
    k, s, p, d = _params(nd, kernel_size, stride, padding, dilation)
    out_spatial = tuple(ctx.out[0].shape[-nd:])
    w = _windows(ctx, x, nd, k, s, p, d, out_spatial, float("-inf"))
    last = len(w.shape) - 1
    values = ctx.reduce(Op.MAX, w, [last], False, x.dtype)
    arg = ctx.reduce(Op.ARGMAX, w, [last], False, torch.int64)
    lead, S = len(x.shape) - nd, x.shape[-nd:]
    flat = None
    for i in range(nd):
        # the chosen element's position; clamped, so a window of -inf alone names its first
        # element inside the input, as eager's does
        at = _int(ctx, Op.ADD, _int(ctx, Op.MUL, ctx.iota(values.shape, lead + i), s[i]),
                  _int(ctx, Op.MUL, _offset(ctx, arg, k, i), d[i]))
        at = _clamp(ctx, _int(ctx, Op.SUB, at, p[i]), 0, S[i] - 1)
        flat = at if flat is None else _int(ctx, Op.ADD, _int(ctx, Op.MUL, flat, S[i]), at)
    return [values, flat]


def _holding_windows(ctx, in_shape, out_spatial, nd, k, s, p, d):
    """Over (*S, prod(k)) -- input element i, kernel offset kk --: whether a window o holds
    i at kk, and o along each dim (clamped into the output where none does)."""
    S = tuple(in_shape[-nd:])
    B = (*S, numel(k))
    kk = ctx.iota(B, nd)
    valid, outs = None, []
    for i in range(nd):
        num = _int(ctx, Op.SUB, _int(ctx, Op.ADD, ctx.iota(B, i), p[i]),
                   _int(ctx, Op.MUL, _offset(ctx, kk, k, i), d[i]))
        o = _int(ctx, Op.FLOORDIV, num, s[i])
        ok = _and(ctx, _and(ctx, _cmp(ctx, Op.GE, num, 0), _cmp(ctx, Op.LT, o, out_spatial[i])),
                  _cmp(ctx, Op.EQ, _int(ctx, Op.REMAINDER, num, s[i]), 0))
        valid = ok if valid is None else _and(ctx, valid, ok)
        outs.append(_clamp(ctx, o, 0, out_spatial[i] - 1))
    return valid, outs


def _at_windows(ctx, t, outs, nd):
    """t (*lead, *O) read at the windows `outs` name: (*lead, *S, prod(k))."""
    lead = len(t.shape) - nd
    B = outs[0].shape
    return Node(Op.INDEX, (t, *outs), (tuple(range(lead, lead + nd)),),
                ctx.meta((*t.shape[:lead], *B), t.dtype))


@lowering(aten.max_pool2d_with_indices_backward, aten.max_pool3d_with_indices_backward)
def _max_pool_backward(ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    nd = _nd(ctx)
    acc = _acc(grad.dtype)
    k, s, p, d = _params(nd, kernel_size, stride, padding, dilation)
    valid, outs = _holding_windows(ctx, x.shape, grad.shape[-nd:], nd, k, s, p, d)
    S = x.shape[-nd:]
    flat = None
    for i in range(nd):
        at = ctx.iota(outs[0].shape, i)
        flat = at if flat is None else _int(ctx, Op.ADD, _int(ctx, Op.MUL, flat, S[i]), at)
    hit = _and(ctx, _cmp(ctx, Op.EQ, _at_windows(ctx, indices, outs, nd), flat), valid)
    parts = ctx.where(hit, _at_windows(ctx, ctx.cast(grad, acc), outs, nd), 0.0, acc)
    total = ctx.reduce(Op.SUM, parts, [len(parts.shape) - 1], False, acc)
    return ctx.cast(total, ctx.out.dtype)


def _divisor(ctx, outs, S, k, s, p, count_include_pad, divisor_override, acc):
    """Eager's divisor of window o (nodes `outs`, one per dim): its size within the padding
    (count_include_pad), or within the input; divisor_override when given."""
    if divisor_override:
        return ctx.const(divisor_override, acc)
    size = None
    for i, o in enumerate(outs):
        start = _int(ctx, Op.SUB, _int(ctx, Op.MUL, o, s[i]), p[i])
        end = _int(ctx, Op.MINIMUM, _int(ctx, Op.ADD, start, k[i]), S[i] + p[i])
        if not count_include_pad:
            start = _int(ctx, Op.MAXIMUM, start, 0)
            end = _int(ctx, Op.MINIMUM, end, S[i])
        n = _int(ctx, Op.SUB, end, start)
        size = n if size is None else _int(ctx, Op.MUL, size, n)
    return ctx.cast(size, acc)


@lowering(aten.avg_pool2d, aten.avg_pool3d)
def _avg_pool(ctx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    nd = _nd(ctx)
    acc = _acc(x.dtype)
    k, s, p, _ = _params(nd, kernel_size, stride, padding)
    return _average(ctx, x, nd, k, s, p, count_include_pad, divisor_override, acc)


def _average(ctx, x, nd, k, s, p, count_include_pad, divisor_override, acc):
    out_spatial = tuple(ctx.out.shape[-nd:])
    w = _windows(ctx, ctx.cast(x, acc), nd, k, s, p, (1,) * nd, out_spatial, 0.0)
    total = ctx.reduce(Op.SUM, w, [len(w.shape) - 1], False, acc)
    lead = len(x.shape) - nd
    outs = [ctx.iota(total.shape, lead + i) for i in range(nd)]
    div = _divisor(ctx, outs, x.shape[-nd:], k, s, p, count_include_pad, divisor_override, acc)
    return ctx.cast(ctx.binary(Op.DIV, total, div, acc), ctx.out.dtype)


@lowering(aten.avg_pool2d_backward, aten.avg_pool3d_backward)
def _avg_pool_backward(ctx, grad, x, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override):
    nd = _nd(ctx)
    acc = _acc(grad.dtype)
    k, s, p, _ = _params(nd, kernel_size, stride, padding)
    return _average_backward(ctx, grad, x, nd, k, s, p, count_include_pad, divisor_override, acc)


def _average_backward(ctx, grad, x, nd, k, s, p, count_include_pad, divisor_override, acc):
    valid, outs = _holding_windows(ctx, x.shape, grad.shape[-nd:], nd, k, s, p, (1,) * nd)
    div = _divisor(ctx, outs, x.shape[-nd:], k, s, p, count_include_pad, divisor_override, acc)
    share = ctx.binary(Op.DIV, _at_windows(ctx, ctx.cast(grad, acc), outs, nd), div, acc)
    parts = ctx.where(valid, share, 0.0, acc)
    total = ctx.reduce(Op.SUM, parts, [len(parts.shape) - 1], False, acc)
    return ctx.cast(total, ctx.out.dtype)


def _even(in_spatial, out_spatial) -> tuple[int, ...] | None:
    """kernel = stride = in / out where every output size divides its input size."""
    if any(o == 0 or i % o for i, o in zip(in_spatial, out_spatial)):
        return None
    return tuple(i // o for i, o in zip(in_spatial, out_spatial))


def _bounds(S: int, O: int):
    """Eager's adaptive window o along a dim: [o*S // O, ceil((o+1)*S / O))."""
    return [((o * S) // O, -(-((o + 1) * S) // O)) for o in range(O)]


def _window_of(ctx, o, S: int, O: int):
    """Window o's [start, end) along a dim of S elements pooled into O (nodes)."""
    times = _int(ctx, Op.MUL, o, S)
    return (_int(ctx, Op.FLOORDIV, times, O),
            _int(ctx, Op.FLOORDIV, _int(ctx, Op.ADD, times, S + O - 1), O))


def _mean_of_parts(ctx, t, positions, valid, count, acc, out_dtype, forward: bool):
    """Sum over the trailing half of the dims of t read at `positions` (masked by valid),
    divided by the window's count: the sum (forward: count depends on the leading half
    alone), else each part (backward), as eager divides."""
    nd = len(positions)
    read = _at_windows(ctx, ctx.cast(t, acc), positions, nd)
    count = ctx.cast(count, acc)
    if not forward:
        read = ctx.binary(Op.DIV, read, count, acc)
    parts = ctx.where(valid, read, 0.0, acc)
    lead = len(read.shape) - 2 * nd
    total = ctx.reduce(Op.SUM, parts, list(range(lead + nd, lead + 2 * nd)), False, acc)
    if forward:
        outer = count.shape[:nd]
        count = ctx.reshape(ctx.slice_to_shape(count, (*outer, *(1,) * nd)), outer)
        total = ctx.binary(Op.DIV, total, count, acc)
    return ctx.cast(total, out_dtype)


@lowering(aten._adaptive_avg_pool2d, aten._adaptive_avg_pool3d)
def _adaptive_avg_pool(ctx, x, output_size):
    nd = _nd(ctx)
    acc = _acc(x.dtype)
    S, O = tuple(x.shape[-nd:]), tuple(ctx.out.shape[-nd:])
    k = _even(S, O)
    if k is not None:
        return _average(ctx, x, nd, k, k, (0,) * nd, True, None, acc)
    # uneven windows: window o's elements read at run-time positions, up to the longest
    # window's count, the rest masked
    longest = [max(e - b for b, e in _bounds(S[i], O[i])) for i in range(nd)]
    B = (*O, *longest)
    valid, at, count = None, [], None
    for i in range(nd):
        start, end = _window_of(ctx, ctx.iota(B, i), S[i], O[i])
        pos = _int(ctx, Op.ADD, start, ctx.iota(B, nd + i))
        ok = _cmp(ctx, Op.LT, pos, end)
        valid = ok if valid is None else _and(ctx, valid, ok)
        at.append(_int(ctx, Op.MINIMUM, pos, S[i] - 1))
        n = _int(ctx, Op.SUB, end, start)
        count = n if count is None else _int(ctx, Op.MUL, count, n)
    return _mean_of_parts(ctx, x, at, valid, count, acc, ctx.out.dtype, forward=True)


@lowering(aten._adaptive_avg_pool2d_backward, aten._adaptive_avg_pool3d_backward)
def _adaptive_avg_pool_backward(ctx, grad, x):
    nd = _nd(ctx)
    acc = _acc(grad.dtype)
    S, O = tuple(x.shape[-nd:]), tuple(grad.shape[-nd:])
    k = _even(S, O)
    if k is not None:
        return _average_backward(ctx, grad, x, nd, k, k, (0,) * nd, True, None, acc)
    # input element e lies in windows o = e*O // S, ... while start(o) <= e: at most `most`
    most = []
    for i in range(nd):
        bounds = _bounds(S[i], O[i])
        most.append(max(sum(b <= e < f for b, f in bounds) for e in range(S[i])))
    B = (*S, *most)
    valid, outs, count = None, [], None
    for i in range(nd):
        e = ctx.iota(B, i)
        o = _int(ctx, Op.ADD, _int(ctx, Op.FLOORDIV, _int(ctx, Op.MUL, e, O[i]), S[i]),
                 ctx.iota(B, nd + i))
        start, end = _window_of(ctx, o, S[i], O[i])
        ok = _and(ctx, _cmp(ctx, Op.LT, o, O[i]),
                  _and(ctx, _cmp(ctx, Op.LE, start, e), _cmp(ctx, Op.LT, e, end)))
        valid = ok if valid is None else _and(ctx, valid, ok)
        outs.append(_int(ctx, Op.MINIMUM, o, O[i] - 1))
        n = _int(ctx, Op.SUB, end, start)
        count = n if count is None else _int(ctx, Op.MUL, count, n)
    return _mean_of_parts(ctx, grad, outs, valid, count, acc, ctx.out.dtype, forward=False)

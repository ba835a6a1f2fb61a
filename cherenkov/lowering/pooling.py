"""Lowerings of pooling: max_pool{2,3}d_with_indices, avg_pool{2,3}d and their backwards
(adaptive pooling: adaptive_pooling.py, on the same pieces).

Forward: `Op.WINDOW` views the input as (*lead, *O, K) -- window o's K elements, the fill
(-inf, or 0 for a sum) where a window reaches past the input -- and a reduction over K gives
the max (with the argmax turned into eager's flat index into the input plane) or the sum,
divided as eager divides (the window's size within the padding, or within the input).

Max pool backward: scattered (MAX_POOL_BACKWARD, below), or gathered. Gathered (no atomics,
as eager's kernels, and the average pool's backward): each input element i sums, over the
windows o that hold it, that window's gradient -- where the window's argmax is i (max) or
divided by the window's divisor (avg). Undilated, those windows are the ceil(k / stride) per
dim ending at o = (i + padding) // stride; dilated, one per kernel offset k, o = (i + padding -
k * dilation) / stride where that divides and lies in the output.

    dx = max_pool2d_backward(dy, x, 3, 2, 1, ...)       # x: (N, C, H, W), dy: (N, C, OH, OW)
    # IR: SUM over t of where(valid & (index[o(i, t)] == i), dy[o(i, t)], 0), (N, C, H, W, 4)

16-bit inputs sum in fp32 (as eager's kernels). When a window holds several NaNs, eager's max
index is the last, ours the first (the values agree: NaN).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, dense_order, numel
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


def spatial_dims(ctx) -> int:
    return 3 if "3d" in ctx.target.overloadpacket.__name__ else 2


def floats_only(dtype: torch.dtype) -> None:
    if not dtype.is_floating_point:
        raise Unsupported("pooling of non-float tensors")


def sum_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a pooling sums in (fp32 for 16-bit floats, as eager's kernels)."""
    floats_only(dtype)
    return torch.float32 if dtype in LOW else dtype


def _windows(ctx, x, nd, k, s, p, d, out_spatial, fill):
    """x's windows as (*lead, *O, prod(k))."""
    lead = tuple(x.shape[: len(x.shape) - nd])
    w = Node(Op.WINDOW, (x,), (k, s, d, p, fill), ctx.meta((*lead, *out_spatial, *k), x.dtype))
    return ctx.reshape(w, (*lead, *out_spatial, numel(k)))


def int_op(ctx, op, a, b):
    return ctx.pointwise(op, [a, b], torch.int64)


def compare(ctx, op, a, b):
    return ctx.pointwise(op, [a, b], torch.bool, torch.int64)


def both(ctx, a, b):
    return ctx.pointwise(Op.AND, [a, b], torch.bool)


def clamp(ctx, a, lo, hi):
    return int_op(ctx, Op.MINIMUM, int_op(ctx, Op.MAXIMUM, a, lo), hi)


def offset(ctx, kk, k, i):
    """Kernel offset along dim i of the flat kernel index kk (row-major over k)."""
    return int_op(ctx, Op.REMAINDER, int_op(ctx, Op.FLOORDIV, kk, numel(k[i + 1:])), k[i])


@lowering(aten.max_pool2d_with_indices, aten.max_pool3d_with_indices)
def _max_pool(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    nd = spatial_dims(ctx)
    floats_only(x.dtype)
    k, s, p, d = _params(nd, kernel_size, stride, padding, dilation)
    return max_of_windows(ctx, x, nd, k, s, p, d, tuple(ctx.out[0].shape[-nd:]))


def channels_last_order(node, nd: int) -> tuple | None:
    """(0, 2, .., nd + 1, 1) when `node` (what the pooling reads) lies channels-last: the pooling
    then reduces over its elements in that order -- channels fastest, so neighbouring lanes
    read neighbouring elements -- and returns the permuted-back view, channels-last as eager's
    result. None otherwise (a value Cherenkov computes lies in its logical order)."""
    shape = node.shape
    if nd not in (2, 3) or len(shape) != nd + 2 or shape[1] == 1:
        return None
    order, want = dense_order(shape, node.meta.strides), (0, *range(2, nd + 2), 1)
    if order is None or [d for d in order if shape[d] != 1] != [d for d in want
                                                                if shape[d] != 1]:
        return None
    return want


def _reduced_in_order(ctx, op, t, order, dtype):
    """Reduction `op` over t's last dim, its other dims taken in `order` (None: as they are)."""
    last = len(t.shape) - 1
    if order:
        t = ctx.permute(t, (*order, last))
    return ctx.reduce(op, t, [last], False, dtype)


def in_eager_order(ctx, t, order):
    """t, reduced in `order`, viewed back in eager's dims."""
    return ctx.permute(t, tuple(order.index(i) for i in range(len(order)))) if order else t


def max_of_windows(ctx, x, nd, k, s, p, d, out_spatial):
    """[values, eager's flat indices into each input plane] of x's windows' maxima."""
    w = _windows(ctx, x, nd, k, s, p, d, out_spatial, float("-inf"))
    order = channels_last_order(x, nd)
    values = _reduced_in_order(ctx, Op.MAX, w, order, x.dtype)
    arg = _reduced_in_order(ctx, Op.ARGMAX, w, order, torch.int64)
    lead, S = len(x.shape) - nd, x.shape[-nd:]
    at = []
    for i in range(nd):
        # the chosen element's position; clamped, so a window of -inf alone names its first
        # element inside the input, as eager's does
        dim = 1 + i if order else lead + i
        pos = int_op(ctx, Op.ADD, int_op(ctx, Op.MUL, ctx.iota(values.shape, dim), s[i]),
                   int_op(ctx, Op.MUL, offset(ctx, arg, k, i), d[i]))
        at.append(clamp(ctx, int_op(ctx, Op.SUB, pos, p[i]), 0, S[i] - 1))
    return [in_eager_order(ctx, values, order), in_eager_order(ctx, flat_index(ctx, at, S), order)]


def flat_index(ctx, positions, S):
    """Row-major index into the input plane of the positions along its dims."""
    flat = positions[0]
    for pos, size in zip(positions[1:], S[1:]):
        flat = int_op(ctx, Op.ADD, int_op(ctx, Op.MUL, flat, size), pos)
    return flat


def _holding_windows(ctx, in_shape, out_spatial, nd, k, s, p, d):
    """Over (*S, T) -- input element i, candidate t --: whether candidate window o holds i,
    and o along each dim (clamped into the output where none does). Undilated, the windows
    holding i along a dim are the ceil(k / s) at most that end at o = (i + p) // s and count
    down (a 3x3 stride-2 pool: 4 candidates, not 9 kernel offsets); dilated, one candidate
    per kernel offset kk, o = (i + p - kk * d) / s where that divides."""
    S = tuple(in_shape[-nd:])
    counts = tuple(-(-k[i] // s[i]) if d[i] == 1 else k[i] for i in range(nd))
    B = (*S, numel(counts))
    t = ctx.iota(B, nd)
    valid, outs = None, []
    for i in range(nd):
        here = int_op(ctx, Op.ADD, ctx.iota(B, i), p[i])
        j = offset(ctx, t, counts, i)
        if d[i] == 1:
            o = int_op(ctx, Op.SUB, int_op(ctx, Op.FLOORDIV, here, s[i]), j)
            tap = int_op(ctx, Op.SUB, here, int_op(ctx, Op.MUL, o, s[i]))   # >= 0 by o's making
            ok = both(ctx, compare(ctx, Op.GE, o, 0), compare(ctx, Op.LT, o, out_spatial[i]))
            ok = both(ctx, ok, compare(ctx, Op.LT, tap, k[i]))
        else:
            num = int_op(ctx, Op.SUB, here, int_op(ctx, Op.MUL, j, d[i]))
            o = int_op(ctx, Op.FLOORDIV, num, s[i])
            ok = both(ctx, compare(ctx, Op.GE, num, 0), compare(ctx, Op.LT, o, out_spatial[i]))
            ok = both(ctx, ok, compare(ctx, Op.EQ, int_op(ctx, Op.REMAINDER, num, s[i]), 0))
        valid = ok if valid is None else both(ctx, valid, ok)
        outs.append(clamp(ctx, o, 0, out_spatial[i] - 1))
    return valid, outs


def at_windows(ctx, t, outs, nd):
    """t (*lead, *O) read at the windows `outs` name: (*lead, *S, prod(k))."""
    lead = len(t.shape) - nd
    B = outs[0].shape
    return Node(Op.INDEX, (t, *outs), (tuple(range(lead, lead + nd)),),
                ctx.meta((*t.shape[:lead], *B), t.dtype))


# The max pool backward: "gather" -- each input element sums over the candidate windows that
# may hold it, every window's 8-byte index read by each of them (the ResNet stem's 3x3
# stride-2 backward kernel: 262 us NCHW, 301 channels-last, 51M elements, H200) -- or
# "scatter" -- each window adds its gradient at its maximum, an atomic add into a zeroed
# float32 plane: its kernel ran 218-222 us, but with the zeroing and the cast after it the
# forward+backward kernels took 524 vs 416 us NCHW, 487 vs 429 channels-last (the BN stems
# 839 vs 798, 814 vs 832; bench/results/2026-12-01_max_pool_backward_h200_987c0ec+scatter.md),
# and its float atomics vary the sum's order run to run. Scatter is never taken under
# torch.use_deterministic_algorithms, nor for types without float32 atomics.
MAX_POOL_BACKWARD = "gather"


@lowering(aten.max_pool2d_with_indices_backward, aten.max_pool3d_with_indices_backward)
def _max_pool_backward(ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    nd = spatial_dims(ctx)
    acc = sum_dtype(grad.dtype)
    if MAX_POOL_BACKWARD == "scatter" and acc == torch.float32 \
            and not torch.are_deterministic_algorithms_enabled():
        return scattered_maxima(ctx, grad, indices, tuple(x.shape[-nd:]), acc)
    k, s, p, d = _params(nd, kernel_size, stride, padding, dilation)
    valid, outs = _holding_windows(ctx, x.shape, grad.shape[-nd:], nd, k, s, p, d)
    return gradient_of_maxima(ctx, grad, indices, valid, outs, x.shape[-nd:], acc)


def gradient_of_maxima(ctx, grad, indices, valid, outs, S, acc):
    """Each input element's sum, over the windows `outs` holding it (where `valid`), of the
    gradients of those whose maximum it was (their index names it)."""
    nd = len(outs)
    here = flat_index(ctx, [ctx.iota(outs[0].shape, i) for i in range(nd)], S)
    hit = both(ctx, compare(ctx, Op.EQ, at_windows(ctx, indices, outs, nd), here), valid)
    parts = ctx.where(hit, at_windows(ctx, ctx.cast(grad, acc), outs, nd), 0.0, acc)
    inner = len(outs[0].shape) - nd              # the candidate dims after the input's, as one
    keep = len(parts.shape) - inner
    parts = ctx.reshape(parts, (*parts.shape[:keep], numel(parts.shape[keep:])))
    order = channels_last_order(grad, nd)
    total = _reduced_in_order(ctx, Op.SUM, parts, order, acc)     # over the candidates
    return in_eager_order(ctx, ctx.cast(total, ctx.out.dtype), order)


def scattered_maxima(ctx, grad, indices, S, acc):
    """Each window's gradient added at its maximum (`indices`: eager's flat index into the
    input plane) in zeros of the input's shape: a SCATTER_ADD over the windows, along the
    plane. A channels-last gradient scatters in (N, *S, C) order -- neighbouring lanes read
    and add at neighbouring channels -- and is returned as eager's channels-last view."""
    nd = len(S)
    lead, O = tuple(grad.shape[:-nd]), tuple(grad.shape[-nd:])
    g = ctx.cast(grad, acc)
    order = channels_last_order(grad, nd)
    if order:
        n, c = lead
        g = ctx.reshape(ctx.permute(g, order), (n, numel(O), c))
        where = ctx.reshape(ctx.permute(indices, order), (n, numel(O), c))
        shape, dim, planes = (n, numel(S), c), 1, (n, *S, c)
    else:
        g = ctx.reshape(g, (*lead, numel(O)))
        where = ctx.reshape(indices, (*lead, numel(O)))
        shape, dim, planes = (*lead, numel(S)), len(lead), (*lead, *S)
    total = Node(Op.SCATTER_ADD, (ctx.const(0, acc, shape), g, where), ("dim", dim),
                 ctx.meta(shape, acc))
    return in_eager_order(ctx, ctx.cast(ctx.reshape(total, planes), ctx.out.dtype), order)


def _divisor(ctx, outs, S, k, s, p, count_include_pad, divisor_override, acc, out_spatial):
    """Eager's divisor of window o (nodes `outs`, one per dim): its size within the padding
    (count_include_pad), or within the input; divisor_override when given. Counting the
    padding, every window but a ceil_mode one past the padded input spans its kernel: the
    divisor is then the constant prod(k) -- no per-window arithmetic, and no (S, T) table of
    divisors realized and read per tap by the backward (3x3 average pool backward: 771 us of
    its 1008 under the profiler, bench/results/2026-12-01_kernel_times_pooling_h200_1d9d8f4.md)."""
    if divisor_override:
        return ctx.const(divisor_override, acc)
    if count_include_pad and all((out_spatial[i] - 1) * s[i] - p[i] + k[i] <= S[i] + p[i]
                                 for i in range(len(k))):
        return ctx.const(float(numel(k)), acc)
    size = None
    for i, o in enumerate(outs):
        start = int_op(ctx, Op.SUB, int_op(ctx, Op.MUL, o, s[i]), p[i])
        end = int_op(ctx, Op.MINIMUM, int_op(ctx, Op.ADD, start, k[i]), S[i] + p[i])
        if not count_include_pad:
            start = int_op(ctx, Op.MAXIMUM, start, 0)
            end = int_op(ctx, Op.MINIMUM, end, S[i])
        n = int_op(ctx, Op.SUB, end, start)
        size = n if size is None else int_op(ctx, Op.MUL, size, n)
    return ctx.cast(size, acc)


@lowering(aten.avg_pool2d, aten.avg_pool3d)
def _avg_pool(ctx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    nd = spatial_dims(ctx)
    acc = sum_dtype(x.dtype)
    k, s, p, _ = _params(nd, kernel_size, stride, padding)
    return average(ctx, x, nd, k, s, p, count_include_pad, divisor_override, acc)


def average(ctx, x, nd, k, s, p, count_include_pad, divisor_override, acc):
    out_spatial = tuple(ctx.out.shape[-nd:])
    w = _windows(ctx, ctx.cast(x, acc), nd, k, s, p, (1,) * nd, out_spatial, 0.0)
    order = channels_last_order(x, nd)
    total = _reduced_in_order(ctx, Op.SUM, w, order, acc)
    lead = len(x.shape) - nd
    outs = [ctx.iota(total.shape, 1 + i if order else lead + i) for i in range(nd)]
    div = _divisor(ctx, outs, x.shape[-nd:], k, s, p, count_include_pad, divisor_override, acc,
                   out_spatial)
    return in_eager_order(ctx, ctx.cast(ctx.binary(Op.DIV, total, div, acc), ctx.out.dtype),
                          order)


@lowering(aten.avg_pool2d_backward, aten.avg_pool3d_backward)
def _avg_pool_backward(ctx, grad, x, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override):
    nd = spatial_dims(ctx)
    acc = sum_dtype(grad.dtype)
    k, s, p, _ = _params(nd, kernel_size, stride, padding)
    return average_backward(ctx, grad, x, nd, k, s, p, count_include_pad, divisor_override, acc)


def average_backward(ctx, grad, x, nd, k, s, p, count_include_pad, divisor_override, acc):
    valid, outs = _holding_windows(ctx, x.shape, grad.shape[-nd:], nd, k, s, p, (1,) * nd)
    div = _divisor(ctx, outs, x.shape[-nd:], k, s, p, count_include_pad, divisor_override, acc,
                   grad.shape[-nd:])
    share = ctx.binary(Op.DIV, at_windows(ctx, ctx.cast(grad, acc), outs, nd), div, acc)
    parts = ctx.where(valid, share, 0.0, acc)
    order = channels_last_order(grad, nd)
    total = _reduced_in_order(ctx, Op.SUM, parts, order, acc)
    return in_eager_order(ctx, ctx.cast(total, ctx.out.dtype), order)

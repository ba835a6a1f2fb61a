"""Lowerings of scans: cumsum, cumprod and logcumsumexp become an inclusive scan along the
last dim.

    y = x.cumsum(1)       # x: (4, 8, 16)
    # IR: permute(x, (0, 2, 1)) -> CUMSUM over its 8 -> permute back to (4, 8, 16)

The scanned dim is moved last and back (index arithmetic, no copies; the scan's buffer is laid
out as the result, so what reads it reads it contiguous); the kernel runs each
row's running sum in order (codegen/triton_scan.py, the C++ row loop), in eager's accumulate
type (`_running_dtype`). Integer and bool inputs sum as int64, eager's result type; a dtype=
argument casts the input first, as eager does.
A scan over a dim of one element is the input itself. cummax / cummin: the running max / min
and a running max of the positions where x reached it (eager's index).

A cumsum's gradient is `flip(cumsum(flip(dy, d), d), d)`: lowering the outer flip finds the
scan of a flip and returns one scan from the row's end (`reverse`: the kernel's r walks the
elements R-1 .. 0), no copy for either flip (`reversed_scan`).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, contiguous_strides, numel
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.lowering.registry import Unsupported, lowering
from cherenkov.lowering.scatter import writes_allowed

aten = torch.ops.aten
SCANS = {aten.cumsum: Op.CUMSUM, aten.cumprod: Op.CUMPROD, aten.logcumsumexp: Op.LOGCUMSUMEXP}


def _running_dtype(dtype: torch.dtype, device) -> torch.dtype:
    """What a scan accumulates in: as eager's kernels -- fp32 for 16-bit floats, and on a
    CPU fp64 for fp32 (ATen's CPU accumulate type; a logcumsumexp's gradient, a difference
    of two such scans, missed eager's by 0.3% in fp32)."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype == torch.float32 and torch.device(device).type == "cpu":
        return torch.float64
    return dtype


@lowering(aten.cumsum, aten.cumprod, aten.logcumsumexp)
def _cumulative(ctx, x, dim, dtype=None):
    op = SCANS[ctx.target.overloadpacket]
    out_dtype = ctx.out.dtype
    if out_dtype == torch.bool or (op == Op.LOGCUMSUMEXP and not out_dtype.is_floating_point):
        raise Unsupported(f"{op.name.lower()} into {out_dtype}")
    x = ctx.cast(x, out_dtype)
    dim = dim % max(len(x.shape), 1)
    if not x.shape or x.shape[dim] == 1:
        return x
    return _scan(ctx, op, x, dim, _running_dtype(out_dtype, ctx.device))


def _scan(ctx, op: Op, x, dim: int, running: torch.dtype, reverse: bool = False):
    """x (at least 1-d, dim > 1 element) scanned along dim -- from its end with `reverse` --:
    moved last, scanned, moved back."""
    ndim = len(x.shape)
    order = [d for d in range(ndim) if d != dim] + [dim]
    moved = ctx.permute(x, order)
    # stored in the input's contiguous layout, so the permute back reads it contiguous
    strides = contiguous_strides(x.shape)
    meta = ctx.meta(moved.shape, x.dtype).replace(stride=tuple(strides[d] for d in order))
    scanned = Node(op, (moved,), (reverse, running), meta)
    back = [0] * ndim
    for position, d in enumerate(order):
        back[d] = position
    return ctx.permute(scanned, back)


@lowering(aten.cummax, aten.cummin)
def _cumulative_extreme(ctx, x, dim):
    """(running max / min, eager's index of it): the index is the last j <= i where x[j]
    reached the running value (eager updates on >= / <=, and on every NaN) -- a running max
    of where(reached, j, 0)."""
    is_max = ctx.target.overloadpacket is aten.cummax
    dtype = ctx.out[0].dtype
    if dtype == torch.bool:
        raise Unsupported(f"{'cummax' if is_max else 'cummin'} of bool")
    x = ctx.cast(x, dtype)
    dim = dim % max(len(x.shape), 1)
    if not x.shape or x.shape[dim] == 1:
        return [x, ctx.const(0, torch.int64, x.shape)]
    values = _scan(ctx, Op.CUMMAX if is_max else Op.CUMMIN, x, dim, dtype)
    reached = ctx.pointwise(Op.EQ, [x, values], torch.bool, dtype)
    if dtype.is_floating_point:
        reached = ctx.pointwise(Op.OR, [reached, ctx.pointwise(Op.ISNAN, [x], torch.bool, dtype)],
                                torch.bool)
    at = ctx.where(reached, ctx.iota(x.shape, dim), 0, torch.int64)
    return [values, _scan(ctx, Op.CUMMAX, at, dim, torch.int64)]


def reversed_scan(ctx, node: Node, dims) -> Node | None:
    """flip(scan(flip(y, d)), d) -- `node` the scan's result as `_scan` built it, `dims` the
    outer flip's -- as y's scan from the end along d; None when it is not that."""
    if len(dims) != 1:
        return None
    back, scan = None, node
    if scan.op == Op.PERMUTE:
        back, scan = scan.args[0], scan.inputs[0]
    if scan.op not in GroupOp.SCAN or scan.args[0]:
        return None
    moved, order = scan.inputs[0], None
    if moved.op == Op.PERMUTE:
        order, moved = moved.args[0], moved.inputs[0]
    dim = order[-1] if order is not None else len(scan.shape) - 1
    if (back is None) != (order is None) or moved.op != Op.FLIP or moved.args[0] != (dim,) \
            or dims[0] != dim:
        return None
    return _scan(ctx, scan.op, moved.inputs[0], dim, scan.args[1], reverse=True)


def _running_index(ctx, mask, shape):
    """(mask broadcast to `shape` and flattened, each element's 0-based rank among the
    elements where it holds: the running count less one)."""
    n = numel(shape)
    flat = ctx.reshape(ctx.expand(mask, shape), (n,))
    if n == 1:
        return flat, ctx.const(0, torch.int64, (1,))
    taken = _scan(ctx, Op.CUMSUM, ctx.cast(flat, torch.int64), 0, torch.int64)
    return flat, ctx.pointwise(Op.SUB, [taken, 1], torch.int64)


@lowering(aten.masked_scatter.default)
def _masked_scatter(ctx, x, mask, source):
    """x with its elements where mask holds (row-major order) replaced by source's, one after
    another: element i takes source.flatten()[k], k = the running count of mask up to i, less
    one -- a cumsum and a gather. Floating x only: where mask holds more elements than source
    has, eager raises and the gather reads NaN (an integer there would read a number)."""
    if not ctx.out.dtype.is_floating_point:
        raise Unsupported("masked_scatter into a non-float tensor")
    n = x.meta.numel
    flat_mask, at = _running_index(ctx, mask, x.shape)
    src = ctx.reshape(ctx.cast(source, ctx.out.dtype), (source.meta.numel,))
    read = Node(Op.INDEX, (src, at), ((0,),), ctx.meta((n,), ctx.out.dtype))
    return ctx.reshape(ctx.where(flat_mask, read, ctx.reshape(x, (n,))), tuple(x.shape))


@lowering(aten.masked_scatter_backward.default)
def _masked_scatter_backward(ctx, grad, mask, sizes):
    """The source's gradient: element k of the flattened source gets grad where mask holds
    for the k-th time (0 past the last), written at those ranks (no two alike: no
    collisions; the other elements' writes aimed past the end, written nowhere)."""
    writes_allowed(ctx)
    n, m = numel(grad.shape), numel(sizes)
    flat_mask, at = _running_index(ctx, mask, grad.shape)
    index = ctx.where(flat_mask, at, m, torch.int64)
    zeros = ctx.const(0, ctx.out.dtype, (m,))
    written = Node(Op.SCATTER_SET, (zeros, ctx.cast(ctx.reshape(grad, (n,)), ctx.out.dtype),
                                    index), ("dim", 0), ctx.meta((m,), ctx.out.dtype))
    return ctx.reshape(written, tuple(sizes))

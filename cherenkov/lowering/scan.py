"""Lowerings of scans: cumsum and cumprod become an inclusive scan along the last dim.

    y = x.cumsum(1)       # x: (4, 8, 16)
    # IR: permute(x, (0, 2, 1)) -> CUMSUM over its 8 -> permute back to (4, 8, 16)

The scanned dim is moved last and back (index arithmetic, no copies; the scan's buffer is laid
out as the result, so what reads it reads it contiguous); the kernel runs each
row's running sum in order (codegen/triton_scan.py, the C++ row loop). Integer and bool inputs
sum as int64, eager's result type; a dtype= argument casts the input first, as eager does.
A scan over a dim of one element is the input itself. logcumsumexp, cummax and cummin stay
PyTorch's.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, contiguous_strides
from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten


@lowering(aten.cumsum, aten.cumprod)
def _cumulative(ctx, x, dim, dtype=None):
    op = Op.CUMSUM if ctx.target.overloadpacket is aten.cumsum else Op.CUMPROD
    out_dtype = ctx.out.dtype
    if out_dtype == torch.bool:
        raise Unsupported(f"{op.name.lower()} into bool")
    x = ctx.cast(x, out_dtype)
    ndim = len(x.shape)
    dim = dim % max(ndim, 1)
    if ndim == 0 or x.shape[dim] == 1:
        return x
    order = [d for d in range(ndim) if d != dim] + [dim]
    moved = ctx.permute(x, order)
    # stored in the input's contiguous layout, so the permute back reads it contiguous
    strides = contiguous_strides(x.shape)
    meta = ctx.meta(moved.shape, out_dtype).replace(stride=tuple(strides[d] for d in order))
    scanned = Node(op, (moved,), (), meta)
    back = [0] * ndim
    for position, d in enumerate(order):
        back[d] = position
    return ctx.permute(scanned, back)

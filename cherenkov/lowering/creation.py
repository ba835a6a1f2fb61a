"""Lowerings of tensor creation: full/zeros/ones/scalar_tensor/arange/empty/fill/copy/*_like."""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.elementwise import cast_value
from cherenkov.lowering.registry import lowering

aten = torch.ops.aten


@lowering(aten.full.default, aten.full_like, aten.new_full)
def _full(ctx, *args, **kwargs):
    value = args[-1] if ctx.target.overloadpacket is not aten.new_full else args[2]
    if ctx.target.overloadpacket is aten.full_like:
        value = args[1]
    return ctx.const(value, ctx.out.dtype, ctx.out.shape)


@lowering(aten.zeros.default, aten.zeros_like, aten.new_zeros, aten.empty.memory_format,
          aten.empty_like, aten.new_empty, aten.empty_strided, aten.new_empty_strided)
def _zeros(ctx, *args, **kwargs):
    return ctx.const(0, ctx.out.dtype, ctx.out.shape)


@lowering(aten.ones.default, aten.ones_like, aten.new_ones)
def _ones(ctx, *args, **kwargs):
    return ctx.const(1, ctx.out.dtype, ctx.out.shape)


@lowering(aten.scalar_tensor)
def _scalar_tensor(ctx, value, **kwargs):
    return ctx.const(value, ctx.out.dtype)


@lowering(aten.fill.Scalar, aten.fill.Tensor)
def _fill(ctx, x, value):
    if hasattr(value, "meta"):
        return ctx.expand(ctx.cast(value, ctx.out.dtype), ctx.out.shape)
    return ctx.const(value, ctx.out.dtype, ctx.out.shape)


@lowering(aten.copy.default)
def _copy(ctx, dst, src, non_blocking=False):
    return ctx.expand(ctx.cast(src, dst.dtype), dst.shape)


@lowering(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(ctx, *args, **kwargs):
    nums = [a for a in args if isinstance(a, (int, float))]
    start, step = (0, 1)
    if len(nums) >= 2:
        start = nums[0]
    if len(nums) >= 3:
        step = nums[2]
    n = ctx.out.shape[0]
    dtype = ctx.out.dtype
    compute = torch.float64 if dtype.is_floating_point else torch.int64
    idx = ctx.cast(ctx.iota((n,), 0), compute)
    value = ctx.binary(Op.ADD, ctx.binary(Op.MUL, idx, step, compute), start, compute)
    return cast_value(ctx, value, dtype)


@lowering(torch.ops.prims.iota.default)
def _iota(ctx, length, *, start, step, **kwargs):
    idx = ctx.iota((length,), 0)
    return ctx.cast(ctx.binary(Op.ADD, ctx.binary(Op.MUL, idx, step, torch.int64), start,
                               torch.int64), ctx.out.dtype)

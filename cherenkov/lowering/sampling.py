"""Lowering of grid_sampler_2d (F.grid_sample on 4-d inputs; on CUDA, with bilinear sampling,
zeros padding and align_corners, eager's cudnn_grid_sampler): bilinear and nearest sampling
with zeros or border padding, as eager computes them; bicubic and reflection padding stay
PyTorch's, as does the backward (eager's scatters its input gradient with atomic adds).

    out[n, c, h, w] = sum over the 4 corners (y, x) of (ix, iy) = unnormalized grid[n, h, w]
                      of input[n, c, y, x] * weight, a corner outside the input adding 0

Each corner is read at run-time positions (`Op.INDEX` over all four dims, the batch and
channel as iotas), masked where it lies outside the input (a NaN coordinate included). 16-bit
inputs sample in fp32.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node
from cherenkov.ir.ops import Op
from cherenkov.lowering.movement import slice_node
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten
BILINEAR, NEAREST = 0, 1
ZEROS, BORDER = 0, 1


def _source(ctx, coord, size: int, align_corners: bool, padding: int, dtype):
    """A grid coordinate in [-1, 1] as a position in [0, size) (eager's unnormalize / clip)."""
    if align_corners:
        pos = ctx.binary(Op.MUL, ctx.binary(Op.DIV, ctx.binary(Op.ADD, coord, 1.0, dtype), 2.0,
                                            dtype), float(size - 1), dtype)
    else:
        pos = ctx.binary(Op.DIV, ctx.binary(Op.SUB, ctx.binary(
            Op.MUL, ctx.binary(Op.ADD, coord, 1.0, dtype), float(size), dtype), 1.0, dtype),
            2.0, dtype)
    if padding == BORDER:
        pos = ctx.binary(Op.MINIMUM, ctx.binary(Op.MAXIMUM, pos, 0.0, dtype), float(size - 1),
                         dtype)
    return pos


def _corner(ctx, x, xi, yi, H: int, W: int, dtype):
    """x[n, c, yi, xi] where that lies inside the input, else 0 (yi, xi float nodes)."""
    shape = yi.shape
    inside = None
    idx = []
    for pos, size in ((yi, H), (xi, W)):
        ok = ctx.pointwise(Op.AND, [ctx.pointwise(Op.GE, [pos, 0.0], torch.bool, dtype),
                                    ctx.pointwise(Op.LE, [pos, float(size - 1)], torch.bool,
                                                  dtype)], torch.bool)
        inside = ok if inside is None else ctx.pointwise(Op.AND, [inside, ok], torch.bool)
        # converted where it is inside only (a huge or NaN coordinate has no int64 value)
        idx.append(ctx.cast(ctx.where(ok, pos, 0.0, dtype), torch.int64))
    n, c = ctx.iota(shape, 0), ctx.iota(shape, 1)
    read = Node(Op.INDEX, (ctx.cast(x, dtype), n, c, *idx), ((0, 1, 2, 3),),
                ctx.meta(shape, dtype))
    return ctx.where(inside, read, 0.0, dtype)


@lowering(aten.grid_sampler_2d)
def _grid_sampler_2d(ctx, x, grid, interpolation_mode, padding_mode, align_corners):
    if interpolation_mode not in (BILINEAR, NEAREST) or padding_mode not in (ZEROS, BORDER):
        raise Unsupported("bicubic sampling or reflection padding")
    if not x.dtype.is_floating_point:
        raise Unsupported("sampling a non-float tensor")
    dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    N, C, H, W = x.shape
    Ho, Wo = grid.shape[1], grid.shape[2]
    shape = (N, C, Ho, Wo)

    def coordinate(k, size):            # grid[..., k] over the output's shape, unnormalized
        g = slice_node(ctx, ctx.reshape(grid, (N, 1, Ho, Wo, 2)), 4, k, k + 1, 1)
        g = ctx.expand(ctx.reshape(ctx.cast(g, dtype), (N, 1, Ho, Wo)), shape)
        return _source(ctx, g, size, align_corners, padding_mode, dtype)

    ix, iy = coordinate(0, W), coordinate(1, H)
    if interpolation_mode == NEAREST:
        out = _corner(ctx, x, ctx.unary(Op.ROUND, ix, dtype), ctx.unary(Op.ROUND, iy, dtype),
                      H, W, dtype)
        return ctx.cast(out, ctx.out.dtype)
    x0, y0 = ctx.unary(Op.FLOOR, ix, dtype), ctx.unary(Op.FLOOR, iy, dtype)
    x1, y1 = ctx.binary(Op.ADD, x0, 1.0, dtype), ctx.binary(Op.ADD, y0, 1.0, dtype)
    sub = lambda a, b: ctx.binary(Op.SUB, a, b, dtype)          # noqa: E731
    mul = lambda a, b: ctx.binary(Op.MUL, a, b, dtype)          # noqa: E731
    corners = ((x0, y0, mul(sub(x1, ix), sub(y1, iy))), (x1, y0, mul(sub(ix, x0), sub(y1, iy))),
               (x0, y1, mul(sub(x1, ix), sub(iy, y0))), (x1, y1, mul(sub(ix, x0), sub(iy, y0))))
    out = None
    for xc, yc, weight in corners:          # eager's order: nw, ne, sw, se
        term = mul(_corner(ctx, x, xc, yc, H, W, dtype), weight)
        out = term if out is None else ctx.binary(Op.ADD, out, term, dtype)
    return ctx.cast(out, ctx.out.dtype)


@lowering(aten.cudnn_grid_sampler)
def _cudnn_grid_sampler(ctx, x, grid):
    """The form F.grid_sample takes on CUDA where cuDNN accepts it: bilinear sampling, zeros
    padding, align_corners."""
    return _grid_sampler_2d(ctx, x, grid, BILINEAR, ZEROS, True)

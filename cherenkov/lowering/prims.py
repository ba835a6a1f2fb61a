"""Lowerings of the few `prims` ops that PyTorch's decompositions leave in graphs."""
from __future__ import annotations

import torch

from cherenkov.lowering.elementwise import cast_value
from cherenkov.lowering.registry import lowering

import torch._inductor.inductor_prims  # noqa: E402,F401 -- registers prims.fma (decompositions emit it)

prims = torch.ops.prims


@lowering(prims.convert_element_type.default)
def _convert(ctx, x, dtype):
    return cast_value(ctx, x, dtype)


@lowering(prims.broadcast_in_dim.default)
def _broadcast_in_dim(ctx, x, shape, broadcast_dims):
    inter = [1] * len(shape)
    for src, dst in enumerate(broadcast_dims):
        inter[dst] = x.shape[src]
    return ctx.expand(ctx.reshape(x, inter), shape)


def _register_same_named():
    """prims.<op> for elementwise ops shares the aten lowering of the same name."""
    from cherenkov.lowering import elementwise
    from cherenkov.lowering.registry import LOWERINGS
    for table in (elementwise.UNARY, elementwise.BINARY, elementwise.COMPARE):
        for packet in table:
            name = packet.__name__.split(".")[-1]
            prim = getattr(prims, name, None)
            if prim is not None and hasattr(prim, "default"):
                aten_fn = next((LOWERINGS[getattr(packet, o)] for o in
                                ("default", "Tensor", "Tensor_Tensor") if o in packet.overloads()
                                and getattr(packet, o) in LOWERINGS), None)
                if aten_fn is not None:
                    LOWERINGS.setdefault(prim.default, aten_fn)


_register_same_named()


@lowering(prims.fma.default)
def _fma(ctx, a, b, c):
    """a * b + c with one rounding, as the prim (and eager's fused kernels) compute it."""
    from cherenkov.ir.ops import Op
    return ctx.pointwise(Op.FMA, [a, b, c], ctx.out.dtype)


@lowering(prims.add.default)
def _add(ctx, a, b):
    from cherenkov.ir.ops import Op
    return ctx.binary(Op.ADD, a, b)


@lowering(prims.sub.default)
def _sub(ctx, a, b):
    from cherenkov.ir.ops import Op
    return ctx.binary(Op.SUB, a, b)


@lowering(prims.div.default)
def _div(ctx, a, b):
    from cherenkov.ir.ops import Op
    return ctx.binary(Op.DIV if ctx.out.dtype.is_floating_point else Op.TRUNCDIV, a, b)


@lowering(prims.sum.default)
def _sum(ctx, x, dims, output_dtype=None):
    from cherenkov.ir.ops import Op
    return ctx.reduce(Op.SUM, ctx.cast(x, ctx.out.dtype), list(dims), False, ctx.out.dtype)


@lowering(prims.amax.default, prims.amin.default)
def _amax(ctx, x, dims, output_dtype=None):
    from cherenkov.ir.ops import Op
    op = Op.MAX if ctx.target is prims.amax.default else Op.MIN
    return ctx.reduce(op, x, list(dims), False)


@lowering(prims.var.default)
def _var(ctx, x, dims, correction=1, output_dtype=None):
    from cherenkov.lowering.reductions import _var as var
    return var(ctx, x, list(dims), correction, False)[0]


@lowering(prims.rsqrt.default)
def _rsqrt(ctx, x):
    from cherenkov.ir.ops import Op
    return ctx.unary(Op.RSQRT, x)


@lowering(prims.where.default)
def _where(ctx, c, a, b):
    return ctx.where(c, a, b)


@lowering(prims.squeeze.default, prims.reshape.default, prims.collapse_view.default,
          prims.split_dim.default, prims.view_of.default)
def _reshape(ctx, x, *args):
    return ctx.reshape(x, ctx.out.shape)


@lowering(prims.transpose.default)
def _transpose(ctx, x, dims):
    return ctx.permute(x, dims)

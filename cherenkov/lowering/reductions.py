"""Lowerings of reductions: sum/mean/prod/amax/amin/max.dim/argmax/any/all/var/std.

Every reduction becomes a trailing-dims reduction of the IR (`ctx.reduce` permutes the reduced
dims to the end), so the fusion pass sees one shape of reduction: (rows, reduced).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import numel
from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten


def _dims(x, dims):
    """The reduced dims, non-negative; None or () means all. A 0-d tensor has none to reduce."""
    ndim = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted({d % ndim for d in dims}) if ndim else []


def _acc_dtype(dtype):
    return torch.int64 if (not dtype.is_floating_point and not dtype.is_complex) else dtype


@lowering(aten.sum.dim_IntList, aten.sum.default)
def _sum(ctx, x, dims=None, keepdim=False, dtype=None):
    if x.dtype.is_complex:
        raise Unsupported("complex dtypes")
    out_dtype = ctx.out.dtype
    x = ctx.cast(x, out_dtype)
    return ctx.reduce(Op.SUM, x, _dims(x, dims), keepdim, out_dtype)


@lowering(aten.prod.dim_int, aten.prod.default)
def _prod(ctx, x, dim=None, keepdim=False, dtype=None):
    x = ctx.cast(x, ctx.out.dtype)
    return ctx.reduce(Op.PROD, x, _dims(x, dim), keepdim, ctx.out.dtype)


@lowering(aten.mean.dim, aten.mean.default)
def _mean(ctx, x, dims=None, keepdim=False, dtype=None):
    dims = _dims(x, dims)
    count = numel(x.shape[d] for d in dims)
    total = ctx.reduce(Op.SUM, ctx.cast(x, ctx.out.dtype), dims, keepdim, ctx.out.dtype)
    return ctx.binary(Op.DIV, total, count)


@lowering(aten.amax, aten.amin)
def _amax(ctx, x, dims=(), keepdim=False):
    op = Op.MAX if ctx.target.overloadpacket is aten.amax else Op.MIN
    return ctx.reduce(op, x, _dims(x, dims), keepdim)


@lowering(aten.max.dim, aten.min.dim)
def _max_dim(ctx, x, dim, keepdim=False):
    is_max = ctx.target.overloadpacket is aten.max
    values = ctx.reduce(Op.MAX if is_max else Op.MIN, x, [dim], keepdim)
    indices = ctx.reduce(Op.ARGMAX if is_max else Op.ARGMIN, x, [dim], keepdim, torch.int64)
    return [values, indices]


@lowering(aten.max.default, aten.min.default)
def _max_all(ctx, x):
    op = Op.MAX if ctx.target.overloadpacket is aten.max else Op.MIN
    return ctx.reduce(op, x, _dims(x, None), False)


@lowering(aten.argmax, aten.argmin)
def _argmax(ctx, x, dim=None, keepdim=False):
    op = Op.ARGMAX if ctx.target.overloadpacket is aten.argmax else Op.ARGMIN
    if dim is None:
        flat = ctx.reshape(x, (numel(x.shape),))
        out = ctx.reduce(op, flat, [0], False, torch.int64)
        return ctx.reshape(out, (1,) * len(x.shape)) if keepdim else out
    return ctx.reduce(op, x, [dim], keepdim, torch.int64)


@lowering(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims,
          aten.all.default)
def _any(ctx, x, dims=None, keepdim=False):
    op = Op.ANY if ctx.target.overloadpacket is aten.any else Op.ALL
    if x.dtype != torch.bool:
        x = ctx.pointwise(Op.NE, [x, 0], torch.bool, x.dtype)
    return ctx.reduce(op, x, _dims(x, dims), keepdim, torch.bool)


def _var(ctx, x, dims, correction, keepdim):
    """Two-pass variance: mean first, then the sum of squared deviations (numerically stable)."""
    dims = _dims(x, dims)
    dtype = ctx.out.dtype if not isinstance(ctx.out, (tuple, list)) else ctx.out[0].dtype
    x = ctx.cast(x, dtype)
    count = numel(x.shape[d] for d in dims)
    mean = ctx.binary(Op.DIV, ctx.reduce(Op.SUM, x, dims, True, dtype), count, dtype)
    dev = ctx.binary(Op.SUB, x, mean, dtype)
    sq = ctx.reduce(Op.SUM, ctx.binary(Op.MUL, dev, dev, dtype), dims, keepdim, dtype)
    correction = 1 if correction is None else correction
    var = ctx.binary(Op.DIV, sq, max(count - correction, 0), dtype)
    if not keepdim:
        mean = ctx.reshape(mean, var.shape)
    return var, mean


@lowering(aten.var.correction, aten.var.dim, aten.var.default)
def _var_lowering(ctx, x, dims=None, unbiased=None, keepdim=False, correction=None):
    if isinstance(unbiased, bool):
        correction = 1 if unbiased else 0
    return _var(ctx, x, dims, correction, keepdim)[0]


@lowering(aten.var_mean.correction, aten.var_mean.dim)
def _var_mean(ctx, x, dims=None, unbiased=None, keepdim=False, correction=None):
    if isinstance(unbiased, bool):
        correction = 1 if unbiased else 0
    var, mean = _var(ctx, x, dims, correction, keepdim)
    return [var, mean]


@lowering(aten.std.correction, aten.std.dim, aten.std.default)
def _std(ctx, x, dims=None, unbiased=None, keepdim=False, correction=None):
    return ctx.unary(Op.SQRT, _var_lowering(ctx, x, dims, unbiased, keepdim, correction))

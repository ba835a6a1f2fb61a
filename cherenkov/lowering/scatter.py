"""Lowerings of scatters: writes at run-time indices.

- `scatter(self, dim, index, value|src)` with one index per row (index.size(dim) == 1, the
  shape cross-entropy's backward makes) is a pointwise select: out[.., j, ..] is the scattered
  value where j == index[.., 0, ..], else self. No atomics, fuses with its neighbours.
- `index_put(base, indices, values, accumulate=True)` (embedding's backward) and
  `scatter_add` become `SCATTER_ADD`: a kernel that adds each value into a copy of base at its
  index with atomic adds.
- `scatter_reduce` (and `index_reduce`, its index spread over the source's slices) with "sum"
  (and "mean" of floats): scatter-adds of the values and, where needed, of ones (the counts);
  "amax" / "amin": `SCATTER_MAX` / `SCATTER_MIN` (atomic max / min on the GPU; the C++ kernel
  in order, NaN-propagating as eager's CPU loop).
- `index_put(..., accumulate=False)` (`x[idx] = v`, index_copy, index_fill), put (on the
  flattened tensor), diagonal_scatter (at iota indices) and other scatters become
  `SCATTER_SET`: each value written over its element of a copy of base. Where
  two values meet one element eager leaves the result undefined; the C++ kernel writes in
  order (the last wins, as eager's CPU loop does), the GPU's programs race (as eager's CUDA
  kernel does). Under `torch.use_deterministic_algorithms(True)` a CUDA graph keeps
  PyTorch's op (its deterministic path sorts the indices).
"""
from __future__ import annotations

import torch

from cherenkov.codegen.kernel_ir import scan_identity
from cherenkov.ir.graph import Node
from cherenkov.ir.ops import Op
from cherenkov.lowering.movement import diagonal_indices, diagonal_last
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten

ATOMIC_DTYPES = {torch.float32, torch.int32, torch.int64}


def _scatter_op(ctx, accumulate: bool) -> Op:
    """SCATTER_ADD (accumulate) or SCATTER_SET for the output's dtype, or Unsupported."""
    if not accumulate:
        writes_allowed(ctx)
        return Op.SCATTER_SET
    if ctx.out.dtype not in ATOMIC_DTYPES:
        raise Unsupported(f"atomic add of {ctx.out.dtype}")
    return Op.SCATTER_ADD


def writes_allowed(ctx) -> None:
    """Scatters that write (not add) are allowed here, or Unsupported."""
    if ctx.out.dtype.is_complex:
        raise Unsupported("complex dtypes")
    if ctx.device.type == "cuda" and torch.are_deterministic_algorithms_enabled():
        raise Unsupported("deterministic algorithms: PyTorch's scatter orders colliding writes")


@lowering(aten.scatter.value, aten.scatter.src)
def _scatter(ctx, x, dim, index, value):
    if not x.shape:         # 0-d: the one element is replaced
        return ctx.cast(ctx.as_node(value, ctx.out.dtype), ctx.out.dtype)
    dim = dim % max(len(x.shape), 1)
    want = tuple(1 if d == dim else s for d, s in enumerate(x.shape))
    if index.shape != want:
        return _scatter_set(ctx, x, dim, index, value)
    if isinstance(value, Node):
        if value.shape != index.shape and value.shape != x.shape:
            raise Unsupported("scatter source of another shape")
        value = ctx.expand(ctx.slice_to(value, dim, 1), x.shape) if value.shape == x.shape \
            else ctx.expand(value, x.shape)
    hit = ctx.pointwise(Op.EQ, [ctx.iota(x.shape, dim), ctx.expand(index, x.shape)],
                        torch.bool, torch.int64)
    return ctx.where(hit, value, x)


def _scatter_set(ctx, x, dim, index, value):
    """out = x; out[.., index[i], ..] = value[i] along dim, over index's elements (index and
    src no larger than x: eager's rule)."""
    writes_allowed(ctx)
    if isinstance(value, Node):
        if value.shape != index.shape:
            value = ctx.slice_to_shape(value, index.shape)
        values = ctx.cast(value, ctx.out.dtype)
    else:
        values = ctx.const(value, ctx.out.dtype, index.shape)
    if not index.shape or 0 in index.shape:
        return ctx.cast(x, ctx.out.dtype)
    return Node(Op.SCATTER_SET, (ctx.cast(x, ctx.out.dtype), values, index), ("dim", dim),
                ctx.out_meta())


@lowering(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(ctx, base, indices, values, accumulate=False):
    op = _scatter_op(ctx, accumulate)
    dims, nodes = [], []
    for d, idx in enumerate(indices):
        if idx is None:
            continue
        if idx.dtype == torch.bool:
            raise Unsupported("boolean mask index_put")
        dims.append(d)
        nodes.append(idx)
    if not nodes or dims != list(range(dims[0], dims[0] + len(dims))):
        raise Unsupported("index_put with non-adjacent index dims")
    bshape = torch.broadcast_shapes(*[n.shape for n in nodes])
    nodes = [ctx.expand(n, bshape) for n in nodes]
    # values broadcast to the indexed view's shape: base[:d0] + bshape + base[d0+len:]
    view_shape = base.shape[: dims[0]] + tuple(bshape) + base.shape[dims[0] + len(dims):]
    if 0 in view_shape:                 # nothing written
        return ctx.cast(base, ctx.out.dtype)
    values = ctx.expand(ctx.cast(ctx.as_node(values, ctx.out.dtype), ctx.out.dtype), view_shape)
    return Node(op, (ctx.cast(base, ctx.out.dtype), values, *nodes), ("index", tuple(dims)),
                ctx.out_meta())


@lowering(aten.scatter_add.default)
def _scatter_add(ctx, x, dim, index, src):
    if ctx.out.dtype not in ATOMIC_DTYPES:
        raise Unsupported(f"atomic add of {ctx.out.dtype}")
    if not x.shape:             # (eager checks the index: 0 or it raises)
        raise Unsupported("scatter_add into a 0-d tensor")
    dim = dim % max(len(x.shape), 1)
    if index.shape != src.shape:
        src = ctx.slice_to_shape(src, index.shape)
    return Node(Op.SCATTER_ADD, (x, ctx.cast(src, ctx.out.dtype), index), ("dim", dim),
                ctx.out_meta())


@lowering(aten.scatter_reduce.two)
def _scatter_reduce(ctx, x, dim, index, src, reduce, include_self=True):
    """sum, and mean of floating-point values, as scatter-adds: with include_self a sum is
    scatter_add itself; otherwise the values' sums go into zeros beside how many values each
    element got (a scatter-add of ones), and untouched elements keep x. amax / amin as
    SCATTER_MAX / MIN (atomic on the GPU; without include_self the touched elements start
    from the identity, written first). prod stays PyTorch's."""
    dtype = ctx.out.dtype
    if reduce not in ("sum", "mean", "amax", "amin"):
        raise Unsupported(f"scatter_reduce {reduce!r}")
    if dtype not in ATOMIC_DTYPES or (reduce == "mean" and not dtype.is_floating_point):
        raise Unsupported(f"scatter_reduce {reduce!r} of {dtype}")
    if not x.shape:
        raise Unsupported("scatter_reduce of a 0-d tensor")
    dim = dim % len(x.shape)
    if index.shape != src.shape:
        src = ctx.slice_to_shape(src, index.shape)
    x, src = ctx.cast(x, dtype), ctx.cast(src, dtype)
    if 0 in index.shape:
        return x
    if reduce in ("amax", "amin"):
        return _scatter_extreme(ctx, x, dim, index, src, reduce == "amax", include_self)
    if reduce == "sum" and include_self:
        return _scatter_add(ctx, x, dim, index, src)
    zeros = ctx.const(0, dtype, x.shape)
    sums = Node(Op.SCATTER_ADD, (zeros, src, index), ("dim", dim), ctx.out_meta())
    counts = Node(Op.SCATTER_ADD, (zeros, ctx.const(1, dtype, index.shape), index),
                  ("dim", dim), ctx.out_meta())
    if include_self:                       # a mean over x and the values: x / 1 where none
        return ctx.binary(Op.DIV, ctx.binary(Op.ADD, sums, x), ctx.binary(Op.ADD, counts, 1))
    touched = ctx.pointwise(Op.GT, [counts, 0], torch.bool, dtype)
    if reduce == "sum":
        return ctx.where(touched, sums, x)
    return ctx.where(touched, ctx.binary(Op.DIV, sums, ctx.binary(Op.MAXIMUM, counts, 1)), x)


@lowering(aten.index_reduce.default)
def _index_reduce(ctx, x, dim, index, source, reduce, include_self=True):
    """scatter_reduce with index[i] spread over source's slice i along dim (the same
    reduction of the same values: amax, amin, mean; prod stays PyTorch's)."""
    if not x.shape or not source.shape:
        raise Unsupported("index_reduce of a 0-d tensor")
    dim = dim % len(x.shape)
    shape = [1] * len(source.shape)
    shape[dim] = source.shape[dim]
    spread = ctx.expand(ctx.reshape(index, tuple(shape)), source.shape)
    return _scatter_reduce(ctx, x, dim, spread, source, reduce, include_self)


def _scatter_extreme(ctx, x, dim, index, src, is_max: bool, include_self: bool):
    dtype = ctx.out.dtype
    if not include_self:           # the elements the values reach start from the identity
        writes_allowed(ctx)
        start = scan_identity(Op.CUMMAX if is_max else Op.CUMMIN, dtype)
        x = Node(Op.SCATTER_SET, (x, ctx.const(start, dtype, index.shape), index), ("dim", dim),
                 ctx.out_meta())
    return Node(Op.SCATTER_MAX if is_max else Op.SCATTER_MIN, (x, src, index), ("dim", dim),
                ctx.out_meta())


@lowering(aten.put.default)
def _put(ctx, x, index, source, accumulate=False):
    """index_put on the flattened tensor (put's indices count elements row-major)."""
    dtype = ctx.out.dtype
    op = _scatter_op(ctx, accumulate)
    n, m = x.meta.numel, index.meta.numel
    if m == 0:
        return ctx.cast(x, dtype)
    flat = ctx.cast(ctx.reshape(x, (n,)), dtype)
    index = ctx.reshape(index, (m,))
    source = ctx.as_node(source, dtype)
    values = ctx.expand(ctx.reshape(ctx.cast(source, dtype), (source.meta.numel,)), (m,))
    written = Node(op, (flat, values, index), ("index", (0,)), ctx.meta((n,), dtype))
    return ctx.reshape(written, x.shape)


@lowering(aten.diagonal_scatter.default)
def _diagonal_scatter(ctx, x, src, offset=0, dim1=0, dim2=1):
    """x with its (dim1, dim2) diagonal replaced by src: the two dims moved last, src written
    at (i, i + offset) by SCATTER_SET, the dims moved back."""
    rank = len(x.shape)
    dim1, dim2 = dim1 % rank, dim2 % rank
    length = src.shape[-1] if src.shape else 0
    if length == 0:
        return ctx.cast(x, ctx.out.dtype)
    writes_allowed(ctx)
    order = diagonal_last(rank, dim1, dim2)
    moved = ctx.permute(ctx.cast(x, ctx.out.dtype), order)
    rows, cols = diagonal_indices(ctx, length, offset)
    written = Node(Op.SCATTER_SET, (moved, ctx.cast(src, ctx.out.dtype), rows, cols),
                   ("index", (rank - 2, rank - 1)), ctx.meta(moved.shape, ctx.out.dtype))
    return ctx.permute(written, [order.index(d) for d in range(rank)])


@lowering(aten.histc.default)
def _histc(ctx, x, bins=100, min=0, max=0):
    """Counts of x's elements in `bins` equal bins over [min, max] (ATen's bin: (x - min) *
    bins / (max - min), truncated, max itself in the last), elements outside or NaN not
    counted: a scatter-add of ones (exact integers). A range taken from the data (min ==
    max) and 16-bit inputs (whose bin arithmetic eager rounds in 16 bits) stay PyTorch's."""
    lo, hi, dtype = float(min), float(max), ctx.out.dtype
    if dtype not in (torch.float32, torch.float64) or not lo < hi or bins < 1:
        raise Unsupported("histc over the data's range, of 16-bit floats, or with no bins")
    if dtype not in ATOMIC_DTYPES and ctx.device.type == "cuda":
        raise Unsupported(f"atomic add of {dtype}")
    n = x.meta.numel
    flat = ctx.reshape(x, (n,))
    inside = ctx.pointwise(Op.AND, [ctx.pointwise(Op.GE, [flat, lo], torch.bool, dtype),
                                    ctx.pointwise(Op.LE, [flat, hi], torch.bool, dtype)],
                           torch.bool)
    scaled = ctx.pointwise(Op.DIV, [ctx.pointwise(Op.MUL, [ctx.pointwise(
        Op.SUB, [flat, lo], dtype), float(bins)], dtype), hi - lo], dtype)
    pos = ctx.cast(ctx.where(inside, scaled, 0.0, dtype), torch.int64)      # >= 0: truncation
    pos = ctx.pointwise(Op.MINIMUM, [pos, bins - 1], torch.int64)           # x == max: last
    index = ctx.where(inside, pos, bins, torch.int64)                        # outside: nowhere
    return Node(Op.SCATTER_ADD, (ctx.const(0, dtype, (bins,)), ctx.const(1, dtype, (n,)), index),
                ("dim", 0), ctx.meta((bins,), dtype))

"""Lowerings of movement ops: views, permutes, slices, concatenation, padding, indexing.

None of these copies data: the fusion pass folds them into the index arithmetic of the loads
of the kernel that consumes them.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, contiguous_strides, numel
from cherenkov.ir.ops import Op
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten


@lowering(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy, aten.unsqueeze,
          aten.squeeze, aten.flatten.using_ints, aten.unflatten, aten._reshape_alias)
def _view(ctx, x, *args, **kwargs):
    return ctx.reshape(x, ctx.out.shape)


@lowering(aten.alias, aten.detach, aten.clone, aten.contiguous, aten.lift_fresh_copy,
          aten.lift_fresh, aten.positive, aten.alias_copy, aten.detach_copy)
def _identity(ctx, x, *args, **kwargs):
    return x


@lowering(aten.permute, aten.permute_copy)
def _permute(ctx, x, dims):
    return ctx.permute(x, dims)


@lowering(aten.t)
def _t(ctx, x):
    return ctx.permute(x, (1, 0)) if len(x.shape) == 2 else x


@lowering(aten.transpose.int, aten.transpose_copy.int)
def _transpose(ctx, x, a, b):
    dims = list(range(len(x.shape)))
    if not dims:
        return x
    a, b = a % len(dims), b % len(dims)
    dims[a], dims[b] = dims[b], dims[a]
    return ctx.permute(x, dims)


@lowering(aten.expand, aten.expand_copy, aten.broadcast_to)
def _expand(ctx, x, shape, implicit=False):
    return ctx.expand(x, ctx.out.shape)


@lowering(aten.expand_as)
def _expand_as(ctx, x, other):
    return ctx.expand(x, other.shape)


def slice_node(ctx, x, dim, start, end, step):
    size = x.shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    length = max(0, (end - start + step - 1) // step)
    shape = list(x.shape)
    shape[dim] = length
    if start == 0 and step == 1 and length == size:
        return x
    return Node(Op.SLICE, (x,), (dim, start, step), ctx.meta(shape, x.dtype))


@lowering(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    return slice_node(ctx, x, dim % len(x.shape), start, end, step)


@lowering(aten.select.int, aten.select_copy.int)
def _select(ctx, x, dim, index):
    dim = dim % len(x.shape)
    index = index + x.shape[dim] if index < 0 else index
    sliced = slice_node(ctx, x, dim, index, index + 1, 1)
    return ctx.reshape(sliced, ctx.out.shape)


@lowering(aten.narrow, aten.narrow_copy)
def _narrow(ctx, x, dim, start, length):
    dim = dim % len(x.shape)
    start = start + x.shape[dim] if start < 0 else start      # narrow counts a negative start
    return slice_node(ctx, x, dim, start, start + length, 1)  # from the end, then takes length


@lowering(aten.split.Tensor, aten.split_with_sizes, aten.unbind.int, aten.chunk,
          aten.split_with_sizes_copy, aten.unbind_copy.int)
def _split(ctx, x, *args, **kwargs):
    unbind = ctx.target.overloadpacket in (aten.unbind, aten.unbind_copy)
    dim_at = 0 if unbind else 1              # unbind(x, dim); split(x, sizes, dim)
    dim = kwargs.get("dim", args[dim_at] if len(args) > dim_at else 0) % max(len(x.shape), 1)
    outs, offset = [], 0
    for out in ctx.out:
        if unbind:
            piece = slice_node(ctx, x, dim, offset, offset + 1, 1)
            outs.append(ctx.reshape(piece, out.shape))
            offset += 1
        else:
            length = out.shape[dim]
            outs.append(slice_node(ctx, x, dim, offset, offset + length, 1))
            offset += length
    return outs


@lowering(aten.cat, empty_inputs=True)
def _cat(ctx, tensors, dim=0):
    tensors = [t for t in tensors if not (len(t.shape) == 1 and t.shape[0] == 0)]
    if not tensors:
        raise Unsupported("cat of only empty tensors")
    dim = dim % len(ctx.out.shape)
    dtype = ctx.out.dtype
    tensors = [ctx.cast(t, dtype) for t in tensors if t.shape[dim] > 0] or tensors[:1]
    if len(tensors) == 1:
        return tensors[0]
    return Node(Op.CAT, tuple(tensors), (dim,), ctx.out_meta())


@lowering(aten.stack)
def _stack(ctx, tensors, dim=0):
    dim = dim % len(ctx.out.shape)
    pieces = [ctx.reshape(t, t.shape[:dim] + (1,) + t.shape[dim:]) for t in tensors]
    pieces = [ctx.cast(p, ctx.out.dtype) for p in pieces]
    if len(pieces) == 1:
        return pieces[0]
    return Node(Op.CAT, tuple(pieces), (dim,), ctx.out_meta())


@lowering(aten.constant_pad_nd)
def _pad(ctx, x, pad, value=0):
    ndim = len(x.shape)
    pads = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        pads[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    # negative padding crops: slice first, then pad with the non-negative parts
    for d, (lo, hi) in enumerate(pads):
        if lo < 0 or hi < 0:
            x = slice_node(ctx, x, d, max(-lo, 0), x.shape[d] - max(-hi, 0), 1)
    pads = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pads)
    if all(p == (0, 0) for p in pads):
        return x
    return Node(Op.PAD, (x,), (pads, value), ctx.out_meta())


@lowering(aten.flip)
def _flip(ctx, x, dims):
    dims = tuple(sorted({d % len(x.shape) for d in dims})) if x.shape else ()
    if not dims:
        return x
    from cherenkov.lowering.scan import reversed_scan
    reverse = reversed_scan(ctx, x, dims)    # a cumsum's gradient: one scan from the end
    if reverse is not None:
        return reverse
    return Node(Op.FLIP, (x,), (dims,), ctx.out_meta())


@lowering(aten.repeat)
def _repeat(ctx, x, repeats):
    lead = len(repeats) - len(x.shape)
    x = ctx.reshape(x, (1,) * lead + x.shape)
    inter, expanded = [], []
    for r, s in zip(repeats, x.shape):
        inter += [1, s]
        expanded += [r, s]
    x = ctx.expand(ctx.reshape(x, inter), expanded)
    return ctx.reshape(x, ctx.out.shape)


@lowering(aten.gather)
def _gather(ctx, src, dim, index, sparse_grad=False):
    if len(src.shape) == 0:
        return ctx.reshape(src, ctx.out.shape)
    return Node(Op.GATHER, (src, index), (dim % len(src.shape),), ctx.out_meta())


@lowering(aten.index_select)
def _index_select(ctx, src, dim, index):
    dim = dim % max(len(src.shape), 1)
    if len(src.shape) == 0:
        return ctx.reshape(src, ctx.out.shape)
    return _index(ctx, src, [None] * dim + [ctx.reshape(index, (index.shape or (1,))[-1:])])


@lowering(aten.embedding)
def _embedding(ctx, weight, indices, *args):
    return _index(ctx, weight, [indices])


@lowering(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(ctx, src, indices):
    dims, nodes = [], []
    for d, idx in enumerate(indices):
        if idx is None:
            continue
        if idx.dtype == torch.bool:
            raise Unsupported("boolean mask indexing (data-dependent shape)")
        dims.append(d)
        nodes.append(idx)
    if not nodes:
        return src
    shape = torch.broadcast_shapes(*[n.shape for n in nodes])
    nodes = [ctx.expand(n, shape) for n in nodes]
    return Node(Op.INDEX, (src, *nodes), (tuple(dims),), ctx.out_meta())


def _row_major(shape, strides) -> bool:
    """Whether `strides` lay `shape` out densely in row-major order (size-1 dims: any stride)."""
    return all(st == want for n, st, want in zip(shape, strides, contiguous_strides(shape))
               if n != 1)


@lowering(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    """x's (dim1, dim2) diagonal, shifted by `offset`, as its last dim: those two dims moved
    last and indexed by one iota each (the view eager makes, read as a gather)."""
    rank = len(x.shape)
    dim1, dim2 = dim1 % rank, dim2 % rank
    length = ctx.out.shape[-1]
    if length == 0:
        raise Unsupported("an empty diagonal")
    order = diagonal_last(rank, dim1, dim2)
    rows, cols = diagonal_indices(ctx, length, offset)
    return Node(Op.INDEX, (ctx.permute(x, order), rows, cols), ((rank - 2, rank - 1),),
                ctx.out_meta())


def diagonal_last(rank: int, dim1: int, dim2: int) -> list[int]:
    """The dims in the order that puts dim1 and dim2 last (a diagonal's two dims)."""
    return [d for d in range(rank) if d not in (dim1, dim2)] + [dim1, dim2]


def diagonal_indices(ctx, length: int, offset: int) -> tuple[Node, Node]:
    """(rows, cols) of the `length` elements of a diagonal `offset` above the main one."""
    rows = ctx.iota((length,), 0)
    cols = rows
    if offset > 0:
        cols = ctx.pointwise(Op.ADD, [rows, offset], torch.int64)
    elif offset < 0:
        rows = ctx.pointwise(Op.ADD, [rows, -offset], torch.int64)
    return rows, cols


@lowering(aten.as_strided, aten.as_strided_copy)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    if x.op != Op.INPUT:
        # all of a value eager lays out row-major, read row-major from its start: a reshape
        # (group_norm's decomposition views its (N, G, C/G, 1) statistics as (N, C) so)
        if not storage_offset and numel(size) == x.meta.numel \
                and _row_major(x.meta.shape, x.meta.strides) and _row_major(size, stride):
            return ctx.reshape(x, size)
        raise Unsupported("as_strided of a computed value")
    offset = x.meta.storage_offset if storage_offset is None else storage_offset
    return Node(Op.AS_STRIDED, (x,), (tuple(size), tuple(stride), offset), ctx.out_meta())


@lowering(aten.slice_scatter.default)
def _slice_scatter(ctx, base, src, dim=0, start=None, end=None, step=1):
    """base with base[start:end:step] along dim replaced by src: a select on the index, so
    slicing's backward (a zero base) is one pointwise kernel, not a fill and a scatter."""
    dim = dim % len(base.shape)
    size = base.shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    start = max(0, min(size, start))
    if step != 1:
        raise Unsupported("slice_scatter with a step")
    length = src.shape[dim]
    if length == 0:
        return ctx.cast(base, ctx.out.dtype)
    pads = tuple((start, size - start - length) if d == dim else (0, 0)
                 for d in range(len(base.shape)))
    src = ctx.cast(src, ctx.out.dtype)
    placed = Node(Op.PAD, (src,), (pads, 0), ctx.meta(base.shape, ctx.out.dtype)) \
        if any(p != (0, 0) for p in pads) else src
    idx = ctx.iota(base.shape, dim)
    inside = ctx.pointwise(Op.AND, [ctx.pointwise(Op.GE, [idx, start], torch.bool, torch.int64),
                                    ctx.pointwise(Op.LT, [idx, start + length], torch.bool,
                                                  torch.int64)], torch.bool)
    return ctx.where(inside, placed, base)


@lowering(aten.select_scatter.default)
def _select_scatter(ctx, base, src, dim, index):
    dim = dim % len(base.shape)
    index = index + base.shape[dim] if index < 0 else index
    src = ctx.reshape(src, tuple(1 if d == dim else s for d, s in enumerate(base.shape)))
    return _slice_scatter(ctx, base, src, dim, index, index + 1, 1)


@lowering(aten.as_strided_scatter.default)
def _as_strided_scatter(ctx, base, src, size, stride, storage_offset=None):
    """base with the elements its (size, stride, offset) view reads replaced by src, where that
    view is a row-major run of a row-major base (functionalization's form of writing into a
    view of a fresh buffer: a channels-last global pool's backward): a slice_scatter of the
    flattened base."""
    offset = storage_offset or 0
    n = numel(size)
    if not (_row_major(size, stride) and _row_major(base.meta.shape, base.meta.strides)
            and base.meta.storage_offset == 0 and 0 <= offset and offset + n <= base.meta.numel):
        raise Unsupported("as_strided_scatter of a view that is no row-major run")
    flat = ctx.reshape(base, (base.meta.numel,))
    placed = _slice_scatter(ctx, flat, ctx.reshape(src, (n,)), 0, offset, offset + n, 1)
    return ctx.reshape(placed, tuple(base.shape))


@lowering(aten.unfold.default, aten.unfold_copy.default)
def _unfold(ctx, x, dimension, size, step):
    """x.unfold(dim, size, step): the windows of `size` elements every `step` along dim, that
    dim now counting the windows and a last dim their elements -- the dim moved last and
    windowed (`Op.WINDOW`, one dim, as pooling's), the window count moved back."""
    rank = len(x.shape)
    if rank == 0:
        raise Unsupported("unfold of a 0-d tensor")
    dim = dimension % rank
    n = ctx.out.shape[dim]
    order = [d for d in range(rank) if d != dim] + [dim]
    moved = ctx.permute(x, order)
    lead = tuple(moved.shape[:-1])
    w = Node(Op.WINDOW, (moved,), ((size,), (step,), (1,), (0,), 0),
             ctx.meta((*lead, n, size), x.dtype))
    back = list(range(dim)) + [rank - 1] + list(range(dim, rank - 1)) + [rank]
    return ctx.permute(w, back)

"""IR view chains as PyTorch views: each view op as a tensor method, and the one strided
layout a chain of them gives a buffer (or None when some step would copy). Used by the
runtime to hand library calls views and by fusion to decide when a returned view can be one.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node
from cherenkov.ir.ops import Op


def final_layout(base: Node, ops) -> tuple | None:
    """(size, stride, storage offset) of a chain of views applied to `base`, worked out once on
    a meta tensor with base's layout; None if some step would copy (a reshape that is not a
    view) or base's layout at run time is not the one recorded (kernel outputs are contiguous,
    library outputs are brought to their recorded layout, inputs are specialized on it)."""
    meta = base.meta
    if meta is None or isinstance(meta, tuple):
        return None
    extent = meta.storage_offset + sum((s - 1) * st for s, st in zip(meta.shape, meta.strides)) + 1
    storage = torch.empty(max(extent, 1), dtype=meta.dtype, device="meta")
    t = storage.as_strided(meta.shape, meta.strides, meta.storage_offset)
    try:
        for op in ops:
            r = op(t)
            if not r._is_view() and r is not t:
                return None
            t = r
    except RuntimeError:
        return None
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def torch_view(node: Node):
    op, args, shape = node.op, node.args, node.shape
    if op == Op.RESHAPE:
        return lambda t: t.reshape(shape)
    if op == Op.PERMUTE:
        return lambda t: t.permute(args[0])
    if op == Op.EXPAND:
        return lambda t: t.expand(shape)
    if op == Op.SLICE:
        dim, start, step = args
        length = shape[dim]
        return lambda t: t.narrow(dim, start, 1 + (length - 1) * step)[
            (slice(None),) * dim + (slice(None, None, step),)] if length else t.narrow(dim, start, 0)
    raise ValueError(op)

"""The order a pointwise kernel's lanes take its elements in: row-major, or a permutation of
it -- a channels-last tensor's memory order -- where that makes more of its full-size loads
and stores unit-stride in the lane index.

A channels-last (N, C, H, W) tensor walked row-major puts neighbouring lanes C elements
apart: every load and store of `relu(x * 2)` on a channels-last x then touches a sector per
element. Walking x's memory order instead, lane x is element (n, c, h, w) with c = x % C, and
both the load of x and the store of the (channels-last) result are at address x. The kernel is
built in each candidate order -- row-major, and the layout of each full-size buffer it reads or
writes that is dense but not row-major -- and the one with the most bytes accessed at unit
stride kept (row-major on ties).

    kernel = build_in_best_order(group, needed, build)     # build(order) -> Kernel
"""
from __future__ import annotations

from cherenkov.codegen import indexing as ix
from cherenkov.codegen.kernel_ir import Kernel, Load, Store
from cherenkov.ir.graph import TensorMeta, dense_order, numel
from cherenkov.ir.ops import GroupOp


def layout_order(meta) -> tuple | None:
    """(shape, perm) of a dense layout that is not row-major (perm: dims by decreasing
    stride), or None."""
    if not isinstance(meta, TensorMeta) or meta.stride is None:
        return None
    perm = dense_order(meta.shape, meta.strides)
    if perm is None or perm == tuple(range(len(perm))):
        return None
    return tuple(meta.shape), perm


def unit_stride_bytes(kernel: Kernel) -> int:
    """Bytes of the kernel's full-size loads and stores whose address steps by one element
    from lane to lane (index x + c)."""
    sizes = {b.name: (b.dtype.itemsize, b.numel) for b in kernel.inputs + kernel.outputs}
    total = 0
    for s in kernel.body:
        if isinstance(s, (Load, Store)) and s.buffer in sizes:
            itemsize, n = sizes[s.buffer]
            terms = s.index.terms
            if n >= kernel.X and len(terms) == 1 and terms[0] == (ix.Var("x", kernel.X), 1):
                total += itemsize * kernel.X
    return total


def candidates(group, needed) -> list[tuple]:
    """The non-row-major dense layouts of the full-size buffers `group` reads or stores."""
    metas = [r.meta for r in group.reads] + [m.meta for m in group.members if m in needed]
    out = []
    for meta in metas:
        order = layout_order(meta)
        if order is not None and numel(order[0]) == group.X and order not in out:
            out.append(order)
    return out


def build_in_best_order(group, needed, build) -> Kernel:
    kernel = build(None)
    if group.R != 1 or group.row_loop or any(
            m.op in GroupOp.SCATTER or m.op in GroupOp.SCAN for m in group.members):
        return kernel
    best = unit_stride_bytes(kernel)
    for order in candidates(group, needed):
        other = build(order)
        score = unit_stride_bytes(other)
        if score > best:
            kernel, best = other, score
    return kernel

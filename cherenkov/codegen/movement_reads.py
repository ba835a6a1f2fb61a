"""Reading through movement ops inside a kernel (KernelBuilder's part that turns views,
selects, pads, windows and gathers into index expressions, masks and selects).

Views (reshape, permute, expand, slice, flip) only rewrite the index. A concatenation reads
the pieces its index range can reach, each under its own range test; a pad and a pooling
window read their source at a shifted index where that lies inside it, else the fill
(`_bounded`: no test where the index range proves it inside). A gather / index reads at a
run-time index wrapped like PyTorch's; out of range, it reads nothing and a floating value
is NaN (`_poisoned`).
"""
from __future__ import annotations

import torch

from cherenkov.codegen import indexing as ix
from cherenkov.ir.graph import Node
from cherenkov.ir.ops import Op


class NotFusible(Exception):
    """These nodes cannot share one kernel (e.g. a reduction read at another index)."""


class MovementReads:
    """Mixed into KernelBuilder: `compute`, `load`, `_op`, `_const`, `_ranged_index` and
    `_and_mask` are its."""

    def _movement(self, node: Node, idx: tuple, mask) -> str:
        op, src = node.op, node.inputs[0]
        if op in (Op.RESHAPE, Op.PERMUTE):
            return self.compute(src, view_index(node, idx), mask)
        if op == Op.EXPAND:
            if src.shape == ():
                return self.compute(src, (), mask)
            src_idx = tuple(ix.const(0) if s == 1 and o != 1 else i
                            for i, s, o in zip(idx, src.shape, node.shape))
            return self.compute(src, src_idx, mask)
        if op == Op.SLICE:
            dim, start, step = node.args
            src_idx = list(idx)
            src_idx[dim] = ix.add(start, ix.mul(idx[dim], step))
            return self.compute(src, tuple(src_idx), mask)
        if op == Op.FLIP:
            src_idx = tuple(ix.add(node.shape[d] - 1, ix.mul(i, -1)) if d in node.args[0] else i
                            for d, i in enumerate(idx))
            return self.compute(src, src_idx, mask)
        if op == Op.CAT:
            return self._cat(node, idx, mask)
        if op == Op.PAD:
            return self._pad(node, idx, mask)
        if op == Op.WINDOW:
            return self._window(node, idx, mask)
        if op == Op.GATHER:
            dim = node.args[0]
            where, ok = self._index_value(node.inputs[1], idx, mask, src.shape[dim])
            src_idx = list(idx)
            src_idx[dim] = where
            return self._poisoned(self.compute(src, tuple(src_idx), self._and_mask(mask, ok)),
                                  ok, node.dtype)
        if op == Op.INDEX:
            return self._index(node, idx, mask)
        if op == Op.AS_STRIDED:
            size, stride, offset = node.args
            name, meta = self.buffers[src]
            fake = meta.replace(shape=tuple(size), stride=tuple(stride), storage_offset=offset)
            self.buffers[node] = (name, fake)
            return self.load(node, idx, mask)
        raise NotFusible(f"movement {op.name}")

    def _index_value(self, index_node: Node, idx, mask, size: int) -> tuple[ix.Lin, str]:
        """A run-time index as an expression atom, wrapped into [0, size) like PyTorch, and
        the bool value saying it was in [-size, size): where it was not, the caller reads
        and writes nothing (PyTorch raises; a kernel cannot)."""
        value = self.compute(index_node, idx, mask)
        zero = self._const(0, torch.int64)
        neg = self._op(Op.LT, (value, zero), torch.bool)
        wrapped = self._op(Op.WHERE, (neg, self._op(Op.ADD, (value, self._const(size, torch.int64)),
                                                     torch.int64), value), torch.int64)
        ok = self._op(Op.AND, (self._op(Op.GE, (wrapped, zero), torch.bool),
                               self._op(Op.LT, (wrapped, self._const(size, torch.int64)),
                                        torch.bool)), torch.bool)
        return ix.dyn(wrapped, 0, size - 1), ok

    def _poisoned(self, value: str, ok: str, dtype: torch.dtype) -> str:
        """A value read through a run-time index: NaN where the index was out of range (for
        a floating value: a wrong index shows as NaN, never as a number from elsewhere)."""
        if not dtype.is_floating_point:
            return value
        return self._op(Op.WHERE, (ok, value, self._const(float("nan"), dtype)), dtype)

    def _in_range(self, index: ix.Lin, lo: int, hi: int) -> str:
        value = self._ranged_index(index)
        ge = self._op(Op.GE, (value, self._const(lo, torch.int64)), torch.bool)
        lt = self._op(Op.LT, (value, self._const(hi, torch.int64)), torch.bool)
        return self._op(Op.AND, (ge, lt), torch.bool)

    def _cat(self, node: Node, idx, mask) -> str:
        """The piece idx[dim] selects; pieces its range rules out are never read, and a piece
        its range proves is read alone, without a select."""
        dim = node.args[0]
        lo, hi = ix.rng(idx[dim])
        offset, candidates = 0, []
        for src in node.inputs:
            size = src.shape[dim]
            if hi >= offset and lo < offset + size:
                candidates.append((src, offset, size))
            offset += size
        if len(candidates) == 1:
            src, offset, size = candidates[0]
            src_idx = list(idx)
            src_idx[dim] = ix.add(idx[dim], -offset)
            return self.compute(src, tuple(src_idx), mask)
        pieces = []
        for src, offset, size in candidates:
            cond = self._in_range(idx[dim], offset, offset + size)
            src_idx = list(idx)
            # read only where this piece is selected: there its index lies in [0, size)
            src_idx[dim] = ix.within(ix.add(idx[dim], -offset), 0, size - 1)
            value = self.compute(src, tuple(src_idx), self._and_mask(mask, cond))
            pieces.append((cond, value))
        result = pieces[-1][1]
        for cond, value in reversed(pieces[:-1]):
            result = self._op(Op.WHERE, (cond, value, result), node.dtype)
        return result

    def _bounded(self, node: Node, src: Node, at: list, mask, fill) -> str:
        """`src` at `at` (one index expression per dim) where every index lies inside src,
        else the fill: a dim whose index range stays inside needs no test, one always outside
        makes the value the fill, the others are tested (and src read only where they hold)."""
        src_idx, cond = [], None
        for i, size in zip(at, src.shape):
            lo, hi = ix.rng(i)
            if lo >= 0 and hi < size:                       # always inside the source
                src_idx.append(i)
                continue
            if hi < 0 or lo >= size:                        # always in the padding
                return self._const(fill, node.dtype)
            # read only where the source is selected: there its index lies in [0, size)
            src_idx.append(ix.within(i, 0, size - 1))
            inside = self._in_range(i, 0, size)
            cond = inside if cond is None else self._op(Op.AND, (cond, inside), torch.bool)
        value = self.compute(src, tuple(src_idx), self._and_mask(mask, cond))
        if cond is None:
            return value
        return self._op(Op.WHERE, (cond, value, self._const(fill, node.dtype)), node.dtype)

    def _pad(self, node: Node, idx, mask) -> str:
        """The source where idx lies inside it, else the fill."""
        pads, fill = node.args
        at = [ix.add(i, -lo) for (lo, _), i in zip(pads, idx)]
        return self._bounded(node, node.inputs[0], at, mask, fill)

    def _window(self, node: Node, idx, mask) -> str:
        """Element k of window o along each windowed dim: the source at o*stride + k*dilation
        - padding where that lies inside it, else the fill."""
        kernel, stride, dilation, padding, fill = node.args
        src, nd = node.inputs[0], len(kernel)
        lead = len(src.shape) - nd
        at = list(idx[:lead]) + [
            ix.add(ix.add(ix.mul(idx[lead + i], stride[i]), ix.mul(idx[lead + nd + i],
                                                                   dilation[i])), -padding[i])
            for i in range(nd)]
        return self._bounded(node, src, at, mask, fill)

    def _index(self, node: Node, idx, mask) -> str:
        src, index_nodes = node.inputs[0], node.inputs[1:]
        dims = node.args[0]
        bshape = index_nodes[0].shape
        nb = len(bshape)
        adjacent = list(dims) == list(range(dims[0], dims[0] + len(dims)))
        start = dims[0] if adjacent else 0
        bidx = tuple(idx[start:start + nb])
        rest = list(idx[:start]) + list(idx[start + nb:])
        src_idx, k, ok = [], 0, None
        for d in range(len(src.shape)):
            if d in dims:
                inode = index_nodes[dims.index(d)]
                where, in_range = self._index_value(inode, bidx, mask, src.shape[d])
                src_idx.append(where)
                ok = self._and_mask(ok, in_range)
            else:
                src_idx.append(rest[k])
                k += 1
        return self._poisoned(self.compute(src, tuple(src_idx), self._and_mask(mask, ok)), ok,
                              node.dtype)


def view_index(node: Node, idx: tuple) -> tuple:
    """The index into a reshape's or permute's source that holds its element `idx`."""
    src = node.inputs[0]
    if node.op == Op.RESHAPE:
        return ix.unravel(ix.ravel(idx, node.shape), src.shape)
    src_idx = [None] * len(idx)
    for out_dim, src_dim in enumerate(node.args[0]):
        src_idx[src_dim] = idx[out_dim]
    return tuple(src_idx)

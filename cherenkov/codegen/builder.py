"""Graph IR group → kernel IR: every value as a function of the kernel's (x, r) indices.

`compute(node, idx)` returns the kernel value of `node` at multi-index `idx` (index
expressions). Movement ops only rewrite `idx` (views fold into index arithmetic; the
selects, pads, windows and gathers are movement_reads.py's); elementwise ops recurse; values
realized outside the kernel are loaded through their strides. Results are memoized by
(node, idx, mask), so a value read twice at the same index is computed once. A reduction can
only be consumed at the index it was computed at; anything else raises `NotFusible` and the
fusion pass keeps the two apart.
"""
from __future__ import annotations

import torch

from cherenkov.codegen import folding
from cherenkov.codegen import indexing as ix
from cherenkov.codegen.kernel_ir import (Buffer, Cast, Compute, Constant, IndexValue, Kernel,
                                         Load, Reduce, Scan, Store)
from cherenkov.codegen.movement_reads import MovementReads, NotFusible, view_index
from cherenkov.ir.graph import Node, contiguous_strides, numel
from cherenkov.ir.ops import GroupOp, Op


SCATTER_MODE = {Op.SCATTER_ADD: "add", Op.SCATTER_SET: "set", Op.SCATTER_MAX: "max",
                Op.SCATTER_MIN: "min"}


def _in_order(x: ix.Lin, shape: tuple, perm: tuple) -> ix.Lin:
    """The row-major position in `shape` of the element x counts to in `shape` permuted by
    `perm` (dim perm[0] outermost)."""
    at = ix.unravel(x, tuple(shape[p] for p in perm))
    idx = [None] * len(shape)
    for j, p in enumerate(perm):
        idx[p] = at[j]
    return ix.ravel(tuple(idx), tuple(shape))


def _in_bounds(index: ix.Lin, extent: int) -> bool:
    """`index`, affine in the kernel's own variables, stays in [0, extent) on every lane."""
    if not ix.variables(index) <= {"x", "r"}:
        return False
    lo, hi = ix.rng(index)
    return lo >= 0 and hi < extent


class KernelBuilder(MovementReads):
    def __init__(self, name: str, X: int, R: int, buffers: dict[Node, tuple[str, object]],
                 row_loop: int = 0, reductions: list[Node] = (), halves: int = 0,
                 x_order: tuple | None = None):
        """`buffers`: node -> (buffer name, TensorMeta) for every value materialized outside;
        `row_loop` > 0: each program loops over that many rows (see kernel_ir.Kernel);
        `reductions`: the reduction members to come (they place pointwise members);
        `halves` = D > 0 (pointwise only): lane x computes the elements j and j + D/2 of row
        x // (D/2), j = x % (D/2), of every member (X/2 lanes; see `add_member`);
        `x_order` = (shape, perm) (pointwise only): lane x takes the element at position x of
        `shape` permuted by `perm` -- a channels-last tensor's memory order -- instead of the
        row-major one (passes/memory_order.py)."""
        if halves:
            X //= 2
        self.kernel = Kernel(name, X, R, row_loop=row_loop, halves=halves)
        self.halves = halves
        self.loads: dict = {}                      # (buffer, index, mask) -> loaded value
        self.ranges: dict[str, tuple] = {}         # index value -> its (lo, hi) over the kernel
        self.indices: dict[str, ix.Lin] = {}       # index value -> its expression
        self.known: dict[str, object] = {}         # constant -> its Python value
        self.buffers = buffers
        self.x = ix.var("x", X) if x_order is None else _in_order(ix.var("x", X), *x_order)
        self.r = ix.var("r", R)
        self.memo: dict = {}
        self.reduced: dict[Node, tuple] = {}       # reduction member -> (value, its x-index)
        self.members: set[Node] = set()
        self.counter = 0
        self.used_inputs: dict[str, Buffer] = {}
        self.reductions = list(reductions)
        self.reversed_rows = False                 # a reversed scan here: lane r is R-1-r

    # ---- statements -----------------------------------------------------------------------
    def _new(self, dtype: torch.dtype, level: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        self.kernel.dtypes[name] = dtype
        self.kernel.levels[name] = level
        return name

    def _level(self, *parts) -> str:
        best = "c"
        for p in parts:
            if p == "xr" or (isinstance(p, ix.Lin) and self._index_level(p) == "xr"):
                return "xr"
            if p == "x" or (isinstance(p, ix.Lin) and self._index_level(p) == "x"):
                best = "x"
        return best

    def _index_level(self, e: ix.Lin) -> str:
        names = ix.variables(e)
        if "r" in names or any(self.kernel.levels.get(n) == "xr" for n in names):
            return "xr"
        if names:
            return "x"
        return "c"

    def emit(self, stmt):
        """Append a statement (its value's dtype and level were recorded by `_new`)."""
        self.kernel.body.append(stmt)
        return stmt.out

    # ---- loads ----------------------------------------------------------------------------
    def load(self, node: Node, idx, mask) -> str:
        name, meta = self.buffers[node]
        if name not in self.used_inputs:
            # the elements addressed from the storage's start: fewer than the tensor has when
            # it broadcasts (an expanded input's stride 0), none when it is empty
            extent = meta.storage_offset + 1 + sum((s - 1) * st for s, st in
                                                   zip(meta.shape, meta.strides))
            self.used_inputs[name] = Buffer(name, meta.dtype,
                                            extent if numel(meta.shape) else 0)
        index = ix.release(ix.dot(idx, meta.strides, meta.storage_offset))
        if mask is not None and self._level(index) != self.kernel.levels[mask] \
                and _in_bounds(index, self.used_inputs[name].numel):
            # an address coarser than its guard (constant over r where the mask varies with
            # it) and inside the buffer on every lane: the read needs no guard (what the
            # mask rules out, the caller discards), so a value that does not depend on r --
            # BatchNorm's per-channel statistics inside a pooling window -- is read and
            # computed once per output, not once per tap. (A guard at the address's own level,
            # a concatenation's piece, stays: unguarded, every lane would read every piece.)
            mask = None
        key = (name, index, mask)
        if key in self.loads:                      # the same address by another index path
            return self.loads[key]
        level = self._level(index, *( [self.kernel.levels[mask]] if mask else []))
        out = self._new(meta.dtype, level)
        self.loads[key] = self.emit(Load(out, name, index, mask))
        return out

    # ---- the recursion --------------------------------------------------------------------
    def compute(self, node: Node, idx: tuple, mask: str | None = None) -> str:
        key = (node, idx, mask)
        hit = self.memo.get(key)
        if hit is None and mask is not None:
            hit = self.memo.get((node, idx, None))
        if hit is not None:
            return hit
        if node in self.reduced:
            value, at = self.reduced[node]
            if at != idx:
                raise NotFusible("reduction read at another index")
            return value
        if node in self.buffers and node not in self.members:
            value = self.load(node, idx, mask)
        else:
            value = self._compute_inline(node, idx, mask)
        self.memo[key] = value
        return value

    def _compute_inline(self, node: Node, idx: tuple, mask) -> str:
        op = node.op
        if op == Op.CONST:
            return self._const(node.args[0], node.dtype)
        if op == Op.IOTA:
            return self._ranged_index(idx[node.args[0]])
        if op == Op.CAST:
            src = self.compute(node.inputs[0], idx, mask)
            out = self._new(node.dtype, self.kernel.levels[src])
            return self.emit(Cast(out, src, node.dtype))
        if op in GroupOp.ELEMENTWISE:
            args = tuple(self.compute(i, idx if i.shape else (), mask) for i in node.inputs)
            return self._op(op, args, node.dtype)
        if op in GroupOp.MOVEMENT:
            return self._movement(node, idx, mask)
        if op in GroupOp.REDUCTION:
            raise NotFusible("reduction outside its kernel")
        raise NotFusible(f"{op.name} cannot be computed inside a kernel")

    def _cast(self, value: str, dtype: torch.dtype) -> str:
        """`value` as `dtype` (itself when it has that dtype already)."""
        if self.kernel.dtypes[value] == dtype:
            return value
        out = self._new(dtype, self.kernel.levels[value])
        return self.emit(Cast(out, value, dtype))

    def _const(self, value, dtype) -> str:
        out = self._new(dtype, "c")
        self.known[out] = value
        return self.emit(Constant(out, value, dtype))

    def _ranged_index(self, index: ix.Lin) -> str:
        """The index as a kernel value, its range over the kernel remembered (see _fold)."""
        index = ix.release(index)
        out = self._new(torch.int64, self._level(index))
        self.ranges[out] = ix.rng(index)
        self.indices[out] = index
        return self.emit(IndexValue(out, index))

    def _op(self, op: Op, args, dtype) -> str:
        folded = self._fold(op, args, dtype)
        if folded is not None:
            return folded
        level = self._level(*[self.kernel.levels[a] for a in args])
        out = self._new(dtype, level)
        clamped = folding.clamped_range(op, args, self.ranges, self.known)
        if clamped is not None:                  # max / min of an index and a constant
            self.ranges[out] = clamped
        return self.emit(Compute(out, op, tuple(args)))

    def _fold(self, op: Op, args, dtype) -> str | None:
        """What the index ranges decide: a comparison of an index with a constant that holds
        (or fails) for every lane, and the and / or / where it feeds. None: not decided."""
        if folding.is_comparison(op) and len(args) == 2:
            decided = folding.comparison(op, *args, self.ranges, self.known)
            return None if decided is None else self._const(decided, torch.bool)
        if dtype == torch.int64 and any(a in self.indices for a in args):
            operands = [self.indices.get(a, self.known.get(a)) for a in args]
            if all(isinstance(o, ix.Lin) or (type(o) is int) for o in operands):
                folded = folding.index_arithmetic(op, operands)
                if folded is not None:
                    return self._ranged_index(folded)
        truth = [self.known.get(a) if self.kernel.dtypes.get(a) == torch.bool else None
                 for a in args]
        if op in (Op.AND, Op.OR) and len(args) == 2:
            absorbing = op == Op.OR          # True absorbs an or, False an and
            for i, t in enumerate(truth):
                if t is absorbing:
                    return args[i]
                if t is (not absorbing):
                    return args[1 - i]
            return None
        if op == Op.WHERE and truth[0] is not None:
            return self._cast(args[1] if truth[0] else args[2], dtype)
        return None

    def _and_mask(self, mask, cond):
        if mask is None or cond is None:
            return cond if mask is None else mask
        return self._op(Op.AND, (mask, cond), torch.bool)

    # ---- members --------------------------------------------------------------------------
    def add_member(self, node: Node, store_as: tuple[str, object] | None):
        """Compute a realized node at the kernel's own index; store it if others need it."""
        self.members.add(node)
        X, R = self.kernel.X, self.kernel.R
        if node.op in GroupOp.SCATTER:
            return self._scatter(node, store_as)
        if node.op in GroupOp.SCAN:
            return self._scan(node, store_as)
        if node.op in GroupOp.REDUCTION:
            n_red = node.args[0]
            src = node.inputs[0]
            kept, red = src.shape[: len(src.shape) - n_red], src.shape[len(src.shape) - n_red:]
            if self.kernel.row_loop and (numel(kept) != X or numel(red) != R):
                return self._row_loop_partial(node, kept, red, store_as)
            if numel(kept) != X or numel(red) != R:
                raise NotFusible("reduction domain differs from the kernel's")
            at = ix.unravel(self.x, kept)
            idx = at + ix.unravel(self.r, red)
            value = self.compute(src, idx)
            if R == 1:
                value = self._reduce_trivial(node, value)
            else:
                out = self._new(node.dtype, "x")
                value = self.emit(Reduce(out, node.op, value))
            self.reduced[node] = (value, at)
            computed = [(ix.unravel(self.x, node.shape), value)]
        else:
            computed = [(where, self.compute(node, where)) for where in self._elements(node)]
        self.kernel.fused_ops += 1
        if store_as is not None:
            name = store_as[0]
            for where, value in computed:
                # in the node's layout: contiguous, or the caller's (an output laid out as
                # eager lays it out, lowering/from_fx.py)
                self.kernel.body.append(Store(name, ix.dot(where, node.meta.strides),
                                              self._cast(value, node.dtype)))
            self.kernel.outputs.append(Buffer(name, node.dtype, numel(node.shape)))

    def _elements(self, node: Node) -> list[tuple]:
        """The element(s) of pointwise member `node` that lane (x, r) computes. A halves
        kernel's lane x computes the element j and the element j + D/2 of its row, j =
        x % (D/2): a concatenation of two halves along the row then reads each half without a
        select or mask, and a value read by both (rotate-half's x1 and x2) is loaded once."""
        X, R = self.kernel.X, self.kernel.R
        n = numel(node.shape)
        if self.halves:
            D, half = self.halves, self.halves // 2
            if R != 1 or n != 2 * X or node.shape[-1] != D:
                raise NotFusible("not a member of this halves kernel")
            return [ix.unravel(ix.add(ix.mul(ix.floordiv(self.x, half), D), h * half,
                                      ix.mod(self.x, half)), node.shape) for h in (0, 1)]
        where = self._placement(node) if n == X * R and R > 1 else None
        if where is None and n == X * R and self.reversed_rows:
            # where a reversed scan computes its elements, so a reader of it lines up
            where = ix.unravel(ix.add(ix.mul(self.x, R), ix.add(R - 1, ix.mul(self.r, -1))),
                               node.shape)
        elif where is None and n == X * R:
            where = ix.unravel(ix.add(ix.mul(self.x, R), self.r), node.shape)
            self.kernel.unplaced += R > 1
        elif where is None and n == X:
            where = ix.unravel(self.x, node.shape)
        elif where is None:
            raise NotFusible("pointwise size differs from the kernel's domain")
        return [where]

    def _placement(self, node: Node) -> tuple | None:
        """The element of a full-size pointwise member that lane (x, r) computes: the one a
        reduction of this kernel reads there, when it reads the member through views alone
        (reshape, permute, casts and elementwise ops of the same shape: a one-to-one map).
        A column reduction of a pointwise result (a bias gradient) then computes, stores and
        sums each element in the same lane; x*R + r (None here) would be another element."""
        for red in self.reductions:
            src = red.inputs[0]
            n_red = red.args[0]
            kept, rdims = src.shape[: len(src.shape) - n_red], src.shape[len(src.shape) - n_red:]
            if numel(kept) != self.kernel.X or numel(rdims) != self.kernel.R:
                continue
            found = self._through_views(src, ix.unravel(self.x, kept) + ix.unravel(self.r, rdims),
                                        node)
            if found is not None:
                return found
        return None

    def _through_views(self, n: Node, idx: tuple, target: Node, depth: int = 0):
        if n is target:
            return idx
        if depth > 64 or (n in self.buffers and n not in self.members):
            return None                               # loaded, not computed through
        if n.op in (Op.RESHAPE, Op.PERMUTE):
            return self._through_views(n.inputs[0], view_index(n, idx), target, depth + 1)
        if n.op == Op.CAST or n.op in GroupOp.ELEMENTWISE:
            for i in n.inputs:
                if i.shape == n.shape:
                    found = self._through_views(i, idx, target, depth + 1)
                    if found is not None:
                        return found
        return None

    def _row_loop_partial(self, node: Node, kept, red, store_as) -> None:
        """A column partial -- output (s, c) reduces src[s, c, i] over the CH rows i of chunk s
        -- in a row-loop kernel over rows x = s*CH + i and columns r = c: lane (x, r) adds
        src[x // CH, r, x % CH], combined over the program's rows, stored after the loop."""
        CH, R = self.kernel.row_loop, self.kernel.R
        if numel(red) != CH or numel(kept) != (self.kernel.X // CH) * R or \
                node.op not in (Op.SUM, Op.MAX, Op.MIN):
            raise NotFusible("not a column partial of this row loop")
        linear = ix.add(ix.mul(ix.floordiv(self.x, CH), R), self.r)
        value = self.compute(node.inputs[0], ix.unravel(linear, kept) +
                             ix.unravel(ix.mod(self.x, CH), red))
        value = self._cast(value, node.dtype)
        out = self._new(node.dtype, "xr")
        self.emit(Reduce(out, node.op, value, over_rows=True))
        self.reduced[node] = (out, None)              # never read inside this kernel
        self.kernel.fused_ops += 1
        if store_as is None:
            raise NotFusible("a column partial nobody reads")
        name, _ = store_as
        self.kernel.body.append(Store(name, ix.dot(ix.unravel(linear, node.shape),
                                                   contiguous_strides(node.shape)), out))
        self.kernel.outputs.append(Buffer(name, node.dtype, numel(node.shape)))

    def _scatter(self, node: Node, store_as) -> None:
        """out[dest(i)] += values[i] (SCATTER_ADD), = values[i] (SCATTER_SET), or the max / min
        of itself and values[i] (SCATTER_MAX / MIN) for every element i of values (out
        pre-filled with base)."""
        base, values, indices = node.inputs[0], node.inputs[1], node.inputs[2:]
        if numel(values.shape) != self.kernel.X or self.kernel.R != 1:
            raise NotFusible("scatter domain differs from the kernel's")
        vidx = ix.unravel(self.x, values.shape)
        value = self.compute(values, vidx)
        mode, where = node.args
        ok = None
        if mode == "index":
            d0, nb = where[0], len(indices[0].shape)
            bidx = vidx[d0:d0 + nb]
            dest = list(vidx[:d0])
            for i, d in zip(indices, where):
                at, in_range = self._index_value(i, bidx, None, base.shape[d])
                dest.append(at)
                ok = self._and_mask(ok, in_range)
            dest += list(vidx[d0 + nb:])
        else:
            dest = list(vidx)
            dest[where], ok = self._index_value(indices[0], vidx, None, base.shape[where])
        name, meta = store_as
        self.kernel.body.append(Store(name, ix.dot(dest, contiguous_strides(node.shape)),
                                      self._cast(value, node.dtype),
                                      scatter=SCATTER_MODE[node.op],
                                      mask=ok))
        self.kernel.outputs.append(Buffer(name, node.dtype, numel(node.shape)))
        self.kernel.fused_ops += 1

    def _scan(self, node: Node, store_as) -> None:
        """A running sum (product) along each row -- lane (x, r) holds row x's combination of
        elements 0..r (reversed: R-1-r..R-1) -- accumulated in the node's running dtype."""
        X, R = self.kernel.X, self.kernel.R
        if numel(node.shape) != X * R or node.shape[-1] != R:
            raise NotFusible("scan domain differs from the kernel's")
        reverse = node.args[0]          # from the row's end: lane r holds element R-1-r
        self.reversed_rows |= bool(reverse)
        idx = ix.unravel(self.x, node.shape[:-1]) + (
            ix.add(R - 1, ix.mul(self.r, -1)) if reverse else self.r,)
        value = self.compute(node.inputs[0], idx)
        acc = node.args[1]                  # the running value's dtype (lowering/scan.py)
        value = self._cast(value, acc)
        if R > 1:
            out = self._new(acc, "xr")
            value = self.emit(Scan(out, node.op, value))
        self.kernel.fused_ops += 1
        value = self._cast(value, node.dtype)
        self.reduced[node] = (value, idx)      # a pointwise reader here reads it at idx only
        if store_as is not None:
            self.kernel.body.append(Store(store_as[0], ix.dot(idx, node.meta.strides), value))
            self.kernel.outputs.append(Buffer(store_as[0], node.dtype, numel(node.shape)))

    def _reduce_trivial(self, node: Node, value: str) -> str:
        if node.op in (Op.ARGMAX, Op.ARGMIN):
            return self._const(0, torch.int64)
        if node.op in (Op.ANY, Op.ALL):
            return self._op(Op.NE, (value, self._const(0, self.kernel.dtypes[value])), torch.bool) \
                if self.kernel.dtypes[value] != torch.bool else value
        return self._cast(value, node.dtype)

    def finish(self) -> Kernel:
        self.kernel.inputs = list(self.used_inputs.values())
        return self.kernel


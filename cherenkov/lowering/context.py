"""Builders the lowerings share: constants, casts, broadcasting, and the fake output of the op.

A lowering sees `ctx.out` -- the op's output computed on fake tensors (shape, dtype, strides),
so it never re-derives PyTorch's shape or type-promotion rules by hand.
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node, TensorMeta
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.lowering.registry import Unsupported


class LoweringContext:
    def __init__(self, device: torch.device, route_attention: bool = True,
                 training: bool = False):
        self.device = device
        self.route_attention = route_attention   # SDPA calls to Cherenkov's attention kernels
        self.training = training                 # a forward graph: a backward graph follows
        self.compile_jobs: list = []             # library kernels this graph launches, for the
                                                 # compile workers (runtime/parallel_compile.py)
        self.later_jobs: list = []               # ... and kernels its backward will launch
        self.out = None          # fake output of the op being lowered
        self.target = None

    # ---- metadata -------------------------------------------------------------------------
    def meta(self, shape, dtype) -> TensorMeta:
        return TensorMeta(tuple(int(s) for s in shape), dtype, self.device)

    def out_meta(self, index: int | None = None) -> TensorMeta:
        out = self.out if index is None else self.out[index]
        return self.meta(out.shape, out.dtype)

    # ---- leaf values ----------------------------------------------------------------------
    def const(self, value, dtype: torch.dtype, shape=()) -> Node:
        if isinstance(value, torch.Tensor):
            value = value.item()
        if dtype.is_floating_point:
            value = float(value)
        elif dtype == torch.bool:
            value = bool(value)
        elif not dtype.is_complex:
            value = int(value)
        else:
            raise Unsupported("complex constants")
        node = Node(Op.CONST, (), (value,), self.meta((), dtype))
        return self.expand(node, shape) if tuple(shape) else node

    def iota(self, shape, dim: int, dtype=torch.int64) -> Node:
        return Node(Op.IOTA, (), (dim,), self.meta(shape, dtype))

    # ---- casts and broadcasting -----------------------------------------------------------
    def cast(self, node: Node, dtype: torch.dtype) -> Node:
        if node.dtype == dtype:
            return node
        if dtype.is_complex or node.dtype.is_complex:
            raise Unsupported("complex dtypes")
        if node.op == Op.CONST:
            return self.const(node.args[0], dtype)
        # a new tensor: computed contiguous (the input's strides -- x[::2], an expand -- are
        # not its own; returns.py stores an output in eager's layout where that differs)
        return Node(Op.CAST, (node,), (dtype,),
                    node.meta.replace(dtype=dtype, stride=None, storage_offset=0))

    def reshape(self, node: Node, shape) -> Node:
        shape = tuple(int(s) for s in shape)
        if node.shape == shape:
            return node
        return Node(Op.RESHAPE, (node,), (shape,), node.meta.replace(shape=shape, stride=None))

    def permute(self, node: Node, dims) -> Node:
        dims = tuple(d % max(len(node.shape), 1) for d in dims)
        if dims == tuple(range(len(dims))):
            return node
        shape = tuple(node.shape[d] for d in dims)
        return Node(Op.PERMUTE, (node,), (dims,), node.meta.replace(shape=shape, stride=None))

    def expand(self, node: Node, shape) -> Node:
        """Broadcast `node` to `shape` (numpy rules), as RESHAPE (to add leading 1s) + EXPAND."""
        shape = tuple(int(s) for s in shape)
        if node.shape == shape:
            return node
        if node.op == Op.CONST and node.shape == ():
            return Node(Op.EXPAND, (node,), (shape,), node.meta.replace(shape=shape))
        lead = len(shape) - len(node.shape)
        if lead < 0:
            raise Unsupported(f"cannot broadcast {node.shape} to {shape}")
        if lead:
            node = self.reshape(node, (1,) * lead + node.shape)
        for have, want in zip(node.shape, shape):
            if have != want and have != 1:
                raise Unsupported(f"cannot broadcast {node.shape} to {shape}")
        if node.shape == shape:
            return node
        return Node(Op.EXPAND, (node,), (shape,), node.meta.replace(shape=shape, stride=None))

    def slice_to(self, node: Node, dim: int, length: int) -> Node:
        """The first `length` entries of `node` along `dim`."""
        return self.slice_to_shape(node, tuple(length if d == dim else s
                                               for d, s in enumerate(node.shape)))

    def slice_to_shape(self, node: Node, shape) -> Node:
        from cherenkov.lowering.movement import slice_node
        for d, (have, want) in enumerate(zip(node.shape, shape)):
            if have != want:
                node = slice_node(self, node, d, 0, want, 1)
        return node

    # ---- elementwise ----------------------------------------------------------------------
    def as_node(self, value, dtype: torch.dtype) -> Node:
        return value if isinstance(value, Node) else self.const(value, dtype)

    def pointwise(self, op: Op, inputs, out_dtype: torch.dtype, compute_dtype=None) -> Node:
        """An elementwise node over inputs broadcast to a common shape, cast to compute_dtype."""
        compute_dtype = compute_dtype or out_dtype
        nodes = [self.as_node(v, compute_dtype) for v in inputs]
        shape = torch.broadcast_shapes(*[n.shape for n in nodes])
        nodes = [self.cast(n, compute_dtype) for n in nodes]
        nodes = [n if n.op == Op.CONST else self.expand(n, shape) for n in nodes]
        result_dtype = torch.bool if op in GroupOp.COMPARISON else compute_dtype
        node = Node(op, tuple(nodes), (), self.meta(shape, result_dtype))
        return self.cast(node, out_dtype)

    def unary(self, op: Op, x, dtype=None) -> Node:
        return self.pointwise(op, [x], dtype or self.out.dtype)

    def binary(self, op: Op, a, b, dtype=None) -> Node:
        return self.pointwise(op, [a, b], dtype or self.out.dtype)

    def where(self, cond, a, b, dtype=None) -> Node:
        dtype = dtype or self.out.dtype
        cond = self.as_node(cond, torch.bool)
        a, b = self.as_node(a, dtype), self.as_node(b, dtype)
        shape = torch.broadcast_shapes(cond.shape, a.shape, b.shape)
        cond = self.expand(self.cast(cond, torch.bool), shape)
        a = self.expand(self.cast(a, dtype), shape) if a.op != Op.CONST else a
        b = self.expand(self.cast(b, dtype), shape) if b.op != Op.CONST else b
        return Node(Op.WHERE, (cond, a, b), (), self.meta(shape, dtype))

    # ---- reductions -----------------------------------------------------------------------
    def reduce(self, op: Op, x: Node, dims, keepdim: bool, dtype=None) -> Node:
        """Reduce `dims` of x: permute them to the end, reduce the trailing dims, reshape."""
        ndim = len(x.shape)
        dims = sorted({d % ndim for d in dims}) if ndim else []
        keep = [d for d in range(ndim) if d not in dims]
        original_shape = x.shape
        x = self.permute(x, keep + dims)
        kept_shape = tuple(x.shape[: len(keep)])
        node = Node(op, (x,), (len(dims),), self.meta(kept_shape, dtype or x.dtype))
        if keepdim:
            node = self.reshape(node, tuple(1 if d in dims else s
                                            for d, s in enumerate(original_shape)))
        return node

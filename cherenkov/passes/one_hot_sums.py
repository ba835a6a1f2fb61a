"""Sums of a one-hot over the last dim, computed per row instead of over every column.

nll_loss's gradient is a one-hot (the target column holds -grad / total weight, every other
column 0) and log_softmax's backward sums it over the vocabulary. Generated as written, the
cross-entropy backward kernel loops over all V columns twice -- once for that sum, reading
nothing from memory but comparing an int64 column index with the target V times per row
(GPT-2: 16384 x 50304), then for the gradient itself. The sum is known per row:

    sum_j f(where(j == k, a, 0))  ==  where(0 <= k < V, f(a) + f(0) * (V - 1), f(0) * V)

for f a chain of multiplications by per-row values, negations and float casts, and a, k
per-row. Such an f maps 0 to +-0 or NaN (0 * inf), so f(0) * n is that same +-0 or NaN and
the right side is what the loop adds up (up to the sign of a zero).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Graph, Node, rewritten
from cherenkov.ir.ops import Op
from cherenkov.lowering.context import LoweringContext


def _row(node: Node, lead: tuple) -> Node | None:
    """`node`'s value at one column, shaped lead + (1,) (None if it varies along the last dim):
    a scalar constant, or an expand of something one column wide."""
    if node.op is Op.CONST and node.shape == ():
        return node
    if node.op is Op.EXPAND and node.shape == lead + (node.shape[-1],):
        src = node.inputs[0]
        if src.op is Op.CONST and src.shape == ():
            return src
        if len(src.shape) == len(node.shape) and src.shape[-1] == 1:
            return src
    return None


def _zero(node: Node) -> Node | None:
    """The scalar 0 constant `node` broadcasts, or None."""
    while node.op is Op.EXPAND:
        node = node.inputs[0]
    if node.op is Op.CONST and node.args[0] == 0 and not isinstance(node.args[0], bool):
        return node
    return None


def _is_column_index(node: Node, width: int) -> bool:
    """Whether `node` holds, at every element, its own index along the last dim (< width):
    an IOTA there, seen through broadcasts, leading-1 reshapes, * 1 and + 0."""
    while True:
        if node.shape[-1:] != (width,):
            return False
        if node.op is Op.IOTA:
            return node.args[0] == len(node.shape) - 1
        if node.op in (Op.EXPAND, Op.RESHAPE):
            src = node.inputs[0]
            if src.shape[-1:] != (width,) or src.meta.numel != width and node.op is Op.RESHAPE:
                return False
            node = src
        elif node.op in (Op.MUL, Op.ADD):
            keep = 1 if node.op is Op.MUL else 0
            consts = [i for i in node.inputs if i.op is Op.CONST and i.args[0] == keep
                      and not isinstance(i.args[0], bool)]
            if len(consts) != 1:
                return False
            node = next(i for i in node.inputs if i is not consts[0])
        else:
            return False


def _match(total: Node):
    """(chain from the sum's input down, the WHERE, the per-row target) or None."""
    if total.op is not Op.SUM or total.args[0] != 1 or len(total.inputs[0].shape) < 2:
        return None
    x = total.inputs[0]
    lead = x.shape[:-1]
    chain = []
    while True:
        if x.op is Op.CAST and x.dtype.is_floating_point and x.inputs[0].dtype.is_floating_point:
            chain.append(x)
            x = x.inputs[0]
        elif x.op is Op.NEG and x.dtype.is_floating_point:
            chain.append(x)
            x = x.inputs[0]
        elif x.op is Op.MUL and x.dtype.is_floating_point and x.shape == total.inputs[0].shape:
            rows = [_row(i, lead) for i in x.inputs]
            if rows[0] is not None and rows[1] is None:
                chain.append(x)
                x = x.inputs[1]
            elif rows[1] is not None and rows[0] is None:
                chain.append(x)
                x = x.inputs[0]
            else:
                return None
        else:
            break
    if x.op is not Op.WHERE or x.shape != total.inputs[0].shape or _zero(x.inputs[2]) is None \
            or _row(x.inputs[1], lead) is None:
        return None
    cond = x.inputs[0]
    if cond.op is not Op.EQ:
        return None
    for iota, other in (cond.inputs, cond.inputs[::-1]):
        if _is_column_index(iota, cond.shape[-1]):
            k = _row(other, lead)
            if k is not None and not k.dtype.is_floating_point and k.dtype is not torch.bool:
                return chain, x, k
    return None


def _at_one_column(chain: list, bottom: Node, lead: tuple, ctx: LoweringContext) -> Node:
    """The chain evaluated on one column whose bottom value is `bottom`."""
    shape = lead + (1,)
    value = ctx.expand(bottom, shape)
    for node in reversed(chain):
        if node.op is Op.MUL:
            factor = next(_row(i, lead) for i in node.inputs if _row(i, lead) is not None)
            value = Node(Op.MUL, (value, ctx.expand(factor, shape)), (),
                         ctx.meta(shape, node.dtype))
        elif node.op is Op.NEG:
            value = Node(Op.NEG, (value,), (), ctx.meta(shape, node.dtype))
        else:
            value = ctx.cast(value, node.dtype)
    return value


def _per_row(total: Node, chain: list, where: Node, k: Node) -> Node:
    x = total.inputs[0]
    lead, width = x.shape[:-1], x.shape[-1]
    ctx = LoweringContext(x.meta.device)
    one = _at_one_column(chain, _row(where.inputs[1], lead), lead, ctx)
    zero = _at_one_column(chain, _zero(where.inputs[2]), lead, ctx)
    shape, dtype = lead + (1,), one.dtype
    k = ctx.expand(k, shape)
    inside = ctx.pointwise(Op.AND, [ctx.pointwise(Op.GE, [k, 0], torch.bool, k.dtype),
                                    ctx.pointwise(Op.LT, [k, width], torch.bool, k.dtype)],
                           torch.bool)
    hit = ctx.pointwise(Op.ADD, [one, ctx.pointwise(Op.MUL, [zero, width - 1], dtype)], dtype)
    miss = ctx.pointwise(Op.MUL, [zero, width], dtype)
    value = ctx.where(inside, hit, miss, dtype)
    return ctx.reshape(ctx.cast(value, total.dtype), total.shape)


def sum_one_hots(graph: Graph) -> Graph:
    def per_row(node: Node, rebuilt: Node) -> Node:
        found = _match(rebuilt)
        return rebuilt if found is None else _per_row(rebuilt, *found)
    return rewritten(graph, per_row)

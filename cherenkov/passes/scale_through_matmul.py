"""A scalar that scales a matmul's operand scales its output instead, where that is smaller.

    mm(view(x * s), b)   ->   mm(view(x), b) * s          s: one element, broadcast

A loss's gradient reaches the backward as such a product: the cross-entropy whose gradient
the forward made (`templates/ce_forward_grad_op.py`) hands the backward D = softmax - onehot
and the scalar grad_output / n; the LM head's two matmuls read D * s. Scaling the (tokens,
vocab) operand is a pass over it (GPT-2: 1.65 GB read and written); scaling the matmuls'
outputs (tokens x hidden, vocab x hidden) fuses into the kernels that read them. So the
rewrite applies to a product all of whose readers are such matmuls (through reshapes and
permutes; mm, mm with an fp32 output, bmm), and only when their outputs together are smaller
than the product. Products are rounded in a different order (x @ b, then the scale): within
the rounding of the matmul's dtype (fp16 is left alone: its range could be passed).

Also here, because autograd puts one in front of that product: `x + zeros` is x (the
gradient of an output the loss never used, compiled as zeros by runtime/unused_grads.py,
added to the loss's).
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Graph, Node, numel, rewritten, view_root
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.lowering.context import LoweringContext

aten = torch.ops.aten
MATMULS = (aten.mm.default, aten.mm.dtype, aten.bmm.default)
VIEWS = (Op.RESHAPE, Op.PERMUTE)


def _is_zero(node: Node) -> bool:
    while node.op is Op.EXPAND:
        node = node.inputs[0]
    return node.op is Op.CONST and node.args[0] == 0 and not isinstance(node.args[0], bool)


def drop_zero_adds(graph: Graph) -> Graph:
    """x + 0 -> x, for x of the sum's shape and dtype. Not where the sum is returned and x is
    an input, a view or returned itself: an output must not become (a view of) an input or
    another output. Like Inductor's no-op removal, -0.0 + 0 stays -0.0 (eager: +0.0)."""
    returned = {view_root(o) for o in graph.outputs if o is not None}

    def rewrite(node: Node, rebuilt: Node) -> Node:
        if node.op is not Op.ADD or len(rebuilt.inputs) != 2:
            return rebuilt
        a, b = rebuilt.inputs
        for x, zero in ((a, b), (b, a)):
            if not _is_zero(zero) or x.shape != node.shape or x.dtype != node.dtype \
                    or x.op is Op.INPUT:
                continue
            if node in returned and (x.op in GroupOp.VIEW or x in returned):
                continue
            return x
        return rebuilt
    return rewritten(graph, rewrite)


def _scalar(node: Node) -> Node | None:
    """The one-element value `node` broadcasts (a constant, or an expand of one element)."""
    if node.op is Op.CONST:
        return node
    if node.op is Op.EXPAND and numel(node.inputs[0].shape) == 1:
        return node.inputs[0]
    return None


def _scaled(node: Node) -> tuple[Node, Node] | None:
    """(x, s) when `node` is x * s with s one broadcast element and x of the product's dtype.
    Not in fp16: a matmul of the unscaled x (or the other operand scaled) could pass fp16's
    range where the product would not."""
    if node.op is not Op.MUL or len(node.inputs) != 2 or node.dtype == torch.float16:
        return None
    for x, s in (node.inputs, node.inputs[::-1]):
        scalar = _scalar(s)
        if scalar is not None and _scalar(x) is None and x.dtype == node.dtype \
                and x.shape == node.shape:
            return x, scalar
    return None


def _matmul_readers(product: Node, users: dict, outputs: set) -> dict | None:
    """{matmul: operand positions} of the matmuls reading `product` through views, when
    nothing else reads it or its views."""
    found, stack = {}, [product]
    while stack:
        node = stack.pop()
        if id(node) in outputs:
            return None
        for user in users.get(node, ()):
            if user.op in VIEWS:
                stack.append(user)
            elif user.op is Op.MATMUL and user.args[0] in MATMULS:
                found.setdefault(user, set()).update(
                    k for k, i in enumerate(user.inputs) if i is node)
            else:
                return None
    return found


def _cheaper(mm: Node, scaled) -> tuple[int | None, int]:
    """Where a scale of `mm`'s product costs least, and its bytes: (None, output bytes) to
    scale the output, or (k, operand k's bytes) when operand k (not one of the `scaled`
    positions) is smaller."""
    best = (None, mm.meta.nbytes)
    for k, operand in enumerate(mm.inputs[:2]):
        if k not in scaled and operand.meta.nbytes < best[1]:
            best = (k, operand.meta.nbytes)
    return best


def _empty(mm: Node) -> bool:
    return any(numel(n.shape) == 0 for n in (mm, *mm.inputs[:2]))


def scale_through_matmuls(graph: Graph) -> Graph:
    graph = drop_zero_adds(graph)
    users = graph.users()
    outputs = {id(o) for o in graph.outputs if o is not None}
    products = set()
    for node in graph.nodes():
        if _scaled(node) is None:
            continue
        readers = _matmul_readers(node, users, outputs)
        # (not through a matmul with an empty operand or output: its scale would be a
        # pointwise node of no elements, which no kernel computes -- lowering leaves those
        # to PyTorch)
        if readers and not any(_empty(r) for r in readers) \
                and sum(_cheaper(r, ks)[1] for r, ks in readers.items()) < node.meta.nbytes:
            products.add(node)
    if not products:
        return graph
    unscaled: dict[Node, tuple[Node, Node]] = {}    # a product or its view -> (over x, s)

    def rewrite(node: Node, rebuilt: Node) -> Node:
        if node in products:
            found = _scaled(rebuilt)
            if found is not None:
                unscaled[node] = found
        elif node.op in VIEWS and node.inputs[0] in unscaled:
            x, s = unscaled[node.inputs[0]]
            unscaled[node] = (rebuilt.replace(inputs=(x,)), s)
        elif node.op is Op.MATMUL and any(i in unscaled for i in node.inputs):
            ctx = LoweringContext(node.meta.device)     # builds x * s as lowering does
            scale, inputs = None, list(rebuilt.inputs)
            for k, i in enumerate(node.inputs):
                if i in unscaled:
                    inputs[k], s = unscaled[i]
                    scale = s if scale is None else ctx.pointwise(Op.MUL, [scale, s],
                                                                  scale.dtype)
            where, _ = _cheaper(node, {k for k, i in enumerate(node.inputs) if i in unscaled})
            if where is not None:       # the smaller operand takes the scale
                inputs[where] = ctx.pointwise(Op.MUL, [inputs[where], scale],
                                              inputs[where].dtype)
                return rebuilt.replace(inputs=tuple(inputs))
            product = rebuilt.replace(inputs=tuple(inputs))
            return ctx.pointwise(Op.MUL, [product, scale], product.dtype)
        return rebuilt
    return rewritten(graph, rewrite)

"""Which values of a joint forward/backward graph are in memory whatever the partitioner
decides, and which backward ops can compute a value inside their own kernel -- the facts
passes/partition.py prices saving and recomputing by.

A forward value is in memory anyway when the forward writes it whether or not it is saved:
a graph input, a forward output, a library op's result (matmul, attention), a value a library
op reads, or a value read again after a library op that depends on it (no kernel computes
both sides of a library call: the residual stream, read by a LayerNorm and, after the block's
matmuls, by the next residual add). A backward reader computes its input in its own kernel
when it is pointwise work, a reduction, a copy or a broadcast (or reads only the shape); a
library op, a gather or a window (a pooling backward reading its indices) reads memory.
"""
from __future__ import annotations

import collections
import operator

import torch
import torch.fx as fx

aten = torch.ops.aten

# library ops: their inputs and results are in memory (matmuls, convolutions, attention);
# the partitioner never recomputes them
LIBRARY_OPS = {
    aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.matmul, aten.dot, aten.mv, aten.addmv,
    aten.convolution, aten._convolution, aten.convolution_backward,
    aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_attention_math,
    aten._flash_attention_forward, aten._efficient_attention_forward,
    aten._scaled_mm, aten._int_mm,
} | {getattr(aten, name) for name in (        # attention ops not in every release
    "_scaled_dot_product_flash_attention_for_cpu", "_cudnn_attention_forward",
    "_scaled_dot_product_fused_attention_overrideable") if hasattr(aten, name)}


def packet(node: fx.Node):
    """An aten op's overload packet (aten.mm for aten.mm.default), else None."""
    return getattr(node.target, "overloadpacket", None)


def library(node: fx.Node) -> bool:
    """A node whose inputs and result are in memory: a matmul, convolution, attention, or an op
    no kernel of ours computes (a custom op)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    if not isinstance(node.target, torch._ops.OpOverload) \
            or node.target.namespace not in ("aten", "prims"):
        return True
    return packet(node) in LIBRARY_OPS


def is_view(node: fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


BITSET_NODES = 20_000    # 50 MB of ancestor bitsets at most


def written_anyway(nodes: list[fx.Node], forward: set[fx.Node], outputs: set[fx.Node]
                   ) -> set[fx.Node]:
    """The forward values in memory whether or not they are saved: graph inputs, forward
    outputs, library results (and their getitems), values a library op reads, values read
    again after a library op that depends on them (no kernel computes both sides of it), and
    views of those. `nodes` in graph (topological) order. The rule about reading again takes
    a bitset of ancestors per node (len(fw)**2 bits); past BITSET_NODES forward nodes it is
    left out (those values then price as if computed in registers)."""
    fw = [n for n in nodes if n in forward or n.op == "placeholder"]
    bit = {n: 1 << i for i, n in enumerate(fw)}
    ancestors: dict[fx.Node, int] = {}     # bitsets over `fw`, the node itself included
    behind: dict[fx.Node, int] = collections.defaultdict(int)   # ancestors reaching the node
    for n in fw if len(fw) <= BITSET_NODES else ():            # through a library op
        ins = [a for a in n.all_input_nodes if a in bit]
        anc = bit[n]
        for a in ins:
            anc |= ancestors[a]
        ancestors[n] = anc
        through = 0
        for a in ins:
            through |= ancestors[a] if library(n) else behind[a]
        behind[n] = through
    written: set[fx.Node] = set()
    for n in reversed(fw):         # users before their inputs: a view's verdict is known
        users = [u for u in n.users if u in bit]
        if (n.op == "placeholder" or n in outputs or library(n)
                or n.target is operator.getitem and library(n.args[0])
                or any(library(u) or behind[u] & bit[n] for u in users)
                or any(is_view(u) and u in written for u in users)):
            written.add(n)
    for n in fw:                   # a view of a value in memory is in memory
        if is_view(n) and n.args and n.args[0] in written:
            written.add(n)
    return written


# reads a kernel of ours computes its input inside (elementwise, or along a reduction's rows)
_REDUCTION_TAG = getattr(torch.Tag, "reduction", None)
_FUSIBLE_READERS = {
    aten._to_copy, aten.clone, aten.expand, aten.sum, aten.mean, aten.amax, aten.amin,
    aten.var, aten.var_mean, aten.prod, aten.logsumexp, aten.where, torch.ops.prims.sum,
    torch.ops.prims.var, torch.ops.prims.amax, torch.ops.prims.amin,
    torch.ops.prims.convert_element_type, torch.ops.prims.broadcast_in_dim,
    # these read only the shape
    aten.full_like, aten.zeros_like, aten.ones_like, aten.empty_like, aten.new_zeros,
    aten.new_ones, aten.new_full, aten.new_empty}


def fusible_reader(node: fx.Node) -> bool:
    """Whether `node` can read a value computed inside its own kernel: pointwise work, a
    reduction, a copy or broadcast -- not a gather or a window (a pooling backward reading
    its indices), nor a library op."""
    if node.op != "call_function" or node.target is operator.getitem:
        return True
    if not isinstance(node.target, torch._ops.OpOverload):
        return not library(node)
    tags = node.target.tags
    return (torch.Tag.pointwise in tags or _REDUCTION_TAG in tags or node.target.is_view
            or packet(node) in _FUSIBLE_READERS or node.target in _FUSIBLE_READERS)


def read_in_backward(node: fx.Node, backward: set[fx.Node], unfused_only: bool = False
                     ) -> bool:
    """Whether a backward op (with `unfused_only`, one that cannot compute it in its own
    kernel: a library op, a gather, a window) reads `node` itself, directly or through views
    (a view may be the forward's: its matmul's operand transposed)."""
    return any(u in backward and (not unfused_only or not fusible_reader(u))
               or is_view(u) and read_in_backward(u, backward, unfused_only)
               for u in node.users)

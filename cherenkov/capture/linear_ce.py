"""Graph rewrite before AOTAutograd: `cross_entropy(linear(x, W, b) [views, .float()],
targets)` whose logits nobody else reads becomes the fused LM head + cross-entropy
(`templates/linear_ce_op.py`), which never holds the (tokens, vocab) logits.

Config `linear_ce`: "auto" asks the cost model on CUDA graphs (`should_fuse_linear_ce`:
fused predicted faster, or eager's logits over 1/64 of device memory; off the GPU the fused
op's Triton kernel would run in the interpreter), "on" fuses every match, "off" none.
Only the plain forms are matched: no class weights, no label smoothing, reduction "mean" or
"sum", logits flattened to (tokens, vocab) and targets to (tokens,). A model that also
returns its logits keeps them (and the unfused graph).
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from cherenkov.ir.graph import numel

log = logging.getLogger("cherenkov")

LINEAR = {torch._C._nn.linear, F.linear}
# value-preserving steps between the linear and the cross-entropy
VIEW_METHODS = {"view", "reshape", "flatten", "float", "contiguous"}
VIEW_FUNCTIONS = {torch.reshape, torch.flatten}


def _value(node: torch.fx.Node):
    return node.meta.get("example_value", node.meta.get("val"))


def _chain_to_linear(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """`node` and the views / float casts under it down to a linear (the last), each read
    only by the one before; None when the chain holds anything else."""
    chain = []
    while isinstance(node, torch.fx.Node) and len(node.users) == 1:
        chain.append(node)
        if node.op == "call_function" and node.target in LINEAR:
            return chain
        if not ((node.op == "call_method" and node.target in VIEW_METHODS)
                or (node.op == "call_function" and node.target in VIEW_FUNCTIONS)):
            return None
        node = node.args[0]
    return None


def _ce_arguments(ce: torch.fx.Node) -> dict | None:
    """ce's arguments by name, when they are ones the fused op computes."""
    names = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
             "reduction", "label_smoothing")
    bound = dict(zip(names, ce.args)) | dict(ce.kwargs)
    plain = (bound.get("weight") is None and bound.get("size_average") is None
             and bound.get("reduce") is None and bound.get("label_smoothing", 0.0) == 0.0
             and bound.get("reduction", "mean") in ("mean", "sum")
             and isinstance(bound.get("ignore_index", -100), int))
    return bound if plain else None


def plain_cross_entropies(gm: torch.fx.GraphModule):
    """(node, arguments by name) of each F.cross_entropy call in `gm` in the plain forms the
    fused ops compute, its input a graph value (a list: callers edit the graph)."""
    found = []
    for ce in gm.graph.nodes:
        if ce.op == "call_function" and ce.target is F.cross_entropy:
            bound = _ce_arguments(ce)
            if bound is not None and isinstance(bound.get("input"), torch.fx.Node):
                found.append((ce, bound))
    return found


def fuse_linear_cross_entropy(gm: torch.fx.GraphModule, mode: str, device_spec=None) -> int:
    """Rewrite every matching cross-entropy of `gm` in place; returns how many."""
    if mode == "off":
        return 0
    from cherenkov.templates.linear_ce_op import fused_linear_cross_entropy
    from cherenkov.templates.linear_cross_entropy import should_fuse_linear_ce
    done = 0
    for ce, bound in plain_cross_entropies(gm):
        chain = _chain_to_linear(bound["input"])
        if chain is None:
            continue
        linear = chain[-1]
        x, w = linear.args[0], linear.args[1]
        b = linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")
        logits, out, xv, tv = (_value(bound["input"]), _value(ce), _value(x),
                               _value(bound["target"]))
        if not all(isinstance(v, torch.Tensor) for v in (logits, out, xv, tv)):
            continue
        hidden, vocab = int(xv.shape[-1]), int(logits.shape[-1])
        tokens = numel(tuple(xv.shape)) // hidden
        if tuple(logits.shape) != (tokens, vocab) or tuple(tv.shape) != (tokens,):
            continue
        if mode == "auto":
            dtype = _value(linear).dtype
            if device_spec is None or not should_fuse_linear_ce(tokens, vocab, hidden, dtype,
                                                                device_spec):
                continue
        with gm.graph.inserting_before(ce):
            fused = gm.graph.call_function(
                fused_linear_cross_entropy,
                (x, w, b, bound["target"], bound.get("ignore_index", -100),
                 bound.get("reduction", "mean"), out.dtype))
        fused.meta["example_value"] = out
        ce.replace_all_uses_with(fused)
        for n in [ce] + chain:                 # users before what they read
            gm.graph.erase_node(n)
        done += 1
        log.info("cherenkov: LM head + cross-entropy fused (%d tokens x %d vocab, hidden %d)",
                 tokens, vocab, hidden)
    if done:
        gm.graph.lint()
        gm.recompile()
    return done

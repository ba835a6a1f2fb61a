"""Graph rewrite before AOTAutograd: `cross_entropy(logits, targets)` whose logits need a
gradient becomes the cross-entropy that makes its gradient in the forward pass
(`templates/ce_forward_grad_op.py`): one read of the (tokens, vocab) logits fewer per step.

Runs after the LM head + cross-entropy fusion (`linear_ce.py`), for the cross-entropies it
left: logits the model also returns, logits not made by a linear, or the fusion declined.
Config `ce_forward_grad`: "auto" on CUDA graphs (off the GPU the op's Triton kernel would run
in the interpreter), "on" every match, "off" none. Matched: class-index targets (N,) int64
against logits (N, V) in fp32, bf16 or fp16 (the kernel's math is fp32: fp64 stays eager's),
no class weights, no label smoothing, reduction "mean" or "sum". An upcast of half-precision
logits to fp32 right before the cross-entropy is dropped (the kernel computes in fp32 anyway;
the gradient is then kept in the logits' own dtype, as eager's cast back gives it).
"""
from __future__ import annotations

import logging

import torch

from cherenkov.capture.linear_ce import _value, plain_cross_entropies

log = logging.getLogger("cherenkov")

HALF = (torch.bfloat16, torch.float16)
KERNEL_DTYPES = (torch.float32, *HALF)


def _upcast_source(node: torch.fx.Node) -> torch.fx.Node | None:
    """x when `node` is x.float() / x.to(torch.float32) of a half-precision x."""
    if node.op != "call_method" or not node.args:
        return None
    to_fp32 = node.target == "float" and len(node.args) == 1 and not node.kwargs or \
        node.target == "to" and node.args[1:] == (torch.float32,) and not node.kwargs
    source = node.args[0]
    value = _value(source) if isinstance(source, torch.fx.Node) else None
    if to_fp32 and isinstance(value, torch.Tensor) and value.dtype in HALF:
        return source
    return None


def use_ce_forward_grad(gm: torch.fx.GraphModule, mode: str) -> int:
    """Rewrite every matching cross-entropy of `gm` in place; returns how many."""
    if mode == "off":
        return 0
    from cherenkov.templates.ce_forward_grad_op import cross_entropy_forward_grad
    done = 0
    for ce, bound in plain_cross_entropies(gm):
        if not isinstance(bound.get("target"), torch.fx.Node):
            continue
        logits, targets, out = _value(bound["input"]), _value(bound["target"]), _value(ce)
        if not all(isinstance(v, torch.Tensor) for v in (logits, targets, out)):
            continue
        # class indices as eager takes them (int64); the kernel computes in fp32, so fp64
        # logits keep eager's cross-entropy
        if logits.dim() != 2 or tuple(targets.shape) != tuple(logits.shape[:1]) \
                or targets.dtype != torch.int64 or logits.dtype not in KERNEL_DTYPES \
                or not logits.requires_grad:
            continue
        source = bound["input"]
        upcast = _upcast_source(source)
        with gm.graph.inserting_before(ce):
            new = gm.graph.call_function(
                cross_entropy_forward_grad,
                (upcast or source, bound["target"], bound.get("ignore_index", -100),
                 bound.get("reduction", "mean"), out.dtype))
        new.meta["example_value"] = out
        ce.replace_all_uses_with(new)
        gm.graph.erase_node(ce)
        if upcast is not None and not source.users:
            gm.graph.erase_node(source)
        done += 1
        # %s of the shape: int() of a symbolic size would specialize it
        log.info("cherenkov: cross-entropy gradient made in the forward (%s logits, %s)",
                 tuple(logits.shape), str(logits.dtype).split(".")[-1])
    if done:
        gm.graph.lint()
        gm.recompile()
    return done

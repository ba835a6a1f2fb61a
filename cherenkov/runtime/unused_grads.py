"""Gradients of outputs the loss never used: zero, without writing zeros.

A compiled forward often returns more than the loss depends on -- nanoGPT's model returns
`(logits, loss)` and the training loop drops the logits. Autograd then hands the compiled
backward a gradient for every differentiable output, and for an unused one it allocates and
fills zeros first (GPT-2, B=16 T=1024: 1.6 GB of bf16 written, then read again by the
cross-entropy backward that adds it to the logits' gradient).

Here the backward learns which gradients are zero instead:

1. `watch(outputs)`: after each compiled forward call (static shapes only), the autograd node
   of AOTAutograd's compiled function is told not to materialize missing gradients
   (`materialize_grads = False`, as `ctx.set_materialize_grads(False)` would: the node is the
   function's ctx).
2. AOTAutograd passes a missing gradient on as None (it processes tensors only).
3. The compiled backward sees None at a tangent input and runs a variant of its graph
   compiled without that input, zeros in its place (`zeroed`): constants in the generated
   kernels, no memory read. A variant that cannot compile runs in eager like any graph.

Off with `unused_grads=False` (CHERENKOV_UNUSED_GRADS=0): then autograd fills zeros as usual.
"""
from __future__ import annotations

import weakref

import torch
import torch.fx
from torch._dynamo import compiled_autograd as _ca, config as _dynamo_config

NODE_NAME = "CompiledFunctionBackward"      # AOTAutograd's autograd node
MARK = "_cherenkov_forward"                 # on the forward callables our compiler returns


def static(example_inputs) -> bool:
    """Whether Dynamo traced the graph with static shapes (a zeroed variant writes its
    zeros' shape into the graph)."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt) or (
                isinstance(x, torch.Tensor)
                and any(not isinstance(d, int) for d in (*x.shape, *x.stride()))):
            return False
    return True


def watch(outputs) -> None:
    """Let the backward of one compiled forward call receive None for the gradients of its
    unused outputs: its autograd node -- the output's own, or one view away (AOTAutograd
    regenerates views of an intermediate outside its function) -- stops materializing them.
    Only nodes of Cherenkov's own graphs traced with static shapes (their forward callables
    carry MARK): an output may be an input passed through, its node another graph's, whose
    backward expects tensors."""
    if not isinstance(outputs, (tuple, list)) or not torch.is_grad_enabled() \
            or _compiled_autograd():
        return
    for o in outputs:
        if type(o) is not torch.Tensor or o.grad_fn is None:
            continue
        node = o.grad_fn
        if _ours(node):
            node.materialize_grads = False
            continue
        for parent, _ in node.next_functions:
            if parent is not None and _ours(parent):
                parent.materialize_grads = False


def _compiled_autograd() -> bool:
    """Compiled autograd traces AOTAutograd's backward graph itself, tangents and all: a None
    there fails. Seen when it is on at forward time (its config flag, or inside its context);
    turned on around the backward alone, it is not (README limits)."""
    return bool(getattr(_dynamo_config, "compiled_autograd", False)
                or getattr(_ca, "compiled_autograd_enabled", False)
                or getattr(_ca, "in_compiled_autograd_region", False))


# autograd node class -> whether it is AOTAutograd's around our forward (weak: a class holds
# its compiled graphs, which must go when Dynamo drops them)
_OURS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _ours(node) -> bool:
    cls = type(node)
    known = _OURS.get(cls)
    if known is None:
        fw = getattr(getattr(cls, "_forward_cls", None), "compiled_fw", None)
        known = _OURS[cls] = cls.__name__ == NODE_NAME and getattr(fw, MARK, False)
    return known


def tangent_positions(gm: torch.fx.GraphModule) -> tuple:
    """Input positions of a backward graph's tangents (AOTAutograd names them tangents_N)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(placeholders) if n.name.startswith("tangents"))


def _zeros_node(graph: torch.fx.Graph, placeholder: torch.fx.Node) -> torch.fx.Node:
    val = placeholder.meta.get("val")
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        raise RuntimeError(f"cherenkov: tangent {placeholder.name} has no static shape "
                           f"({val!r}): cannot compile its gradient as zeros")
    z = graph.call_function(torch.ops.aten.full.default, (list(val.shape), 0),
                            {"dtype": val.dtype, "layout": torch.strided,
                             "device": val.device, "pin_memory": False})
    z.meta = dict(placeholder.meta)
    return z


def zeroed(gm: torch.fx.GraphModule, indices: tuple) -> torch.fx.GraphModule:
    """`gm` without its inputs at `indices`, zeros of their recorded shape in their place."""
    graph = torch.fx.Graph()
    env: dict = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    gone = {placeholders[i] for i in indices}
    for p in placeholders:
        if p not in gone:
            env[p] = graph.node_copy(p, lambda a: env[a])
    for p in placeholders:
        if p in gone:
            env[p] = _zeros_node(graph, p)
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            env[n] = graph.node_copy(n, lambda a: env[a])
    out = _graph_module(gm, graph)
    out.meta = dict(getattr(gm, "meta", {}))
    return out


def _graph_module(root: torch.fx.GraphModule, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A GraphModule whose Python code is generated at its first call (torch's lazy graph
    module), not now: compiling reads the graph only; its own eager fallback is the only
    caller of the code."""
    try:
        from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module
    except ImportError:         # a torch without it: the code is generated now
        return torch.fx.GraphModule(root, graph, root.__class__.__name__)
    with _use_lazy_graph_module(True):
        return _make_graph_module(root, graph, root.__class__.__name__)


def filled(gm: torch.fx.GraphModule, inputs: list, indices: tuple) -> list:
    """`inputs` with real zeros at `indices` (for running `gm` itself, in eager)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = list(inputs)
    for i in indices:
        val = placeholders[i].meta["val"]
        out[i] = torch.zeros(val.shape, dtype=val.dtype, device=val.device)
    return out

"""Graph rewrite before AOTAutograd: torch's flex_attention higher-order op -> Cherenkov's.

Dynamo records `flex_attention(q, k, v, score_mod=..., block_mask=...)` (and
`cherenkov.attention` inside compiled code, which emits the same op) as

    torch.ops.higher_order.flex_attention(q, k, v, score_graph, block_mask_tuple, scale,
                                          kernel_options, score_buffers, mask_buffers)

with the mods as GraphModule attributes. Each such node whose form we know becomes
`cherenkov::flex_attention` (attention/flex_op.py), keyed by a FlexSpec holding the graphs;
AOTAutograd traces that op and its registered gradient, and the compiled graphs call our
kernels. Left alone, with the reason logged (the graph then runs in eager, as any op we
cannot compile): see `_parse` -- an unknown argument layout (torch 2.11's block-mask tuple
has 13 entries, 2.13 adds four optional ones, which must be None), tiles our kernels cannot
walk, the FLASH backend or max scores, k/v broadcast over the batch or another value head
dim. Calls inside subgraphs (activation checkpointing) are taken too.
"""
from __future__ import annotations

import logging
import operator

import torch

log = logging.getLogger("cherenkov")


def _hop():
    return getattr(getattr(torch.ops, "higher_order", None), "flex_attention", None)


def _value(node):
    if isinstance(node, torch.fx.Node):
        return node.meta.get("example_value", node.meta.get("val"))
    return node


def _graph(gm: torch.fx.GraphModule, node):
    """The GraphModule a get_attr node names (None for a missing one)."""
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        return getattr(gm, node.target, None)
    return None


def _size(s) -> int:
    """A dim as a number: a symbolic one (dynamic shapes) by its hint -- stand-ins need only
    dtype and rank, the op reads the real sizes at run time."""
    if isinstance(s, torch.SymInt):
        hint = getattr(s.node, "hint", None)
        return int(hint) if hint is not None else 2
    return int(s)


def _same(a, b) -> bool:
    """a == b for sure (symbolic sizes: only when the shape environment knows it)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return bool(statically_known_true(a == b))


def _buffers(nodes) -> tuple | None:
    """(shape, dtype, requires_grad) of each buffer, None if one is not a tensor; an integer
    (a symbolic size the mods read, with dynamic shapes) counts as a 0-d int64 tensor."""
    out = []
    for n in nodes:
        t = _value(n)
        if isinstance(t, (int, torch.SymInt)) and not isinstance(t, bool):
            out.append(((), torch.int64, False))
            continue
        if not isinstance(t, torch.Tensor):
            return None
        out.append((tuple(_size(s) for s in t.shape), t.dtype, bool(t.requires_grad)))
    return tuple(out)


def _tensor_buffers(gm, nodes, device) -> list:
    """The buffers as tensors: an integer becomes a 0-d int64 tensor on `device` (the tracer
    reads it as run-time data, so a symbolic size is never baked into a kernel)."""
    out = []
    for n in nodes:
        if isinstance(_value(n), torch.Tensor):
            out.append(n)
        else:
            out.append(gm.graph.call_function(torch.scalar_tensor, (n,),
                                              {"dtype": torch.int64, "device": device}))
    return out


def _parse(gm, node) -> tuple:
    """(FlexSpec, q, k, v, eight list nodes, score buffer nodes, mask buffer nodes), or
    (None, why not). Shapes may be symbolic: the op checks them at run time."""
    from cherenkov.attention.flex_op import HUGE_BLOCK, FlexSpec, walks_lists
    args = list(node.args) + [()] * (9 - len(node.args))
    q, k, v, score_node, bm, scale, options, score_bufs, mask_bufs = args[:9]
    if node.kwargs or not isinstance(bm, (tuple, list)) or len(bm) < 13:
        return None, "an unknown argument layout"
    if not isinstance(scale, (int, float, torch.fx.Node)) or not isinstance(options, dict):
        return None, "an unknown scale or kernel options"
    lists, extra, (bq, bk, mask_node) = bm[2:10], bm[10:-3], bm[-3:]
    if any(e is not None for e in extra):
        return None, "a block mask with deterministic-backward orders"
    if not all(isinstance(b, int) for b in (bq, bk)):
        return None, "symbolic block-mask tiles (a BlockMask passed in under dynamic=True)"
    if not (max(bq, bk) >= HUGE_BLOCK or walks_lists((bq, bk))):
        # our kernels walk tiles of powers of two; rebuilding from mask_mod would drop the
        # sparsity of hand-made lists
        return None, f"block-mask tiles {bq} x {bk} (not powers of two >= 16)"
    if options.get("BACKEND") == "FLASH" or options.get("OUTPUT_MAX"):
        return None, "kernel_options asking for the FLASH backend or the max scores"
    if lists[0] is None or lists[1] is None:
        return None, "a block mask without kv lists"
    if not all(isinstance(_value(t), torch.Tensor) and _value(t).dim() == 4 for t in (q, k, v)):
        return None, "q, k, v not 4-d tensors"
    qv, kv_, vv = _value(q), _value(k), _value(v)
    if not (_same(qv.shape[0], kv_.shape[0]) and _same(kv_.shape[0], vv.shape[0])
            and _same(qv.shape[-1], vv.shape[-1])):
        return None, "k/v batch broadcast or a value head dim unlike the query's"
    score_graph, mask_graph = _graph(gm, score_node), _graph(gm, mask_node)
    if score_graph is None or mask_graph is None:
        return None, "mods that are not subgraphs"
    sb, mb = _buffers(score_bufs), _buffers(mask_bufs)
    if sb is None or mb is None:
        return None, "a captured buffer that is not a tensor"
    for user in node.users:         # only out (0) and lse (1) may be read
        if not (user.op == "call_function" and user.target is operator.getitem):
            return None, "its outputs are read other than by index"
        if user.args[1] not in (0, 1) and user.users:
            return None, "its max-score output is read"
    spec = FlexSpec(score_graph, mask_graph, sb, mb, (bq, bk))
    lists = list(lists)
    if max(bq, bk) >= HUGE_BLOCK:
        # FlexAttention's "no block mask": the op builds its own, and the transposed lists
        # Dynamo built for it under vmap (an argsort, an index_put) become dead code
        lists[2:] = [None] * 6
    # the scale goes to the op as an argument: a symbolic one (dynamic head dims) is
    # specialized by AOTAutograd's guards
    return spec, q, k, v, lists, list(score_bufs), list(mask_bufs), scale


def use_cherenkov_flex_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrite every flex_attention node of Dynamo's graph `gm` and of the subgraphs it calls
    (activation checkpointing's, say) we can take; returns how many."""
    hop = _hop()
    if hop is None:
        return 0
    done = 0
    for _, module in list(gm.named_modules()):
        if isinstance(module, torch.fx.GraphModule):
            done += _rewrite(module, hop)
    return done


def _rewrite(gm: torch.fx.GraphModule, hop) -> int:
    from cherenkov.attention.flex_op import register
    op = torch.ops.cherenkov.flex_attention.default
    done = 0
    for node in list(gm.graph.nodes):
        if not (node.op == "call_function" and node.target is hop):
            continue
        parsed = _parse(gm, node)
        if parsed[0] is None:
            log.warning("cherenkov: a flex_attention call stays PyTorch's (its graph runs in "
                        "eager): %s", parsed[1])
            continue
        spec, q, k, v, lists, score_bufs, mask_bufs, scale = parsed
        key = register(spec)
        gm.__dict__.setdefault("_cherenkov_flex_specs", []).append(spec)   # gm holds its specs
        with gm.graph.inserting_before(node):
            device = _value(q).device
            score_bufs = _tensor_buffers(gm, score_bufs, device)
            mask_bufs = _tensor_buffers(gm, mask_bufs, device)
            new = gm.graph.call_function(op, (q, k, v, *lists, score_bufs, mask_bufs,
                                              float(scale) if not isinstance(scale, torch.fx.Node)
                                              else scale, key))
        old = _value(node)
        if isinstance(old, (tuple, list)) and len(old) >= 2:
            new.meta["example_value"] = (old[0], old[1])
        for user in list(node.users):
            if user.args[1] not in (0, 1):            # an unread max-score output
                gm.graph.erase_node(user)
        node.replace_all_uses_with(new)
        graphs = [a for a in (node.args[3], node.args[4][-1]) if isinstance(a, torch.fx.Node)]
        gm.graph.erase_node(node)
        for g in graphs:
            if not g.users:
                gm.graph.erase_node(g)
        done += 1
    # what fed only the op (FlexAttention's empty block mask, built under vmap) stays: a
    # partial dead-code pass could drop a vmap level's entry and keep its setitem;
    # AOTAutograd's traced graph drops it
    if done:
        gm.graph.lint()
        gm.recompile()
        log.info("cherenkov: %d flex_attention call(s) run by Cherenkov's kernels", done)
    return done

"""Graph rewrite before AOTAutograd: torch's flex_attention higher-order op -> Cherenkov's.

Dynamo records `flex_attention(q, k, v, score_mod=..., block_mask=...)` (and
`cherenkov.attention` inside compiled code, which emits the same op) as

    torch.ops.higher_order.flex_attention(q, k, v, score_graph, block_mask_tuple, scale,
                                          kernel_options, score_buffers, mask_buffers)

with the mods as GraphModule attributes. Each such node whose form we know becomes
`cherenkov::flex_attention` (attention/flex_op.py), keyed by a FlexSpec holding the graphs;
AOTAutograd traces that op and its registered gradient, and the compiled graphs call our
kernels. Left alone (the graph then runs in eager, as any op we cannot compile): a
max-score output that is read, value head dims unlike the query's, or a block-mask tuple of
an unknown layout (torch 2.11 has 13 entries, 2.13 adds four optional ones, all None here).
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


def _buffers(nodes) -> tuple | None:
    """(shape, dtype, requires_grad) of each buffer, None if one is not a static tensor."""
    out = []
    for n in nodes:
        t = _value(n)
        if not isinstance(t, torch.Tensor) or any(isinstance(s, torch.SymInt) for s in t.shape):
            return None
        out.append((tuple(int(s) for s in t.shape), t.dtype, bool(t.requires_grad)))
    return tuple(out)


def _parse(gm, node) -> tuple | None:
    """(FlexSpec, q, k, v, eight list nodes, score buffer nodes, mask buffer nodes) or None."""
    from cherenkov.attention.flex_op import HUGE_BLOCK, FlexSpec
    args = list(node.args) + [()] * (9 - len(node.args))
    q, k, v, score_node, bm, scale, options, score_bufs, mask_bufs = args[:9]
    if node.kwargs or not isinstance(bm, (tuple, list)) or len(bm) < 13:
        return None
    if not isinstance(scale, (int, float)) or not isinstance(options, dict):
        return None
    lists, extra, (bq, bk, mask_node) = bm[2:10], bm[10:-3], bm[-3:]
    if any(e is not None for e in extra) or not all(isinstance(b, int) for b in (bq, bk)):
        return None
    if lists[0] is None or lists[1] is None:
        return None
    qv, kv_, vv = _value(q), _value(k), _value(v)
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (qv, kv_, vv)):
        return None
    if vv.shape[-1] != qv.shape[-1] or kv_.shape != vv.shape or qv.shape[1] % kv_.shape[1]:
        return None
    score_graph, mask_graph = _graph(gm, score_node), _graph(gm, mask_node)
    if score_graph is None or mask_graph is None:
        return None
    sb, mb = _buffers(score_bufs), _buffers(mask_bufs)
    if sb is None or mb is None:
        return None
    for user in node.users:         # only out (0) and lse (1) may be read
        if not (user.op == "call_function" and user.target is operator.getitem
                and user.args[1] in (0, 1)) and user.users:
            return None
    spec = FlexSpec(score_graph, mask_graph, sb, mb, float(scale), (bq, bk))
    lists = list(lists)
    if max(bq, bk) >= HUGE_BLOCK:
        # FlexAttention's "no block mask": the op builds its own, and the transposed lists
        # Dynamo built for it under vmap (an argsort, an index_put) become dead code
        lists[2:] = [None] * 6
    return spec, q, k, v, lists, list(score_bufs), list(mask_bufs)


def use_cherenkov_flex_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrite every flex_attention node of Dynamo's graph `gm` we can take; returns how many."""
    hop = _hop()
    if hop is None:
        return 0
    from cherenkov.attention.flex_op import register
    op = torch.ops.cherenkov.flex_attention.default
    done = 0
    for node in list(gm.graph.nodes):
        if not (node.op == "call_function" and node.target is hop):
            continue
        parsed = _parse(gm, node)
        if parsed is None:
            log.warning("cherenkov: a flex_attention call of a form not handled stays "
                        "(its graph runs in eager)")
            continue
        spec, q, k, v, lists, score_bufs, mask_bufs = parsed
        key = register(spec)
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(op, (q, k, v, *lists, score_bufs, mask_bufs, key))
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

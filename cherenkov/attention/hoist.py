"""Captured-tensor loads taken out of the kernels' loops.

A score or mask mod reading one element of a captured tensor per (b, h) -- ALiBi's
`slopes[h]` -- loads the same value on every tile. Triton's loop-invariant code motion takes
such a load out of a loop only when nothing in the loop writes memory, so it stays in the
dK/dV kernel's loop (which stores dS) and in the Gluon kernels' (Gluon runs no such pass),
where the load sits between S's matmul and the softmax. Here: which tensors qualify
(`hoistable`: every load of the tensor, in every rendered helper, reads the same element and
that element varies with b and h only), the `_hoist_Ck(b, h, ...)` helpers that load it, and
the statement the loop functions begin with (`Ck = _hoist_Ck(b, h, ...)`: Ck holds the value
from there on, and the loop calls the `_h` helpers, render.py's, which read it in place of
the load).
"""
from __future__ import annotations

from .fold import scaled_mods
from .row_terms import split_rows
from .trace import Node, TracedMods, depends_on, topo_order


def hoistable(traced: TracedMods) -> dict[int, Node]:
    """{k: load} for each captured tensor k whose every load is that one load, of an
    element varying with b and h only (the folded and row-split graphs rebuild nodes, so
    loads compare by their text). Found once per traced pair (kept with its other derived
    facts: the renderers, codegen and the launches all ask)."""
    memo = traced._reads
    if "hoisted" not in memo:
        memo["hoisted"] = _hoistable(traced)
    return memo["hoisted"]


def _hoistable(traced: TracedMods) -> dict[int, Node]:
    value, d = scaled_mods(traced)
    shifted, row = split_rows(value)
    roots = [n for n in (traced.score, traced.mask, value, d, shifted, row)
             if isinstance(n, Node)]
    loads: dict[int, set[str]] = {}
    first: dict[int, Node] = {}
    for n in topo_order(roots):
        if n.op == "load":
            loads.setdefault(n.value, set()).add(str(n))
            first.setdefault(n.value, n)
    return {k: first[k] for k, texts in loads.items()
            if len(texts) == 1 and not depends_on(first[k]) - {"b", "h"}}


def hoist_statement(traced: TracedMods, caps: str) -> str:
    """`C0 = _hoist_C0(b, h, <caps>); ...` for the hoistable tensors ('' for none)."""
    return "; ".join(f"C{k} = _hoist_C{k}(b, h, {caps})" for k in hoistable(traced))


def score_loads_hoisted(traced: TracedMods) -> bool:
    """Whether the score mod reads captured tensors only through hoistable loads (kept on
    `traced`: every launch asks)."""
    memo = traced._reads
    if "score_hoisted" not in memo:
        held = {str(n) for n in hoistable(traced).values()}
        memo["score_hoisted"] = traced.score is not None and all(
            str(n) in held for n in topo_order([traced.score]) if n.op == "load")
    return memo["score_hoisted"]

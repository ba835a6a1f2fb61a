"""The order a compiled graph runs its kernels, library calls and views in.

Any topological order is correct; they differ in how much memory is alive at once. The IR's
node order is a depth-first walk from the outputs, and following it alone runs a backward in
two sweeps: every layer's input gradient first, then every layer's weight gradient, so each
layer's output gradient and saved input stay alive across the whole backward (GPT-2 B=16
T=1024: ~1.2 GB more at the peak than torch.compile, which keeps AOTAutograd's order).

`plan_order` builds two orders and keeps the one whose replayed peak is lower (then the one
with less memory alive summed over its steps):
- depth-first: the ready item that comes first in node order (producer next to consumer);
- memory-greedy: the ready item that frees the most bytes net of what it allocates (a weight
  gradient that is the last reader of an activation and of its output gradient runs as soon
  as both exist), ties broken by node order. The graph's outputs are not charged: they are
  made sooner or later, and made late they keep their inputs alive.
Bytes are counted per storage: a view or getitem shares its source's, inputs count as freeable
(a backward's saved activations), the graph's outputs are never freed.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from cherenkov.ir.graph import Graph, Node, meta_nbytes
from cherenkov.ir.ops import Op


@dataclass(eq=False)
class Item:
    obj: object                       # a fusion Group, a library node, a view or getitem node
    key: int                          # position in the depth-first node order
    produces: list                    # nodes it makes available
    reads: list                       # nodes it reads
    roots_read: dict = field(default_factory=dict)    # storage root -> reads of it
    alloc: int = 0                    # bytes of new storage
    cost: int = 0                     # of which not the graph's outputs (those are made anyway)
    deps: int = 0                     # items still to run before it
    users: list = field(default_factory=list)


@dataclass
class Schedule:
    order: list                       # work items in the order to run them
    chosen: str                       # "depth-first" | "memory-greedy"
    peaks: dict                       # order name -> replayed peak bytes (beyond the inputs)


def plan_order(graph: Graph, groups: list, realized: set, views: dict,
               is_library) -> Schedule:
    """Work items (groups, library/getitem nodes, view nodes) in the order to run them."""
    order = graph.nodes()
    position = {n: i for i, n in enumerate(order)}
    items = [Item(n, position[n], [n], list(n.inputs)) for n in order if is_library(n)]
    items += [Item(n, position[n], [n], [views[n]]) for n in order
              if n in views and not is_library(n)]
    items += [Item(g, min(position[m] for m in g.members), list(g.members), list(g.reads))
              for g in groups]
    producer = {n: it for it in items for n in it.produces}

    def root_of(n: Node) -> Node:
        """The node owning n's storage: through views, and from a getitem to its call."""
        while True:
            if n in views:
                n = views[n]
            elif n.op == Op.GETITEM and is_library(n.inputs[0]):
                n = n.inputs[0]
            else:
                return n

    kept = {root_of(o) for o in graph.outputs if o is not None}
    size: dict[Node, int] = {n: meta_nbytes(n.meta) for n in graph.inputs}
    remaining: dict[Node, int] = {}       # storage root -> reads not yet run
    for it in items:
        obj = it.obj
        shares = isinstance(obj, Node) and (obj in views or obj.op == Op.GETITEM)
        made = [] if shares else [obj] if isinstance(obj, Node) else \
            [m for m in obj.members if m in realized]
        for m in made:
            size[m] = meta_nbytes(m.meta)
            it.alloc += size[m]
            it.cost += 0 if m in kept else size[m]
        deps = set()
        for r in it.reads:
            rr = root_of(r)
            it.roots_read[rr] = it.roots_read.get(rr, 0) + 1
            remaining[rr] = remaining.get(rr, 0) + 1
            if r in producer and producer[r] is not it:
                deps.add(producer[r])
        it.deps = len(deps)
        for d in deps:
            d.users.append(it)

    runs = {"depth-first": _run(items, remaining, size, kept, greedy=False)}
    if len(items) > 2:
        runs["memory-greedy"] = _run(items, remaining, size, kept, greedy=True)
    chosen = min(runs, key=lambda name: runs[name][1:])     # depth-first on a tie
    return Schedule([it.obj for it in runs[chosen][0]], chosen,
                    {name: r[1] for name, r in runs.items()})


def _run(items: list, remaining: dict, size: dict, kept: set, greedy: bool):
    """One list schedule: (items in order, peak bytes of new storage alive, their sum over the
    steps -- the tie-break when the peak is the same, e.g. set by the first step)."""
    deps = {id(it): it.deps for it in items}
    left = dict(remaining)
    ready = [(it.key, i, it) for i, it in enumerate(items) if it.deps == 0]
    heapq.heapify(ready)
    out, current, peak, area = [], 0, 0, 0

    def frees(it) -> int:
        return sum(size.get(r, 0) for r, k in it.roots_read.items()
                   if left[r] == k and r not in kept)

    while ready:
        if greedy:
            j = max(range(len(ready)),
                    key=lambda i: (frees(ready[i][2]) - ready[i][2].cost, -ready[i][0]))
            ready[j], ready[-1] = ready[-1], ready[j]
            _, _, it = ready.pop()
            heapq.heapify(ready)
        else:
            _, _, it = heapq.heappop(ready)
        out.append(it)
        current += it.alloc
        peak = max(peak, current)
        for r, k in it.roots_read.items():
            left[r] -= k
            if left[r] == 0 and r not in kept:
                current -= size.get(r, 0)
        area += current
        for u in it.users:
            deps[id(u)] -= 1
            if deps[id(u)] == 0:
                heapq.heappush(ready, (u.key, id(u), u))
    if len(out) != len(items):
        raise RuntimeError("cherenkov: execution plan has a cycle")
    return out, peak, area

"""Matmul epilogues: the elementwise work that reads a matmul's result, fused into the matmul.

For each 2-D mm / addmm the region is grown in topological order: nodes of M*N elements
computed element by element from the matmul's value at the same element -- elementwise ops
and reshapes -- whose other inputs are not computed from the matmul at all. Those inputs are
inlined into the epilogue down to buffers (graph inputs, library results, reductions, and
movement other than views), as the fusion pass would inline them. What the region computes
and something outside reads (or the graph returns) the kernel stores; the rest never leaves
registers.

    l = addmm(b, x, wt)   m = reshape(l)   n = cast(m)   ...   w = cast(v)     (GELU)
 -> f = fused(x, wt, b)   l = f[0]         w = f[1]                         (l saved, w read)

Whether a region runs as the template is `templates/epilogue_tuning.choose`'s call: on CUDA
with `autotune` on, the measured verdict (cached on disk); anywhere with
`matmul_templates="on"`. A region the kernel builder cannot express, or whose epilogue
would read the matmul's value at another element, stays as it was.
"""
from __future__ import annotations

import logging

import torch

from cherenkov.codegen.builder import KernelBuilder, NotFusible
from cherenkov.codegen import indexing as ix
from cherenkov.codegen.kernel_ir import Load
from cherenkov.ir.graph import (Graph, Node, TensorMeta, contiguous_strides, numel, rewritten,
                                toposort)
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.ir.views import final_layout, torch_view
from cherenkov.lowering.library import Slot
from cherenkov.templates import epilogue_tuning
from cherenkov.templates.fused_epilogue import ACC, Epilogue, Operand

log = logging.getLogger("cherenkov")
aten = torch.ops.aten

TARGETS = (aten.mm.default, aten.addmm.default)
# what an epilogue computes inline: elementwise ops and views (index arithmetic)
INLINE = GroupOp.ELEMENTWISE | GroupOp.VIEW
MIN_SIZE = 16            # tl.dot's smallest tile side


def _is_matmul(node: Node) -> bool:
    if node.op is not Op.MATMUL or node.args[0] not in TARGETS or node.args[2]:
        return False
    meta = node.meta
    n_args = 2 if node.args[0] is aten.mm.default else 3
    return (isinstance(meta, TensorMeta) and len(meta.shape) == 2 and len(node.args[1]) == n_args
            and all(isinstance(a, Slot) for a in node.args[1])
            and meta.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and min(meta.shape) >= MIN_SIZE and meta.strides == contiguous_strides(meta.shape))


def _operand(node: Node, shape: tuple) -> Operand | None:
    """`node` as (root buffer, one strided view of it), or None (a view that would copy, a root
    not laid out from its storage's start)."""
    chain, root = [], node
    while root.op in GroupOp.VIEW:
        chain.append(torch_view(root))
        root = root.inputs[0]
    if not isinstance(root.meta, TensorMeta) or root.meta.storage_offset:
        return None
    chain.reverse()
    if tuple(node.shape) != tuple(shape):
        chain.append(lambda t: t.expand(shape))          # addmm's bias broadcasts
    layout = final_layout(root, chain)
    if layout is None:
        return None
    size, stride, offset = layout
    return Operand(root, tuple(size), tuple(stride), offset)


def _descendants(start: Node, users: dict) -> set:
    seen, stack = set(), [start]
    while stack:
        for u in users.get(stack.pop(), ()):
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def _grow(mm: Node, order: list, users: dict, outputs: set) -> list[Node]:
    """The region's nodes after the matmul, in topological order: grown over what is computed
    from the matmul's value element by element, then trimmed to what stores only values that
    would be stored anyway (returned, or read by a library call such as the next matmul): a
    value that only kernels read outside (a norm's backward reductions) is better computed in
    those kernels from the matmul's output than written wider by the template."""
    size = numel(mm.shape)
    below = _descendants(mm, users)
    region, members = {mm}, []
    for n in order:
        if n not in below or not isinstance(n.meta, TensorMeta):
            continue
        if n.op not in GroupOp.ELEMENTWISE and n.op is not Op.RESHAPE or n.op is Op.IOTA:
            continue
        if numel(n.shape) != size or not any(i in region for i in n.inputs):
            continue
        if all(i in region or i not in below for i in n.inputs):
            region.add(n)
            members.append(n)
    while True:
        region = {mm, *members}
        kept = [m for m in members if m.op is Op.RESHAPE or _kept(m, region, users, outputs)]
        cut = set(members) - set(kept)
        for m in kept:                          # and what is computed from a cut value
            if any(i in cut for i in m.inputs):
                cut.add(m)
        if not cut:
            return members
        members = [m for m in members if m not in cut]


def _kept(m: Node, region: set, users: dict, outputs: set) -> bool:
    """Whether a region value may stay: read by nothing outside, or stored anyway (returned
    or read by a library call; kernels may then read it too)."""
    outside = [u for u in _readers(m, users) if u not in region]
    return m in outputs or not outside or any(
        u.op in GroupOp.LIBRARY or (u.op in GroupOp.VIEW and u in outputs) for u in outside)


def _readers(n: Node, users: dict):
    """What reads `n`, through views (a view is read where its readers are)."""
    for u in users.get(n, ()):
        if u.op in GroupOp.VIEW:
            yield u
            yield from _readers(u, users)
        else:
            yield u


def _leaves(members: list[Node], region: set, users: dict, outputs: set) -> list[Node]:
    """The buffers the epilogue reads. Views, constants, and elementwise values computed for
    this region alone are inlined; a value something else reads too -- the region's own
    matmul, the graph's outputs included -- is read as a buffer (inlined, the residual
    stream's whole history would be recomputed in every layer, and a value both inlined and
    stored elsewhere is computed twice)."""
    computed_here = set(members)
    inlined = {n for n in _all_inline(members, region) if n.op not in GroupOp.VIEW}
    while True:
        drop = {n for n in inlined
                if n in outputs or any(
                    u not in computed_here and u not in inlined and u.op not in GroupOp.VIEW
                    or u in outputs for u in _readers(n, users))}
        if not drop:
            break
        inlined -= drop
    found, seen = [], set()
    stack = [i for m in members for i in m.inputs if i not in region]
    while stack:
        n = stack.pop()
        if n in seen or n.op in (Op.CONST, Op.IOTA):
            continue
        seen.add(n)
        if n.op in GroupOp.VIEW or n in inlined:
            stack.extend(n.inputs)
        else:
            found.append(n)
    return found


def _all_inline(members: list[Node], region: set) -> set:
    """Every elementwise value reachable below the region through elementwise ops and views."""
    found, stack = set(), [i for m in members for i in m.inputs if i not in region]
    while stack:
        n = stack.pop()
        if n in found:
            continue
        if n.op in GroupOp.VIEW or (n.op in GroupOp.ELEMENTWISE and n.inputs):
            found.add(n)
            stack.extend(n.inputs)
    return found


def _stored(mm: Node, members: list[Node], region: set, users: dict, outputs: set):
    """Region values read outside it: a view read outside stores the value it views."""
    def source(n: Node) -> Node:
        while n.op is Op.RESHAPE and n is not mm:
            n = n.inputs[0]
        return n
    needed = set()
    for n in [mm] + members:
        if n in outputs or any(u not in region for u in users.get(n, ())):
            needed.add(source(n))
    return needed


def build(mm: Node, order: list, users: dict, outputs: set) -> Epilogue | None:
    members = _grow(mm, order, users, outputs)
    computed = [m for m in members if m.op is not Op.RESHAPE]
    if not computed:
        return None
    region = {mm, *members}
    M, N = mm.shape
    slots = [s.index for s in mm.args[1]]
    a_node, b_node = mm.inputs[slots[-2]], mm.inputs[slots[-1]]
    K = a_node.shape[1]
    a, b = _operand(a_node, (M, K)), _operand(b_node, (K, N))
    bias = _operand(mm.inputs[slots[0]], (M, N)) if len(slots) == 3 else None
    if a is None or b is None or (len(slots) == 3 and bias is None) or K < MIN_SIZE:
        return None
    if a.root.meta.dtype != mm.meta.dtype or b.root.meta.dtype != mm.meta.dtype:
        return None
    leaves = _leaves(members, region, users, outputs)
    if any(not isinstance(n.meta, TensorMeta) or n.meta.storage_offset for n in leaves):
        return None
    needed = _stored(mm, members, region, users, outputs)
    buffers = {mm: (ACC, mm.meta)} | {n: (f"buf{id(n):x}", n.meta) for n in leaves}
    try:
        kernel, builder = _kernel(computed, needed, buffers, M, N)
        flat, _ = _kernel(computed, needed, buffers, M * N, 1)
    except (NotFusible, NotImplementedError) as e:
        log.info("cherenkov: matmul epilogue not built (%s)", e)
        return None
    except Exception as e:  # noqa: BLE001 -- an optional rewrite: the matmul runs as it was
        log.warning("cherenkov: matmul epilogue not built (%s: %s)", type(e).__name__, e)
        return None
    at = str(ix.release(ix.add(ix.mul(builder.x, N), builder.r)))
    if any(isinstance(s, Load) and s.buffer == ACC and str(s.index) != at for s in kernel.body):
        return None                       # reads the matmul's value at another element
    by_name = {f"buf{id(n):x}": n for n in leaves}
    leaf_order = [by_name[b_.name] for b_ in kernel.inputs if b_.name != ACC]
    stored = ([mm] if mm in needed else []) + [m for m in computed if m in needed]
    return Epilogue(mm, a, b, bias, kernel, flat, leaf_order, stored, members)


def _kernel(computed: list[Node], needed: set, buffers: dict, X: int, R: int):
    """The epilogue as kernel IR over (X, R): the tile's (M, N), or M*N flat elements."""
    builder = KernelBuilder("epilogue", X, R, buffers)
    for m in computed:
        builder.add_member(m, (f"buf{id(m):x}", m.meta) if m in needed else None)
    return builder.finish(), builder


def applies(config, device: torch.device) -> bool:
    """Templates are considered anywhere with "on", and on CUDA with "auto" when autotuning
    (without it "auto" always takes cuBLAS: no region is built, no compile time spent)."""
    return config.matmul_templates == "on" or (config.matmul_templates == "auto"
                                               and config.autotune and device.type == "cuda")


def fuse_matmul_epilogues(graph: Graph, device: torch.device, config, spec) -> Graph:
    """`graph` with each matmul whose epilogue the template should run (per `choose`) and the
    epilogue's stored values read from one fused call."""
    if not applies(config, device):
        return graph
    order = graph.nodes()
    users = graph.users()
    outputs = {o for o in graph.outputs if o is not None}
    chosen: list[tuple[Epilogue, object]] = []
    claimed: set = set()
    for n in order:
        if not _is_matmul(n) or n in claimed:
            continue
        ep = build(n, order, users, outputs)
        if ep is None or claimed & {ep.mm, *ep.members}:
            continue
        cfg = epilogue_tuning.choose(ep, config, spec, device)
        if cfg is None:
            continue
        chosen.append((ep, cfg))
        claimed |= {ep.mm, *ep.members}
    if not chosen:
        return graph
    return _rewrite(graph, chosen, device, config.compile_workers)


def _rewrite(graph: Graph, chosen, device, workers: int = -1) -> Graph:
    """Stored values -> getitems of the fused call. The walk visits every region's inputs
    first, so each fused call reads their rewritten forms; a region whose inputs are not all
    visited when its first stored value is (never seen) stays unfused."""
    roots = [r for ep, _ in chosen for r in ep.roots]
    index_of = {n: (k, i) for k, (ep, _) in enumerate(chosen) for i, n in enumerate(ep.stored)}
    fused: dict[int, Node | None] = {}
    done: dict[Node, Node] = {}                  # visited node -> what replaced it

    def rewrite(node: Node, rebuilt: Node) -> Node:
        new = rebuilt
        if node in index_of:
            k, i = index_of[node]
            if k not in fused:
                ep, cfg = chosen[k]
                fused[k] = Node(Op.MATMUL, tuple(done[r] for r in ep.roots),
                                (epilogue_tuning.fused_call(ep, cfg, device, workers),
                                 tuple(Slot(j) for j in range(len(ep.roots))), {},
                                 "matmul + epilogue (template)"),
                                tuple(s.meta for s in ep.stored)) \
                    if all(r in done for r in ep.roots) else None
            if fused[k] is not None:
                new = Node(Op.GETITEM, (fused[k],), (i,), node.meta)
        done[node] = new
        return new
    return rewritten(graph, rewrite,
                     toposort(roots + [o for o in graph.outputs if o is not None], graph.inputs))

"""Fusion: decide which IR values are materialized and which kernels compute them together.

1. Realize: reductions, scans, scatters, values read by library ops (matmul, attention,
   extern), and graph outputs get buffers; other elementwise and movement nodes are inlined
   into the kernels that read them (views become index arithmetic). Pure views of a buffer read by a library op or
   returned are passed as PyTorch views, never copied. A value read by several consumers is
   realized too when inlining it would cost more than storing it once: each consumer would
   re-read everything the value is computed from (its closure), so a chain such as the
   residual stream (x_k = x_{k-1} + f_k) would otherwise be recomputed from the start by every
   layer -- quadratic in depth (passes/realize.py).
2. Merge: candidate pairs (sharing an input, or one reading what the other writes) are tried
   in order of the bytes a merge would save, when their domains agree ((X, R) equal, or a
   pointwise kernel of X*R or X elements joining an (X, R) reduction). The cost model
   (`cherenkov.cost.kernel_time` on the device's spec: roofline plus launch overhead) decides:
   merge when the merged kernel is predicted faster than the two apart -- shared inputs read
   once, intermediates never written, but recomputed work counted. A pointwise value joined
   to a column reduction that reads it (a bias gradient: the input gradient and its column
   sums) is computed, stored and summed in the reduction's lanes, so it is never read back.
   A scatter keeps a kernel of its own (its producers inlined), a scan takes in only
   pointwise work on its rows (`pairable`). A merge that would create a cycle (directly, or
   through another group that both needs and feeds the pair), that the kernel builder cannot express (a reduction read at another
   index), or that would walk memory both along and across rows, is skipped.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from cherenkov.codegen.builder import KernelBuilder, NotFusible
from cherenkov.codegen.kernel_ir import Kernel
from cherenkov.ir.graph import Graph, Node, TensorMeta, numel, view_root
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.ir.views import final_layout, torch_view
from cherenkov.passes import memory_order
from cherenkov.passes.realize import (is_buffer_source, is_library, node_bytes,
                                      realize_broadcast_work, realize_narrowed,
                                      realize_shared)

VIEW_OPS = GroupOp.VIEW


@dataclass(eq=False)
class Group:
    members: list[Node]
    X: int
    R: int
    kernel: Kernel | None = None
    reads: set = field(default_factory=set)      # realized nodes read from outside
    row_loop: int = 0                            # rows per program of a row-loop kernel


@dataclass
class FusionResult:
    groups: list[Group]
    realized: set                         # nodes with buffers (members that are stored)
    views: dict[Node, Node]               # view node -> base buffer node
    schedule: object = None               # runtime.schedule.Schedule fixed by a later pass


def view_base(node: Node) -> Node | None:
    """The buffer a chain of views reads, if `node` is only views of one."""
    node = view_root(node)
    return node if is_buffer_source(node) and node.meta is not None else None


def computed_view_base(node: Node, realized: set = frozenset()) -> Node | None:
    """The computed value a chain of views reads, if that is all it is: the first non-view,
    or the first view on the way that already has a buffer of its own (a reshape stored for
    one matmul, transposed for another)."""
    while node.op in VIEW_OPS:
        node = node.inputs[0]
        if node in realized:
            return node
    if node.op in GroupOp.LIBRARY or node.op in (Op.INPUT, Op.GETITEM, Op.CONST) \
            or node.op in GroupOp.SCATTER:
        return None
    return node


def const_fill(node: Node):
    """The value a node is filled with, if it is a constant broadcast (e.g. zeros)."""
    while node.op in (Op.EXPAND, Op.RESHAPE):
        node = node.inputs[0]
    return node.args[0] if node.op == Op.CONST else None


def is_scatter(group: "Group") -> bool:
    return any(m.op in GroupOp.SCATTER for m in group.members)


def stands_alone(group: "Group") -> bool:
    """A scatter's or a scan's group (GroupOp.ALONE; see `pairable`)."""
    return any(m.op in GroupOp.ALONE for m in group.members)


def pairable(a: "Group", b: "Group") -> bool:
    """Whether a merge of a and b may be tried: a scatter merges with nothing; a scan only
    with a pointwise group (no reduction, no other scan) -- its readers at the scan's own
    elements become an epilogue (position ids' `* mask - 1`), else the builder refuses."""
    if is_scatter(a) or is_scatter(b):
        return False
    a_scans, b_scans = stands_alone(a), stands_alone(b)     # (no scatters left: scans)
    if not (a_scans or b_scans):
        return True
    other = a if b_scans else b
    return not (a_scans and b_scans) and other.R == 1 and not other.row_loop and not any(
        m.op in GroupOp.REDUCTION for m in other.members)


def domain_of(node: Node) -> tuple[int, int]:
    if node.op in GroupOp.SCATTER:
        return numel(node.inputs[1].shape), 1
    if node.op in GroupOp.SCAN:
        return numel(node.shape) // node.shape[-1], node.shape[-1]
    if node.op in GroupOp.REDUCTION:
        src = node.inputs[0]
        return numel(node.shape), numel(src.shape[len(src.shape) - node.args[0]:])
    return numel(node.shape), 1


def merged_domain(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    if a == b:
        return a
    (xa, ra), (xb, rb) = a, b
    if ra > 1 and rb > 1:
        return None
    if rb == 1 and ra > 1 and xb in (xa * ra, xa):
        return a
    if ra == 1 and rb > 1 and xa in (xb * rb, xb):
        return b
    return None


def joined_domain(a: "Group", b: "Group", row_loops: bool, device) -> tuple | None:
    """(X, R, rows per program) of a and b merged, or None. Besides `merged_domain`'s cases,
    with `row_loops`: a row group (X rows of R columns, one tile per row) and a split column
    reduction's partials over the same elements (S*R outputs, each over CH = X/S rows) merge
    into a row-loop kernel: S programs, each looping over its CH rows (see kernel_ir)."""
    dom = merged_domain((a.X, a.R), (b.X, b.R))
    if dom is not None:
        loops = {g.row_loop for g in (a, b) if g.row_loop}     # at most one row loop
        return None if len(loops) > 1 else (*dom, max(loops, default=0))
    if not row_loops:
        return None
    from cherenkov.codegen.blocks import next_pow2, persistent_capacity
    for row, col in ((a, b), (b, a)):
        if (row.R > 1 and col.R > 1 and not col.row_loop and row.row_loop in (0, col.R)
                and col.X % row.R == 0 and row.X == (col.X // row.R) * col.R
                and next_pow2(row.R) <= persistent_capacity(device)):
            return row.X, row.R, col.R
    return None


def mixed_access(kernel: Kernel) -> bool:
    """True when the kernel walks its full-size inputs or outputs both along r (rows) and
    across r (columns): no tile shape coalesces both, so such a merge trades launches for
    bandwidth. (A pointwise member that a column reduction does not read through views is
    stored at x*R + r, a walk along r, beside the column reduction's loads.)"""
    from cherenkov.codegen.kernel_ir import r_strides, store_r_strides
    if kernel.R == 1:
        return False
    return len({st == 1 for st in r_strides(kernel) + store_r_strides(kernel)}) == 2


def predicted_time(kernel: Kernel, device) -> float:
    """Roofline time of a kernel: its FLOPs (one per computed element) and bytes moved."""
    from cherenkov import cost
    return cost.kernel_time(device, kernel.flops(), kernel.bytes_moved())


def fuse(graph: Graph, enable: bool = True, device=None, row_loops: bool = False) -> FusionResult:
    """`device`: a `cherenkov.hw.DeviceSpec` for the cost model (default: the generic CPU).
    `row_loops`: row kernels may take in column partials (Triton kernels only)."""
    if device is None:
        from cherenkov import hw
        device = hw.device("cpu")
    nodes = graph.nodes()
    users: dict[Node, list[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n)
    outputs = {o for o in graph.outputs if o is not None}

    views: dict[Node, Node] = {}
    realized: set[Node] = set()
    for n in nodes:
        if n.op == Op.INPUT or is_library(n):
            continue
        needed_outside = n in outputs or any(is_library(u) for u in users.get(n, []))
        if n.op in GroupOp.SCATTER:
            realized.add(n)
            base = n.inputs[0]
            if const_fill(base) is None and not is_buffer_source(base):
                if view_base(base) is not None:
                    views[base] = view_base(base)
                else:
                    realized.add(base)
        elif n.op in GroupOp.REDUCTION or n.op in GroupOp.SCAN:
            realized.add(n)
        elif needed_outside:
            base = view_base(n)
            if base is None and n.op in VIEW_OPS:
                # a view (a transpose, say) of a computed value, read by a matmul or returned
                # (a saved activation): store the value once and hand out a view of it
                # instead of a copy (a weight cast for autocast was written twice)
                base = computed_view_base(n, realized)
                if base is not None and not _is_view_of_contiguous(n, base):
                    base = None           # a reshape that would copy: store n itself instead
                if base is not None:
                    realized.add(base)
            if base is not None:
                views[n] = base
            else:
                realized.add(n)

    realize_shared(nodes, users, realized, views)
    realize_broadcast_work(nodes, users, realized, views, device)
    realize_narrowed(nodes, users, realized,
                     outputs | _library_read(users) | set(views.values()))
    groups = [Group([n], *domain_of(n)) for n in nodes if n in realized]
    for g in groups:
        g.reads = _reads(g.members, realized, views)
    if enable:
        order = {n: i for i, n in enumerate(nodes)}
        groups = _merge(groups, realized, views, users, outputs, order, device, row_loops)
    readers: dict[Node, set] = {}
    for g in groups:
        for r in g.reads:
            readers.setdefault(r, set()).add(g)
    always = set(outputs) | _library_read(users) | set(views.values())
    for g in groups:
        _by_rows(g)
    for i, g in enumerate(groups):
        stored = {m for m in g.members if m in always or readers.get(m, set()) - {g}}
        g.kernel = build_kernel(g, stored, f"k{i}")
    return FusionResult(groups, realized, views)


def _is_view_of_contiguous(node: Node, base: Node) -> bool:
    """Whether the chain of views from `base` (stored contiguous) to `node` is one strided view
    (no reshape that would copy): the runtime would otherwise copy it with ATen, outside any
    kernel (Llama's per-layer saved activations cost 80 strided copies a step that way)."""
    chain = []
    while node is not base:
        chain.append(node)
        node = node.inputs[0]
    if not isinstance(base.meta, TensorMeta):
        return False
    contiguous = base.meta.replace(stride=None, storage_offset=0)
    probe = Node(base.op, base.inputs, base.args, contiguous)
    return final_layout(probe, [torch_view(v) for v in reversed(chain)]) is not None


def _reads(members, realized, views) -> set[Node]:
    """Buffers (realized nodes, inputs, library outputs) the members' inlined subtrees read."""
    seen, reads = set(), set()
    stack = []
    for m in members:
        if m.op in GroupOp.SCATTER:          # base pre-fills the output: read whole, not inlined
            stack.extend(m.inputs[1:])
            if const_fill(m.inputs[0]) is None:
                reads.add(m.inputs[0])
        else:
            stack.extend(m.inputs)
    member_set = set(members)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in member_set:
            stack.extend(n.inputs) if n not in realized else None
            continue
        if n in realized or is_buffer_source(n):
            reads.add(n)
            continue
        stack.extend(n.inputs)
    return reads


def _merge(groups, realized, views, users, outputs, order, device, row_loops=False):
    """Greedy merging, best saving first, with a heap of candidate pairs kept up to date as
    groups merge (only pairs touching the new group are scored again)."""
    group_of = {m: g for g in groups for m in g.members}
    readers: dict[Node, set] = {}
    for g in groups:
        for r in g.reads:
            readers.setdefault(r, set()).add(g)
    always = set(outputs) | _library_read(users) | set(views.values())
    alive = set(groups)
    forbidden: set[frozenset] = set()

    def cycle(a: Group, b: Group) -> bool:
        """Merging a and b would make the kernel wait for itself: a or b reads something
        whose group (or library op, or view) needs a or b -- directly, or through a third
        group, since a group computing one value the pair reads may compute another from
        the pair (x + y fused into G, a column sum fused with z: G reads the sum's group and
        the sum's group reads G -- a tiny Llama's backward)."""
        combined = set(a.members) | set(b.members)
        stack = [r for g in (a, b) for r in g.reads if r not in combined]
        seen: set = set()
        while stack:
            n = stack.pop()
            g = group_of.get(n)
            if g is a or g is b:
                return True
            key = g if g is not None else n
            if key in seen:
                continue
            seen.add(key)
            stack.extend(g.reads if g is not None else n.inputs)
        return False

    heap: list = []
    tiebreak = itertools.count()
    cpu = getattr(device, "kind", None) == "cpu"

    def misaligned(a: Group, b: Group, merged: Kernel) -> bool:
        """A pointwise kernel over X*R elements joined to a column reduction computes each
        element where the reduction reads it -- unless the reduction does not read it (through
        views): that one sits at x*R + r, another element than the reduction's (x, r),
        addressed through // and % of (x, r). On a CPU no such join: its C++ kernel would
        walk each column down the rows per thread, a cache line per element (bias + GeLU
        backward at 4096 x 4096: 3 GB/s joined, 31 GB/s apart)."""
        from cherenkov.codegen.blocks import is_column_reduction
        if (a.R == 1) == (b.R == 1) or not (merged.unplaced or cpu):
            return False
        red, pw = (a, b) if a.R > 1 else (b, a)
        return pw.X == red.X * red.R and is_column_reduction(kernel_of(red))

    def stored(members, parts) -> set[Node]:
        """Members some group other than `parts` (or the caller, a library op) reads."""
        return {m for m in members if m in always or
                len(readers.get(m, set()) - set(parts)) > 0}

    probes: dict = {}       # structure of (group, stored members) -> its probe kernel

    def probe(g: Group, needed: set[Node]):
        """The kernel of g, for cost and shape only (never rendered): a group shaped like one
        probed before (the same layer's kernels, once per transformer layer) shares its
        probe -- or its NotFusible -- instead of building it again."""
        key = structure_key(g, needed)
        hit = probes.get(key) if key is not None else None
        if hit is None:
            try:
                hit = build_kernel(g, needed, "probe")
            except NotFusible as e:
                hit = e
            if key is not None:
                probes[key] = hit
        if isinstance(hit, NotFusible):
            raise hit
        return hit

    def kernel_of(g: Group):
        if g.kernel is None:
            g.kernel = probe(g, stored(g.members, [g]))
        return g.kernel

    def time_of(g: Group) -> float:
        return predicted_time(kernel_of(g), device)

    def saving(a: Group, b: Group) -> int:
        shared = a.reads & b.reads
        produced = {r for r in b.reads if group_of.get(r) is a}
        produced |= {r for r in a.reads if group_of.get(r) is b}
        return sum(node_bytes(n) for n in shared | produced)

    def push_pairs(g: Group) -> None:
        neighbours = set()
        for r in g.reads:
            neighbours |= readers.get(r, set())
            if r in group_of:
                neighbours.add(group_of[r])
        for m in g.members:
            neighbours |= readers.get(m, set())
        for h in neighbours:
            if h is g or h not in alive or not pairable(g, h):
                continue
            if joined_domain(g, h, row_loops, device) is None:
                continue
            value = saving(g, h)
            if value > 0:
                heapq.heappush(heap, (-value, next(tiebreak), g, h))

    def candidate(a: Group, b: Group, X: int, R: int, loop: int) -> Group | None:
        """a and b as one group over (X, R) with its probe kernel, or None when the group would
        wait for itself or its kernel does not build."""
        if cycle(a, b):
            return None
        merged = Group(sorted(a.members + b.members, key=order.__getitem__), X, R,
                       row_loop=loop)
        merged.reads = _reads(merged.members, realized, views)
        try:
            merged.kernel = probe(merged, stored(merged.members, [a, b]))
        except NotFusible:
            return None
        return merged

    def adopt(a: Group, b: Group, merged: Group) -> None:
        """merged replaces a and b."""
        alive.difference_update((a, b))
        alive.add(merged)
        for g in (a, b):
            for r in g.reads:
                readers[r].discard(g)
        for r in merged.reads:
            readers.setdefault(r, set()).add(merged)
        for m in merged.members:
            group_of[m] = merged

    for g in groups:
        push_pairs(g)
    while heap:
        _, _, a, b = heapq.heappop(heap)
        key = frozenset((a, b))
        if a not in alive or b not in alive or key in forbidden:
            continue
        forbidden.add(key)                      # each pair is decided once
        merged = candidate(a, b, *joined_domain(a, b, row_loops, device))
        if merged is None:
            continue
        try:
            apart = time_of(a) + time_of(b)
        except NotFusible:
            continue
        if mixed_access(merged.kernel) or misaligned(a, b, merged.kernel) or \
                predicted_time(merged.kernel, device) >= apart:
            continue
        adopt(a, b, merged)
        push_pairs(merged)

    # Scalar kernels that share nothing (an optimizer's step counters, one per parameter) are
    # never paired above -- merging saves no bytes -- yet each is a launch: run them as one.
    scalars = sorted((g for g in alive if g.X == 1 and g.R == 1 and not stands_alone(g)),
                     key=lambda g: min(order[m] for m in g.members))
    batch = None
    for g in scalars:
        merged = None if batch is None else candidate(batch, g, 1, 1, 0)
        if merged is not None:
            adopt(batch, g, merged)
        batch = merged or batch or g
    return sorted(alive, key=lambda g: min(order[m] for m in g.members))


def structure_key(group: Group, needed: set[Node]):
    """A hashable description of what `build_kernel(group, needed)` builds, equal for groups
    that differ only in node identity (the same ops, constants, layouts and wiring): members
    and the values they inline, in a canonical order, down to the buffers they read. None
    when some op argument is not hashable."""
    ids: dict[Node, int] = {}
    parts: list = [group.X, group.R, group.row_loop]
    members = set(group.members)

    def visit(root: Node) -> None:
        stack = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if n in ids:
                continue
            buffer = n in group.reads and n not in members
            if buffer or expanded or not n.inputs:
                if buffer:
                    parts.append(("buffer", n.meta))
                else:
                    parts.append((n.op, n.args, n.meta, tuple(ids[i] for i in n.inputs),
                                  n in members, n in needed))
                ids[n] = len(ids)
            else:
                stack.append((n, True))
                stack.extend((i, False) for i in reversed(n.inputs) if i not in ids)
    for m in group.members:
        visit(m)
    key = tuple(parts)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _library_read(users) -> set[Node]:
    return {n for n, us in users.items() if any(is_library(u) for u in us)}


def halves_of(group: Group) -> int:
    """D when `group` is pointwise over rows of D (even) elements and computes a
    concatenation of two D/2 halves along the row, or a padding by D/2 on one side of it
    (rotate-half in RoPE, forward and backward): its kernel then gives each lane the two
    elements j and j + D/2 of a row (builder: `halves`), 0 otherwise."""
    if group.R != 1 or not group.members:
        return 0
    D = group.members[0].shape[-1] if group.members[0].shape else 0
    if D < 2 or D % 2 or any(not m.shape or m.shape[-1] != D for m in group.members):
        return 0
    half, seen, stack = D // 2, set(), list(group.members)
    members = set(group.members)
    while stack:
        n = stack.pop()
        if n in seen or (n in group.reads and n not in members):
            continue
        seen.add(n)
        last = len(n.shape) - 1
        if n.op == Op.CAT and n.args[0] in (last, -1) and n.shape[-1] == D and \
                [i.shape[-1] for i in n.inputs] == [half, half]:
            return D
        if n.op == Op.PAD and n.shape and n.shape[-1] == D and \
                tuple(n.args[0][-1]) in ((0, half), (half, 0)):
            return D
        stack.extend(n.inputs)
    return 0


# columns a pointwise kernel's rows need before it is tiled by rows (vocabulary-wide rows:
# what was measured, the cross-entropy gradient; a norm's rows are untried), and rows (its
# programs, or a CPU's threads, share out the rows)
ROW_MIN = 8192
ROWS_MIN = 512


def _by_rows(group: Group) -> None:
    """A pointwise group over long rows that reads per-row values (a cross-entropy gradient:
    the row's target, max and log-sum) runs as X rows of R columns: what depends on the row
    alone is then loaded and computed once per row of a tile, not once per element (with
    the element's row recovered by a division)."""
    if group.R != 1 or group.row_loop or halves_of(group) or any(
            m.op in GroupOp.REDUCTION or m.op in GroupOp.ALONE for m in group.members):
        return
    shapes = {m.shape for m in group.members}
    if len(shapes) != 1:
        return
    (shape,) = shapes
    if len(shape) < 2 or shape[-1] < ROW_MIN or numel(shape) != group.X:
        return
    rows = group.X // shape[-1]
    if rows < ROWS_MIN:
        return
    if any(r.meta is not None and not isinstance(r.meta, tuple) and r.meta.numel == rows
           for r in group.reads):
        group.X, group.R = rows, shape[-1]


def build_kernel(group: Group, needed: set[Node], name: str) -> Kernel:
    if group.X * group.R == 0:       # lowering leaves empty tensors to PyTorch; a pass made one
        raise ValueError(f"kernel {name} over no elements: "
                         f"{[m.op.name.lower() for m in group.members]} (a graph pass created an "
                         "empty node; the graph runs in eager)")
    buffers = {r: (buffer_name(r), r.meta) for r in group.reads}
    halves = halves_of(group)

    def build(x_order) -> Kernel:
        builder = KernelBuilder(name, group.X, group.R, buffers, group.row_loop,
                                [m for m in group.members if m.op in GroupOp.REDUCTION],
                                halves, x_order)
        for m in group.members:
            builder.add_member(m, (buffer_name(m), m.meta) if m in needed else None)
        return builder.finish()
    if halves:
        return build(None)
    return memory_order.build_in_best_order(group, needed, build)


def buffer_name(node: Node) -> str:
    return f"buf{id(node):x}"

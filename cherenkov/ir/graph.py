"""Graph IR records: a value's metadata (`TensorMeta`), the nodes that make values, the graph.

Nodes are small immutable records. A node is its own value: `inputs` are the nodes it reads,
`args` are static parameters (dims, shapes, constants). Identity is by object, so a graph is a
DAG of shared records; `toposort` walks it.

    { lambda ; a:f32[8,16]. let b:f32[8,16] = exp a in (b,) }
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable

import torch

from cherenkov.ir.ops import GroupOp, Op
from cherenkov.ir.placement import Mesh, Placement, SINGLE_DEVICE


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def dense_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dims of a dense layout that is not row-major from outermost to innermost (by
    decreasing stride; size-1 dims, whose stride is free, last), or None."""
    shape, strides = tuple(shape), tuple(strides)
    if strides == contiguous_strides(shape) or not is_dense(shape, strides):
        return None
    return tuple(sorted(range(len(shape)), key=lambda d: (-strides[d] if shape[d] != 1 else 0, d)))


def laid_out_strides(node: "Node") -> tuple[int, ...]:
    """The strides `node`'s elements lie by, or would were it realized: its own where recorded
    (an input, a library result, an FX node's elementwise value in eager's layout); for an
    elementwise value computed inside one op's lowering (var_mean's squared deviations), its
    first same-shape operand's, through elementwise ops; row-major otherwise."""
    seen = 0
    while seen < 16 and node.meta.stride is None and node.op in GroupOp.ELEMENTWISE:
        same = [i for i in node.inputs if isinstance(i.meta, TensorMeta)
                and i.meta.shape == node.meta.shape]
        if not same:
            break
        node, seen = next((i for i in same if i.meta.stride is not None), same[0]), seen + 1
    return node.meta.strides


def is_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a layout covers its elements exactly once with no gaps: a permutation of a
    contiguous layout (sizes-1 dims may have any stride)."""
    acc = 1
    for size, stride in sorted((d for d in zip(shape, strides) if d[0] != 1),
                               key=lambda d: d[1]):
        if stride != acc:
            return False
        acc *= size
    return True


def numel(shape: Iterable[int]) -> int:
    total = 1
    for s in shape:
        total *= s
    return total


@dataclass(frozen=True, slots=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    stride: tuple[int, ...] | None = None      # layout when materialized; None = contiguous
    storage_offset: int = 0
    mesh: Mesh = SINGLE_DEVICE
    placements: tuple[Placement, ...] = ()

    @staticmethod
    def of(t: torch.Tensor) -> "TensorMeta":
        return TensorMeta(tuple(int(s) for s in t.shape), t.dtype, t.device,
                          tuple(int(s) for s in t.stride()), int(t.storage_offset()))

    @property
    def numel(self) -> int:
        return numel(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        return self.stride if self.stride is not None else contiguous_strides(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def replace(self, **changes) -> "TensorMeta":
        return dataclasses.replace(self, **changes)


def meta_nbytes(meta) -> int:
    """Bytes of a node's value: one tensor, the sum over a tuple of them, 0 for a non-tensor."""
    if isinstance(meta, TensorMeta):
        return meta.nbytes
    if isinstance(meta, tuple):
        return sum(meta_nbytes(m) for m in meta)
    return 0


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    op: Op
    inputs: tuple["Node", ...] = ()
    args: tuple = ()
    meta: TensorMeta | tuple[TensorMeta, ...] | None = None

    def replace(self, **changes) -> "Node":
        return dataclasses.replace(self, **changes)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.meta.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.meta.dtype


@dataclass(slots=True)
class Graph:
    """A whole graph: inputs in call order, outputs in return order (None for non-tensor outputs)."""
    inputs: list[Node]
    outputs: list[Node | None]
    name: str = "graph"
    # output positions that return Python scalars (e.g. sym sizes) instead of tensors
    scalar_outputs: dict[int, object] = field(default_factory=dict)
    # in-place updates of inputs (x.add_(y) after functionalization: copy_(x, x + y)) as
    # (input index, output position): that output's value is copied into the input after the
    # run; such outputs follow the graph's own
    mutations: list[tuple[int, int]] = field(default_factory=list)

    def nodes(self) -> list[Node]:
        return toposort([o for o in self.outputs if o is not None], self.inputs)

    def users(self) -> dict[Node, list[Node]]:
        users: dict[Node, list[Node]] = {}
        for n in self.nodes():
            for i in n.inputs:
                users.setdefault(i, []).append(n)
        return users


def rewritten(graph: Graph, rewrite, order: list[Node] | None = None) -> Graph:
    """`graph` with each node, in order, replaced by `rewrite(node, rebuilt)`: `rebuilt` is
    the node reading its inputs' replacements (the node itself if none changed); returning it
    keeps the node. The same graph object when nothing changed. `order`: a topological order
    of the graph's nodes to visit them in (default `graph.nodes()`)."""
    replaced: dict[Node, Node] = {}
    for node in graph.nodes() if order is None else order:
        inputs = tuple(replaced.get(i, i) for i in node.inputs)
        rebuilt = node.replace(inputs=inputs) if inputs != node.inputs else node
        new = rewrite(node, rebuilt)
        if new is not node:
            replaced[node] = new
    if not replaced:
        return graph
    return dataclasses.replace(
        graph, inputs=[replaced.get(i, i) for i in graph.inputs],
        outputs=[None if o is None else replaced.get(o, o) for o in graph.outputs])


def toposort(roots: Iterable[Node], first: Iterable[Node] = ()) -> list[Node]:
    """Every node reachable from `roots`, inputs before users; `first` nodes lead in their order."""
    order: list[Node] = list(first)
    seen = set(order)
    for root in roots:
        if root in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                if node not in seen:
                    seen.add(node)
                    order.append(node)
                continue
            if node in seen:
                continue
            stack.append((node, True))
            for inp in reversed(node.inputs):
                if inp not in seen:
                    stack.append((inp, False))
    return order


def view_root(node: "Node") -> "Node":
    """The node whose elements `node` reads in place: through views (GroupOp.VIEW)."""
    while node.op in GroupOp.VIEW:
        node = node.inputs[0]
    return node

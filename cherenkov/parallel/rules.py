"""Sharding-propagation rules, one per op kind, over one mesh axis.

A rule lists the ways an op can run on `t` devices of one mesh axis. Each `Strategy` fixes the
placement of every activation input, of the output, and of every weight; the placement of
the gradient the op's backward produces for each input; the fraction of the op's work each
device does; and any collective the strategy needs inside the op (`comm`). Collectives
*between* ops come from redistributing a producer's placement to what a consumer needs
(`cherenkov.parallel.redistribute`); the integer program picks one strategy per op.

    matmul x[b,s,k] @ W[k,n]:  column  x:R    W:S(1) -> y:S(2)   dx:P
                               row     x:S(2) W:S(0) -> y:P      dx:S(2)

Column then row puts one `P -> R` all-reduce after each block in the forward pass and
one in the backward pass (from column's `dx:P`): Megatron-LM's tensor parallelism.
Rules are registered with `@rule("kind")`; later they can be keyed by IR ops the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Callable

from cherenkov.ir.placement import Partial, Placement, Replicate, Shard
from cherenkov.parallel.layer_graph import LayerGraph, LayerOp

R = Replicate()
P = Partial("sum")


@dataclass(frozen=True)
class Strategy:
    name: str
    inputs: tuple[Placement, ...]
    output: Placement
    weights: tuple[Placement, ...]
    grads: tuple[Placement, ...]        # placement of d(input) produced by the backward
    fraction: float                     # share of the op's FLOPs and bytes one device does
    weight_fraction: tuple[float, ...]  # share of each weight one device stores
    # Collectives inside the op: (kind, bytes of the whole buffer, phase) with phase "fwd",
    # "bwd" or "step" (once per training step: gradients of weights replicated over the axis
    # while the data is split over it).
    comm: tuple[tuple[str, float, str], ...] = ()

    def __str__(self) -> str:
        ins = ",".join(map(str, self.inputs))
        return f"{self.name}({ins}->{self.output})"


RULES: dict[str, Callable[[LayerOp, LayerGraph, int], list[Strategy]]] = {}


def rule(kind: str):
    def register(fn):
        RULES[kind] = fn
        return fn
    return register


def strategies(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    """All valid strategies of `op` on an axis of `t` devices (just replication when t == 1)."""
    if op.kind not in RULES:
        raise KeyError(f"no sharding rule for op kind {op.kind!r}; known: {sorted(RULES)}")
    found = RULES[op.kind](op, graph, t)
    if t == 1:
        found = [s for s in found if s.name == "replicate"]
    return found


def _dim(graph: LayerGraph, name: str, d: int) -> int:
    return graph.values[name].shape[d]


def _weights_bytes(op: LayerOp, graph: LayerGraph) -> float:
    return float(sum(graph.values[w].nbytes for w in op.weights))


def _data_split(op: LayerOp, graph: LayerGraph, t: int, dims=(0, 1)) -> list[Strategy]:
    """Replicate, and split the batch (dim 0) or the sequence (dim 1) of every activation."""
    n = len(op.inputs)
    out = [Strategy("replicate", (R,) * n, R, (R,) * len(op.weights), (R,) * n, 1.0,
                    (1.0,) * len(op.weights))]
    sync = (("all_reduce", _weights_bytes(op, graph), "step"),) if op.weights else ()
    for d, name in ((0, "batch"), (1, "seq")):
        if d in dims and all(_dim(graph, x, d) % t == 0 for x in op.inputs):
            out.append(Strategy(name, (Shard(d),) * n, Shard(d), (R,) * len(op.weights),
                                (Shard(d),) * n, 1.0 / t, (1.0,) * len(op.weights), sync))
    return out


@rule("matmul")
def matmul_rule(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    found = _data_split(op, graph, t)
    k, n = graph.values[op.weights[0]].shape
    nw = len(op.weights)  # weight, then an optional bias of shape [n]
    heads = op.attr("heads")
    if heads is not None:  # fused q|k|v projection: split by heads; kv heads replicate if too few
        kv, d = op.attr("kv_heads"), op.attr("head_dim")
        kv_shards = gcd(kv, t)
        col_ok = heads % t == 0
        col_frac = (heads * d / t + 2 * kv * d / kv_shards) / n
    else:
        col_ok, col_frac = n % t == 0, 1.0 / t
    if col_ok:
        found.append(Strategy("column", (R,), Shard(2), (Shard(1),) + (Shard(0),) * (nw - 1),
                              (P,), col_frac, (col_frac,) * nw))
    if k % t == 0:
        # Row split: each device holds k/t rows of W; the bias is added once (replicated).
        found.append(Strategy("row", (Shard(2),), P, (Shard(0),) + (R,) * (nw - 1),
                              (Shard(2),), 1.0 / t, (1.0 / t,) + (1.0,) * (nw - 1)))
    return found


@rule("attention")
def attention_rule(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    """One input (a fused q|k|v) or several (q, k, v from separate projections), all split alike."""
    found = _data_split(op, graph, t, dims=(0,))
    heads, kv = op.attr("heads"), op.attr("kv_heads")
    n = len(op.inputs)
    if heads % t == 0:
        found.append(Strategy("heads", (Shard(2),) * n, Shard(2), (), (Shard(2),) * n, 1.0 / t, ()))
    b, s, _ = graph.values[op.inputs[0]].shape
    if s % t == 0:
        # Context parallel (ring attention): every device gathers K and V of the whole sequence
        # in the forward pass and reduce-scatters their gradients in the backward pass.
        kv_bytes = 2.0 * b * s * kv * op.attr("head_dim") * graph.values[op.inputs[0]].itemsize
        found.append(Strategy("context", (Shard(1),) * n, Shard(1), (), (Shard(1),) * n, 1.0 / t,
                              (), (("all_gather", kv_bytes, "fwd"),
                                   ("reduce_scatter", kv_bytes, "bwd"))))
    return found


@rule("norm")
def norm_rule(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    return _data_split(op, graph, t)  # normalises over features: dim 2 cannot be split


@rule("elementwise")
def elementwise_rule(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    found = _data_split(op, graph, t)
    if all(_dim(graph, x, 2) % t == 0 for x in op.inputs):
        # Weights of a captured pointwise op (a learned scale) stay whole on every device.
        n, nw = len(op.inputs), len(op.weights)
        found.append(Strategy("features", (Shard(2),) * n, Shard(2), (R,) * nw, (Shard(2),) * n,
                              1.0 / t, (1.0,) * nw))
    return found


@rule("embedding")
def embedding_rule(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    found = _data_split(op, graph, t)
    vocab = graph.values[op.weights[0]].shape[0]
    if vocab % t == 0:
        # Vocabulary-parallel: each device looks up the ids in its slice, zeros elsewhere.
        nw = len(op.weights)
        found.append(Strategy("vocab", (R,), P, (Shard(0),) + (R,) * (nw - 1), (R,), 1.0 / t,
                              (1.0 / t,) + (1.0,) * (nw - 1)))
    return found


@rule("cross_entropy")
def cross_entropy_rule(op: LayerOp, graph: LayerGraph, t: int) -> list[Strategy]:
    found = _data_split(op, graph, t)
    b, s, vocab = graph.values[op.inputs[0]].shape
    if vocab % t == 0:
        # Vocabulary-parallel cross-entropy: all-reduce the row max, the sum of exponentials
        # and the target logit (three fp32 [b, s] buffers); the loss comes out replicated.
        row = 4.0 * b * s
        found.append(Strategy("vocab", (Shard(2),), R, (), (Shard(2),), 1.0 / t, (),
                              (("all_reduce", row, "fwd"), ("all_reduce", row, "fwd"),
                               ("all_reduce", row, "fwd"))))
    return found

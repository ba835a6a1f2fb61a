"""Collectives by the alpha-beta model, over the topology level they cross.

Notation: n ranks in the group, S = nbytes, alpha = link.latency_s (one step's start-up),
beta = link.bandwidth (bytes/s per GPU, one direction). S is always the size of the whole
(unsharded) tensor: the all-reduce buffer, the all-gather output, the reduce-scatter input,
the bytes one rank sends in an all-to-all (its own block included), the message of a send.

    all_reduce      ring    2(n-1) alpha  + 2(n-1)/n S/beta
                    tree    2 ceil(log2 n) alpha + 2 S/beta      (pipelined double binary tree)
                    direct  2 alpha       + 2(n-1)/n S/beta      (two-shot: every peer at once)
    reduce_scatter  ring    (n-1) alpha   + (n-1)/n S/beta
    all_gather      tree    ceil(log2 n) alpha + (n-1)/n S/beta  (recursive halving/doubling)
                    direct  alpha         + (n-1)/n S/beta
    all_to_all      ring    (n-1) alpha   + (n-1)/n S/beta       (n-1 pairwise rounds)
                    direct  alpha         + (n-1)/n S/beta
    send_recv       direct  alpha         + S/beta               (ring and tree: the same)

"auto" picks what NCCL would: the faster of ring and tree for all-reduce, ring for
reduce-scatter and all-gather, direct for all-to-all and send/recv. (Direct all-reduce,
all-gather and reduce-scatter are available on request; their contention on a switch is
not modelled, so auto does not choose them.)

Across nodes a group is L ranks per node on N nodes (L = gpus_per_node when the group is
larger than a node; L = 1 for a group placed one rank per node). Each rank has its own NIC
rail, so the inter-node phases run on every rail at once, and phases run one after another:

    all_reduce      = reduce_scatter_intra(S, L) + all_reduce_inter(S/L, N) + all_gather_intra(S, L)
    reduce_scatter  = reduce_scatter_intra(S, L) + reduce_scatter_inter(S/L, N)
    all_gather      = all_gather_inter(S/L, N)  + all_gather_intra(S, L)
    all_to_all      = all_to_all_intra((L-1)/(n-1) of the traffic) + all_to_all_inter(the rest)
    send_recv       = over the inter-node link

(For all-to-all the intra and inter parts could overlap; summing them is the conservative
choice, and the NIC part dominates.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from cherenkov.hw.spec import ClusterSpec, LinkSpec

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
ALGORITHMS = ("ring", "tree", "direct")
AUTO = {"all_reduce": ("ring", "tree"), "all_gather": ("ring",),
        "reduce_scatter": ("ring",), "all_to_all": ("direct",), "send_recv": ("direct",)}


def _steps_and_volume(kind: str, algorithm: str, n: int) -> tuple[float, float]:
    """(number of alpha terms, multiple of S/beta) for a flat collective of n ranks."""
    log_n = math.ceil(math.log2(n))
    frac = (n - 1) / n
    table = {
        ("all_reduce", "ring"): (2 * (n - 1), 2 * frac),
        ("all_reduce", "tree"): (2 * log_n, 2.0),
        ("all_reduce", "direct"): (2, 2 * frac),
        ("reduce_scatter", "ring"): (n - 1, frac),
        ("reduce_scatter", "tree"): (log_n, frac),
        ("reduce_scatter", "direct"): (1, frac),
        ("all_to_all", "ring"): (n - 1, frac),
        ("all_to_all", "tree"): (n - 1, frac),      # no tree all-to-all: pairwise rounds
        ("all_to_all", "direct"): (1, frac),
        ("send_recv", "ring"): (1, 1.0),
        ("send_recv", "tree"): (1, 1.0),
        ("send_recv", "direct"): (1, 1.0),
    }
    mirror = {"all_gather": "reduce_scatter"}     # all-gather mirrors reduce-scatter
    return table[(mirror.get(kind, kind), algorithm)]


def _check(kind: str, algorithm: str, nbytes: float, group_size: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown collective kind {kind!r}; known: {KINDS}")
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: auto, {ALGORITHMS}")
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be a non-negative number, got {nbytes!r}")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")


def flat_time(kind: str, nbytes: float, n: int, link: LinkSpec, algorithm: str) -> float:
    """Seconds for one collective of n ranks over one link level, by one named algorithm."""
    _check(kind, algorithm, nbytes, n)
    if n == 1 or algorithm == "auto":
        return 0.0 if n == 1 else min(flat_time(kind, nbytes, n, link, a) for a in AUTO[kind])
    steps, volume = _steps_and_volume(kind, algorithm, n)
    return steps * link.latency_s + volume * nbytes / link.bandwidth


def best_algorithm(kind: str, nbytes: float, n: int, link: LinkSpec) -> str:
    """The algorithm "auto" picks for this collective on this link."""
    return min(AUTO[kind], key=lambda a: flat_time(kind, nbytes, n, link, a))


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of a (possibly hierarchical) collective: a flat collective on one level."""
    kind: str
    link: str
    group_size: int
    nbytes: float
    algorithm: str
    time_s: float


def _layout(group_size: int, cluster: ClusterSpec, spans_nodes: bool,
            per_node: int | None) -> tuple[int, int]:
    """(L ranks per node, N nodes) of a group that spans nodes."""
    if per_node is None:
        per_node = cluster.gpus_per_node if group_size > cluster.gpus_per_node else 1
    if per_node < 1 or per_node > cluster.gpus_per_node or group_size % per_node:
        raise ValueError(f"group_size {group_size} cannot be laid out {per_node} per node "
                         f"on {cluster.name} ({cluster.gpus_per_node} GPUs per node)")
    nodes = group_size // per_node
    if nodes < 2:
        raise ValueError(f"group_size {group_size} laid out {per_node} per node fits one node, "
                         f"but the collective was said to span nodes")
    if nodes > cluster.nodes:
        raise ValueError(f"group_size {group_size} needs {nodes} nodes; {cluster.name} has "
                         f"{cluster.nodes}")
    return per_node, nodes


def collective_phases(kind: str, nbytes: float, group_size: int, cluster: ClusterSpec,
                      spans_nodes: bool = False, algorithm: str = "auto",
                      per_node: int | None = None) -> list[Phase]:
    """The flat collectives a collective decomposes into on this cluster, in order."""
    _check(kind, algorithm, nbytes, group_size)
    level = cluster.level_for(group_size, spans_nodes)   # validates the group against the cluster

    def phase(k, size, n, link, algo):
        algo = best_algorithm(k, size, n, link) if algo == "auto" else algo
        return Phase(k, link.name, n, size, algo, flat_time(k, size, n, link, algo))

    if group_size == 1:
        return []
    if level is cluster.intra:
        return [phase(kind, nbytes, group_size, level, algorithm)]
    if kind == "send_recv":
        return [phase(kind, nbytes, 2, cluster.inter, algorithm)]
    local, nodes = _layout(group_size, cluster, spans_nodes, per_node)
    intra, inter = cluster.intra, cluster.inter
    # Inside a node the ring is what NCCL runs for the reduce-scatter/all-gather halves.
    intra_algo = "ring" if algorithm == "auto" else algorithm
    phases = []
    if kind == "all_reduce":
        phases = [phase("reduce_scatter", nbytes, local, intra, intra_algo),
                  phase("all_reduce", nbytes / local, nodes, inter, algorithm),
                  phase("all_gather", nbytes, local, intra, intra_algo)]
    elif kind == "reduce_scatter":
        phases = [phase("reduce_scatter", nbytes, local, intra, intra_algo),
                  phase("reduce_scatter", nbytes / local, nodes, inter, algorithm)]
    elif kind == "all_gather":
        phases = [phase("all_gather", nbytes / local, nodes, inter, algorithm),
                  phase("all_gather", nbytes, local, intra, intra_algo)]
    elif kind == "all_to_all":
        # Of the n-1 blocks a rank sends, L-1 stay in the node and n-L cross the NIC.
        # Each phase's formula moves (m-1)/m of its S, so S is scaled to move exactly that.
        block = nbytes / group_size
        phases = [phase("all_to_all", block * local, local, intra, algorithm),
                  phase("all_to_all", block * (group_size - local) * nodes / (nodes - 1),
                        nodes, inter, algorithm)]
    return [p for p in phases if p.group_size > 1]


def collective_time(kind: str, nbytes: float, group_size: int, cluster: ClusterSpec,
                    spans_nodes: bool = False, algorithm: str = "auto",
                    per_node: int | None = None) -> float:
    """Predicted seconds for one collective: alpha-beta, hierarchical when it spans nodes."""
    phases = collective_phases(kind, nbytes, group_size, cluster, spans_nodes, algorithm,
                               per_node)
    return sum(p.time_s for p in phases)

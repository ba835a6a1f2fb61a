"""Lay a named device mesh over a cluster: which axis rides NVLink, which crosses the fabric.

Ranks are numbered node-major (rank = node * gpus_per_node + local). Mesh axes are listed
outermost first, so the last axis is contiguous: with `pp, dp, cp, tp` the tensor-parallel
group is consecutive GPUs of one node, and the outer axes stride across nodes. An axis group
of `size` members `stride` ranks apart stays in a node when `stride * size <= gpus_per_node`;
otherwise it spans nodes (hierarchically when several members share a node).

    >>> m = layout(cluster("4x8xH100"), pp=2, dp=2, cp=1, tp=8)
    >>> print(m)
    mesh(pp=2, dp=2, cp=1, tp=8) on 4x8xH100-ib400: tp 8 in-node, dp 2 across nodes ...
"""
from __future__ import annotations

from dataclasses import dataclass

from cherenkov.ir.placement import Mesh

AXIS_ORDER = ("pp", "dp", "cp", "tp")  # outermost first


@dataclass(frozen=True)
class MeshAxis:
    name: str
    size: int
    stride: int          # distance in ranks between neighbours of one group
    spans_nodes: bool    # the group crosses the inter-node fabric
    per_node: int        # members of one group that share a node

    @property
    def level(self) -> str:
        """The topology level this axis's collectives run on: "intra" or "inter"."""
        return "inter" if self.spans_nodes else "intra"


@dataclass(frozen=True)
class ClusterMesh:
    mesh: Mesh
    axes: tuple[MeshAxis, ...]
    cluster: object  # cherenkov.hw.ClusterSpec

    def axis(self, name: str) -> MeshAxis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(f"no mesh axis {name!r}; axes are {[a.name for a in self.axes]}")

    def __str__(self) -> str:
        parts = []
        for a in reversed(self.axes):
            if a.size == 1:
                continue
            where = "in-node" if not a.spans_nodes else (
                "across nodes" if a.per_node == 1 else f"across nodes ({a.per_node}/node)")
            parts.append(f"{a.name} {a.size} {where}")
        return f"{self.mesh} on {self.cluster}: " + (", ".join(parts) or "single device")


def layout(cluster, pp: int = 1, dp: int = 1, cp: int = 1, tp: int = 1) -> ClusterMesh:
    """The mesh (pp, dp, cp, tp) over `cluster`; the product of sizes must be its world size."""
    sizes = {"pp": pp, "dp": dp, "cp": cp, "tp": tp}
    world = pp * dp * cp * tp
    if world != cluster.world_size:
        raise ValueError(f"pp*dp*cp*tp = {pp}*{dp}*{cp}*{tp} = {world}, but the cluster "
                         f"{cluster} has {cluster.world_size} GPUs")
    gpn = cluster.gpus_per_node
    axes, stride = [], 1
    for name in reversed(AXIS_ORDER):
        size = sizes[name]
        spans = size > 1 and stride * size > gpn
        per_node = max(1, min(size, gpn // stride)) if spans else size
        axes.append(MeshAxis(name, size, stride, spans, per_node))
        stride *= size
    axes.reverse()
    return ClusterMesh(Mesh(tuple((a.name, a.size) for a in axes)), tuple(axes), cluster)

"""Redistribution between placements on one mesh axis, lowered to collectives with a cost.

    src \\ dst   R             S(d)              P
    R           -             local slice       - (keep; zeros elsewhere)
    S(e)        all_gather    all_to_all (e!=d) all_gather
    P           all_reduce    reduce_scatter    -

`nbytes` is always the size of the whole logical tensor (as in nccl-tests' "size").
Times come from a costs object (`cherenkov.planner.costs.ClusterCosts`, which asks
`cherenkov.cost.collective_time`); this module only decides which collective.
"""
from __future__ import annotations

from dataclasses import dataclass

from cherenkov.ir.placement import Partial, Placement, Replicate, Shard


@dataclass(frozen=True, slots=True)
class Collective:
    kind: str        # all_reduce | all_gather | reduce_scatter | all_to_all | send_recv
    nbytes: float    # whole logical buffer
    axis: str        # mesh axis name
    seconds: float

    def __str__(self) -> str:
        return f"{self.kind}({self.axis}) {_fmt_bytes(self.nbytes)} {self.seconds * 1e3:.3f} ms"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0


def collective_kind(src: Placement, dst: Placement) -> str | None:
    """The collective that turns `src` into `dst` on one axis, or None if it is local."""
    if src == dst or isinstance(src, Replicate):
        return None
    if isinstance(src, Shard):
        if isinstance(dst, Shard):
            return "all_to_all"
        return "all_gather"
    if isinstance(src, Partial):
        if isinstance(dst, Replicate):
            return "all_reduce"
        if isinstance(dst, Shard):
            return "reduce_scatter"
        return None if dst == src else "all_reduce"
    raise TypeError(f"not a placement: {src!r}")


def redistribute(src: Placement, dst: Placement, nbytes: float, axis, costs) -> Collective | None:
    """The collective that redistributes a value from `src` to `dst` over `axis` (a MeshAxis),
    timed by `costs.collective(kind, nbytes, group_size, spans_nodes, per_node)`, or None if local."""
    kind = collective_kind(src, dst)
    if kind is None or axis.size == 1:
        return None
    return Collective(kind, nbytes, axis.name,
                      costs.collective(kind, nbytes, axis.size, axis.spans_nodes, axis.per_node))

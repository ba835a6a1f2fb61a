"""The planner's view of the cost model: kernel and collective times on one cluster.

A thin adapter over `cherenkov.cost.kernel_time` / `collective_time` (the one cost model of
the project), bound to a cluster and a dtype, with a cache because the planner asks the same
question many times. Tests may pass any object with the same two methods.
"""
from __future__ import annotations

from functools import lru_cache


class ClusterCosts:
    def __init__(self, cluster, dtype: str = "bf16"):
        self.cluster = cluster
        self.device = cluster.device
        self.dtype = dtype
        self._kernel = lru_cache(maxsize=None)(self._kernel_uncached)
        self._coll = lru_cache(maxsize=None)(self._collective_uncached)

    def kernel(self, flops: float, nbytes: float, tensor_core: bool) -> float:
        return self._kernel(float(flops), float(nbytes), bool(tensor_core))

    def collective(self, kind: str, nbytes: float, group_size: int, spans_nodes: bool,
                   per_node: int | None = None) -> float:
        if group_size <= 1 or nbytes <= 0:
            return 0.0
        per_node = per_node if spans_nodes else None
        return self._coll(kind, float(nbytes), int(group_size), bool(spans_nodes), per_node)

    def _kernel_uncached(self, flops, nbytes, tensor_core):
        return float(kernel_time(self.device, flops, nbytes, self.dtype, tensor_core))

    def _collective_uncached(self, kind, nbytes, group_size, spans_nodes, per_node):
        return float(collective_time(kind, nbytes, group_size, self.cluster,
                                     spans_nodes=spans_nodes, per_node=per_node))


try:
    from cherenkov.cost import collective_time, kernel_time
except ImportError:  # the package's __init__ may not re-export them yet
    from cherenkov.cost.collectives import collective_time
    from cherenkov.cost.roofline import kernel_time

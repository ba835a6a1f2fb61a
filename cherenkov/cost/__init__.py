"""Cherenkov's one cost model: FLOPs, bytes and predicted time for kernels and collectives.

Every pass that weighs a choice (fuse or not, which block size, which sharding, which
collective) asks here, with a DeviceSpec or ClusterSpec from `cherenkov.hw`:

    >>> from cherenkov import hw, cost
    >>> h200 = hw.device("h200")
    >>> t = cost.kernel_time(h200, flops=0, bytes_moved=3 * 2**28)   # a bf16 32768x4096 add
    >>> round(t * 1e6, 1)                                             # at our card's 4.22 TB/s
    194.8
    >>> round(cost.collective_time("all_reduce", 2**30, 8, hw.cluster("8xH200")) * 1e3, 3)
    4.218

The formulas live in `roofline.py` (kernels) and `collectives.py` (alpha-beta), each
documented there; `ops.py` counts FLOPs and bytes of common kernels; `report.py` prints a
per-kernel report with measured times beside the predictions.
"""
from __future__ import annotations

from cherenkov.cost.collectives import (ALGORITHMS, KINDS, Phase, best_algorithm,
                                        collective_phases, collective_time, flat_time)
from cherenkov.cost.ops import (collective_cost, itemsize, kernel_cost, matmul_cost,
                                pointwise_cost, reduction_cost)
from cherenkov.cost.record import Cost
from cherenkov.cost.report import CostReport, ReportLine
from cherenkov.cost.roofline import Roofline, kernel_time, ridge_intensity, roofline

__all__ = [
    "kernel_time", "roofline", "Roofline", "ridge_intensity",
    "collective_time", "collective_phases", "flat_time", "best_algorithm", "Phase",
    "KINDS", "ALGORITHMS",
    "Cost", "kernel_cost", "matmul_cost", "pointwise_cost", "reduction_cost",
    "collective_cost", "itemsize", "CostReport", "ReportLine",
]

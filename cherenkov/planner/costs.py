"""The planner's view of the cost model: kernel and collective times on one cluster.

A thin adapter over `cherenkov.cost.kernel_time` / `collective_time` (the one cost model of
the project), bound to a cluster and a dtype, with a cache because the planner asks the same
question many times. Tests may pass any object with the same two methods
(`kernel(flops, nbytes, tensor_core, kind="")`, `collective(...)`).

Kernels run at the device's *achievable* rates, never at the datasheet peak:

  - measured figures when the device record has them (`DeviceSpec.achievable_flops` /
    `achievable_bandwidth`, e.g. the H200 preset: 780 TFLOP/s bf16 matmul, 4.22 TB/s copy);
  - otherwise the datasheet peak times the fraction our own card measures of its datasheet
    (`MATMUL_EFFICIENCY`, `BANDWIDTH_EFFICIENCY` below), since the hw package defines no
    typical fraction of its own.

Memory-bound kernels (norms, elementwise, cross-entropy, the optimizer) do not run at copy
bandwidth either: they are charged at `MEMORY_BOUND_EFFICIENCY` of it, the fraction fused
kernels reach in our H200 memory suite.

Flash attention does not run at the matmul rate: its FLOPs are charged at
`flash_attention_efficiency(head_dim)` of the achievable matmul rate, a fraction measured
for PyTorch's SDPA flash kernel (the kernel `torch.compile` training calls) on our H200.

    >>> from cherenkov.hw import cluster
    >>> c = ClusterCosts(cluster("8xH100"))
    >>> round(c.matmul_rate / 1e12), round(c.bandwidth / 1e12, 2)   # 0.79 x 989.5, 0.88 x 3.35
    (780, 2.95)
"""
from __future__ import annotations

from functools import lru_cache

from cherenkov.hw.spec import FLOP_KEYS
from cherenkov.parallel.layer_graph import causal_tile_overhead

# Fraction of the datasheet dense tensor-core rate a large bf16 matmul reaches: our H200
# measures 780 TFLOP/s on an 8192^3 torch.mm against a 989.5 TFLOP/s datasheet (H200 preset,
# bench/results/2026-11-29_probe_h200.json), 0.79; applied to presets with no measured rate.
MATMUL_EFFICIENCY = 780e12 / 989.5e12
# Fraction of the datasheet HBM bandwidth a device-to-device copy reaches (bytes read +
# written): our H200 copies at 4.22 TB/s of a 4.8 TB/s datasheet, 0.88 (same probe).
BANDWIDTH_EFFICIENCY = 4.22e12 / 4.8e12
# Fused memory-bound kernels (no tensor cores) as a fraction of the copy bandwidth: the geomean
# over the 16 rows (8 ops, forward and forward+backward) of torch.compile's kernels in our H200
# memory suite, 0.661 (bench/results/2026-11-29_memory_h200.json, commit 48bb680: from 0.35 for
# cross-entropy forward to 1.0 for SwiGLU). Its fused AdamW measured 1.39 ms for 163M params,
# 0.78 of copy (bench/results/2026-11-29_profile_train_gpt2_h200_887c1f2.md).
MEMORY_BOUND_EFFICIENCY = 0.661
# Causal flash attention (fwd + bwd, FLOPs of the unmasked half, bwd = 2.5x fwd) as a fraction
# of the achievable matmul rate, by head dimension: PyTorch SDPA flash on our H200 reached
# 235 TFLOP/s at D=64 and 268 TFLOP/s at D=128 against 780 TFLOP/s for a large matmul
# (bench/results/2026-11-29_attention_h200_wip.md, rows "causal D64" and "causal", sdpa_flash).
# The FlashAttention-2 kernels issue Ampere-style mma.sync and do softmax between the two
# matmuls without overlap, hence a third of the matmul rate on Hopper.
# The bench counts the causal half only; the kernel also computes the masked half of the
# diagonal tiles (x causal_tile_overhead(4096) = 1.03 at the bench's S=4096), and the planner
# charges executed FLOPs, so the rates are scaled up by that factor.
FLASH_ATTENTION_EFFICIENCY = {64: 235e12 * causal_tile_overhead(4096) / 780e12,
                              128: 268e12 * causal_tile_overhead(4096) / 780e12}


def flash_attention_efficiency(head_dim: int) -> float:
    """The measured fraction for the nearest measured head dimension (ties go to the larger)."""
    dims = sorted(FLASH_ATTENTION_EFFICIENCY)
    best = min(dims, key=lambda d: (abs(d - head_dim), -d))
    return FLASH_ATTENTION_EFFICIENCY[best]


def achievable_device(device):
    """The device with every rate it has no measurement for set to the typical achievable
    fraction of its datasheet figure; measured figures are kept as they are."""
    measured = dict(device.measured_flops)
    for key, peak in device.peak_flops.items():
        dtype = key.rsplit("_", 1)[0]
        # a matmul runs on the tensor rate, or on the vector rate of a dtype without one (a
        # CPU): either is derated (an un-derated vector rate gave a CPU plan MFU above 100%)
        matmul_rate = key.endswith("_tensor") or f"{dtype}_tensor" not in device.peak_flops
        if matmul_rate and key not in measured:
            measured[key] = peak * MATMUL_EFFICIENCY
    bandwidth = device.measured_copy_bandwidth or device.memory_bandwidth * BANDWIDTH_EFFICIENCY
    return device.replace(measured_flops=measured, measured_copy_bandwidth=bandwidth)


class ClusterCosts:
    def __init__(self, cluster, dtype: str = "bf16", head_dim: int = 128):
        self.cluster = cluster
        self.device = achievable_device(cluster.device)
        self.dtype = dtype
        eff = flash_attention_efficiency(head_dim)
        attn_rates = {k: v * eff for k, v in self.device.measured_flops.items() if k in FLOP_KEYS}
        self.attention_device = self.device.replace(measured_flops=attn_rates)
        self.memory_device = self.device.replace(
            measured_copy_bandwidth=self.device.achievable_bandwidth * MEMORY_BOUND_EFFICIENCY)
        self._kernel = lru_cache(maxsize=None)(self._kernel_uncached)
        self._coll = lru_cache(maxsize=None)(self._collective_uncached)

    @property
    def matmul_rate(self) -> float:
        return self.device.achievable_flops(self.dtype, True)

    @property
    def bandwidth(self) -> float:
        return self.device.achievable_bandwidth

    def kernel(self, flops: float, nbytes: float, tensor_core: bool, kind: str = "") -> float:
        """Seconds of one kernel; `kind == "attention"` runs at the flash-attention rate."""
        return self._kernel(float(flops), float(nbytes), bool(tensor_core), kind == "attention")

    def collective(self, kind: str, nbytes: float, group_size: int, spans_nodes: bool,
                   per_node: int | None = None) -> float:
        if group_size <= 1 or nbytes <= 0:
            return 0.0
        per_node = per_node if spans_nodes else None
        return self._coll(kind, float(nbytes), int(group_size), bool(spans_nodes), per_node)

    def _kernel_uncached(self, flops, nbytes, tensor_core, attention):
        dev = self.attention_device if attention else self.device if tensor_core \
            else self.memory_device
        return float(kernel_time(dev, flops, nbytes, self.dtype, tensor_core))

    def _collective_uncached(self, kind, nbytes, group_size, spans_nodes, per_node):
        return float(collective_time(kind, nbytes, group_size, self.cluster,
                                     spans_nodes=spans_nodes, per_node=per_node))


try:
    from cherenkov.cost import collective_time, kernel_time
except ImportError:  # the package's __init__ may not re-export them yet
    from cherenkov.cost.collectives import collective_time
    from cherenkov.cost.roofline import kernel_time

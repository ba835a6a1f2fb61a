"""Memory accounting per device: weights, gradients, Adam states, activations, buffers.

Mixed-precision Adam as in the ZeRO paper (Rajbhandari et al., 2020): per parameter 2 bytes of
bf16 weights, 2 bytes of bf16 gradients and 12 bytes of optimizer state (fp32 master copy, m
and v). ZeRO stage k shards over the data-parallel group of size `n`:

    stage   weights   grads   optimizer         per parameter
      0        2        2        12              16
      1        2        2        12/n            4 + 12/n
      2        2        2/n      12/n            2 + 14/n
      3        2/n      2/n      12/n            16/n      (+ gathered layers in buffers)

Activations are the bytes each op saves for backward (`LayerSolution.saved_bytes`): all of
them without recompute; without the outputs of cheap ops (norms, activation functions) with
selective recompute; only each layer's input with full recompute, plus one layer's full set
while that layer is recomputed. Dropout masks and allocator fragmentation are not counted.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2.0, 2.0, 12.0


@dataclass(frozen=True)
class MemoryBreakdown:
    weights: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.buffers

    def as_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def state_bytes(zero_stage: int, group: int) -> tuple[float, float, float]:
    """(weight, grad, optimizer) bytes per parameter on one device under ZeRO `zero_stage`."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {zero_stage}")
    return (WEIGHT_BYTES / (group if zero_stage >= 3 else 1),
            GRAD_BYTES / (group if zero_stage >= 2 else 1),
            OPTIMIZER_BYTES / (group if zero_stage >= 1 else 1))


def state_bytes_per_param(zero_stage: int, group: int) -> float:
    return sum(state_bytes(zero_stage, group))


def activation_bytes(saved: dict, layers: int, inflight: float, recompute: str) -> float:
    """Saved activations of `layers` layers for `inflight` microbatches (saved: mode -> bytes)."""
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be none/selective/full, got {recompute!r}")
    kept = layers * inflight * saved[recompute]
    if recompute == "full" and layers:
        kept += saved["none"]  # the layer being recomputed holds its full set
    return kept


def device_memory(params: float, zero_stage: int, group: int, activations: float,
                  buffers: float = 0.0) -> MemoryBreakdown:
    """Memory of one device holding `params` parameters (after tensor/pipeline splitting)."""
    w, g, o = state_bytes(zero_stage, group)
    return MemoryBreakdown(params * w, params * g, params * o, activations, buffers)

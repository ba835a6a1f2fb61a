"""The roofline: how long one kernel takes on one device.

    compute_s = flops / rate(dtype, unit)          rate: measured FLOP/s if probed, else peak
    memory_s  = bytes_moved / bandwidth            bandwidth: measured copy bandwidth if probed,
                                                   else the datasheet peak
    time_s    = max(compute_s, memory_s) + launch_overhead_s

`bytes_moved` counts bytes read from plus bytes written to device memory (HBM), the same way
the probe counts a copy (N bytes copied = 2N moved), so a kernel that moves as much as a copy
is predicted to take as long. A kernel is memory-bound when memory_s > compute_s, i.e. when
its arithmetic intensity flops/bytes is below the ridge rate/bandwidth.

Example: adding two 32768x4096 bf16 tensors on an H200 moves 3 x 268,435,456 bytes; at the
4.22 TB/s our card copies that is 190.8 us, plus 4 us launch overhead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cherenkov.hw.spec import DeviceSpec


@dataclass(frozen=True, slots=True)
class Roofline:
    """The pieces of one roofline prediction, in seconds."""
    compute_s: float
    memory_s: float
    launch_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.launch_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"


def _check(name: str, value: float) -> None:
    if not value >= 0:   # also rejects NaN
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")


def roofline(device: DeviceSpec, flops: float, bytes_moved: float,
             dtype: Any = torch.float32, tensor_core: bool = False) -> Roofline:
    """The roofline's compute, memory and launch parts for one kernel."""
    _check("flops", flops)
    _check("bytes_moved", bytes_moved)
    compute_s = flops / device.achievable_flops(dtype, tensor_core) if flops else 0.0
    memory_s = bytes_moved / device.achievable_bandwidth
    return Roofline(compute_s, memory_s, device.launch_overhead_s)


def kernel_time(device: DeviceSpec, flops: float, bytes_moved: float,
                dtype: Any = torch.float32, tensor_core: bool = False) -> float:
    """Predicted seconds for one kernel: max(compute, memory) + launch overhead."""
    return roofline(device, flops, bytes_moved, dtype, tensor_core).time_s


def ridge_intensity(device: DeviceSpec, dtype: Any = torch.float32,
                    tensor_core: bool = False) -> float:
    """FLOPs per byte above which a kernel is compute-bound on this device."""
    return device.achievable_flops(dtype, tensor_core) / device.achievable_bandwidth

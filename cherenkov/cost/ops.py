"""Costs of common kernels, computed the same way for every pass that asks.

Bytes are the minimum traffic: every input read once from device memory and every output
written once (what a well-tiled or fused kernel approaches; on-chip reuse is free).

    matmul  C[m,n] = A[m,k] @ B[k,n]   flops = 2 m n k          bytes = (m k + k n) s_in + m n s_out
    pointwise over numel elements      flops = f numel          bytes = (inputs + outputs) numel s
    reduction of [rows, cols] -> rows  flops = rows cols        bytes = rows cols s + rows s_out

(times `batch` for batched matmuls; s = bytes per element of the dtype).
"""
from __future__ import annotations

from typing import Any

import torch

from cherenkov.cost.collectives import collective_time
from cherenkov.cost.record import Cost
from cherenkov.cost.roofline import kernel_time
from cherenkov.hw.spec import ClusterSpec, DeviceSpec, dtype_format

_FORMAT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def itemsize(dtype: Any) -> int:
    """Bytes per element of a torch.dtype or a name such as "bf16"."""
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    return _FORMAT_BYTES[dtype_format(dtype)]


def kernel_cost(device: DeviceSpec, flops: float, bytes_moved: float,
                dtype: Any = torch.float32, tensor_core: bool = False) -> Cost:
    """Cost of one kernel by the roofline (see cost/roofline.py)."""
    return Cost(flops, bytes_moved, kernel_time(device, flops, bytes_moved, dtype, tensor_core))


def matmul_cost(device: DeviceSpec, m: int, n: int, k: int, dtype: Any = torch.bfloat16,
                batch: int = 1, out_dtype: Any = None, tensor_core: bool = True) -> Cost:
    """Cost of C[batch, m, n] = A[batch, m, k] @ B[batch, k, n] on tensor cores."""
    s_in = itemsize(dtype)
    s_out = itemsize(out_dtype if out_dtype is not None else dtype)
    flops = 2.0 * batch * m * n * k
    bytes_moved = float(batch * ((m * k + k * n) * s_in + m * n * s_out))
    return kernel_cost(device, flops, bytes_moved, dtype, tensor_core)


def pointwise_cost(device: DeviceSpec, numel: int, dtype: Any = torch.float32,
                   inputs: int = 1, outputs: int = 1, flops_per_element: float = 1.0) -> Cost:
    """Cost of an elementwise kernel reading `inputs` and writing `outputs` tensors of numel."""
    bytes_moved = float((inputs + outputs) * numel * itemsize(dtype))
    return kernel_cost(device, flops_per_element * numel, bytes_moved, dtype)


def reduction_cost(device: DeviceSpec, rows: int, cols: int, dtype: Any = torch.float32,
                   out_dtype: Any = None) -> Cost:
    """Cost of reducing each row of a [rows, cols] tensor to one value."""
    s_out = itemsize(out_dtype if out_dtype is not None else dtype)
    bytes_moved = float(rows * cols * itemsize(dtype) + rows * s_out)
    return kernel_cost(device, float(rows * cols), bytes_moved, dtype)


def collective_cost(kind: str, nbytes: float, group_size: int, cluster: ClusterSpec,
                    spans_nodes: bool = False, algorithm: str = "auto") -> Cost:
    """Cost of one collective (see cost/collectives.py); bytes = nbytes, no FLOPs counted."""
    return Cost(0.0, float(nbytes),
                collective_time(kind, nbytes, group_size, cluster, spans_nodes, algorithm))

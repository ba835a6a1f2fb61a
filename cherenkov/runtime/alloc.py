"""Allocating a kernel's output buffers with little Python per call.

`torch.empty(shape, dtype=, device=)` goes through argument parsing and the dispatcher (a few
microseconds each; a GPT-2 training step allocates ~600 buffers). PyTorch exposes the raw
allocation Inductor's generated code calls (`torch._C._dynamo.guards._empty_strided_cuda`
and `_cpu`); we use it when present and `torch.empty_strided` otherwise.
"""
from __future__ import annotations

from typing import Callable

import torch


def allocator(device: torch.device) -> Callable[[tuple, tuple, torch.dtype], torch.Tensor]:
    """A function (shape, strides, dtype) -> uninitialized tensor on `device`."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    raw = None
    if device.type == "cuda":
        raw = getattr(guards, "_empty_strided_cuda", None)
        # the raw call allocates on the current device: only safe when that is `device`
        if raw is not None and device.index is not None and device.index != torch.cuda.current_device():
            raw = None
    elif device.type == "cpu":
        raw = getattr(guards, "_empty_strided_cpu", None)
    if raw is not None:
        return raw

    def fallback(shape, strides, dtype):
        return torch.empty_strided(shape, strides, dtype=dtype, device=device)
    return fallback

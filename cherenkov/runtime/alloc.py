"""Allocating a kernel's output buffers with little Python per call.

`torch.empty(shape, dtype=, device=)` goes through argument parsing and the dispatcher (a few
microseconds each; a GPT-2 training step allocates ~600 buffers). PyTorch exposes the raw
allocation Inductor's generated code calls (`torch._C._dynamo.guards._empty_strided_cuda`
and `_cpu`); we use it when present and `torch.empty_strided` otherwise.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

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


RECYCLE_MIN_BYTES = 1 << 20


def span_bytes(layout: tuple) -> int:
    """Bytes a (shape, strides, dtype) layout spans."""
    shape, strides, dtype = layout
    return dtype.itemsize * (1 + sum((s - 1) * st for s, st in zip(shape, strides)))


class _Kept(NamedTuple):
    limit: int               # storages of this layout a Recycler may keep
    nbytes: int              # bytes the layout spans
    storages: list


class Recycler:
    """CPU buffers kept between a graph's calls and handed out again once nobody holds them.

    Every large CPU allocation is fresh memory from the OS (glibc maps chunks above 32 MB,
    and smaller ones once the heap is trimmed), so a kernel writing a new 64 MB output pays a
    page fault per 4 kB page: torch.add on 4096x4096 fp32 takes 16.7 ms into a fresh tensor
    and 3.8 ms into an existing one on this project's 2-core CPU. Like the CUDA caching
    allocator, a Recycler keeps buffers: per layout (shape, strides, dtype) of at least
    RECYCLE_MIN_BYTES, up to a limit of storages (a graph sets it to its outputs of that
    layout plus one). A kept storage is reused only when its use count is 1 -- no tensor,
    view, autograd saved tensor or caller holds it, only this pool -- and the new tensor is a
    fresh TensorImpl over it (own version counter, no autograd history).
    """

    def __init__(self, empty: Callable[[tuple, tuple, torch.dtype], torch.Tensor]):
        import threading
        self.empty = empty
        self.pools: dict[tuple, _Kept] = {}
        self.lock = threading.Lock()

    def __call__(self, shape, strides, dtype) -> torch.Tensor:
        pool = self.pools.get((shape, strides, dtype))
        if pool is None:
            return self.empty(shape, strides, dtype)
        limit, nbytes, kept = pool
        use_count = torch._C._storage_Use_Count
        with self.lock:
            for storage in kept:
                # nobody else holds it, and nobody shrank it while they did (resize_(0))
                if use_count(storage._cdata) == 1 and storage.nbytes() >= nbytes:
                    return torch.empty(0, dtype=dtype).set_(storage, 0, shape, strides)
            t = self.empty(shape, strides, dtype)
            if len(kept) < limit:
                kept.append(t.untyped_storage())
            return t

    def set_limits(self, layouts: list[tuple], outputs: list[tuple]) -> None:
        """`layouts`: every allocation (shape, strides, dtype) of a call; `outputs`: those that
        are (or back) the graph's outputs. Large layouts may keep outputs-of-that-layout + 1."""
        for layout in set(layouts):
            nbytes = span_bytes(layout)
            if nbytes >= RECYCLE_MIN_BYTES and min(layout[0]) > 0:
                self.pools[layout] = _Kept(1 + outputs.count(layout), nbytes, [])

"""Max pooling whose backward keeps one byte per window: the argmax's place in its window.

`max_pool2d_with_indices` returns eager's int64 index into the input plane, and its backward
reads that index at every window holding an input element (4 per element for the ResNet
stem's 3x3 stride-2 pool: 8-byte reads from L2 were most of the backward's 262-302 us on the
H200). Here the pool is decomposed, before AOTAutograd's joint graph is partitioned, into

    values, offsets = cherenkov::max_pool_offsets(x, k, s, p, d, ceil)   # offsets int8
    indices = plane index of (o * s - p + offset's kernel position)        # aten arithmetic

so the partitioner (passes/partition.py) may save the int8 offsets and recompute the indices
in the backward, where they fuse into the gather that reads them -- and eager's indices stay
the op's value wherever anything else reads them. An offset is the argmax's row-major
position in its kernel window, taken from eager's (clamped) index; dilated pools and windows
of more than 127 elements keep eager's op.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten
MAX_OFFSETS = 127            # an int8 offset names at most this many kernel positions


def _pool(x, kernel_size, stride, padding, dilation, ceil_mode):
    op = aten.max_pool2d_with_indices if len(kernel_size) == 2 else aten.max_pool3d_with_indices
    return op.default(x, kernel_size, stride, padding, dilation, ceil_mode)


def _positions(shape, nd: int, device) -> list[torch.Tensor]:
    """Per spatial dim, the output coordinate as an int64 tensor broadcasting over `shape`."""
    out = []
    for i in range(nd):
        view = [1] * len(shape)
        view[len(shape) - nd + i] = shape[len(shape) - nd + i]
        out.append(torch.arange(shape[len(shape) - nd + i], device=device).view(view))
    return out


@torch.library.custom_op("cherenkov::max_pool_offsets", mutates_args=())
def max_pool_offsets(x: torch.Tensor, kernel_size: list[int], stride: list[int],
                     padding: list[int], dilation: list[int], ceil_mode: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(eager's max pool values, int8 row-major kernel position of each window's argmax)."""
    values, indices = _pool(x, kernel_size, stride, padding, dilation, ceil_mode)
    nd, S = len(kernel_size), x.shape[-len(kernel_size):]
    rest, offsets = indices, torch.zeros_like(indices)
    at = []
    for size in reversed(S):                 # the plane index's coordinates, last dim first
        at.append(rest % size)
        rest = rest // size
    at.reverse()
    for i, o in enumerate(_positions(indices.shape, nd, x.device)):
        offsets = offsets * kernel_size[i] + (at[i] - (o * stride[i] - padding[i])) \
            // dilation[i]
    return values, offsets.to(torch.int8)


@max_pool_offsets.register_fake
def _(x, kernel_size, stride, padding, dilation, ceil_mode):
    values, indices = _pool(x, kernel_size, stride, padding, dilation, ceil_mode)
    return values, torch.empty_like(indices, dtype=torch.int8)


def offsets_to_indices(offsets: torch.Tensor, kernel_size, input_size, stride, padding,
                       dilation) -> torch.Tensor:
    """Eager's int64 plane indices from `max_pool_offsets`' offsets (aten arithmetic)."""
    nd = len(kernel_size)
    rest = offsets.to(torch.int64)
    taps = []
    for k in reversed(kernel_size):
        taps.append(rest % k)
        rest = rest // k
    taps.reverse()
    flat = None
    for i, o in enumerate(_positions(offsets.shape, nd, offsets.device)):
        at = o * stride[i] - padding[i] + taps[i] * dilation[i]
        flat = at if flat is None else flat * input_size[i] + at
    return flat


def _listed(value, nd: int, default=None) -> list[int] | None:
    v = list(value) if isinstance(value, (list, tuple)) else [value]
    if not v:
        v = list(default) if default is not None else []
    if len(v) == 1:
        v = v * nd
    return [int(e) for e in v] if len(v) == nd else None


def max_pool_decompositions() -> dict:
    """aten.max_pool{2,3}d_with_indices -> max_pool_offsets + offsets_to_indices."""
    def two(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _decompose(2, x, kernel_size, stride, padding, dilation, ceil_mode)

    def three(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _decompose(3, x, kernel_size, stride, padding, dilation, ceil_mode)
    return {aten.max_pool2d_with_indices.default: two, aten.max_pool3d_with_indices.default: three}


def _decompose(nd, x, kernel_size, stride, padding, dilation, ceil_mode):
    """NotImplemented (eager's op stays) for dilated pools, windows past MAX_OFFSETS elements
    and parameters of an unexpected form."""
    k = _listed(kernel_size, nd)
    s = _listed(stride, nd, k) if k else None
    p, d = _listed(padding, nd), _listed(dilation, nd)
    if None in (k, s, p, d) or any(e != 1 for e in d) or math.prod(k) > MAX_OFFSETS \
            or not x.dtype.is_floating_point:
        return NotImplemented
    values, offsets = max_pool_offsets(x, k, s, p, d, bool(ceil_mode))
    return values, offsets_to_indices(offsets, k, list(x.shape[-nd:]), s, p, d)

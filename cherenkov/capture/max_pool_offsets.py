"""Max pooling whose backward keeps one byte per window and dim: the argmax's place in its
window.

`max_pool2d_with_indices` returns eager's int64 index into the input plane, and its backward
reads that index at every window holding an input element (4 per element for the ResNet
stem's 3x3 stride-2 pool). Here the pool is decomposed, before AOTAutograd's joint graph is
partitioned, into

    values, tap_h, tap_w = cherenkov::max_pool2d_taps(x, k, s, p, ceil)   # taps int8
    indices = (o_h * s - p + tap_h) * W + (o_w * s - p + tap_w)           # aten arithmetic

so the partitioner may save the int8 taps and recompute the indices in the backward, where
they fuse into the gather that reads them (multiplies and adds: a single row-major offset
would take an integer division per candidate window to split, and the backward kernel ran
2.5x slower with one), while eager's indices stay the op's value wherever anything else reads
them. A tap is the argmax's position in its window along one dim, taken from eager's (clamped)
index; dilated pools and windows wider than 127 along a dim keep eager's op.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
MAX_TAP = 127                  # an int8 tap names at most this many positions along a dim


def _pool(x, kernel_size, stride, padding, ceil_mode):
    nd = len(kernel_size)
    op = aten.max_pool2d_with_indices if nd == 2 else aten.max_pool3d_with_indices
    return op.default(x, kernel_size, stride, padding, [1] * nd, ceil_mode)


def _positions(shape, nd: int, device) -> list[torch.Tensor]:
    """Per spatial dim, the output coordinate as an int64 tensor broadcasting over `shape`."""
    out = []
    for i in range(nd):
        dim = len(shape) - nd + i
        view = [1] * len(shape)
        view[dim] = shape[dim]
        out.append(torch.arange(shape[dim], device=device).view(view))
    return out


def _taps(x, kernel_size, stride, padding, ceil_mode):
    """(values, [int8 tap per spatial dim]) from eager's max pool."""
    values, indices = _pool(x, kernel_size, stride, padding, ceil_mode)
    nd = len(kernel_size)
    rest, at = indices, []
    for size in reversed(x.shape[-nd:]):     # the plane index's coordinates, last dim first
        at.append(rest % size)
        rest = rest // size
    at.reverse()
    taps = [(at[i] - (o * stride[i] - padding[i])).to(torch.int8)
            for i, o in enumerate(_positions(indices.shape, nd, x.device))]
    return values, taps


def _fake_taps(x, kernel_size, stride, padding, ceil_mode):
    values, indices = _pool(x, kernel_size, stride, padding, ceil_mode)
    return values, [torch.empty_like(indices, dtype=torch.int8) for _ in kernel_size]


@torch.library.custom_op("cherenkov::max_pool2d_taps", mutates_args=())
def max_pool2d_taps(x: torch.Tensor, kernel_size: list[int], stride: list[int],
                    padding: list[int], ceil_mode: bool
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(eager's max pool values, the argmax's int8 position in its window along H, along W)."""
    values, taps = _taps(x, kernel_size, stride, padding, ceil_mode)
    return values, *taps


@torch.library.custom_op("cherenkov::max_pool3d_taps", mutates_args=())
def max_pool3d_taps(x: torch.Tensor, kernel_size: list[int], stride: list[int],
                    padding: list[int], ceil_mode: bool
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(eager's max pool values, the argmax's int8 position in its window along D, H, W)."""
    values, taps = _taps(x, kernel_size, stride, padding, ceil_mode)
    return values, *taps


@max_pool2d_taps.register_fake
def _(x, kernel_size, stride, padding, ceil_mode):
    values, taps = _fake_taps(x, kernel_size, stride, padding, ceil_mode)
    return values, *taps


@max_pool3d_taps.register_fake
def _(x, kernel_size, stride, padding, ceil_mode):
    values, taps = _fake_taps(x, kernel_size, stride, padding, ceil_mode)
    return values, *taps


def taps_to_indices(taps, input_size, stride, padding) -> torch.Tensor:
    """Eager's int64 plane indices from the windows' taps (aten multiplies and adds)."""
    nd = len(taps)
    flat = None
    for i, o in enumerate(_positions(taps[0].shape, nd, taps[0].device)):
        at = o * stride[i] - padding[i] + taps[i].to(torch.int64)
        flat = at if flat is None else flat * input_size[i] + at
    return flat


def _listed(value, nd: int, default=None) -> list[int] | None:
    v = list(value) if isinstance(value, (list, tuple)) else [value]
    if not v:
        v = list(default) if default is not None else []
    if len(v) == 1:
        v = v * nd
    return [int(e) for e in v] if len(v) == nd else None


def _decompose(nd, x, kernel_size, stride, padding, dilation, ceil_mode):
    """NotImplemented (eager's op stays) for dilated pools, windows wider than MAX_TAP and
    parameters of an unexpected form."""
    k = _listed(kernel_size, nd)
    s = _listed(stride, nd, k) if k else None
    p, d = _listed(padding, nd), _listed(dilation, nd)
    if None in (k, s, p, d) or any(e != 1 for e in d) or max(k) > MAX_TAP \
            or not x.dtype.is_floating_point:
        return NotImplemented
    op = max_pool2d_taps if nd == 2 else max_pool3d_taps
    values, *taps = op(x, k, s, p, bool(ceil_mode))
    return values, taps_to_indices(taps, list(x.shape[-nd:]), s, p)


def max_pool_decompositions() -> dict:
    """aten.max_pool{2,3}d_with_indices -> max_pool{2,3}d_taps + taps_to_indices."""
    def two(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _decompose(2, x, kernel_size, stride, padding, dilation, ceil_mode)

    def three(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _decompose(3, x, kernel_size, stride, padding, dilation, ceil_mode)
    return {aten.max_pool2d_with_indices.default: two, aten.max_pool3d_with_indices.default: three}

"""A tiny kernel launched both ways -- Triton's `fn[grid](...)` and the compiled kernel's
launcher called directly, as runtime/triton_launch.py and attention/kernel_launch.py do --
to tell whether this Triton's launcher takes the direct call's arguments the way we pass
them. Imported only when asked (it imports triton.language)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _probe(X, Y, n, scale, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(X + offs, mask=keep, other=0.0)
    tl.store(Y + offs, x * scale + n, mask=keep)


def direct_launch_matches(device: int) -> bool:
    """Launch the probe on `device` through Triton and directly; True when both wrote the
    same bits (a pointer, an int not divisible by 16, a float and a constexpr)."""
    from .triton_launch import same_bits
    with torch.cuda.device(device):
        x = torch.arange(64, device="cuda", dtype=torch.float32) * 0.37
        # the lanes past n are not written: both outputs start alike there
        regular = torch.full_like(x, float("nan"))
        direct = torch.full_like(x, float("nan"))
        kernel = _probe[(1,)](x, regular, 37, 0.5, BLOCK=64)
        stream = torch.cuda.current_stream().cuda_stream
        kernel.run(1, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
                   x, direct, 37, 0.5, 64)
        return same_bits(direct, regular)

"""cumsum on the GPU: eager vs torch.compile vs Cherenkov's scan kernels, one process
(bench/compare_gpu.py: checks against fp64, times, writes scan_gpu.md / .json).

Cases (bf16 unless named): rows 32768 x 4096 along the last dim, the same forward+backward
(the backward is a cumsum of dy from the row's end), long rows 64 x 1M (past one tile: chunks
with a carry), columns 4096 x 32768 along dim 0, and int64 position ids from a 0/1 mask.
Bytes: read x, write y (fwd+bwd: also read dy, write dx).

    PYTHONPATH=. python3 bench/scan_gpu.py OUT_DIR
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from compare_gpu import run  # noqa: E402


def cases(dev):
    g = torch.Generator(device=dev).manual_seed(0)
    bf = dict(device=dev, dtype=torch.bfloat16, generator=g)
    rows = torch.randn(32768, 4096, **bf)
    long = torch.randn(64, 1 << 20, **bf)
    cols = torch.randn(4096, 32768, **bf)
    mask = (torch.rand(256, 8192, device=dev, generator=g) > 0.2).long()
    moved = lambda t, n=1: 2 * n * t.numel() * t.element_size()     # noqa: E731
    return [
        ("rows 32768x4096 dim -1", lambda x: x.cumsum(-1), (rows,), False, moved(rows)),
        ("rows 32768x4096 dim -1 fwd+bwd", lambda x: x.cumsum(-1), (rows,), True,
         moved(rows, 2)),
        ("long rows 64x1M dim -1", lambda x: x.cumsum(-1), (long,), False, moved(long)),
        ("columns 4096x32768 dim 0", lambda x: x.cumsum(0), (cols,), False, moved(cols)),
        ("position ids 256x8192 int64", lambda m: m.cumsum(-1) * m - 1, (mask,), False,
         moved(mask)),
    ]


if __name__ == "__main__":
    run(cases(torch.device("cuda")), sys.argv[1] if len(sys.argv) > 1 else ".", "scan_gpu")

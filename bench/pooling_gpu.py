"""Pooling on the GPU: eager vs torch.compile vs Cherenkov, one process (bench/compare_gpu.py:
checks against fp64, times, writes pooling_gpu.md / .json).

ResNet-50's pooling shapes in bf16, batch 64: the stem's max pool (3x3, stride 2, padding 1,
64x64x112x112; also channels-last), a 3x3 stride-1 average pool (64x256x56x56), the global
average pool (64x2048x7x7 -> 1x1), and the stem's training-mode BatchNorm + ReLU + max pool;
forward, and forward+backward (the gradient of the input); the stem and a pointwise ReLU
also on a channels-last input (kernels walking its memory order, passes/memory_order.py).
Bytes: read x, write y; with the backward also read dy and write dx (x's size) and read x
again (a max pool's backward needs the argmax: indices or x).

    PYTHONPATH=. python3 bench/pooling_gpu.py OUT_DIR
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from compare_gpu import run  # noqa: E402


def stem(x, w, b, mean, var):
    return F.max_pool2d(F.relu(F.batch_norm(x, mean, var, w, b, training=True)), 3, 2, 1)


def cases(dev):
    g = torch.Generator(device=dev).manual_seed(0)
    bf = dict(device=dev, dtype=torch.bfloat16, generator=g)
    x1 = torch.randn(64, 64, 112, 112, **bf)
    x1_cl = x1.to(memory_format=torch.channels_last)
    x2 = torch.randn(64, 256, 56, 56, **bf)
    x3 = torch.randn(64, 2048, 7, 7, **bf)
    params = (torch.rand(64, device=dev, generator=g) + 0.5,
              torch.randn(64, device=dev, generator=g),
              torch.zeros(64, device=dev), torch.ones(64, device=dev))
    size = lambda t: t.numel() * t.element_size()                   # noqa: E731
    pool1 = lambda x: F.max_pool2d(x, 3, 2, 1)                      # noqa: E731
    avg = lambda x: F.avg_pool2d(x, 3, 1, 1)                        # noqa: E731
    glob = lambda x: F.adaptive_avg_pool2d(x, 1)                    # noqa: E731
    out = []
    for name, fn, x, y_bytes, extra in (
            ("max_pool2d 3x3 s2 p1 64x64x112x112", pool1, x1, size(x1) // 4, ()),
            ("max_pool2d channels-last", pool1, x1_cl, size(x1) // 4, ()),
            ("avg_pool2d 3x3 s1 p1 64x256x56x56", avg, x2, size(x2), ()),
            ("adaptive_avg_pool2d 1x1 64x2048x7x7", glob, x3, size(x3) // 49, ()),
            ("BN(train) + ReLU + max_pool2d 64x64x112x112", stem, x1, size(x1) // 4, params),
            ("BN(train) + ReLU + max_pool2d channels-last", stem, x1_cl, size(x1) // 4, params),
            ("ReLU(2x + 1) channels-last", lambda x: F.relu(x * 2 + 1), x1_cl, size(x1), ())):
        out.append((name, fn, (x, *extra), False, size(x) + y_bytes))
        out.append((name + " fwd+bwd", fn, (x, *extra), True, 3 * size(x) + 2 * y_bytes))
    return out


if __name__ == "__main__":
    run(cases(torch.device("cuda")), sys.argv[1] if len(sys.argv) > 1 else ".", "pooling_gpu")

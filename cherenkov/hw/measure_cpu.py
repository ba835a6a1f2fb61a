"""Measure the host CPU in well under two seconds: cores, copy bandwidth, matmul FLOP/s,
and the cost of dispatching one tiny eager op.

Each figure is the best of a few repetitions (a shared CPU is noisy; the best run is the
closest to what the hardware can do). Bandwidth counts bytes read + bytes written.
"""
from __future__ import annotations

import os
import time

import torch

from cherenkov.hw.live import host_facts

# (copy buffer bytes, fp32 matmul n, fp64 matmul n, repetitions, tiny-op launches)
SIZES = {"normal": (64 * 2**20, 1024, 512, 5, 2000),
         "quick": (4 * 2**20, 128, 128, 3, 200)}


def _best_seconds(fn, reps: int) -> float:
    fn()  # warm-up: first touch of pages, thread pool start
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


def copy_bandwidth(nbytes: int, reps: int) -> float:
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _best_seconds(lambda: dst.copy_(src), reps)


def matmul_flops(n: int, dtype: torch.dtype, reps: int) -> float:
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / _best_seconds(lambda: torch.mm(a, b), reps)


def launch_overhead(launches: int) -> float:
    x = torch.zeros(1)
    for _ in range(10):
        x.add_(1)
    t0 = time.perf_counter()
    for _ in range(launches):
        x.add_(1)
    return (time.perf_counter() - t0) / launches


def measure(quick: bool = False) -> tuple[dict, dict]:
    """(fields to merge over the CPU preset, details for the record)."""
    copy_bytes, n32, n64, reps, launches = SIZES["quick" if quick else "normal"]
    t0 = time.perf_counter()
    bandwidth = copy_bandwidth(copy_bytes, reps)
    flops = {"fp32_vector": matmul_flops(n32, torch.float32, reps),
             "fp64_vector": matmul_flops(n64, torch.float64, reps)}
    overhead = launch_overhead(launches)
    spec = {**host_facts(), "measured_copy_bandwidth": bandwidth,
            "measured_flops": flops, "launch_overhead_s": overhead}
    details = {"cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "copy_bytes": copy_bytes, "matmul_n": {"fp32": n32, "fp64": n64},
               "repetitions": reps, "seconds": time.perf_counter() - t0}
    return spec, details

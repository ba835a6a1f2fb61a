"""Measure a live CUDA (or HIP) device: device-to-device copy bandwidth, matmul FLOP/s per
dtype, kernel-launch overhead, and how copy bandwidth changes as the working set outgrows L2.

Timing is by CUDA events: the median over repetitions after warm-up. Bandwidth counts bytes
read + bytes written (a copy of N bytes moves 2N). A full run takes a few seconds on an H200.
"""
from __future__ import annotations

import statistics
import time

import torch

from cherenkov.hw.live import cuda_facts


def _median_seconds(fn, dev, iters: int, warmup: int = 3, inner: int = 1) -> float:
    """Median seconds of one call of fn; `inner` calls per event pair for tiny kernels."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(dev)
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(times)


def _graphed(fn, repeats: int):
    """A callable that replays `repeats` calls of fn as one CUDA graph (no host launch cost
    between them), or None where graphs are unavailable."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(repeats):
                fn()
        return graph.replay
    except RuntimeError:
        return None


def copy_bandwidth(dev, nbytes: int, iters: int = 20, inner: int = 1) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty_like(src)
    seconds = _median_seconds(lambda: dst.copy_(src), dev, iters, inner=inner)
    return 2 * nbytes / seconds


def l2_curve(dev, sizes: list[int]) -> list[tuple[int, float]]:
    """[(working-set bytes = src + dst, copy bandwidth)]. Small copies are replayed from a CUDA
    graph, ~256 MiB per timing, so host launch cost does not hide the L2's speed."""
    curve = []
    for size in sizes:
        src = torch.empty(size, dtype=torch.uint8, device=dev).fill_(1)
        dst = torch.empty_like(src)
        repeats = min(200, max(1, (256 * 2**20) // size))
        copy = lambda: dst.copy_(src)  # noqa: E731
        replay = _graphed(copy, repeats)
        if replay is None:
            seconds = _median_seconds(copy, dev, iters=7, inner=repeats)
        else:
            seconds = _median_seconds(replay, dev, iters=7) / repeats
        curve.append((2 * size, 2 * size / seconds))
        del src, dst
    return curve


def l2_effect_bytes(curve: list[tuple[int, float]], hbm_bandwidth: float) -> int:
    """Largest working set still copied at >= 1.3x the HBM bandwidth (0 if none): where the L2
    stops helping."""
    fast = [ws for ws, bw in curve if bw >= 1.3 * hbm_bandwidth]
    return max(fast, default=0)


def matmul_flops(dev, n: int, dtype: torch.dtype, tf32: bool, iters: int = 10) -> float:
    # set_float32_matmul_precision is the one TF32 switch stable across torch 2.x releases.
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        a = torch.randn(n, n, device=dev).to(dtype)
        b = torch.randn(n, n, device=dev).to(dtype)
        return 2 * n**3 / _median_seconds(lambda: torch.mm(a, b), dev, iters)
    finally:
        torch.set_float32_matmul_precision(old)


def launch_overhead(dev, launches: int = 2000) -> float:
    """Seconds per tiny eager kernel when launched back to back (host dispatch bound)."""
    x = torch.zeros(1, device=dev)
    for _ in range(50):
        x.add_(1)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(launches):
        x.add_(1)
    torch.cuda.synchronize(dev)
    return (time.perf_counter() - t0) / launches


def graph_kernel_gap(dev, launches: int = 200) -> float | None:
    """Seconds per tiny kernel replayed from a CUDA graph: the device-side cost of a launch."""
    x = torch.zeros(1, device=dev)
    replay = _graphed(lambda: x.add_(1), launches)
    return None if replay is None else _median_seconds(replay, dev, iters=7) / launches


# (key in measured_flops, dtype, allow tf32, n for the normal run, n for the quick run)
MATMULS = [("bf16_tensor", torch.bfloat16, False, 8192, 2048),
           ("fp16_tensor", torch.float16, False, 8192, 2048),
           ("tf32_tensor", torch.float32, True, 8192, 2048),
           ("fp32_vector", torch.float32, False, 4096, 1024),
           ("fp64_tensor", torch.float64, False, 4096, 1024)]


def measure(dev: torch.device, quick: bool = False) -> tuple[dict, dict]:
    """(fields to merge over the device's preset, details for the record)."""
    t0 = time.perf_counter()
    torch.cuda.set_device(dev)
    facts = cuda_facts(dev)
    total = int(facts["memory_bytes"])
    big = min(2**30 if not quick else 2**27, total // 8)     # per buffer
    bandwidth = copy_bandwidth(dev, big)
    sizes = [2**p for p in range(20, 30 if not quick else 26)]   # 1 MiB .. 512 MiB per buffer
    curve = l2_curve(dev, [s for s in sizes if 2 * s <= total // 4])
    flops, matmul_n = {}, {}
    for key, dtype, tf32, n, n_quick in MATMULS:
        size = n_quick if quick else n
        try:
            flops[key] = matmul_flops(dev, size, dtype, tf32)
            matmul_n[key] = size
        except RuntimeError as e:        # a dtype this device/torch build cannot multiply
            matmul_n[key] = f"failed: {e}"
    overhead = launch_overhead(dev)
    gap = graph_kernel_gap(dev)
    torch.cuda.empty_cache()
    spec = {**facts, "measured_copy_bandwidth": bandwidth, "measured_flops": flops,
            "launch_overhead_s": overhead}
    details = {
        "copy_bytes_per_buffer": big,
        "l2_curve": [{"working_set_bytes": ws, "copy_bandwidth": bw} for ws, bw in curve],
        "l2_effect_bytes": l2_effect_bytes(curve, bandwidth),
        "l2_bytes_reported": facts.get("l2_bytes"),
        "matmul_n": matmul_n,
        "graph_kernel_gap_s": gap,
        "seconds": time.perf_counter() - t0,
    }
    return spec, details

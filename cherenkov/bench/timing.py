"""Timing: median time of a thunk after warm-up, on a CUDA device or the CPU, and the copy
bandwidth of the same device measured in the same run (the 100% every kernel is compared to).

On CUDA, `triton.testing.do_bench(..., return_mode="median")` (CUDA events, L2 flushed before
every call). Inputs small enough to sit in L2 are rotated among several copies anyway, so a
kernel never reads what the previous call left in cache.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import torch


def cuda_median_s(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    from triton.testing import do_bench
    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") / 1e3


KEEP_BUSY_S = 60e-3     # a sleep kernel this long lets the host issue a whole training step


def keep_busy(seconds: float = KEEP_BUSY_S) -> None:
    """Queue a sleep kernel of about `seconds` on the current stream (cycles at ~1.9 GHz, the
    H200's clock), so the host issues what follows before the GPU reaches it."""
    torch.cuda._sleep(int(seconds * 1.9e9))


def events_median_ms(run: Callable[[int], object], reps: int, before: str = "none") -> float:
    """Median GPU time (ms, CUDA events around each call) of `run(i)` for i < reps, the calls
    issued back to back ("none": no synchronization, as the train suite times steps), from an
    idle GPU ("sync"), or with the GPU kept busy while the host issues the call ("busy": a
    sleep kernel queued first, so what is timed is the GPU's own time, its gaps included)."""
    pairs = []
    torch.cuda.synchronize()
    for i in range(reps):
        if before != "none":
            torch.cuda.synchronize()
        if before == "busy":
            keep_busy()
        begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        run(i)
        end.record()
        pairs.append((begin, end))
    torch.cuda.synchronize()
    return statistics.median(b.elapsed_time(e) for b, e in pairs)


def cpu_median_s(fn: Callable[[], object], reps: int = 7) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def median_s(fn: Callable[[], object], device: torch.device) -> float:
    return cuda_median_s(fn) if device.type == "cuda" else cpu_median_s(fn)


def copies_for(nbytes: int, l2_bytes: float, max_copies: int = 8) -> int:
    """How many input copies to rotate so that consecutive calls never share L2: enough that
    the copies together span twice the L2, at most max_copies; one when a copy alone does."""
    if nbytes <= 0:
        return 1
    return max(1, min(max_copies, math.ceil(2 * l2_bytes / nbytes)))


def rotating(call: Callable[[tuple], object], copies: list[tuple]) -> Callable[[], object]:
    """A thunk that calls `call` on the next input copy each time."""
    state = [0]

    def thunk():
        inputs = copies[state[0] % len(copies)]
        state[0] += 1
        return call(inputs)
    return thunk


def graph_replay_median_s(call: Callable[[tuple], object], copies: list[tuple],
                          device: torch.device, capture_error_mode: str = "global",
                          fresh: Callable[[tuple], tuple] | None = None) -> float:
    """Median time per call with the calls replayed from one CUDA graph (one call per input
    copy): the GPU time of the kernels alone, without the host work of issuing them (Dynamo
    guards, AOTAutograd wrappers, the autograd engine, a runtime's Python). A forward+backward
    of a few hundred microseconds is otherwise timed at the host's pace. Raises if the calls
    cannot be captured (the caller then times them plainly). `capture_error_mode` is
    torch.cuda.graph's ("global", "thread_local", "relaxed").

    `fresh` maps an input copy to new autograd leaves over the same storage; the capture then
    runs on those. A leaf that took part in a backward before capture keeps the stream that
    backward ran on, and the engine's end-of-backward wait on that stream crosses the capture
    boundary (pytorch/pytorch#189591): the capture fails, and a failed capture leaks its
    memory pool."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):                       # warm-up outside capture (compiles, caches)
            for inputs in copies:
                call(inputs)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    captured = [fresh(inputs) for inputs in copies] if fresh is not None else copies
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
        for inputs in captured:
            call(inputs)
    graph.replay()
    torch.cuda.synchronize(device)
    seconds = cuda_median_s(graph.replay) / len(copies)
    del graph
    return seconds


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes moved per second (read + written) by a device-to-device copy of nbytes."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = median_s(lambda: dst.copy_(src), device)
    return 2 * src.numel() * src.element_size() / seconds

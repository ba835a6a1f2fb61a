"""Template or cuBLAS for one matmul and its epilogue: measured once per problem, then cached.

    choose(ep, config, spec, device) -> TileConfig | None       (None: cuBLAS + a kernel)

`matmul_templates="on"`: the template, with the hardware model's first candidate (the
interpreter's small config on CPU). `"auto"` (CUDA) with `autotune` on: the verdict cached
for this problem (the on-disk table `autotune.py` keeps, keyed by sizes, dtypes, layouts,
the epilogue's text, device and versions), timed now if not cached yet; without `autotune`,
cuBLAS -- the verdicts measure the region alone, and a whole training step ran slower with
them (below), so a compile never changes course because some earlier run left a cache.
Timing: each of `tile_config.candidates` (and, for long epilogues, a roomier 128x128 tile
and the best-ranked one running its epilogue per column half) is checked against, then
timed against, cuBLAS + the epilogue as its own kernel flat over M*N elements (as the
fusion pass would run it alone). The template is kept only where it measured faster.

What the pair leaves out: without the template the fusion pass may merge the epilogue with
other work (the next norm reading the same values), and the template's main loop is a little
slower than cuBLAS's; on the H200 every GPT-2 region measured faster as a template here
(`bench/results/2026-11-30_epilogue_probe_h200_ea16948.json`) while the whole step ran
31.4 ms against 30.6 without (`..._train_autotune_gpt2_h200_ea16948.md`; Llama 91.9 vs 90.2
at 63975ff).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time

import torch

from cherenkov.templates.autotune import CUBLAS, _store, cached, close, progress_bar
from cherenkov.templates.fused_epilogue import Epilogue, FusedMatmul, allocate, tma_ready
from cherenkov.templates.tile_config import TileConfig, candidates, interpreter_config

LIMIT = 3                   # tile configs timed per problem (plus the persistent variant)


def _layout(strides) -> str:
    return "row" if strides[1] == 1 else ("col" if strides[0] == 1 else "strided")


def problem_key(ep: Epilogue, device: torch.device) -> str:
    import triton
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return json.dumps(["epilogue", ep.M, ep.N, ep.K, str(ep.dtype), _layout(ep.a.strides),
                       _layout(ep.b.strides), ep.signature, name, torch.__version__,
                       triton.__version__])


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 2
    return torch.cuda.get_device_properties(device).multi_processor_count


def fused_call(ep: Epilogue, cfg: TileConfig, device: torch.device,
               workers: int = -1) -> FusedMatmul:
    """The fused node's callable; on CUDA its kernel starts compiling in the compile workers
    now, while the remaining passes run."""
    call = FusedMatmul(ep, cfg, device.type != "cuda", _sm_count(device))
    if device.type == "cuda":
        from cherenkov.runtime import parallel_compile
        parallel_compile.submit([call.job()], workers)
    return call


def choose(ep: Epilogue, config, spec, device: torch.device) -> TileConfig | None:
    if config.matmul_templates == "off":
        return None
    if device.type != "cuda":       # the interpreter, where it can run the template's K loop
        from cherenkov.runtime.loader import interpreter_fault
        return interpreter_config(ep.M, ep.N, ep.K) \
            if config.matmul_templates == "on" and interpreter_fault() is None else None
    if config.matmul_templates == "on":
        first = candidates(spec, 1, ep.M, ep.N, ep.K, ep.dtype.itemsize, limit=1)
        return first[0] if first else None
    if not config.autotune:
        return None
    key = problem_key(ep, device)
    found = cached(key)
    if found is None:
        start = time.perf_counter()
        found, timings = tune(ep, spec, device, config.compile_workers)
        _store(key, found)
        if config.log_fallbacks:
            print(f"[cherenkov] tuned matmul epilogue {ep.M}x{ep.K}x{ep.N}: {found} "
                  f"({timings}) in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return None if found in (None, CUBLAS) else found


def random_roots(ep: Epilogue, device: torch.device) -> list[torch.Tensor]:
    """Inputs with the roots' layouts: small normal values for floats, zeros otherwise (an
    epilogue reads them elementwise only, never as addresses)."""
    out = allocate([r.meta for r in ep.roots], device)
    for t in out:
        if t.dtype.is_floating_point:
            t.normal_(0.0, 0.5)
        else:
            t.zero_()
    return out


def tune(ep: Epilogue, spec, device: torch.device, workers: int = -1):
    """(winner, {name: ms}) of cuBLAS + the epilogue kernel and the template's candidates."""
    from triton.testing import do_bench
    roots = random_roots(ep, device)
    reference = ep.reference(roots, interpret=False)
    expected = reference()
    timings = {CUBLAS: do_bench(reference, warmup=5, rep=25, return_mode="median")}
    best, best_ms = CUBLAS, timings[CUBLAS]
    configs = candidates(spec, 1, ep.M, ep.N, ep.K, ep.dtype.itemsize, limit=LIMIT)
    # a long epilogue holds many tiles' worth of values: a smaller tile, more warps per value
    roomy = TileConfig(128, 128, 64, 8, 8, 3)
    if min(ep.M, ep.N) >= 128 and roomy not in configs:
        configs.append(roomy)
    if configs:          # or the best-ranked tile, its epilogue run per column half
        configs.append(dataclasses.replace(configs[0], epilogue_split=2))
    if configs and tma_ready(ep) and torch.cuda.get_device_capability(device)[0] >= 9:
        # Hopper's copy engine reading A and B (the persistent variant too)
        configs += [dataclasses.replace(configs[0], tma=True),
                    dataclasses.replace(configs[0], tma=True, persistent=True)]
    label = f"matmul epilogue {ep.M}x{ep.K}x{ep.N} {str(ep.dtype).removeprefix('torch.')}"
    calls = {}
    for cfg in configs:
        try:
            calls[cfg] = FusedMatmul(ep, cfg, False, _sm_count(device))
        except Exception as e:  # noqa: BLE001 -- a config the renderer refuses
            timings[str(cfg)] = f"{type(e).__name__}"
    # all candidates compile at once in the compile workers, not one by one at first launch
    from cherenkov.runtime import parallel_compile
    parallel_compile.compile_all([c.job() for c in calls.values()], workers)
    with progress_bar() as bar:
        task = bar.add_task(label, total=len(calls), now="")
        for cfg, fn in calls.items():
            bar.update(task, now=str(cfg))
            try:
                got = fn(*roots)
                if all(map(close, got, expected)):
                    ms = do_bench(lambda: fn(*roots), warmup=5, rep=25, return_mode="median")
                    timings[str(cfg)] = ms
                    if ms < best_ms:
                        best, best_ms = cfg, ms
                else:
                    timings[str(cfg)] = "wrong result"
            except Exception as e:  # noqa: BLE001 -- out of shared memory / registers
                timings[str(cfg)] = f"{type(e).__name__}"
            bar.advance(task)
    return best, timings

"""Pick, per problem, the fastest of the matmul template's tile configs and cuBLAS, once.

`tune(...)` times every candidate of `tile_config.candidates` (drawn from the hardware model)
with `triton.testing.do_bench` on the live GPU, checks each one's output against cuBLAS (a
config that computes wrong numbers is dropped, not chosen), and times the cuBLAS alternative:
torch.mm/addmm (bias folded into cuBLAS) plus, when other epilogue ops remain, the roofline
time of the one fused elementwise kernel the compiler would run after it. A rich progress bar
shows what is being timed. The winner is cached in memory and in
`<cache>/templates/autotune.json`, keyed by

    (batch, M, N, K), A/B/out dtypes, A and B layouts, the spec's tag, device name,
    torch version, triton version

so a changed driver stack or card re-tunes. On CPU nothing is timed: `tuned_config` returns
the small interpreter config.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field

import torch

from cherenkov.templates.matmul import (MatmulSpec, _as3d, cache_root, cublas_matmul, launch,
                                        _output_shape)
from cherenkov.templates.tile_config import TileConfig, candidates, interpreter_config

CUBLAS = "cublas"


@dataclass
class TuneResult:
    key: str
    best: TileConfig | str
    timings_ms: dict[str, float] = field(default_factory=dict)   # str(config) -> median ms
    rejected: dict[str, str] = field(default_factory=dict)        # str(config) -> why
    configs: dict[str, TileConfig] = field(default_factory=dict)  # str(config) -> config


def _layout(t: torch.Tensor) -> str:
    s = _as3d(t).stride()
    return "row" if s[2] == 1 else ("col" if s[1] == 1 else "strided")


def problem_key(spec: MatmulSpec, a, b, out_dtype) -> str:
    import triton
    a3, b3 = _as3d(a), _as3d(b)
    batch = max(a3.shape[0], b3.shape[0])
    name = torch.cuda.get_device_name(a.device) if a.device.type == "cuda" else "cpu"
    return json.dumps([batch, a3.shape[1], b3.shape[2], a3.shape[2], str(a.dtype), str(b.dtype),
                       str(out_dtype), _layout(a), _layout(b), spec.tag, name,
                       torch.__version__, triton.__version__])


def _cache_path():
    return cache_root() / "templates" / "autotune.json"


_MEMORY: dict[str, dict] = {}


def _load_disk() -> dict:
    try:
        return json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def store_entry(key: str, entry: dict) -> None:
    """Keep `entry` (JSON) under `key` in memory and in the on-disk table."""
    _MEMORY[key] = entry
    path = _cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    table = _load_disk()
    table[key] = entry
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    tmp.replace(path)


def cached_entry(key: str) -> dict | None:
    """The entry kept under `key` (memory first, then the on-disk table), or None."""
    entry = _MEMORY.get(key)
    if entry is None:
        entry = _load_disk().get(key)
        if entry is not None:
            _MEMORY[key] = entry
    return entry


def _store(key: str, best) -> None:
    store_entry(key, {"cublas": True} if best == CUBLAS else best.to_dict())


def cached(key: str):
    entry = cached_entry(key)
    if entry is None:
        return None
    return CUBLAS if entry.get("cublas") else TileConfig.from_dict(entry)


def _epilogue_kernel_s(spec, device, numel, out_dtype) -> float:
    """Roofline time of the fused elementwise kernel that would follow cuBLAS."""
    from cherenkov import cost
    from cherenkov.templates.epilogues import EPILOGUES, TENSOR
    rest = spec.epilogue[1:] if spec.epilogue[:1] == ("bias",) else spec.epilogue
    if not rest:
        return 0.0
    tensors = 1 + sum(EPILOGUES[n].operand == TENSOR for n in rest)
    return cost.pointwise_cost(device, numel, out_dtype, inputs=tensors, outputs=1,
                               flops_per_element=8).time_s


def _cublas_call(spec, a, b, operands, row_scale, col_scale, out_dtype):
    """torch.addmm when the epilogue starts with a bias (cuBLAS fuses it), else torch.matmul."""
    if row_scale is not None or col_scale is not None:
        return lambda: cublas_matmul(a, b, spec.epilogue, operands, row_scale, col_scale,
                                     out_dtype)
    if spec.epilogue[:1] == ("bias",) and a.dim() == 2 and b.dim() == 2:
        return lambda: torch.addmm(operands[0].to(a.dtype), a, b)
    return lambda: torch.matmul(a, b)


def close(x: torch.Tensor, ref: torch.Tensor) -> bool:
    """Same values as `ref` to a tolerance that allows another accumulation order (2% of
    the largest finite value, at least 0.02; the same non-finite places; integers nearly all
    equal)."""
    if x.dtype == torch.bool or not x.dtype.is_floating_point:
        return bool((x == ref).float().mean() > 0.999)
    xf, rf = x.float(), ref.float()
    finite = torch.isfinite(rf)
    if not torch.equal(finite, torch.isfinite(xf)):
        return False
    err = (xf - rf).abs()[finite]
    scale = max(1.0, rf.abs()[finite].max().item()) if finite.any() else 1.0
    return err.numel() == 0 or err.max().item() <= 2e-2 * scale


def progress_bar(disable: bool = False):
    """The rich progress bar tuning shows on stderr: a task's description, its bar, done/total
    and the candidate being timed (task field `now`)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("[bold]tuning[/] {task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total} {task.fields[now]}"),
                    TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True,
                    disable=disable)


def tune(spec: MatmulSpec, a, b, operands, row_scale=None, col_scale=None, out_dtype=None,
         limit: int = 8, progress: bool = True) -> TuneResult:
    """Time the candidates and cuBLAS on a's GPU; return the winner (not cached here)."""
    from triton.testing import do_bench
    from cherenkov.hw import current_device
    out_dtype = out_dtype or a.dtype
    device = current_device(a.device)
    a3, b3 = _as3d(a), _as3d(b)
    batch, m, k = max(a3.shape[0], b3.shape[0]), a3.shape[1], a3.shape[2]
    n = b3.shape[2]
    configs = candidates(device, batch, m, n, k, a.element_size(), limit=limit)
    result = TuneResult(problem_key(spec, a, b, out_dtype), CUBLAS)
    ref = cublas_matmul(a, b, spec.epilogue, operands, row_scale, col_scale, out_dtype)
    out = torch.empty(_output_shape(a, b), device=a.device, dtype=out_dtype)
    label = f"matmul {batch}x{m}x{n}x{k} {spec.tag} {str(a.dtype).removeprefix('torch.')}"
    with progress_bar(disable=not progress) as bar:
        task = bar.add_task(label, total=len(configs) + 1, now="cublas")
        cublas_fn = _cublas_call(spec, a, b, operands, row_scale, col_scale, out_dtype)
        cublas_ms = do_bench(cublas_fn, warmup=5, rep=25, return_mode="median") \
            + 1e3 * _epilogue_kernel_s(spec, device, out.numel(), out_dtype)
        result.timings_ms[CUBLAS] = cublas_ms
        bar.advance(task)
        best_ms = cublas_ms
        for cfg in configs:
            result.configs[str(cfg)] = cfg
            bar.update(task, now=str(cfg))
            try:
                fn = lambda: launch(spec, cfg, a, b, out, operands, row_scale, col_scale)  # noqa: E731
                fn()
                if not close(out, ref):
                    result.rejected[str(cfg)] = "wrong result"
                else:
                    ms = do_bench(fn, warmup=5, rep=25, return_mode="median")
                    result.timings_ms[str(cfg)] = ms
                    if ms < best_ms:
                        best_ms, result.best = ms, cfg
            except Exception as e:   # out of shared memory / registers: not a candidate
                result.rejected[str(cfg)] = f"{type(e).__name__}: {str(e)[:120]}"
            bar.advance(task)
    return result


def tuned_config(spec: MatmulSpec, a, b, operands, row_scale=None, col_scale=None,
                 out_dtype=None):
    """The cached winner for this problem, tuning it first if it is new. CPU: no timing."""
    if a.device.type == "cpu":
        return interpreter_config(a.shape[-2], b.shape[-1], a.shape[-1])
    key = problem_key(spec, a, b, out_dtype or a.dtype)
    found = cached(key)
    if found is not None:
        return found
    start = time.perf_counter()
    result = tune(spec, a, b, operands, row_scale, col_scale, out_dtype)
    _store(key, result.best)
    from cherenkov.config import current
    if current().log_fallbacks:
        print(f"[cherenkov] tuned {key}: {result.best} in {time.perf_counter() - start:.1f}s",
              file=sys.stderr)
    return result.best

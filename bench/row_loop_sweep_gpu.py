"""Row-loop kernels (`row_loops=True`) swept on the GPU: the norm backwards of the memory
suite (add + LayerNorm, add + RMSNorm, 32768 x 4096 bf16, forward + backward) compiled by
Cherenkov with each (rows per loop step XBLOCK, warps, rows per program) and without row
loops, checked against an fp32 reference and timed by CUDA-graph replay with the memory
suite's harness, in one process. Bias + GeLU rides along: row loops must leave it alone.

    PYTHONPATH=. python3 bench/row_loop_sweep_gpu.py --out $OUT
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
from pathlib import Path

import torch
import triton

import cherenkov
from cherenkov.bench.harness import Implementation, Settings, run_variant
from cherenkov.bench.suites.memory import cases
from cherenkov.codegen import blocks
from cherenkov.passes import split_reductions

# (XBLOCK rows per step, warps, rows per program); None: row loops off
VARIANTS = [None, (1, 8, 32), (2, 8, 32), (4, 8, 32), (1, 4, 32), (2, 4, 32), (1, 16, 32),
            (2, 16, 32), (2, 8, 64), (4, 8, 64), (4, 16, 64)]


def variant_impl(v) -> Implementation:
    def build(fn):
        torch._dynamo.reset()
        return cherenkov.compile(fn, strict=True, dynamic=False, row_loops=v is not None)
    return Implementation("off" if v is None else "x%d w%d ch%d" % v, build)


def patched(v):
    """Set the sweep's block choice and chunk; returns an undo."""
    chosen, chunk = blocks.row_loop_blocks, split_reductions.ROW_LOOP_CHUNK
    if v is not None:
        step, warps, rows = v
        blocks.row_loop_blocks = lambda k, interpret, device: dataclasses.replace(
            chosen(k, interpret, device), XBLOCK=step, num_warps=warps)
        split_reductions.ROW_LOOP_CHUNK = rows

    def undo():
        blocks.row_loop_blocks, split_reductions.ROW_LOOP_CHUNK = chosen, chunk
    return undo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    dev = torch.device("cuda")
    settings = Settings(device=dev, l2_bytes=torch.cuda.get_device_properties(dev).L2_cache_size)
    rows = []
    for case in cases("full"):
        if not any(s in case.name for s in ("LayerNorm", "RMSNorm", "GeLU")):
            continue
        for v in VARIANTS if "GeLU" not in case.name else [None, VARIANTS[1]]:
            undo = patched(v)
            impl = variant_impl(v)
            try:
                res = run_variant(case, "fwd+bwd", [impl], settings)
            finally:
                undo()
            r = res.impls[impl.name]
            t = r.time_s
            gbs = case.bytes["fwd+bwd"] / t / 1e9 if t else None
            rows.append({"case": case.name, "variant": impl.name, "check": bool(r.check and
                         r.check.passed), "time_us": t and t * 1e6, "GB/s": gbs,
                         "timing": r.timing, "error": r.error,
                         "kernels": [(k[0], k[2]) for k in r.kernels]})
            print(rows[-1]["case"], rows[-1]["variant"], rows[-1]["check"],
                  None if t is None else f"{t * 1e6:.1f} us {gbs:.0f} GB/s", r.error or "",
                  flush=True)
            torch.cuda.empty_cache()
    stamp = datetime.date.today().isoformat()
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    head = (f"# Row-loop sweep on {torch.cuda.get_device_name()}\n\n{stamp} · torch "
            f"{torch.__version__} · triton {triton.__version__} · commit {commit}\n\n"
            "fwd+bwd, CUDA-graph replay median; GB/s = the suite's minimal bytes / time.\n\n"
            "| case | variant (XBLOCK, warps, rows/program) | check | us | GB/s |\n"
            "|---|---|---|---|---|\n")
    body = "".join(f"| {r['case']} | {r['variant']} | {'ok' if r['check'] else 'WRONG'} | "
                   f"{r['time_us'] or 0:.1f} | {r['GB/s'] or 0:.0f} |\n" for r in rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stamp}_row_loop_sweep_{commit}.md").write_text(head + body)
    (out / f"{stamp}_row_loop_sweep_{commit}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

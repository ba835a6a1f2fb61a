"""Kernel forms swept on the GPU, on memory-suite cases compiled by Cherenkov with the blocks
it chooses overridden, checked against an fp32 reference and timed by CUDA-graph replay
with the suite's harness, in one process. Now (SWEEP): GPT-2's residual add + LayerNorm
(16384 x 768, the residual stream in fp32, the normalized rows cast to bf16 for the next
matmul), whose backward row loop ran at 3.45 TB/s in the train step (58 us x 23 a step,
profile at 891105f): rows per program (the column partials' chunk), rows per loop step
(XBLOCK), warps, pipelining. Answered before by this script at f3b4a20, da64103, 2b5c06b
and 41bf5e9 (their variants are there):

- row-loop kernels (`row_loops=True`) of the norm backwards (add + LayerNorm, add + RMSNorm,
  32768 x 4096 bf16, forward + backward): rows per loop step (XBLOCK), warps, rows per
  program, software-pipelined loads (`stages`), and row loops off. Bias + GeLU rides along:
  row loops must leave it alone.
- looped reductions (cross-entropy's logsumexp over 50304 / 128256 columns) with their loads
  software-pipelined (`stages`) or not.
- the bias-gradient column kernel's loop pipelining, warps and tiles (GPT-2's MLP shape).

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
import torch.nn.functional as F
import triton

import cherenkov
from cherenkov.bench.harness import Implementation, Settings, run_variant
from cherenkov.bench.case import Case
from cherenkov.bench.suites.memory import _randn, bias_gelu, cases
from cherenkov.passes import split_reductions

# case -> variants: (row loops on, chunk rows per program, overrides of the chosen blocks of
# row-loop kernels (or, with "looped", of looped-reduction kernels); "halves": 0 turns the
# rotate-half lane split off).
# The bias-gradient column kernel of GPT-2's MLP backward (GeLU gradient + its column sums)
# ran at 3.2 TB/s in the train step (profile at e4eb82d), with the 64 x 32 tiles the sweep at
# 2b5c06b chose: now its loop software-pipelined (`stages`, as the row loops gained from),
# with more warps and other tiles
COLUMN = [(True, 32, {})] + [
    (True, 32, {"looped": 1, "XBLOCK": x, "RBLOCK": r, "num_warps": w, "stages": st})
    for x, r, w, st in ((64, 32, 4, 2), (64, 32, 4, 3), (64, 32, 4, 4), (64, 64, 4, 3),
                        (128, 32, 4, 3), (128, 32, 8, 3), (64, 64, 8, 3), (128, 64, 8, 3),
                        (256, 16, 4, 3))]
ROWS = [(False, 32, {})] + [(True, ch, over) for ch in (8, 16, 32, 64) for over in (
    {}, {"XBLOCK": 2}, {"num_warps": 2}, {"num_warps": 8})] + [
    (True, 16, {"stages": 4}), (True, 16, {"stages": 2}), (True, 32, {"stages": 4})]
SWEEP = {"residual add + LayerNorm 16384x768": (ROWS, ("fwd+bwd",))}


def gpt2_residual_layer_norm(x, r, w, b):
    """GPT-2's pre-norm step under autocast: the fp32 residual stream plus a bf16 matmul
    output, its LayerNorm in fp32 cast to bf16 for the next matmul; both are outputs, so the
    backward adds the stream's own gradient to the LayerNorm's (as every layer's does)."""
    s = x + r
    return s, F.layer_norm(s, (s.shape[-1],), w, b, 1e-5).to(torch.bfloat16)


def gpt2_layer_norm() -> Case:
    M, N = 16384, 768
    make = lambda d: (_randn((M, N), torch.float32, d, 40), _randn((M, N), torch.bfloat16, d, 41),
                      _randn((N,), torch.float32, d, 42), _randn((N,), torch.float32, d, 43))
    E = M * N
    # fwd: x, r read, s and y written; bwd: dy, s, ds read, dx and dr written
    return Case("residual add + LayerNorm 16384x768", gpt2_residual_layer_norm, make,
                shape=f"{M}x{N} fp32 + bf16", grad_inputs=(0, 1, 2, 3),
                bytes={"fwd": 12 * E, "fwd+bwd": 28 * E})


def gpt2_bias_gelu() -> Case:
    """bias + GeLU(tanh) at GPT-2's MLP shape (B=16 x T=1024 tokens, 4 x 768 features)."""
    M, N, s = 16384, 3072, 2
    make = lambda d: (_randn((M, N), torch.bfloat16, d, 20), _randn((N,), torch.bfloat16, d, 21))
    return Case("bias + GeLU(tanh) 16384x3072", bias_gelu, make, shape=f"{M}x{N} bfloat16",
                grad_inputs=(0, 1), bytes={"fwd": 2 * M * N * s + N * s,
                                           "fwd+bwd": 5 * M * N * s + 3 * N * s})


def label(v) -> str:
    on, chunk, over = v
    return ("row loops ch%d " % chunk if on else "") + (" ".join(
        f"{k}={x}" for k, x in over.items()) or "-")


def variant_impl(v) -> Implementation:
    def build(fn):
        torch._dynamo.reset()
        return cherenkov.compile(fn, strict=True, dynamic=False, row_loops=v[0])
    return Implementation(label(v), build)


def patched(v):
    """Set the sweep's block overrides and chunk; returns an undo."""
    from cherenkov import compiler
    chosen, chunk = compiler.choose_blocks, split_reductions.ROW_LOOP_CHUNK
    from cherenkov.passes import fusion
    halves_of = fusion.halves_of
    _, rows, over = v
    over = dict(over)
    looped = over.pop("looped", 0)
    pointwise = over.pop("pointwise", 0)
    if over.pop("halves", None) == 0:
        fusion.halves_of = lambda group: 0

    def choose(kernel, interpret, device=None):
        cfg = chosen(kernel, interpret, device=device)
        if (kernel.row_loop or (looped and not cfg.persistent)
                or (pointwise and kernel.R == 1)):
            cfg = dataclasses.replace(cfg, **over)
        return cfg
    compiler.choose_blocks = choose
    split_reductions.ROW_LOOP_CHUNK = rows

    def undo():
        compiler.choose_blocks, split_reductions.ROW_LOOP_CHUNK = chosen, chunk
        fusion.halves_of = halves_of
    return undo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    dev = torch.device("cuda")
    settings = Settings(device=dev, l2_bytes=torch.cuda.get_device_properties(dev).L2_cache_size)
    rows = []
    for case, mode in [(c, m) for c in cases("full") + [gpt2_bias_gelu(), gpt2_layer_norm()]
                       if c.name in SWEEP
                       for m in SWEEP[c.name][1]]:
        for v in SWEEP[case.name][0]:
            undo = patched(v)
            impl = variant_impl(v)
            try:
                res = run_variant(case, mode, [impl], settings)
            finally:
                undo()
            r = res.impls[impl.name]
            t = r.time_s
            gbs = case.bytes[mode] / t / 1e9 if t else None
            rows.append({"case": case.name, "mode": mode, "variant": impl.name, "check": bool(r.check and
                         r.check.passed), "time_us": t and t * 1e6, "GB/s": gbs,
                         "timing": r.timing, "error": r.error,
                         "kernels": [(k[0], k[2]) for k in r.kernels]})
            print(rows[-1]["case"], mode, rows[-1]["variant"], rows[-1]["check"],
                  None if t is None else f"{t * 1e6:.1f} us {gbs:.0f} GB/s", r.error or "",
                  flush=True)
            torch.cuda.empty_cache()
    stamp = datetime.date.today().isoformat()
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    head = (f"# Row-loop sweep on {torch.cuda.get_device_name()}\n\n{stamp} · torch "
            f"{torch.__version__} · triton {triton.__version__} · commit {commit}\n\n"
            "CUDA-graph replay median; GB/s = the suite's minimal bytes / time.\n\n"
            "| case | mode | variant | check | us | GB/s |\n"
            "|---|---|---|---|---|---|\n")
    body = "".join(f"| {r['case']} | {r['mode']} | {r['variant']} | {'ok' if r['check'] else 'WRONG'} | "
                   f"{r['time_us'] or 0:.1f} | {r['GB/s'] or 0:.0f} |\n" for r in rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stamp}_row_loop_sweep_{commit}.md").write_text(head + body)
    (out / f"{stamp}_row_loop_sweep_{commit}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Which of cuBLASLt's candidates run without a memset, and at what speed, for GPT-2's matmuls.

GPT-2's training step runs a `Memset (Device)` before most nvjet matmul kernels (123 a step;
`2026-12-02_matmul_memsets_h200_40c962b.md`: 1 per x @ W.T and dY @ W call whatever the
workspace). In the step's timeline the kernels whose names hold `coop` follow a memset and
the others do not. For each problem of the step (bench/cublaslt_algos_gpu.problems): every
candidate of the heuristic (its first 16 with a 32 MB workspace, 8 without), the kernels one
call launches (names), its memsets per call, its median time (do_bench) and its error against
torch's result; then per problem torch's time against the fastest memset-free candidate.

    PYTHONPATH=. python3 bench/cublaslt_memset_free_gpu.py OUT_DIR     # CHERENKOV_COMMIT=<sha>
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.cublaslt_algos_gpu import problems  # noqa: E402
from cherenkov.bench.report import save_pair, script_meta  # noqa: E402
from cherenkov.bench.timing import cuda_median_s  # noqa: E402
from cherenkov.templates import cublaslt  # noqa: E402

CALLS = 3


def launches(fn) -> tuple[list[str], float]:
    """(kernel names of one call, memsets per call)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    names, memsets = {}, 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if e.name.startswith("Memset"):
            memsets += 1
        else:
            names[e.name[:70]] = names.get(e.name[:70], 0) + 1
    return sorted(names), memsets / CALLS


def setup(a, b, bias) -> tuple:
    """(torch's result, an output like it, the cuBLASLt problem, torch's call) of a @ b
    (+ bias)."""
    torch_call = (lambda: torch.addmm(bias, a, b)) if bias is not None else (lambda: a @ b)
    ref = torch_call()
    prob = cublaslt.problem_of(a, b, "bias" if bias is not None else "none")
    return ref, torch.empty_like(ref), prob, torch_call


def main(out_dir: str) -> None:
    rows = []
    for name, a, b, bias, count in problems("cuda"):
        ref, out, prob, torch_call = setup(a, b, bias)
        cands = [("torch", torch_call, ref)]
        for kind, n, ws in (("ws", 16, cublaslt.WORKSPACE_BYTES), ("nows", 8, 0)):
            cands += [(f"{kind}#{i}", lambda c=c: c(a, b, out, bias=bias), out)
                      for i, c in enumerate(cublaslt.candidates(prob, n, workspace_bytes=ws))]
        timed = []
        for label, fn, result in cands:
            try:
                fn()
                torch.cuda.synchronize()
                err = float((result.float() - ref.float()).abs().max() / ref.float().abs().max())
                kernels, memsets = launches(fn)
                ms = cuda_median_s(fn) * 1e3
            except Exception as e:  # noqa: BLE001 -- an algorithm refused at run time
                timed.append(dict(label=label, error=f"{type(e).__name__}: {e}"[:80]))
                continue
            timed.append(dict(label=label, ms=ms, memsets=memsets, err=err, kernels=kernels))
        rows.append(dict(case=name, per_step=count, m=prob.m, k=prob.k, n=prob.n,
                         candidates=timed))
        print(name, [(t["label"], round(t.get("ms", -1), 4), t.get("memsets")) for t in timed],
              flush=True)
    meta = script_meta()
    lines = [f"# cuBLASLt candidates with and without memsets, GPT-2's matmuls ({meta['gpu']})",
             "", " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| matmul | per step | torch ms (memsets) | fastest ms (which, memsets) | "
             "fastest memset-free ms (which) | its kernel |", "|---|---|---|---|---|---|"]
    saved = 0.0
    for r in rows:
        ok = [t for t in r["candidates"] if "ms" in t and t["err"] <= 0.02]
        tor = next((t for t in ok if t["label"] == "torch"), None)
        best = min(ok, key=lambda t: t["ms"]) if ok else None
        free = [t for t in ok if t["memsets"] == 0]
        fbest = min(free, key=lambda t: t["ms"]) if free else None
        if tor and fbest and fbest["ms"] < tor["ms"]:
            saved += (tor["ms"] - fbest["ms"]) * r["per_step"]
        cell = lambda t: "-" if t is None else f"{t['ms']:.4f} ({t['label']}, {t['memsets']:.0f})"
        lines.append(f"| {r['case']} | {r['per_step']} | "
                     + ("-" if tor is None else f"{tor['ms']:.4f} ({tor['memsets']:.0f})")
                     + f" | {cell(best)} | "
                     + ("-" if fbest is None else f"{fbest['ms']:.4f} ({fbest['label']})")
                     + f" | {'' if fbest is None else ', '.join(fbest['kernels'])[:90]} |")
    lines += ["", f"Step sum of (torch - fastest memset-free) where it is faster: {saved:.3f} ms "
              "(each call timed alone with do_bench: its memset and the gap after it included).",
              "", "## Every candidate", "",
              "| matmul | which | ms | memsets/call | err | kernels |", "|---|---|---|---|---|---|"]
    for r in rows:
        for t in r["candidates"]:
            if "ms" in t:
                lines.append(f"| {r['case']} | {t['label']} | {t['ms']:.4f} | {t['memsets']:.0f} "
                             f"| {t['err']:.1e} | {', '.join(t['kernels'])[:110]} |")
            else:
                lines.append(f"| {r['case']} | {t['label']} | - | - | - | {t['error']} |")
    save_pair(out_dir, "cublaslt_memset_free_gpu", "\n".join(lines) + "\n",
              dict(meta=meta, rows=rows, saved_ms=saved))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

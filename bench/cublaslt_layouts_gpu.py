"""GPT-2's forward matmuls (x @ W.T + b) with the weight in either layout: as the model
stores it (W (N, K) row-major, read transposed) and transposed (W.T (K, N) row-major, as a
forward could keep its bf16 cast). cuBLASLt's heuristic offers other kernels per layout --
for the LM head's forward the fastest alone was a ping-pong kernel (no "coop" in its name,
whose epilogue overlaps the next tile's main loop) 8% ahead of torch's
(`2026-12-02_cublaslt_memset_free_h200_891105f.md`), while c_fc's and c_attn's forwards
(K = 768: 718 and 624 TFLOP/s in the step) were offered only cooperative ones. For each
problem and layout: torch's call and every candidate matmul_algos tries (the heuristic's
first 8 with a workspace, 8 without), checked, timed alone (do_bench medians, rotated over 3 rounds), the
kernel named.

    PYTHONPATH=. python3 bench/cublaslt_layouts_gpu.py OUT_DIR     # CHERENKOV_COMMIT=<sha>
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.cublaslt_algos_gpu import LINEARS, TOKENS  # noqa: E402
from bench.cublaslt_memset_free_gpu import launches  # noqa: E402
from cherenkov.bench.report import save_pair, script_meta  # noqa: E402
from cherenkov.bench.timing import cuda_median_s  # noqa: E402
from cherenkov.templates import cublaslt, matmul_algos  # noqa: E402

ROUNDS = 3


def candidates(a, b, bias, out):
    """(label, run) of every candidate matmul_algos would try for a @ b (+ bias) into out."""
    prob = cublaslt.problem_of(a, b, "bias" if bias is not None else "none")
    return [(label, lambda c=c: c(a, b, out, bias=bias))
            for label, c in matmul_algos._candidates(prob)]


def main(out_dir: str) -> None:
    bf = dict(device="cuda", dtype=torch.bfloat16)
    rows = []
    for name, k, n, bias_on, per_step in LINEARS:
        x = torch.randn(TOKENS, k, **bf)
        w = torch.randn(n, k, **bf) * k ** -0.5
        bias = torch.randn(n, **bf) if bias_on else None
        for layout, b in (("W (N,K)", w.t()), ("W.T (K,N)", w.t().contiguous())):
            ref = torch.addmm(bias, x, b) if bias is not None else x @ b
            out = torch.empty_like(ref)
            runs = [("torch", (lambda b=b: torch.addmm(bias, x, b) if bias is not None
                               else x @ b))]
            for label, fn in candidates(x, b, bias, out):
                try:
                    fn()
                    torch.cuda.synchronize()
                    err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
                except Exception:  # noqa: BLE001 -- an algorithm refused at run time
                    continue
                if err <= 0.02:
                    runs.append((label, fn))
            times = {label: [] for label, _ in runs}
            for r in range(ROUNDS):
                for label, fn in runs[r % len(runs):] + runs[:r % len(runs)]:
                    times[label].append(cuda_median_s(fn) * 1e3)
            med = {label: statistics.median(v) for label, v in times.items()}
            kernels = {label: launches(fn)[0] for label, fn in runs}
            rows.append(dict(case=name, layout=layout, per_step=per_step, m=TOKENS, k=k, n=n,
                             ms=med, kernels=kernels))
            best = min(med, key=med.get)
            print(f"{name} {layout}: torch {med['torch']:.4f} ms ({kernels['torch'][0][:50]}); "
                  f"best {best} {med[best]:.4f} ({kernels[best][0][:50]})", flush=True)
    meta = script_meta()
    lines = [f"# GPT-2's forward matmuls by weight layout, cuBLASLt's candidates ({meta['gpu']})",
             "", " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| matmul | weight layout | torch ms | its kernel | fastest ms (which) | its kernel |"
             " fastest ping-pong ms |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        med, ker = r["ms"], r["kernels"]
        best = min(med, key=med.get)
        pp = [lb for lb in med if ker[lb] and "coop" not in ker[lb][0]]
        ppb = min(pp, key=med.get) if pp else None
        lines.append(f"| {r['case']} | {r['layout']} | {med['torch']:.4f} | {ker['torch'][0][:60]} "
                     f"| {med[best]:.4f} ({best}) | {ker[best][0][:60]} | "
                     + (f"{med[ppb]:.4f} ({ppb})" if ppb else "-") + " |")
    save_pair(out_dir, "cublaslt_layouts_gpu", "\n".join(lines) + "\n", dict(meta=meta, rows=rows))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

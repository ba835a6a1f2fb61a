"""How much a per-shape choice among cuBLASLt's algorithms would win over torch's matmuls.

    PYTHONPATH=. python3 bench/cublaslt_algos_gpu.py OUT_DIR     # CHERENKOV_COMMIT=<sha>

For every matmul of the GPT-2 training step (16384 tokens, d=768; forward x @ W.T + b,
backward dY @ W and X.T @ dY, the LM head's too) in bf16: torch's call (torch.mm / addmm:
cuBLAS's heuristic, its memset included), and templates/cublaslt.py's candidates:
the heuristic's first 16 with a 32 MB workspace and the first 8 with none (no split-K; the
memset stays, `2026-12-02_cublaslt_memset_free_h200_891105f.md`). Each checked against torch's result, then timed (do_bench medians). The step-level
figure: the sum over the step's calls of (torch - best), each shape counted as often as
the step runs it. Writes OUT_DIR/cublaslt_algos_gpu.md and .json.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from cherenkov.bench.report import save_pair, script_meta  # noqa: E402
from cherenkov.bench.timing import cuda_median_s  # noqa: E402
from cherenkov.templates import cublaslt  # noqa: E402

TOKENS, D = 16384, 768
# (name, K in, N out, bias, per step): the linears of GPT-2 (12 layers) and the LM head
LINEARS = [("c_attn", D, 3 * D, True, 12), ("attn proj", D, D, True, 12),
           ("c_fc", D, 4 * D, True, 12), ("mlp proj", 4 * D, D, True, 12),
           ("lm head", D, 50304, False, 1)]


def problems(dev):
    """(name, a, b, bias or None, per step) of every matmul the step runs."""
    bf = dict(device=dev, dtype=torch.bfloat16)
    out = []
    for name, k, n, bias, count in LINEARS:
        x = torch.randn(TOKENS, k, **bf)
        w = torch.randn(n, k, **bf) * k ** -0.5
        dy = torch.randn(TOKENS, n, **bf)
        b = torch.randn(n, **bf) if bias else None
        out.append((f"{name} forward x@W.T", x, w.t(), b, count))
        out.append((f"{name} dX = dY@W", dy, w, None, count))
        out.append((f"{name} dW.T = X.T@dY", x.t(), dy, None, count))
    return out


def main(out_dir: str) -> None:
    rows = []
    saved_ms = 0.0
    for name, a, b, bias, count in problems("cuda"):
        ref = torch.addmm(bias, a, b) if bias is not None else a @ b
        t_torch = cuda_median_s(lambda: torch.addmm(bias, a, b) if bias is not None else a @ b)
        epilogue = "bias" if bias is not None else "none"
        prob = cublaslt.problem_of(a, b, epilogue)
        found = [("ws", c) for c in cublaslt.candidates(prob, 16)] + \
            [("nows", c) for c in cublaslt.candidates(prob, 8, workspace_bytes=0)]
        out = torch.empty_like(ref)
        timed = []
        for i, (kind, cand) in enumerate(found):
            out.zero_()
            try:
                cand(a, b, out, bias=bias)
                err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
                if err > 0.02:
                    timed.append((kind, i, None, f"err {err:.3g}"))
                    continue
                timed.append((kind, i, cuda_median_s(lambda: cand(a, b, out, bias=bias)), ""))
            except Exception as e:  # noqa: BLE001
                timed.append((kind, i, None, f"{type(e).__name__}: {e}"[:80]))
        ok = [t for t in timed if t[2] is not None]
        best = min(ok, key=lambda t: t[2]) if ok else None
        first = next((t for t in timed if t[0] == "ws"), None)
        flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        row = dict(case=name, shape=f"{a.shape[0]}x{a.shape[1]}x{b.shape[1]}", per_step=count,
                   torch_ms=t_torch * 1e3, torch_tflops=flops / t_torch / 1e12,
                   heuristic_first_ms=None if first is None or first[2] is None
                   else first[2] * 1e3,
                   best_ms=None if best is None else best[2] * 1e3,
                   best=None if best is None else f"{best[0]}#{best[1]}",
                   candidates=[dict(kind=k, index=i, ms=None if t is None else t * 1e3,
                                    note=note) for k, i, t, note in timed])
        if best is not None and best[2] < t_torch:
            saved_ms += (t_torch - best[2]) * 1e3 * count
        rows.append(row)
        print(row["case"], row["shape"], f"torch {row['torch_ms']:.4f}",
              f"first {row['heuristic_first_ms']}", f"best {row['best_ms']} ({row['best']})",
              flush=True)
    meta = script_meta()
    lines = [f"# cuBLASLt algorithms per GPT-2 matmul vs torch's ({meta['gpu']})", "",
             " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| matmul | MxKxN | per step | torch ms (TFLOP/s) | heuristic's first ms | "
             "best ms (which) |", "|---|---|---|---|---|---|"]
    for r in rows:
        first = "-" if r["heuristic_first_ms"] is None else f"{r['heuristic_first_ms']:.4f}"
        best = "-" if r["best_ms"] is None else f"{r['best_ms']:.4f} ({r['best']})"
        lines.append(f"| {r['case']} | {r['shape']} | {r['per_step']} | "
                     f"{r['torch_ms']:.4f} ({r['torch_tflops']:.0f}) | {first} | {best} |")
    lines += ["", f"Step total of (torch - best) where best is faster: {saved_ms:.3f} ms "
              "(ws#i: the heuristic's i-th with a 32 MB workspace; nows#i: without one)."]
    text = "\n".join(lines) + "\n"
    save_pair(out_dir, "cublaslt_algos_gpu", text,
              dict(meta=meta, rows=rows, saved_ms_per_step=saved_ms))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

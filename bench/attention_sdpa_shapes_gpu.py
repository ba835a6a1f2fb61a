"""The training suite's attention shapes: PyTorch SDPA (cuDNN, flash, its default pick) vs
cherenkov.attention, causal, forward and forward+backward -- whether routing the cuDNN op of
a captured graph to our kernels would pay; and ALiBi written as slopes[h] * (kv - q) vs
slopes[h] * kv - slopes[h] * q (two vectors, one tile operation fewer) at the attention
suite's shape.

    CHERENKOV_COMMIT=<sha> python bench/attention_sdpa_shapes_gpu.py OUT_DIR

Writes OUT_DIR/attention_sdpa_shapes.md and .json (do_bench medians, best of 2 rounds).
"""
from __future__ import annotations

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.bench.report import save_pair, script_meta  # noqa: E402

SHAPES = {"gpt2 B16 H12 T1024 D64": (16, 12, 1024, 64),
          "llama B4 H16 T2048 D128": (4, 16, 2048, 128)}


def alibi_split(slopes):
    def alibi_bias(score, b, h, q_idx, kv_idx):
        return score + (slopes[h] * kv_idx - slopes[h] * q_idx)
    return alibi_bias


def sdpa(backend):
    def fn(q, k, v):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return fn


def timings(fn, q, k, v, do) -> tuple[float, float]:
    with torch.no_grad():
        fwd = do_bench(lambda: fn(q, k, v), warmup=10, rep=50, return_mode="median")

    def fwd_bwd():
        fn(q, k, v).backward(do)
    return fwd, do_bench(fwd_bwd, warmup=10, rep=50, grad_to_none=[q, k, v],
                         return_mode="median")


def problem(B: int, H: int, S: int, D: int) -> tuple:
    """(q, k, v, dO, causal block mask): bf16 on the GPU from seed 0 (also for
    bench/attention_vs_cudnn_gpu.py)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v, do, ca.block_mask(ca.causal, B, H, S, S, device="cuda")


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    rows, cases = [], []
    for name, (B, H, S, D) in SHAPES.items():
        q, k, v, do, bm = problem(B, H, S, D)
        impls = {"sdpa cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
                 "sdpa flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa default": sdpa(None),
                 "cherenkov": lambda q, k, v, bm=bm: ca.attention(q, k, v, block_mask=bm)}
        ref = impls["sdpa flash"](q, k, v).float()
        for impl, fn in impls.items():
            try:
                err = (fn(q, k, v).float() - ref).abs().max().item()
                cases.append((name, impl, fn, (q, k, v, do), err, 4 * B * H * D * S * S / 2))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append({"case": name, "impl": impl, "error": f"{type(e).__name__}: {e}"[:200]})
    B, H, S, D = 4, 16, 4096, 128
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    slopes = ca.alibi_slopes(H, device="cuda")
    bm = ca.block_mask(ca.causal, B, H, S, S, device="cuda")
    ref = ca.attention(q, k, v, score_mod=ca.alibi(slopes), block_mask=bm).float()
    for impl, mod in (("alibi (kv - q)", ca.alibi(slopes)), ("alibi kv - q split", alibi_split(slopes))):
        fn = lambda q, k, v, mod=mod: ca.attention(q, k, v, score_mod=mod, block_mask=bm)  # noqa: E731
        err = (fn(q, k, v).float() - ref).abs().max().item()
        cases.append(("alibi B4 H16 S4096 D128", impl, fn, (q, k, v, do), err,
                      4 * B * H * D * S * (S + 1) / 2))
    best: dict = {}
    for _ in range(2):
        for name, impl, fn, args, err, flops in cases:
            try:
                f, fb = timings(fn, *args)
                old = best.get((name, impl), (float("inf"), float("inf")))
                best[(name, impl)] = (min(old[0], f), min(old[1], fb))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                best[(name, impl)] = (float("nan"), float("nan"))
                rows.append({"case": name, "impl": impl, "error": f"{type(e).__name__}: {e}"[:200]})
    for name, impl, fn, args, err, flops in cases:
        f, fb = best[(name, impl)]
        rows.append({"case": name, "impl": impl, "fwd_ms": f, "fwd_bwd_ms": fb,
                     "fwd_tflops": flops / f * 1e-9, "fwd_bwd_tflops": 3.5 * flops / fb * 1e-9,
                     "max_err_vs_first": err})
        print(rows[-1], flush=True)
    meta = script_meta()
    lines = [f"# Attention at the training suite's shapes, and two ALiBi forms, on {meta['gpu']}",
             "", f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. bf16, causal; do_bench median, best of 2 rounds; TFLOP/s of "
             "unmasked pairs (fwd+bwd 3.5x the forward's). max err: output vs SDPA flash (the "
             "shapes) or vs the (kv - q) form (ALiBi).", "",
             "| case | impl | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s | max err | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['impl']} | {r.get('fwd_ms', float('nan')):.3f} | "
                     f"{r.get('fwd_bwd_ms', float('nan')):.3f} | {r.get('fwd_tflops', 0):.0f} | "
                     f"{r.get('fwd_bwd_tflops', 0):.0f} | {r.get('max_err_vs_first', '')} | "
                     f"{r.get('error', '')} |")
    text = "\n".join(lines) + "\n"
    save_pair(out_dir, "attention_sdpa_shapes", text, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

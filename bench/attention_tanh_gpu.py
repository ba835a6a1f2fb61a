"""Softcapped attention with tanh in half precision, two scores per MUFU instruction
(render.TANH_CUDA = "f16x2"), against the default fp32 tanh.approx: forward and forward +
backward at B=4 H=16 S=4096 D=128 bf16 (the attention suite's shape), and each variant's
output and gradients against the fp32 math reference on a B=1 H=2 slice.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_tanh_gpu.py OUT_DIR
"""
from __future__ import annotations

import json
import os
import sys

import torch
from triton.testing import do_bench

import cherenkov.attention as ca
from cherenkov.attention import render

B, H, S, D = 4, 16, 4096, 128


def errors(sm) -> dict:
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, S, D, device="cuda") for _ in range(3))
    g = torch.randn_like(q)
    mask = ca.block_mask(ca.causal, 1, 1, S, S, device="cuda")
    qb, kb, vb = (t.bfloat16().requires_grad_() for t in (q, k, v))
    out = ca.attention(qb, kb, vb, score_mod=sm, block_mask=mask)
    grads = torch.autograd.grad(out, (qb, kb, vb), g.bfloat16())
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    ref = ca.attention_math(qf, kf, vf, sm, ca.causal)
    ref_grads = torch.autograd.grad(ref, (qf, kf, vf), g)
    res = {"out": (out.float() - ref).abs().max().item()}
    for name, a, b in zip(("dq", "dk", "dv"), grads, ref_grads):
        res[name] = ((a.float() - b).abs().max() / b.abs().max()).item()
    return res


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    g = torch.randn_like(q)
    mask = ca.block_mask(ca.causal, 1, 1, S, S, device="cuda")
    flops = 4 * B * H * D * S * (S + 1) // 2
    rows = {}
    fns = {}
    for variant in ("f32", "f16x2", "causal"):
        render.TANH_CUDA = "f16x2" if variant == "f16x2" else "f32"
        sm = None if variant == "causal" else ca.tanh_softcap(30.0)   # a new function: traced anew
        try:
            rows[variant] = {"err": errors(sm) if sm is not None else None}

            def fwd(sm=sm):
                with torch.no_grad():
                    ca.attention(q, k, v, score_mod=sm, block_mask=mask)

            def fwd_bwd(sm=sm):
                torch.autograd.grad(ca.attention(q, k, v, score_mod=sm, block_mask=mask),
                                    (q, k, v), g)
            fwd_bwd()
            fns[variant] = (fwd, fwd_bwd)
        except Exception as e:  # noqa: BLE001
            rows[variant] = {"error": f"{type(e).__name__}: {e}"[:400]}
    times = {v: ([], []) for v in fns}
    for _ in range(2):                       # interleaved rounds, best of two
        for variant, (f, fb) in fns.items():
            times[variant][0].append(do_bench(f, warmup=10, rep=60))
            times[variant][1].append(do_bench(fb, warmup=10, rep=60))
    for variant, (f_ms, fb_ms) in times.items():
        rows[variant].update(fwd_ms=min(f_ms), fwd_bwd_ms=min(fb_ms),
                             fwd_tflops=flops / min(f_ms) / 1e9,
                             fwd_bwd_tflops=3.5 * flops / min(fb_ms) / 1e9)
    result = {"commit": commit, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "shape": [B, H, S, D], "rows": rows}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"attention_tanh_{commit}.json"), "w") as f:
        json.dump(result, f, indent=1)
    for variant, r in rows.items():
        print(variant, json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())

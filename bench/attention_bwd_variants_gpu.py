"""Backward-kernel variants on the GPU: does folding a score mod's derivative into P early
(one live tile fewer through the dV and dP matmuls) speed up the backward of score mods whose
derivative varies per score (softcap), and does it let the dK/dV kernel take 64-row steps?

Variants patch the kernel source (dK/dV and dQ tiles) and the dK/dV tile choice; each is
checked against the unpatched kernels' gradients and timed forward+backward (do_bench median,
best of 2 interleaved rounds).

    CHERENKOV_COMMIT=<sha> python bench/attention_bwd_variants_gpu.py OUT_DIR

B=4 H=16 S=4096 D=128 bf16. Writes OUT_DIR/attention_bwd_variants.{md,json}.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import codegen, tuning  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

B, H, S, D = 4, 16, 4096, 128

DKDV_OLD = '''    dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PREC)
    dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)              # (BLOCK_N, BLOCK_M)
    dsT = pT * (dpT - delta[None, :])
    if HAS_SCORE_MOD:
        dsT = tl.where(pT == 0.0, 0.0, dsT * dsdx)
'''
DKDV_NEW = '''    if HAS_SCORE_MOD:
        pdT = tl.where(pT == 0.0, 0.0, pT * dsdx)
    dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PREC)
    dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)              # (BLOCK_N, BLOCK_M)
    if HAS_SCORE_MOD:
        dsT = pdT * (dpT - delta[None, :])
    else:
        dsT = pT * (dpT - delta[None, :])
'''
DQ_OLD = '''    dp = tl.dot(do, vT, input_precision=DOT_PREC)
    ds = p * (dp - delta[:, None])
    if HAS_SCORE_MOD:
        if HAS_CAPTURE_GRADS:
            _capture_grads(score, ds, p != 0.0, b, h, q_idx, kv_idx, __CAPS__ __GRADS__)
        ds = tl.where(p == 0.0, 0.0, ds * dsdx)
'''
DQ_NEW = '''    if HAS_SCORE_MOD and not HAS_CAPTURE_GRADS:
        pd = tl.where(p == 0.0, 0.0, p * dsdx)
    dp = tl.dot(do, vT, input_precision=DOT_PREC)
    if HAS_SCORE_MOD and not HAS_CAPTURE_GRADS:
        ds = pd * (dp - delta[:, None])
    else:
        ds = p * (dp - delta[:, None])
    if HAS_SCORE_MOD and HAS_CAPTURE_GRADS:
        _capture_grads(score, ds, p != 0.0, b, h, q_idx, kv_idx, __CAPS__ __GRADS__)
        ds = tl.where(p == 0.0, 0.0, ds * dsdx)
'''

# name -> (fold dkdv, fold dq, 64-row dK/dV steps for score mods with a varying derivative)
VARIANTS = {
    "base": (False, False, False),
    "fold dkdv": (True, False, False),
    "fold dkdv+dq": (True, True, False),
    "fold dkdv+dq, dkdv 64 rows": (True, True, True),
    "base, dkdv 64 rows": (False, False, True),
}


def patched(original: str, dkdv: bool, dq: bool) -> str:
    text = original
    if dkdv:
        assert DKDV_OLD in text
        text = text.replace(DKDV_OLD, DKDV_NEW)
    if dq:
        assert DQ_OLD in text
        text = text.replace(DQ_OLD, DQ_NEW)
    return text


def main(out_dir: str) -> int:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    slopes = ca.alibi_slopes(H, device="cuda")
    cases = {"causal": (None, ca.causal), "softcap30": (ca.tanh_softcap(30.0), ca.causal),
             "alibi": (ca.alibi(slopes), ca.causal)}
    masks = {name: ca.block_mask(m, B, H, S, S, device="cuda") for name, (_, m) in cases.items()}
    rows, ref = [], {}
    original = codegen.KERNELS
    choose = tuning.choose_config
    flops = 3.5 * 4 * B * H * D * S * (S + 1) / 2
    for rnd in range(2):
        for name, (fold_dkdv, fold_dq, rows64) in VARIANTS.items():
            codegen.KERNELS = patched(original, fold_dkdv, fold_dq)
            codegen._COMPILED.clear()
            tuning._LIVE.clear()
            if rows64:
                def no_clip(kernel, head_dim, dtype, sparse_block=(64, 64), interpret=False,
                            device=None, score_grad=False):
                    return choose(kernel, head_dim, dtype, sparse_block, interpret, device, False)
                tuning.choose_config = no_clip
            import cherenkov.attention.launch as launch_mod
            launch_mod.choose_config = tuning.choose_config
            for case, (score_mod, mask_mod) in cases.items():
                row = next((r for r in rows if r["variant"] == name and r["case"] == case), None)
                if row is None:
                    row = {"variant": name, "case": case}
                    rows.append(row)
                if "error" in row:
                    continue
                try:
                    def fn():
                        out = ca.attention(q, k, v, score_mod=score_mod, block_mask=masks[case])
                        return torch.autograd.grad(out, (q, k, v), do)
                    grads = fn()
                    if name == "base":
                        ref[case] = grads
                    row["max_rel_err"] = max(((g - r).abs().max() / r.abs().max()).item()
                                             for g, r in zip(grads, ref[case]))
                    ms = do_bench(fn, warmup=10, rep=100)
                    row["fwd_bwd_ms"] = min(row.get("fwd_bwd_ms", 1e9), ms)
                    row["tflops"] = flops / row["fwd_bwd_ms"] * 1e-9
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                    traceback.print_exc()
                print(rnd, row, flush=True)
            tuning.choose_config = choose
            launch_mod.choose_config = choose
    codegen.KERNELS = original
    base = {r["case"]: r.get("fwd_bwd_ms") for r in rows if r["variant"] == "base"}
    for r in rows:
        if r.get("fwd_bwd_ms") and base.get(r["case"]):
            r["speedup_vs_base"] = base[r["case"]] / r["fwd_bwd_ms"]
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit(),
            "shape": f"B={B} H={H} S={S} D={D} bf16 forward+backward, best of 2 rounds"}
    lines = [f"# Attention backward variants on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. {meta['shape']}. TFLOP/s count 3.5x the causal forward's.", "",
             "| variant | case | fwd+bwd ms | TFLOP/s | speedup vs base | max rel grad err vs base "
             "| error |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['case']} | {r.get('fwd_bwd_ms', float('nan')):.4f} | "
                     f"{r.get('tflops', float('nan')):.1f} | "
                     f"{r.get('speedup_vs_base', float('nan')):.3f} | {r.get('max_rel_err', '')} | "
                     f"{r.get('error', '')} |")
    text = "\n".join(lines) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "attention_bwd_variants.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "attention_bwd_variants.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))

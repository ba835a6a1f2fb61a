"""Triton's warp specialization on Hopper (`tl.range(..., warp_specialize=True)`) for the
attention kernels' tile loops: each variant rewrites the loops of kernels_src.KERNELS before
anything compiles, in its own process, checks forward and gradients against the unchanged
kernels on a small shape, and times forward and forward+backward at the attention suite's
shape (B=4 H=16 S=4096 D=128 bf16; do_bench median, best of 2 rounds).

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_ws_gpu.py OUT_DIR

Variants: `base`; `ws full` (the loops over full tiles: forward, dK/dV, dQ, dQ from dS). Writes OUT_DIR/attention_ws.md and .json.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

VARIANTS = {"base": (), "ws full": ("n_full",)}
CASES = ("causal", "alibi", "sliding_window1024", "prefix_lm1024")


def _patch(loops: tuple) -> None:
    from cherenkov.attention import codegen
    text = codegen.KERNELS
    for count in loops:
        old = f"for it in range(0, {count} * R):"
        assert old in text, old
        text = text.replace(old, f"for it in tl.range(0, {count} * R, warp_specialize=True):")
    codegen.KERNELS = text


def _mods(name: str, S: int, H: int):
    import cherenkov.attention as ca
    if name == "causal":
        return dict(mask_mod=ca.causal)
    if name == "alibi":
        return dict(score_mod=ca.alibi(ca.alibi_slopes(H, device="cuda")), mask_mod=ca.causal)
    if name == "sliding_window1024":
        return dict(mask_mod=ca.sliding_window(S // 4))
    return dict(mask_mod=ca.prefix_lm(S // 4))


def _run(name: str, B: int, H: int, S: int, D: int, seed: int = 0):
    import torch
    import cherenkov.attention as ca
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kw = _mods(name, S, H)
    bm = ca.block_mask(kw["mask_mod"], B, H, S, S, device="cuda")
    fn = lambda: ca.attention(q, k, v, block_mask=bm, score_mod=kw.get("score_mod"))  # noqa
    return q, k, v, do, fn, kw


def _error(name: str) -> float:
    """max |output or gradient - the fp32 math reference's| / max |reference|, B=1 H=2 S=640."""
    import torch
    from cherenkov.attention.reference import attention_math
    q, k, v, do, fn, kw = _run(name, 1, 2, 640, 128, seed=1)
    o = fn()
    o.backward(do)
    got = [o, q.grad, k.grad, v.grad]
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = attention_math(q32, k32, v32, **kw)
    ref.backward(do.float())
    want = [ref, q32.grad, k32.grad, v32.grad]
    return max(float((a.float() - b).abs().max() / b.abs().max()) for a, b in zip(got, want))


def child(variant: str) -> dict:
    import torch
    from triton.testing import do_bench
    _patch(VARIANTS[variant])
    out = {}
    for name in CASES:
        try:
            err = _error(name)
            q, k, v, do, fn, _ = _run(name, 4, 16, 4096, 128)
            fwd, fb = float("inf"), float("inf")
            for _ in range(2):
                with torch.no_grad():
                    fwd = min(fwd, do_bench(fn, warmup=10, rep=50, return_mode="median"))
                fb = min(fb, do_bench(lambda: fn().backward(do), warmup=10, rep=50,
                                      grad_to_none=[q, k, v], return_mode="median"))
            out[name] = {"fwd_ms": fwd, "fwd_bwd_ms": fb, "rel_err_vs_math": err}
        except Exception as e:  # noqa: BLE001 -- a variant that does not compile is reported
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(variant, name, out[name], flush=True)
    return out


def main(out_dir: str) -> None:
    from cherenkov.bench.report import md_table, save_pair, script_meta
    results = {}
    for variant in VARIANTS:
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", variant],
                                  capture_output=True, text=True, timeout=230)
            print(proc.stdout[-2000:], proc.stderr[-2000:], flush=True)
            results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        except Exception as e:  # noqa: BLE001
            results[variant] = {c: {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                                for c in CASES}
    rows, data = [], []
    base = results.get("base", {})
    for variant, cases in results.items():
        for name, r in cases.items():
            err = r.get("rel_err_vs_math", "")
            ratio = (base[name]["fwd_bwd_ms"] / r["fwd_bwd_ms"]
                     if "fwd_bwd_ms" in r and "fwd_bwd_ms" in base.get(name, {}) else "")
            rows.append([name, variant, f"{r.get('fwd_ms', float('nan')):.3f}",
                         f"{r.get('fwd_bwd_ms', float('nan')):.3f}",
                         f"{ratio:.3f}" if ratio != "" else "", err, r.get("error", "")])
            data.append({"case": name, "variant": variant, **r})
    meta = script_meta()
    text = "\n".join([
        f"# Warp specialization of the attention kernels' tile loops on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. B=4 H=16 S=4096 D=128 bf16, do_bench median (best of 2); "
        "speedup: base fwd+bwd / variant's; rel err: max |output or gradient - the fp32 math "
        "reference's| / max |reference's| at B=1 H=2 S=640.", "",
        *md_table(["case", "variant", "fwd ms", "fwd+bwd ms", "speedup", "rel err", "error"],
                  rows)]) + "\n"
    save_pair(out_dir, "attention_ws", text, {"meta": meta, "rows": data})


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        print(json.dumps(child(sys.argv[2])))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

"""The forward's lookahead loop (launch.FWD_LOOKAHEAD: the next key tile's q K^T issued before
this tile's softmax) against the plain loop, each variant in its own process: checked against
the (fp32) math reference on a small shape, timed forward and forward+backward at the
attention suite's shape (B=4 H=16 S=4096 D=128 bf16; do_bench median, best of 2 rounds).

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_lookahead_gpu.py OUT_DIR

Variants: `base` (4 warps, the default); `base 8 warps` (the plain loop on the lookahead's
two warpgroups: which of the two changes matters); `lookahead` (8 warps, tuning's
"fwd_tma_la"); `lookahead 4 warps`. Writes OUT_DIR/attention_lookahead.md and .json.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attention_ws_gpu import CASES, _error, _run  # noqa: E402

VARIANTS = {"base": (False, None), "base 8 warps": (False, 8), "lookahead": (True, None),
            "lookahead 4 warps": (True, 4)}


def child(variant: str) -> dict:
    import torch
    from triton.testing import do_bench
    from cherenkov.attention import launch, tuning
    lookahead, warps = VARIANTS[variant]
    launch.FWD_LOOKAHEAD = lookahead
    if warps is not None:
        key = "fwd_tma_la" if lookahead else "fwd_tma"
        tuning._GPU_TABLE[key][128] = tuning.KernelConfig(128, 64, warps, 2)
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
        except Exception as e:  # noqa: BLE001 -- a variant that fails is reported
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(variant, name, out[name], flush=True)
    return out


def main(out_dir: str) -> None:
    from cherenkov.bench.report import md_table, save_pair, script_meta
    results = {}
    for variant in VARIANTS:
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", variant],
                                  capture_output=True, text=True, timeout=200)
            print(proc.stdout[-1500:], proc.stderr[-1500:], flush=True)
            results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        except Exception as e:  # noqa: BLE001
            results[variant] = {c: {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                                for c in CASES}
    base = results.get("base", {})
    rows, data = [], []
    for variant, cases in results.items():
        for name, r in cases.items():
            b = base.get(name, {})
            speed = {k: f"{b[k] / r[k]:.3f}" if k in r and k in b else ""
                     for k in ("fwd_ms", "fwd_bwd_ms")}
            rows.append([name, variant, f"{r.get('fwd_ms', float('nan')):.3f}",
                         f"{r.get('fwd_bwd_ms', float('nan')):.3f}", speed["fwd_ms"],
                         speed["fwd_bwd_ms"], r.get("rel_err_vs_math", ""), r.get("error", "")])
            data.append({"case": name, "variant": variant, **r})
    meta = script_meta()
    text = "\n".join([
        f"# The attention forward's lookahead loop on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. B=4 H=16 S=4096 D=128 bf16, do_bench median (best of 2); speedups "
        "over `base`; rel err: max |output or gradient - the math reference's| / max "
        "|reference's| at B=1 H=2 S=640.", "",
        *md_table(["case", "variant", "fwd ms", "fwd+bwd ms", "fwd speedup",
                   "fwd+bwd speedup", "rel err", "error"], rows)]) + "\n"
    save_pair(out_dir, "attention_lookahead", text, {"meta": meta, "rows": data})


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        print(json.dumps(child(sys.argv[2])))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

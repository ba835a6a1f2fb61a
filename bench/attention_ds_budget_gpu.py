"""ALiBi forward+backward at the suite's shape under each stored-dS budget (launch_bwd.DS_BUDGET:
chunks of kv heads) and with the Gluon dQ recomputing dS instead (DS_STORE off), best of 3
interleaved do_bench rounds, with each variant's peak memory.

    CHERENKOV_COMMIT=<sha> python bench/attention_ds_budget_gpu.py OUT_DIR
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import launch_bwd  # noqa: E402
from cherenkov.bench.report import script_meta  # noqa: E402

B, H, S, D = 4, 16, 4096, 128
# stored dS asked for ("on"): since 586e33c "auto" gives ALiBi the Gluon dQ
VARIANTS = {"512 MB (4 chunks)": ("on", 512 << 20), "1 GB (2 chunks)": ("on", 1 << 30),
            "2 GB (1 chunk)": ("on", 2 << 30), "Gluon dQ (DS_STORE off)": ("off", 512 << 20)}


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    sm = ca.alibi(ca.alibi_slopes(H, device="cuda"))
    bm = ca.block_mask(ca.causal, B, H, S, S, device="cuda")
    best, peak = {}, {}
    for _ in range(3):
        for name, (store, budget) in VARIANTS.items():
            launch_bwd.DS_STORE, launch_bwd.DS_BUDGET = store, budget

            def run():
                ca.attention(q, k, v, score_mod=sm, block_mask=bm).backward(do)
            run()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            run()
            torch.cuda.synchronize()
            peak[name] = torch.cuda.max_memory_allocated() / 2**30
            ms = do_bench(run, warmup=10, rep=60, grad_to_none=[q, k, v], return_mode="median")
            best[name] = min(best.get(name, ms), ms)
    meta = script_meta()
    lines = [f"# ALiBi forward+backward per stored-dS budget on {meta['gpu']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}, "
             f"{meta['date']}; B={B} H={H} S={S} D={D} bf16, causal; best of 3 interleaved "
             "do_bench medians; peak GiB allocated by one forward+backward.", "",
             "| variant | fwd+bwd ms | peak GiB |", "|---|---|---|"]
    lines += [f"| {n} | {best[n]:.3f} | {peak[n]:.2f} |" for n in VARIANTS]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"attention_ds_budget_{meta['commit']}.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Which backward kernel wants descriptors: the dQ and dK/dV kernels each on TMA descriptors
or pointers (four combinations), per case, with a per-kernel profile (torch.profiler, mean
GPU time per call) and do_bench forward+backward (best of 2 interleaved rounds).

    CHERENKOV_COMMIT=<sha> python bench/attention_bwd_modes_gpu.py OUT_DIR

Writes OUT_DIR/attention_bwd_modes.{md,json}. B=4 H=16 S=4096 D=128 bf16.
"""
from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import launch_bwd, memo  # noqa: E402
from cherenkov.bench.report import md_table, save_pair, script_meta  # noqa: E402

B, H, S, D = 4, 16, 4096, 128


@contextlib.contextmanager
def modes(dq_mode: str, dkdv_mode: str):
    """The dQ kernel's and the dK/dV kernel's descriptor mode ("auto" or "off")."""
    dq, dkdv = launch_bwd._dq_decision, launch_bwd._dkdv_decision

    def dq_decision(plan, q, k, v, do, o, fused, backward_mode):
        return dq(plan, q, k, v, do, o, fused, backward_mode if dq_mode == "auto" else "off")

    def dkdv_decision(plan, q, k, v, do, backward_mode, *rest):
        return dkdv(plan, q, k, v, do, backward_mode if dkdv_mode == "auto" else "off", *rest)
    launch_bwd._dq_decision, launch_bwd._dkdv_decision = dq_decision, dkdv_decision
    memo.forget()
    try:
        yield
    finally:
        launch_bwd._dq_decision, launch_bwd._dkdv_decision = dq, dkdv
        memo.forget()


def profile(fn) -> dict:
    """GPU ms per call of the attention kernels (bench/attention_bwd_tiles_gpu.kernel_table)."""
    from attention_bwd_tiles_gpu import kernel_table
    return {name: ms for name, ms in kernel_table(fn).items() if name.startswith("_attn")}


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    dev = "cuda"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
    slopes = ca.alibi_slopes(H, device=dev)
    cases = {"causal": (None, ca.causal), "alibi": (ca.alibi(slopes), ca.causal),
             "sliding_window1024": (None, ca.sliding_window(1024)),
             "prefix_lm1024": (None, ca.prefix_lm(1024))}
    masks = {n: ca.block_mask(m, B, H, S, S, device=dev) for n, (_, m) in cases.items()}
    combos = [("auto", "auto"), ("off", "off"), ("off", "auto"), ("auto", "off")]
    rows = {}
    ref = {}
    for rnd in range(2):
        for name, (score_mod, _) in cases.items():
            for combo in combos:
                def fn():
                    ca.attention(q, k, v, score_mod=score_mod, block_mask=masks[name]).backward(do)
                with modes(*combo):
                    ms = do_bench(fn, warmup=10, rep=100, grad_to_none=[q, k, v])
                    row = rows.setdefault((name, combo), {"case": name, "dq": combo[0],
                                                          "dkdv": combo[1]})
                    row["ms"] = min(row.get("ms", 1e9), ms)
                    if rnd == 0:
                        for t in (q, k, v):
                            t.grad = None
                        fn()
                        grads = [t.grad.clone() for t in (q, k, v)]
                        r = ref.setdefault(name, grads)
                        row["max_rel_err"] = max(((g.float() - x.float()).abs().max()
                                                  / x.float().abs().max()).item()
                                                 for g, x in zip(grads, r))
                        row["kernels_ms"] = profile(fn)
                print(rnd, row, flush=True)
    rows = list(rows.values())
    meta = script_meta()
    lines = [f"# Backward descriptor modes per kernel on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. B={B} H={H} S={S} D={D} bf16; forward+backward do_bench "
             f"(best of 2 interleaved rounds); kernels: profiler mean per call. auto = "
             f"descriptors where launch.tma_mode allows, off = pointers.", ""]
    lines += md_table(["case", "dQ", "dK/dV", "fwd+bwd ms", "kernels (ms)", "max rel err"],
                      [(r["case"], r["dq"], r["dkdv"], f"{r['ms']:.4f}",
                        "; ".join(f"{k_}: {v_:.3f}" for k_, v_ in sorted(r["kernels_ms"].items())),
                        f"{r['max_rel_err']:.2g}") for r in rows])
    save_pair(out_dir, "attention_bwd_modes", "\n".join(lines) + "\n", {"meta": meta, "rows": rows})

    return 0


if __name__ == "__main__":
    sys.exit(main())

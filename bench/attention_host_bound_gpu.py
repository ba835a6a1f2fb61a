"""Is the attention suite's forward+backward figure bound by the host? Per case (the suite's
B=4 H=16 S=4096 D=128 bf16), do_bench's median of a forward+backward call as the suite takes
it (`.backward(do)`, grads set to None between calls) against the same call captured once in a
CUDA graph and replayed (the GPU's own time: no Python, no launches), best of 2 rounds; the
ratio says how much of the suite's figure is the host's. Compiled flex_attention beside ours.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_host_bound_gpu.py OUT_DIR

Writes OUT_DIR/attention_host_bound.{md,json}.
"""
from __future__ import annotations

import os
import sys

import torch
from triton.testing import do_bench

import cherenkov.attention as ca
from cherenkov.bench.report import md_table, save_pair, script_meta
from cherenkov.bench.suites.attention import _doc_offsets

B, H, S, D = 4, 16, 4096, 128


def graphed(fn):
    """fn captured in a CUDA graph (after warm-up on a side stream): its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main(out_dir: str) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    slopes = ca.alibi_slopes(H, device="cuda")
    cases = {"causal": (None, ca.causal), "alibi": (ca.alibi(slopes), ca.causal),
             "sliding_window1024": (None, ca.sliding_window(1024)),
             "prefix_lm1024": (None, ca.prefix_lm(1024)),
             "document8": (None, ca.document(offsets=_doc_offsets(S, 8), causal=True))}
    torch._dynamo.config.recompile_limit = 256
    rows = {}
    for rnd in range(2):
        for name, (score_mod, mask_mod) in cases.items():
            ours_bm = ca.block_mask(mask_mod, B, H, S, S, device="cuda")
            torch._dynamo.reset()      # the suite's way: fresh closures, fresh compile cache
            flex = torch.compile(flex_attention, dynamic=False)
            flex_bm = create_block_mask(mask_mod, None, None, S, S, device="cuda")
            impls = {"cherenkov": lambda: ca.attention(q, k, v, score_mod=score_mod,
                                                       block_mask=ours_bm),
                     "flex": lambda: flex(q, k, v, score_mod=score_mod, block_mask=flex_bm)}
            for impl, f in impls.items():
                def fwd_bwd(f=f):
                    for t in (q, k, v):
                        t.grad = None
                    f().backward(do)
                row = rows.setdefault((name, impl), {"case": name, "impl": impl})
                try:
                    called = do_bench(fwd_bwd, warmup=10, rep=40, grad_to_none=[q, k, v],
                                      return_mode="median")
                    replay = do_bench(graphed(fwd_bwd), warmup=10, rep=40,
                                      return_mode="median")
                except Exception as e:  # noqa: BLE001 -- reported, the others still run
                    row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    continue
                row["called_ms"] = min(row.get("called_ms", 1e9), called)
                row["graph_ms"] = min(row.get("graph_ms", 1e9), replay)
                print(rnd, row, flush=True)
    rows = list(rows.values())
    for r in rows:
        if "graph_ms" in r:
            r["host_share"] = 1 - r["graph_ms"] / r["called_ms"]
    meta = script_meta()
    lines = [f"# Attention forward+backward: called vs CUDA-graph replay on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. B={B} H={H} S={S} D={D} bf16; do_bench medians, best of 2 "
             "rounds; host share = 1 - graph / called.", ""]
    lines += md_table(["case", "impl", "called ms", "graph replay ms", "host share", "error"],
                      [(r["case"], r["impl"], f"{r.get('called_ms', float('nan')):.4f}",
                        f"{r.get('graph_ms', float('nan')):.4f}",
                        f"{r.get('host_share', float('nan')):.3f}", r.get("error", ""))
                       for r in rows])
    save_pair(out_dir, "attention_host_bound", "\n".join(lines) + "\n",
              {"meta": meta, "rows": rows})
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

"""Causal attention forward+backward, ours against SDPA's default backend (cuDNN's kernels on
the H200), kernel by kernel: each kernel's mean GPU time per call (torch.profiler) at the
attention suite's shape (B=4 H=16 S=4096 D=128 bf16) and at GPT-2's training shape (B=16 H=12
T=1024 D=64) -- where the 19% between the two implementations' forward+backward sits.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_vs_cudnn_gpu.py OUT_DIR

Writes OUT_DIR/attention_vs_cudnn.md.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from attention_bwd_tiles_gpu import kernel_table  # noqa: E402
from attention_sdpa_shapes_gpu import problem  # noqa: E402
from cherenkov.bench.report import md_table, script_meta  # noqa: E402

SHAPES = {"suite B4 H16 S4096 D128": (4, 16, 4096, 128), "gpt2 B16 H12 T1024 D64": (16, 12, 1024, 64)}


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for label, (B, H, S, D) in SHAPES.items():
        q, k, v, do, bm = problem(B, H, S, D)
        impls = {"cherenkov": lambda: ca.attention(q, k, v, block_mask=bm).backward(do),
                 "sdpa default": lambda: F.scaled_dot_product_attention(
                     q, k, v, is_causal=True).backward(do)}
        for impl, run in impls.items():
            for _ in range(5):
                run()
            torch.cuda.synchronize()
            kernels = kernel_table(run, 20, top=None)
            total = sum(kernels.values())
            rows.append([label, impl, "all kernels", f"{total:.3f}"])
            for name, ms in sorted(kernels.items(), key=lambda kv: -kv[1]):
                rows.append([label, impl, name, f"{ms:.3f}"])
            print(label, impl, f"{total:.3f}", flush=True)
    meta = script_meta()
    text = "\n".join([
        f"# Causal attention kernels, ours vs SDPA's default backend, on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. Forward+backward per call, bf16; GPU ms per call per kernel "
        "(bench/attention_bwd_tiles_gpu.kernel_table: torch.profiler, 20 calls).", "",
        *md_table(["shape", "impl", "kernel", "ms per call"], rows)]) + "\n"
    path = os.path.join(out_dir, "attention_vs_cudnn.md")
    with open(path, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

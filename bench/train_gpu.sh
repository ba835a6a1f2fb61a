#!/usr/bin/env bash
# `cherenkov bench train` on the GPU: training steps (forward, backward, fused AdamW, bf16
# autocast) of the GPT-2 style config (12 layers, d=768, vocab 50304, B=16 T=1024) and the
# Llama style config (16 layers, d=2048, SwiGLU 5632, vocab 32000, B=4 T=2048), for eager,
# torch.compile (default mode), Cherenkov and Cherenkov with CUDA graphs, 50 steps each from
# the same seed and data. Writes <date>_train_<gpu>.md and .json to $OUT (default
# bench/results), rewritten after every backend, so even a run cut short leaves its results.
# The CUDA-graph variants run last; no backend starts after 330 s, so the whole run stays
# under ~8 minutes unless a single compile is very slow (the hard limit is 590 s).
#
#     OUT=$OUT bash bench/train_gpu.sh                       # both configs, all backends
#     bash bench/train_gpu.sh --cases gpt2 --impls eager cherenkov --steps 20   # a subset
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results}"
export CHERENKOV_COMMIT="${CHERENKOV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
PYTHONPATH=. timeout 590 python3 -m cherenkov.cli bench train --out "$OUT" --time-budget 330 "$@"

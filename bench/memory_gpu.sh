#!/usr/bin/env bash
# `cherenkov bench memory` on the GPU: eager vs torch.compile (default mode) vs Cherenkov,
# forward and forward+backward, bf16 32768x4096 (cross-entropy 16384 tokens x 50304 / 128256).
# Writes <date>_memory_<gpu>.md and .json to $OUT (default bench/results). No new case starts
# after 290 s, so the whole run (compiles included) stays under ~6 minutes; each case is
# guarded on its own, so one failure never loses the others.
#
#     OUT=$OUT bash bench/memory_gpu.sh                 # the full suite
#     bash bench/memory_gpu.sh --cases softmax rope    # a subset (any `cherenkov bench` flag)
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results}"
export CHERENKOV_COMMIT="${CHERENKOV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
PYTHONPATH=. timeout 600 python3 -m cherenkov.cli bench memory --out "$OUT" --time-budget 290 "$@"

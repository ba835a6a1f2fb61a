#!/usr/bin/env bash
# First GPU job of a session: the GPU tests (device kernels, CUDA graphs, compile workers,
# compiled optimizer, dependent launches; not the attention sweep) and then the train suite
# (eager / torch.compile / Cherenkov, both configs, and Cherenkov with dependent launches
# where the budget allows), all under ~9.5 minutes.
# Results to $OUT (default bench/results).
#
#     OUT=$OUT bash bench/check_gpu.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results}"
export CHERENKOV_COMMIT="${CHERENKOV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
# (the 45 random attention problems, ~3 minutes, run on their own:
#  python3 -m pytest -q tests/gpu/test_attention_sweep_gpu.py)
PYTHONPATH=. timeout 280 python3 -m pytest -q -p no:logging tests/gpu \
    --ignore=tests/gpu/test_attention_sweep_gpu.py 2>&1 \
    | grep -E "^E |^FAILED|passed|failed" | tail -25
# cherenkov-nopdl: generated kernels without programmatic dependent launch (config pdl, on
# by default); cherenkov+opt (the AdamW step compiled too) and
# cherenkov+autotune are left to be named
OUT="$OUT" timeout 380 bash bench/train_gpu.sh --impls eager torch.compile cherenkov \
    cherenkov-nopdl --time-budget 240 2>&1 | grep -E "^\| (eager|torch.compile|cherenkov)|^- |wrote"

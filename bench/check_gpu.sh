#!/usr/bin/env bash
# First GPU jobs of a session, one device call each (each under ~9.5 minutes):
#
#     OUT=$OUT bash bench/check_gpu.sh tests   # GPU tests (device kernels, CUDA graphs, compile
#                                              # workers, dependent launches; not the attention
#                                              # sweep), their summary in $OUT/gpu_tests.txt
#     OUT=$OUT bash bench/check_gpu.sh train   # train suite: eager / torch.compile / Cherenkov,
#                                              # and Cherenkov without dependent launches
#     OUT=$OUT bash bench/check_gpu.sh kernels # scans and pooling: bench/scan_gpu.py,
#                                              # bench/pooling_gpu.py (a table each)
#     OUT=$OUT bash bench/check_gpu.sh gluon   # the Gluon attention kernels' GPU tests
#                                              # (forward, dQ, split tile loops), then their
#                                              # variants: bench/attention_gluon_variants_gpu.py
#                                              # (each under its own timeout: a wrong barrier
#                                              # phase waits forever)
#     OUT=$OUT bash bench/check_gpu.sh host    # the host time of attention calls with the GPU
#                                              # kept busy: where one call's goes (API, launch
#                                              # code, autograd engine), then piece by piece
#                                              # against flex (bench/attention_host_breakdown_gpu.py;
#                                              # the rows were host-bound until 2439233)
#
# Results to $OUT (default bench/results). The 45 random attention problems (over 4 minutes:
# 39 of them ran in 240 s at 00f1981) run on
# their own: python3 -m pytest -q tests/gpu/test_attention_sweep_gpu.py
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results}"
export CHERENKOV_COMMIT="${CHERENKOV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
case "${1:-}" in
tests)
    PYTHONPATH=. timeout 560 python3 -m pytest -q -p no:logging tests/gpu --durations=8 \
        --ignore=tests/gpu/test_attention_sweep_gpu.py > "$OUT/gpu_tests.txt" 2>&1
    grep -E "^E |^FAILED|passed|failed|s call" "$OUT/gpu_tests.txt" | tail -25 ;;
train)
    # cherenkov-nopdl: generated kernels without programmatic dependent launch (config pdl, on
    # by default); cherenkov+opt (the AdamW step compiled too) and cherenkov+autotune are
    # left to be named
    OUT="$OUT" timeout 560 bash bench/train_gpu.sh --impls eager torch.compile cherenkov \
        cherenkov-nopdl --time-budget 420 2>&1 \
        | grep -E "^\| (eager|torch.compile|cherenkov)|^- |wrote" ;;
kernels)
    PYTHONPATH=. timeout 270 python3 bench/scan_gpu.py "$OUT" 2>&1 | grep -E "^\||gpu="
    PYTHONPATH=. timeout 270 python3 bench/pooling_gpu.py "$OUT" 2>&1 | grep -E "^\||gpu=" ;;
gluon)
    PYTHONPATH=. timeout 260 python3 -m pytest -q -p no:logging --tb=short \
        tests/gpu/test_attention_gluon_gpu.py > "$OUT/gpu_tests_gluon.txt" 2>&1
    grep -E "^E |^FAILED|passed|failed" "$OUT/gpu_tests_gluon.txt" | tail -15
    PYTHONPATH=. timeout 270 python3 bench/attention_gluon_variants_gpu.py "$OUT" 2>&1 \
        | grep -E "^\|" ;;
host)
    PYTHONPATH=. timeout 150 python3 bench/attention_host_breakdown_gpu.py "$OUT" timeline 2>&1 \
        | grep -E "backward:|wrote"
    PYTHONPATH=. timeout 300 python3 bench/attention_host_breakdown_gpu.py "$OUT" 2>&1 \
        | grep -E "^(==|full|flex)|wrote" ;;
*)
    echo "usage: OUT=\$OUT bash bench/check_gpu.sh tests|train|kernels|gluon|host" >&2; exit 2 ;;
esac

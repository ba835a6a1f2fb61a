"""Attention on one GPU: `cherenkov bench attention` as a script (cherenkov/bench/suites/attention.py).

    python bench/attention_gpu.py OUT_DIR           # CHERENKOV_COMMIT=<sha> records the commit
    python bench/attention_gpu.py OUT_DIR --smoke   # tiny shapes on CPU: checks the suite runs

Writes OUT_DIR/attention_gpu.md and .json; ATTN_BUDGET_S (default 330) is the time budget.
"""
import os
import sys

SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"       # before triton is first imported
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cherenkov.bench.suites import attention  # noqa: E402

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--smoke"]
    sys.exit(attention.main(args[0] if args else "bench/results", SMOKE,
                            float(os.environ.get("ATTN_BUDGET_S", 330))))

"""The forward's lookahead loop (launch.FWD_LOOKAHEAD: the next key tile's q K^T issued before
this tile's softmax) against the plain loop, each variant in its own process, checked and
timed at the attention suite's shape (bench/attention_probe_runs.py).

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_lookahead_gpu.py OUT_DIR

Variants: `base` (4 warps, the default); `base 8 warps` (the plain loop on the lookahead's
two warpgroups: which of the two changes matters); `lookahead` (8 warps, tuning's
"fwd_tma_la"); `lookahead 4 warps`. Writes OUT_DIR/attention_lookahead.md and .json.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attention_probe_runs import probe_main  # noqa: E402

VARIANTS = {"base": (False, None), "base 8 warps": (False, 8), "lookahead": (True, None),
            "lookahead 4 warps": (True, 4)}


def _configure(variant: str) -> None:
    from cherenkov.attention import launch, tuning
    lookahead, warps = VARIANTS[variant]
    launch.FWD_LOOKAHEAD = lookahead
    if warps is not None:
        key = "fwd_tma_la" if lookahead else "fwd_tma"
        tuning._GPU_TABLE[key][128] = tuning.KernelConfig(128, 64, warps, 2)


if __name__ == "__main__":
    probe_main(__file__, VARIANTS, _configure,
               "The attention forward's lookahead loop", "attention_lookahead", 200)

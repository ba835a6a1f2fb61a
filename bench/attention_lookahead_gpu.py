"""The lookahead loops (the next key tile's q K^T issued before this tile's softmax / dS):
the forward's (launch.FWD_LOOKAHEAD, two warpgroups: tuning's "fwd_tma_la") and dQ's
(launch.DQ_LOOKAHEAD, two warpgroups on its 64 x 64 tile: "dq_la"), against the plain loops,
each variant in its own process, checked and timed at the attention suite's shape
(bench/attention_probe_runs.py). The plain loops on 8 warps tell the warps' share apart.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_lookahead_gpu.py OUT_DIR
    PROBE_VARIANTS="base,dq lookahead" ...        # a subset (each variant ~1 min)

Writes OUT_DIR/attention_lookahead.md and .json.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attention_probe_runs import probe_main  # noqa: E402

VARIANTS = {   # (forward lookahead, dQ lookahead, warps of the plain forward / dQ)
    "base": (False, False, None, None), "fwd 8 warps": (False, False, 8, None),
    "fwd lookahead": (True, False, None, None), "dq 8 warps": (False, False, None, 8),
    "dq lookahead": (False, True, None, None), "both lookahead": (True, True, None, None)}


def _configure(variant: str) -> None:
    from cherenkov.attention import launch, tuning
    fwd, dq, fwd_warps, dq_warps = VARIANTS[variant]
    launch.FWD_LOOKAHEAD, launch.DQ_LOOKAHEAD = fwd, dq
    if fwd_warps is not None:
        tuning._GPU_TABLE["fwd_tma"][128] = tuning.KernelConfig(128, 64, fwd_warps, 2)
    if dq_warps is not None:        # past the one-warpgroup rule for 64 x 64 tiles
        table_config = tuning._table_config

        def with_warps(kernel, *args):
            cfg = table_config(kernel, *args)
            return tuning.KernelConfig(cfg.block_m, cfg.block_n, dq_warps, cfg.num_stages) \
                if kernel == "dq" else cfg
        tuning._table_config = with_warps


if __name__ == "__main__":
    probe_main(__file__, VARIANTS, _configure,
               "The attention forward's lookahead loop", "attention_lookahead", 200)

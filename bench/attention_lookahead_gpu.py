"""The lookahead loops (the next tile's scores issued before this tile's softmax / dS): the
forward's (launch.FWD_LOOKAHEAD, two warpgroups: tuning's "fwd_tma_la"), dQ's (DQ_LOOKAHEAD,
"dq_la") and dK/dV's (DKDV_LOOKAHEAD, "dkdv_la"; its loops spill in sm_90 SASS on the CPU,
the others' not: 2026-12-02_attention_sass_variants_cpu_958620a.md), against the plain loops,
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

VARIANTS = {   # {flag: on} and {kernel: warps of its plain loop}
    "base": ({}, {}), "fwd 8 warps": ({}, {"fwd_tma": 8}),
    "fwd lookahead": ({"FWD_LOOKAHEAD": True}, {}), "dq 8 warps": ({}, {"dq": 8}),
    "dq lookahead": ({"DQ_LOOKAHEAD": True}, {}), "dkdv 8 warps": ({}, {"dkdv": 8}),
    "dkdv lookahead": ({"DKDV_LOOKAHEAD": True}, {}),
    "fwd + dq lookahead": ({"FWD_LOOKAHEAD": True, "DQ_LOOKAHEAD": True}, {})}


def _configure(variant: str) -> None:
    from cherenkov.attention import launch, tuning
    flags, warps = VARIANTS[variant]
    for name, value in flags.items():
        setattr(launch, name, value)
    if warps:                       # past the one-warpgroup rule for 64 x 64 tiles
        table_config = tuning._table_config

        def with_warps(kernel, *args):
            cfg = table_config(kernel, *args)
            return tuning.KernelConfig(cfg.block_m, cfg.block_n, warps[kernel],
                                       cfg.num_stages) if kernel in warps else cfg
        tuning._table_config = with_warps


if __name__ == "__main__":
    probe_main(__file__, VARIANTS, _configure,
               "The attention forward's lookahead loop", "attention_lookahead", 200)

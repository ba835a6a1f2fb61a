"""Triton's warp specialization on Hopper (`tl.range(..., warp_specialize=True)`) for the
attention kernels' tile loops: each variant rewrites the loops of kernels_src.KERNELS before
anything compiles, in its own process, checks forward and gradients against the math
reference on a small shape, and times forward and forward+backward at the attention suite's
shape (bench/attention_probe_runs.py).

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_ws_gpu.py OUT_DIR

Variants: `base`; `ws` (every tile loop: _fwd_tiles, _dq_tiles, _dkdv_tiles -- at 38bc4d1,
before the loops moved into those helpers, `ws full` marked the loops over full tiles).
Writes OUT_DIR/attention_ws.md and .json. (At 38bc4d1 every `ws full` kernel failed in
Triton 3.6's NVGPUWarpSpecialization pass.)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attention_probe_runs import probe_main  # noqa: E402

VARIANTS = {"base": (), "ws": ("n",)}


def mark_loops(loops: tuple) -> None:
    """codegen.KERNELS with the tile loops `for it in range(0, <count>)` of each count in
    `loops` marked for warp specialization (also bench/attention_ws_cpu.py)."""
    from cherenkov.attention import codegen
    text = codegen.KERNELS
    for count in loops:
        old = f"for it in range(0, {count}):"
        assert old in text, old
        text = text.replace(old, f"for it in tl.range(0, {count}, warp_specialize=True):")
    codegen.KERNELS = text


if __name__ == "__main__":
    probe_main(__file__, VARIANTS, lambda variant: mark_loops(VARIANTS[variant]),
               "Warp specialization of the attention kernels' tile loops", "attention_ws", 230)

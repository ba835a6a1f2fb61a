"""Tile configurations of the matmul template, and the candidates the hardware model allows.

A `TileConfig` is everything the launch picks besides the kernel's text: block sizes, the
L2 grouping of program ids, warps, pipeline stages and whether programs loop over tiles
(persistent, one program per SM). `candidates(problem, device)` draws the configs worth
timing for one problem from the device's figures:

    stages   as many (A, B) K-slices as fit the SM's shared memory (at most 4);
    warps    the fp32 accumulator must fit in registers: BLOCK_M*BLOCK_N / threads <= 128;
    blocks   not much larger than the problem (a 64-row problem gets no 256-row tile);
    ranked   by predicted waves (tiles / SMs, rounded up, so a 133-tile grid on 132 SMs
             pays for two waves) and by tile intensity BM*BN/(BM+BN), best first.

`interpreter_config(problem)` is the small fixed config used on CPU (no tuning there).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from cherenkov.hw.spec import DeviceSpec

BLOCK_MN = (64, 128, 256)
BLOCK_K = (32, 64)
WARPS = (4, 8)
MAX_STAGES = 4
MAX_ACC_REGS_PER_THREAD = 128


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    persistent: bool = False
    epilogue_split: int = 1        # fused epilogues: run per 1 or 2 column halves of the tile
    tma: bool = False              # fused epilogues: A and B tiles through TMA descriptors

    def __str__(self):
        p = " persistent" if self.persistent else ""
        e = f" e{self.epilogue_split}" if self.epilogue_split > 1 else ""
        t = " tma" if self.tma else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} "
                f"w{self.num_warps} s{self.num_stages}{p}{e}{t}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TileConfig":
        return cls(**d)


def _pow2_at_least(n: int, lo: int = 16) -> int:
    return max(lo, 1 << max(0, (n - 1).bit_length()))


def interpreter_config(m: int, n: int, k: int) -> TileConfig:
    """Few, small programs: the interpreter pays per program and per numpy op, not per FLOP."""
    bm = min(32, _pow2_at_least(m))
    bn = min(32, _pow2_at_least(n))
    bk = min(32, _pow2_at_least(k))
    return TileConfig(bm, bn, bk, group_m=4, num_warps=1, num_stages=1)


def stages_that_fit(device: DeviceSpec, bm: int, bn: int, bk: int, in_bytes: int) -> int:
    """Pipeline depth whose A and B slices fit in one SM's shared memory (0 if none)."""
    per_stage = (bm * bk + bk * bn) * in_bytes
    budget = device.sram_per_sm_bytes - 2048          # Triton keeps a little for barriers
    return int(min(MAX_STAGES, budget // per_stage))


def predicted_waves(device: DeviceSpec, batch: int, m: int, n: int, bm: int, bn: int) -> float:
    tiles = batch * math.ceil(m / bm) * math.ceil(n / bn)
    return math.ceil(tiles / device.sm_count)


def candidates(device: DeviceSpec, batch: int, m: int, n: int, k: int, in_bytes: int,
               limit: int = 8, persistent: bool = True) -> list[TileConfig]:
    """Configs worth timing for C[batch, m, n] = A[m, k] @ B[k, n], best-predicted first."""
    found = []
    for bm in BLOCK_MN:
        for bn in BLOCK_MN:
            if bm > 2 * _pow2_at_least(m, 64) or bn > 2 * _pow2_at_least(n, 64):
                continue
            for bk in BLOCK_K:
                if bk > _pow2_at_least(k, 32):
                    continue
                stages = stages_that_fit(device, bm, bn, bk, in_bytes)
                if stages < 2:
                    continue
                for warps in WARPS:
                    threads = warps * device.warp_size
                    if bm * bn / threads > MAX_ACC_REGS_PER_THREAD:
                        continue
                    if bm * bn / threads < 32:            # too little work per thread
                        continue
                    found.append(TileConfig(bm, bn, bk, 8, warps, stages))

    def score(c: TileConfig):
        waves = predicted_waves(device, batch, m, n, c.block_m, c.block_n)
        tiles = batch * math.ceil(m / c.block_m) * math.ceil(n / c.block_n)
        # time ~ waves x work per tile / how fast one tile runs (its intensity)
        work = c.block_m * c.block_n
        intensity = c.block_m * c.block_n / (c.block_m + c.block_n)
        fill = tiles / (waves * device.sm_count)
        return (-(fill * intensity), -work, -c.block_k, c.num_warps)

    found.sort(key=score)
    # keep variety: at most two (warps, stages, bk) variants of each block shape
    chosen, per_shape = [], {}
    for c in found:
        key = (c.block_m, c.block_n)
        if per_shape.get(key, 0) >= 2:
            continue
        per_shape[key] = per_shape.get(key, 0) + 1
        chosen.append(c)
        if len(chosen) >= limit:
            break
    if persistent and chosen:
        best = chosen[0]
        chosen.append(TileConfig(best.block_m, best.block_n, best.block_k, best.group_m,
                                 best.num_warps, best.num_stages, persistent=True))
    return chosen

"""Tile sizes, warps and pipeline stages for the attention kernels: one table, one function.

`choose_config(kernel, head_dim, dtype, ...)` is the single place tiles are chosen: a small
table of tile shapes and warps tuned by hand for Hopper-class GPUs, with the number of
software-pipeline stages then cut to what the device's shared memory holds (the hardware
model's `sram_per_sm_bytes`): each stage keeps one K and one V tile in flight beside the
resident Q tile. Tiny tiles for the CPU interpreter, where tile size only trades numpy calls
against wasted work.
A kernel tile must divide the block mask's tile, so the result is clipped to `sparse_block`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KernelConfig:
    block_m: int       # query rows per tile (for "dkdv": query rows per inner step)
    block_n: int       # key rows per tile (for "dkdv": key rows per program)
    num_warps: int
    num_stages: int

    def clip(self, sparse_block: tuple[int, int]) -> "KernelConfig":
        return KernelConfig(min(self.block_m, sparse_block[0]), min(self.block_n, sparse_block[1]),
                            self.num_warps, self.num_stages)


# (kernel, head_dim_pad <= key) -> config for 16-bit inputs on sm90; fp32 halves the tiles.
# Forward: 64 x 64 tiles of 4 warps beat 128 x 64 at every causal shape measured on the H200
# (bench/results/2026-11-30_attention_shapes_h200_42d4a37.md, best of 3 interleaved rounds):
# S=4096 D=64 0.402 vs 0.435 ms, D=128 0.748 vs 0.771, sliding window 0.382 vs 0.404, Llama's
# S=2048 D=128 0.212 vs 0.236; forward+backward the same or up to 2% faster. In the backward, 32-row
# dK/dV steps helped at D=64 and hurt at D=128, and 128 x 128 mask tiles helped only D=128's
# forward: neither is taken. D=128's dQ in 64 x 64 tiles of 4 warps (was 128 x 64 of 8): backward
# 1.933 vs 1.970 ms causal, 2.536 vs 2.652 softcap, 2.107 vs 2.131 ALiBi. A score mod whose
# derivative varies per score (softcap) held one more tile through the dK/dV step, where the
# 64-row step spilled (32 rows were taken: 2.413 vs 2.536 ms,
# bench/results/2026-11-30_attention_mods_h200_454117d.md); its dK/dV step now issues dP's
# matmul with S's (kernels_src DP_FIRST) and keeps 64 rows: 2.64 vs 2.82 ms forward+backward
# (2026-12-01_attention_bwd_order_variants_h200_d9ee083.md). The dK/dV kernel's block_n is
# clipped to the mask's 64-column tile (then one warpgroup), so its 128 here rarely applies.
_GPU_TABLE = {
    "fwd": {64: KernelConfig(64, 64, 4, 3), 128: KernelConfig(64, 64, 4, 3),
            256: KernelConfig(64, 32, 4, 2)},
    # the forward reading through TMA descriptors (launch.tma_mode): 128 x 64 tiles of 4
    # warps, 2 stages, 444 TFLOP/s causal at S=4096 D=128 in a standalone probe
    # (bench/results/2026-12-01_attention_tma_h200_1e350dc.md; pointers 386-413); in the
    # kernel (2026-12-01_attention_tma_variants_h200_6694b0b.md, 128 x 64 mask tiles) causal
    # 0.629 ms vs 0.691 with pointers, ALiBi 0.673 vs 0.760, softcap 0.690 vs 0.763; 3 or 4
    # stages and 8 warps lost; on 64-row mask tiles (the tile clipped to 64 x 64) 2-7%
    "fwd_tma": {64: KernelConfig(128, 64, 4, 2), 128: KernelConfig(128, 64, 4, 2),
                256: KernelConfig(64, 32, 4, 2)},
    "dq": {64: KernelConfig(128, 64, 8, 3), 128: KernelConfig(64, 64, 4, 2),
           256: KernelConfig(64, 32, 4, 1)},
    "dkdv": {64: KernelConfig(64, 128, 8, 3), 128: KernelConfig(64, 128, 8, 2),
             256: KernelConfig(32, 64, 4, 1)},
    # dQ from stored dS (launch_bwd.DS_STORE): a stream of dS tiles, one matmul each; 3 stages,
    # 2 and 4 within 2% (bench/results/2026-12-01_attention_dq_ds_variants_*)
    "dq_ds": {64: KernelConfig(64, 64, 4, 3), 128: KernelConfig(64, 64, 4, 3),
              256: KernelConfig(64, 32, 4, 2)},
    "decode": {64: KernelConfig(16, 128, 4, 3), 128: KernelConfig(16, 128, 4, 3),
               256: KernelConfig(16, 64, 4, 2)},
}
_INTERPRETER = KernelConfig(32, 32, 1, 1)
_LIVE: dict = {}          # choose_config answers for the live device
VERSION = 0               # bumped by override: launch decisions remembered (memo.py) key on it


@contextlib.contextmanager
def override(head_dim: int, configs: dict):
    """The tile table with `configs` ({kernel: KernelConfig}) for `head_dim`, inside the block
    (tile sweeps in bench/); remembered answers are dropped on entry and exit."""
    global VERSION
    key = max(16, next_power_of_2(head_dim))
    saved = {kernel: dict(table) for kernel, table in _GPU_TABLE.items()}
    _LIVE.clear()
    VERSION += 1
    for kernel, cfg in configs.items():
        _GPU_TABLE[kernel][key] = cfg
    try:
        yield
    finally:
        _GPU_TABLE.clear()
        _GPU_TABLE.update(saved)
        _LIVE.clear()
        VERSION += 1


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def stages_that_fit(cfg: KernelConfig, d_pad: int, elem_bytes: int, sram_bytes: float) -> int:
    """Pipeline stages whose K/V tiles, beside the resident Q tile, fit in shared memory."""
    resident = cfg.block_m * d_pad * elem_bytes
    per_stage = 2 * cfg.block_n * d_pad * elem_bytes
    return max(1, min(cfg.num_stages, int((sram_bytes - resident) // per_stage)))


def choose_config(kernel: str, head_dim: int, dtype: torch.dtype, sparse_block=(64, 64),
                  interpret: bool = False, device=None) -> KernelConfig:
    """Tiles for `kernel` in {"fwd", "fwd_tma", "dq", "dkdv", "dq_ds", "decode"} at this head
    dim and dtype; `device` is a `cherenkov.hw.DeviceSpec` (default: the live device)."""
    if interpret:
        return _INTERPRETER.clip(sparse_block)
    if device is None:
        # the live device's answers are remembered per current CUDA device (a decode call's
        # host time is short next to its kernels only without a device lookup per launch)
        key = (kernel, head_dim, dtype, tuple(sparse_block),
               torch.cuda.current_device() if torch.cuda.is_available() else -1)
        cfg = _LIVE.get(key)
        if cfg is None:
            from cherenkov import hw
            cfg = _LIVE[key] = choose_config(kernel, head_dim, dtype, sparse_block, False,
                                             hw.current_device())
        return cfg
    cfg = _table_config(kernel, head_dim, dtype, sparse_block)
    d_pad = max(16, next_power_of_2(head_dim))
    stages = stages_that_fit(cfg, d_pad, torch.empty((), dtype=dtype).element_size(),
                             device.sram_per_sm_bytes)
    return KernelConfig(cfg.block_m, cfg.block_n, cfg.num_warps, stages)


def _table_config(kernel: str, head_dim: int, dtype: torch.dtype, sparse_block) -> KernelConfig:
    d_pad = max(16, next_power_of_2(head_dim))
    table = _GPU_TABLE[kernel]
    key = min((k for k in table if k >= d_pad), default=max(table))
    cfg = table[key]
    if dtype == torch.float32:      # twice the registers per element
        cfg = KernelConfig(max(16, cfg.block_m // 2) if kernel != "decode" else cfg.block_m,
                           max(16, cfg.block_n // 2), cfg.num_warps, max(1, cfg.num_stages - 1))
    if kernel == "decode":       # block_m is unused: the decode tile holds GROUPS x Q rows
        return KernelConfig(cfg.block_m, min(cfg.block_n, sparse_block[1]), cfg.num_warps,
                            cfg.num_stages)
    cfg = cfg.clip(sparse_block)
    if (kernel == "dkdv" and cfg.block_n <= 64 or cfg.block_m * cfg.block_n <= 64 * 64) \
            and cfg.num_warps > 4:
        # one warpgroup: 64 x 64 tiles on 8 warps ran forward+backward 0.65-0.70x (dQ) and
        # 0.62-0.66x (dK/dV) at S=4096 D=128; loops issuing the next tile's scores before this
        # tile's softmax / dS on two warpgroups lost too (forward 0.73-0.76x, dQ 0.64-0.65x,
        # dK/dV 0.57-0.61x forward+backward; removed, at d7c96cf):
        # bench/results/2026-12-02_attention_lookahead*_h200_d7c96cf.md
        cfg = KernelConfig(cfg.block_m, cfg.block_n, 4, cfg.num_stages)
    return cfg

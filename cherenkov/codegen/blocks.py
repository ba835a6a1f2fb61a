"""Block sizes, warps and persistent-vs-looped for a kernel, from the device it runs on.

Rows that fit in registers are reduced persistently (one pass over memory); longer rows loop.
The tile budget (elements per program) comes from the device: on a GPU, enough 16-byte
vectors per thread to keep loads in flight without spilling; under the Triton interpreter
(CPU), big tiles so that few program instances run (each costs milliseconds there).
"""
from __future__ import annotations

from cherenkov.codegen.kernel_ir import Kernel
from cherenkov.codegen.triton_renderer import BlockConfig


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def choose_blocks(kernel: Kernel, interpret: bool, max_persistent: int = 16384,
                  tile_elements: int = 4096) -> BlockConfig:
    if interpret:
        tile_elements, max_persistent = 1 << 16, 1 << 16
    X, R = kernel.X, kernel.R
    if R == 1:
        xblock = min(next_pow2(X), 1024 if not interpret else 1 << 16)
        return BlockConfig(XBLOCK=max(xblock, 16), num_warps=4 if xblock >= 512 else 2)
    rblock = next_pow2(R)
    persistent = rblock <= max_persistent
    if not persistent:
        rblock = 2048 if not interpret else 1 << 14
    xblock = max(1, min(next_pow2(X), tile_elements // rblock))
    elems = xblock * rblock
    num_warps = 16 if elems >= 16384 else 8 if elems >= 2048 else 4 if elems >= 512 else 2
    return BlockConfig(XBLOCK=xblock, RBLOCK=rblock, persistent=persistent, num_warps=num_warps)

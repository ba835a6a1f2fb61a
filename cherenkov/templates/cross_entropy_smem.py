"""When the cross-entropy rows run the Gluon kernel that reads each row once
(cross_entropy_smem_kernel.py), and its launch.

It takes a call on CUDA (sm_80+: cp.async) where Triton has Gluon, whose rows copy into shared
memory in 16-byte pieces (unit stride along the vocabulary, row strides and base pointers
16-byte aligned, V a whole number of pieces) and whose padded row fits in half an SM's shared
memory, so two rows are in flight per SM. Anything else -- or a kernel that fails to build,
logged once -- runs the Triton kernel (cross_entropy_kernel.py). ENABLED = "off" (env
CHERENKOV_CE_SMEM=off) keeps it off.
"""
from __future__ import annotations

import functools
import logging
import os

import torch

log = logging.getLogger("cherenkov")

ENABLED = os.environ.get("CHERENKOV_CE_SMEM", "auto")        # "auto" | "off"
BLOCK_V = 4096                 # elements per slice (one commit group, one shared-memory row)
NUM_WARPS = 8
PER_SM = 2                     # rows resident per SM: one loading while another computes
_FAILED: list[str] = []        # the reason the kernel could not build, once it failed


@functools.cache
def _gluon_kernel():
    from cherenkov.templates.cross_entropy_smem_kernel import cross_entropy_rows_smem
    return cross_entropy_rows_smem


@functools.cache
def _smem_budget(index: int) -> int:
    """Bytes of shared memory one program may take with PER_SM of them on an SM (1 KB of
    each program's share is the system's)."""
    props = torch.cuda.get_device_properties(index)
    per_sm = getattr(props, "shared_memory_per_multiprocessor", 0)
    per_block = getattr(props, "shared_memory_per_block_optin", 0)
    return min(per_block, per_sm // PER_SM - 1024) if per_sm and per_block else 0


def slices(vocab: int, block_v: int = BLOCK_V) -> int:
    """Slices of block_v elements a row of `vocab` takes in shared memory."""
    return -(-vocab // block_v)


def parts(n: int) -> tuple[int, int, int, int] | None:
    """n slices as four powers of two or 0, largest first (shared memory shapes are powers of
    two), or None where n needs more than four."""
    bits = [1 << b for b in range(n.bit_length() - 1, -1, -1) if n >> b & 1]
    return tuple(bits + [0] * (4 - len(bits))) if len(bits) <= 4 else None


def unsupported(logits: torch.Tensor, grad: torch.Tensor, block_v: int = BLOCK_V) -> str | None:
    """None if the Gluon kernel takes this call, else why not."""
    if ENABLED == "off":
        return "off (CHERENKOV_CE_SMEM=off)"
    if _FAILED:
        return f"kernel failed to build: {_FAILED[0]}"
    if logits.device.type != "cuda" or torch.version.hip:
        return "not CUDA"
    if torch.cuda.get_device_capability(logits.device)[0] < 8:
        return "before sm_80 (no cp.async)"
    from cherenkov.attention.codegen import gluon_hopper
    if not gluon_hopper():
        return "no Gluon in this Triton"
    size = logits.element_size()
    rows, vocab = logits.shape
    piece = 16 // size
    if logits.stride(1) != 1 or grad.stride(1) != 1:
        return "vocabulary not at unit stride"
    if vocab % piece or (rows > 1 and logits.stride(0) % piece) or logits.data_ptr() % 16:
        return "rows not in 16-byte pieces"
    if parts(slices(vocab, block_v)) is None:
        return f"{slices(vocab, block_v)} slices of {block_v} (more than four buffers)"
    need = slices(vocab, block_v) * block_v * size
    budget = _smem_budget(logits.device.index if logits.device.index is not None
                          else torch.cuda.current_device())
    if need > budget:
        return f"a row takes {need} bytes of shared memory, over {budget}"
    return None


def _parts_kw(vocab: int, block_v: int) -> dict:
    return dict(zip(("N1", "N2", "N3", "N4"), parts(slices(vocab, block_v))))


def launch(logits: torch.Tensor, grad: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor,
           ignore_index: int, write_grad: bool, block_v: int = BLOCK_V,
           num_warps: int = NUM_WARPS) -> bool:
    """Run the Gluon kernel (True), or record why it could not build and return False (the
    caller runs the Triton kernel)."""
    from triton.experimental.gluon import language as gl
    rows, vocab = logits.shape
    layout = gl.BlockedLayout([16 // logits.element_size()], [32], [num_warps], [0])
    smem_layout = gl.SwizzledSharedLayout(1, 1, 1, [0])
    try:
        _gluon_kernel()[(rows,)](
            logits, logits.stride(0), grad, grad.stride(0), targets, loss, vocab, ignore_index,
            WRITE_GRAD=write_grad, BLOCK_V=block_v, **_parts_kw(vocab, block_v),
            LAYOUT=layout, SMEM_LAYOUT=smem_layout, num_warps=num_warps)
    except Exception as e:  # noqa: BLE001 -- a kernel that does not build: Triton's from now
        _FAILED.append(f"{type(e).__name__}: {e}"[:300])
        log.warning("cherenkov: the shared-memory cross-entropy kernel failed (%s); the Triton "
                    "kernel runs from now on", _FAILED[0])
        return False
    return True

"""When the cross-entropy rows run the Gluon kernel that reads each row once
(cross_entropy_smem_kernel.py), and its launch.

It takes a call on CUDA (sm_80+: cp.async) where Triton has Gluon, whose rows copy into shared
memory in 16-byte pieces (unit stride along the vocabulary; V and the row stride multiples
of 16, the logits 16-byte aligned) and whose padded row fits in half an SM's shared memory,
so two rows are in flight per SM. Anything else -- or a launch signature whose kernel failed
to build, logged once -- runs the Triton kernel (cross_entropy_kernel.py). ENABLED = "off"
(env CHERENKOV_CE_SMEM=off) keeps it off. On the H200 (bench/results/
2026-12-02_ce_smem_h200_9f9d624.md) with the gradient: 831 vs 1121 us at GPT-2's 16384 x
50304 (93% of copy bandwidth), 263 vs 323 us at Llama's 8192 x 32000 (95%).
"""
from __future__ import annotations

import functools
import logging
import os

import torch

log = logging.getLogger("cherenkov")

ENABLED = os.environ.get("CHERENKOV_CE_SMEM", "auto")        # "auto" | "off"
# elements per slice (one commit group, one shared-memory row) and warps: the H200's best
# (bench/results/2026-12-02_ce_smem_h200_9f9d624.md: 831 us at 16384 x 50304 against 863
# with 4096-wide slices, 1721-3548 with 4 or 16 warps; the Triton kernel's 1121)
BLOCK_V = 2048
NUM_WARPS = 8
PER_SM = 2                     # rows resident per SM: one loading while another computes
_FAILED: dict[tuple, str] = {}  # why the kernel could not build, per launch signature


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
    """None if the Gluon kernel takes this call, else why not (the rows' part decided once
    per signature: this runs on every call, a training step's Python)."""
    failed = _FAILED.get(_signature(logits, grad, block_v))
    if failed is not None:
        return f"kernel failed to build: {failed}"
    if logits.stride(1) != 1 or grad.stride(1) != 1:
        return "vocabulary not at unit stride"
    if logits.device.type == "cuda" and logits.data_ptr() % 16:
        return "logits not 16-byte aligned"
    return unsupported_rows(logits.dtype, logits.shape[1], logits.stride(0), logits.device,
                            block_v)


def unsupported_rows(dtype: torch.dtype, vocab: int, row_stride: int, device: torch.device,
                     block_v: int = BLOCK_V) -> str | None:
    """What `unsupported` asks of rows of `vocab` in `dtype` row_stride apart on `device`
    (all of it but the pointers: what a graph's lowering knows)."""
    if ENABLED == "off":
        return "off (CHERENKOV_CE_SMEM=off)"
    return _rows_reason(dtype, vocab, row_stride, device, block_v)


@functools.cache
def _rows_reason(dtype: torch.dtype, vocab: int, row_stride: int, device: torch.device,
                 block_v: int) -> str | None:
    if device.type != "cuda" or torch.version.hip:
        return "not CUDA"
    if torch.cuda.get_device_capability(device)[0] < 8:
        return "before sm_80 (no cp.async)"
    from cherenkov.attention.codegen import gluon_hopper
    if not gluon_hopper():
        return "no Gluon in this Triton"
    # 16-byte copies need Triton to see aligned rows: its launches specialize integers
    # divisible by 16 (and pointers aligned to 16 bytes), so V and the row stride must be
    if vocab % 16 or row_stride % 16:
        return "rows not in 16-byte pieces (V and the row stride multiples of 16)"
    if parts(slices(vocab, block_v)) is None:
        return f"{slices(vocab, block_v)} slices of {block_v} (more than four buffers)"
    need = slices(vocab, block_v) * block_v * dtype.itemsize
    budget = _smem_budget(device.index if device.index is not None
                          else torch.cuda.current_device())
    if need > budget:
        return f"a row takes {need} bytes of shared memory, over {budget}"
    return None


def _signature(logits: torch.Tensor, grad: torch.Tensor, block_v: int,
               num_warps: int = NUM_WARPS) -> tuple:
    return (logits.dtype, grad.dtype, block_v, num_warps, logits.shape[1])


def launch_kwargs(dtype: torch.dtype, vocab: int, write_grad: bool, block_v: int = BLOCK_V,
                  num_warps: int = NUM_WARPS) -> dict:
    """The kernel's constexprs and launch options for rows of `vocab` in `dtype` (a new dict
    each call, from one made per signature)."""
    return dict(_launch_items(dtype, vocab, write_grad, block_v, num_warps))


@functools.cache
def _launch_items(dtype, vocab, write_grad, block_v, num_warps) -> tuple:
    parts_kw = dict(zip(("N1", "N2", "N3", "N4"), parts(slices(vocab, block_v))))
    return tuple(dict(WRITE_GRAD=write_grad, BLOCK_V=block_v, **parts_kw,
                      VEC=16 // dtype.itemsize, WARPS=num_warps, num_warps=num_warps).items())


def compile_job(dtype: torch.dtype, row_stride: int, grad_row_stride: int, vocab: int,
                targets_dtype: torch.dtype, ignore_index: int, write_grad: bool = True):
    """The launch `launch` will make for such rows (the gradient in the logits' dtype, as
    both ops write it), as a job for the compile workers (runtime/parallel_compile.py):
    compiled there while the graph's other work goes on, not at its first run (~1.5-2 s of
    a GPT-2 step's first step on the H200 machine)."""
    from cherenkov.runtime.parallel_compile import Job, tensor_arg
    from cherenkov.templates import cross_entropy_smem_kernel as module
    args = (tensor_arg(dtype), row_stride, tensor_arg(dtype), grad_row_stride,
            tensor_arg(targets_dtype), tensor_arg(torch.float32), vocab, ignore_index)
    return Job(module.__file__, module.__name__, "cross_entropy_rows_smem", args,
               _launch_items(dtype, vocab, write_grad, BLOCK_V, NUM_WARPS))


def launch(logits: torch.Tensor, grad: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor,
           ignore_index: int, write_grad: bool, block_v: int = BLOCK_V,
           num_warps: int = NUM_WARPS) -> bool:
    """Run the Gluon kernel (True), or record why it could not build and return False (the
    caller runs the Triton kernel)."""
    rows, vocab = logits.shape
    try:
        _gluon_kernel()[(rows,)](
            logits, logits.stride(0), grad, grad.stride(0), targets, loss, vocab, ignore_index,
            **launch_kwargs(logits.dtype, vocab, write_grad, block_v, num_warps))
    except Exception as e:  # noqa: BLE001 -- a kernel that does not build: Triton's from now
        why = _FAILED[_signature(logits, grad, block_v, num_warps)] = \
            f"{type(e).__name__}: {e}"[:300]
        log.warning("cherenkov: the shared-memory cross-entropy kernel failed (%s); the Triton "
                    "kernel runs for these calls from now on", why)
        return False
    return True

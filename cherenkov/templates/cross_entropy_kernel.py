"""One Triton kernel for a chunk of logits: loss per row and, in the same launch, d loss/d logits.

One program per row (token). Pass 1 walks the vocabulary in BLOCK_V slices keeping an online
max and sum of exponentials (fp32, whatever the logits' dtype), and picks the target's logit:

    lse  = max + log(sum exp(x - max))          loss = lse - x[target]   (0 if ignored)

Pass 2 (WRITE_GRAD) writes the unscaled gradient

    dlogits = softmax(x) - onehot(target)       (a row of zeros if target == ignore_index)

over the logits in place (the chunk's logits buffer becomes its gradient without another
allocation) or into a buffer of its own; the caller scales by 1/n_valid and grad_output later
(the gradient is linear in that factor). The row is read twice, hoping for L2 the second time;
so pass 2 walks the row last slice first (the slices pass 1 read last are likeliest still
there): 1126 vs 1309 us at 16384 x 50304 and 325 vs 380 us at 8192 x 32000 in one run on the
H200 (bench/results/2026-12-01_ce_grad_variants_reverse_h200_975db70.txt; the forward walk
had measured 1145-1192 and 329 us in earlier runs), 69% and 77% of copy bandwidth. Reading
the row once (the whole row one block, the gradient from the same exponentials) lost: 1515 vs 1156 us at 16384 x 50304 (bench/results/
2026-11-30_ce_grad_variants_h200_243d1cf), one row per SM leaves too little in flight; so
did each row split over 4-16 programs that hold their slice and combine max / sum through
global memory (2.5-5.3 ms, 2026-11-30_ce_split_h200_19c3bb1). What does read it once: each
row copied into shared memory, two rows per SM (Gluon, cross_entropy_smem.py: 831 vs 1121
us); on CUDA that kernel runs wherever it takes the call, this one otherwise (and on the CPU).

A target outside [0, V) (and not ignore_index) reads no logit: its loss and gradient row are
NaN, where eager raises (CPU) or stops the device (CUDA), never a number computed from
memory past the row.
"""
from __future__ import annotations

import functools

import torch

from cherenkov.runtime.loader import load_module

SOURCE = '''"""Cherenkov cross-entropy rows kernel (see cherenkov/templates/cross_entropy_kernel.py)."""
import triton
import triton.language as tl


@triton.jit
def cross_entropy_rows(logits_ptr, stride_row, grad_ptr, grad_stride_row, targets_ptr, loss_ptr,
                       V, ignore_index, WRITE_GRAD: tl.constexpr, BLOCK_V: tl.constexpr,
                       REVERSE: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)               # int64 row offsets: rows x V > 2^31
    base = logits_ptr + row * stride_row
    grad_base = grad_ptr + row * grad_stride_row
    target = tl.load(targets_ptr + row)
    valid = target != ignore_index
    known = (target >= 0) & (target < V)          # a target out of range reads nothing: NaN
    safe_target = tl.where(valid & known, target, 0)
    m = -float("inf")
    s = 0.0
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        # L2 hints: the row stays for its second read, the gradient streams out
        x = tl.load(base + cols, mask=cols < V, other=-float("inf"),
                    eviction_policy="evict_last").to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)   # a slice all -inf: no NaN
        s = s * tl.exp(m - m_ref) + tl.sum(tl.exp(x - m_ref), axis=0)
        m = m_new
    lse = m + tl.log(s)
    target_logit = tl.load(base + safe_target).to(tl.float32)
    loss = tl.where(known, lse - target_logit, float("nan"))
    tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))
    if WRITE_GRAD:
        keep = tl.where(valid, tl.where(known, 1.0, float("nan")), 0.0)
        n_slices = tl.cdiv(V, BLOCK_V)
        for i in range(0, n_slices):
            # REVERSE: last slice first, the one pass 1 read most recently (likeliest in L2)
            start = (n_slices - 1 - i) * BLOCK_V if REVERSE else i * BLOCK_V
            cols = start + tl.arange(0, BLOCK_V)
            x = tl.load(base + cols, mask=cols < V, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            p = tl.exp(x - lse) - tl.where(cols == safe_target, 1.0, 0.0)
            tl.store(grad_base + cols, (p * keep).to(grad_ptr.dtype.element_ty),
                     mask=cols < V, cache_modifier=".cs")
'''


@functools.cache
def _kernel(interpret: bool):
    return load_module(SOURCE, interpret).cross_entropy_rows


def cross_entropy_rows(logits: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor,
                       ignore_index: int, write_grad: bool, grad: torch.Tensor | None = None,
                       block_v: int | None = None, num_warps: int | None = None,
                       reverse: bool = True, smem: bool | None = None) -> None:
    """logits (rows, V), unit column stride; targets (rows,) int; loss (rows,) fp32 (written).
    With write_grad, softmax - onehot (rows of ignored targets: 0) goes to `grad` (rows, V),
    unit column stride, or, without one, over the logits in place. smem (default: where it
    takes the call): the Gluon kernel that reads each row once (cross_entropy_smem.py);
    else this module's, with block_v and num_warps its launch (defaults: the H200's best,
    below) and reverse pass 2's walk (module docstring)."""
    rows, vocab = logits.shape
    if rows == 0:
        return
    grad = logits if grad is None else grad
    targets = targets.contiguous()              # the kernel reads targets[row] at unit stride
    assert logits.stride(1) == 1 and grad.stride(1) == 1, \
        "cross_entropy_rows needs unit stride along the vocabulary"
    assert grad.shape == logits.shape
    interpret = logits.device.type == "cpu"
    if smem is not False and not interpret:
        from cherenkov.templates import cross_entropy_smem
        why = cross_entropy_smem.unsupported(logits, grad)
        if why is None and cross_entropy_smem.launch(logits, grad, targets, loss, ignore_index,
                                                     write_grad):
            return
        if smem:
            raise RuntimeError(f"shared-memory cross-entropy kernel: {why or 'failed'}")
    if interpret:
        from cherenkov.runtime.loader import interpreter_fault
        if interpreter_fault() is not None:      # an interpreter that cannot loop: torch
            _rows_in_torch(logits, targets, loss, ignore_index, write_grad, grad)
            return
    # defaults measured on the H200 (bench/results/2026-11-30_ce_grad_variants_h200_948ef62):
    # and _243d1cf: 8192-wide slices, 8 warps, L2 hints; a persistent grid, pipelined loops
    # and the whole row in one block lost
    if block_v is None:
        block_v = 32 if interpret else min(8192, max(128, 1 << (vocab - 1).bit_length()))
    if num_warps is None:
        num_warps = 1 if interpret else 8
    _kernel(interpret)[(rows,)](logits, logits.stride(0), grad, grad.stride(0), targets, loss,
                                vocab, ignore_index, WRITE_GRAD=write_grad, BLOCK_V=block_v,
                                REVERSE=reverse, num_warps=num_warps, enable_fp_fusion=True)


def _rows_in_torch(logits, targets, loss, ignore_index: int, write_grad: bool, grad) -> None:
    """What the kernel computes, in torch ops (fp32), for CPU tensors where Triton's
    interpreter cannot run it (runtime/loader.interpreter_fault)."""
    x = logits.float()
    vocab = x.shape[1]
    valid = targets != ignore_index
    known = (targets >= 0) & (targets < vocab)
    safe = torch.where(valid & known, targets, 0).long()
    lse = torch.logsumexp(x, dim=1)
    rows = torch.where(known, lse - x.gather(1, safe[:, None])[:, 0], float("nan"))
    loss.copy_(torch.where(valid, rows, 0.0))
    if write_grad:
        keep = torch.where(valid, torch.where(known, 1.0, float("nan")), 0.0)
        p = torch.exp(x - lse[:, None])
        p.scatter_add_(1, safe[:, None], -torch.ones_like(lse)[:, None])
        grad.copy_((p * keep[:, None]).to(grad.dtype))


def reduction_scales(targets: torch.Tensor, ignore_index: int, reduction: str
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss scale, gradient scale), fp32 0-d, for the rows' losses and unscaled gradients:
    1/n_valid for "mean" (eager's loss is NaN when every target is ignored, 0/0, yet its
    gradient is 0), 1 for "sum"."""
    if reduction != "mean":
        one = torch.ones((), device=targets.device, dtype=torch.float32)
        return one, one
    valid = (targets != ignore_index).sum().to(torch.float32)
    return 1.0 / valid, torch.where(valid > 0, 1.0 / valid, 0.0)

"""Lowerings of Cherenkov's own template ops: each is one library call (the fused LM head +
cross-entropy runs cuBLAS matmuls and the cross-entropy rows kernel per chunk; the
cross-entropy with its gradient, that kernel once). On CUDA the rows kernel each call will
launch is queued for the compile workers as the call is lowered."""
from __future__ import annotations

import logging

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.library import library_node
from cherenkov.lowering.registry import lowering
from cherenkov.templates import ce_forward_grad_op, linear_ce_op  # noqa: F401  (define the ops)

log = logging.getLogger("cherenkov")


@lowering(torch.ops.cherenkov.linear_cross_entropy.default, empty_outputs=True)
def _linear_cross_entropy(ctx, *args):
    _queue_rows_kernel(ctx, _rows_of_chunks, *args)
    return library_node(torch.ops.cherenkov.linear_cross_entropy.default, args, {}, ctx.out,
                        "fused LM head + cross-entropy", op=Op.MATMUL)


@lowering(torch.ops.cherenkov.cross_entropy_forward_grad.default)
def _cross_entropy_forward_grad(ctx, *args):
    _queue_rows_kernel(ctx, _rows_of_forward_grad, *args)
    return library_node(torch.ops.cherenkov.cross_entropy_forward_grad.default, args, {},
                        ctx.out, "cross-entropy with its gradient (rows kernel)",
                        op=Op.EXTERN)


def _queue_rows_kernel(ctx, rows_of, *args) -> None:
    """Hand the shared-memory rows kernel this call will launch to the compile workers
    (templates/cross_entropy_smem.py), where it takes the call: else it compiles at the
    graph's first run. Submitted as the graph is lowered and not waited for (a later job):
    waited for with the attention kernels, its ~2 s held up the plan (GPT-2's first step at
    40c962b: "triton compile" 2.0 s), while the graph's first run reaches the loss ~2 s
    later anyway. Never fails the lowering: a kernel missed here compiles at its first
    launch."""
    from cherenkov.templates import cross_entropy_smem
    try:
        rows = rows_of(*args)          # the op's arguments -> its rows (below)
        if rows is None:
            return
        dtype, vocab, row_stride, targets, ignore_index, write_grad = rows
        if cross_entropy_smem.unsupported_rows(dtype, vocab, row_stride, ctx.device):
            return
        ctx.later_jobs.append(cross_entropy_smem.compile_job(
            dtype, row_stride, vocab, vocab, targets.meta.dtype, int(ignore_index), write_grad))
    except Exception as e:  # noqa: BLE001
        log.debug("cherenkov: cross-entropy rows kernel not pre-compiled (%s: %s)",
                  type(e).__name__, e)


def _rows_of_forward_grad(logits, targets, ignore_index, reduction):
    """(dtype, V, row stride, targets, ignore_index, write_grad) of the rows
    ce_forward_grad_op runs (its gradient a new contiguous buffer), None off 2-D."""
    meta = logits.meta
    if len(meta.shape) != 2:
        return None
    vocab = meta.shape[1]
    row_stride = meta.strides[0] if meta.strides[1] == 1 else vocab   # the op's clone
    return meta.dtype, vocab, row_stride, targets, ignore_index, True


def _rows_of_chunks(x, weight, bias, targets, ignore_index, reduction, need_x, need_w, need_b):
    """The same for the fused LM head's chunks: logits (rows, V) in x's dtype, contiguous,
    the gradient over them (linear_cross_entropy.py)."""
    vocab = weight.meta.shape[0]
    return x.meta.dtype, vocab, vocab, targets, ignore_index, bool(need_x or need_w or need_b)

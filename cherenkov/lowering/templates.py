"""Lowerings of Cherenkov's own template ops: each is one library call (the fused LM head +
cross-entropy runs cuBLAS matmuls and its Triton cross-entropy kernel per chunk; the
cross-entropy with its gradient, that kernel once)."""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.library import library_node
from cherenkov.lowering.registry import lowering
from cherenkov.templates import ce_forward_grad_op, linear_ce_op  # noqa: F401  (define the ops)


@lowering(torch.ops.cherenkov.linear_cross_entropy.default, empty_outputs=True)
def _linear_cross_entropy(ctx, *args):
    return library_node(torch.ops.cherenkov.linear_cross_entropy.default, args, {}, ctx.out,
                        "fused LM head + cross-entropy", op=Op.MATMUL)


@lowering(torch.ops.cherenkov.cross_entropy_forward_grad.default)
def _cross_entropy_forward_grad(ctx, *args):
    _queue_rows_kernel(ctx, *args)
    return library_node(torch.ops.cherenkov.cross_entropy_forward_grad.default, args, {},
                        ctx.out, "cross-entropy with its gradient (rows kernel)",
                        op=Op.EXTERN)


def _queue_rows_kernel(ctx, logits, targets, ignore_index, reduction) -> None:
    """Hand the shared-memory rows kernel this call will launch to the compile workers
    (templates/cross_entropy_smem.py), where it takes the call: else it compiles at the
    graph's first run."""
    from cherenkov.templates import cross_entropy_smem
    meta = logits.meta
    if len(meta.shape) != 2:
        return
    vocab = meta.shape[1]
    row_stride = meta.strides[0] if meta.strides[1] == 1 else vocab   # the op's clone
    if cross_entropy_smem.unsupported_rows(meta.dtype, vocab, row_stride, ctx.device):
        return
    ctx.compile_jobs.append(cross_entropy_smem.compile_job(
        meta.dtype, meta.dtype, row_stride, vocab, vocab, targets.meta.dtype, int(ignore_index)))

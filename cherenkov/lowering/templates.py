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
    return library_node(torch.ops.cherenkov.cross_entropy_forward_grad.default, args, {},
                        ctx.out, "cross-entropy with its gradient (Triton rows kernel)",
                        op=Op.EXTERN)

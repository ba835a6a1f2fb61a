"""Lowerings of Cherenkov's own template ops: each is one library call (the fused LM head +
cross-entropy runs cuBLAS matmuls and its Triton cross-entropy kernel per chunk)."""
from __future__ import annotations

import torch

from cherenkov.ir.ops import Op
from cherenkov.lowering.library import library_node
from cherenkov.lowering.registry import lowering
from cherenkov.templates import linear_ce_op  # noqa: F401  (defines the op)


@lowering(torch.ops.cherenkov.linear_cross_entropy.default, empty_outputs=True)
def _linear_cross_entropy(ctx, *args):
    return library_node(torch.ops.cherenkov.linear_cross_entropy.default, args, {}, ctx.out,
                        "fused LM head + cross-entropy", op=Op.MATMUL)

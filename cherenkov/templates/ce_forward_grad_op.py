"""Cross-entropy whose gradient is computed in the forward pass, as one custom op.

    loss = cross_entropy(logits, targets)          logits (N, V), targets (N,)

Unfused, the forward reads the logits once (log-sum-exp per row) and the backward reads them
again to write d loss / d logits: two passes over (N, V) plus the write. But the gradient is

    d loss / d logits = grad_output * factor * (softmax(logits) - onehot(targets))

(factor = 1 / n_valid for "mean", 1 for "sum"), and only the scalar grad_output * factor waits
for the backward. So the forward writes D = softmax - onehot in the same kernel that computes
the loss (`cross_entropy_kernel.py`, which reads each row twice, hoping for L2 the second
time; on CUDA `cross_entropy_smem.py`, which reads it once through shared memory), and the
backward is `D * scalar`, which a matmul reading it absorbs as a scale of its (much smaller)
output (`passes/scale_through_matmul.py`). GPT-2's LM head (16k tokens x 50304)
on the H200: 1.16-1.21 ms in one kernel vs 0.40 + 0.83 in the two unfused ones (0.83 ms
since the row is read once). Memory: D lives from the forward to the backward in place of the
logits the backward would have kept (logits that are also returned are alive anyway).

`capture/ce_forward_grad.py` puts the op in place of `cross_entropy(logits, targets)` when the
logits need a gradient and the LM head + cross-entropy fusion (`linear_ce_op.py`) did not
apply (the logits are returned too, say). The loss matches eager's: fp32 math on the logits
whatever their dtype; D is in the logits' dtype, the gradient eager's cast would give.
"""
from __future__ import annotations

import torch

from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows, reduction_scales


@torch.library.custom_op("cherenkov::cross_entropy_forward_grad", mutates_args=())
def cross_entropy_forward_grad_op(logits: torch.Tensor, targets: torch.Tensor,
                                  ignore_index: int, reduction: str
                                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss fp32 (), D = softmax - onehot (N, V) in the logits' dtype, factor fp32 ()):
    loss and gradient of the cross-entropy, the gradient divided by factor (1/n_valid for
    "mean", 0 when every target is ignored, as eager's gradient; 1 for "sum")."""
    if logits.stride(-1) != 1:       # (contiguous() keeps a (N, 1) view's stride of N)
        logits = logits.clone(memory_format=torch.contiguous_format)
    loss_rows = torch.empty(logits.shape[0], device=logits.device, dtype=torch.float32)
    grad = torch.empty(logits.shape, device=logits.device, dtype=logits.dtype)
    cross_entropy_rows(logits, targets, loss_rows, ignore_index, write_grad=True, grad=grad)
    loss_scale, factor = reduction_scales(targets, ignore_index, reduction)
    return loss_rows.sum() * loss_scale, grad, factor


@cross_entropy_forward_grad_op.register_fake
def _(logits, targets, ignore_index, reduction):
    f32 = dict(device=logits.device, dtype=torch.float32)
    return (torch.empty((), **f32), logits.new_empty(logits.shape), torch.empty((), **f32))


def _setup_context(ctx, inputs, output):
    _, grad, factor = output
    ctx.save_for_backward(grad, factor)


def _backward(ctx, grad_loss, *unused):
    grad, factor = ctx.saved_tensors
    # a 0-d fp32 scale times the logits' dtype stays in that dtype (type promotion)
    return grad * (grad_loss.float() * factor), None, None, None


cross_entropy_forward_grad_op.register_autograd(_backward, setup_context=_setup_context)


def cross_entropy_forward_grad(logits: torch.Tensor, targets: torch.Tensor,
                               ignore_index: int = -100, reduction: str = "mean",
                               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """cross_entropy(logits (N, V), targets (N,)) with its gradient made in the forward; the
    loss in `out_dtype` (default fp32, what autocast's cross-entropy returns)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"logits (N, V) and targets (N,) expected, got "
                         f"{tuple(logits.shape)} and {tuple(targets.shape)}")
    loss, _, _ = cross_entropy_forward_grad_op(logits, targets, ignore_index, reduction)
    return loss.to(out_dtype or torch.float32)

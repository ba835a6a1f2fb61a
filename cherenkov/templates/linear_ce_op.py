"""The fused LM head + cross-entropy (`linear_cross_entropy.py`) as one PyTorch custom op,
so that compiled graphs can carry it: AOTAutograd traces `cherenkov::linear_cross_entropy`
as a single forward op whose gradient outputs are saved for the backward, which only scales
them. `capture/linear_ce.py` puts it in place of `cross_entropy(linear(x, W, b), targets)`.

    loss = fused_linear_cross_entropy(x, W, b, targets, ignore_index, reduction, out_dtype)
"""
from typing import Optional

import torch

from cherenkov.templates.linear_cross_entropy import fused_forward, scale_grads


@torch.library.custom_op("cherenkov::linear_cross_entropy", mutates_args=())
def linear_cross_entropy_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                            targets: torch.Tensor, ignore_index: int, reduction: str,
                            need_x: bool, need_w: bool, need_b: bool
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                       torch.Tensor]:
    """(loss fp32, grad_x (N, H), grad_W (V, H) fp32, grad_b (V,) fp32, factor fp32): the
    gradients of loss / factor; a gradient not needed is an empty tensor."""
    loss, gx, gw, gb, factor = fused_forward(x, weight, bias, targets, ignore_index, reduction,
                                             None, need_x, need_w, need_b)
    def empty(dtype):            # one tensor each: outputs of a custom op must not alias
        return x.new_empty(0, dtype=dtype)
    return (loss, empty(x.dtype) if gx is None else gx, empty(torch.float32) if gw is None
            else gw, empty(torch.float32) if gb is None else gb, factor)


@linear_cross_entropy_op.register_fake
def _(x, weight, bias, targets, ignore_index, reduction, need_x, need_w, need_b):
    hidden, vocab = x.shape[-1], weight.shape[0]
    f32 = dict(device=x.device, dtype=torch.float32)
    gx = x.new_empty((x.numel() // hidden, hidden)) if need_x else x.new_empty(0)
    gw = torch.empty((vocab, hidden), **f32) if need_w else torch.empty(0, **f32)
    gb = torch.empty((vocab,), **f32) if need_b and bias is not None else torch.empty(0, **f32)
    return torch.empty((), **f32), gx, gw, gb, torch.empty((), **f32)


def _setup_context(ctx, inputs, output):
    x, weight, bias = inputs[:3]
    _, gx, gw, gb, factor = output
    ctx.save_for_backward(gx, gw, gb, factor)
    ctx.shapes = (x.shape, x.dtype, weight.dtype, None if bias is None else bias.dtype)
    need_x, need_w, need_b = inputs[6:9]
    ctx.needs = (need_x, need_w, need_b and bias is not None)


def _backward(ctx, grad_loss, *unused):
    grads = [g if need else None for g, need in zip(ctx.saved_tensors, ctx.needs)]
    dx, dw, db = scale_grads(grad_loss, ctx.saved_tensors[3], *grads, *ctx.shapes)
    return dx, dw, db, None, None, None, None, None, None


linear_cross_entropy_op.register_autograd(_backward, setup_context=_setup_context)


def fused_linear_cross_entropy(x, weight, bias, targets, ignore_index: int = -100,
                               reduction: str = "mean", out_dtype=None):
    """cross_entropy(linear(x, weight, bias) viewed as (N, V), targets viewed as (N,)), its
    loss in `out_dtype` (default x's). Under autocast the matmuls take autocast's dtype, as
    the linear it replaces would."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    loss, *_ = linear_cross_entropy_op(
        x, weight, bias, targets.reshape(-1), ignore_index, reduction, x.requires_grad,
        weight.requires_grad, bias is not None and bias.requires_grad)
    return loss.to(out_dtype or x.dtype)

"""Lowerings of PyTorch's flash-attention ops: ATTENTION library nodes that run Cherenkov's
attention kernels (`cherenkov/attention/sdpa_routing.py`) when the call is one they support
(no dropout; a boolean or additive mask is read by the kernels); otherwise PyTorch's own op
runs, with the reason recorded. Also the cherenkov::flex_attention ops (flex_attention and
cherenkov.attention in compiled graphs), whose kernels are queued for the compile workers.
"""
from __future__ import annotations

import logging

import torch

from cherenkov.attention import flex_op  # registers the cherenkov::flex_attention ops
from cherenkov.ir.graph import Node
from cherenkov.ir.ops import Op
from cherenkov.lowering.library import library_node
from cherenkov.lowering.registry import Unsupported, lowering

aten = torch.ops.aten
log = logging.getLogger("cherenkov")


def _meta(t):
    """A meta tensor laid out like IR value `t`."""
    return torch.empty_strided(t.meta.shape, t.meta.strides, dtype=t.meta.dtype, device="meta")


def _queue_compiles(ctx, q, k, v, is_causal, scale, grads=None) -> None:
    """Hand the attention kernels this call launches to the compile workers: a backward
    graph's (`grads` given), or a forward graph's -- and, in training, its backward's, guessing
    contiguous gradients. Never fails the lowering: a kernel missed here compiles at its
    first launch."""
    if ctx.device.type != "cuda":
        return
    from cherenkov.attention.sdpa_routing import compile_jobs
    try:
        qm, km, vm = _meta(q), _meta(k), _meta(v)
        in_backward = grads is not None
        if grads is None and ctx.training:
            B, H, Q_LEN, _ = qm.shape
            grads = {"do": torch.empty_like(qm, memory_format=torch.contiguous_format),
                     "out": torch.empty_like(qm, memory_format=torch.contiguous_format),
                     "lse": torch.empty(B, H, Q_LEN, device="meta")}
        forward, backward = compile_jobs(qm, km, vm, is_causal, scale, ctx.device, grads)
        if in_backward:
            ctx.compile_jobs += backward
        else:
            ctx.compile_jobs += forward
            ctx.later_jobs += backward
    except Exception as e:  # noqa: BLE001
        log.debug("cherenkov: attention kernels not pre-compiled (%s: %s)", type(e).__name__, e)


def _placeholders(fake_out, start: int):
    """Outputs past (out, lse) as the aten op returns them, for a dropout-free call."""
    made = []
    for f in fake_out[start:]:
        if isinstance(f, torch.Tensor):
            made.append(("tensor", tuple(int(s) for s in f.shape), f.dtype))
        else:
            made.append(("value", int(f) if f is not None else None, None))
    return made


def _rebuild(placeholders, device):
    return tuple(torch.empty(shape, dtype=dtype, device=device) if kind == "tensor" else shape
                 for kind, shape, dtype in placeholders)


def _route(ctx, q, k, v, dropout_p, attn_mask=None, is_causal=False):
    if not ctx.route_attention:
        raise Unsupported("attention routing off (config attention='sdpa')")
    if attn_mask is not None and is_causal:
        raise Unsupported("an attention mask and is_causal together")
    from cherenkov.attention.sdpa_routing import supported
    reason = supported(q.shape, k.shape, v.shape, dropout_p, attn_mask, q.dtype, q.meta.device)
    if reason:
        raise Unsupported(f"attention kernels do not take this call: {reason}")


# Its debug-mask output is empty unless asked for: registered to take empty outputs. (Its
# philox seed and offset, "meta" tensors in PyTorch's meta function, reach lower_fx as fake
# tensors on the inputs' device, so the call is not taken for an off-device one;
# tests/lowering/test_registry.py lowers the op traced with fake tensors, and the GPU test
# tests/gpu/test_parallel_compile_gpu.py checks that the forward's kernel is queued.)
@lowering(aten._scaled_dot_product_flash_attention.default, empty_outputs=True)
def _flash_cuda(ctx, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                scale=None):
    _route(ctx, q, k, v, dropout_p)
    if return_debug_mask:
        raise Unsupported("attention debug mask requested")
    _queue_compiles(ctx, q, k, v, is_causal, scale)
    rest = _placeholders(ctx.out, 2)
    device = ctx.device

    def cherenkov_flash_attention(q, k, v):
        from cherenkov.attention.sdpa_routing import forward
        out, lse = forward(q, k, v, is_causal, scale)
        return (out, lse) + _rebuild(rest, device)
    return library_node(cherenkov_flash_attention, (q, k, v), {}, ctx.out, op=Op.ATTENTION)


@lowering(aten._scaled_dot_product_flash_attention_backward.default)
def _flash_cuda_backward(ctx, do, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p,
                         is_causal, philox_seed, philox_offset, scale=None):
    _route(ctx, q, k, v, dropout_p)
    _queue_compiles(ctx, q, k, v, is_causal, scale,
                    {"do": _meta(do), "out": _meta(out), "lse": _meta(lse)})

    def cherenkov_flash_attention_backward(do, q, k, v, out, lse):
        from cherenkov.attention.sdpa_routing import backward
        return backward(do, q, k, v, out, lse, is_causal, scale)
    return library_node(cherenkov_flash_attention_backward, (do, q, k, v, out, lse), {},
                        ctx.out, op=Op.ATTENTION)


@lowering(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash_cpu(ctx, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    _route(ctx, q, k, v, dropout_p, attn_mask, is_causal)

    def cherenkov_flash_attention(q, k, v, attn_mask=None):
        from cherenkov.attention.sdpa_routing import forward
        return forward(q, k, v, is_causal, scale, attn_mask=attn_mask)
    return library_node(cherenkov_flash_attention, _with_mask((q, k, v), attn_mask), {},
                        ctx.out, op=Op.ATTENTION)


@lowering(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _flash_cpu_backward(ctx, do, q, k, v, out, lse, dropout_p, is_causal, attn_mask=None,
                        scale=None):
    _route(ctx, q, k, v, dropout_p, attn_mask, is_causal)

    def cherenkov_flash_attention_backward(do, q, k, v, out, lse, attn_mask=None):
        from cherenkov.attention.sdpa_routing import backward
        return backward(do, q, k, v, out, lse, is_causal, scale, attn_mask=attn_mask)
    return library_node(cherenkov_flash_attention_backward,
                        _with_mask((do, q, k, v, out, lse), attn_mask), {}, ctx.out,
                        op=Op.ATTENTION)


# cherenkov::flex_attention (attention/flex_op.py: torch's flex_attention and
# cherenkov.attention in compiled graphs): run as themselves, their kernels queued for the
# compile workers like the SDPA calls' (a forward graph's, and in training its backward's)


def _queue_flex(ctx, args, backward: bool) -> None:
    if ctx.device.type != "cuda":
        return
    try:
        metas = [_meta(a) if isinstance(a, Node) else
                 [_meta(b) for b in a] if isinstance(a, (list, tuple)) else a for a in args]
        if backward:
            q, k, v, out, lse, dout, dlse, *rest = metas
            blocks, (sb, mb, scale, key) = rest[:8], rest[8:]
            ctx.compile_jobs += flex_op.compile_jobs(key, q, k, v, blocks, sb, mb, scale,
                                                     ctx.device, (out, lse, dout, dlse))[1]
            return
        q, k, v, *rest = metas
        blocks, (sb, mb, scale, key) = rest[:8], rest[8:]
        grads = None
        if ctx.training:            # the backward's, guessing contiguous gradients
            like = torch.empty_like(q, memory_format=torch.contiguous_format)
            grads = (like, torch.empty(q.shape[:3], device="meta"), like, None)
        forward, later = flex_op.compile_jobs(key, q, k, v, blocks, sb, mb, scale, ctx.device,
                                              grads)
        ctx.compile_jobs += forward
        ctx.later_jobs += later
    except Exception as e:  # noqa: BLE001 -- a kernel missed here compiles at its first launch
        log.debug("cherenkov: flex kernels not pre-compiled (%s: %s)", type(e).__name__, e)


@lowering(torch.ops.cherenkov.flex_attention.default)
def _flex(ctx, *args):
    _queue_flex(ctx, args, backward=False)
    return library_node(ctx.target, args, {}, ctx.out, op=Op.ATTENTION)


@lowering(torch.ops.cherenkov.flex_attention_backward.default)
def _flex_backward(ctx, *args):
    _queue_flex(ctx, args, backward=True)
    return library_node(ctx.target, args, {}, ctx.out, op=Op.ATTENTION)


def _with_mask(args: tuple, attn_mask) -> tuple:
    return args if attn_mask is None else args + (attn_mask,)


# The memory-efficient ops: what SDPA runs on CUDA with an attention mask (turned additive,
# attn_bias). Its lse is (B, H, Q rounded up to 32) when asked for, else (B, H, 0); its output
# is laid out (B, Q, H, D) (the runtime relays ours to that).
@lowering(aten._scaled_dot_product_efficient_attention.default, empty_outputs=True)
def _efficient(ctx, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
               scale=None):
    _route(ctx, q, k, v, dropout_p, attn_bias, is_causal)
    width = int(ctx.out[1].shape[-1])
    rest = _placeholders(ctx.out, 2)

    def cherenkov_efficient_attention(q, k, v, attn_bias=None):
        from cherenkov.attention.sdpa_routing import forward
        out, lse = forward(q, k, v, is_causal, scale, attn_mask=attn_bias)
        lse = torch.nn.functional.pad(lse, (0, width - lse.shape[-1]))   # to width, or to 0
        return (out, lse) + _rebuild(rest, q.device)
    return library_node(cherenkov_efficient_attention, _with_mask((q, k, v), attn_bias), {},
                        ctx.out, op=Op.ATTENTION)


@lowering(aten._scaled_dot_product_efficient_attention_backward.default, empty_outputs=True)
def _efficient_backward(ctx, do, q, k, v, attn_bias, out, lse, philox_seed, philox_offset,
                        dropout_p, grad_input_mask, is_causal=False, scale=None):
    _route(ctx, q, k, v, dropout_p, attn_bias, is_causal)
    if attn_bias is not None and grad_input_mask[3]:
        raise Unsupported("attention mask gradient requested")
    if lse.shape[-1] < q.shape[2]:
        raise Unsupported("no logsumexp saved")
    Q_LEN = q.shape[2]

    def cherenkov_efficient_attention_backward(do, q, k, v, out, lse, attn_bias=None):
        from cherenkov.attention.sdpa_routing import backward
        dq, dk, dv = backward(do, q, k, v, out, lse[..., :Q_LEN], is_causal, scale,
                              attn_mask=attn_bias)
        return dq, dk, dv, None
    return library_node(cherenkov_efficient_attention_backward,
                        _with_mask((do, q, k, v, out, lse), attn_bias), {}, ctx.out,
                        op=Op.ATTENTION)

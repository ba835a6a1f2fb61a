"""SDPA calls found in captured graphs, run by Cherenkov's attention kernels.

PyTorch's flash-attention aten ops (forward and backward, CUDA and CPU) and its
memory-efficient ones (CUDA: what SDPA calls with an attention mask) are replaced one for
one: same arguments, same outputs (the output, the natural-log row logsumexp, and empty
placeholders for the RNG state that dropout-free attention never uses), so a forward run by
us and a backward run by PyTorch (or the reverse) still agree. Causal, unmasked, or with an
explicit mask -- boolean (a mask_mod reading it) or additive (a score_mod adding it, and a
mask_mod where it is -inf, so tiles it masks whole are skipped); no dropout.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from . import launch, launch_bwd
from .block_mask import DEFAULT_BLOCK, block_mask as build_block_mask
from .codegen import compile_mods, interpreter_dots_exact, kernel_mode
from .mods import causal
from .shape_cache import ShapeCache

_PLANS = ShapeCache(64)            # per shape: the plan and its block mask


def supported(q_shape, k_shape, v_shape, dropout_p: float, attn_mask=None, dtype=None,
              device=None) -> str | None:
    """None if our kernels take this call, else the reason they don't."""
    if device is not None and device.type == "cuda" and dtype not in (torch.bfloat16,
                                                                      torch.float16):
        return "fp32 on the GPU (the tensor-core kernels are tuned for bf16/fp16)"
    if device is not None and device.type != "cuda" and dtype is not None \
            and not interpreter_dots_exact(dtype):        # a graph keeps PyTorch's op then
        return f"{dtype} on the CPU interpreter"
    if dropout_p:
        return "dropout"
    if device is not None:       # e.g. CPU without a working interpreter: PyTorch's op stays
        mode, why = kernel_mode(device)
        if mode is None:
            return why
    if len(q_shape) != 4 or k_shape != v_shape or q_shape[-1] != k_shape[-1]:
        return "shapes"
    if attn_mask is not None:
        shape = tuple(attn_mask.shape)
        full = (q_shape[0], q_shape[1], q_shape[2], k_shape[2])
        if len(shape) > 4 or any(s not in (1, f) for s, f in zip(shape[::-1], full[::-1])):
            return f"attention mask of shape {shape} for scores {full}"
        if not (attn_mask.dtype == torch.bool or attn_mask.dtype.is_floating_point):
            return f"attention mask of dtype {attn_mask.dtype}"
    if q_shape[1] != k_shape[1]:
        return "heads (GQA arrives expanded)"
    if q_shape[-1] > 256:
        return "head dim above 256"
    return None


def _plan(q, k, is_causal: bool, scale: float | None, device=None) -> launch.Plan:
    B, H, Q_LEN, D = q.shape
    KV_LEN = k.shape[2]
    device = q.device if device is None else device
    mode, reason = kernel_mode(device)
    if mode is None:
        raise RuntimeError(f"attention kernels unavailable: {reason}")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    key = (B, H, Q_LEN, KV_LEN, is_causal, scale, str(device), mode)
    plan = _PLANS.get(key)
    if plan is None:
        mask_mod = causal if is_causal else None
        traced, kernels = compile_mods(None, mask_mod, interpret=mode == "interpret")
        mask = build_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, DEFAULT_BLOCK, device)
        plan = _PLANS.put(key, launch.Plan(kernels, traced, mask, scale, mode == "interpret",
                                           coarsen=True))
    return plan


def _narrowed(attn_mask: torch.Tensor, B: int, H: int, Q_LEN: int, KV_LEN: int):
    """(mask as a contiguous (B|1, H|1, Q|1, KV|1) tensor, which dims it varies over): dims
    it broadcasts over are kept at size 1, so a (Q, KV) mask is never expanded."""
    m = attn_mask.detach().expand(B, H, Q_LEN, KV_LEN)
    kept = tuple(m.shape[d] == 1 or m.stride(d) != 0 for d in range(4))
    return m[tuple(slice(None) if k else slice(0, 1) for k in kept)].contiguous(), kept


def _mods(m: torch.Tensor, kept: tuple):
    """(score_mod, mask_mod) reading narrowed mask `m` (dims not `kept` read at 0)."""
    def at(b, h, q_idx, kv_idx):
        return m[tuple(i if k else 0 for i, k in zip((b, h, q_idx, kv_idx), kept))]

    if m.dtype == torch.bool:
        return None, at

    def add_mask(score, b, h, q_idx, kv_idx):
        return score + at(b, h, q_idx, kv_idx)

    def finite(b, h, q_idx, kv_idx):
        return at(b, h, q_idx, kv_idx) != float("-inf")
    return add_mask, finite


def mask_mods(attn_mask: torch.Tensor, B: int, H: int, Q_LEN: int, KV_LEN: int):
    """(score_mod, mask_mod, (B', H')) reading an SDPA attention mask: a boolean one keeps
    the pairs it is True at; an additive one is added to the scaled scores, and pairs at
    -inf are masked (whole tiles of them skipped). Dims the mask broadcasts over are read at
    0, so a (Q, KV) mask is never expanded to (B, H, Q, KV); (B', H') are the batch and heads
    it varies over (1 where it broadcasts), all its block mask needs."""
    m, kept = _narrowed(attn_mask, B, H, Q_LEN, KV_LEN)
    return (*_mods(m, kept), (B if kept[0] else 1, H if kept[1] else 1))


# (mask dtype, dims it varies over, kernel mode) -> (traced mods, kernels): the kernels read
# the mask through run-time strides, so one compile serves every mask of that form
_MASK_KERNELS: dict[tuple, tuple] = {}


def _masked_plan(q, k, attn_mask, scale) -> tuple[launch.Plan, list]:
    """A plan for one masked call and the captured tensors its kernels read: the mask is
    data, so its block mask is built every call, but the kernels are traced and rendered once
    per form of mask."""
    B, H, Q_LEN, D = q.shape
    mode, reason = kernel_mode(q.device)
    if mode is None:
        raise RuntimeError(f"attention kernels unavailable: {reason}")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    m, kept = _narrowed(attn_mask, B, H, Q_LEN, k.shape[2])
    key = (m.dtype, kept, mode)
    if key not in _MASK_KERNELS:
        stand_in = torch.zeros((1, 1, 1, 1), dtype=m.dtype)      # strides come at run time
        _MASK_KERNELS[key] = compile_mods(*_mods(stand_in, kept), interpret=mode == "interpret")
    traced, kernels = _MASK_KERNELS[key]
    mask = build_block_mask(_mods(m, kept)[1], B if kept[0] else 1, H if kept[1] else 1,
                            Q_LEN, k.shape[2], DEFAULT_BLOCK, q.device)
    return launch.Plan(kernels, traced, mask, scale, mode == "interpret"), [m]


def _plan_and_captured(q, k, is_causal, scale, plan, attn_mask) -> tuple[launch.Plan, list]:
    if attn_mask is not None:
        return _masked_plan(q, k, attn_mask, scale)
    return plan or _plan(q, k, is_causal, scale), []


def forward(q, k, v, is_causal: bool, scale=None, plan=None, attn_mask=None):
    """(out, natural-log lse of shape (B, H, Q))."""
    q, k, v = launch.unit_stride(q), launch.unit_stride(k), launch.unit_stride(v)
    plan, captured = _plan_and_captured(q, k, is_causal, scale, plan, attn_mask)
    out, lse2 = launch.forward(plan, q, k, v, captured)
    return out, launch.natural_lse(lse2)


def backward(do, q, k, v, out, lse, is_causal: bool, scale=None, plan=None, attn_mask=None):
    q, k, v = launch.unit_stride(q), launch.unit_stride(k), launch.unit_stride(v)
    lse2 = torch.where(torch.isinf(lse), float("inf"), lse / launch.LN2)   # back to the kernels' log2
    plan, captured = _plan_and_captured(q, k, is_causal, scale, plan, attn_mask)
    dq, dk, dv, _ = launch_bwd.backward(plan, q, k, v, out.contiguous(), lse2.contiguous(),
                                        do, captured, [False] * len(captured))
    return dq, dk, dv


def compile_jobs(q, k, v, is_causal: bool, scale, device,
                 grads: dict | None = None) -> tuple[list, list]:
    """(forward jobs, backward jobs): the kernel launches `forward` (and, with `grads`,
    `backward`) will make for tensors laid out like q, k, v (meta tensors) on `device`, as
    compile jobs for the worker pool (see runtime/parallel_compile.py): the attention kernels
    are the costliest to compile, and without this they compiled at the first run, one after
    another. `grads` = {"do", "out", "lse"}: meta tensors laid out as the backward gets them.
    The plan (and its block mask) built here on `device` is the one the run uses."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():        # the plan's block mask is real, kept for the run
        plan = _plan(q, k, is_causal, scale, device)
    rec = launch.Recorder()
    stand_in = dataclasses.replace(plan, kernels=rec)
    forward(q, k, v, is_causal, scale, plan=stand_in)
    n_forward = len(rec.calls)
    if grads is not None:
        backward(grads["do"], q, k, v, grads["out"], grads["lse"], is_causal, scale,
                 plan=stand_in)
    jobs = launch.recorded_jobs(plan.kernels, rec.calls)
    return jobs[:n_forward], jobs[n_forward:]

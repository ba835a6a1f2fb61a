"""Launch the attention backward: dQ, dK, dV and captured tensors' gradients.

The launches of a call are decided once per call signature (`_backward_decision`, kept on
the plan: memo.py): the dQ kernel (the Gluon one where launch_gluon_bwd takes it, else
Triton's) and the dK/dV kernel, or -- for score mods, DS_STORE -- the dK/dV kernel storing
dS and a kernel multiplying it by K, in chunks of kv heads. Tensors as in launch.py.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from . import launch, launch_gluon_bwd, memo
from .block_mask import BlockMask
from .kernel_launch import descriptor, descriptor_class, launcher
from .tile_terms import rows_from_offsets
from .launch import (Launch, Plan, _backward_tma, _contiguous, _dot_precision, _gluon_tiles,
                     _mask_strides, _mode_for, _query_head_group, capture_args, head_group,
                     tma_mode, triton_cdiv)
from .tuning import choose_config, next_power_of_2


@dataclass
class Backward:
    """A backward's launches as decided for a call signature (_backward_decision)."""
    grad_ks: tuple                   # captured tensors getting gradients (grad_indices)
    delta: Launch | None             # delta's own kernel, or None: the dQ kernel computes it
    gluon_dq: tuple | None           # (*launch._gluon_tiles, the kernel's constexprs)
    dq: Launch | None                # the Triton dQ kernel (also if the Gluon one fails)
    dkdv: Launch | None              # all heads at once (no stored dS)
    ds_elements: int = 0             # stored dS: its buffer's elements, and per chunk of kv
    chunks: tuple = ()               # heads (head0, heads, dK/dV Launch, dQ-from-dS Launch)


def _backward_decision(plan: Plan, q, k, v, o, do, no_lse_grad: bool, grad_ks: tuple
                       ) -> Backward:
    B, H, Q_LEN, D = q.shape
    HK = k.shape[1]
    gluon_tiles = None if grad_ks or not launch_gluon_bwd.usable(plan, q, k, o) \
        else _gluon_tiles(plan, q, k, v, do)
    chunk = _ds_chunk(plan, q, k, grad_ks, gluon_tiles is not None)
    mode = _mode_for(plan, _backward_tma())
    # delta = rowsum(dO * O): computed by the dQ kernel, which runs first (one launch and a
    # pass over dO fewer), unless an lse gradient joins it or dQ comes from stored dS (its
    # own kernel, then a subtraction)
    fused = no_lse_grad and not chunk
    delta = None
    if not fused:
        bm = 32 if plan.interpret else 64
        delta = Launch((triton_cdiv(Q_LEN, bm), B * H),
                       (*o.stride()[:3], *do.stride()[:3], Q_LEN, H),
                       dict(D=D, D_PAD=max(16, next_power_of_2(D)), BLOCK_M=bm), {})
    if chunk:
        ds_elements = chunk * (H // HK) * _ds_head_elements(plan.mask, Q_LEN, k.shape[2])
        chunks = tuple((head0, heads, _dkdv_decision(plan, q, k, v, do, mode, True, head0, heads),
                        _dq_ds_decision(plan, q, k, v, do, mode, head0, heads))
                       for head0 in range(0, B * HK, chunk)
                       for heads in (min(chunk, B * HK - head0),))
        return Backward(grad_ks, delta, None, None, None, ds_elements, chunks)
    gluon_dq = None if gluon_tiles is None else \
        (*gluon_tiles, launch_gluon_bwd.constexprs(plan, D, fused))
    return Backward(grad_ks, delta, gluon_dq,
                    _dq_decision(plan, q, k, v, do, o, fused, mode, grad_ks),
                    _dkdv_decision(plan, q, k, v, do, mode, False, 0, B * HK))


def backward(plan: Plan, q, k, v, o, lse, do, captured, needs_capture_grad, dlse=None):
    """dq, dk, dv and the captured tensors' gradients (None where not needed). `dlse`: a
    gradient reaching the natural-log lse, (B, H, Q); d lse / d score = p, so it joins the
    row term: dS = p * (dP - (delta - dlse))."""
    do = do if do.stride(-1) == 1 else do.contiguous()
    caps = capture_args(captured, q.device)
    d = plan.remember("bwd", _backward_decision, q, k, v, o, do,
                      extra=(dlse is None, tuple(plan.traced.grad_indices())))
    delta = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if d.delta is not None:
        launcher(plan.kernels._attn_bwd_delta)(d.delta.grid, (o, do, delta, *d.delta.tail),
                                               d.delta.constexprs, (delta,))
        if dlse is not None:
            delta = delta - dlse.to(delta.dtype)

    grad_bufs = {k_: torch.zeros(captured[k_].numel(), device=q.device, dtype=torch.float32)
                 for k_ in d.grad_ks}
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    if d.chunks:
        dq = _stored_ds_backward(plan, d, q, k, v, do, lse, delta, caps, dk, dv)
    else:
        dq = None
        if d.gluon_dq is not None:
            m, strides, group, constexprs = d.gluon_dq
            dq = launch_gluon_bwd.guarded_dq(plan, m, q, k, v, do, o, lse, delta, caps,
                                             strides, group, constexprs)
        if dq is None:
            dq = _dq_kernel(plan, d.dq, q, k, v, do, o, lse, delta, caps, d.grad_ks, grad_bufs)
        _dkdv_kernel(plan, d.dkdv, q, k, v, do, lse, delta, caps, dk, dv)

    capture_grads = []
    for k_, t in enumerate(captured):
        if k_ in grad_bufs and needs_capture_grad[k_]:
            capture_grads.append(grad_bufs[k_].view(t.shape).to(t.dtype))
        else:
            capture_grads.append(None)
    return dq, dk, dv, capture_grads


# dQ from stored dS (kernels_src DS_STORE, _attn_bwd_dq_ds): the dK/dV kernel also stores
# each tile's dS, in the inputs' dtype (an asynchronous TMA store where the backward reads
# through descriptors), and a second kernel multiplies it by K -- one matmul per tile --
# where a dQ kernel recomputes S, the score mod and dP (three matmuls). At B=4 H=16 S=4096
# D=128 on the H200 the store costs the dK/dV kernel about what the recomputation costs the
# dQ kernel (causal: dK/dV 0.98 -> 1.23 ms, dQ 0.73 -> 0.38): forward+backward ALiBi 3.5-5%
# faster, softcap 4.5-6%, while plain masks stay within -3..+3% (causal 0.97-0.98x)
# (bench/results/2026-12-01_attention_dq_ds_variants_*). So DS_STORE "auto" takes it for
# score mods only -- but for those whose derivative is one number per (b, h) where the Gluon
# dQ takes the call: with it ALiBi ran 2.306 ms vs stored dS's 2.369 (in 1-4 chunks
# 2.348-2.374), peak 0.69 vs 1.19 GiB (2026-12-02_attention_ds_budget_h200_4eb4df9.md); a
# derivative varying per score (softcap) spills in that kernel's registers
# (2026-12-02_attention_gluon_sm90_cpu_8899ad0.md) and keeps stored dS. "on" always, "off"
# never. Score mods with captured-tensor gradients keep
# the dQ kernel (it computes those). At most DS_BUDGET bytes of dS are held: kv heads go in
# chunks (dK/dV, then dQ, per chunk) whose dense (Q blocks x KV blocks) tiles fit; a head
# that does not fit alone takes the dQ kernel. Not kept: the next chunk's dK/dV beside this
# chunk's dQ on a second stream (no faster on the GPU, more host time: ..._overlap_...md),
# and adding dS K into an fp32 dQ from the dK/dV kernel (FlashAttention-3's way: 0.49-0.63x,
# pointer atomics or TMA reduce-adds, 2026-12-01_attention_dq_acc_variants_h200_578d88e.md).
DS_STORE = "auto"
DS_BUDGET = 512 << 20


# The score's key-linear terms and linear row terms out of the dK/dV kernel's loop over query
# tiles (tile_terms.py, rows_from_offsets; kernels_bwd_src._dkdv_update) -- False: per score.
# Not taken: ALiBi's dK/dV kernel ran 1.161-1.168 ms with them out against 1.102-1.129 per
# score (H200, B=4 H=16 S=4096 D=128 causal, one process; bench/results/2026-12-02_attention_
# gluon_kernels_alibi_h200_a857cb5.md): compiled for sm_90 its two vectors spill (145 local
# loads in the kernel against 87: ..._attention_tile_terms_sass_cpu_e59742c.md), where the
# per-score form's extra arithmetic costs less
DKDV_TILE_TERMS = False
memo.register(sys.modules[__name__], ("DS_STORE", "DS_BUDGET", "DKDV_TILE_TERMS"))


def _stored_ds_backward(plan, d: Backward, q, k, v, do, lse, delta, caps, dk, dv):
    """dK, dV (into dk, dv) and the returned dQ through stored dS, a chunk of kv heads at a
    time (d.chunks); every chunk's launches read the same descriptors."""
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    ds = torch.empty(d.ds_elements, device=q.device, dtype=q.dtype)
    _, _, dkdv, dq_ds = d.chunks[0]
    qd, dod = launch._descriptors(dkdv.tma, (q, dkdv.block_m), (do, dkdv.block_m))
    dsd = _ds_descriptor(ds, dkdv) if dkdv.tma == 2 else None
    kd, = launch._descriptors(dq_ds.tma, (k, dq_ds.block_n))
    dsd_q = _ds_descriptor(ds, dq_ds) if dq_ds.tma else None
    for head0, heads, dkdv, dq_ds in d.chunks:
        _dkdv_kernel(plan, dkdv, q, k, v, do, lse, delta, caps, dk, dv, ds, (qd, dod, dsd))
        _dq_ds_kernel(plan, dq_ds, k, dq, ds, (dsd_q, kd), head0, heads)
    return dq


def _ds_head_elements(mask: BlockMask, Q_LEN: int, KV_LEN: int) -> int:
    """Elements of one query head's stored dS: every (Q block, KV block) sparse tile."""
    sm, sn = mask.block
    return triton_cdiv(Q_LEN, sm) * sm * triton_cdiv(KV_LEN, sn) * sn


def _ds_chunk(plan: Plan, q, k, grad_ks, gluon_dq: bool) -> int:
    """kv heads per stored-dS chunk, 0 for a dQ kernel (`gluon_dq`: the Gluon one takes the
    call)."""
    if DS_STORE not in ("auto", "on", "off"):
        raise ValueError(f"DS_STORE={DS_STORE!r}: expected 'auto', 'on' or 'off'")
    auto_off = not plan.has_score_mod or gluon_dq and not plan.traced.score_grad_varies
    if DS_STORE == "off" or (DS_STORE == "auto" and auto_off) or grad_ks or DS_BUDGET <= 0:
        return 0
    B, H, Q_LEN, _ = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    per_kv_head = (H // HK) * _ds_head_elements(plan.mask, Q_LEN, KV_LEN) * q.element_size()
    if per_kv_head == 0:           # an empty sequence: nothing to store
        return 0
    heads = min(B * HK, DS_BUDGET // per_kv_head)
    if 0 < heads < B * HK:         # whole groups of the dK/dV kernel's program order
        group = head_group(B * HK, 2 * (H // HK) * Q_LEN * q.shape[-1] * q.element_size(),
                           plan.mask.device, plan.interpret)
        if group <= heads:
            heads -= heads % group
    return heads


def _dq_decision(plan, q, k, v, do, o, fused: bool, backward_mode: str, grad_ks) -> Launch:
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    m = plan.mask
    cfg = choose_config("dq", D, q.dtype, m.block, plan.interpret)
    n_m = triton_cdiv(Q_LEN, cfg.block_m)
    tma = tma_mode(q, k, v, do, cfg.block_m, cfg.block_n, plan.interpret, backward_mode)
    return Launch.tiled(
        (n_m * B * H,),
        (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
         *_contiguous(q).stride()[:3], *o.stride()[:3],
         *_mask_strides(m.kv_num_blocks, m.kv_indices),
         plan.scale, Q_LEN, KV_LEN, H, H // HK, n_m, _query_head_group(plan, q, k)),
        cfg, m, tma, D, EVEN_M=Q_LEN % cfg.block_m == 0, EVEN_N=KV_LEN % m.block[1] == 0,
        HAS_SCORE_MOD=plan.has_score_mod, HAS_CAPTURE_GRADS=bool(grad_ks), FUSED_DELTA=fused,
        DOT_PREC=_dot_precision(q.dtype), TMA=tma)


def _dq_kernel(plan, d: Launch, q, k, v, do, o, lse, delta, caps, grad_ks, grad_bufs
               ) -> torch.Tensor:
    """dQ by its own kernel (and delta, when d says FUSED_DELTA)."""
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    m = d.mask
    kd, vd = launch._descriptors(d.tma, (k, d.block_n), (v, d.block_n))
    launcher(plan.kernels._attn_bwd_dq)(
        d.grid,
        (q, k, v, do, dq, lse, delta, o, *caps, *(grad_bufs[k_] for k_ in grad_ks),
         m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices, kd, vd,
         *d.tail),
        d.constexprs,
        () if grad_ks else (dq, delta) if d.constexprs["FUSED_DELTA"] else (dq,), **d.options)
    return dq


def _dkdv_decision(plan, q, k, v, do, backward_mode: str, store_ds: bool, head0: int,
                   heads: int) -> Launch:
    """dK and dV of kv heads head0 .. head0 + heads; `store_ds`: their query heads' dS tiles
    stored too (DS_STORE)."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    m = plan.mask
    cfg = choose_config("dkdv", D, q.dtype, m.block, plan.interpret)
    tma = tma_mode(q, k, v, do, cfg.block_m, cfg.block_n, plan.interpret, backward_mode)
    n_n = triton_cdiv(KV_LEN, cfg.block_n)
    group = head_group(heads, 2 * (H // HK) * Q_LEN * D * q.element_size(), plan.mask.device,
                       plan.interpret)
    out = _contiguous(k)
    return Launch.tiled(
        (n_n * heads,),
        (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
         *out.stride()[:3], *out.stride()[:3], *_mask_strides(m.q_num_blocks, m.q_indices),
         plan.scale, Q_LEN, KV_LEN, H, HK, H // HK, n_n, group, head0),
        cfg, m, tma, D, EVEN_M=Q_LEN % m.block[0] == 0, EVEN_N=KV_LEN % cfg.block_n == 0,
        HAS_SCORE_MOD=plan.has_score_mod, DOT_PREC=_dot_precision(q.dtype), TMA=tma,
        DP_FIRST=plan.traced.score_grad_varies, DS_STORE=store_ds,
        TILE_TERMS=DKDV_TILE_TERMS and rows_from_offsets(plan.traced))


def _dkdv_kernel(plan, d: Launch, q, k, v, do, lse, delta, caps, dk, dv, ds=None,
                 descriptors=None) -> None:
    """dK and dV into dk, dv as d decides; with `ds`, the dS tiles stored there too
    (`descriptors`: q's, dO's and ds's, made once for every chunk)."""
    m = d.mask
    qd, dod, dsd = descriptors or (*launch._descriptors(d.tma, (q, d.block_m),
                                                        (do, d.block_m)), None)
    launcher(plan.kernels._attn_bwd_dkdv)(
        d.grid,
        (q, k, v, do, dk, dv, lse, delta, *caps,
         m.q_num_blocks, m.q_indices, m.full_q_num_blocks, m.full_q_indices, qd, dod, ds, dsd,
         *d.tail),
        d.constexprs, (dk, dv), **d.options)


def _ds_descriptor(ds: torch.Tensor, d: Launch):
    """The stored dS through TMA: its 2-D view of rows of SPARSE_M query columns (the row rule
    both kernels address it by), in (key rows, query columns) tiles of d's config."""
    flat = ds.view(-1, d.mask.block[0])
    return descriptor(descriptor_class(), flat, flat.shape, flat.stride(), (d.block_n, d.block_m))


def _dq_ds_decision(plan, q, k, v, do, backward_mode: str, head0: int, heads: int) -> Launch:
    """dQ of the query heads of kv heads head0 .. head0 + heads from their stored dS."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    m = plan.mask
    cfg = choose_config("dq_ds", D, q.dtype, m.block, plan.interpret)
    n_m = triton_cdiv(Q_LEN, cfg.block_m)
    tma = tma_mode(q, k, v, do, cfg.block_m, cfg.block_n, plan.interpret, backward_mode)
    tma = 2 if tma == 2 else 0
    rows = heads * (H // HK)
    group = head_group(rows, KV_LEN * D * k.element_size(), plan.mask.device, plan.interpret)
    return Launch.tiled(
        (n_m * rows,),
        (*k.stride()[:3], *_contiguous(q).stride()[:3],
         *_mask_strides(m.kv_num_blocks, m.kv_indices),
         plan.scale, Q_LEN, KV_LEN, H, H // HK, n_m, group, head0),
        cfg, m, tma, D, EVEN_N=KV_LEN % m.block[1] == 0, DOT_PREC=_dot_precision(q.dtype),
        TMA=tma)


def _dq_ds_kernel(plan, d: Launch, k, dq, ds, descriptors, head0: int, heads: int) -> None:
    """dQ of the query heads of kv heads head0 .. head0 + heads (d's) from their stored dS;
    `descriptors`: ds's and k's."""
    m = d.mask
    dsd, kd = descriptors
    launcher(plan.kernels._attn_bwd_dq_ds)(
        d.grid,
        (k, dq, ds, m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices,
         dsd, kd, *d.tail),
        d.constexprs, (dq,), **d.options)

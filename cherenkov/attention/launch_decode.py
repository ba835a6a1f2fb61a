"""Launch the split-KV decode kernels: a few query rows (decoding: 1-16) over a long KV.

Each (batch, kv head, split) program reduces one slice of the KV blocks for all the kv head's
query rows (kernels_src `_attn_decode_split`), a second kernel combines the slices by their LSE
(`_attn_decode_combine`). An unmasked call walks every block (`DENSE`, no block mask). Shares
launch.py's Plan, argument helpers and launcher.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from cherenkov import hw

from .block_mask import EMPTY, FULL, BlockMask
from .kernel_launch import launcher
from .launch import Plan, _dot_precision, capture_args, triton_cdiv
from .tuning import choose_config, next_power_of_2


def _decode_blocks(mask: BlockMask, B: int, H: int, HK: int):
    """Per (b, kv head): the kv blocks any query head of the group needs, and if all see them whole."""
    st = mask.state.expand(B, H, *mask.state.shape[2:])            # (B, H, nQ, nKV)
    st = st.reshape(B, HK, -1, st.shape[-1])                        # (B, HK, G * nQ, nKV)
    needed = (st != EMPTY).any(2)
    full = (st == FULL).all(2)
    num = needed.sum(-1, dtype=torch.int32).contiguous()
    idx = torch.sort((~needed).to(torch.int8), dim=-1, stable=True).indices
    full = full.gather(-1, idx).to(torch.int8).contiguous()
    return num, idx.to(torch.int32).contiguous(), full


class _Dense:
    """The block mask of an unmasked decode call: the kernel walks every KV block (DENSE), so
    a KV cache growing by a token per call builds no block mask and no lists per length."""
    block = (128, 64)
    mask_mod = None
    exact = False


DENSE = _Dense()


def _decode_splits(cfg, programs_per_split: int, d_pad: int, rows: int, elem: int, dev) -> int:
    """KV splits for one wave of programs: as many as fit on the SMs at once (by shared memory:
    each pipeline stage holds a K and a V tile) over the (batch, kv head) pairs. On the H200
    (B=8, 4 kv heads, KV=32k, D=128) 8 splits (256 programs, 2 per SM) read K and V at 92% of
    the copy bandwidth where 17 splits (4 x SMs programs: a second, nearly empty wave) read at
    83%; 12, 24 and 33 splits 88-91% (bench/results/2026-11-30_decode_splits_h200_4270a78.md)."""
    per_cta = (cfg.num_stages * 2 * cfg.block_n + rows) * d_pad * elem
    slots = max(1, int(dev.sram_per_sm_bytes // per_cta)) * dev.sm_count
    return max(1, slots // programs_per_split)


@dataclass
class _DecodeSetup:
    """What a decode call derives from its shapes, kept per (mask, kernels, shapes, strides)."""
    cfg: object
    lists: tuple | None     # (num, idx, full) kv block lists per (b, kv head); DENSE: None
    n_kv: int               # kv blocks (the lists' row length)
    num_splits: int
    per_split: int
    split_const: dict
    combine_const: dict


def _decode_setup(plan: Plan, q, k, v, num_splits) -> _DecodeSetup:
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    G = H // HK
    m = plan.mask
    cfg = choose_config("decode", D, q.dtype, m.block, plan.interpret)
    D_PAD = max(16, next_power_of_2(D))
    ROWS = max(16, next_power_of_2(G * Q_LEN))
    if m is DENSE:              # no lists: the kernel walks every block
        n_kv = triton_cdiv(KV_LEN, m.block[1])
        blocks = None
    else:
        lists = m.__dict__.setdefault("_decode_lists", {})     # per mask: once per (B, H, HK)
        if (B, H, HK) not in lists:
            lists[(B, H, HK)] = _decode_blocks(m, B, H, HK)
        blocks = lists[(B, H, HK)]
        n_kv = blocks[1].shape[-1]
    if num_splits is None:
        num_splits = 2 if plan.interpret else _decode_splits(
            cfg, B * HK, D_PAD, ROWS, q.element_size(), hw.current_device(q.device))
    num_splits = max(1, min(num_splits, n_kv))
    per_split = triton_cdiv(n_kv, num_splits)
    num_splits = triton_cdiv(n_kv, per_split)
    return _DecodeSetup(
        cfg, blocks, n_kv, num_splits, per_split,
        dict(D=D, D_PAD=D_PAD, ROWS=ROWS, BLOCK_N=cfg.block_n, SPARSE_N=m.block[1],
             EVEN_N=KV_LEN % m.block[1] == 0, HAS_SCORE_MOD=plan.has_score_mod,
             HAS_MASK=plan.traced.mask is not None, DENSE=m is DENSE,
             DOT_PREC=_dot_precision(q.dtype)),
        dict(D=D, D_PAD=D_PAD, ROWS=ROWS, SPLITS_PAD=max(2, next_power_of_2(num_splits))))


def decode(plan: Plan, q, k, v, captured, num_splits: int | None = None):
    """Split-KV attention for a few query rows over a long KV: each program reduces a slice.

    A call is host-bound unless its Python is short (the kernels take ~0.14 ms at the bench's
    32k-token shape): everything derived from shapes is kept per shape (_DecodeSetup)."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    G = H // HK
    key = (id(plan.kernels), plan.scale, q.shape, k.shape, q.stride(), k.stride(), v.stride(),
           q.dtype, q.device, num_splits)
    setups = plan.mask.__dict__.setdefault("_decode_setups", {})
    st = setups.get(key)
    if st is None:
        if len(setups) > 64:
            setups.clear()
        st = setups[key] = _decode_setup(plan, q, k, v, num_splits)
    # DENSE leaves the lists unread: q stands in for their pointers
    cfg, (num, idx, full), ns = st.cfg, st.lists or (q, q, q), st.num_splits
    rows, d_pad = st.split_const["ROWS"], st.split_const["D_PAD"]
    o_part = torch.empty(B * HK, ns, rows, d_pad, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(B * HK, ns, rows, device=q.device, dtype=torch.float32)
    args = (q, k, v, o_part, lse_part, *capture_args(captured, q.device), num, idx, full,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            plan.scale, Q_LEN, KV_LEN, HK, G, ns, st.per_split, st.n_kv)
    launcher(plan.kernels._attn_decode_split)(
        (ns, B * HK), args, st.split_const, (o_part, lse_part), num_warps=cfg.num_warps,
        num_stages=cfg.num_stages)
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(B, H, Q_LEN, device=q.device, dtype=torch.float32)
    launcher(plan.kernels._attn_decode_combine)(
        (G * Q_LEN, B * HK), (o_part, lse_part, o, lse, *o.stride()[:3], Q_LEN, HK, G, ns),
        st.combine_const, (o, lse), num_warps=4)
    return o, lse

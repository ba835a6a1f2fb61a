"""The forward-kernel rewrite of `attention_variants_gpu.py fwd`: the kernel's `_fwd_tile`
split into the q.k MMA (`_fwd_qk`) and the softmax + P.V step (`_fwd_pv`) with three switches
substituted into the source (raw-score max, lazy rescale), and, for QK prefetch, the
forward's loop over full tiles issuing the next tile's q.k before this tile's softmax; the
rest of the kernel source is left as it is. Measured slower than the kernel it replaces
(bench/results/2026-11-30_attention_fwd_variants_h200_edc058e.md); kept to rerun."""
from __future__ import annotations

TILE = r'''
@triton.jit
def _fwd_qk(q, K_base, start_n, offs_d, KV_LEN, stride_kn, D: tl.constexpr, D_PAD: tl.constexpr,
            BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, DOT_PREC: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kT_ptrs = K_base + offs_n[None, :] * stride_kn + offs_d[:, None]
    if EVEN_N and D == D_PAD:
        kT = tl.load(kT_ptrs)
    else:
        kT = tl.load(kT_ptrs, mask=(offs_n[None, :] < KV_LEN) & (offs_d[:, None] < D), other=0.0)
    return tl.dot(q, kT, input_precision=DOT_PREC)


@triton.jit
def _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h, sm_scale, KV_LEN,
            stride_vn, __CAPS__
            D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
            IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
            DOT_PREC: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    q_idx = offs_m[:, None]
    kv_idx = offs_n[None, :]
    if HAS_SCORE_MOD:
        s = _score_mod(qk, sm_scale, b, h, q_idx, kv_idx, __CAPS__)
    elif __RAW__:
        s = qk
    else:
        s = qk * (sm_scale * 1.4426950408889634)
    if IS_PARTIAL:
        s = tl.where(_mask_mod(b, h, q_idx, kv_idx, __CAPS__), s, float("-inf"))
    if not EVEN_N:
        s = tl.where(kv_idx < KV_LEN, s, float("-inf"))
    if __RAW__ and not HAS_SCORE_MOD:
        m_tile = tl.max(s, 1) * (sm_scale * 1.4426950408889634)
    else:
        m_tile = tl.max(s, 1)
    m_new = tl.maximum(m_i, m_tile)
    if __LAZY__ and not IS_PARTIAL and EVEN_N:
        if tl.max(m_new - m_i, 0) > 8.0:
            alpha = tl.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
        m_use = m_i
    else:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
        m_i = m_new
    if __RAW__ and not HAS_SCORE_MOD:
        p = tl.exp2(s * (sm_scale * 1.4426950408889634) - m_use[:, None])
    else:
        p = tl.exp2(s - m_use[:, None])
    l_i = l_i + tl.sum(p, 1)
    v_ptrs = V_base + offs_n[:, None] * stride_vn + offs_d[None, :]
    if EVEN_N and D == D_PAD:
        v = tl.load(v_ptrs)
    else:
        v = tl.load(v_ptrs, mask=(offs_n[:, None] < KV_LEN) & (offs_d[None, :] < D), other=0.0)
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
    return acc, l_i, m_i


@triton.jit
def _fwd_tile(acc, l_i, m_i, q, K_base, V_base, start_n, offs_m, offs_d, b, h, sm_scale, KV_LEN,
              stride_kn, stride_vn, __CAPS__
              D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
              IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
              DOT_PREC: tl.constexpr):
    qk = _fwd_qk(q, K_base, start_n, offs_d, KV_LEN, stride_kn, D, D_PAD, BLOCK_N, EVEN_N,
                 DOT_PREC)
    return _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h, sm_scale, KV_LEN,
                   stride_vn, __CAPS__ D, D_PAD, BLOCK_N, IS_PARTIAL, EVEN_N, HAS_SCORE_MOD,
                   DOT_PREC)


'''

FULL_LOOP = """    n_full = tl.load(FULL_NUM + row)
    for it in range(0, n_full * R):
        start_n = tl.load(FULL_IDX + irow + it // R) * SPARSE_N + (it % R) * BLOCK_N
        acc, l_i, m_i = _fwd_tile(acc, l_i, m_i, q, K_base, V_base, start_n, offs_m, offs_d, b, h,
                                  sm_scale, KV_LEN, stride_kn, stride_vn, __CAPS__
                                  D, D_PAD, BLOCK_N, False, EVEN_N, HAS_SCORE_MOD, DOT_PREC)
"""
PREFETCH_LOOP = """    n_full = tl.load(FULL_NUM + row) * R
    if n_full > 0:
        start_n = tl.load(FULL_IDX + irow) * SPARSE_N
        qk = _fwd_qk(q, K_base, start_n, offs_d, KV_LEN, stride_kn, D, D_PAD, BLOCK_N, EVEN_N,
                     DOT_PREC)
        for it in range(1, n_full):
            start_next = tl.load(FULL_IDX + irow + it // R) * SPARSE_N + (it % R) * BLOCK_N
            qk_next = _fwd_qk(q, K_base, start_next, offs_d, KV_LEN, stride_kn, D, D_PAD,
                              BLOCK_N, EVEN_N, DOT_PREC)
            acc, l_i, m_i = _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h,
                                    sm_scale, KV_LEN, stride_vn, __CAPS__
                                    D, D_PAD, BLOCK_N, False, EVEN_N, HAS_SCORE_MOD, DOT_PREC)
            qk = qk_next
            start_n = start_next
        acc, l_i, m_i = _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h,
                                sm_scale, KV_LEN, stride_vn, __CAPS__
                                D, D_PAD, BLOCK_N, False, EVEN_N, HAS_SCORE_MOD, DOT_PREC)
"""


def patched(original: str, raw: bool, lazy: bool, prefetch: bool) -> str:
    """The kernel source with `_fwd_tile` rewritten (and its full-tile loop, for prefetch)."""
    start = original.index("@triton.jit\ndef _fwd_tile(")
    end = original.index("@triton.jit\ndef _attn_fwd(")
    tile = TILE.replace("__RAW__", str(raw)).replace("__LAZY__", str(lazy))
    text = original[:start] + tile.lstrip("\n") + original[end:]
    if prefetch:
        assert FULL_LOOP in text
        text = text.replace(FULL_LOOP, PREFETCH_LOOP)
    return text

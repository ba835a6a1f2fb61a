"""The math definition of attention with score_mod / mask_mod, in plain torch.

Used as the fp64 reference in tests and as the fallback when no kernel can run. It
materializes the (B, H, Q, KV) score matrix, so it is for small shapes. A fully masked query
row gives output 0 and lse -inf (the kernels' convention), never NaN.
"""
from __future__ import annotations

import math

import torch


def index_grids(B: int, H: int, Q_LEN: int, KV_LEN: int, device):
    """b, h, q_idx, kv_idx as broadcastable (B,1,1,1), (1,H,1,1), (1,1,Q,1), (1,1,1,KV)."""
    return (torch.arange(B, device=device).view(B, 1, 1, 1),
            torch.arange(H, device=device).view(1, H, 1, 1),
            torch.arange(Q_LEN, device=device).view(1, 1, Q_LEN, 1),
            torch.arange(KV_LEN, device=device).view(1, 1, 1, KV_LEN))


def attention_math(q, k, v, score_mod=None, mask_mod=None, scale=None, enable_gqa=False,
                   return_lse=False, lse_grad=False):
    """softmax(mask(score_mod(q @ k^T * scale))) @ v, computed in q's dtype. `lse_grad`: the
    returned lse carries gradients too (0 on fully masked rows)."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    if H != HK:
        if not enable_gqa or H % HK:
            raise ValueError(f"{H} query heads and {HK} kv heads need enable_gqa=True and "
                             "a whole number of query heads per kv head")
        k = k.repeat_interleave(H // HK, dim=1)
        v = v.repeat_interleave(H // HK, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale                    # (B, H, Q, KV)
    b, h, qi, ki = index_grids(B, H, Q_LEN, KV_LEN, q.device)
    if score_mod is not None:
        scores = score_mod(scores, b, h, qi, ki)
        scores = torch.broadcast_to(scores, (B, H, Q_LEN, KV_LEN))
    if mask_mod is not None:
        keep = torch.broadcast_to(torch.as_tensor(mask_mod(b, h, qi, ki), device=q.device),
                                  scores.shape)
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores.detach(), dim=-1)                 # (B, H, Q)
    empty = (torch.isinf(lse) & (lse < 0))[..., None]
    # softmax on rows with no key left would be 0/0: give those rows zeros instead
    probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    out = probs @ v
    if lse_grad:
        lse = torch.logsumexp(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(
            empty[..., 0], float("-inf"))
    return (out, lse) if return_lse else out

"""Built-in attention variants written as plain score_mod / mask_mod functions.

A score_mod is `f(score, b, h, q_idx, kv_idx) -> score` and a mask_mod is
`f(b, h, q_idx, kv_idx) -> bool` (True = attend). Both are ordinary Python built from
operators and a few torch functions (`torch.where`, `torch.tanh`, `torch.exp`, ...), so one
definition serves three purposes:

* on broadcast torch index tensors, to build block masks and the math reference;
* traced with symbolic proxies (`trace.py`) and rendered into the Triton kernel source;
* differentiated symbolically for the backward (score and captured-tensor gradients).

Captured tensors (ALiBi slopes, a bias table, document ids) are indexed with the index
arguments, e.g. `slopes[h]`; every dimension must be indexed. `score` is already scaled by
`scale`, as in FlexAttention.
"""
from __future__ import annotations

import math

import torch


# ----------------------------------------------------------------------------------------------
# mask mods
def causal(b, h, q_idx, kv_idx):
    """Query i sees keys 0..i."""
    return q_idx >= kv_idx


def sliding_window(window: int, causal: bool = True):
    """Each query sees the `window` most recent keys (itself included); both sides if not causal."""
    def sliding_window_mask(b, h, q_idx, kv_idx):
        near = q_idx - kv_idx < window
        if causal:
            return near & (q_idx >= kv_idx)
        return near & (kv_idx - q_idx < window)
    sliding_window_mask.__qualname__ = f"sliding_window({window}, causal={causal})"
    return sliding_window_mask


def prefix_lm(prefix_len: int):
    """Bidirectional over the first `prefix_len` keys, causal after."""
    def prefix_lm_mask(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_len) | (q_idx >= kv_idx)
    prefix_lm_mask.__qualname__ = f"prefix_lm({prefix_len})"
    return prefix_lm_mask


def document_ids_from_offsets(offsets: torch.Tensor, length: int | None = None) -> torch.Tensor:
    """Offsets [0, s1, s2, ..., S] (cu_seqlens) -> a document id per position (S,)."""
    offsets = torch.as_tensor(offsets)
    length = int(offsets[-1]) if length is None else length
    positions = torch.arange(length, device=offsets.device)
    return torch.searchsorted(offsets[1:].contiguous(), positions, right=True).to(torch.int32)


def document(ids: torch.Tensor | None = None, offsets: torch.Tensor | None = None,
             causal: bool = False):
    """Packed (jagged) sequences: a query sees only keys of its own document.

    Give either `ids` (a document id per position, shape (S,) or (B, S)) or `offsets`
    (cu_seqlens, [0, ..., S]). With `causal=True` it is the causal document mask of packed
    pre-training.
    """
    if (ids is None) == (offsets is None):
        raise ValueError("document(): give exactly one of ids= or offsets=")
    if ids is None:
        ids = document_ids_from_offsets(offsets)
    ids = ids.contiguous()

    if ids.dim() == 1:
        def same_document(b, h, q_idx, kv_idx):
            return ids[q_idx] == ids[kv_idx]
    elif ids.dim() == 2:
        def same_document(b, h, q_idx, kv_idx):
            return ids[b, q_idx] == ids[b, kv_idx]
    else:
        raise ValueError(f"document ids must be (S,) or (B, S), got {tuple(ids.shape)}")
    if not causal:
        return same_document

    def causal_document(b, h, q_idx, kv_idx):
        return same_document(b, h, q_idx, kv_idx) & (q_idx >= kv_idx)
    return causal_document


def and_masks(*mask_mods):
    """A mask that attends where every one of `mask_mods` does."""
    if not mask_mods:
        raise ValueError("and_masks() needs at least one mask_mod")

    def and_mask(b, h, q_idx, kv_idx):
        result = mask_mods[0](b, h, q_idx, kv_idx)
        for mod in mask_mods[1:]:
            result = result & mod(b, h, q_idx, kv_idx)
        return result
    return and_mask


def or_masks(*mask_mods):
    """A mask that attends where any one of `mask_mods` does."""
    if not mask_mods:
        raise ValueError("or_masks() needs at least one mask_mod")

    def or_mask(b, h, q_idx, kv_idx):
        result = mask_mods[0](b, h, q_idx, kv_idx)
        for mod in mask_mods[1:]:
            result = result | mod(b, h, q_idx, kv_idx)
        return result
    return or_mask


# ----------------------------------------------------------------------------------------------
# score mods
def alibi_slopes(num_heads: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """The geometric ALiBi slopes of Press et al. (2^(-8/n), 2^(-16/n), ...) for n heads."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < num_heads:   # the paper's interleaving for non-powers of two
        extra = 2.0 ** (-4.0 / closest)
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, device=device, dtype=dtype)


def alibi(slopes: torch.Tensor):
    """score + slopes[h] * (kv_idx - q_idx): a linear distance penalty per head (slopes (H,))."""
    def alibi_bias(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return alibi_bias


def tanh_softcap(cap: float):
    """cap * tanh(score / cap) (Gemma 2, Grok)."""
    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    softcap.__qualname__ = f"tanh_softcap({cap})"
    return softcap


def relative_bias(table: torch.Tensor):
    """score + table[..., q_idx - kv_idx + L - 1] for a table of 2L - 1 learned distances.

    `table` is (2L - 1,) shared by all heads or (H, 2L - 1) per head; L must cover the
    longest sequence. Gradients flow into the table when it requires grad.
    """
    center = (table.shape[-1] - 1) // 2
    if table.dim() == 1:
        def relative_position_bias(score, b, h, q_idx, kv_idx):
            return score + table[q_idx - kv_idx + center]
    elif table.dim() == 2:
        def relative_position_bias(score, b, h, q_idx, kv_idx):
            return score + table[h, q_idx - kv_idx + center]
    else:
        raise ValueError(f"relative_bias table must be (2L-1,) or (H, 2L-1), "
                         f"got {tuple(table.shape)}")
    return relative_position_bias

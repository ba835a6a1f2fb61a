"""Attention DSL: write a variant as score_mod / mask_mod, get fused block-sparse Triton kernels.

    from cherenkov.attention import attention, block_mask, causal, tanh_softcap
    mask = block_mask(causal, B, H, S, S, device="cuda")
    out = attention(q, k, v, score_mod=tanh_softcap(30.0), block_mask=mask)

Files, in pipeline order: mods.py (built-in variants) -> trace.py (mods to expression graphs,
symbolic gradients) -> render.py (graphs to Triton helpers) -> kernels_src.py (the flash
kernels; their backward in kernels_bwd_src.py) -> codegen.py (assemble, cache, import) ->
block_mask.py (tile sparsity) -> tuning.py (tile sizes) -> launch.py (forward launches;
launch_bwd.py: the backward's; launch_gluon*.py: the Gluon kernels'; launch_decode.py: split-KV
decode; memo.py: their decisions kept per call signature) -> api.py (`attention`, autograd).
reference.py holds the math definition used by tests and as the fallback.
"""
import sys

from .api import attention
from .block_mask import BlockMask, block_mask
from .mods import (alibi, alibi_slopes, and_masks, causal, document, document_ids_from_offsets,
                   or_masks, prefix_lm, relative_bias, sliding_window, tanh_softcap)
from .reference import attention_math
from .tuning import choose_config

__all__ = ["attention", "block_mask", "BlockMask", "attention_math", "choose_config",
           "causal", "sliding_window", "prefix_lm", "document", "document_ids_from_offsets",
           "alibi", "alibi_slopes", "tanh_softcap", "relative_bias", "and_masks", "or_masks"]


class _CallablePackage(type(sys.modules[__name__])):
    """`cherenkov.attention` is this package (importing it binds the name on `cherenkov`), and
    calling it calls `attention`: `cherenkov.attention(q, k, v, mask_mod=causal)`."""

    def __call__(self, *args, **kwargs):
        return attention(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

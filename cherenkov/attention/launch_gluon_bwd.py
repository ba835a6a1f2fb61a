"""When and how the warp-specialized Gluon dQ kernel (kernels_gluon_bwd_src.py) runs.

It takes the backward's dQ where the Triton one would recompute it (launch_bwd.backward without
stored dS: under DS_STORE "auto" no score mod but those whose derivative is one number per (b,
h), ALiBi's) on an sm_90 GPU whose Triton has Gluon's Hopper language, for bf16 inputs with
head dim 64 or 128 in launch.tma_mode's 2-D form over launch_gluon's TILE x TILE_N tiles, a
score mod reading captured tensors only through hoisted loads (hoist.py), and a block mask that
is or coarsens to those tiles (launch_gluon.tile_mask: the Gluon forward's own). Everything
else, and DQ = "off" (env CHERENKOV_ATTN_GLUON=off, as for the forward), runs the Triton dQ
kernel. The dK/dV kernel is Triton's either way: its Gluon probe lost at D=128 (1.03 vs
0.97 ms) and tied at D=64 (bench/results/2026-12-02_attention_gluon_bwd_h200_2a5fb37.md).
"""
from __future__ import annotations

import os

import torch

from . import launch_gluon
from .block_mask import BlockMask
from .tile_terms import has_tile_terms

DQ = os.environ.get("CHERENKOV_ATTN_GLUON", "auto")     # "auto" | "off"
HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16,)
# the probe's three forms ran within 1% of each other at both shapes (64-key tiles with 3 or
# 4 stages, 128-key tiles with 2): 128-key tiles take the forward's mask as it is
STAGES = ((128, 2), (64, 3))     # (keys per tile, stages): pairs, so memo.py can key on them
# True: every score mod reading captured tensors takes it too; False: only those whose loads
# are all hoisted (hoist.py: ALiBi's slopes) -- where the backward recomputes dQ at all
# (never with captured-tensor gradients, which only the Triton dQ computes). ALiBi's
# forward+backward with its loads in the loop ran 2.67-2.73 ms so against stored dS's
# 2.40-2.45 (..._gluon_bwd_variants_h200_ed01f66.md); hoisted, 2.36-2.39 against stored dS's
# 2.37-2.41 (..._gluon_bwd_variants_h200_96c43bf.md), and with less host time per call 2.306
# against 2.369 (..._ds_budget_h200_4eb4df9.md): launch_bwd.DS_STORE "auto" gives it this dQ
SCORE_LOADS = False
# The partial tiles' loop apart from the full ones' (launch_gluon.SPLIT_TILES' reason): dQ
# 0.639 vs 0.642-0.657 ms at the suite's causal shape, forward+backward within the runs'
# noise (bench/results/2026-12-02_attention_gluon_kernels_h200_85ff35d.md,
# ..._gluon_bwd_variants_h200_96c43bf.md): not taken
SPLIT_TILES = False
# launch_gluon.TILE_TERMS' for the dQ kernel (kernels_gluon_bwd_src._gl_dq_tiles): ALiBi's dQ
# kernel 0.663-0.667 ms against 0.683 per score, though it spills a few scalars (H200, as
# launch_gluon's; bench/results/2026-12-02_attention_gluon_kernels_alibi_h200_a857cb5.md)
TILE_TERMS = True


def usable(plan, q, k, o) -> bool:
    """Whether this backward's dQ can run the Gluon kernel (launch_gluon.eligible, with this
    module's dtypes, head dims and SCORE_LOADS), the mask (launch_gluon.tile_mask) and the
    2-D descriptor layouts of q, k, v, dO (launch.tma_mode) aside: the caller asks those."""
    return DQ != "off" and o.stride(-1) == 1 and launch_gluon.eligible(
        plan, q, k, "_attn_bwd_dq_ws", DTYPES, HEAD_DIMS, SCORE_LOADS)


def constexprs(plan, D: int, fused: bool) -> dict:
    """The dQ kernel's constexprs for head dim D; `fused`: it computes delta (decided once
    per call signature, with the rest of launch_bwd._backward_decision)."""
    tile_n = launch_gluon.TILE_N
    s_layout, o_layout = launch_gluon._layouts(D, tile_n)
    return dict(ROWS=launch_gluon.TILE // 2, BLOCK_N=tile_n, D=D, STAGES=dict(STAGES)[tile_n],
                S_LAYOUT=s_layout, O_LAYOUT=o_layout, HAS_SCORE_MOD=plan.has_score_mod,
                FUSED_DELTA=fused, CONSUMER_REGS=launch_gluon.CONSUMER_REGS,
                SPLIT=SPLIT_TILES, TILE_TERMS=TILE_TERMS and has_tile_terms(plan.traced))


def dq(plan, m: BlockMask, q, k, v, do, o, lse, delta, caps, mask_strides, group: int,
       constexprs: dict) -> torch.Tensor:
    """dQ (contiguous) through the Gluon kernel -- and delta into `delta` where constexprs'
    FUSED_DELTA (else read from it); `m`: the block mask in launch_gluon's tiles."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    tile, tile_n = launch_gluon.TILE, launch_gluon.TILE_N
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    desc = launch_gluon._descriptor
    n_m = Q_LEN // tile
    launch_gluon.launch(
        plan.kernels._attn_bwd_dq_ws, (n_m * B * H,),
        (desc(q, tile // 2), desc(do, tile // 2), desc(k, tile_n), desc(v, tile_n),
         desc(out, tile // 2), o, lse, delta, *caps,
         m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices,
         *mask_strides, *o.stride()[:3], plan.scale, Q_LEN, KV_LEN, H, H // HK, n_m, group),
        constexprs, (out, delta) if constexprs["FUSED_DELTA"] else (out,))
    return out


def guarded_dq(*args) -> torch.Tensor | None:
    """dq(*args), or None -- after logging why, and with the Gluon dQ switched off for the
    process -- when the kernel does not build or launch: the caller runs the Triton dQ."""
    def off():
        global DQ
        DQ = "off"
    return launch_gluon.guarded(dq, args, "dQ kernel", off)

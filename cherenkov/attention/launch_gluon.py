"""When and how the warp-specialized Gluon forward (kernels_gluon_src.py) runs.

It takes a forward on an sm_90 GPU when the generated module carries it (a Triton with
Gluon's Hopper language), the inputs are bf16 with head dim 128 (DTYPES, HEAD_DIMS) in
launch.tma_mode's 2-D descriptor form (contiguous, 16-byte aligned, both lengths multiples of
128: a tile never reaches into the next head), the score mod reads captured tensors only
through loads hoisted out of the loop (hoist.py: ALiBi's slopes; SCORE_LOADS: any), and the
block mask has -- or, built from the plan's own index-only mask_mod, coarsens to -- 128 x 128
tiles (Plan.mask_in_tiles). Anything else runs the Triton forward (launch.forward), as does
GLUON_FWD = "off" (env CHERENKOV_ATTN_GLUON=off). The backward reads either forward's LSE
alike; its dQ kernel may be Gluon's too (launch_gluon_bwd, on this module's tiles and mask).
"""
from __future__ import annotations

import functools
import logging
import os

import torch

from .block_mask import BlockMask
from .hoist import score_loads_hoisted
from .kernel_launch import descriptor, gluon_descriptor_class, launcher
from .tile_terms import has_tile_terms

GLUON_FWD = os.environ.get("CHERENKOV_ATTN_GLUON", "auto")     # "auto" | "off"
TILE = 128            # query rows per program (two warpgroups of 64)
# Variants (bench/attention_gluon_variants_gpu.py; B=4 H=16 S=4096 D=128 on the H200,
# bench/results/2026-12-02_attention_gluon_variants_h200_2a5fb37.md): keys per tile (64: finer
# mask tiles at a window's edges -- 13-23% slower than 128 on causal, window, prefix-LM, 5-6%
# slower than even the Triton forward), the softmax's fused multiply-add form for calls
# without a score mod (kernels_gluon_src._gl_softmax: causal 0.514 vs 0.517 ms, window 0.288
# vs 0.292, prefix-LM 0.530 vs 0.519 -- not taken).
TILE_N = 128
FMA_SOFTMAX = False
# True: every score mod reading captured tensors takes it too; False: only those whose every
# load is one element per (b, h), made once per program (hoist.py: ALiBi's slopes). Before
# that hoisting, ALiBi's forward ran 0.628 ms so against the Triton forward's 0.613 (0.631 vs
# 0.613 in the suite at cb27ac5); with it 0.580-0.597 vs 0.610
# (bench/results/2026-12-02_attention_gluon_variants_h200_96c43bf.md, ..._bwd_variants_...)
SCORE_LOADS = False
# The partial tiles' loop apart from the full tiles' (kernels_gluon_src._gl_tiles' MASK):
# compiled for sm_90, the one loop runs the mask's compare and select on every tile,
# predicated (ALiBi's loop body 804 instructions against causal's 642, its slope's load
# inside the loop); split, the full tiles carry no mask code (536 / 676 instructions:
# bench/results/2026-12-02_attention_gluon_sass_cpu_484a54e.md). On the H200 the forward
# ran within noise of the one loop (causal 0.5215 vs 0.5212 ms, window 0.300 vs 0.293, ALiBi
# 0.589 vs 0.580: bench/results/2026-12-02_attention_gluon_variants_h200_96c43bf.md): not taken
SPLIT_TILES = False
# The score's terms linear in the key index (ALiBi's) as a per-key vector made once per
# program plus one number per tile (tile_terms.py; kernels_gluon_src._gl_softmax) -- False:
# computed per score from the key indices, as the Triton forward does. ALiBi's forward (H200,
# B=4 H=16 S=4096 D=128 causal): 0.500-0.516 ms against 0.578-0.580 per score, causal's own
# 0.49 (bench/results/2026-12-02_attention_tile_terms_h200_951e697.md, ..._a857cb5.md)
TILE_TERMS = True
# launch(): True through launch.launcher's direct path, False Triton's fn[grid] (A/B runs)
DIRECT = True
# Calls of fewer scores keep the Triton forward, as calls under launch.TMA_MIN_SCORES keep
# pointer loads: set while it launched through Triton's own path with descriptors validated
# on every call (tens of microseconds more host time); not re-measured since launch() and
# kernel_launch.descriptor
MIN_SCORES = 1 << 26
# D=64 ran slower than the Triton forward (causal B=4 H=16 S=4096: 0.386 vs 0.372 ms,
# bench/results/2026-12-02_attention_h200_cb27ac5.md); fp16 passes the GPU tests at D=64 and
# 128 (tests/gpu/test_attention_gluon_gpu.py, 2a5fb37 and b29d84c) but has not been timed:
# add it here once it has
HEAD_DIMS = (128,)
DTYPES = (torch.bfloat16,)
# the K / V ring's depth and the consumers' registers (setmaxnreg; the producer keeps 24):
# 2 stages of 128 x 128 tiles at D=128 fill 160 KB of shared memory (3: 1.5-7.5% slower, same
# run)
STAGES = 2
CONSUMER_REGS, MAX_REGS = 240, 168


@functools.lru_cache(maxsize=None)
def _sm90(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) == (9, 0)


def tile_mask(plan) -> BlockMask | None:
    """The plan's block mask in TILE x TILE_N tiles (Plan.mask_in_tiles), or None."""
    return plan.mask_in_tiles(TILE, TILE_N)


def usable(plan, q, k, v) -> bool:
    """Whether this forward can run the Gluon kernel, its mask (tile_mask) and its inputs'
    layouts aside: those are launch.tma_mode's 2-D descriptor form over TILE x TILE_N tiles
    (contiguous, 16-byte aligned, both lengths multiples of the tiles), which the caller
    asks."""
    return GLUON_FWD != "off" and eligible(plan, q, k, "_attn_fwd_ws", DTYPES, HEAD_DIMS,
                                           SCORE_LOADS)


def eligible(plan, q, k, kernel: str, dtypes, head_dims, score_loads: bool) -> bool:
    """What every Gluon kernel asks of a call (each its own `dtypes`, `head_dims` and
    `score_loads`): a compiled plan whose module carries `kernel`, CUDA inputs on an sm_90
    GPU, at least MIN_SCORES scores, and a score mod reading captured tensors only through
    hoisted loads (hoist.py) unless `score_loads`."""
    if plan.interpret or not q.is_cuda or not hasattr(plan.kernels, kernel):
        return False
    B, H, Q_LEN, D = q.shape
    if q.dtype not in dtypes or D not in head_dims or B * H * Q_LEN * k.shape[2] < MIN_SCORES:
        return False
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    return _sm90(index) and (score_loads or not plan.traced.score_reads_tensors()
                             or score_loads_hoisted(plan.traced))


@functools.lru_cache(maxsize=None)
def _layouts(d: int, tile_n: int):
    """The (S, O) accumulator layouts (built once per shape: every launch asks)."""
    from triton.experimental.gluon import language as gl
    s = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                  instr_shape=[16, tile_n, 16])
    o = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, d, 16])
    return s, o


@functools.lru_cache(maxsize=None)
def _smem_layout(rows: int, d: int, dtype: torch.dtype):
    from triton.experimental.gluon import language as gl
    return gl.NVMMASharedLayout.get_default_for(
        [rows, d], gl.bfloat16 if dtype == torch.bfloat16 else gl.float16)


def _descriptor(t: torch.Tensor, rows: int):
    t2 = t.view(-1, t.shape[-1])
    return descriptor(gluon_descriptor_class(), t2, t2.shape, t2.stride(), (rows, t.shape[-1]),
                      _smem_layout(rows, t.shape[-1], t.dtype))


def constexprs(plan, D: int) -> dict:
    """The forward kernel's constexprs for head dim D (decided once per call signature, with
    the rest of launch._gluon_forward_decision)."""
    s_layout, o_layout = _layouts(D, TILE_N)
    return dict(ROWS=TILE // 2, BLOCK_N=TILE_N, D=D, STAGES=STAGES, S_LAYOUT=s_layout,
                O_LAYOUT=o_layout, HAS_SCORE_MOD=plan.has_score_mod,
                CONSUMER_REGS=CONSUMER_REGS,
                FMA=FMA_SOFTMAX and not plan.has_score_mod and plan.scale > 0,
                SPLIT=SPLIT_TILES, TILE_TERMS=TILE_TERMS and has_tile_terms(plan.traced))


def forward(plan, m: BlockMask, q, k, v, capture_args, mask_strides, group: int,
            constexprs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """O (contiguous, like q) and the log2-domain LSE through the Gluon kernel; `m`: the
    block mask in TILE x TILE_N tiles (tile_mask); `constexprs`: constexprs(plan, D)'s."""
    B, H, Q_LEN, D = q.shape
    HK, KV_LEN = k.shape[1], k.shape[2]
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(B, H, Q_LEN, device=q.device, dtype=torch.float32)
    n_m = Q_LEN // TILE
    launch(plan.kernels._attn_fwd_ws, (n_m * B * H,),
           (_descriptor(q, TILE // 2), _descriptor(k, TILE_N), _descriptor(v, TILE_N),
            _descriptor(o, TILE // 2), lse, *capture_args,
            m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks, m.full_kv_indices,
            *mask_strides, plan.scale, Q_LEN, KV_LEN, H, H // HK, n_m, group),
           constexprs, (o, lse))
    return o, lse


def launch(fn, grid, args, constexprs: dict, outputs) -> None:
    """Launch a Gluon kernel (4 warps, MAX_REGS registers): through launch.launcher's direct
    path (DIRECT), or Triton's own `fn[grid]`, which binds and specializes the ~30 arguments on
    every call. Host time per forward+backward on the H200 machine, direct vs fn[grid] (min of
    7 x 20 calls): causal 778 vs 972 us, ALiBi 1510 vs 1609, window 1196 vs 1174 -- as noisy as
    that host (bench/results/2026-12-02_attention_host_breakdown_h200_41d141f.md)."""
    if DIRECT:
        launcher(fn)(grid, args, constexprs, outputs, num_warps=4, maxnreg=MAX_REGS)
    else:
        fn[grid](*args, **constexprs, num_warps=4, maxnreg=MAX_REGS)


def guarded_forward(*args):
    """forward(*args), or None -- after logging why, and with the Gluon forward switched off
    for the process -- when the kernel does not build or launch (a Triton whose Gluon differs
    from 3.6's and 3.9's, say): the caller runs the Triton forward instead."""
    def off():
        global GLUON_FWD
        GLUON_FWD = "off"
    return guarded(forward, args, "forward", off)


def guarded(run, args, what: str, switch_off):
    """run(*args), or None after switch_off() and a warning naming the Gluon `what` that
    failed (any failure: the Triton kernel stands in)."""
    try:
        return run(*args)
    except Exception as e:      # noqa: BLE001
        switch_off()
        logging.getLogger("cherenkov").warning(
            "cherenkov: the Gluon attention %s failed (%s: %s); the Triton one runs from now "
            "on", what, type(e).__name__, str(e)[:500])
        return None

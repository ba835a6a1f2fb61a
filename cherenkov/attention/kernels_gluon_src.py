'''Gluon source of the Hopper (sm_90) forward: warp-specialized, FlashAttention-3's loop.

Appended to the generated module (codegen.kernel_source) where Triton has Gluon's Hopper
language (Triton 3.6 and 3.9 both do); it calls the same rendered mods (`_score_mod_q0`,
`_mask_mod`, `_row_shift`, and tile_terms.py's `_score_cols`, `_score_tile`, `_score_rest`
where TILE_TERMS: triton.jit helpers, which Gluon inlines; their `_h` versions, and
`__HOIST__`'s loads in each consumer, where hoist.py takes a load out of the loop, as Gluon's
pipeline never does) and keeps kernels_src's
conventions (log2-domain LSE, +inf on fully masked rows, output 0 there). launch_gluon.py
decides when it runs (bf16, head dim 128, contiguous inputs whose lengths are multiples of
128, a block mask of 128 x 128 tiles); the kernel itself takes fp16 and D=64 too.

One program per 128 query rows of a (batch, head), longest row blocks first in L2-sized head
groups (as kernels_src._program_block). Three partitions share the K / V ring in shared
memory: a producer warp loads both query halves, then the row block's listed key tiles --
partial ones, then full ones -- by TMA as slots free up (an "empty" barrier per slot, which
both consumers release); two consumer warpgroups of 64 rows each run the online softmax with
S = Q K^T issued together with the previous tile's P V, the softmax running while that P V
is still on the tensor cores (the O rescale waits for it). On the H200 at B=4 H=16 S=4096
D=128 causal: 0.504 ms against the Triton kernel's 0.577 (bench/results/
2026-12-02_attention_gluon_fwd_h200_3b6e3c0.md, the standalone probe).
'''

GLUON_HEADER = r'''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

# TMA copies: async_copy_global_to_shared / _shared_to_global in 3.6, async_load / _store in 3.9
_gl_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_gl_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
'''

GLUON_KERNELS = r'''
@gluon.jit
def _gl_program(NUM_M_BLOCKS, HEAD_GROUP, H, BLOCK_M: gl.constexpr):
    """(b, h, b * H + h, first query row) of this program's row block, in
    kernels_src._program_block's order: longest row blocks first, heads in groups of
    HEAD_GROUP."""
    pid = gl.program_id(0)
    n_heads = gl.num_programs(0) // NUM_M_BLOCKS
    first = (pid // (HEAD_GROUP * NUM_M_BLOCKS)) * HEAD_GROUP
    size = gl.minimum(HEAD_GROUP, n_heads - first)
    rest = pid - first * NUM_M_BLOCKS
    blk = rest // size
    bh = first + rest % size
    return bh // H, bh % H, bh, (NUM_M_BLOCKS - 1 - blk) * BLOCK_M


@gluon.jit
def _gl_row_tiles(KV_NUM, FULL_NUM, snb, snh, snm, sib, sih, sim, b, h, start_m,
                  BLOCK_M: gl.constexpr):
    """(where its tile lists start, its partial tiles, all its tiles) of the row block at
    start_m of (b, h)."""
    blk = start_m // BLOCK_M
    row = b * snb + h * snh + blk * snm
    n_partial = gl.load(KV_NUM + row)
    return b * sib + h * sih + blk * sim, n_partial, n_partial + gl.load(FULL_NUM + row)


@gluon.jit
def _gl_barriers(N: gl.constexpr, COUNT: gl.constexpr):
    """N mbarriers in shared memory, each completing on COUNT arrivals."""
    bars = gl.allocate_shared_memory(gl.int64, [N, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(N):
        mbarrier.init(bars.index(i), count=COUNT)
    return bars


@gluon.jit
def _gl_tile_start(KV_IDX, FULL_IDX, irow, t, n_partial, BLOCK_N: gl.constexpr):
    """First key row of tile t of a row block's list: its partial tiles, then its full ones."""
    if t < n_partial:
        idx = gl.load(KV_IDX + irow + t)
    else:
        idx = gl.load(FULL_IDX + irow + (t - n_partial))
    return idx * BLOCK_N


@gluon.jit
def _gl_loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready,
               k_empty, v_empty, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row, kv_row,
               ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The producer warp: both query halves, then the key / value tiles into the ring as the
    consumers release its slots (a fresh barrier passes phase 1 at once)."""
    for c in gl.static_range(2):
        mbarrier.expect(q_bars.index(c), q_desc.block_type.nbytes)
        _gl_tma_load(q_desc, [q_row + c * ROWS, 0], q_bars.index(c), q_smem.index(c))
    for t in range(n_tiles):
        slot = t % STAGES
        free = ((t // STAGES) & 1) ^ 1
        start_n = _gl_tile_start(KV_IDX, FULL_IDX, irow, t, n_partial, BLOCK_N)
        mbarrier.wait(k_empty.index(slot), free)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        _gl_tma_load(k_desc, [kv_row + start_n, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), free)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        _gl_tma_load(v_desc, [kv_row + start_n, 0], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def _gl_softmax(qk, m_i, l_i, q_idx, t, n_partial, start_n, b, h, sm_scale, q0, cols, __CAPS__
                BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr, HAS_SCORE_MOD: gl.constexpr,
                FMA: gl.constexpr, TILE_TERMS: gl.constexpr, MASK: gl.constexpr = 0):
    """Tile t's probabilities, the running max and sum, and the accumulator's rescale
    (kernels_src._fwd_update's arithmetic). FMA (no score mod, a positive scale): the row
    max of the raw scores, times the scale, then p = exp2(qk * scale - max) in one fused
    multiply-add per score instead of a product and a difference. MASK: 0 -- the mask where
    t < n_partial (a branch the compiler may turn into predicated code that every tile
    runs), 1 -- always (a partial tile), 2 -- never (a full one). TILE_TERMS (tile_terms.py):
    the score's terms linear in the key index as `cols` (its per-key vector, made once) plus
    the tile's number `shift`, which moves the tile's row maxima."""
    kv_idx = (start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT)))[None, :]
    scale = sm_scale * 1.4426950408889634
    shift = 0.0
    if TILE_TERMS:        # s + shift is the score less its row terms
        s = _score_rest__H__(qk, sm_scale, b, h, q_idx, kv_idx, q0, cols, __CAPS__)
        shift = _score_tile__H__(sm_scale, b, h, start_n, q0, __CAPS__)
    elif HAS_SCORE_MOD:   # log2 domain, less its row terms (added back to the lse)
        s = _score_mod_q0__H__(qk, sm_scale, b, h, q_idx, kv_idx, q0, __CAPS__)
    elif FMA:
        s = qk
    else:
        s = qk * scale
    if MASK == 1:
        s = gl.where(_mask_mod__H__(b, h, q_idx, kv_idx, __CAPS__), s, float("-inf"))
    elif MASK == 0:
        if t < n_partial:
            s = gl.where(_mask_mod__H__(b, h, q_idx, kv_idx, __CAPS__), s, float("-inf"))
    if FMA:
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * scale)
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        p = gl.exp2(s * scale - m_safe[:, None])
    elif TILE_TERMS:
        m_new = gl.maximum(m_i, gl.max(s, axis=1) + shift)
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        p = gl.exp2(s - (m_safe - shift)[:, None])
    else:
        m_new = gl.maximum(m_i, gl.max(s, axis=1))
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        p = gl.exp2(s - m_safe[:, None])
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def _gl_tiles(t0, t1, acc, p16, m_i, l_i, q_tile, k_smem, v_smem, k_ready, v_ready, k_empty,
              v_empty, s_zero, KV_IDX, FULL_IDX, irow, n_partial, q_idx, b, h, sm_scale, q0,
              cols, __CAPS__ BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr, HAS_SCORE_MOD: gl.constexpr,
              FMA: gl.constexpr, TILE_TERMS: gl.constexpr, MASK: gl.constexpr):
    """Tiles t0 .. t1-1 of the overlapped loop: tile t's S issued with tile t-1's P V (p16,
    the previous tile's probabilities); each K slot released once its S is done, each V slot
    once its P V is. MASK as _gl_softmax's."""
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_LAYOUT)
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    for t in range(t0, t1):
        slot = t % STAGES
        prev = (t - 1) % STAGES
        start_n = _gl_tile_start(KV_IDX, FULL_IDX, irow, t, n_partial, BLOCK_N)
        mbarrier.wait(k_ready.index(slot), (t // STAGES) & 1)
        s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero,
                          use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(prev), ((t - 1) // STAGES) & 1)
        acc = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        mbarrier.arrive(k_empty.index(slot), count=1)
        p, m_i, l_i, alpha = _gl_softmax(s, m_i, l_i, q_idx, t, n_partial, start_n, b, h,
                                         sm_scale, q0, cols, __CAPS__ BLOCK_N, S_LAYOUT,
                                         HAS_SCORE_MOD, FMA, TILE_TERMS, MASK)
        acc, p16 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p16))
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha, O_ROW)[:, None]
        p16 = gl.convert_layout(p.to(k_smem.dtype), P_LAYOUT)
    return acc, p16, m_i, l_i


@gluon.jit
def _gl_consumer(C: gl.constexpr, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                 v_empty, o_desc, LSE, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                 start_m, b, h, bh, Q_LEN, sm_scale, __CAPS__
                 ROWS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                 STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                 HAS_SCORE_MOD: gl.constexpr, FMA: gl.constexpr, SPLIT: gl.constexpr,
                 TILE_TERMS: gl.constexpr):
    """Query rows [start_m + C * ROWS, + ROWS): tile 0, then the overlapped loop (_gl_tiles)
    -- in two, partial tiles then full ones, where SPLIT -- then the last tile's P V. The
    mods' loads of one element per (b, h) are made here, once (hoist.py: the `_h` mods), as
    is the per-key vector of TILE_TERMS (tile_terms.py)."""
    __HOIST__
    q0 = start_m + C * ROWS
    q_tile = q_smem.index(C)
    ROW: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_LAYOUT)
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    offs_m = q0 + gl.arange(0, ROWS, layout=ROW)
    q_idx = offs_m[:, None]
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=S_LAYOUT)
    acc = gl.zeros([ROWS, D], gl.float32, layout=O_LAYOUT)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=ROW)
    l_i = gl.zeros([ROWS], gl.float32, layout=ROW)
    cols = 0.0
    if TILE_TERMS:
        j = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))[None, :]
        cols = _score_cols__H__(sm_scale, b, h, j, q0, __CAPS__)
    mbarrier.wait(q_bars.index(C), 0)
    if n_tiles > 0:
        start_n = _gl_tile_start(KV_IDX, FULL_IDX, irow, 0, n_partial, BLOCK_N)
        mbarrier.wait(k_ready.index(0), 0)
        s = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False,
                          is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        mbarrier.arrive(k_empty.index(0), count=1)
        p, m_i, l_i, alpha = _gl_softmax(s, m_i, l_i, q_idx, 0, n_partial, start_n, b, h,
                                         sm_scale, q0, cols, __CAPS__ BLOCK_N, S_LAYOUT,
                                         HAS_SCORE_MOD, FMA, TILE_TERMS)
        p16 = gl.convert_layout(p.to(k_smem.dtype), P_LAYOUT)
        # SPLIT: the partial tiles' loop, then the full ones' without mask code; else one
        # loop masking where t < n_partial
        end = n_tiles
        if SPLIT:
            end = n_partial
        acc, p16, m_i, l_i = _gl_tiles(1, end, acc, p16, m_i, l_i, q_tile, k_smem, v_smem,
                                       k_ready, v_ready, k_empty, v_empty, s_zero, KV_IDX,
                                       FULL_IDX, irow, n_partial, q_idx, b, h, sm_scale, q0,
                                       cols, __CAPS__ BLOCK_N, STAGES, S_LAYOUT, O_LAYOUT,
                                       HAS_SCORE_MOD, FMA, TILE_TERMS, 1 if SPLIT else 0)
        if SPLIT:
            first_full = n_partial
            if first_full < 1:            # tile 0 ran above
                first_full = 1
            acc, p16, m_i, l_i = _gl_tiles(first_full, n_tiles, acc, p16, m_i, l_i, q_tile,
                                           k_smem, v_smem, k_ready, v_ready, k_empty, v_empty,
                                           s_zero, KV_IDX, FULL_IDX, irow, n_partial, q_idx, b,
                                           h, sm_scale, q0, cols, __CAPS__ BLOCK_N, STAGES,
                                           S_LAYOUT, O_LAYOUT, HAS_SCORE_MOD, FMA, TILE_TERMS,
                                           2)
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(last), count=1)

    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    lse = gl.where(l_i == 0.0, float("inf"), m_i + gl.log2(l_safe))
    if HAS_SCORE_MOD:     # the row terms the tiles left out (kernels_src._attn_fwd)
        r = _row_shift__H__(sm_scale, b, h, offs_m, q0, __CAPS__)
        empty = (l_i == 0.0) | (r == float("-inf"))
        lse = gl.where(empty, float("inf"), lse + r)
        l_safe = gl.where(empty, float("inf"), l_safe - r * 0.0)
    o = acc / gl.convert_layout(l_safe, O_ROW)[:, None]
    gl.store(LSE + bh * Q_LEN + offs_m, lse)
    q_tile.store(o.to(k_smem.dtype))             # Q is spent: its tile carries O out
    fence_async_shared()
    _gl_tma_store(o_desc, [q_row + C * ROWS, 0], q_tile)
    tma.store_wait(pendings=0)


@gluon.jit(do_not_specialize=["HEAD_GROUP"])
def _attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, LSE, __CAPS__
                 KV_NUM, KV_IDX, FULL_NUM, FULL_IDX, snb, snh, snm, sib, sih, sim,
                 sm_scale, Q_LEN, KV_LEN, H, GROUPS, NUM_M_BLOCKS, HEAD_GROUP,
                 ROWS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                 STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                 HAS_SCORE_MOD: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                 FMA: gl.constexpr = False, SPLIT: gl.constexpr = False,
                 TILE_TERMS: gl.constexpr = False):
    """O and the log2 LSE of 2 * ROWS query rows of one (batch, head)."""
    gl.static_assert(not (FMA and HAS_SCORE_MOD), "FMA: scores without a score mod only")
    b, h, bh, start_m = _gl_program(NUM_M_BLOCKS, HEAD_GROUP, H, 2 * ROWS)
    hk = h // GROUPS
    q_row = bh * Q_LEN + start_m
    kv_row = (b * (H // GROUPS) + hk) * KV_LEN
    irow, n_partial, n_tiles = _gl_row_tiles(KV_NUM, FULL_NUM, snb, snh, snm, sib, sih, sim,
                                             b, h, start_m, 2 * ROWS)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, ROWS, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bars = _gl_barriers(2, 1)
    k_ready = _gl_barriers(STAGES, 1)
    v_ready = _gl_barriers(STAGES, 1)
    k_empty = _gl_barriers(STAGES, 2)         # both consumers release a slot
    v_empty = _gl_barriers(STAGES, 2)
    gl.warp_specialize([
        (_gl_consumer, (0, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                        o_desc, LSE, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                        start_m, b, h, bh, Q_LEN, sm_scale, __CAPS__ ROWS, BLOCK_N, D, STAGES,
                        S_LAYOUT, O_LAYOUT, HAS_SCORE_MOD, FMA, SPLIT, TILE_TERMS)),
        (_gl_consumer, (1, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
                        o_desc, LSE, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                        start_m, b, h, bh, Q_LEN, sm_scale, __CAPS__ ROWS, BLOCK_N, D, STAGES,
                        S_LAYOUT, O_LAYOUT, HAS_SCORE_MOD, FMA, SPLIT, TILE_TERMS)),
        (_gl_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready,
                      k_empty, v_empty, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                      kv_row, ROWS, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])
'''

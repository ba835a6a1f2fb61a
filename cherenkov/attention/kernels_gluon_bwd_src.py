'''Gluon source of the Hopper (sm_90) dQ kernel: warp-specialized, the forward's shape.

Appended after kernels_gluon_src's kernels (whose helpers -- `_gl_program`, `_gl_tile_start`,
the TMA copy names -- it uses) and calls the rendered backward mods (`_score_mod_grad`,
`_scale_ds`, `_mask_mod`; where TILE_TERMS, tile_terms.py's `_score_cols`, `_score_tile`,
`_score_rest_grad` with `_row_shift`; `_h` versions after the consumer's `__HOIST__`, hoist.py) as
kernels_bwd_src's `_attn_bwd_dq` does, with the same conventions
(log2-domain LSE, +inf on rows that see no key; delta = rowsum(dO * O) computed here and stored
for the dK/dV kernel when FUSED_DELTA). launch_gluon_bwd.py decides when it runs.

One program per 128 query rows of a (batch, head), in the forward's order and over the
forward's 128 x BLOCK_N tile lists. A producer warp loads both halves of Q and dO once, then
the row block's key tiles -- K and V together, partial tiles then full ones -- through a ring
whose slots both consumers release. Two consumer warpgroups of 64 rows each issue S = Q K^T
and dP = dO V^T together, form P and dS = P (dP - delta) in registers, add dS K into dQ, and
release the slot; dQ leaves through Q's shared memory by TMA. On the H200 (causal, bf16, the
standalone probe of bench/attention_gluon_bwd_gpu.py): B=4 H=16 S=4096 D=128 0.620 ms
against the Triton dQ kernel's 0.744; B=16 H=12 S=1024 D=64 0.115 vs 0.126
(bench/results/2026-12-02_attention_gluon_bwd_h200_2a5fb37.md).
'''

GLUON_BACKWARD = r'''
@gluon.jit
def _gl_dq_loader(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bars,
                  ready, empty, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row, kv_row,
                  ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The producer warp: each consumer's Q and dO rows, then K and V of each listed key tile
    into the ring as both consumers release its slots (a fresh barrier passes phase 1)."""
    for c in gl.static_range(2):
        bar = q_bars.index(c)
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        _gl_tma_load(q_desc, [q_row + c * ROWS, 0], bar, q_smem.index(c))
        _gl_tma_load(do_desc, [q_row + c * ROWS, 0], bar, do_smem.index(c))
    for t in range(n_tiles):
        slot = t % STAGES
        start_n = _gl_tile_start(KV_IDX, FULL_IDX, irow, t, n_partial, BLOCK_N)
        mbarrier.wait(empty.index(slot), ((t // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        _gl_tma_load(k_desc, [kv_row + start_n, 0], bar, k_smem.index(slot))
        _gl_tma_load(v_desc, [kv_row + start_n, 0], bar, v_smem.index(slot))


@gluon.jit
def _gl_dq_delta(O, DELTA, do_tile, o_base, bh, q0, Q_LEN, stride_om, ROWS: gl.constexpr,
                 D: gl.constexpr, ROW: gl.constexpr):
    """delta = rowsum(dO * O) of rows q0.. (dO from its tile in shared memory), stored for
    the dK/dV kernel; returned in the scores' row layout."""
    TILE: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = q0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, TILE))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, TILE))
    o = gl.load(O + o_base + rows[:, None] * stride_om + cols[None, :])
    do = do_tile.load(TILE)
    delta = gl.sum(o.to(gl.float32) * do.to(gl.float32), axis=1)
    gl.store(DELTA + bh * Q_LEN + rows, delta)
    return gl.convert_layout(delta, ROW)


@gluon.jit
def _gl_dq_tiles(t0, t1, dq, zero, q_tile, do_tile, k_smem, v_smem, ready, empty, KV_IDX,
                 FULL_IDX, irow, n_partial, lse, delta, q_idx, b, h, sm_scale, q0, cols,
                 __CAPS__ BLOCK_N: gl.constexpr, STAGES: gl.constexpr, S_LAYOUT: gl.constexpr,
                 O_LAYOUT: gl.constexpr, HAS_SCORE_MOD: gl.constexpr, TILE_TERMS: gl.constexpr,
                 MASK: gl.constexpr):
    """dQ's steps for tiles t0 .. t1-1: S and dP issued together, then dS K; the slot
    released once that matmul is done. MASK: 0 -- the mask where t < n_partial, 1 -- always,
    2 -- never (kernels_gluon_src._gl_softmax's). TILE_TERMS (tile_terms.py): the score's
    terms linear in the key index as `cols` (made once) and the tile's number, taken off
    `lse` (which arrives less the row terms)."""
    A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    scale = sm_scale * 1.4426950408889634
    for t in range(t0, t1):
        slot = t % STAGES
        k_tile = k_smem.index(slot)
        start_n = _gl_tile_start(KV_IDX, FULL_IDX, irow, t, n_partial, BLOCK_N)
        kv_idx = (start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT)))[None, :]
        mbarrier.wait(ready.index(slot), (t // STAGES) & 1)
        s = warpgroup_mma(q_tile, k_tile.permute((1, 0)), zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do_tile, v_smem.index(slot).permute((1, 0)), zero, use_acc=False,
                           is_async=True)
        s, dp = warpgroup_mma_wait(num_outstanding=0, deps=(s, dp))
        if TILE_TERMS:
            s, dsdx = _score_rest_grad__H__(s, sm_scale, b, h, q_idx, kv_idx, q0, cols,
                                            __CAPS__)
            shift = _score_tile__H__(sm_scale, b, h, start_n, q0, __CAPS__)
            p = gl.exp2(s - (lse - shift)[:, None])
        elif HAS_SCORE_MOD:
            s, dsdx = _score_mod_grad__H__(s, sm_scale, b, h, q_idx, kv_idx, __CAPS__)
            p = gl.exp2(s - lse[:, None])
        else:
            p = gl.exp2(s * scale - lse[:, None])
        if MASK == 1:
            p = gl.where(_mask_mod__H__(b, h, q_idx, kv_idx, __CAPS__), p, 0.0)
        elif MASK == 0:
            if t < n_partial:
                p = gl.where(_mask_mod__H__(b, h, q_idx, kv_idx, __CAPS__), p, 0.0)
        ds = p * (dp - delta[:, None])
        if HAS_SCORE_MOD:
            ds = _scale_ds(ds, p, dsdx)
        ds16 = gl.convert_layout(ds.to(k_smem.dtype), A_LAYOUT)
        dq = warpgroup_mma(ds16, k_tile, dq, is_async=True)
        dq, ds16 = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ds16))
        mbarrier.arrive(empty.index(slot), count=1)
    return dq


@gluon.jit
def _gl_dq_consumer(C: gl.constexpr, q_smem, do_smem, k_smem, v_smem, q_bars, ready, empty,
                    dq_desc, O, LSE, DELTA, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                    o_base, start_m, b, h, bh, Q_LEN, stride_om, sm_scale, __CAPS__
                    ROWS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                    STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                    HAS_SCORE_MOD: gl.constexpr, FUSED_DELTA: gl.constexpr,
                    SPLIT: gl.constexpr, TILE_TERMS: gl.constexpr):
    """dQ of query rows [start_m + C * ROWS, + ROWS) over the row block's tiles
    (_gl_dq_tiles) -- in two loops, partial tiles then full ones, where SPLIT. The mods'
    loads of one element per (b, h) are made here, once (hoist.py: the `_h` mods), as are
    TILE_TERMS' per-key vector and the row terms taken off the lse (a row's lse is +inf
    where it sees no key, and stays so)."""
    __HOIST__
    q0 = start_m + C * ROWS
    q_tile = q_smem.index(C)
    do_tile = do_smem.index(C)
    ROW: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    offs_m = q0 + gl.arange(0, ROWS, layout=ROW)
    q_idx = offs_m[:, None]
    lse = gl.load(LSE + bh * Q_LEN + offs_m)
    cols = 0.0
    if TILE_TERMS:
        j = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))[None, :]
        cols = _score_cols__H__(sm_scale, b, h, j, q0, __CAPS__)
        lse = lse - _row_shift__H__(sm_scale, b, h, offs_m, q0, __CAPS__)
    mbarrier.wait(q_bars.index(C), 0)
    if FUSED_DELTA:
        delta = _gl_dq_delta(O, DELTA, do_tile, o_base, bh, q0, Q_LEN, stride_om, ROWS, D, ROW)
    else:
        delta = gl.load(DELTA + bh * Q_LEN + offs_m)
    zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=S_LAYOUT)
    dq = gl.zeros([ROWS, D], gl.float32, layout=O_LAYOUT)
    # SPLIT: the partial tiles' loop, then the full ones' without mask code; else one loop
    # masking where t < n_partial
    end = n_tiles
    if SPLIT:
        end = n_partial
    dq = _gl_dq_tiles(0, end, dq, zero, q_tile, do_tile, k_smem, v_smem, ready, empty, KV_IDX,
                      FULL_IDX, irow, n_partial, lse, delta, q_idx, b, h, sm_scale, q0, cols,
                      __CAPS__ BLOCK_N, STAGES, S_LAYOUT, O_LAYOUT, HAS_SCORE_MOD, TILE_TERMS,
                      1 if SPLIT else 0)
    if SPLIT:
        dq = _gl_dq_tiles(n_partial, n_tiles, dq, zero, q_tile, do_tile, k_smem, v_smem, ready,
                          empty, KV_IDX, FULL_IDX, irow, n_partial, lse, delta, q_idx, b, h,
                          sm_scale, q0, cols, __CAPS__ BLOCK_N, STAGES, S_LAYOUT, O_LAYOUT,
                          HAS_SCORE_MOD, TILE_TERMS, 2)
    q_tile.store((dq * sm_scale).to(k_smem.dtype))     # Q is spent: dQ leaves through it
    fence_async_shared()
    _gl_tma_store(dq_desc, [q_row + C * ROWS, 0], q_tile)
    tma.store_wait(pendings=0)


@gluon.jit(do_not_specialize=["HEAD_GROUP"])
def _attn_bwd_dq_ws(q_desc, do_desc, k_desc, v_desc, dq_desc, O, LSE, DELTA, __CAPS__
                    KV_NUM, KV_IDX, FULL_NUM, FULL_IDX, snb, snh, snm, sib, sih, sim,
                    stride_ob, stride_oh, stride_om, sm_scale, Q_LEN, KV_LEN, H, GROUPS,
                    NUM_M_BLOCKS, HEAD_GROUP,
                    ROWS: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                    STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                    HAS_SCORE_MOD: gl.constexpr, FUSED_DELTA: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, SPLIT: gl.constexpr = False,
                    TILE_TERMS: gl.constexpr = False):
    """dQ (and, FUSED_DELTA, delta) of 2 * ROWS query rows of one (batch, head)."""
    b, h, bh, start_m = _gl_program(NUM_M_BLOCKS, HEAD_GROUP, H, 2 * ROWS)
    q_row = bh * Q_LEN + start_m
    kv_row = (b * (H // GROUPS) + h // GROUPS) * KV_LEN
    o_base = b * stride_ob + h * stride_oh
    irow, n_partial, n_tiles = _gl_row_tiles(KV_NUM, FULL_NUM, snb, snh, snm, sib, sih, sim,
                                             b, h, start_m, 2 * ROWS)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, ROWS, D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, [2, ROWS, D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bars = _gl_barriers(2, 1)
    ready = _gl_barriers(STAGES, 1)
    empty = _gl_barriers(STAGES, 2)           # both consumers release a slot
    gl.warp_specialize([
        (_gl_dq_consumer, (0, q_smem, do_smem, k_smem, v_smem, q_bars, ready, empty, dq_desc,
                           O, LSE, DELTA, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                           o_base, start_m, b, h, bh, Q_LEN, stride_om, sm_scale, __CAPS__
                           ROWS, BLOCK_N, D, STAGES, S_LAYOUT, O_LAYOUT, HAS_SCORE_MOD,
                           FUSED_DELTA, SPLIT, TILE_TERMS)),
        (_gl_dq_consumer, (1, q_smem, do_smem, k_smem, v_smem, q_bars, ready, empty, dq_desc,
                           O, LSE, DELTA, KV_IDX, FULL_IDX, irow, n_partial, n_tiles, q_row,
                           o_base, start_m, b, h, bh, Q_LEN, stride_om, sm_scale, __CAPS__
                           ROWS, BLOCK_N, D, STAGES, S_LAYOUT, O_LAYOUT, HAS_SCORE_MOD,
                           FUSED_DELTA, SPLIT, TILE_TERMS)),
        (_gl_dq_loader, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                         q_bars, ready, empty, KV_IDX, FULL_IDX, irow, n_partial, n_tiles,
                         q_row, kv_row, ROWS, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])
'''

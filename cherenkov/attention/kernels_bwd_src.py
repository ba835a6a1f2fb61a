'''Triton source of the backward attention kernels: delta, dK/dV (optionally storing dS), dQ
by recomputation, and dQ from stored dS. Part of kernels_src.KERNELS, whose conventions (layouts,
log2-domain LSE, block-mask lists, descriptor forms) and helpers (_program_block, _query_rows,
the rendered mods) they share.
'''

BACKWARD = r'''
@triton.jit
def _attn_bwd_delta(O, DO, DELTA, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                    stride_dom, Q_LEN, H, D: tl.constexpr, D_PAD: tl.constexpr,
                    BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    mask = (offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D)
    o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * Q_LEN + offs_m, tl.sum(o * do, 1), mask=offs_m < Q_LEN)


@triton.jit
def _dkdv_q_tile(Q_base, QD, q_row, start_m, offs_d, Q_LEN, stride_qm,
                 D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                 EVEN_M: tl.constexpr, TMA: tl.constexpr):
    """The query tile at start_m, transposed: (D_PAD, BLOCK_M)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    qT_ptrs = Q_base + offs_m[None, :] * stride_qm + offs_d[:, None]
    if TMA == 2:
        qT = QD.load([q_row + start_m, 0]).T
    elif EVEN_M and D == D_PAD:
        qT = tl.load(qT_ptrs)
    else:
        qT = tl.load(qT_ptrs, mask=(offs_m[None, :] < Q_LEN) & (offs_d[:, None] < D), other=0.0)
    return qT


@triton.jit
def _dkdv_rows(DO_base, DOD, LSE_base, DELTA_base, q_row, start_m, offs_d, Q_LEN, stride_dom,
               D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
               EVEN_M: tl.constexpr, TMA: tl.constexpr):
    """dO (BLOCK_M, D_PAD), lse and delta of the query rows at start_m."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    do_ptrs = DO_base + offs_m[:, None] * stride_dom + offs_d[None, :]
    if TMA == 2:
        do = DOD.load([q_row + start_m, 0])
    elif EVEN_M and D == D_PAD:
        do = tl.load(do_ptrs)
    else:
        do = tl.load(do_ptrs, mask=(offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D), other=0.0)
    lse = tl.load(LSE_base + offs_m, mask=offs_m < Q_LEN, other=float("inf"))
    delta = tl.load(DELTA_base + offs_m, mask=offs_m < Q_LEN, other=0.0)
    return do, lse, delta


@triton.jit
def _dkdv_update(dk, dv, qkT, qT, do, lse, delta, v, DS, DSD, ds_row, ds_q_rows, start_m, offs_n,
                 b, h, sm_scale, n0, cols, rows, __CAPS__
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPARSE_M: tl.constexpr,
                 IS_PARTIAL: tl.constexpr, HAS_SCORE_MOD: tl.constexpr, DOT_PREC: tl.constexpr,
                 TMA: tl.constexpr, DP_FIRST: tl.constexpr, DS_STORE: tl.constexpr,
                 TILE_TERMS: tl.constexpr):
    """DP_FIRST (score mods whose derivative varies per score): dP's matmul issued right
    after S's is at hand and dS formed before the dV matmul -- no tile held across the dP
    matmul, so the derivative's tile fits beside 64-row steps (softcap forward+backward 2.64
    vs 2.82 ms with 32-row steps, bench/results/2026-12-01_attention_bwd_order_variants_h200_
    d9ee083.md); without a score mod's derivative tile that order takes 17-26% longer
    (causal, ALiBi).
    DS_STORE (launch_bwd.DS_STORE): this tile's dS^T is also stored for _attn_bwd_dq_ds, so no dQ
    kernel recomputes S and dP, at rows ds_row (this program's first key row) + the query
    block's ds_q_rows of DS (see _attn_bwd_dkdv). With TMA == 2 through DSD: an asynchronous
    bulk copy that Triton's pipeliner waits on only before the next tile's.
    TILE_TERMS (tile_terms.py, rows_from_offsets): the score's key-linear terms as `cols`
    (a vector over this program's keys) plus a number per query tile, its row terms as
    `rows` (over the tile's row offsets), both made once: per score the rest only."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    if DP_FIRST:
        dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)          # (BLOCK_N, BLOCK_M)
    q_idx = offs_m[None, :]
    kv_idx = offs_n[:, None]
    if TILE_TERMS:        # q0 = start_m: the tile's number, the rows' terms from offsets
        sT, dsdx = _score_rest_grad__H__(qkT, sm_scale, b, h, q_idx, kv_idx, start_m, cols,
                                         __CAPS__)
        shift = _score_tile__H__(sm_scale, b, h, n0, start_m, __CAPS__)
        pT = tl.exp2(sT - (lse - rows - shift)[None, :])
    elif HAS_SCORE_MOD:
        sT, dsdx = _score_mod_grad__H__(qkT, sm_scale, b, h, q_idx, kv_idx, __CAPS__)
        pT = tl.exp2(sT - lse[None, :])
    else:
        pT = tl.exp2(qkT * (sm_scale * 1.4426950408889634) - lse[None, :])
    if IS_PARTIAL:
        pT = tl.where(_mask_mod__H__(b, h, q_idx, kv_idx, __CAPS__), pT, 0.0)
    if DP_FIRST:
        dsT = pT * (dpT - delta[None, :])
        if HAS_SCORE_MOD:
            dsT = _scale_ds(dsT, pT, dsdx)
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PREC)
    else:
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PREC)
        dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)          # (BLOCK_N, BLOCK_M)
        dsT = pT * (dpT - delta[None, :])
        if HAS_SCORE_MOD:
            dsT = _scale_ds(dsT, pT, dsdx)
    ds16 = dsT.to(qT.dtype)
    dk = tl.dot(ds16, tl.trans(qT), dk, input_precision=DOT_PREC)
    if DS_STORE:
        m_blk = start_m // SPARSE_M
        row = ds_row + m_blk * ds_q_rows
        col = start_m - m_blk * SPARSE_M
        if TMA == 2:
            DSD.store([row, col], ds16)
        else:
            rows = (row + tl.arange(0, BLOCK_N)).to(tl.int64)
            tl.store(DS + rows[:, None] * SPARSE_M + (col + tl.arange(0, BLOCK_M))[None, :], ds16)
    return dk, dv


@triton.jit
def _dkdv_tiles(dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, QD, DOD, DS, DSD, ds_row,
                ds_q_rows, q_row, IDX, irow, n, n0, offs_n, offs_d, b, h, sm_scale, Q_LEN,
                stride_qm, stride_dom, __CAPS__
                D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, SPARSE_M: tl.constexpr, IS_PARTIAL: tl.constexpr,
                EVEN_M: tl.constexpr, HAS_SCORE_MOD: tl.constexpr, DOT_PREC: tl.constexpr,
                TMA: tl.constexpr, DP_FIRST: tl.constexpr, DS_STORE: tl.constexpr,
                TILE_TERMS: tl.constexpr):
    """The n query tiles of the block list at IDX + irow, each loaded (q, then dO and its
    rows' lse and delta), K q^T, then _dkdv_update (the `_h` mods: the loop stores dS, so
    Triton leaves its loads there; hoist.py). n0: the program's first key (offs_n's);
    TILE_TERMS' vectors are made here, once."""
    __HOIST__
    cols = 0.0
    rows = 0.0
    if TILE_TERMS:
        cols = _score_cols__H__(sm_scale, b, h, tl.arange(0, BLOCK_N)[:, None], 0, __CAPS__)
        rows = _row_shift__H__(sm_scale, b, h, tl.arange(0, BLOCK_M), 0, __CAPS__)
    for it in range(0, n):
        start_m = _tile_start(IDX, irow, it, SPARSE_M, BLOCK_M)
        qT = _dkdv_q_tile(Q_base, QD, q_row, start_m, offs_d, Q_LEN, stride_qm, D, D_PAD,
                          BLOCK_M, EVEN_M, TMA)
        do, lse, delta = _dkdv_rows(DO_base, DOD, LSE_base, DELTA_base, q_row, start_m,
                                    offs_d, Q_LEN, stride_dom, D, D_PAD, BLOCK_M, EVEN_M, TMA)
        qkT = tl.dot(k, qT, input_precision=DOT_PREC)                 # (BLOCK_N, BLOCK_M)
        dk, dv = _dkdv_update(dk, dv, qkT, qT, do, lse, delta, v, DS, DSD, ds_row, ds_q_rows,
                              start_m, offs_n, b, h, sm_scale, n0, cols, rows, __CAPS__ BLOCK_M,
                              BLOCK_N, SPARSE_M, IS_PARTIAL, HAS_SCORE_MOD, DOT_PREC, TMA,
                              DP_FIRST, DS_STORE, TILE_TERMS)
    return dk, dv


@triton.jit(do_not_specialize=["HEAD_GROUP", "HEAD0"])   # their values never change the code
def _attn_bwd_dkdv(Q, K, V, DO, DK, DV, LSE, DELTA, __CAPS__
                   Q_NUM, Q_IDX, FULL_NUM, FULL_IDX, QD, DOD, DS, DSD,
                   stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                   stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
                   stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn,
                   snb, snh, snn, sib, sih, sin,
                   sm_scale, Q_LEN, KV_LEN, H, HK, GROUPS, NUM_N_BLOCKS, HEAD_GROUP, HEAD0,
                   D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPARSE_M: tl.constexpr, SPARSE_N: tl.constexpr,
                   EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
                   DOT_PREC: tl.constexpr, TMA: tl.constexpr, DP_FIRST: tl.constexpr,
                   DS_STORE: tl.constexpr, TILE_TERMS: tl.constexpr = False):
    """dK, dV per key block of the kv heads HEAD0.. (the grid's heads). DS_STORE: each tile's
    dS^T is stored too, into DS (DSD: its 2-D view), rows of SPARSE_M query columns: per query
    head of these kv heads (in grid order), per query block, one row per key index (KV_LEN
    rounded up to SPARSE_N) -- the layout _attn_bwd_dq_ds reads."""
    pid_n, local = _program_block(NUM_N_BLOCKS, HEAD_GROUP)   # first key blocks (causal: the
    # longest column) first
    bhk = HEAD0 + local
    b = bhk // HK
    hk = bhk % HK
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D_PAD)
    kv_mask = (offs_n[:, None] < KV_LEN) & (offs_d[None, :] < D)
    k = tl.load(K + b * stride_kb + hk * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :],
                mask=kv_mask, other=0.0)
    v = tl.load(V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, D_PAD], tl.float32)
    dv = tl.zeros([BLOCK_N, D_PAD], tl.float32)
    R = SPARSE_M // BLOCK_M
    ds_q_rows = tl.cdiv(KV_LEN, SPARSE_N) * SPARSE_N          # DS rows per query block
    ds_head_rows = tl.cdiv(Q_LEN, SPARSE_M) * ds_q_rows
    for g in range(0, GROUPS):
        h = hk * GROUPS + g
        ds_row = (local * GROUPS + g) * ds_head_rows + start_n
        Q_base = Q + b * stride_qb + h * stride_qh
        DO_base = DO + b * stride_dob + h * stride_doh
        LSE_base = LSE + (b * H + h) * Q_LEN
        DELTA_base = DELTA + (b * H + h) * Q_LEN
        q_row = (b * H + h) * Q_LEN                      # TMA == 2: rows of (B*H*Q_LEN, D)
        row = b * snb + h * snh + (start_n // SPARSE_N) * snn
        irow = b * sib + h * sih + (start_n // SPARSE_N) * sin
        dk, dv = _dkdv_tiles(dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, QD, DOD,
                             DS, DSD, ds_row, ds_q_rows, q_row, Q_IDX, irow,
                             tl.load(Q_NUM + row) * R, start_n, offs_n, offs_d, b, h,
                             sm_scale, Q_LEN, stride_qm, stride_dom, __CAPS__ D, D_PAD,
                             BLOCK_M, BLOCK_N, SPARSE_M, True, EVEN_M, HAS_SCORE_MOD, DOT_PREC,
                             TMA, DP_FIRST, DS_STORE, TILE_TERMS)
        dk, dv = _dkdv_tiles(dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, QD, DOD,
                             DS, DSD, ds_row, ds_q_rows, q_row, FULL_IDX, irow,
                             tl.load(FULL_NUM + row) * R, start_n, offs_n, offs_d, b, h,
                             sm_scale, Q_LEN, stride_qm, stride_dom, __CAPS__ D, D_PAD,
                             BLOCK_M, BLOCK_N, SPARSE_M, False, EVEN_M, HAS_SCORE_MOD, DOT_PREC,
                             TMA, DP_FIRST, DS_STORE, TILE_TERMS)
    dk = dk * sm_scale
    tl.store(DK + b * stride_dkb + hk * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + b * stride_dvb + hk * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_kv_tile(Base, Desc, kv_row, start_n, offs_d, KV_LEN, stride_n,
                D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                EVEN_N: tl.constexpr, TMA: tl.constexpr):
    """The K (or V) tile at start_n, transposed: (D_PAD, BLOCK_N)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    ptrs = Base + offs_n[None, :] * stride_n + offs_d[:, None]
    if TMA == 2:
        tile = Desc.load([kv_row + start_n, 0]).T
    elif EVEN_N and D == D_PAD:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=(offs_n[None, :] < KV_LEN) & (offs_d[:, None] < D), other=0.0)
    return tile


@triton.jit
def _dq_update(dq, qk, kT, vT, do, lse, delta, start_n, offs_m, b, h, sm_scale, KV_LEN,
               __CAPS__ __GRADS__
               BLOCK_N: tl.constexpr, IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr,
               HAS_SCORE_MOD: tl.constexpr, HAS_CAPTURE_GRADS: tl.constexpr,
               DOT_PREC: tl.constexpr):
    """dQ's step for the key tile at start_n given its scores qk (and K^T, V^T): dP, dS,
    dS K."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    q_idx = offs_m[:, None]
    kv_idx = offs_n[None, :]
    if HAS_SCORE_MOD:
        s, dsdx = _score_mod_grad(qk, sm_scale, b, h, q_idx, kv_idx, __CAPS__)
        p = tl.exp2(s - lse[:, None])
    else:
        p = tl.exp2(qk * (sm_scale * 1.4426950408889634) - lse[:, None])
    if IS_PARTIAL:
        p = tl.where(_mask_mod(b, h, q_idx, kv_idx, __CAPS__), p, 0.0)
    if not EVEN_N:
        p = tl.where(kv_idx < KV_LEN, p, 0.0)
    dp = tl.dot(do, vT, input_precision=DOT_PREC)
    ds = p * (dp - delta[:, None])
    if HAS_SCORE_MOD:
        if HAS_CAPTURE_GRADS:
            _capture_grads(qk * sm_scale, ds, p != 0.0, b, h, q_idx, kv_idx, __CAPS__ __GRADS__)
        ds = _scale_ds(ds, p, dsdx)
    return tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision=DOT_PREC)


@triton.jit
def _dq_tiles(dq, q, do, lse, delta, K_base, V_base, KD, VD, kv_row, IDX, irow, n, offs_m,
              offs_d, b, h, sm_scale, KV_LEN, stride_kn, stride_vn, __CAPS__ __GRADS__
              D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
              SPARSE_N: tl.constexpr, IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr,
              HAS_SCORE_MOD: tl.constexpr, HAS_CAPTURE_GRADS: tl.constexpr,
              DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    """The n key tiles of the block list at IDX + irow, each loaded (K, V), q K^T, then
    _dq_update."""
    for it in range(0, n):
        start_n = _tile_start(IDX, irow, it, SPARSE_N, BLOCK_N)
        kT = _dq_kv_tile(K_base, KD, kv_row, start_n, offs_d, KV_LEN, stride_kn, D, D_PAD,
                         BLOCK_N, EVEN_N, TMA)
        vT = _dq_kv_tile(V_base, VD, kv_row, start_n, offs_d, KV_LEN, stride_vn, D, D_PAD,
                         BLOCK_N, EVEN_N, TMA)
        qk = tl.dot(q, kT, input_precision=DOT_PREC)
        dq = _dq_update(dq, qk, kT, vT, do, lse, delta, start_n, offs_m, b, h, sm_scale,
                        KV_LEN, __CAPS__ __GRADS__ BLOCK_N, IS_PARTIAL, EVEN_N,
                        HAS_SCORE_MOD, HAS_CAPTURE_GRADS, DOT_PREC)
    return dq


@triton.jit(do_not_specialize=["HEAD_GROUP"])   # its value never changes the code
def _attn_bwd_dq(Q, K, V, DO, DQ, LSE, DELTA, O, __CAPS__ __GRADS__
                 KV_NUM, KV_IDX, FULL_NUM, FULL_IDX, KD, VD,
                 stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                 stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
                 stride_dqb, stride_dqh, stride_dqm, stride_ob, stride_oh, stride_om,
                 snb, snh, snm, sib, sih, sim,
                 sm_scale, Q_LEN, KV_LEN, H, GROUPS, NUM_M_BLOCKS, HEAD_GROUP,
                 D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, SPARSE_M: tl.constexpr, SPARSE_N: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
                 HAS_CAPTURE_GRADS: tl.constexpr, FUSED_DELTA: tl.constexpr,
                 DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    """dQ per query block. FUSED_DELTA: the rows' delta = rowsum(dO * O) is computed here
    (and stored for the dK/dV kernel, launched after this one) instead of by _attn_bwd_delta."""
    blk, bh = _program_block(NUM_M_BLOCKS, HEAD_GROUP)
    b, h, hk, start_m, offs_m = _query_rows(blk, bh, H, GROUPS, NUM_M_BLOCKS, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    row_mask = (offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=row_mask, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :], mask=row_mask, other=0.0)
    lse = tl.load(LSE + bh * Q_LEN + offs_m, mask=offs_m < Q_LEN, other=float("inf"))
    if FUSED_DELTA:
        o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
                    + offs_d[None, :], mask=row_mask, other=0.0)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        tl.store(DELTA + bh * Q_LEN + offs_m, delta, mask=offs_m < Q_LEN)
    else:
        delta = tl.load(DELTA + bh * Q_LEN + offs_m, mask=offs_m < Q_LEN, other=0.0)
    K_base = K + b * stride_kb + hk * stride_kh
    V_base = V + b * stride_vb + hk * stride_vh
    kv_row = (b * (H // GROUPS) + hk) * KV_LEN           # TMA == 2: rows of (B*HK*KV_LEN, D)
    dq = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    R = SPARSE_N // BLOCK_N
    row = b * snb + h * snh + (start_m // SPARSE_M) * snm
    irow = b * sib + h * sih + (start_m // SPARSE_M) * sim
    dq = _dq_tiles(dq, q, do, lse, delta, K_base, V_base, KD, VD, kv_row, KV_IDX, irow,
                   tl.load(KV_NUM + row) * R, offs_m, offs_d, b, h, sm_scale, KV_LEN, stride_kn,
                   stride_vn, __CAPS__ __GRADS__ D, D_PAD, BLOCK_N, SPARSE_N, True, EVEN_N,
                   HAS_SCORE_MOD, HAS_CAPTURE_GRADS, DOT_PREC, TMA)
    dq = _dq_tiles(dq, q, do, lse, delta, K_base, V_base, KD, VD, kv_row, FULL_IDX, irow,
                   tl.load(FULL_NUM + row) * R, offs_m, offs_d, b, h, sm_scale, KV_LEN,
                   stride_kn, stride_vn, __CAPS__ __GRADS__ D, D_PAD, BLOCK_N, SPARSE_N, False,
                   EVEN_N, HAS_SCORE_MOD, HAS_CAPTURE_GRADS, DOT_PREC, TMA)
    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_mask)


@triton.jit
def _dq_ds_tile(dq, DS, DSD, ds_row, col, K_base, KD, kv_row, start_n, offs_d, KV_LEN, stride_kn,
                D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, SPARSE_M: tl.constexpr, EVEN_N: tl.constexpr,
                DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if TMA == 2:
        dsT = DSD.load([ds_row + start_n, col])                          # (BLOCK_N, BLOCK_M)
        k = KD.load([kv_row + start_n, 0])
    else:
        ds_ptrs = DS + (ds_row + offs_n).to(tl.int64)[:, None] * SPARSE_M \
            + (col + tl.arange(0, BLOCK_M))[None, :]
        k_ptrs = K_base + offs_n[:, None] * stride_kn + offs_d[None, :]
        if EVEN_N and D == D_PAD:
            dsT = tl.load(ds_ptrs)
            k = tl.load(k_ptrs)
        else:      # key rows past KV_LEN: dS there was never written (or is not 0: K is)
            dsT = tl.load(ds_ptrs, mask=offs_n[:, None] < KV_LEN, other=0.0)
            k = tl.load(k_ptrs, mask=(offs_n[:, None] < KV_LEN) & (offs_d[None, :] < D),
                        other=0.0)
    return tl.dot(tl.trans(dsT), k, dq, input_precision=DOT_PREC)


@triton.jit(do_not_specialize=["HEAD_GROUP", "HEAD0"])   # their values never change the code
def _attn_bwd_dq_ds(K, DQ, DS, KV_NUM, KV_IDX, FULL_NUM, FULL_IDX, DSD, KD,
                    stride_kb, stride_kh, stride_kn, stride_dqb, stride_dqh, stride_dqm,
                    snb, snh, snm, sib, sih, sim,
                    sm_scale, Q_LEN, KV_LEN, H, GROUPS, NUM_M_BLOCKS, HEAD_GROUP, HEAD0,
                    D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, SPARSE_M: tl.constexpr, SPARSE_N: tl.constexpr,
                    EVEN_N: tl.constexpr, DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    """dQ = dS K per query block from the dS tiles _attn_bwd_dkdv stored (DS_STORE) for the
    query heads of kv heads HEAD0.. (the grid's heads): one matmul per tile, no recomputation.
    TMA == 2: dS and K tiles through descriptors (DSD: DS's 2-D view, as the store's)."""
    blk, local = _program_block(NUM_M_BLOCKS, HEAD_GROUP)
    b, h, hk, start_m, offs_m = _query_rows(blk, HEAD0 * GROUPS + local, H, GROUPS,
                                            NUM_M_BLOCKS, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    m_blk = start_m // SPARSE_M
    # DS rows of this query block (key index 0 first; _attn_bwd_dkdv's layout), its columns
    ds_row = (local * tl.cdiv(Q_LEN, SPARSE_M) + m_blk) * (tl.cdiv(KV_LEN, SPARSE_N) * SPARSE_N)
    col = start_m - m_blk * SPARSE_M
    K_base = K + b * stride_kb + hk * stride_kh
    kv_row = (b * (H // GROUPS) + hk) * KV_LEN           # TMA == 2: rows of (B*HK*KV_LEN, D)
    dq = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    R = SPARSE_N // BLOCK_N
    row = b * snb + h * snh + m_blk * snm
    irow = b * sib + h * sih + m_blk * sim
    n_partial = tl.load(KV_NUM + row)
    for it in range(0, n_partial * R):
        start_n = _tile_start(KV_IDX, irow, it, SPARSE_N, BLOCK_N)
        dq = _dq_ds_tile(dq, DS, DSD, ds_row, col, K_base, KD, kv_row, start_n, offs_d, KV_LEN,
                         stride_kn, D, D_PAD, BLOCK_M, BLOCK_N, SPARSE_M, EVEN_N, DOT_PREC, TMA)
    n_full = tl.load(FULL_NUM + row)
    for it in range(0, n_full * R):
        start_n = _tile_start(FULL_IDX, irow, it, SPARSE_N, BLOCK_N)
        dq = _dq_ds_tile(dq, DS, DSD, ds_row, col, K_base, KD, kv_row, start_n, offs_d, KV_LEN,
                         stride_kn, D, D_PAD, BLOCK_M, BLOCK_N, SPARSE_M, EVEN_N, DOT_PREC, TMA)
    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=(offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D))


'''

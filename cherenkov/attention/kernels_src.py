'''Triton source of the block-sparse flash-attention kernels, with slots for the rendered mods.

`codegen.py` prepends the helpers from `render.py` (`_score_mod`, `_score_mod_q0`,
`_row_shift`, `_score_mod_grad`, `_capture_grads`, `_mask_mod`; the tile terms' `_score_cols`,
`_score_tile`, `_score_rest`, `_score_rest_grad`) and replaces `__CAPS__` /
`__GRADS__` with the captured-tensor parameters, `__HOIST__` / `__H__` with hoist.py's loads
and the `_h` helpers' suffix (or `pass` / nothing). Conventions shared by every kernel:

* q, k, v, o are (B, H, S, D) with unit stride along D; H counts query heads, HK kv heads,
  GROUPS = H // HK (GQA); D is padded to the power of two D_PAD with masks.
* Scores are handled in the log2 domain (exp2 with log2(e) folded into the scale). The
  internal LSE is log2-sum-exp2 per row, +inf for a fully masked row, so that the backward's
  p = exp2(s - lse) is 0 there rather than NaN (the user-facing lse is -inf, output 0).
* Block masks come as (count, index list) per (b, h, sparse row block) for partial tiles (the
  mask is applied) and for full tiles (it is not); a kernel tile (BLOCK_M, BLOCK_N) divides the
  sparse tile (SPARSE_M, SPARSE_N), so each listed sparse tile is R sub-tiles.
* The forward may read Q, K, V and write O through TMA tensor descriptors (QD, KD, VD, OD;
  Hopper's bulk copies): TMA == 2 over 2-D views (B*H*S, D) of contiguous tensors whose
  lengths are multiples of the tiles, TMA == 4 over the (B, H, S, D) tensors as they are
  (rows past a head's end read as zeros, stores past it dropped); 0 reads through pointers.
  The backward reads its K / V (dQ) and Q / dO (dK/dV) tiles the 2-D way where it can
  (launch.tma_mode decides), and so stores and reads the stored-dS backward's dS tiles.
* The backward computes dQ either by its own kernel (_attn_bwd_dq: S and dP recomputed) or from
  the dS tiles the dK/dV kernel stores (DS_STORE, _attn_bwd_dq_ds; launch_bwd.DS_STORE decides).
'''

from .kernels_bwd_src import BACKWARD

# forward, then the backward's kernels (kernels_bwd_src.py), then decode and block masks
KERNELS = r'''
@triton.jit
def _fwd_scores(q, K_base, KD, kv_row, hk, start_n, offs_d, b, KV_LEN, stride_kn,
                D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                EVEN_N: tl.constexpr, DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    """q K^T of the key tile at start_n (unscaled)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kT_ptrs = K_base + offs_n[None, :] * stride_kn + offs_d[:, None]      # (D_PAD, BLOCK_N)
    if TMA == 2:
        kT = KD.load([kv_row + start_n, 0]).T
    elif TMA == 4:
        kT = KD.load([b, hk, start_n, 0]).reshape(BLOCK_N, D_PAD).T
    elif EVEN_N and D == D_PAD:
        kT = tl.load(kT_ptrs)
    else:
        kT = tl.load(kT_ptrs, mask=(offs_n[None, :] < KV_LEN) & (offs_d[:, None] < D), other=0.0)
    return tl.dot(q, kT, input_precision=DOT_PREC)                        # (BLOCK_M, BLOCK_N)


@triton.jit
def _fwd_update(acc, l_i, m_i, qk, V_base, VD, kv_row, hk, start_n, start_m, offs_m, offs_d,
                b, h, sm_scale, KV_LEN, stride_vn, __CAPS__
                D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
                DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    """The online softmax's step for the key tile at start_n, given its scores qk: mods,
    mask, rescaled accumulator plus p V."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    v_ptrs = V_base + offs_n[:, None] * stride_vn + offs_d[None, :]       # (BLOCK_N, D_PAD)
    q_idx = offs_m[:, None]
    kv_idx = offs_n[None, :]
    if HAS_SCORE_MOD:
        # log2 domain, less its row terms (added back to the lse by _attn_fwd)
        s = _score_mod_q0(qk, sm_scale, b, h, q_idx, kv_idx, start_m, __CAPS__)
    else:
        s = qk * (sm_scale * 1.4426950408889634)
    if IS_PARTIAL:
        s = tl.where(_mask_mod(b, h, q_idx, kv_idx, __CAPS__), s, float("-inf"))
    if not EVEN_N:
        s = tl.where(kv_idx < KV_LEN, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if TMA == 2:
        v = VD.load([kv_row + start_n, 0])
    elif TMA == 4:
        v = VD.load([b, hk, start_n, 0]).reshape(BLOCK_N, D_PAD)
    elif EVEN_N and D == D_PAD:
        v = tl.load(v_ptrs)
    else:
        v = tl.load(v_ptrs, mask=(offs_n[:, None] < KV_LEN) & (offs_d[None, :] < D), other=0.0)
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
    return acc, l_i, m_new


@triton.jit
def _tile_start(IDX, irow, it, SPARSE: tl.constexpr, BLOCK: tl.constexpr):
    """First row of the it-th kernel tile (of BLOCK rows) of the block list at IDX + irow,
    whose entries are mask tiles of SPARSE rows (SPARSE // BLOCK kernel tiles each)."""
    R: tl.constexpr = SPARSE // BLOCK
    return tl.load(IDX + irow + it // R) * SPARSE + (it % R) * BLOCK


@triton.jit
def _fwd_tiles(acc, l_i, m_i, q, K_base, V_base, KD, VD, kv_row, hk, IDX, irow, n, start_m,
               offs_m, offs_d, b, h, sm_scale, KV_LEN, stride_kn, stride_vn, __CAPS__
               D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
               SPARSE_N: tl.constexpr, IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr,
               HAS_SCORE_MOD: tl.constexpr, DOT_PREC: tl.constexpr, TMA: tl.constexpr):
    """The n key tiles (of BLOCK_N) of the block list at IDX + irow."""
    for it in range(0, n):
        start_n = _tile_start(IDX, irow, it, SPARSE_N, BLOCK_N)
        qk = _fwd_scores(q, K_base, KD, kv_row, hk, start_n, offs_d, b, KV_LEN, stride_kn,
                         D, D_PAD, BLOCK_N, EVEN_N, DOT_PREC, TMA)
        acc, l_i, m_i = _fwd_update(acc, l_i, m_i, qk, V_base, VD, kv_row, hk, start_n,
                                    start_m, offs_m, offs_d, b, h, sm_scale, KV_LEN,
                                    stride_vn, __CAPS__ D, D_PAD, BLOCK_N, IS_PARTIAL,
                                    EVEN_N, HAS_SCORE_MOD, DOT_PREC, TMA)
    return acc, l_i, m_i


@triton.jit
def _program_block(NUM_BLOCKS, HEAD_GROUP):
    """This program's (block, head) of a 1-D grid of NUM_BLOCKS x heads programs. Programs run
    HEAD_GROUP heads at a time and, within a group, block by block with the heads fastest:
    block 0 of every head in the group first (the kernels number blocks longest-first for
    causal masks), while the group's K and V (Q and dO) stay in L2. Heads one after another
    left the longest blocks of the last heads to start near the end (launch.head_group has
    the measurements)."""
    pid = tl.program_id(0)
    n_heads = tl.num_programs(0) // NUM_BLOCKS
    first = (pid // (HEAD_GROUP * NUM_BLOCKS)) * HEAD_GROUP
    size = tl.minimum(HEAD_GROUP, n_heads - first)
    rest = pid - first * NUM_BLOCKS
    return rest // size, first + rest % size


@triton.jit
def _query_rows(blk, bh, H, GROUPS, NUM_M_BLOCKS, BLOCK_M: tl.constexpr):
    """(b, h, kv head, first row, rows) of a query-block program: block `blk` of head `bh`,
    numbered longest (causal) rows first."""
    h = bh % H
    start_m = (NUM_M_BLOCKS - 1 - blk) * BLOCK_M
    return bh // H, h, h // GROUPS, start_m, start_m + tl.arange(0, BLOCK_M)


@triton.jit(do_not_specialize=["HEAD_GROUP"])   # its value never changes the code
def _attn_fwd(Q, K, V, O, LSE, __CAPS__
              KV_NUM, KV_IDX, FULL_NUM, FULL_IDX, QD, KD, VD, OD,
              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
              stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
              snb, snh, snm, sib, sih, sim,
              sm_scale, Q_LEN, KV_LEN, H, GROUPS, NUM_M_BLOCKS, HEAD_GROUP,
              D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              SPARSE_M: tl.constexpr, SPARSE_N: tl.constexpr, EVEN_M: tl.constexpr,
              EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr, DOT_PREC: tl.constexpr,
              TMA: tl.constexpr):
    blk, bh = _program_block(NUM_M_BLOCKS, HEAD_GROUP)
    b, h, hk, start_m, offs_m = _query_rows(blk, bh, H, GROUPS, NUM_M_BLOCKS, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q_row = (b * H + h) * Q_LEN + start_m               # TMA == 2: rows of (B*H*Q_LEN, D)
    kv_row = (b * (H // GROUPS) + hk) * KV_LEN
    if TMA == 2:
        q = QD.load([q_row, 0])
    elif TMA == 4:
        q = QD.load([b, h, start_m, 0]).reshape(BLOCK_M, D_PAD)
    elif EVEN_M and D == D_PAD:
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=(offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D), other=0.0)
    K_base = K + b * stride_kb + hk * stride_kh
    V_base = V + b * stride_vb + hk * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    row = b * snb + h * snh + (start_m // SPARSE_M) * snm
    irow = b * sib + h * sih + (start_m // SPARSE_M) * sim
    R = SPARSE_N // BLOCK_N
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, K_base, V_base, KD, VD, kv_row, hk, KV_IDX,
                               irow, tl.load(KV_NUM + row) * R, start_m, offs_m, offs_d, b, h,
                               sm_scale, KV_LEN, stride_kn, stride_vn, __CAPS__ D, D_PAD,
                               BLOCK_N, SPARSE_N, True, EVEN_N, HAS_SCORE_MOD, DOT_PREC, TMA)
    acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, K_base, V_base, KD, VD, kv_row, hk, FULL_IDX,
                               irow, tl.load(FULL_NUM + row) * R, start_m, offs_m, offs_d, b,
                               h, sm_scale, KV_LEN, stride_kn, stride_vn, __CAPS__ D, D_PAD,
                               BLOCK_N, SPARSE_N, False, EVEN_N, HAS_SCORE_MOD, DOT_PREC, TMA)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, float("inf"), m_i + tl.log2(l_safe))
    if HAS_SCORE_MOD:     # the row terms the tiles left out: into the lse. A row whose term
        # is -inf is every score -inf: output 0, as a fully masked row (the tiles scored it);
        # +inf or NaN: NaN, as the whole scores gave it (row vectors only: through the divisor)
        r = _row_shift(sm_scale, b, h, offs_m, start_m, __CAPS__)
        empty = (l_i == 0.0) | (r == float("-inf"))
        lse = tl.where(empty, float("inf"), lse + r)
        l_safe = tl.where(empty, float("inf"), l_safe - r * 0.0)
    o = acc / l_safe[:, None]
    if TMA == 2:
        OD.store([q_row, 0], o.to(q.dtype))
    elif TMA == 4:
        OD.store([b, h, start_m, 0], o.to(q.dtype).reshape(1, 1, BLOCK_M, D_PAD))
    else:
        o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
        tl.store(o_ptrs, o.to(O.dtype.element_ty),
                 mask=(offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D))
    tl.store(LSE + bh * Q_LEN + offs_m, lse, mask=offs_m < Q_LEN)


''' + BACKWARD + r'''
@triton.jit
def _attn_decode_split(Q, K, V, O_PART, LSE_PART, __CAPS__
                       BLK_NUM, BLK_IDX, BLK_FULL,
                       stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                       stride_vb, stride_vh, stride_vn,
                       sm_scale, Q_LEN, KV_LEN, HK, GROUPS, NUM_SPLITS, BLOCKS_PER_SPLIT,
                       NUM_KV_BLOCKS,
                       D: tl.constexpr, D_PAD: tl.constexpr, ROWS: tl.constexpr,
                       BLOCK_N: tl.constexpr, SPARSE_N: tl.constexpr, EVEN_N: tl.constexpr,
                       HAS_SCORE_MOD: tl.constexpr, HAS_MASK: tl.constexpr,
                       DENSE: tl.constexpr, DOT_PREC: tl.constexpr):
    """One (b, kv head, split): all GROUPS x Q_LEN query rows of the kv head at once. DENSE
    (no mask): every KV block in order, the block lists unread."""
    split = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // HK
    hk = bhk % HK
    rows = tl.arange(0, ROWS)
    g = rows // Q_LEN
    qpos = rows % Q_LEN
    row_ok = rows < GROUPS * Q_LEN
    h = hk * GROUPS + g
    offs_d = tl.arange(0, D_PAD)
    q = tl.load(Q + b * stride_qb + h[:, None] * stride_qh + qpos[:, None] * stride_qm
                + offs_d[None, :], mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)
    K_base = K + b * stride_kb + hk * stride_kh
    V_base = V + b * stride_vb + hk * stride_vh
    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, D_PAD], tl.float32)
    R = SPARSE_N // BLOCK_N
    if DENSE:
        n_blocks = tl.cdiv(KV_LEN, SPARSE_N)
    else:
        n_blocks = tl.load(BLK_NUM + bhk)
    first = split * BLOCKS_PER_SPLIT
    last = tl.minimum(n_blocks, first + BLOCKS_PER_SPLIT)
    q_idx = qpos[:, None]
    h_idx = h[:, None]
    for it in range(first * R, last * R):
        if DENSE:
            blk = it // R
        else:
            blk = tl.load(BLK_IDX + bhk * NUM_KV_BLOCKS + it // R)
        offs_n = blk * SPARSE_N + (it % R) * BLOCK_N + tl.arange(0, BLOCK_N)
        kv_idx = offs_n[None, :]
        if EVEN_N and D == D_PAD:
            kT = tl.load(K_base + offs_n[None, :] * stride_kn + offs_d[:, None])
            v = tl.load(V_base + offs_n[:, None] * stride_vn + offs_d[None, :])
        else:
            kT = tl.load(K_base + offs_n[None, :] * stride_kn + offs_d[:, None],
                         mask=(offs_n[None, :] < KV_LEN) & (offs_d[:, None] < D), other=0.0)
            v = tl.load(V_base + offs_n[:, None] * stride_vn + offs_d[None, :],
                        mask=(offs_n[:, None] < KV_LEN) & (offs_d[None, :] < D), other=0.0)
        qk = tl.dot(q, kT, input_precision=DOT_PREC)                     # (ROWS, BLOCK_N)
        if HAS_SCORE_MOD:
            s = _score_mod(qk, sm_scale, b, h_idx, q_idx, kv_idx, __CAPS__)
        else:
            s = qk * (sm_scale * 1.4426950408889634)
        keep = row_ok[:, None] & (kv_idx < KV_LEN)
        if HAS_MASK:
            full = tl.load(BLK_FULL + bhk * NUM_KV_BLOCKS + it // R)
            keep = keep & (_mask_mod(b, h_idx, q_idx, kv_idx, __CAPS__) | (full != 0))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out_base = (bhk * NUM_SPLITS + split) * ROWS
    tl.store(O_PART + (out_base + rows[:, None]) * D_PAD + offs_d[None, :], acc / l_safe[:, None])
    tl.store(LSE_PART + out_base + rows, tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe)))


@triton.jit
def _attn_decode_combine(O_PART, LSE_PART, O, LSE, stride_ob, stride_oh, stride_om,
                         Q_LEN, HK, GROUPS, NUM_SPLITS,
                         D: tl.constexpr, D_PAD: tl.constexpr, ROWS: tl.constexpr,
                         SPLITS_PAD: tl.constexpr):
    """One (b, kv head, row): merge the splits' partial outputs by their log-sum-exp."""
    row = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // HK
    hk = bhk % HK
    g = row // Q_LEN
    qpos = row % Q_LEN
    h = hk * GROUPS + g
    splits = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, D_PAD)
    base = (bhk * NUM_SPLITS + splits) * ROWS + row
    lse = tl.load(LSE_PART + base, mask=splits < NUM_SPLITS, other=float("-inf"))
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m_safe)
    total = tl.sum(w, 0)
    parts = tl.load(O_PART + base[:, None] * D_PAD + offs_d[None, :],
                    mask=(splits[:, None] < NUM_SPLITS), other=0.0)
    o = tl.sum(parts * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(O + b * stride_ob + h * stride_oh + qpos * stride_om + offs_d,
             o.to(O.dtype.element_ty), mask=offs_d < D)
    lse_out = tl.where(total == 0.0, float("inf"), m_safe + tl.log2(tl.where(total == 0.0, 1.0, total)))
    tl.store(LSE + (b * HK * GROUPS + h) * Q_LEN + qpos, lse_out)


@triton.jit
def _block_state(STATE, __CAPS__ Q_LEN, KV_LEN, HM, NUM_KV_BLOCKS,
                 BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr):
    """One tile of a block mask: 0 empty, 1 partial, 2 full (positions past the ends ignored)."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HM
    h = bh % HM
    qb = pid // NUM_KV_BLOCKS
    kb = pid % NUM_KV_BLOCKS
    offs_q = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = kb * BLOCK_KV + tl.arange(0, BLOCK_KV)
    valid = (offs_q[:, None] < Q_LEN) & (offs_k[None, :] < KV_LEN)
    q_idx = tl.minimum(offs_q, Q_LEN - 1)[:, None]
    kv_idx = tl.minimum(offs_k, KV_LEN - 1)[None, :]
    m = _mask_mod(b, h, q_idx, kv_idx, __CAPS__)
    # one reduction, not an any and an all: count the kept positions against the valid ones
    kept = tl.sum(tl.sum(tl.where(valid & m, 1, 0), 1), 0)
    n_valid = (tl.minimum(BLOCK_Q, Q_LEN - qb * BLOCK_Q)
               * tl.minimum(BLOCK_KV, KV_LEN - kb * BLOCK_KV))
    state = tl.where(kept == n_valid, 2, tl.where(kept > 0, 1, 0))
    tl.store(STATE + bh * tl.num_programs(0) + pid, state.to(tl.int8))


@triton.jit
def _block_list(s, offs, ok, KIND: tl.constexpr, NUM, IDX, pid, N):
    """The tiles of state KIND first, in increasing order, then the others: a stable
    partition by one prefix sum (what block_mask._compact does in torch)."""
    hit = (s == KIND) & ok
    h = hit.to(tl.int32)
    before = tl.cumsum(h, 0) - h
    num = tl.sum(h, 0)
    tl.store(IDX + pid * N + tl.where(hit, before, num + offs - before), offs, mask=ok)
    tl.store(NUM + pid, num)


@triton.jit
def _block_lists(STATE, NUM_P, IDX_P, NUM_F, IDX_F, ROWS, N, stride_bh, stride_row, stride_el,
                 BLOCK: tl.constexpr):
    """One row of tile states (a q-block's kv tiles, or a kv-block's q tiles) into the
    partial and the full index lists."""
    pid = tl.program_id(0)
    base = STATE + (pid // ROWS) * stride_bh + (pid % ROWS) * stride_row
    offs = tl.arange(0, BLOCK)
    ok = offs < N
    s = tl.load(base + offs * stride_el, mask=ok, other=-1).to(tl.int32)
    _block_list(s, offs, ok, 1, NUM_P, IDX_P, pid, N)
    _block_list(s, offs, ok, 2, NUM_F, IDX_F, pid, N)
'''

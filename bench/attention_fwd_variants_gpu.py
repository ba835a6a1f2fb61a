"""Forward-kernel variants on the GPU: which inner-loop rewrites speed our attention forward?

Each variant replaces the forward part of the kernel source (`_fwd_tile` and `_attn_fwd`) by
a rewrite with three switches, checks it against the unpatched kernel, and times it (do_bench
median, best of 2 interleaved rounds):

* raw max: without a score mod, the row max is taken on the raw q.k products and scaled
  once per row, so a score costs one FMA (q.k * scale - max) instead of a multiply and a
  subtract (the scaled scores were kept for both the max and the exponent);
* lazy rescale: on full tiles, the running max (and with it the rescale of the accumulator,
  l and m) moves only when some row's max grew by more than 8 (log2 domain, a factor 256),
  as in FlashAttention-4; exact up to rounding, the final division by l undoes it;
* prefetch: over full tiles, the next tile's q.k MMA is issued before this tile's softmax,
  so the tensor cores work while the softmax runs (FlashAttention-3's intra-warpgroup
  overlap, written as a software-pipelined loop).

    CHERENKOV_COMMIT=<sha> python bench/attention_fwd_variants_gpu.py OUT_DIR

B=4 H=16 S=4096 D=128 bf16 forward. Writes OUT_DIR/attention_fwd_variants.{md,json}.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import codegen, tuning  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

K = tuning.KernelConfig
B, H, S, D = 4, 16, 4096, 128

FWD = r'''
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
        s = _score_mod(qk * sm_scale, b, h, q_idx, kv_idx, __CAPS__) * 1.4426950408889634
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
def _attn_fwd(Q, K, V, O, LSE, __CAPS__
              KV_NUM, KV_IDX, FULL_NUM, FULL_IDX,
              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
              stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
              snb, snh, snm, sib, sih, sim,
              sm_scale, Q_LEN, KV_LEN, H, GROUPS, NUM_M_BLOCKS,
              D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              SPARSE_M: tl.constexpr, SPARSE_N: tl.constexpr, EVEN_M: tl.constexpr,
              EVEN_N: tl.constexpr, HAS_SCORE_MOD: tl.constexpr, DOT_PREC: tl.constexpr):
    pid_m = NUM_M_BLOCKS - 1 - tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUPS
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    if EVEN_M and D == D_PAD:
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=(offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D), other=0.0)
    K_base = K + b * stride_kb + hk * stride_kh
    V_base = V + b * stride_vb + hk * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    R = SPARSE_N // BLOCK_N
    row = b * snb + h * snh + (start_m // SPARSE_M) * snm
    irow = b * sib + h * sih + (start_m // SPARSE_M) * sim
    n_partial = tl.load(KV_NUM + row)
    for it in range(0, n_partial * R):
        start_n = tl.load(KV_IDX + irow + it // R) * SPARSE_N + (it % R) * BLOCK_N
        qk = _fwd_qk(q, K_base, start_n, offs_d, KV_LEN, stride_kn, D, D_PAD, BLOCK_N, EVEN_N,
                     DOT_PREC)
        acc, l_i, m_i = _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h,
                                sm_scale, KV_LEN, stride_vn, __CAPS__
                                D, D_PAD, BLOCK_N, True, EVEN_N, HAS_SCORE_MOD, DOT_PREC)
    n_full = tl.load(FULL_NUM + row) * R
    if __PREFETCH__:
        if n_full > 0:
            start_n = tl.load(FULL_IDX + irow) * SPARSE_N
            qk = _fwd_qk(q, K_base, start_n, offs_d, KV_LEN, stride_kn, D, D_PAD, BLOCK_N,
                         EVEN_N, DOT_PREC)
            for it in range(1, n_full):
                start_next = tl.load(FULL_IDX + irow + it // R) * SPARSE_N + (it % R) * BLOCK_N
                qk_next = _fwd_qk(q, K_base, start_next, offs_d, KV_LEN, stride_kn, D, D_PAD,
                                  BLOCK_N, EVEN_N, DOT_PREC)
                acc, l_i, m_i = _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b,
                                        h, sm_scale, KV_LEN, stride_vn, __CAPS__
                                        D, D_PAD, BLOCK_N, False, EVEN_N, HAS_SCORE_MOD,
                                        DOT_PREC)
                qk = qk_next
                start_n = start_next
            acc, l_i, m_i = _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h,
                                    sm_scale, KV_LEN, stride_vn, __CAPS__
                                    D, D_PAD, BLOCK_N, False, EVEN_N, HAS_SCORE_MOD, DOT_PREC)
    else:
        for it in range(0, n_full):
            start_n = tl.load(FULL_IDX + irow + it // R) * SPARSE_N + (it % R) * BLOCK_N
            qk = _fwd_qk(q, K_base, start_n, offs_d, KV_LEN, stride_kn, D, D_PAD, BLOCK_N,
                         EVEN_N, DOT_PREC)
            acc, l_i, m_i = _fwd_pv(acc, l_i, m_i, qk, V_base, start_n, offs_m, offs_d, b, h,
                                    sm_scale, KV_LEN, stride_vn, __CAPS__
                                    D, D_PAD, BLOCK_N, False, EVEN_N, HAS_SCORE_MOD, DOT_PREC)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=(offs_m[:, None] < Q_LEN) & (offs_d[None, :] < D))
    lse = tl.where(l_i == 0.0, float("inf"), m_i + tl.log2(l_safe))
    tl.store(LSE + bh * Q_LEN + offs_m, lse, mask=offs_m < Q_LEN)

'''

# name -> (raw, lazy, prefetch, fwd config or None)
VARIANTS = {
    "base": None,
    "rewrite": (False, False, False, None),
    "raw": (True, False, False, None),
    "lazy": (False, True, False, None),
    "prefetch": (False, False, True, None),
    "raw+lazy": (True, True, False, None),
    "raw+prefetch": (True, False, True, None),
    "raw+lazy+prefetch": (True, True, True, None),
    "raw+lazy 128x64 w8": (True, True, False, K(128, 64, 8, 3)),
    "raw+lazy+prefetch 128x64 w8": (True, True, True, K(128, 64, 8, 3)),
    "raw+lazy+prefetch 64x64 s2": (True, True, True, K(64, 64, 4, 2)),
}


def patched(original: str, raw: bool, lazy: bool, prefetch: bool) -> str:
    start = original.index("@triton.jit\ndef _fwd_tile(")
    end = original.index("@triton.jit\ndef _attn_bwd_delta(")
    body = (FWD.replace("__RAW__", str(raw)).replace("__LAZY__", str(lazy))
            .replace("__PREFETCH__", str(prefetch)))
    return original[:start] + body.lstrip("\n") + "\n" + original[end:]


def main(out_dir: str) -> int:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slopes = ca.alibi_slopes(H, device="cuda")
    cases = {"causal": (None, ca.causal), "alibi": (ca.alibi(slopes), ca.causal),
             "sliding_window1024": (None, ca.sliding_window(1024)),
             "prefix_lm1024": (None, ca.prefix_lm(1024)),
             "softcap30": (ca.tanh_softcap(30.0), ca.causal)}
    masks = {name: ca.block_mask(m, B, H, S, S, device="cuda") for name, (_, m) in cases.items()}
    rows, ref = [], {}
    original = codegen.KERNELS
    for rnd in range(2):
        for name, spec in VARIANTS.items():
            if spec is None:
                text, table = original, {}
            else:
                raw, lazy, prefetch, cfg = spec
                text = patched(original, raw, lazy, prefetch)
                table = {"fwd": cfg} if cfg else {}
            codegen.KERNELS = text
            codegen._COMPILED.clear()
            for case, (score_mod, mask_mod) in cases.items():
                row = next((r for r in rows if r["variant"] == name and r["case"] == case), None)
                if row is None:
                    row = {"variant": name, "case": case}
                    rows.append(row)
                if "error" in row:
                    continue
                try:
                    with tuning.override(D, table), torch.no_grad():
                        fn = lambda: ca.attention(q, k, v, score_mod=score_mod,  # noqa: E731
                                                  block_mask=masks[case])
                        out = fn()
                        if name == "base":
                            ref[case] = out
                        row["max_err"] = (out - ref[case]).abs().max().item()
                        ms = do_bench(fn, warmup=25, rep=150)
                    row["fwd_ms"] = min(row.get("fwd_ms", 1e9), ms)
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                    traceback.print_exc()
                print(rnd, row, flush=True)
    codegen.KERNELS = original
    base = {r["case"]: r.get("fwd_ms") for r in rows if r["variant"] == "base"}
    for r in rows:
        if r.get("fwd_ms") and base.get(r["case"]):
            r["speedup_vs_base"] = base[r["case"]] / r["fwd_ms"]
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit(),
            "shape": f"B={B} H={H} S={S} D={D} bf16 forward, best of 2 rounds"}
    lines = [f"# Attention forward variants on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. {meta['shape']}. Speedup = base ms / variant ms.", "",
             "| variant | case | fwd ms | speedup vs base | max err vs base | error |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['case']} | {r.get('fwd_ms', float('nan')):.4f} | "
                     f"{r.get('speedup_vs_base', float('nan')):.3f} | {r.get('max_err', '')} | "
                     f"{r.get('error', '')} |")
    text = "\n".join(lines) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "attention_fwd_variants.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "attention_fwd_variants.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))

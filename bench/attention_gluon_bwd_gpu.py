"""Would the attention backward's kernels gain what the forward did from warp specialization
in Gluon? A standalone probe (causal, bf16, D=128 and 64, lengths multiples of 128),
before any of it enters cherenkov/attention: the Gluon forward took the causal forward from
0.574 to 0.485 ms, and the backward is now 1.74 of the 2.22 ms forward+backward
(bench/results/2026-12-02_attention_h200_cb27ac5.md).

One program per 128 keys of a (batch, head), longest first (key block 0 sees every query).
A producer warp loads the program's K and V once, then streams (Q, dO) tiles of BQ=64 query
rows through a ring (one "ready" barrier per slot for both tiles, one "empty" barrier both
consumers release). Two consumer warpgroups own 64 keys each: S^T = K Q^T and dP^T = V dO^T
issued together, P^T = exp2(S^T scale - lse), dS^T = P^T (dP^T - delta), then dV += P^T dO
and dK += dS^T Q with P^T and dS^T from registers; dK, dV leave through the K / V tiles'
shared memory by TMA. Registers: S^T and dP^T 32 each, dK and dV 64 each per thread.
Its dQ probe (the forward's shape: K / V streamed, dQ += dS K from registers) became the
package's kernel (cherenkov/attention/kernels_gluon_bwd_src.py) and left this file; its
figures stay in bench/results/2026-12-02_attention_gluon_bwd_h200_2a5fb37.md, and
bench/attention_gluon_kernels_gpu.py times the package's.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_gluon_bwd_gpu.py OUT_DIR
    python bench/attention_gluon_bwd_gpu.py --sm90     # CPU: compile for sm_90, print
                                                       # registers / spills

Writes OUT_DIR/attention_gluon_bwd.md and .json (GPU mode): dK, dV against cherenkov's, and
the probe's times against our _attn_bwd_dkdv kernel's (torch.profiler) in the same process.
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

from attention_gluon_fwd_gpu import _tma_load, _tma_store, resources, smem_layout  # noqa: E402

LOG2E = 1.4426950408889634
KEYS_N = 64               # keys per consumer warpgroup (two per program)
KEYS = gl.constexpr(KEYS_N)


@gluon.jit
def _pair_loader(res_a, res_b, str_a, str_b, res_a_smem, res_b_smem, str_a_smem, str_b_smem,
                 res_bars, ready, empty, res_row, str_row, n, STEP: gl.constexpr,
                 STAGES: gl.constexpr):
    """The producer warp: each consumer's resident pair of tiles (K, V) once, then the
    streamed pair's n tiles of STEP rows (Q, dO) through the ring as both consumers release
    its slots."""
    for c in gl.static_range(2):
        bar = res_bars.index(c)
        rows = res_row + c * res_a.block_type.shape[0]
        mbarrier.expect(bar, res_a.block_type.nbytes + res_b.block_type.nbytes)
        _tma_load(res_a, [rows, 0], bar, res_a_smem.index(c))
        _tma_load(res_b, [rows, 0], bar, res_b_smem.index(c))
    for t in range(n):
        slot = t % STAGES
        mbarrier.wait(empty.index(slot), ((t // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, str_a.block_type.nbytes + str_b.block_type.nbytes)
        _tma_load(str_a, [str_row + t * STEP, 0], bar, str_a_smem.index(slot))
        _tma_load(str_b, [str_row + t * STEP, 0], bar, str_b_smem.index(slot))


@gluon.jit
def _bwd_consumer(C: gl.constexpr, q_smem, do_smem, k_smem, v_smem, kv_bars, ready, empty,
                  dk_desc, dv_desc, LSE, DELTA, bh, S_LEN, start_n, start_q, n_q, kv_row,
                  qk_scale, sm_scale, BQ: gl.constexpr, D: gl.constexpr,
                  STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    KEYS: gl.constexpr = k_smem.type.shape[1]
    ROW: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)       # along keys
    COL: gl.constexpr = gl.SliceLayout(0, S_LAYOUT)       # along queries
    A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    k_tile = k_smem.index(C)
    v_tile = v_smem.index(C)
    key0 = start_n + C * KEYS
    offs_k = key0 + gl.arange(0, KEYS, layout=ROW)
    zero = gl.zeros([KEYS, BQ], gl.float32, layout=S_LAYOUT)
    dk = gl.zeros([KEYS, D], gl.float32, layout=O_LAYOUT)
    dv = gl.zeros([KEYS, D], gl.float32, layout=O_LAYOUT)
    mbarrier.wait(kv_bars.index(C), 0)
    for t in range(n_q):
        slot = t % STAGES
        m = start_q + t * BQ
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        mbarrier.wait(ready.index(slot), (t // STAGES) & 1)
        s_t = warpgroup_mma(k_tile, q_tile.permute((1, 0)), zero, use_acc=False, is_async=True)
        dp_t = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero, use_acc=False,
                             is_async=True)
        s_t, dp_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t, dp_t))
        rows = bh * S_LEN + m + gl.arange(0, BQ, layout=COL)
        p_t = gl.exp2(s_t * qk_scale - gl.load(LSE + rows)[None, :])
        if m < key0 + KEYS:                  # a diagonal tile: keys after the query
            offs_q = m + gl.arange(0, BQ, layout=COL)
            p_t = gl.where(offs_q[None, :] >= offs_k[:, None], p_t, 0.0)
        p16 = gl.convert_layout(p_t.to(gl.bfloat16), A_LAYOUT)
        dv = warpgroup_mma(p16, do_tile, dv, is_async=True)      # runs while dS is formed
        delta = gl.load(DELTA + rows)
        ds16 = gl.convert_layout((p_t * (dp_t - delta[None, :])).to(gl.bfloat16), A_LAYOUT)
        dk = warpgroup_mma(ds16, q_tile, dk, is_async=True)
        dv, dk, p16, ds16 = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, p16, ds16))
        mbarrier.arrive(empty.index(slot), count=1)
    k_tile.store((dk * sm_scale).to(gl.bfloat16))      # K and V are spent: dK, dV leave
    v_tile.store(dv.to(gl.bfloat16))                   # through their tiles
    fence_async_shared()
    _tma_store(dk_desc, [kv_row + C * KEYS, 0], k_tile)
    _tma_store(dv_desc, [kv_row + C * KEYS, 0], v_tile)
    tma.store_wait(pendings=0)


@gluon.jit
def _attn_bwd_dkdv_ws(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE, DELTA,
                      qk_scale, sm_scale, S_LEN, BQ: gl.constexpr, D: gl.constexpr,
                      STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr):
    bh = gl.program_id(0)
    start_n = gl.program_id(1) * (2 * KEYS)           # key block 0 (the longest) first
    start_q = (start_n // BQ) * BQ                     # causal: queries from the block's start
    n_q = (S_LEN - start_q) // BQ
    q_row0 = bh * S_LEN + start_q
    kv_row = bh * S_LEN + start_n
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [STAGES, BQ, D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, [STAGES, BQ, D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [2, KEYS, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [2, KEYS, D], v_desc.layout)
    kv_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(2):
        mbarrier.init(kv_bars.index(c), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    gl.warp_specialize([
        (_bwd_consumer, (0, q_smem, do_smem, k_smem, v_smem, kv_bars, ready, empty, dk_desc,
                         dv_desc, LSE, DELTA, bh, S_LEN, start_n, start_q, n_q, kv_row,
                         qk_scale, sm_scale, BQ, D, STAGES, S_LAYOUT, O_LAYOUT)),
        (_bwd_consumer, (1, q_smem, do_smem, k_smem, v_smem, kv_bars, ready, empty, dk_desc,
                         dv_desc, LSE, DELTA, bh, S_LEN, start_n, start_q, n_q, kv_row,
                         qk_scale, sm_scale, BQ, D, STAGES, S_LAYOUT, O_LAYOUT)),
        (_pair_loader, (k_desc, v_desc, q_desc, do_desc, k_smem, v_smem, q_smem, do_smem,
                        kv_bars, ready, empty, kv_row, q_row0, n_q, BQ, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


# (query rows per tile, ring stages, consumer registers, maxnreg)
VARIANTS = [(64, 3, 240, 168), (64, 2, 240, 168), (32, 4, 240, 168), (64, 4, 232, 160)]


def layouts(bq: int, d: int):
    s = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, bq, 16])
    o = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, d, 16])
    return s, o


def constexprs(bq, d, stages, regs):
    s, o = layouts(bq, d)
    return dict(BQ=bq, D=d, STAGES=stages, S_LAYOUT=s, O_LAYOUT=o, CONSUMER_REGS=regs)


def dkdv(q, k, v, do, lse2, delta, bq, stages, regs, maxnreg):
    """dK, dV of causal attention (B, H, S, D) given the forward's log2 LSE and delta."""
    B, H, S, D = q.shape
    flat = [t.reshape(B * H * S, D) for t in (q, do, k, v)]
    dk, dv = torch.empty_like(flat[2]), torch.empty_like(flat[3])
    desc = lambda t, rows: TensorDescriptor(t, list(t.shape), list(t.stride()), [rows, D],
                                            smem_layout(rows, D))
    _attn_bwd_dkdv_ws[(B * H, S // (2 * KEYS_N))](
        desc(flat[0], bq), desc(flat[1], bq), desc(flat[2], KEYS_N), desc(flat[3], KEYS_N),
        desc(dk, KEYS_N), desc(dv, KEYS_N), lse2, delta, LOG2E / math.sqrt(D), 1 / math.sqrt(D), S,
        num_warps=4, maxnreg=maxnreg, **constexprs(bq, D, stages, regs))
    return dk.view(B, H, S, D), dv.view(B, H, S, D)


def sm90(d: int = 128) -> int:
    """Compile every variant of the dK/dV kernel for sm_90 on the CPU: registers, spills, or
    the error; the number that failed."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    jobs = [(_attn_bwd_dkdv_ws, f"BQ{n}", constexprs(n, d, st, regs), maxnreg,
             dict(q_desc=n, do_desc=n, k_desc=KEYS_N, v_desc=KEYS_N, dk_desc=KEYS_N,
                  dv_desc=KEYS_N), f"s{st} regs{regs}/{maxnreg}")
            for n, st, regs, maxnreg in VARIANTS]
    bad = 0
    for fn, tile, cx, maxnreg, descs, rest in jobs:
        sig = {n: f"tensordesc<bf16[{r},{d}],{smem_layout(r, d)!r}>" for n, r in descs.items()}
        sig.update(LSE="*fp32", DELTA="*fp32", qk_scale="fp32", sm_scale="fp32", S_LEN="i32",
                   **{k_: "constexpr" for k_ in cx})
        try:
            src = GluonASTSource(fn, sig, constexprs={(fn.arg_names.index(k_),): v_
                                                      for k_, v_ in cx.items()})
            c = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": 4, "maxnreg": maxnreg})
            print(f"{tile} {rest}: {resources(c.asm['cubin'])}, smem {c.metadata.shared}",
                  flush=True)
        except Exception as e:      # noqa: BLE001 -- report every variant
            bad += 1
            print(f"{tile} {rest}: FAILED {type(e).__name__}: {str(e)[:2000]}", flush=True)
    return bad


SHAPES = {"suite B4 H16 S4096 D128": (4, 16, 4096, 128), "gpt2 B16 H12 T1024 D64": (16, 12, 1024, 64)}


def _kernel_ms(table: dict, *names) -> float:
    """GPU ms per call of the kernels whose names start with one of `names`."""
    got = [t for n, t in table.items() if n.startswith(names)]
    return sum(got) if got else float("nan")


def _shape_rows(label, B, H, S, D, kernel_table) -> list[dict]:
    import torch.nn.functional as F

    import cherenkov.attention as ca
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    bm = ca.block_mask(ca.causal, B, H, S, S, device="cuda")
    out, lse = ca.attention(q, k, v, block_mask=bm, return_lse=True)
    ref_dk, ref_dv = torch.autograd.grad(out, (k, v), do)
    lse2 = (lse / math.log(2)).float().contiguous()
    delta = (out.float() * do.float()).sum(-1).contiguous()
    q_, k_, v_ = q.detach(), k.detach(), v.detach()
    ours = kernel_table(lambda: torch.autograd.grad(ca.attention(q, k, v, block_mask=bm),
                                                    (q, k, v), do), top=None)
    cudnn = kernel_table(lambda: torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), do), top=None)
    cudnn_bwd = sum(t for n, t in cudnn.items()
                    if any(w in n for w in ("bprop", "dot_do_o", "convert_dq")))
    rows = [{"shape": label, "impl": "sdpa default backward kernels (cuDNN: bprop, delta, "
                                     "dQ cast)", "ms": round(cudnn_bwd, 4)}]
    ours_ms = _kernel_ms(ours, "_attn_bwd_dkdv")
    rows.append({"shape": label, "impl": "cherenkov _attn_bwd_dkdv", "ms": round(ours_ms, 4)})
    for bq, stages, regs, maxnreg in VARIANTS:
        args = (q_, k_, v_, do, lse2, delta, bq, stages, regs, maxnreg)
        row = {"shape": label, "impl": f"gluon ws dK/dV BQ{bq} s{stages} regs{regs}/{maxnreg}"}
        try:
            got = dkdv(*args)
            torch.cuda.synchronize()
            err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                      for a, b in zip(got, (ref_dk, ref_dv)))
            row.update(max_rel_err=err, ok=err < 2e-2)
            if row["ok"]:
                ms = _kernel_ms(kernel_table(lambda: dkdv(*args), top=None), "_attn_bwd_")
                row.update(ms=round(ms, 4), vs_ours=round(ours_ms / ms, 3))
        except Exception as e:      # noqa: BLE001 -- report every variant
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> int:
    from attention_bwd_tiles_gpu import kernel_table
    from cherenkov.bench.report import md_table, save_pair, script_meta
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    meta = script_meta()
    rows = []
    for label, (B, H, S, D) in SHAPES.items():
        rows += _shape_rows(label, B, H, S, D, kernel_table)
    head = ["shape", "impl", "ms", "vs_ours", "max_rel_err", "ok", "error"]
    text = "\n".join([
        f"# Attention backward's dK/dV in Gluon on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. Causal, bf16; GPU ms per call of each kernel (torch.profiler, 10 "
        "calls); the probes read our forward's LSE and a torch delta; errors relative to our "
        "gradients' max; cuDNN's backward (SDPA's default backend) for comparison.", "",
        *md_table(head, [[r.get(h, "") for h in head] for r in rows]), ""])
    save_pair(out_dir, "attention_gluon_bwd", text, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit((1 if sm90() else 0) if "--sm90" in sys.argv else main())

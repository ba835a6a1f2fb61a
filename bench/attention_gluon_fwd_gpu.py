"""Would an attention forward written in Gluon beat ours? A standalone probe before any of it
enters cherenkov/attention (issue 4: window / ALiBi / prefix-LM forward+backward miss 1.2x flex
by 1-4%, and cuDNN's causal forward runs 0.468 ms against our 0.576 at B=4 H=16 S=4096 D=128).

Causal, bf16, head dim 64 / 128, sequence a multiple of the tiles. One program per (head,
query block), longest blocks first; K and V stream through a ring of shared-memory slots
filled by TMA (one mbarrier per slot); S = Q K^T and O += P V by warpgroup MMAs, P from
registers. OVERLAP=1 is FlashAttention-3's intra-warpgroup order: tile j's S is issued with
tile j-1's P V, and tile j's softmax runs while that P V is still on the tensor cores (the
rescale of O waits for it). 8 warps = two warpgroups of 64 query rows each.

Its warp-specialized variants (a producer warp, one or two consumer warpgroups), measured at
3b6e3c0 (bench/results/2026-12-02_attention_gluon_fwd_h200_3b6e3c0.md: two consumers of 64
rows with 128-key tiles ran causal D=128 in 0.504 ms vs 0.577 for the Triton kernel), became
the attention forward (cherenkov/attention/kernels_gluon_src.py) and left this probe.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_gluon_fwd_gpu.py OUT_DIR [--only=I]
    python bench/attention_gluon_fwd_gpu.py --sm90     # CPU: compile every variant for sm_90,
                                                       # print registers / spills

Writes OUT_DIR/attention_gluon_fwd.md and .json (GPU mode).
"""
from __future__ import annotations

import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "attention"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from sm90_gluon_compile import resources  # noqa: E402,F401 -- also the bwd probe's

LOG2E = 1.4426950408889634
# a CTA-wide barrier: gl.thread_barrier in Triton 3.6, gl.barrier in 3.9
_cta_sync = getattr(gl, "thread_barrier", None) or gl.barrier
# TMA copies: async_copy_global_to_shared / _shared_to_global in 3.6, async_load / _store in 3.9
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def _load_tile(desc, smem, bars, slot, row, pred):
    bar = bars.index(slot)
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    _tma_load(desc, [row, 0], bar, smem.index(slot), pred=pred)


@gluon.jit
def _softmax_step(s, m_i, l_i, offs_m, j, n_full, qk_scale,
                  BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr):
    """Tile j's probabilities (fp32), the running max / sum, and O's rescale factor."""
    if j >= n_full:             # a diagonal tile: keys after the query are masked
        offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
        s = gl.where(offs_n[None, :] <= offs_m[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def _attn_fwd_gluon(q_desc, k_desc, v_desc, o_desc, LSE, qk_scale, S_LEN,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
                    STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                    OVERLAP: gl.constexpr, SYNC: gl.constexpr):
    bh = gl.program_id(0)
    start_m = (gl.num_programs(1) - 1 - gl.program_id(1)) * BLOCK_M    # longest first
    row0 = bh * S_LEN
    n_tiles = (start_m + BLOCK_M + BLOCK_N - 1) // BLOCK_N    # keys [0, start_m + BLOCK_M)
    n_full = (start_m + 1) // BLOCK_N                          # tiles no query masks

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [BLOCK_M, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    _tma_load(q_desc, [row0 + start_m, 0], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        _load_tile(k_desc, k_smem, k_bars, i, row0 + i * BLOCK_N, i < n_tiles)
        _load_tile(v_desc, v_smem, v_bars, i, row0 + i * BLOCK_N, i < n_tiles)

    ROW: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    offs_m = start_m + gl.arange(0, BLOCK_M, layout=ROW)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=S_LAYOUT)
    acc = gl.zeros([BLOCK_M, D], gl.float32, layout=O_LAYOUT)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=ROW)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=ROW)
    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        mbarrier.wait(k_bars.index(0), 0)
        s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False,
                          is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        if SYNC:
            _cta_sync()
        _load_tile(k_desc, k_smem, k_bars, 0, row0 + STAGES * BLOCK_N, STAGES < n_tiles)
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, offs_m, 0, n_full, qk_scale,
                                           BLOCK_N, S_LAYOUT)
        p16 = gl.convert_layout(p.to(gl.bfloat16), P_LAYOUT)
        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_bars.index(slot), (j // STAGES) & 1)
            s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero,
                              use_acc=False, is_async=True)
            mbarrier.wait(v_bars.index(prev), ((j - 1) // STAGES) & 1)
            acc = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
            p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, offs_m, j, n_full, qk_scale,
                                               BLOCK_N, S_LAYOUT)
            acc, p16 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p16))
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
            p16 = gl.convert_layout(p.to(gl.bfloat16), P_LAYOUT)
            if SYNC:                # the other warpgroup may still read these slots
                _cta_sync()
            _load_tile(k_desc, k_smem, k_bars, slot, row0 + (j + STAGES) * BLOCK_N,
                       j + STAGES < n_tiles)
            _load_tile(v_desc, v_smem, v_bars, prev, row0 + (j - 1 + STAGES) * BLOCK_N,
                       j - 1 + STAGES < n_tiles)
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_bars.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    else:
        for j in range(n_tiles):
            slot = j % STAGES
            phase = (j // STAGES) & 1
            mbarrier.wait(k_bars.index(slot), phase)
            s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero,
                              use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, offs_m, j, n_full, qk_scale,
                                               BLOCK_N, S_LAYOUT)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
            p16 = gl.convert_layout(p.to(gl.bfloat16), P_LAYOUT)
            mbarrier.wait(v_bars.index(slot), phase)
            acc = warpgroup_mma(p16, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            if SYNC:
                _cta_sync()
            _load_tile(k_desc, k_smem, k_bars, slot, row0 + (j + STAGES) * BLOCK_N,
                       j + STAGES < n_tiles)
            _load_tile(v_desc, v_smem, v_bars, slot, row0 + (j + STAGES) * BLOCK_N,
                       j + STAGES < n_tiles)

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    mbarrier.invalidate(q_bar)
    o_rows: gl.constexpr = gl.SliceLayout(1, O_LAYOUT)
    l_o = gl.convert_layout(l_i, o_rows)
    o = acc / l_o[:, None]
    lse = m_i + gl.log2(l_i)
    gl.store(LSE + row0 + offs_m, lse)
    q_smem.store(o.to(gl.bfloat16))          # Q is spent: its tile carries O out
    fence_async_shared()
    _tma_store(o_desc, [row0 + start_m, 0], q_smem)
    tma.store_wait(pendings=0)


def layouts(block_m: int, block_n: int, d: int, num_warps: int):
    """(S, O) accumulator layouts: warpgroups stacked along the query rows."""
    s = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                  instr_shape=[16, block_n, 16])
    o = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                  instr_shape=[16, d, 16])
    return s, o


VARIANTS = [  # (block_m, block_n, num_warps, stages, overlap)
    (128, 128, 8, 2, 0), (128, 128, 8, 2, 1), (128, 64, 8, 3, 1), (128, 128, 8, 3, 1),
    (64, 128, 4, 2, 1), (64, 64, 4, 3, 1), (128, 64, 8, 2, 1),
]


def variant(i: int):
    """(name, run(q, k, v) -> (o, lse2)) of VARIANTS' i-th entry."""
    bm, bn, warps, stages, overlap = a = VARIANTS[i]
    return (f"gluon {bm}x{bn} w{warps} s{stages} overlap={overlap}",
            lambda q, k, v: forward(q, k, v, *a))


def constexprs(bm, bn, d, warps, stages, overlap):
    s_layout, o_layout = layouts(bm, bn, d, warps)
    return dict(BLOCK_M=bm, BLOCK_N=bn, D=d, STAGES=stages, S_LAYOUT=s_layout,
                O_LAYOUT=o_layout, OVERLAP=overlap, SYNC=int(warps > 4))


def smem_layout(block, d):
    return gl.NVMMASharedLayout.get_default_for([block, d], gl.bfloat16)


def forward(q, k, v, bm, bn, warps, stages, overlap):
    """O and the log2-sum-exp for causal q, k, v (B, H, S, D), bf16, S % max(bm, bn) == 0."""
    B, H, S, D = q.shape
    q2, k2, v2 = (t.reshape(B * H * S, D) for t in (q, k, v))
    o = torch.empty_like(q2)
    lse = torch.empty(B * H * S, device=q.device, dtype=torch.float32)
    desc = lambda t, blk: TensorDescriptor(t, list(t.shape), list(t.stride()), [blk, D],
                                           smem_layout(blk, D))
    grid = (B * H, S // bm)
    _attn_fwd_gluon[grid](desc(q2, bm), desc(k2, bn), desc(v2, bn), desc(o, bm), lse,
                          LOG2E / math.sqrt(D), S, num_warps=warps,
                          **constexprs(bm, bn, D, warps, stages, overlap))
    return o.view(B, H, S, D), lse.view(B, H, S)


def sm90(d: int = 128) -> int:
    """Compile every variant for sm_90 on the CPU: registers, spills, or the error."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    fn = _attn_fwd_gluon
    bad = 0
    for bm, bn, warps, stages, overlap in VARIANTS:
        cx = constexprs(bm, bn, d, warps, stages, overlap)
        sig = {"q_desc": f"tensordesc<bf16[{bm},{d}],{smem_layout(bm, d)!r}>",
               "k_desc": f"tensordesc<bf16[{bn},{d}],{smem_layout(bn, d)!r}>",
               "v_desc": f"tensordesc<bf16[{bn},{d}],{smem_layout(bn, d)!r}>",
               "o_desc": f"tensordesc<bf16[{bm},{d}],{smem_layout(bm, d)!r}>",
               "LSE": "*fp32", "qk_scale": "fp32", "S_LEN": "i32",
               **{k_: "constexpr" for k_ in cx}}
        name = f"{bm}x{bn} w{warps} s{stages} overlap={overlap}"
        try:
            src = GluonASTSource(fn, sig, constexprs={(fn.arg_names.index(k_),): v_
                                                      for k_, v_ in cx.items()})
            c = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": warps, "num_stages": 1})
            print(f"{name}: {resources(c.asm['cubin'])}, smem {c.metadata.shared}", flush=True)
        except Exception as e:      # noqa: BLE001 -- report every variant
            bad += 1
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:2000]}", flush=True)
    return bad


SHAPES = {"suite B4 H16 S4096 D128": (4, 16, 4096, 128), "suite D64 B4 H16 S4096": (4, 16, 4096, 64),
          "gpt2 B16 H12 T1024 D64": (16, 12, 1024, 64)}


def main() -> int:
    import torch.nn.functional as F
    from triton.testing import do_bench

    import cherenkov.attention as ca
    from cherenkov.bench.report import md_table, save_pair, script_meta
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    only = [int(a.split("=")[1]) for a in sys.argv if a.startswith("--only=")]
    variants = [variant(i) for i in (only or range(len(VARIANTS)))]
    meta = script_meta()
    rows = []
    for label, (B, H, S, D) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        bm = ca.block_mask(ca.causal, B, H, S, S, device="cuda")
        flops = 4 * B * H * D * S * (S + 1) / 2
        with torch.no_grad():
            ref, ref_lse = ca.attention(q, k, v, block_mask=bm, return_lse=True)
            impls = {"cherenkov": lambda: ca.attention(q, k, v, block_mask=bm),
                     "sdpa default (cuDNN)": lambda: F.scaled_dot_product_attention(
                         q, k, v, is_causal=True)}
            for name, run in variants:
                try:
                    o, lse2 = run(q, k, v)
                    torch.cuda.synchronize()
                    err = (o.float() - ref.float()).abs().max().item()
                    lse_err = (lse2 * math.log(2) - ref_lse).abs().max().item()
                    ok = err < 2e-2 and lse_err < 1e-3
                    rows.append({"shape": label, "impl": name, "max_abs_err": err,
                                 "lse_err": lse_err, "ok": ok})
                    print(rows[-1], flush=True)
                    if ok:
                        impls[name] = lambda run=run: run(q, k, v)
                except Exception as e:      # noqa: BLE001 -- report every variant
                    traceback.print_exc()
                    rows.append({"shape": label, "impl": name,
                                 "error": f"{type(e).__name__}: {str(e)[:300]}"})
            times = {n: [] for n in impls}
            for _ in range(2):              # interleaved rounds, best kept
                for n, fn in impls.items():
                    times[n].append(do_bench(fn, warmup=10, rep=50, return_mode="median"))
        base = min(times["cherenkov"])
        for n, ts in times.items():
            ms = min(ts)
            rows.append({"shape": label, "impl": n, "ms": round(ms, 4),
                         "tflops": round(flops / ms * 1e-9, 1),
                         "vs_cherenkov": round(base / ms, 3)})
            print(rows[-1], flush=True)
        del q, k, v, ref, ref_lse
    head = ["shape", "impl", "ms", "tflops", "vs_cherenkov", "max_abs_err", "lse_err", "ok",
            "error"]
    text = "\n".join([
        f"# Causal attention forward in Gluon on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. bf16, forward only (no grad); do_bench median, best of 2 "
        "interleaved rounds; TFLOP/s count the causal half; errors vs cherenkov.attention "
        "(O: max abs, lse: natural log).", "",
        *md_table(head, [[r.get(h, "") for h in head] for r in rows]), ""])
    stem = "attention_gluon_fwd" + "".join(f"_v{i}" for i in only)
    save_pair(out_dir, stem, text, {"meta": meta, "rows": rows})
    return 0


def merge(out_dir: str) -> int:
    """One attention_gluon_fwd.md / .json from the per-variant files (then removed)."""
    import glob
    import json
    from cherenkov.bench.report import md_table, save_pair
    rows, meta = [], None
    for path in sorted(glob.glob(os.path.join(out_dir, "attention_gluon_fwd_v*.json"))):
        with open(path) as f:
            data = json.load(f)
        meta = meta or data["meta"]
        rows += [dict(r, process=os.path.basename(path)[len("attention_gluon_fwd_"):-5])
                 for r in data["rows"]]
        os.remove(path)
        os.remove(path[:-5] + ".md")
    if meta is None:
        return 1
    head = ["process", "shape", "impl", "ms", "tflops", "vs_cherenkov", "max_abs_err",
            "lse_err", "ok", "error"]
    text = "\n".join([
        f"# Causal attention forward in Gluon on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. bf16, forward only (no grad); one process per variant (a hung "
        "kernel costs its process only), ours and cuDNN timed again in each; do_bench median, "
        "best of 2 interleaved rounds; TFLOP/s count the causal half; errors vs "
        "cherenkov.attention (O: max abs, lse: natural log).", "",
        *md_table(head, [[r.get(h, "") for h in head] for r in rows]), ""])
    save_pair(out_dir, "attention_gluon_fwd", text, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    if "--merge" in sys.argv:
        sys.exit(merge(sys.argv[1]))
    sys.exit((1 if sm90() else 0) if "--sm90" in sys.argv else main())

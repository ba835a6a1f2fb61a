"""Would a backward without the dQ kernel's recomputation beat ours? A standalone probe for the
next step of the attention backward (issue 4's forward+backward targets): one kernel per key
block computes dK and dV as ours does and adds its dS K products into an fp32 dQ buffer --
through TMA reduce-adds (`desc.atomic_add`, what FlashAttention-3 does) or pointer atomics --
so each tile's S and dP are computed once, not twice (5 matmuls per tile pair instead of 7).
Causal, B=4 H=16 S=4096 D=128 bf16; key blocks of 64 or 128 rows, 4 or 8 warps; checked
against cherenkov.attention's gradients; timed by do_bench (median, best of 2 rounds) beside
our backward (forward+backward minus forward, same process).

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_dq_atomic_gpu.py OUT_DIR
    python bench/attention_dq_atomic_gpu.py OUT_DIR --smoke     # CPU interpreter, tiny, pointer atomics

Writes OUT_DIR/attention_dq_atomic.md and .json.
"""
from __future__ import annotations

import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"        # before triton.language is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.bench.report import save_pair, script_meta  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _step(dk, dv, k, v, QD, DOD, DQD, DQ, LSE, DELTA, row0, start_m, offs_n, qk_scale, sm_scale,
          D: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, ATOMIC: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = QD.load([row0 + start_m, 0])                                   # (BLOCK_M, D)
    do = DOD.load([row0 + start_m, 0])
    lse = tl.load(LSE + row0 + offs_m)
    delta = tl.load(DELTA + row0 + offs_m)
    qkT = tl.dot(k, tl.trans(q))                                        # (BLOCK_N, BLOCK_M)
    pT = tl.exp2(qkT * qk_scale - lse[None, :])
    if MASKED:
        pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
    dpT = tl.dot(v, tl.trans(do))
    dsT = pT * (dpT - delta[None, :])
    dv = tl.dot(pT.to(do.dtype), do, dv)
    ds16 = dsT.to(q.dtype)
    dk = tl.dot(ds16, q, dk)
    dq = tl.dot(tl.trans(ds16), k) * sm_scale                           # (BLOCK_M, D)
    if ATOMIC == 1:
        DQD.atomic_add([row0 + start_m, 0], dq)
    else:
        offs_d = tl.arange(0, D)
        tl.atomic_add(DQ + (row0 + offs_m)[:, None] * D + offs_d[None, :], dq, sem="relaxed")
    return dk, dv


@triton.jit
def _bwd_fused(KD, VD, QD, DOD, DQD, DQ, DK, DV, LSE, DELTA, qk_scale, sm_scale, S,
               D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               ATOMIC: tl.constexpr):
    """One key block of one head (the first key blocks, the longest columns, first)."""
    start_n = tl.program_id(0) * BLOCK_N
    row0 = tl.program_id(1) * S
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = KD.load([row0 + start_n, 0])
    v = VD.load([row0 + start_n, 0])
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    first = (start_n // BLOCK_M) * BLOCK_M
    for start_m in range(first, start_n + BLOCK_N, BLOCK_M):           # the diagonal: masked
        dk, dv = _step(dk, dv, k, v, QD, DOD, DQD, DQ, LSE, DELTA, row0, start_m, offs_n,
                       qk_scale, sm_scale, D, BLOCK_M, True, ATOMIC)
    for start_m in range(start_n + BLOCK_N, S, BLOCK_M):
        dk, dv = _step(dk, dv, k, v, QD, DOD, DQD, DQ, LSE, DELTA, row0, start_m, offs_n,
                       qk_scale, sm_scale, D, BLOCK_M, False, ATOMIC)
    offs_d = tl.arange(0, D)
    ptrs = (row0 + offs_n)[:, None] * D + offs_d[None, :]
    tl.store(DK + ptrs, (dk * sm_scale).to(DK.dtype.element_ty))
    tl.store(DV + ptrs, dv.to(DV.dtype.element_ty))


def fused_backward(q, k, v, o, lse_nat, do, block_m, block_n, warps, atomic):
    """dq, dk, dv of causal attention through the fused kernel (delta and the dQ buffer's
    zeroing and cast by torch)."""
    B, H, S, D = q.shape
    rows = B * H * S
    scale = 1.0 / math.sqrt(D)
    flat = lambda t: t.reshape(rows, D)  # noqa: E731
    delta = (o.float() * do.float()).sum(-1).reshape(rows)
    lse2 = (lse_nat / math.log(2.0)).reshape(rows).contiguous()
    dq_acc = torch.zeros(rows, D, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(flat(k)), torch.empty_like(flat(v))
    desc = lambda t, r: TensorDescriptor.from_tensor(t, [r, D])  # noqa: E731
    _bwd_fused[(S // block_n, B * H)](
        desc(flat(k), block_n), desc(flat(v), block_n), desc(flat(q), block_m),
        desc(flat(do), block_m), desc(dq_acc, block_m), dq_acc, dk, dv, lse2, delta,
        scale * LOG2E, scale, S, D=D, BLOCK_M=block_m, BLOCK_N=block_n, ATOMIC=atomic,
        num_warps=warps, num_stages=2)
    return (dq_acc.to(q.dtype).reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape))


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--smoke"]
    out_dir = args[0] if args else "bench/results"
    dev, dt = ("cpu", torch.float32) if SMOKE else ("cuda", torch.bfloat16)
    B, H, S, D = (1, 2, 128, 32) if SMOKE else (4, 16, 4096, 128)
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dt, generator=g).requires_grad_()
               for _ in range(3))
    do = torch.randn(B, H, S, D, device=dev, dtype=dt, generator=g)
    bm = ca.block_mask(ca.causal, B, H, S, S, device=dev)
    o, lse = ca.attention(q, k, v, block_mask=bm, return_lse=True)
    ref = torch.autograd.grad(o, (q, k, v), do)
    o, lse = o.detach(), lse.detach()
    configs = [(32, 32, 1, 0)] if SMOKE else [
        (64, 64, 4, 1), (64, 128, 8, 1), (64, 64, 4, 0), (64, 128, 8, 0), (64, 128, 4, 1)]
    rows, timers = [], {}
    for block_m, block_n, warps, atomic in configs:
        name = f"fused {block_m}x{block_n} w{warps} {'tma-reduce' if atomic else 'atomics'}"
        try:
            got = fused_backward(q.detach(), k.detach(), v.detach(), o, lse, do, block_m, block_n,
                                 warps, atomic)
            err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                      for a, b in zip(got, ref))
            timers[name] = (lambda c=(block_m, block_n, warps, atomic): fused_backward(
                q.detach(), k.detach(), v.detach(), o, lse, do, *c), err)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rows.append({"impl": name, "error": f"{type(e).__name__}: {e}"[:300]})

    def ours_fwd_bwd():
        out = ca.attention(q, k, v, block_mask=bm)
        return torch.autograd.grad(out, (q, k, v), do)

    def ours_fwd():
        with torch.no_grad():
            return ca.attention(q, k, v, block_mask=bm)
    if SMOKE:
        for name, (fn, err) in timers.items():
            fn()
            rows.append({"impl": name, "max_rel_err": err})
    else:
        from triton.testing import do_bench
        best: dict = {}
        for _ in range(2):
            for name, fn in [("ours fwd+bwd", ours_fwd_bwd), ("ours fwd", ours_fwd)] + \
                    [(n, f) for n, (f, _) in timers.items()]:
                ms = do_bench(fn, warmup=10, rep=60, return_mode="median")
                best[name] = min(best.get(name, float("inf")), ms)
        rows.append({"impl": "ours backward (fwd+bwd - fwd)",
                     "ms": best["ours fwd+bwd"] - best["ours fwd"]})
        for name, (_, err) in timers.items():
            rows.append({"impl": name, "ms": best[name], "max_rel_err": err,
                         "vs_ours": rows[0]["ms"] / best[name]})
    meta = script_meta()
    lines = [f"# Attention backward without the dQ kernel's recomputation on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. Causal B={B} H={H} S={S} D={D} {str(dt).split('.')[-1]}; the "
             "fused rows include torch's delta, dQ-buffer zeroing and cast; max rel err vs our "
             "gradients.", "", "| impl | ms | speedup vs ours | max rel err | error |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['impl']} | {r.get('ms', float('nan')):.4f} | "
                     f"{r.get('vs_ours', float('nan')):.3f} | {r.get('max_rel_err', '')} | "
                     f"{r.get('error', '')} |")
    save_pair(out_dir, "attention_dq_atomic", "\n".join(lines) + "\n", {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

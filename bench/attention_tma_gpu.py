"""Does the GPU image's Triton give a faster causal attention forward with TMA tensor
descriptors and warp specialization than with pointer loads? A standalone probe, one process:
a minimal causal flash forward (full tiles below the diagonal unmasked, the diagonal tile
masked, B=4 H=16 S=4096 D=128 bf16) written twice -- K/V/Q/O through host TensorDescriptors
and through pointers -- over block sizes, pipeline stages and warp specialization, beside
Cherenkov's kernel (cherenkov.attention with the causal mask) and SDPA, each checked against
SDPA and timed by CUDA events (median of 30 after warm-up).

    PYTHONPATH=. python3 bench/attention_tma_gpu.py OUT_DIR
"""
import datetime
import itertools
import json
import os
import sys

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _update(acc, l_i, m_i, qk, v, qk_scale, offs_m, offs_n, MASKED: tl.constexpr):
    s = qk * qk_scale
    if MASKED:
        s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _fwd_desc(desc_q, desc_k, desc_v, desc_o, qk_scale, S,
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              STAGES: tl.constexpr, WS: tl.constexpr):
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    base = tl.program_id(1) * S
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = desc_q.load([base + start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in tl.range(0, start_m, BLOCK_N, num_stages=STAGES, warp_specialize=WS):
        k = desc_k.load([base + start_n, 0])
        qk = tl.dot(q, k.T)
        v = desc_v.load([base + start_n, 0])
        acc, l_i, m_i = _update(acc, l_i, m_i, qk, v, qk_scale, offs_m,
                                start_n + tl.arange(0, BLOCK_N), False)
    for start_n in tl.range(start_m, start_m + BLOCK_M, BLOCK_N):
        k = desc_k.load([base + start_n, 0])
        qk = tl.dot(q, k.T)
        v = desc_v.load([base + start_n, 0])
        acc, l_i, m_i = _update(acc, l_i, m_i, qk, v, qk_scale, offs_m,
                                start_n + tl.arange(0, BLOCK_N), True)
    desc_o.store([base + start_m, 0], (acc / l_i[:, None]).to(tl.bfloat16))


@triton.jit
def _fwd_ptr(Q, K, V, O, qk_scale, S,
             D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             STAGES: tl.constexpr, WS: tl.constexpr):
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * D
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in tl.range(0, start_m, BLOCK_N, num_stages=STAGES, warp_specialize=WS):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kT = tl.load(K + base + offs_n[None, :] * D + offs_d[:, None])
        qk = tl.dot(q, kT)
        v = tl.load(V + base + offs_n[:, None] * D + offs_d[None, :])
        acc, l_i, m_i = _update(acc, l_i, m_i, qk, v, qk_scale, offs_m, offs_n, False)
    for start_n in tl.range(start_m, start_m + BLOCK_M, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kT = tl.load(K + base + offs_n[None, :] * D + offs_d[:, None])
        qk = tl.dot(q, kT)
        v = tl.load(V + base + offs_n[:, None] * D + offs_d[None, :])
        acc, l_i, m_i = _update(acc, l_i, m_i, qk, v, qk_scale, offs_m, offs_n, True)
    tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.bfloat16))


def launcher(kind, q, k, v, bm, bn, warps, stages, ws):
    from triton.tools.tensor_descriptor import TensorDescriptor
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    scale = D ** -0.5 * LOG2E
    grid = (S // bm, B * H)
    if kind == "desc":
        flat = [t.view(B * H * S, D) for t in (q, k, v, o)]
        dq = TensorDescriptor.from_tensor(flat[0], [bm, D])
        dk = TensorDescriptor.from_tensor(flat[1], [bn, D])
        dv = TensorDescriptor.from_tensor(flat[2], [bn, D])
        do = TensorDescriptor.from_tensor(flat[3], [bm, D])

        def run():
            _fwd_desc[grid](dq, dk, dv, do, scale, S, D=D, BLOCK_M=bm, BLOCK_N=bn,
                            STAGES=stages, WS=ws, num_warps=warps, num_stages=stages)
            return o
    else:
        def run():
            _fwd_ptr[grid](q, k, v, o, scale, S, D=D, BLOCK_M=bm, BLOCK_N=bn,
                           STAGES=stages, WS=ws, num_warps=warps, num_stages=stages)
            return o
    return run


def time_ms(fn, reps=30):
    """Median of `reps` event-timed calls, each from an idle GPU, after 3 warm-up calls."""
    from cherenkov.bench.timing import events_median_ms
    for _ in range(3):
        fn()
    return events_median_ms(lambda i: fn(), reps, before="sync")


def main(out_dir):
    torch.manual_seed(0)
    B, H, S, D = 4, 16, 4096, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * B * H * S * S * D / 2
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    rows = []

    def record(name, fn):
        row = {"variant": name}
        try:
            out = fn()
            torch.cuda.synchronize()
            row["max_err"] = (out.float() - ref.float()).abs().max().item()
            ms = time_ms(fn)
            row.update(ms=ms, tflops=flops / ms / 1e9)
        except Exception as e:           # a variant the compiler rejects is a finding
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(row)
        print(row, flush=True)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        record("sdpa flash", lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True))
    record("sdpa default", lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True))
    import cherenkov
    from cherenkov.attention.mods import causal
    mask = cherenkov.block_mask(causal, B, H, S, S, device="cuda")
    record("cherenkov", lambda: cherenkov.attention(q, k, v, block_mask=mask))
    for kind, (bm, bn, warps), stages, ws in itertools.product(
            ("desc", "ptr"), ((128, 128, 8), (128, 64, 4), (128, 64, 8), (128, 128, 4)),
            (2, 3, 4), (False, True)):
        record(f"{kind} {bm}x{bn} w{warps} s{stages}{' ws' if ws else ''}",
               launcher(kind, q, k, v, bm, bn, warps, stages, ws))
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=triton.__version__, commit=os.environ.get("CHERENKOV_COMMIT", "?"),
                shape=dict(B=B, H=H, S=S, D=D))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "attention_tma.json"), "w") as f:
        json.dump(dict(meta, rows=rows), f, indent=1)
    lines = [f"# Causal attention forward: TMA descriptors / warp specialization probe on {meta['gpu']}",
             "", f"{meta['date']} · torch {meta['torch']} · triton {meta['triton']} · commit "
             f"{meta['commit']} · B={B} H={H} S={S} D={D} bf16, causal FLOPs", "",
             "| variant | ms | TFLOP/s | max err vs SDPA | error |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r.get('ms', float('nan')):.3f} | "
                     f"{r.get('tflops', float('nan')):.1f} | {r.get('max_err', float('nan')):.4f} | "
                     f"{r.get('error', '')} |")
    with open(os.path.join(out_dir, "attention_tma.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

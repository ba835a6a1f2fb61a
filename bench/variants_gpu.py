"""Hand-written variants of three memory-suite forward kernels that miss 90% of copy bandwidth
(cross-entropy's row logsumexp, bias + GeLU(tanh), RoPE), each in the form Cherenkov's
renderer would emit, timed on the GPU to pick what the generator should do:

- cross-entropy logsumexp over a long row (16384 x 50304 / 128256 bf16): what the renderer
  emits today (a block max and a block sum of exp every loop iteration), a per-lane sum
  (block max per iteration, one sum at the end), fully per-lane online max and sum (two exps
  per element, one combine at the end); RBLOCK and warps swept.
- bias + GeLU(tanh) (32768 x 4096): XBLOCK and warps swept; tl.sigmoid against
  x * fdiv(1, 1 + exp(-z)) (an approximate division instead of the IEEE one).
- RoPE (8, 4096, 32, 128): today's flat kernel (int64 index math, three loads of x), the
  same with int32 index math, and a (rows, 128) tile read once as two halves.

Every variant is checked against torch before it is timed (median of triton's do_bench).

    PYTHONPATH=. python3 bench/variants_gpu.py --out $OUT
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench


# ---- cross-entropy: logsumexp of each row -------------------------------------------------

@triton.jit
def lse_block(x_ptr, out_ptr, V: tl.constexpr, RBLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    rbase = tl.arange(0, RBLOCK)[None, :]
    m = tl.full([1, 1], float("-inf"), tl.float32)
    s = tl.zeros([1, 1], tl.float32)
    for r0 in range(0, V, RBLOCK):
        r = r0 + rbase
        v = tl.load(x_ptr + row * V + r, r < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(v, 1)[:, None])
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(v - m_new), 1)[:, None]
        m = m_new
    tl.store(out_ptr + row + tl.zeros([1, 1], tl.int64), m + tl.log(s))


@triton.jit
def lse_lane_sum(x_ptr, out_ptr, V: tl.constexpr, RBLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    rbase = tl.arange(0, RBLOCK)[None, :]
    m = tl.full([1, 1], float("-inf"), tl.float32)
    s = tl.zeros([1, RBLOCK], tl.float32)
    for r0 in range(0, V, RBLOCK):
        r = r0 + rbase
        v = tl.load(x_ptr + row * V + r, r < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(v, 1)[:, None])
        s = s * tl.exp(m - m_new) + tl.exp(v - m_new)
        m = m_new
    tl.store(out_ptr + row + tl.zeros([1, 1], tl.int64), m + tl.log(tl.sum(s, 1)[:, None]))


@triton.jit
def lse_lane_online(x_ptr, out_ptr, V: tl.constexpr, RBLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    rbase = tl.arange(0, RBLOCK)[None, :]
    m = tl.full([1, RBLOCK], float("-inf"), tl.float32)
    s = tl.zeros([1, RBLOCK], tl.float32)
    for r0 in range(0, V, RBLOCK):
        r = r0 + rbase
        v = tl.load(x_ptr + row * V + r, r < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, v)
        ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - ref) + tl.exp(v - ref)
        m = m_new
    mm = tl.max(m, 1)[:, None]
    total = tl.sum(s * tl.exp(m - mm), 1)[:, None]
    tl.store(out_ptr + row + tl.zeros([1, 1], tl.int64), mm + tl.log(total))


def run_lse(results, copy_bw):
    for V in (50304, 128256):
        x = torch.randn(16384, V, device="cuda", dtype=torch.bfloat16) * 2
        ref = torch.logsumexp(x.float(), -1)
        nbytes = x.numel() * 2
        for name, kern in (("block", lse_block), ("lane_sum", lse_lane_sum),
                           ("lane_online", lse_lane_online)):
            for rb in (2048, 4096, 8192):
                for warps in (4, 8, 16):
                    out = torch.empty(16384, device="cuda", dtype=torch.float32)
                    fn = lambda: kern[(16384,)](x, out, V, rb, num_warps=warps)  # noqa: E731
                    _record(results, f"lse V={V}", f"{name} R{rb} w{warps}", fn,
                            lambda: (out - ref).abs().max().item() < 1e-2, nbytes, copy_bw)
        del x


# ---- bias + GeLU(tanh) ---------------------------------------------------------------------

@triton.jit
def gelu_sigmoid(x_ptr, b_ptr, out_ptr, N: tl.constexpr, COLS: tl.constexpr,
                 XBLOCK: tl.constexpr, FAST_DIV: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = i < N
    x = tl.load(x_ptr + i, mask, other=0).to(tl.float32) + \
        tl.load(b_ptr + i % COLS, mask, other=0).to(tl.float32)
    z = (x + x * x * x * 0.044715) * (0.7978845608028654 * 2.0)
    if FAST_DIV:
        y = x * tl.math.fdiv(tl.full([XBLOCK], 1.0, tl.float32), 1.0 + tl.exp(-z))
    else:
        y = x * tl.sigmoid(z)
    tl.store(out_ptr + i, y.to(tl.bfloat16), mask)


def run_gelu(results, copy_bw):
    M, N = 32768, 4096
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.gelu(x + b, approximate="tanh")
    nbytes = 2 * x.numel() * 2
    for fast in (False, True):
        for xb in (1024, 2048, 4096, 8192):
            for warps in (4, 8):
                out = torch.empty_like(x)
                fn = lambda: gelu_sigmoid[(triton.cdiv(M * N, xb),)](  # noqa: E731
                    x, b, out, M * N, N, xb, fast, num_warps=warps)
                _record(results, "bias+gelu", f"{'fdiv' if fast else 'sigmoid'} X{xb} w{warps}",
                        fn, lambda: (out.float() - ref.float()).abs().max().item() < 0.07,
                        nbytes, copy_bw)


# ---- RoPE ----------------------------------------------------------------------------------

@triton.jit
def rope_flat(x_ptr, cos_ptr, sin_ptr, out_ptr, N: tl.constexpr, XBLOCK: tl.constexpr,
              WIDE: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = i < N
    t = (i // 4096) % 4096
    d = i % 128
    if WIDE:
        d = d + tl.zeros([XBLOCK], tl.int64)
    x = tl.load(x_ptr + i, mask, other=0).to(tl.float32)
    c = tl.load(cos_ptr + t * 128 + (i % 128), mask, other=0)
    s = tl.load(sin_ptr + t * 128 + (i % 128), mask, other=0)
    lo = (d >= 0) & (d < 64)
    hi = (d >= 64) & (d < 128)
    a = -tl.load(x_ptr + i + 64, mask & lo, other=0).to(tl.float32)
    bb = tl.load(x_ptr + i - 64, mask & hi, other=0).to(tl.float32)
    rot = tl.where(lo, a, bb)
    tl.store(out_ptr + i, (x * c + rot * s).to(tl.bfloat16), mask)


@triton.jit
def rope_halves(x_ptr, cos_ptr, sin_ptr, out_ptr, ROWS: tl.constexpr, RB: tl.constexpr):
    rows = tl.program_id(0) * RB + tl.arange(0, RB)[:, None]
    d = tl.arange(0, 64)[None, :]
    mask = rows < ROWS
    t = (rows // 32) % 4096
    x1 = tl.load(x_ptr + rows * 128 + d, mask, other=0).to(tl.float32)
    x2 = tl.load(x_ptr + rows * 128 + 64 + d, mask, other=0).to(tl.float32)
    c1 = tl.load(cos_ptr + t * 128 + d, mask, other=0)
    c2 = tl.load(cos_ptr + t * 128 + 64 + d, mask, other=0)
    s1 = tl.load(sin_ptr + t * 128 + d, mask, other=0)
    s2 = tl.load(sin_ptr + t * 128 + 64 + d, mask, other=0)
    tl.store(out_ptr + rows * 128 + d, (x1 * c1 - x2 * s1).to(tl.bfloat16), mask)
    tl.store(out_ptr + rows * 128 + 64 + d, (x2 * c2 + x1 * s2).to(tl.bfloat16), mask)


def run_rope(results, copy_bw):
    from cherenkov.bench.suites.memory import rope, rope_tables
    B, T, H, D = 8, 4096, 32, 128
    x = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16)
    cos, sin = rope_tables(T, D, "cuda")
    ref = rope(x, cos, sin)
    nbytes = 2 * x.numel() * 2
    n = x.numel()
    for wide in (True, False):
        for xb in (1024, 2048, 4096):
            for warps in (4, 8):
                out = torch.empty_like(x)
                fn = lambda: rope_flat[(triton.cdiv(n, xb),)](  # noqa: E731
                    x, cos, sin, out, n, xb, wide, num_warps=warps)
                _record(results, "rope", f"flat {'int64' if wide else 'int32'} X{xb} w{warps}",
                        fn, lambda: (out.float() - ref.float()).abs().max().item() < 0.07,
                        nbytes, copy_bw)
    rows = B * T * H
    for rb in (8, 16, 32, 64):
        for warps in (4, 8):
            out = torch.empty_like(x)
            fn = lambda: rope_halves[(triton.cdiv(rows, rb),)](  # noqa: E731
                x, cos, sin, out, rows, rb, num_warps=warps)
            _record(results, "rope", f"halves R{rb} w{warps}", fn,
                    lambda: (out.float() - ref.float()).abs().max().item() < 0.07,
                    nbytes, copy_bw)


# ---- harness -------------------------------------------------------------------------------

def _record(results, case, variant, fn, ok, nbytes, copy_bw):
    row = {"case": case, "variant": variant}
    try:
        fn()
        torch.cuda.synchronize()
        row["ok"] = bool(ok())
        ms = do_bench(fn, warmup=10, rep=60, return_mode="median")
        row["ms"] = ms
        row["GBps"] = nbytes / ms / 1e6
        row["pct_copy"] = 100 * row["GBps"] / copy_bw
    except Exception as e:  # noqa: BLE001 -- one failing variant never stops the sweep
        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    results.append(row)
    print(row, flush=True)


def copy_bandwidth():
    src = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16).fill_(1)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=10, rep=60, return_mode="median")
    return 2 * src.numel() * 2 / ms / 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--only", nargs="*", default=["lse", "gelu", "rope"])
    args = parser.parse_args()
    copy_bw = copy_bandwidth()
    results = []
    for name in args.only:
        {"lse": run_lse, "gelu": run_gelu, "rope": run_rope}[name](results, copy_bw)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "copy_GBps": copy_bw,
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "commit": os.environ.get("CHERENKOV_COMMIT", "unknown")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "variants_gpu.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    lines = [f"# Kernel variants on {meta['gpu']} ({meta['date']}, commit {meta['commit']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, copy {copy_bw:.0f} GB/s", "",
             "| case | variant | ok | ms | GB/s | % copy |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['case']} | {r['variant']} | {r.get('ok', r.get('error'))} | "
                     f"{r.get('ms', 0):.4f} | {r.get('GBps', 0):.0f} | {r.get('pct_copy', 0):.1f} |")
    (out / "variants_gpu.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

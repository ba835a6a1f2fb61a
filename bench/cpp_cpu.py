"""CPU check of the C++ backend (issue 7): memory-bound kernels timed eager vs torch.compile
(Inductor's C++ backend) vs Cherenkov's C++ kernels, in one process, median of repeated runs;
correctness against eager first. Writes markdown + JSON to argv[1] (default bench/results).

    PYTHONPATH=. python3 bench/cpp_cpu.py [OUTDIR] [--rows 4096] [--cols 4096] [--cases softmax]

`--cases` takes comma-separated parts of case names ("softmax", "bf16", "RMSNorm fp32").

Cherenkov's side runs lower → fuse → C++ render/build → the same execution plan the Triton
kernels use, so it measures the kernels plus the plan's per-call overhead.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from cherenkov.bench.report import commit as current_commit
from cherenkov.capture.decompositions import decomposition_table
from cherenkov.compiler import compile_fx
from cherenkov.config import Config


def cherenkov_cpp(fn, args):
    """fn compiled for `args` through the compiler with the C++ backend;
    (callable, n kernels, seconds)."""
    start = time.perf_counter()
    gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    compiled, info = compile_fx(gm, list(args), Config(strict=True, cpu_backend="cpp"))
    return (lambda *a: compiled(list(a))), len(info.kernels), time.perf_counter() - start


def median_ms(fn, args, repeats=15):
    fn(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def copy_gbps(nbytes_tensor: torch.Tensor) -> float:
    ms = median_ms(lambda t: t.clone(), (nbytes_tensor,))
    return 2 * nbytes_tensor.numel() * nbytes_tensor.element_size() / ms / 1e6


def cases(M: int, N: int):
    torch.manual_seed(0)
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        x, r = torch.randn(M, N, dtype=dtype), torch.randn(M, N, dtype=dtype)
        w, b = torch.randn(N, dtype=dtype), torch.randn(N, dtype=dtype)
        size = x.element_size()
        tag = "fp32" if dtype == torch.float32 else "bf16"

        def add_ln(x, r, w, b):
            return F.layer_norm(x + r, (x.shape[-1],), w, b)

        def rms(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

        def softmax(x):
            return torch.softmax(x.float(), -1).to(x.dtype)

        def bias_gelu(x, b):
            return F.gelu(x + b, approximate="tanh")

        def add_mul(x, r):
            return (x + r) * 0.5

        out += [(f"add + LayerNorm {tag}", add_ln, (x, r, w, b), 3 * M * N * size),
                (f"RMSNorm {tag}", rms, (x, w), 2 * M * N * size),
                (f"softmax {tag}", softmax, (x,), 2 * M * N * size),
                (f"bias + GeLU(tanh) {tag}", bias_gelu, (x, b), 2 * M * N * size),
                (f"(x + r) * 0.5 {tag}", add_mul, (x, r), 3 * M * N * size)]
    # training-graph shapes the rows above miss: a column sum (bias / LayerNorm-weight
    # gradient), a row any (a finiteness check), an embedding backward (rows scattered into a
    # vocabulary of M // 8 rows, many tokens per row)
    x = torch.randn(M, N)
    idx = torch.randint(0, max(1, M // 8), (M,))

    def column_sum(x):
        return x.sum(0)

    def row_any(x):
        return (x > 3.5).any(-1)

    def embedding_backward(g):
        return torch.ops.aten.embedding_dense_backward(g, idx, max(1, M // 8), -1, False)

    out += [("column sum fp32", column_sum, (x,), M * N * 4),
            ("row any fp32", row_any, (x,), M * N * 4),
            ("embedding backward fp32", embedding_backward, (x,), M * N * 4 + M * N // 2)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir", nargs="?", default="bench/results")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--name", default="cpp_cpu", help="file stem after the date")
    parser.add_argument("--cases", default="",
                        help="comma-separated: only the cases whose name contains one of them")
    args = parser.parse_args()
    M, N = args.rows, args.cols
    results = {"threads": torch.get_num_threads(), "shape": [M, N], "rows": []}
    results["copy_GBps"] = copy_gbps(torch.randn(M, N))
    wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
    for name, fn, inputs, nbytes in cases(M, N):
        if wanted and not any(w in name for w in wanted):
            continue
        ours, n_kernels, compile_s = cherenkov_cpp(fn, inputs)
        want = fn(*inputs)
        got = ours(*inputs)[0]
        err = ((got.double() - want.double()).norm() / want.double().norm()).item()
        row = {"kernel": name, "bytes": nbytes, "kernels": n_kernels, "rel_err": err,
               "cherenkov_compile_s": compile_s,
               "eager_ms": median_ms(fn, inputs), "cherenkov_ms": median_ms(ours, inputs)}
        if not args.no_inductor:
            t0 = time.perf_counter()
            ind = torch.compile(fn)
            ind(*inputs)
            row["inductor_compile_s"] = time.perf_counter() - t0
            row["inductor_ms"] = median_ms(ind, inputs)
        row["cherenkov_GBps"] = nbytes / row["cherenkov_ms"] / 1e6
        row["vs_eager"] = row["eager_ms"] / row["cherenkov_ms"]
        if "inductor_ms" in row:
            row["vs_inductor"] = row["inductor_ms"] / row["cherenkov_ms"]
        results["rows"].append(row)
        print(json.dumps(row))
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{datetime.date.today()}_{args.name}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"# C++ backend, CPU ({results['threads']} threads), {M}x{N}, cherenkov at "
             f"{current_commit()}",
             f"copy bandwidth (clone): {results['copy_GBps']:.1f} GB/s", "",
             "| kernel | kernels | rel err | eager ms | inductor ms | cherenkov ms | GB/s | "
             "vs eager | vs inductor |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['kernel']} | {r['kernels']} | {r['rel_err']:.1e} | {r['eager_ms']:.2f} | "
                     f"{r.get('inductor_ms', float('nan')):.2f} | {r['cherenkov_ms']:.2f} | "
                     f"{r['cherenkov_GBps']:.1f} | {r['vs_eager']:.2f}x | "
                     f"{r.get('vs_inductor', float('nan')):.2f}x |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

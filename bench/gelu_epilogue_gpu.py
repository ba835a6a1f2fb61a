"""cuBLASLt's GELU epilogues (templates/cublaslt.py) vs cuBLAS + a GELU kernel, on one GPU.

    PYTHONPATH=. python3 bench/gelu_epilogue_gpu.py OUT_DIR     # CHERENKOV_COMMIT=<sha>

GPT-2's MLP (B=16 T=1024: 16384 tokens, d=768, 3072 hidden), bf16:
  forward   h = x @ W1.T + b1, g = gelu_tanh(h): torch (addmm, then F.gelu) vs GELU_AUX_BIAS
            (one matmul writing g and h); addmm alone for the matmul's own time;
  backward  dh = (dy @ W2) * gelu'(h), db1 = dh.sum(0): torch (mm, gelu_backward, sum) vs
            DGELU_BGRAD (one matmul) and DGELU + torch's sum; mm alone.
Correctness first: which GELU cuBLASLt computes (tanh or erf: max error against each, in
bf16 ulps of the result) and the fused outputs against torch's. Times: do_bench medians.
Writes OUT_DIR/gelu_epilogue_gpu.md and .json.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cherenkov.bench.report import save_pair, script_meta  # noqa: E402
from cherenkov.bench.timing import cuda_median_s  # noqa: E402
from cherenkov.templates import cublaslt  # noqa: E402


def rel(a, b) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def main(out_dir: str) -> None:
    dev, bf = "cuda", torch.bfloat16
    M, K, N = 16384, 768, 3072
    g0 = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, device=dev, dtype=bf, generator=g0)
    w1 = (torch.randn(N, K, device=dev, dtype=bf, generator=g0) * K ** -0.5).to(bf)
    b1 = torch.randn(N, device=dev, dtype=bf, generator=g0) * 0.1
    w2 = (torch.randn(K, N, device=dev, dtype=bf, generator=g0) * N ** -0.5).to(bf)
    dy = torch.randn(M, K, device=dev, dtype=bf, generator=g0)
    rows, checks = [], {}

    # forward
    fwd = cublaslt.plan(cublaslt.problem_of(x, w1.t(), "gelu_aux_bias"))
    checks["forward planned"] = fwd is not None
    h_ref = torch.addmm(b1, x, w1.t())
    g_tanh = F.gelu(h_ref, approximate="tanh")
    g_erf = F.gelu(h_ref)
    g, h = torch.empty(M, N, device=dev, dtype=bf), torch.empty(M, N, device=dev, dtype=bf)
    if fwd is not None:
        fwd(x, w1.t(), g, bias=b1, aux=h)
        checks["aux vs addmm"] = rel(h, h_ref)
        checks["gelu vs tanh"] = rel(g, g_tanh)
        checks["gelu vs erf"] = rel(g, g_erf)
    t_addmm = cuda_median_s(lambda: torch.addmm(b1, x, w1.t()))
    t_torch = cuda_median_s(lambda: F.gelu(torch.addmm(b1, x, w1.t()), approximate="tanh"))
    rows.append(("forward: addmm alone", t_addmm))
    rows.append(("forward: addmm + gelu kernel", t_torch))
    if fwd is not None:
        rows.append(("forward: cuBLASLt GELU_AUX_BIAS", cuda_median_s(
            lambda: fwd(x, w1.t(), g, bias=b1, aux=h))))

    # backward
    bwd = cublaslt.plan(cublaslt.problem_of(dy, w2, "dgelu_bgrad"))
    bwd_plain = cublaslt.plan(cublaslt.problem_of(dy, w2, "dgelu"))
    checks["backward planned"] = bwd is not None
    dg_ref = dy @ w2
    dh_tanh = torch.ops.aten.gelu_backward(dg_ref, h_ref, approximate="tanh")
    dh_erf = torch.ops.aten.gelu_backward(dg_ref, h_ref)
    db_ref = dh_tanh.sum(0)
    dh, db = torch.empty(M, N, device=dev, dtype=bf), torch.empty(N, device=dev, dtype=bf)
    if bwd is not None:
        bwd(dy, w2, dh, bias=db, aux=h_ref)
        checks["dgelu vs tanh"] = rel(dh, dh_tanh)
        checks["dgelu vs erf"] = rel(dh, dh_erf)
        checks["bgrad vs sum"] = rel(db, db_ref)
    t_mm = cuda_median_s(lambda: dy @ w2)

    def torch_bwd():
        d = torch.ops.aten.gelu_backward(dy @ w2, h_ref, approximate="tanh")
        return d, d.sum(0)
    rows.append(("backward: mm alone", t_mm))
    rows.append(("backward: mm + gelu_backward + sum", cuda_median_s(torch_bwd)))
    if bwd is not None:
        rows.append(("backward: cuBLASLt DGELU_BGRAD", cuda_median_s(
            lambda: bwd(dy, w2, dh, bias=db, aux=h_ref))))
    if bwd_plain is not None:
        rows.append(("backward: cuBLASLt DGELU + sum", cuda_median_s(
            lambda: (bwd_plain(dy, w2, dh, aux=h_ref), dh.sum(0)))))

    meta = script_meta() | dict(shape=f"{M}x{K}x{N}", library=cublaslt._library_path())
    lines = [f"# cuBLASLt GELU epilogues vs cuBLAS + a kernel ({meta['gpu']})", "",
             " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| case | ms | TFLOP/s (matmul) |", "|---|---|---|"]
    flops = 2 * M * N * K
    for name, t in rows:
        lines.append(f"| {name} | {t * 1e3:.4f} | {flops / t / 1e12:.0f} |")
    lines += ["", "checks (max error / max of the reference):", ""]
    lines += [f"- {k}: {v}" for k, v in checks.items()]
    text = "\n".join(lines) + "\n"
    save_pair(out_dir, "gelu_epilogue_gpu", text,
              dict(meta=meta, rows=[dict(case=n, ms=t * 1e3) for n, t in rows], checks=checks))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

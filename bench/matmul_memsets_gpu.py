"""Where the memsets before cuBLAS's matmuls come from, and what avoiding them costs.

GPT-2's training step on the H200 runs 123 `Memset (Device)` a step, each right before an
nvjet matmul kernel; with the gaps they open around them (they break the chain of
dependent launches) ~0.5 ms a step: in one step's timeline (bench/results/
2026-12-02_profile_train_gpt2_h200_31c7d60_timeline_cherenkov.txt, its "gap us" and
"kernel us" columns summed) 209 us of gaps after them, 178 before, 128 their own. For each of the step's matmul problems
(bench/cublaslt_algos_gpu.problems): memsets per call and the median time of torch's call,
of cuBLASLt's heuristic first with a 32 MB workspace (ws#0: what cuBLAS runs) and of its
first without a workspace (nows#0: no split-K).

    PYTHONPATH=. python3 bench/matmul_memsets_gpu.py OUT_DIR     # CHERENKOV_COMMIT=<sha>
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.cublaslt_algos_gpu import problems  # noqa: E402
from bench.cublaslt_memset_free_gpu import launches, setup  # noqa: E402
from cherenkov.bench.report import save_pair, script_meta  # noqa: E402
from cherenkov.bench.timing import cuda_median_s  # noqa: E402
from cherenkov.templates import cublaslt  # noqa: E402



def memsets_per_call(fn) -> float:
    """Device memsets per call. (The 40c962b results counted the host's cudaMemsetAsync
    beside each device memset: their 2.0 per call is one memset.)"""
    return launches(fn)[1]


def main(out_dir: str) -> None:
    rows = []
    for name, a, b, bias, count in problems("cuda"):
        ref, out, prob, torch_call = setup(a, b, bias)
        calls = {"torch": torch_call}
        for kind, nbytes in (("ws#0", cublaslt.WORKSPACE_BYTES), ("nows#0", 0)):
            found = cublaslt.candidates(prob, 1, workspace_bytes=nbytes)
            if found:
                calls[kind] = lambda c=found[0]: c(a, b, out, bias=bias)
        row = dict(case=name, per_step=count)
        for kind, fn in calls.items():
            fn()
            got = ref if kind == "torch" else out
            err = float((got.float() - ref.float()).abs().max() / ref.float().abs().max())
            row[kind] = dict(memsets=memsets_per_call(fn), ms=cuda_median_s(fn) * 1e3, err=err)
        rows.append(row)
        print(name, {k: v for k, v in row.items() if isinstance(v, dict)}, flush=True)
    meta = script_meta()
    kinds = ("torch", "ws#0", "nows#0")
    lines = [f"# Memsets before cuBLAS matmuls, GPT-2's problems ({meta['gpu']})", "",
             " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| matmul | per step | " + " | ".join(f"{k} memsets/call | {k} ms" for k in kinds)
             + " |", "|---|---|" + "---|---|" * len(kinds)]
    for r in rows:
        cells = []
        for k in kinds:
            v = r.get(k)
            cells += ["-", "-"] if v is None else [f"{v['memsets']:.1f}", f"{v['ms']:.4f}"]
        lines.append(f"| {r['case']} | {r['per_step']} | " + " | ".join(cells) + " |")
    step = {k: sum(r[k]["ms"] * r["per_step"] for r in rows if k in r) for k in kinds}
    lines += ["", "Step sums (ms, each call timed alone): "
              + ", ".join(f"{k} {v:.3f}" for k, v in step.items())]
    save_pair(out_dir, "matmul_memsets_gpu", "\n".join(lines) + "\n",
              dict(meta=meta, rows=rows, step_ms=step))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

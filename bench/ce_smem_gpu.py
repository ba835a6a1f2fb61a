"""The cross-entropy rows with their gradient at the train suite's LM-head shapes (bf16):
the Triton kernel that reads each row twice (templates/cross_entropy_kernel.py, its best
launch) against the Gluon kernel that copies the row into shared memory once
(templates/cross_entropy_smem*.py) over its slice size and warps; and the loss alone. Each
variant checked against torch on 512 rows, then timed (do_bench-style medians); bytes moved
(logits read once, gradient written once) against the copy bandwidth of the same bytes.
Also eager's call in the same process: F.cross_entropy's forward + backward on the logits
upcast to fp32, as under autocast.

    PYTHONPATH=. python3 bench/ce_smem_gpu.py OUT_DIR
"""
import itertools
import sys

import torch
import torch.nn.functional as F

from cherenkov.bench.report import save_pair, script_meta
from bench.ce_grad_variants_gpu import SHAPES, check, problem
from cherenkov.bench.timing import cuda_median_s
from cherenkov.templates import cross_entropy_smem
from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows


def _smem(x, t, loss, grad, block_v: int, num_warps: int) -> None:
    if not cross_entropy_smem.launch(x, grad, t, loss, -100, True, block_v=block_v,
                                     num_warps=num_warps):
        raise RuntimeError("the shared-memory kernel did not build")


def variants():
    yield "triton (2 reads)", lambda x, t, loss, grad: cross_entropy_rows(
        x, t, loss, -100, True, grad=grad, smem=False)
    for block_v, warps in itertools.product((2048, 4096), (4, 8, 16)):
        yield f"smem block_v={block_v} warps={warps}", (
            lambda x, t, loss, grad, b=block_v, w=warps: _smem(x, t, loss, grad, b, w))


def main(out_dir: str) -> None:
    dev = torch.device("cuda")
    meta = script_meta()
    lines = [f"# Cross-entropy rows: one read through shared memory vs two, {meta['gpu']}", "",
             " · ".join(f"{k} {v}" for k, v in meta.items()), ""]
    rows = []
    for name, (n, v) in SHAPES.items():
        x, t, loss, grad, nbytes, copy_bw = problem(n, v, dev)
        lines += [f"## {name}: {n} x {v} bf16, read + write {nbytes / 1e9:.2f} GB, copy "
                  f"{copy_bw / 1e9:.0f} GB/s", "", "| variant | ok | us | % of copy |",
                  "|---|---|---|---|"]
        for label, run in variants():
            try:
                ok = check(x, t, run)
                s = cuda_median_s(lambda: run(x, t, loss, grad))
            except Exception as e:  # noqa: BLE001 -- a variant that fails is reported
                lines.append(f"| {label} | {type(e).__name__}: {str(e)[:80]} | | |")
                continue
            pct = 100 * nbytes / s / copy_bw
            rows.append({"shape": name, "variant": label, "ok": ok, "us": s * 1e6,
                         "pct_copy": pct})
            lines.append(f"| {label} | {ok} | {s * 1e6:.1f} | {pct:.1f} |")
        for label, fn in (("loss only, triton", lambda: cross_entropy_rows(
                x, t, loss, -100, False, smem=False)), ("loss only, smem", lambda: cross_entropy_rows(
                x, t, loss, -100, False, smem=True))):
            s = cuda_median_s(fn)
            rows.append({"shape": name, "variant": label, "ok": True, "us": s * 1e6})
            lines.append(f"| {label} | | {s * 1e6:.1f} | |")
        xr = x.detach().requires_grad_()

        def eager():
            F.cross_entropy(xr.float(), t).backward()
        s = cuda_median_s(eager)
        lines.append(f"| eager F.cross_entropy fwd+bwd (fp32 upcast, as autocast) | | "
                     f"{s * 1e6:.1f} | |")
        lines.append("")
        del x, grad, xr
        torch.cuda.empty_cache()
    save_pair(out_dir, "ce_smem", "\n".join(lines) + "\n", {"meta": meta, "rows": rows})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

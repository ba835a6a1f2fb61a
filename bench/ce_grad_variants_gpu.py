"""The cross-entropy rows kernel with its gradient (templates/cross_entropy_kernel.py, as the
forward of templates/ce_forward_grad_op.py runs it) over its launch choices, on the train
suite's LM-head shapes in bf16: block size and warps (the kernel's L2 hints, a persistent grid
and pipelined loops were swept at a162c63 and 948ef62: hints won and stayed, the others lost
and went; the one-pass form, the whole row one block read once, lost at 243d1cf and went);
and the second pass walked last slice first or not (`reverse`: won at 975db70, the default).
Each variant is checked against torch (loss rows, gradient) and timed; the bytes
it must move (logits read once, gradient written once) against the copy bandwidth of the same
bytes.

    PYTHONPATH=. python3 bench/ce_grad_variants_gpu.py OUT_DIR
"""
import itertools
import json
import os
import sys

import torch
import torch.nn.functional as F

from cherenkov.bench.timing import copy_bandwidth, cuda_median_s
from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows

SHAPES = {"gpt2": (16384, 50304), "llama": (8192, 32000)}


def check(x, t, run) -> bool:
    """run(logits, targets, loss, grad) on 512 rows against torch (loss rows, gradient)."""
    rows = 512
    xs, ts = x[:rows], t[:rows]
    loss, grad = torch.empty(rows, device=x.device), torch.empty_like(xs)
    run(xs, ts, loss, grad)
    ref = F.cross_entropy(xs.float(), ts, reduction="none")
    want = torch.softmax(xs.float(), -1) - F.one_hot(ts, xs.shape[1]).float()
    return bool(torch.allclose(loss, ref, atol=1e-3, rtol=1e-4)
                and torch.allclose(grad.float(), want, atol=1e-2, rtol=1e-2))


def problem(n: int, v: int, dev):
    """(logits bf16 (n, v), targets, loss, grad, bytes read + written, copy bandwidth of
    that many bytes in bytes/s), seeded."""
    torch.manual_seed(0)
    x = (torch.randn(n, v, device=dev) * 2).to(torch.bfloat16)
    t = torch.randint(0, v, (n,), device=dev)
    nbytes = 2 * x.numel() * x.element_size()
    return (x, t, torch.empty(n, device=dev), torch.empty_like(x), nbytes,
            copy_bandwidth(dev, nbytes // 2))


def main(out_dir: str) -> None:
    dev = torch.device("cuda")
    lines, rows = [], []
    for name, (n, v) in SHAPES.items():
        x, t, loss, grad, nbytes, copy_bw = problem(n, v, dev)
        lines.append(f"{name} ({n} x {v} bf16): copy {copy_bw / 1e9:.0f} GB/s; "
                     f"read + write {nbytes / 1e9:.2f} GB")
        variants = [dict(block_v=b, num_warps=w, reverse=r)
                    for r, b, w in itertools.product((False, True), (4096, 8192, 16384),
                                                     (4, 8, 16))]
        for launch in variants:
            label = " ".join(f"{k}={v}" for k, v in launch.items())
            try:
                ok = check(x, t, lambda *a, kw=launch: cross_entropy_rows(
                    *a[:3], -100, True, grad=a[3], **kw))
                s = cuda_median_s(lambda: cross_entropy_rows(x, t, loss, -100, True, grad=grad,
                                                             **launch))
            except Exception as e:  # noqa: BLE001 -- a variant that fails is reported
                lines.append(f"  {label}: {type(e).__name__}: {str(e)[:80]}")
                continue
            pct = 100 * nbytes / s / copy_bw
            rows.append({"shape": name, **launch, "ok": ok, "us": s * 1e6, "pct_copy": pct})
            lines.append(f"  {label:<70} ok={ok} {s * 1e6:8.1f} us {pct:5.1f}%")
        best = min((r for r in rows if r["shape"] == name and r["ok"]), key=lambda r: r["us"])
        lines.append(f"  best: {best}")
        s = cuda_median_s(lambda: cross_entropy_rows(x, t, loss, -100, False))
        lines.append(f"  loss only (the unfused forward's pass): {s * 1e6:.1f} us")
    text = "\n".join(lines)
    print(text)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("CHERENKOV_COMMIT", "unknown")}
    with open(os.path.join(out_dir, "ce_grad_variants.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, "ce_grad_variants.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

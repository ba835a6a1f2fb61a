"""A prototype, not yet run: the cross-entropy rows kernel with each row split over SPLITS
programs that keep their slice in registers. Each program reduces its slice to (max, sum of
exponentials), publishes it, waits until the row's other programs have published theirs
(a counter in global memory), combines them into the row's log-sum-exp and writes its slice's
gradient from the values it still holds: the logits are read once and the gradient written
once (3.3 GB at GPT-2's 16384 x 50304, ~0.8 ms at copy bandwidth), where the default kernel
(templates/cross_entropy_kernel.py) reads each row twice and its second read misses L2
(1.16 ms, 67% of copy).

The wait relies on the GPU starting programs in index order (a row's programs are adjacent,
so every row whose programs have all started finishes without waiting on a later one); the
Triton interpreter runs programs one after another and would wait forever, so this runs on a
GPU only, under a timeout. Counters are never reset: call e waits for (e + 1) * SPLITS.

Checked against torch (loss rows and gradient, all rows) and timed beside the default kernel.

    timeout 120 env PYTHONPATH=. python3 bench/ce_split_gpu.py OUT_DIR
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from cherenkov.bench.timing import copy_bandwidth, cuda_median_s
from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows


@triton.jit
def ce_split_rows(logits_ptr, stride_row, targets_ptr, loss_ptr, part_m_ptr, part_s_ptr,
                  counter_ptr, goal, V, ignore_index, SPLITS: tl.constexpr,
                  CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    part = pid % SPLITS
    base = logits_ptr + row * stride_row
    cols = part * CHUNK + tl.arange(0, CHUNK)
    mask = cols < V
    x = tl.load(base + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m_ref = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.exp(x - m_ref), axis=0)
    slot = row * SPLITS + part
    tl.atomic_xchg(part_m_ptr + slot, m)
    tl.atomic_xchg(part_s_ptr + slot, s)
    tl.atomic_add(counter_ptr + row, 1, sem="release")
    while tl.atomic_add(counter_ptr + row, 0, sem="acquire") < goal:
        pass
    slots = row * SPLITS + tl.arange(0, SPLITS)
    pm = tl.atomic_add(part_m_ptr + slots, tl.zeros([SPLITS], tl.float32), sem="acquire")
    ps = tl.atomic_add(part_s_ptr + slots, tl.zeros([SPLITS], tl.float32), sem="acquire")
    big = tl.max(pm, axis=0)
    big_ref = tl.where(big == -float("inf"), 0.0, big)
    lse = big_ref + tl.log(tl.sum(ps * tl.exp(pm - big_ref), axis=0))
    target = tl.load(targets_ptr + row)
    valid = target != ignore_index
    known = (target >= 0) & (target < V)
    safe_target = tl.where(valid & known, target, 0)
    keep = tl.where(valid, tl.where(known, 1.0, float("nan")), 0.0)
    hit = cols == safe_target
    p = tl.exp(x - lse) - tl.where(hit, 1.0, 0.0)
    # in place: each program reads only its own slice, all of it before it writes
    tl.store(base + cols, (p * keep).to(logits_ptr.dtype.element_ty), mask=mask)
    if part == safe_target // CHUNK:          # the target's slice holds its logit
        target_logit = tl.sum(tl.where(hit & mask, x, 0.0), axis=0)
        loss = tl.where(known, lse - target_logit, float("nan"))
        tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))


class SplitRows:
    """Launches with the counters' goal advanced by one call each time."""

    def __init__(self, rows: int, device, splits: int, vocab: int, num_warps: int):
        self.splits, self.num_warps = splits, num_warps
        self.chunk = triton.next_power_of_2(triton.cdiv(vocab, splits))
        self.part_m = torch.empty(rows * splits, device=device, dtype=torch.float32)
        self.part_s = torch.empty_like(self.part_m)
        self.counters = torch.zeros(rows, device=device, dtype=torch.int32)
        self.calls = 0

    def __call__(self, logits, targets, loss):
        rows, vocab = logits.shape
        self.calls += 1
        ce_split_rows[(rows * self.splits,)](
            logits, logits.stride(0), targets, loss, self.part_m, self.part_s, self.counters,
            self.calls * self.splits, vocab, -100, SPLITS=self.splits, CHUNK=self.chunk,
            num_warps=self.num_warps)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    dev = torch.device("cuda")
    rows_out, lines = [], []
    for name, (n, v) in {"gpt2": (16384, 50304), "llama": (8192, 32000)}.items():
        torch.manual_seed(0)
        x0 = (torch.randn(n, v, device=dev) * 2).to(torch.bfloat16)
        t = torch.randint(0, v, (n,), device=dev)
        t[::97] = -100
        want_loss = F.cross_entropy(x0.float(), t, reduction="none")
        want_grad = (torch.softmax(x0.float(), -1)
                     - F.one_hot(t.clamp(min=0), v)) * (t != -100)[:, None]
        nbytes = 2 * x0.numel() * x0.element_size()
        copy = copy_bandwidth(dev, nbytes // 2)
        loss, grad = torch.empty(n, device=dev), torch.empty_like(x0)
        s = cuda_median_s(lambda: cross_entropy_rows(x0, t, loss, -100, True, grad=grad))
        rows_out.append({"shape": name, "variant": "default (two reads)", "us": s * 1e6,
                         "pct_copy": 100 * nbytes / s / copy, "ok": True})
        lines.append(f"{name}: default {s * 1e6:.1f} us ({100 * nbytes / s / copy:.1f}% of copy)")
        for splits in (4, 8, 16):
            for warps in (4, 8):
                label = f"split {splits} w{warps}"
                try:
                    run = SplitRows(n, dev, splits, v, warps)
                    x = x0.clone()
                    got_loss = torch.empty(n, device=dev)
                    run(x, t, got_loss)
                    torch.cuda.synchronize()
                    grad_ok = torch.allclose(x.float(), want_grad, atol=2e-2, rtol=2e-2)
                    loss_ok = torch.allclose(got_loss, want_loss, atol=2e-2, rtol=2e-2)
                    work = x0.clone()
                    s = cuda_median_s(lambda: run(work, t, got_loss))
                except Exception as e:  # noqa: BLE001 -- a failing variant is reported
                    lines.append(f"  {label}: {type(e).__name__}: {str(e)[:100]}")
                    continue
                rows_out.append({"shape": name, "variant": label, "us": s * 1e6,
                                 "pct_copy": 100 * nbytes / s / copy,
                                 "grad_ok": grad_ok, "loss_ok": loss_ok})
                lines.append(f"  {label}: grad ok={grad_ok} loss ok={loss_ok} "
                             f"{s * 1e6:.1f} us ({100 * nbytes / s / copy:.1f}% of copy)")
                print(lines[-1], flush=True)
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"ce_split_{commit}.json"), "w") as f:
        json.dump({"commit": commit, "torch": torch.__version__, "triton": triton.__version__,
                   "rows": rows_out}, f, indent=1)
    with open(os.path.join(out, f"ce_split_{commit}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

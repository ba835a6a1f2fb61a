"""GPU check of the spine (issue 2): model tests under bf16 autocast, then memory-bound kernels
timed eager vs torch.compile vs Cherenkov in one process. Writes markdown + JSON to argv[1].

    PYTHONPATH=. python3 bench/spine_gpu.py OUTDIR
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
import traceback

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.models import GPT, Llama, preset
from cherenkov.bench.report import commit

DEV = "cuda"
results = {"model_tests": [], "memory": [], "errors": []}


def rel(a, b):
    return ((a.float() - b.float()).norm() / (b.float().norm() + 1e-12)).item()


def model_test(name, make, inputs_fn):
    torch.manual_seed(0)
    ref_model = make().to(DEV)
    ours = make().to(DEV)
    ours.load_state_dict(ref_model.state_dict())
    fp64 = make().to(DEV).double()
    fp64.load_state_dict(ref_model.state_dict())
    args = inputs_fn()
    compiled = cherenkov.compile(ours, strict=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out_e = ref_model(*args)
        out_c = compiled(*args)
    loss_e = out_e[1] if isinstance(out_e, tuple) else out_e.float().square().mean()
    loss_c = out_c[1] if isinstance(out_c, tuple) else out_c.float().square().mean()
    loss_e.backward()
    loss_c.backward()
    out_64 = fp64(*[a.double() if a.is_floating_point() else a for a in args])
    loss_64 = out_64[1] if isinstance(out_64, tuple) else out_64.square().mean()
    loss_64.backward()
    worst_e = max(rel(p.grad, q.grad) for p, q in zip(ref_model.parameters(), fp64.parameters()))
    worst_c = max(rel(p.grad, q.grad) for p, q in zip(ours.parameters(), fp64.parameters()))
    row = {"model": name, "loss_eager_bf16": loss_e.item(), "loss_cherenkov_bf16": loss_c.item(),
           "loss_fp64": loss_64.item(), "grad_rel_err_eager_vs_fp64": worst_e,
           "grad_rel_err_cherenkov_vs_fp64": worst_c,
           "pass": worst_c <= max(2 * worst_e, 2e-2) and abs(loss_c.item() - loss_64.item())
           <= max(3 * abs(loss_e.item() - loss_64.item()), 2e-2 * abs(loss_64.item()))}
    results["model_tests"].append(row)
    print(row, flush=True)


class MLP(torch.nn.Module):
    def __init__(self, d=80, h=200):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh")) + x


class CE(torch.nn.Module):
    def __init__(self, d=80, vocab=1001):
        super().__init__()
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x, t):
        logits = self.head(x)
        return logits, F.cross_entropy(logits.float(), t)


def model_tests():
    g = dataclasses.replace(preset("tiny"), hidden=80, heads=4, seq=37, vocab=1001, layers=2)
    l = dataclasses.replace(preset("tiny-llama"), hidden=80, heads=4, kv_heads=2, ffn=96,
                            seq=37, vocab=1001, layers=2)
    idx = lambda v: (torch.randint(0, v, (3, 37), device=DEV), torch.randint(0, v, (3, 37), device=DEV))  # noqa: E731
    cases = [("mlp d=80", MLP, lambda: (torch.randn(3, 37, 80, device=DEV),)),
             ("cross-entropy vocab 1001", CE, lambda: (torch.randn(111, 80, device=DEV),
                                                       torch.randint(0, 1001, (111,), device=DEV))),
             ("gpt2 block x2 d=80 T=37", lambda: GPT(g), lambda: idx(1001)),
             ("llama block x2 d=80 T=37 GQA", lambda: Llama(l), lambda: idx(1001))]
    for name, make, inp in cases:
        try:
            model_test(name, make, inp)
        except Exception as e:  # noqa: BLE001
            results["errors"].append(f"{name}: {e!r}")
            traceback.print_exc()


def memory_suite():
    torch.manual_seed(0)
    M, N = 32768, 4096
    bf = torch.bfloat16
    x = torch.randn(M, N, device=DEV, dtype=bf)
    r = torch.randn(M, N, device=DEV, dtype=bf)
    w = torch.randn(N, device=DEV, dtype=bf)
    b = torch.randn(N, device=DEV, dtype=bf)

    def add_ln(x, r, w, b):
        return F.layer_norm(x + r, (N,), w, b)

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6)).to(bf) * w

    def softmax(x):
        return torch.softmax(x.float(), -1).to(bf)

    def bias_gelu(x, b):
        return F.gelu(x + b, approximate="tanh")

    cases = [("add + LayerNorm", add_ln, (x, r, w, b), 3 * M * N * 2),
             ("RMSNorm", rms, (x, w), 2 * M * N * 2),
             ("softmax (fp32 math)", softmax, (x,), 2 * M * N * 2),
             ("bias + GeLU(tanh)", bias_gelu, (x, b), 2 * M * N * 2)]
    copy_ms = do_bench(lambda: x.clone(), return_mode="median")
    copy_tbs = 2 * M * N * 2 / copy_ms / 1e9
    results["copy_TBps"] = copy_tbs
    for name, fn, args, nbytes in cases:
        row = {"kernel": name, "shape": [M, N], "bytes": nbytes}
        try:
            ref = fn(*args)
            tc = torch.compile(fn)
            ck = cherenkov.compile(fn, strict=True)
            out_c = ck(*args)
            row["max_abs_err_vs_eager"] = (out_c.float() - ref.float()).abs().max().item()
            for label, f in (("eager", fn), ("torch.compile", tc), ("cherenkov", ck)):
                f(*args)
                ms = do_bench(lambda: f(*args), return_mode="median")
                row[f"{label}_ms"] = ms
                row[f"{label}_TBps"] = nbytes / ms / 1e9
            row["speedup_vs_eager"] = row["eager_ms"] / row["cherenkov_ms"]
            row["speedup_vs_torch_compile"] = row["torch.compile_ms"] / row["cherenkov_ms"]
            row["cherenkov_pct_of_copy"] = 100 * row["cherenkov_TBps"] / copy_tbs
        except Exception as e:  # noqa: BLE001
            results["errors"].append(f"{name}: {e!r}")
            traceback.print_exc()
        results["memory"].append(row)
        print(row, flush=True)


def write(outdir):
    os.makedirs(outdir, exist_ok=True)
    meta = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__,
            "commit": commit()}
    results["meta"] = meta
    with open(os.path.join(outdir, "spine_h200.json"), "w") as f:
        json.dump(results, f, indent=2)
    lines = [f"# Spine on {meta['gpu']} -- {meta['date']}, torch {meta['torch']}, "
             f"triton {meta['triton']}, commit {meta['commit']}", "",
             "## Model tests (bf16 autocast; gradients vs an fp64 copy of the same model)", "",
             "| model | loss eager | loss cherenkov | loss fp64 | grad rel err eager | grad rel err cherenkov | pass |",
             "|---|---|---|---|---|---|---|"]
    for r in results["model_tests"]:
        lines.append(f"| {r['model']} | {r['loss_eager_bf16']:.5f} | {r['loss_cherenkov_bf16']:.5f} | "
                     f"{r['loss_fp64']:.5f} | {r['grad_rel_err_eager_vs_fp64']:.2e} | "
                     f"{r['grad_rel_err_cherenkov_vs_fp64']:.2e} | {r['pass']} |")
    lines += ["", f"## Memory-bound kernels, 32768x4096 bf16 (copy bandwidth this run: "
              f"{results.get('copy_TBps', 0):.2f} TB/s)", "",
              "| kernel | eager TB/s | torch.compile TB/s | cherenkov TB/s | % of copy | vs eager | vs torch.compile | max abs err |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results["memory"]:
        if "cherenkov_ms" in r:
            lines.append(f"| {r['kernel']} | {r['eager_TBps']:.2f} | {r['torch.compile_TBps']:.2f} | "
                         f"{r['cherenkov_TBps']:.2f} | {r['cherenkov_pct_of_copy']:.0f}% | "
                         f"{r['speedup_vs_eager']:.2f}x | {r['speedup_vs_torch_compile']:.2f}x | "
                         f"{r['max_abs_err_vs_eager']:.3g} |")
        else:
            lines.append(f"| {r['kernel']} | failed | | | | | | |")
    if results["errors"]:
        lines += ["", "## Errors", ""] + [f"- {e}" for e in results["errors"]]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, "spine_h200.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/out"
    model_tests()
    memory_suite()
    write(out)

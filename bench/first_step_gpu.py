"""Where a compiled training step's first step goes: one model (train suite config), compiled
by Cherenkov in a fresh process, its first step run under cProfile; prints the compile phases
per graph and the functions with the most cumulative and own time.

    PYTHONPATH=. python3 bench/first_step_gpu.py [--case llama-style] [--out DIR]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.bench.suites.train import cases
from cherenkov.models import build_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="llama-style")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    case = next(c for c in cases("full") if c.name == args.case)
    torch.manual_seed(0)
    model = build_model(case.model).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, case.model.vocab, (case.batch, case.seq), device="cuda")
    compiled = torch.compile(model, backend="cherenkov")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = compiled(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    step()
    prof.disable()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    step()
    second = time.perf_counter() - t0
    lines = [f"# first step of {case.name} under cProfile: {first:.1f} s (second step {second:.3f} s)", ""]
    for graph, info in COMPILED:
        lines.append(f"{info.name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in info.seconds.items()))
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(40)
        lines += ["", f"## by {key}", s.getvalue()]
    text = "\n".join(lines)
    print(text[:20000])
    if args.out:
        Path(args.out, f"first_step_{case.name}.txt").write_text(text)


if __name__ == "__main__":
    main()

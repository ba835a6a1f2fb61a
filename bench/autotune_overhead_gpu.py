"""Why a GPT-2 step runs slower with `autotune` when the plan choice keeps cuBLAS for every graph
(profile at 35ca302: +0.7 GB before the step, +66 device-to-device copies, +12 Triton launches
and +12 generic library calls per step, host issue 30 vs 16 ms). For `cherenkov` and
`cherenkov+autotune` in one process: every compiled graph (name, kernels, library calls,
CUDA-graph decision, plans timed), its plan's steps by kind, the memory allocated before a
step, and where one step's tensor copies are made from Python.

    PYTHONPATH=. python3 bench/autotune_overhead_gpu.py OUT_DIR [--scale smoke]
"""
from __future__ import annotations

import argparse
import json
import os
from collections import Counter

import torch

from cherenkov.bench.suites import train as suite

def plan_summary(start: int) -> list[dict]:
    from cherenkov.backend import COMPILED
    rows = []
    for graph, info in COMPILED[start:]:
        steps = Counter()
        for plan in (getattr(graph, "cache", None) or {}).values():
            for step in getattr(plan, "steps", ()):
                steps[f"{step.kind}:{getattr(step, 'label', '')[:40]}" if step.kind == "library"
                      else step.kind] += 1
        rows.append({"name": info.name, "kernels": len(info.kernels),
                     "library_calls": dict(info.library_calls),
                     "cuda_graphs": str(info.cuda_graphs), "plans_timed": info.plans_timed,
                     "steps": dict(steps)})
    return rows


def copy_sites(fn, opt, batches, settings) -> dict:
    """Tensor copies made from Python during one step (copy_, clone, contiguous, to), by the
    innermost frame in cherenkov/ or torch/ (the profiler's stacks are empty on this torch).
    The methods are wrapped for the step only; compiled code calls the runtime directly, so no
    guard sees them."""
    import traceback
    sites = Counter()
    originals = {m: getattr(torch.Tensor, m) for m in ("copy_", "clone", "contiguous", "to")}

    def wrap(method, original):
        def wrapped(self, *args, **kwargs):
            for frame in reversed(traceback.extract_stack(limit=10)[:-1]):
                if "cherenkov/" in frame.filename or "torch/" in frame.filename:
                    where = f"{frame.filename.split('/')[-1]}:{frame.lineno} {frame.name}"
                    sites[f"{method} @ {where}"] += 1
                    break
            return original(self, *args, **kwargs)
        return wrapped
    try:
        for m, original in originals.items():
            setattr(torch.Tensor, m, wrap(m, original))
        suite._train_step(fn, opt, *batches[0], settings)
    finally:
        for m, original in originals.items():
            setattr(torch.Tensor, m, original)
    return dict(sites.most_common(25))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="bench/results")
    ap.add_argument("--scale", default="full")
    args = ap.parse_args()
    from cherenkov.backend import COMPILED
    case = suite.cases(args.scale)[0]
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    settings = suite.Settings(device=dev)
    batches = suite.make_batches(case, 2, settings.seed, dev)
    report = {}
    for name in ("cherenkov", "cherenkov+autotune"):
        torch._dynamo.reset()
        torch.manual_seed(settings.seed)
        model = suite.build_model(case.model, dev).train()
        opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, fused=dev.type == "cuda")
        start = len(COMPILED)
        fn = suite.BACKENDS[name].build(model)
        for i in range(4):
            suite._train_step(fn, opt, *batches[i % 2], settings)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        before = torch.cuda.memory_allocated() if dev.type == "cuda" else 0
        report[name] = {"allocated_before_step_GB": before / 1e9,
                        "graphs": plan_summary(start),
                        "copy_sites": copy_sites(fn, opt, batches, settings)}
        del model, opt, fn
    text = json.dumps(report, indent=1, default=str)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "autotune_overhead.json"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()

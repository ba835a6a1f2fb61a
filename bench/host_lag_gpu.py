"""Which part of a training step makes the GPU wait for the host when steps run back to back
(no synchronization): the step's GPU time back to back against the same with the GPU kept busy
(a sleep kernel queued first), for the whole step and for forward + backward alone, and the
host's time in each phase (forward call, backward, optimizer step, zero_grad) back to back.

    PYTHONPATH=. python3 bench/host_lag_gpu.py [--impls cherenkov torch.compile]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from cherenkov.bench.suites import train as suite
from cherenkov.bench.timing import events_median_ms


def phases(fn, opt, idx, tgt, settings, with_opt: bool, marks: list) -> None:
    t = [time.perf_counter()]
    with torch.autocast("cuda", dtype=settings.dtype):
        _, loss = fn(idx, tgt)
    t.append(time.perf_counter())
    loss.backward()
    t.append(time.perf_counter())
    if with_opt:
        opt.step()
        t.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        t.append(time.perf_counter())
    marks.append([b - a for a, b in zip(t, t[1:])])


def measure(fn, opt, batches, settings, with_opt: bool, reps: int = 9) -> dict:
    marks = []

    def run(i, marks=marks):
        phases(fn, opt, *batches[i % 2], settings, with_opt, marks)
    back_to_back = events_median_ms(run, reps)
    busy = events_median_ms(lambda i: run(i, []), reps, "busy")
    host = [statistics.median(m[k] for m in marks[2:]) * 1e3 for k in range(len(marks[0]))]
    return {"back_to_back_ms": back_to_back, "kept_busy_ms": busy,
            "host_phase_ms": [round(h, 2) for h in host]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impls", nargs="+", default=["cherenkov", "torch.compile"])
    args = ap.parse_args()
    case = suite.cases("full")[0]
    settings = suite.Settings(device=torch.device("cuda"))
    for impl in args.impls:
        torch.manual_seed(0)
        model = suite.build_model(case.model, settings.device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, fused=True)
        fn = suite.BACKENDS[impl].build(model)
        batches = suite.make_batches(case, 2, 0, settings.device)
        for i in range(6):
            suite._train_step(fn, opt, *batches[i % 2], settings)
        out = {"impl": impl,
               "step": measure(fn, opt, batches, settings, True),
               "fwd_bwd": measure(fn, opt, batches, settings, False)}
        print(json.dumps(out), flush=True)
        del model, opt, fn
        torch._dynamo.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""How far ahead of the GPU the host is at each phase of back-to-back training steps, and
whether steps queued whole behind a sleep run faster than back to back only for the first.

- lead: at every phase boundary (step start, forward issued, backward issued, optimizer step
  issued, zero_grad done) a CUDA event is recorded and the host clock read; after the run,
  the event's GPU time minus the host time it was issued at (both from one reference taken
  on an idle GPU). A lead near zero means the GPU reached that point as soon as the host
  issued it: the host paced the GPU there. Median and minimum per boundary over the steps.
- queued: a sleep kernel long enough for the host to issue STEPS_QUEUED steps, then those
  steps timed one by one with events. If only the first is faster than back to back, the
  difference is the GPU's state (clocks after the sleep's rest); if all are, it is the host.

    PYTHONPATH=. python3 bench/host_lead_gpu.py OUT_DIR [gpt2-style|llama-style] [backend ...]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

from cherenkov.bench.suites import train
from cherenkov.bench.timing import keep_busy

STEPS = 14
STEPS_QUEUED = 3
PHASES = ("start", "forward", "backward", "optimizer", "zero_grad")


def lead_run(fn, opt, batches, settings) -> dict:
    marks = []

    def mark(label):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        marks.append((label, ev, time.perf_counter()))

    torch.cuda.synchronize()
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    t_ref = time.perf_counter()
    for i in range(STEPS):
        idx, tgt = batches[i % len(batches)]
        mark("start")
        with torch.autocast("cuda", dtype=settings.dtype):
            _, loss = fn(idx, tgt)
        mark("forward")
        loss.backward()
        mark("backward")
        opt.step()
        mark("optimizer")
        opt.zero_grad(set_to_none=True)
        mark("zero_grad")
    torch.cuda.synchronize()
    rows = [(label, ref.elapsed_time(ev), (t - t_ref) * 1e3) for label, ev, t in marks]
    skip = 2 * len(PHASES)                     # the first two steps settle the queue
    lead = {p: [g - h for label, g, h in rows[skip:] if label == p] for p in PHASES}
    starts = [g for label, g, _ in rows if label == "start"]
    return {"step_ms": [round(b - a, 3) for a, b in zip(starts, starts[1:])],
            "lead_median_ms": {p: round(statistics.median(v), 3) for p, v in lead.items()},
            "lead_min_ms": {p: round(min(v), 3) for p, v in lead.items()},
            "host_phase_ms": {p: round(statistics.median(
                b[2] - a[2] for a, b in zip(rows[skip:], rows[skip + 1:]) if b[0] == p), 3)
                for p in PHASES[1:]}}


def queued_run(fn, opt, batches, settings, step_ms: float) -> list[float]:
    torch.cuda.synchronize()
    keep_busy(STEPS_QUEUED * step_ms / 1e3 + 0.05)
    return [round(ms, 3) for ms in train.event_step_ms(fn, opt, batches, settings,
                                                        STEPS_QUEUED)]


def run_backend(case, name, settings, batches) -> dict:
    model, opt, fn = train.script_backend(case, name, settings, batches)
    result = {"lead": [lead_run(fn, opt, batches, settings) for _ in range(2)]}
    step = statistics.median(result["lead"][0]["step_ms"])
    result["queued_ms"] = [queued_run(fn, opt, batches, settings, step) for _ in range(3)]
    del model, opt, fn
    train.script_release()
    return result


def main():
    out, case, names, settings, batches, results = train.script_setup(sys.argv, STEPS)
    path = os.path.join(out, f"host_lead_{results['config']}_{results['commit']}.json")
    for name, r in train.script_results(results, names, path,
                                        lambda name: run_backend(case, name, settings, batches)):
        if "error" in r:
            print(name, r, flush=True)
            continue
        for i, lead in enumerate(r["lead"]):
            print(f"{name} run {i}: steps {statistics.median(lead['step_ms']):.2f} ms "
                  f"(min {min(lead['step_ms']):.2f}); lead median {lead['lead_median_ms']}; "
                  f"lead min {lead['lead_min_ms']}; host {lead['host_phase_ms']}", flush=True)
        print(f"{name} queued behind a sleep: {r['queued_ms']}", flush=True)

if __name__ == "__main__":
    main()

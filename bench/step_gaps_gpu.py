"""Where a training step's wall time goes beyond its kernels: the train suite's config (GPT-2
by default) for the named backends, in one process. The train suite times steps back to back
with CUDA events (30.8 ms for Cherenkov on GPT-2) while the profiled kernels add up to less
(28.6 ms); this tells the rest apart:

- event-timed back-to-back steps (as the suite does), median ms;
- the same steps under a CUDA-only profiler (no CPU activity, so the host keeps its pace):
  kernel time per step, GPU idle per step, and the largest gaps with the kernels on either
  side (where in the step the GPU waits);
- the host's synchronizing calls during one step (torch.cuda.set_sync_debug_mode "warn");
- SM clock and power sampled by nvidia-smi while the steps run (clock throttling makes the
  same kernels slower in a sustained run than in a profile).

    PYTHONPATH=. python3 bench/step_gaps_gpu.py OUT_DIR [gpt2-style|llama-style] [backend ...]
"""
import os
import statistics
import subprocess
import sys
import threading
import warnings
from collections import defaultdict

import torch

from cherenkov.bench.suites import train

STEPS = 30                 # ~1 s of GPT-2 steps: the report is taken inside them
WARM = 20


def snapshot_during(seconds: float) -> dict:
    """nvidia-smi's performance, power and temperature report taken `seconds` from now (on a
    thread, while the caller runs its steps): why the clocks are where they are (power cap,
    thermal or other slowdowns)."""
    got = {}

    def take():
        try:
            got["report"] = subprocess.run(
                ["nvidia-smi", "-q", "-d", "PERFORMANCE,POWER,TEMPERATURE,CLOCK"],
                capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError) as e:
            got["report"] = f"nvidia-smi failed: {e}"
    thread = threading.Timer(seconds, take)
    thread.start()
    got["thread"] = thread
    return got


def clocks_during(fn):
    """Run fn() while nvidia-smi samples SM clock (MHz) and power (W) every 50 ms."""
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                "--format=csv,noheader,nounits", "-lms", "50"],
                               stdout=subprocess.PIPE, text=True)
    except OSError:
        smi = None
    result = fn()
    samples = []
    if smi is not None:
        smi.terminate()
        out, _ = smi.communicate(timeout=10)
        for line in out.splitlines():
            try:
                mhz, watts = (float(x) for x in line.split(","))
                samples.append((mhz, watts))
            except ValueError:
                continue
    return result, samples


def event_steps(fn, opt, batches, settings):
    return train.event_step_ms(fn, opt, batches, settings, STEPS)


def profiled(fn, opt, batches, settings):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(STEPS):
            train._train_step(fn, opt, *batches[i % len(batches)], settings)
        torch.cuda.synchronize()
    spans = sorted((ev.time_range.start, ev.time_range.end, ev.name[:70])
                   for ev in prof.events()
                   if ev.device_type == torch.autograd.DeviceType.CUDA
                   and not getattr(ev, "is_user_annotation", False))
    busy = sum(e - s for s, e, _ in spans)
    idle, end, prev, gaps = 0.0, None, None, []
    by_pair = defaultdict(lambda: [0.0, 0])
    for s, e, name in spans:
        if end is not None and s > end:
            idle += s - end
            by_pair[(prev, name)][0] += (s - end) / STEPS
            by_pair[(prev, name)][1] += 1 / STEPS
        if end is None or e >= end:
            prev = name
        end = e if end is None else max(end, e)
    span = spans[-1][1] - spans[0][0]
    top = sorted(by_pair.items(), key=lambda kv: -kv[1][0])[:20]
    small = sum(1 for (s0, e0, _), (s1, _, _) in zip(spans, spans[1:]) if 0 < s1 - e0 <= 4)
    return {"kernel_ms_per_step": busy / STEPS / 1e3, "idle_ms_per_step": idle / STEPS / 1e3,
            "span_ms_per_step": span / STEPS / 1e3, "launches_per_step": len(spans) / STEPS,
            "gaps_up_to_4us_per_step": small / STEPS,
            "gaps": [{"before": a, "after": b, "us_per_step": round(v[0], 1),
                      "per_step": round(v[1], 2)} for (a, b), v in top]}


def sync_calls(fn, opt, batches, settings):
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            train._train_step(fn, opt, *batches[0], settings)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return [str(w.message)[:200] for w in caught]


def run_backend(case, name, settings, batches):
    # warm past matmul_algos' in-step trials (a problem met once a step decides in ~12)
    model, opt, fn = train.script_backend(case, name, settings, batches, warm=WARM)
    report = snapshot_during(0.3)
    times, clocks = clocks_during(lambda: event_steps(fn, opt, batches, settings))
    report["thread"].join()
    result = {"event_ms": times, "event_median_ms": statistics.median(times),
              "sm_mhz_median": statistics.median(c[0] for c in clocks) if clocks else None,
              "sm_mhz_min": min(c[0] for c in clocks) if clocks else None,
              "power_w_median": statistics.median(c[1] for c in clocks) if clocks else None,
              "clock_samples": len(clocks), "smi_report": report.get("report", "")}
    result["profile"] = profiled(fn, opt, batches, settings)
    result["sync_warnings"] = sync_calls(fn, opt, batches, settings)
    del model, opt, fn
    train.script_release()
    return result


def main():
    out, case, names, settings, batches, results = train.script_setup(sys.argv, STEPS)
    path = os.path.join(out, f"step_gaps_{results['config']}_{results['commit']}.json")
    for name, r in train.script_results(results, names, path,
                                        lambda name: run_backend(case, name, settings, batches)):
        if "profile" not in r:
            print(name, r)
            continue
        p = r["profile"]
        print(f"{name}: events {r['event_median_ms']:.2f} ms; kernels "
              f"{p['kernel_ms_per_step']:.2f}, idle {p['idle_ms_per_step']:.2f}, span "
              f"{p['span_ms_per_step']:.2f} ms/step, {p['launches_per_step']:.0f} launches, "
              f"SM {r['sm_mhz_median']} MHz (min {r['sm_mhz_min']}), "
              f"{r['power_w_median']} W; syncs {len(r['sync_warnings'])}", flush=True)
        for g in p["gaps"][:10]:
            print(f"   {g['us_per_step']:8.1f} us x{g['per_step']}: {g['before']} -> "
                  f"{g['after']}")
        for line in r["smi_report"].splitlines():
            if ("Active" in line or "Power Draw" in line or "Current Temp" in line
                    or "Power Limit" in line or line.strip().startswith("SM ")):
                print("   smi:", line.strip())
        for w in r["sync_warnings"][:5]:
            print("   sync:", w)

if __name__ == "__main__":
    main()

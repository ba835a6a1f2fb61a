"""Where the GPU waits in a training step: for each gap between GPU operations in two profiled
steps of the train suite's GPT-2 config (Cherenkov by default), the operation before and after
it, how late the host launched the one after (launch time minus the end of the one before: > 0
means the GPU waited for the host), and the host code that launched it (innermost Python
frames of the profiler's trace). Also every host-device synchronization in one step (torch's
sync debug mode, with the Python stack).

    PYTHONPATH=. python3 bench/gaps_train_gpu.py OUT_DIR [--impls cherenkov torch.compile] [--scale smoke]
"""
from __future__ import annotations

import argparse
import bisect
import json
import tempfile
import traceback
import warnings
from collections import defaultdict
from pathlib import Path

import torch

from cherenkov.bench.suites import train as suite
from cherenkov.bench.timing import events_median_ms

GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


def syncs_in_one_step(fn, opt, batch, settings) -> list[str]:
    """The Python stacks of every synchronizing CUDA call in one step."""
    seen = []
    original = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        frames = [f"{f.filename.split('/')[-1]}:{f.lineno} {f.name}"
                  for f in traceback.extract_stack()[:-1]
                  if "warnings" not in f.filename][-8:]
        seen.append(f"{str(message)[:80]} <- " + " <- ".join(reversed(frames)))
    warnings.showwarning = record
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            torch.cuda.set_sync_debug_mode("warn")
            try:
                suite._train_step(fn, opt, *batch, settings)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    finally:
        warnings.showwarning = original
    return seen


def preloaded(fn, opt, batches, settings, reps: int = 7) -> dict:
    """The step's GPU time back to back (as the suite times it), from an idle GPU, and with
    the GPU kept busy while the host issues it (the GPU's own time, launch gaps included);
    and one step's peak memory."""
    def run(i):
        suite._train_step(fn, opt, *batches[i % 2], settings)
    times = {"step_ms_back_to_back": events_median_ms(run, 2 * reps),
             "step_ms_synced_before": events_median_ms(run, reps, "sync"),
             "step_ms_gpu_kept_busy": events_median_ms(run, reps, "busy")}
    torch.cuda.empty_cache()              # reserved: what this step needs, not what was
    torch.cuda.reset_peak_memory_stats()  # cached before
    run(0)
    return {**times, "peak_GB": torch.cuda.max_memory_allocated() / 1e9,
            "peak_reserved_GB": torch.cuda.max_memory_reserved() / 1e9}


def gaps_from_trace(trace: dict, steps: int, threshold_us: float = 8.0) -> dict:
    events = trace["traceEvents"]
    gpu = sorted((e for e in events if e.get("cat") in GPU_CATS and "dur" in e),
                 key=lambda e: e["ts"])
    launches = {e["args"].get("correlation"): e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e}
    frames = defaultdict(list)              # tid -> python_function / cpu_op events, by start
    for e in events:
        if e.get("cat") in ("python_function", "cpu_op") and "dur" in e:
            frames[e["tid"]].append(e)
    starts = {}
    for tid, evs in frames.items():
        evs.sort(key=lambda e: e["ts"])
        starts[tid] = [e["ts"] for e in evs]

    def enclosing(launch) -> str:
        tid, ts = launch["tid"], launch["ts"]
        evs = frames.get(tid, [])
        i = bisect.bisect_right(starts.get(tid, []), ts)
        inside = [e for e in evs[max(0, i - 4000):i] if e["ts"] + e["dur"] >= ts]
        inside.sort(key=lambda e: e["ts"])          # outermost first
        names = [e["name"].split("/")[-1][:60] for e in inside
                 if "cherenkov" in e["name"] or "torch/" in e["name"]
                 or e.get("cat") == "cpu_op"]
        return " > ".join(names[-5:])

    by_site = defaultdict(lambda: [0.0, 0, 0.0])
    total, small, end, prev = 0.0, 0.0, None, None
    for e in gpu:
        if end is not None and e["ts"] > end:
            gap = e["ts"] - end
            total += gap
            if gap <= threshold_us:
                small += gap
            else:
                launch = launches.get(e["args"].get("correlation"))
                lag = (launch["ts"] + launch.get("dur", 0) - end) if launch else float("nan")
                site = (f"{prev['name'][:40]} -> {e['name'][:40]} | "
                        f"{enclosing(launch) if launch else '?'}")
                s = by_site[site]
                s[0] += gap / steps
                s[1] += 1
                s[2] += lag / steps
        if end is None or e["ts"] + e["dur"] > end:
            end, prev = e["ts"] + e["dur"], e
    top = sorted(by_site.items(), key=lambda kv: -kv[1][0])[:40]
    calls = defaultdict(lambda: [0.0, 0, 0.0])     # runtime API calls: where the host blocks
    longest = []
    for e in launches.values():
        c = calls[e["name"]]
        c[0] += e.get("dur", 0) / steps
        c[1] += 1
        c[2] = max(c[2], e.get("dur", 0))
        longest.append((e.get("dur", 0), e["name"], enclosing(e)))
    longest.sort(reverse=True)
    return {"idle_us_per_step": total / steps, "small_gaps_us_per_step": small / steps,
            "gpu_ops": len(gpu) / steps,
            "runtime_calls": {n: {"us_per_step": round(v[0], 1), "count": v[1],
                                  "max_us": round(v[2], 1)}
                              for n, v in sorted(calls.items(), key=lambda kv: -kv[1][0])[:15]},
            "longest_runtime_calls": [f"{d:.0f} us {n} | {site}" for d, n, site in longest[:15]],
            "large_gaps": [{"us_per_step": round(v[0], 1), "count": v[1],
                            "host_late_us_per_step": round(v[2], 1), "site": k}
                           for k, v in top]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="bench/results")
    ap.add_argument("--impls", nargs="+", default=["cherenkov"])
    ap.add_argument("--scale", default="full")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--no-trace", action="store_true", help="timings only, no profiled steps")
    ap.add_argument("--no-stack", action="store_true", help="profile without Python stacks")
    ap.add_argument("--cuda-only", action="store_true",
                    help="profile CUDA activity only (runtime calls, kernels): least host overhead")
    args = ap.parse_args()
    for impl in args.impls:
        run_one(impl, args)
        torch._dynamo.reset()


def run_one(impl, args) -> None:
    case = suite.cases(args.scale)[0]
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    settings = suite.Settings(device=dev)
    torch.manual_seed(settings.seed)
    model = suite.build_model(case.model, dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=dev.type == "cuda")
    fn = suite.BACKENDS[impl].build(model)
    batches = suite.make_batches(case, 2, settings.seed, dev)
    for i in range(8):
        suite._train_step(fn, opt, *batches[i % 2], settings)
    report = {"impl": impl, "case": case.name}
    if dev.type == "cuda":
        host, wall = suite.host_and_wall(fn, opt, batches, settings)
        report["host_issue_ms"], report["wall_ms"] = host * 1e3, wall * 1e3
        report["syncs"] = syncs_in_one_step(fn, opt, batches[0], settings)
        report.update(preloaded(fn, opt, batches, settings))
    if args.no_trace:
        print(json.dumps(report, indent=1))
        return
    acts = [] if args.cuda_only else [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts, with_stack=not args.no_stack) as prof:
        for i in range(args.steps):
            suite._train_step(fn, opt, *batches[i % 2], settings)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    report.update(gaps_from_trace(trace, args.steps))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gaps_train_{case.name}_{impl}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items()
                      if k not in ("large_gaps", "syncs")}, indent=1))
    for g in report["large_gaps"][:25]:
        print(f"{g['us_per_step']:8.1f} us x{g['count']:<4d} late {g['host_late_us_per_step']:8.1f}"
              f"  {g['site']}")


if __name__ == "__main__":
    main()

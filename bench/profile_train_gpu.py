"""Where a training step's time goes: torch.profiler over a few steps of the train suite's
GPT-2 (or Llama) config, for torch.compile and Cherenkov, in one process.

For each backend: host time to issue one step (no synchronization) against the GPU time of the
step, and the CUDA kernels grouped by name (total time per step, launches per step) with a
category (matmul, attention, generated, aten, optimizer, copy); and what is alive at one step's
memory peak, by allocation site (cherenkov/bench/memory_peak.py). Cherenkov's generated kernels
are named by content hash; the report maps each to its fused op count and bytes, and the
sources of the 12 costliest ones are written beside it (<stem>_kernel_sources.py.txt: a dump
of generated kernels, data for reading, not a module of the repository).

    PYTHONPATH=. python3 bench/profile_train_gpu.py --out $OUT [--case gpt2-style]
"""
from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from pathlib import Path

import torch

from cherenkov.bench.suites import train as suite


def category(name: str) -> str:
    n = name.lower()
    if n.startswith("k_"):
        return "cherenkov kernel"
    if n.startswith("mm_epilogue"):
        return "matmul template"      # templates/fused_epilogue.py: matmul + its epilogue
    if any(s in n for s in ("gemm", "cutlass", "nvjet", "sm90_xmma", "cublas", "matmul")):
        return "matmul"
    if "flash" in n or "fmha" in n or "attention" in n or n.startswith("_attn") or "attn" in n:
        return "attention"
    if n.startswith("triton_"):
        return "inductor kernel"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    if "copy" in n or "memcpy" in n or "memset" in n or "fill" in n:
        return "copy/fill"
    return "aten other"


def profile_backend(case, backend, settings, steps: int = 3) -> dict:
    dev = settings.device
    torch.manual_seed(settings.seed)
    model = suite.build_model(case.model, dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=True)
    fn = backend.build(model)
    batches = suite.make_batches(case, 2, settings.seed, dev)
    for i in range(6):
        suite._train_step(fn, opt, *batches[i % 2], settings)
    # host time to issue a step, and the step's wall time when synchronized
    host_s, wall_s = suite.host_and_wall(fn, opt, batches, settings)
    import cProfile
    import io
    import pstats
    prof_host = cProfile.Profile()
    prof_host.enable()
    for i in range(3):
        suite._train_step(fn, opt, *batches[i % 2], settings)
    prof_host.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(prof_host, stream=text)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)
    host_profile = text.getvalue()
    memory = peak_memory(fn, opt, batches, settings)
    # CUDA activity only: recording the host's calls too slows the host enough to open gaps
    # at the forward's start that the timed steps (the host well ahead) do not have
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(steps):
            suite._train_step(fn, opt, *batches[i % 2], settings)
        torch.cuda.synchronize()
    kernels = defaultdict(lambda: [0.0, 0])
    spans = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            if getattr(ev, "is_user_annotation", False):
                continue       # a range around kernels (Optimizer.step), not a kernel
            k = kernels[ev.name]
            k[0] += ev.device_time_total / steps
            k[1] += 1 / steps
            spans.append((ev.time_range.start, ev.time_range.end, ev.name))
    del model, opt, fn
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return {"host_profile": host_profile, "memory": memory, "idle": idle_time(spans, steps),
            "timeline": (rows := timeline(spans, steps)),
            "wall_by_category": wall_by_category(rows),
            "host_ms": host_s * 1e3, "wall_ms": wall_s * 1e3,
            "kernels": {n: {"us": v[0], "count": v[1], "category": category(n)}
                        for n, v in kernels.items()}}


def idle_time(spans: list, steps: int) -> dict:
    """The GPU's idle time between kernels per step: the gaps in the union of kernel intervals
    (us), and the kernels that most often follow a gap of over 4 us."""
    spans.sort()
    idle, end, after = 0.0, None, defaultdict(lambda: [0.0, 0])
    for s, e, name in spans:
        if end is not None and s > end:
            idle += s - end
            if s - end > 4:
                after[name][0] += (s - end) / steps
                after[name][1] += 1 / steps
        end = e if end is None else max(end, e)
    top = sorted(after.items(), key=lambda kv: -kv[1][0])[:12]
    return {"idle_us": idle / steps, "span_us": (end - spans[0][0]) / steps if spans else 0.0,
            "after_gaps": {n[:90]: {"us": v[0], "count": v[1]} for n, v in top}}


def timeline(spans: list, steps: int) -> list:
    """The last profiled step's kernels in order: (name, gap before it, duration, wall), us --
    where the GPU waits, kernel by kernel. `wall` is how far the kernel pushes the end of the
    busy time (its end past every earlier kernel's): kernels launched with PDL start while the
    one before runs, so their durations overlap and only `wall` (with the gaps) sums to the
    step's span."""
    spans = sorted(spans)
    per_step = len(spans) // max(1, steps)
    last = spans[-per_step:] if per_step else []
    out, end = [], None
    for s, e, name in last:
        gap = 0.0 if end is None else max(0.0, s - end)
        wall = e - s if end is None else max(0.0, e - max(s, end))
        out.append((name[:60], gap, e - s, wall))
        end = e if end is None else max(end, e)
    return out


def wall_by_category(rows: list) -> dict:
    """A timeline's wall time (and the gaps before each kernel) summed by category, us."""
    cats = defaultdict(lambda: [0.0, 0.0])
    for name, gap, _, wall in rows:
        cats[category(name)][0] += wall
        cats[category(name)][1] += gap
    return {c: {"wall_us": w, "gap_before_us": g} for c, (w, g) in cats.items()}


def peak_memory(fn, opt, batches, settings) -> dict:
    """One step under the allocator's history recorder: what is alive at its peak."""
    from cherenkov.bench.memory_peak import peak_live
    dev = settings.device
    try:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
        suite._train_step(fn, opt, *batches[0], settings)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        result = peak_live(snap["device_traces"][torch.cuda.current_device()])
        result.update(baseline_bytes=base, max_allocated=torch.cuda.max_memory_allocated(dev))
        return result
    except Exception as e:  # noqa: BLE001 -- the rest of the profile still counts
        return {"error": f"{type(e).__name__}: {e}"}


def cherenkov_kernels() -> dict:
    """k_<hash> -> (fused ops, bytes, source) of every kernel Cherenkov compiled."""
    from cherenkov.backend import COMPILED
    out = {}
    for _, info in COMPILED:
        for name, fused, nbytes, source in info.kernels:
            m = re.search(r"def (k_[0-9a-f]+)\(", source)
            if m:
                out[m.group(1)] = (fused, nbytes, source)
    return out


def render(case, results: dict, known: dict) -> str:
    lines = [f"# Training-step profile: {case.name} {case.shape} on {torch.cuda.get_device_name()}",
             "", f"torch {torch.__version__}", ""]
    for name, r in results.items():
        ks = r["kernels"]
        total = sum(k["us"] for k in ks.values())
        lines += [f"## {name}", "",
                  f"host issue time {r['host_ms']:.1f} ms/step; synchronized wall {r['wall_ms']:.1f}"
                  f" ms/step; kernel time {total / 1e3:.1f} ms/step, "
                  f"{sum(k['count'] for k in ks.values()):.0f} launches/step", ""]
        idle = r.get("idle") or {}
        if idle:
            lines += [f"GPU idle between kernels {idle['idle_us'] / 1e3:.2f} ms/step of a "
                      f"{idle['span_us'] / 1e3:.1f} ms span (profiled back-to-back steps); "
                      "kernels after gaps over 4 us: " + ", ".join(
                          f"{n[:40]} {v['us']:.0f} us/{v['count']:.0f}"
                          for n, v in idle["after_gaps"].items()), ""]
        mem = r.get("memory") or {}
        if "peak_bytes" in mem:
            from cherenkov.bench.memory_peak import markdown as memory_markdown
            lines += [f"max allocated {mem['max_allocated'] / 1e9:.2f} GB. "] + \
                memory_markdown(mem, mem["baseline_bytes"]) + [""]
        elif mem:
            lines += [f"memory at peak: {mem.get('error')}", ""]
        walls = r.get("wall_by_category") or {}
        if walls:
            lines += ["Wall time of the last profiled step by category (kernels' overlapped "
                      "durations counted once; gaps before each kernel beside it):", "",
                      "| category | wall ms | gaps before, ms |", "|---|---|---|"]
            lines += [f"| {c} | {v['wall_us'] / 1e3:.2f} | {v['gap_before_us'] / 1e3:.2f} |"
                      for c, v in sorted(walls.items(), key=lambda kv: -kv[1]["wall_us"])]
            lines.append("")
        lines += ["| category | ms/step | launches/step |", "|---|---|---|"]
        cats = defaultdict(lambda: [0.0, 0.0])
        for k in ks.values():
            cats[k["category"]][0] += k["us"]
            cats[k["category"]][1] += k["count"]
        for c, (us, n) in sorted(cats.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"| {c} | {us / 1e3:.2f} | {n:.0f} |")
        lines += ["", "| kernel | category | us/step | launches | fused ops | MB |", "|---|---|---|---|---|---|"]
        for n, k in sorted(ks.items(), key=lambda kv: -kv[1]["us"])[:40]:
            fused, nbytes = known.get(n, ("", None))[:2]
            mb = f"{nbytes / 1e6:.0f}" if nbytes else ""
            lines.append(f"| {n[:90]} | {k['category']} | {k['us']:.0f} | {k['count']:.0f} | {fused} | {mb} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--case", default="gpt2-style")
    ap.add_argument("--impls", nargs="+", default=["torch.compile", "cherenkov"])
    ap.add_argument("--sources", type=int, default=12, help="kernel sources written (costliest)")
    args = ap.parse_args()
    case = next(c for c in suite.cases("full") if c.name == args.case)
    settings = suite.Settings(device=torch.device("cuda"))
    results = {}
    for impl in args.impls:
        t0 = time.time()
        results[impl] = profile_backend(case, suite.BACKENDS[impl], settings)
        print(impl, "profiled in", round(time.time() - t0, 1), "s", flush=True)
    known = cherenkov_kernels()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = render(case, results, known)
    print(text)
    stem = f"profile_train_{case.name}"
    (out / f"{stem}.md").write_text(text)
    for impl, r in results.items():
        tag = impl.replace("+", "_")        # a file name the device copies back
        (out / f"{stem}_host_{tag}.txt").write_text(r.pop("host_profile"))
        rows = [f"{gap:8.1f} {dur:8.1f} {wall:8.1f}  {name}"
                for name, gap, dur, wall in r.pop("timeline")]
        (out / f"{stem}_timeline_{tag}.txt").write_text(
            "  gap us kernel us  wall us  kernel (one step, in order; wall: how far it "
            "pushes the end of the busy time)\n" + "\n".join(rows) + "\n")
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    top = sorted(results.get("cherenkov", {"kernels": {}})["kernels"].items(),
                 key=lambda kv: -kv[1]["us"])
    # one file, so it comes back from the device with the report
    parts = [f"# {n}: {info['us']:.0f} us/step, {info['count']:.0f} launches\n\n{known[n][2]}"
             for n, info in [kv for kv in top if kv[0] in known][:args.sources]]
    (out / f"{stem}_kernel_sources.py.txt").write_text("\n\n".join(parts))


if __name__ == "__main__":
    main()

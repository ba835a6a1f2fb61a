"""What is alive at a step's memory peak: a replay of the CUDA caching allocator's trace
(`torch.cuda.memory._record_memory_history` / `_snapshot()["device_traces"]`).

`peak_live(events)` walks alloc/free events in order, finds where the bytes allocated since
recording began peak, and groups the allocations alive at that moment by the first stack frame
that says who asked (our runtime, Inductor's generated code, the model, autograd, the
optimizer). A freed block counts as free from its `free_requested` event, as
`torch.cuda.max_memory_allocated` counts it.

`segment_growth(events)` lists the moments the allocator reserved more device memory (a
`segment_alloc`): how much it already held cached but free then -- free memory it could not
use for that request is fragmentation -- and the allocation that asked.
"""
from __future__ import annotations

from collections import defaultdict

# frames that name who allocated, most specific first; the allocator's own frames never do
SITE_MARKERS = ("cherenkov/runtime", "cherenkov/lowering", "torch/_inductor", "cherenkov/models",
                "torch/optim", "torch/_functorch", "torch/autograd", "torch/nn", "cherenkov")


def site(frames: list) -> str:
    for marker in SITE_MARKERS:
        for f in frames or ():
            name = f.get("filename", "")
            if marker in name:
                short = name[name.find(marker):]
                return f"{short}:{f.get('line', '?')} {f.get('name', '')}".strip()
    if frames:
        f = frames[0]
        return f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '')}".strip()
    return "(no stack)"


def phase(frames: list) -> str:
    """forward / backward / optimizer / other, from the Python frames of an allocation."""
    names = " ".join(f"{f.get('filename', '')}:{f.get('name', '')}" for f in frames or ())
    for word, label in (("backward", "backward"), ("torch/optim", "optimizer"),
                        ("forward", "forward")):
        if word in names:
            return label
    return "other"


def peak_live(events: list, top: int = 25) -> dict:
    """{"peak_bytes", "at_event", "phase", "sites": [(site, bytes, count), ...],
    "largest": [(bytes, site), ...]} for one device trace."""
    live: dict[int, tuple[int, str]] = {}
    freed: set[int] = set()
    current = peak = 0
    at, peak_set, peak_phase = -1, {}, "other"
    for i, ev in enumerate(events):
        action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size", 0))
        if action == "alloc":
            live[addr] = (size, site(ev.get("frames")))
            freed.discard(addr)
            current += size
            if current > peak:
                peak, at, peak_set = current, i, dict(live)
                peak_phase = phase(ev.get("frames"))
        elif action in ("free_requested", "free_completed"):
            if addr in live and addr not in freed:
                current -= live.pop(addr)[0]
                freed.add(addr)
    groups: dict[str, list] = defaultdict(lambda: [0, 0])
    for size, where in peak_set.values():
        groups[where][0] += size
        groups[where][1] += 1
    sites = sorted(((w, b, n) for w, (b, n) in groups.items()), key=lambda t: -t[1])[:top]
    largest = sorted(peak_set.values(), key=lambda t: -t[0])[:top]
    sizes: dict[int, int] = defaultdict(int)
    for size, _ in peak_set.values():
        sizes[size] += 1
    by_size = sorted(sizes.items(), key=lambda t: -t[0] * t[1])[:top]
    return {"peak_bytes": peak, "at_event": at, "phase": peak_phase, "sites": sites,
            "largest": largest, "by_size": by_size}


def markdown(result: dict, baseline_bytes: int) -> list[str]:
    lines = [f"Allocated before the step (weights, optimizer state, ...): "
             f"{baseline_bytes / 1e9:.2f} GB; peak during the step: "
             f"+{result['peak_bytes'] / 1e9:.2f} GB, reached in the "
             f"{result.get('phase', '?')} pass. Alive at the peak, by allocation site:", "",
             "| site | GB | allocations |", "|---|---|---|"]
    for where, nbytes, count in result["sites"]:
        lines.append(f"| `{where[:110]}` | {nbytes / 1e9:.3f} | {count} |")
    if result.get("largest"):
        lines += ["", "Largest allocations alive at the peak (MB, site): " + ", ".join(
            f"{nbytes / 1e6:.0f} ({where.split(' ')[0].rsplit('/', 1)[-1]})"
            for nbytes, where in result["largest"])]
    if result.get("by_size"):
        lines += ["", "Alive at the peak by allocation size (MB x count): " + ", ".join(
            f"{nbytes / 1e6:.1f} x {count}" for nbytes, count in result["by_size"])]
    return lines


def segment_growth(events: list, marks: tuple = ()) -> dict:
    """{"grown": [{"event", "step", "segment", "reserved", "allocated", "cached_free",
    "request", "site"}, ...], "max_reserved", "allocated_at_max_reserved" (when reserved first
    reached it), "max_allocated"} for one device
    trace. `marks`: the event counts at which each step ended (the step of an event is the
    number of marks at or before it). Reserved follows segment_alloc / segment_free (and the
    expandable segments' map / unmap); allocated follows alloc / free_completed."""
    reserved = allocated = 0
    live: dict[int, int] = {}
    grown, pending = [], None
    best, top = (0, 0), 0
    for i, ev in enumerate(events):
        action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size", 0))
        if action in ("segment_alloc", "segment_map"):
            pending = {"event": i, "step": sum(1 for m in marks if m <= i), "segment": size,
                       "reserved": reserved + size, "allocated": allocated,
                       "cached_free": reserved - allocated, "request": None, "site": None}
            grown.append(pending)
            reserved += size
        elif action in ("segment_free", "segment_unmap"):
            reserved -= size
        elif action == "alloc":
            live[addr] = size
            allocated += size
            top = max(top, allocated)
            if pending is not None:
                pending["request"], pending["site"] = size, site(ev.get("frames"))
                pending = None
        elif action == "free_completed" and addr in live:
            allocated -= live.pop(addr)
        if reserved > best[0]:
            best = (reserved, allocated)
    return {"grown": grown, "max_reserved": best[0], "allocated_at_max_reserved": best[1],
            "max_allocated": top}

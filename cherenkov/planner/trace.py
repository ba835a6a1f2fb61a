"""Write a simulated timeline as a Chrome/Perfetto trace (JSON) or a matplotlib PNG.

Trace: one process per pipeline stage (device), one thread per stream, a complete event
("ph": "X") per task and a counter track ("ph": "C") of memory in GiB. Open it in
https://ui.perfetto.dev or chrome://tracing. Plot: stream occupancy of each stage above its
memory curve, drawn with the Agg backend (no display needed).
"""
from __future__ import annotations

import json

STREAM_IDS = {"compute": 0, "intra": 1, "inter": 2, "p2p": 3}
COLORS = {"compute": "tab:blue", "recompute": "tab:cyan", "comm": "tab:orange",
          "p2p": "tab:green", "optimizer": "tab:red"}


def chrome_trace(timeline) -> dict:
    events = []
    for i, t in enumerate(timeline.tasks):
        events.append({"name": t.name, "cat": t.category, "ph": "X", "pid": t.device,
                       "tid": STREAM_IDS.get(t.stream, 9), "ts": timeline.start[i] * 1e6,
                       "dur": t.seconds * 1e6, "args": {"bytes": t.nbytes, "axis": t.axis}})
    for d in timeline.devices:
        events.append({"name": "process_name", "ph": "M", "pid": d, "args": {"name": f"stage {d}"}})
        for stream, tid in STREAM_IDS.items():
            events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": tid,
                           "args": {"name": stream}})
        for time, level in timeline.memory_curve(d):
            events.append({"name": "memory", "ph": "C", "pid": d, "ts": time * 1e6,
                           "args": {"GiB": level / 2**30}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(timeline, path: str) -> None:
    with open(path, "w") as f:
        json.dump(chrome_trace(timeline), f)


def write_plot(timeline, path: str, max_stages: int = 8) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    devices = timeline.devices[:max_stages]
    fig, (ax, mem) = plt.subplots(2, 1, figsize=(12, 2 + 1.2 * len(devices)), sharex=True)
    streams = list(STREAM_IDS)
    for i, t in enumerate(timeline.tasks):
        if t.device not in devices:
            continue
        row = devices.index(t.device) * len(streams) + streams.index(t.stream)
        ax.broken_barh([(timeline.start[i], t.seconds)], (row, 0.8),
                       color=COLORS.get(t.category, "gray"))
    ax.set_yticks([d * len(streams) + s + 0.4 for d in range(len(devices)) for s in range(len(streams))])
    ax.set_yticklabels([f"s{d} {s}" for d in devices for s in streams], fontsize=6)
    ax.set_title("simulated step: streams per pipeline stage")
    for d in devices:
        curve = timeline.memory_curve(d)
        mem.step([c[0] for c in curve], [c[1] / 2**30 for c in curve], where="post", label=f"stage {d}")
    mem.set_ylabel("GiB")
    mem.set_xlabel("seconds")
    mem.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

"""Why a training step reserves more than it allocates: the train suite's step (plain
Cherenkov, or a backend named on the command line) on one config, the allocator's history
recorded over the first steps; every time the allocator reserved a new segment, how much it
already held cached but free (free memory it could not use for that request: fragmentation)
and the allocation that asked (`cherenkov/bench/memory_peak.segment_growth`).

    PYTHONPATH=. python3 bench/reserved_growth_gpu.py OUT_DIR [llama-style|gpt2-style] [backend]
"""
import json
import os
import sys

import torch

from cherenkov.bench.memory_peak import segment_growth
from cherenkov.bench.suites import train

GB = 1e9


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    config = sys.argv[2] if len(sys.argv) > 2 else "llama-style"
    backend = train.BACKENDS[sys.argv[3] if len(sys.argv) > 3 else "cherenkov"]
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    case = next(c for c in train.cases("full") if c.name == config)
    dev = torch.device("cuda")
    settings = train.Settings(dev)
    batches = train.make_batches(case, settings.batches, settings.seed, dev)
    torch.manual_seed(settings.seed)
    model = train.build_model(case.model, dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, fused=True)
    fn = backend.build(model)
    torch.cuda.reset_peak_memory_stats(dev)
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    marks = []
    for i in range(4):
        train._train_step(fn, opt, *batches[i % len(batches)], settings)
        torch.cuda.synchronize()
        marks.append(len(torch.cuda.memory._snapshot()["device_traces"][dev.index or 0]))
    events = torch.cuda.memory._snapshot()["device_traces"][dev.index or 0]
    torch.cuda.memory._record_memory_history(enabled=None)
    r = segment_growth(events, tuple(marks))
    summary = {"commit": commit, "config": config, "backend": backend.name,
               "max_reserved_GB": torch.cuda.max_memory_reserved() / GB,
               "max_allocated_GB": torch.cuda.max_memory_allocated() / GB,
               "trace_max_reserved_GB": r["max_reserved"] / GB,
               "trace_allocated_at_max_reserved_GB": r["allocated_at_max_reserved"] / GB,
               "trace_max_allocated_GB": r["max_allocated"] / GB, "step_marks": marks,
               "truncated": len(events) >= 2_000_000}
    lines = [f"# Reserved-memory growth: {config}, {backend.name}, commit {commit}", "",
             json.dumps(summary), "",
             "Reserved and allocated count from the start of recording (after the weights and "
             "the model's build).", "",
             "| event | step | new segment MB | reserved GB after | allocated GB | cached free GB "
             "| request MB | site |", "|---|---|---|---|---|---|---|---|"]
    for g in r["grown"]:
        lines.append(f"| {g['event']} | {g['step']} | {g['segment'] / 1e6:.1f} | "
                     f"{g['reserved'] / GB:.3f} | {g['allocated'] / GB:.3f} | "
                     f"{g['cached_free'] / GB:.3f} | "
                     f"{(g['request'] or 0) / 1e6:.1f} | `{(g['site'] or '-')[:90]}` |")
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"reserved_growth_{config}_{commit}")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(stem + ".json", "w") as f:
        json.dump({**summary, "grown": r["grown"]}, f, indent=1)
    print("\n".join(lines[:3] + lines[-40:]))


if __name__ == "__main__":
    main()

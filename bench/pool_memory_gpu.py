"""Where a graphed training step's reserved memory sits: the train suite's GPT-2 config, step by
step, with each Cherenkov variant named on the command line (default: plain, CUDA graphs in the
shared pool, pooled warm-ups). After every step (synchronized): allocated, reserved, the
allocator's peaks, and the reserved and allocated bytes per memory pool (the default pool and
each CUDA-graph pool) from the allocator's snapshot.

    PYTHONPATH=. python3 bench/pool_memory_gpu.py OUT_DIR [backend ...]
"""
import json
import os
import sys

import torch

from cherenkov.bench.suites import train

GB = 1e9


def by_pool() -> dict:
    """pool id -> [reserved, allocated] bytes (the default pool is (0, 0))."""
    pools = {}
    for seg in torch.cuda.memory_snapshot():
        key = str(tuple(seg.get("segment_pool_id", (0, 0))))
        acc = pools.setdefault(key, [0, 0])
        acc[0] += seg["total_size"]
        acc[1] += seg["allocated_size"]
    return pools


def trace(backend: train.Backend, case: train.TrainCase, steps: int) -> list[dict]:
    settings, batches, model = train.prepared(case, torch.device("cuda"))
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, fused=True)
    fn = backend.build(model)
    rows = []
    for i in range(steps):
        train._train_step(fn, opt, *batches[i % len(batches)], settings)
        torch.cuda.synchronize()
        row = {"step": i, "allocated": torch.cuda.memory_allocated() / GB,
               "reserved": torch.cuda.memory_reserved() / GB,
               "max_allocated": torch.cuda.max_memory_allocated() / GB,
               "max_reserved": torch.cuda.max_memory_reserved() / GB,
               "pools": {k: [round(v[0] / GB, 3), round(v[1] / GB, 3)]
                         for k, v in by_pool().items()}}
        rows.append(row)
        print(backend.name, json.dumps(row), flush=True)
    from cherenkov.backend import COMPILED
    for graph, info in COMPILED:
        print("  ", info.name, info.cuda_graphs)
        graph.cache.clear()
    COMPILED.clear()
    del model, opt, fn
    torch._dynamo.reset()
    import gc
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    names = sys.argv[2:] or ["cherenkov", "cherenkov+cudagraphs", "cherenkov+cudagraphs-pooled"]
    case = next(c for c in train.cases("full") if c.name == "gpt2-style")
    result = {"commit": os.environ.get("CHERENKOV_COMMIT", "unknown"),
              "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    for name in names:
        result[name] = trace(train.BACKENDS[name], case, steps=7)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "pool_memory.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

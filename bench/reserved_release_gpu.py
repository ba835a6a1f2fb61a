"""Peak reserved memory of the train suite's step with and without giving the allocator's
cached blocks back once, after the first backward (before the optimizer creates its state):
does the first step's layout -- the optimizer's moments placed into the holes the first
step's activations left -- cause the reserved-over-allocated slack?

    PYTHONPATH=. python3 bench/reserved_release_gpu.py OUT_DIR CONFIG BACKEND {keep,release} [STEPS]

Prints one JSON line (and writes OUT_DIR/reserved_release_<config>_<backend>_<mode>.json):
max reserved / allocated over the run, and reserved / allocated peaks per step.
"""
import json
import os
import sys

import torch

from cherenkov.bench.suites import train

GB = 1e9


def main():
    out, config, backend_name, mode = sys.argv[1:5]
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 12
    case = next(c for c in train.cases("full") if c.name == config)
    backend = train.BACKENDS[backend_name]
    dev = torch.device("cuda")
    settings, batches, model = train.prepared(case, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=True)
    fn = backend.build(model)
    per_step = []

    def release_then_step():          # the optimizer's moments then go into fresh segments
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        opt.step()
    for i in range(steps):
        step = release_then_step if i == 0 and mode == "release" else None
        loss = train._train_step(fn, opt, *batches[i % len(batches)], settings, step)
        torch.cuda.synchronize()
        per_step.append((round(torch.cuda.max_memory_reserved(dev) / GB, 3),
                         round(torch.cuda.max_memory_allocated(dev) / GB, 3),
                         round(torch.cuda.memory_reserved(dev) / GB, 3)))
    result = {"commit": os.environ.get("CHERENKOV_COMMIT", "unknown"), "config": config,
              "backend": backend_name, "mode": mode, "steps": steps,
              "max_reserved_GB": per_step[-1][0], "max_allocated_GB": per_step[-1][1],
              "per_step_max_reserved_max_allocated_reserved_GB": per_step,
              "loss_last": loss.item()}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"reserved_release_{config}_{backend_name}_{mode}.json"),
              "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

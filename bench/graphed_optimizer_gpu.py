"""A compiled AdamW step graphed or not, inside the train suite's GPT-2 step: the step is
compiled with cuda_graphs "on" and "off" (the model with the defaults), each from the same
seed and batches; median event-timed step, the graphed plan's counters (captures, replays,
runs beside the graph, disabled), and the weights after the steps compared between the two.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/graphed_optimizer_gpu.py OUT_DIR [steps]
"""
import json
import os
import statistics
import sys

import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.bench.suites import train


def run(case, settings, batches, mode: str, steps: int) -> dict:
    start = len(COMPILED)
    torch.manual_seed(settings.seed)
    model = train.build_model(case.model, settings.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, foreach=True)
    fn = cherenkov.compile(model, strict=True, dynamic=False)
    step = cherenkov.compile(opt.step, strict=True, dynamic=False, cuda_graphs=mode)
    times = []
    for i in range(steps):
        b, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        b.record()
        train._train_step(fn, opt, *batches[i % len(batches)], settings, step)
        e.record()
        times.append((b, e))
    torch.cuda.synchronize()
    ms = [b.elapsed_time(e) for b, e in times]
    counters = []
    for graph, info in COMPILED[start:]:
        for plan in graph.cache.values():
            call = getattr(plan, "_call", None)
            if hasattr(call, "replays"):
                counters.append({"graph": info.name, "captures": call.captures,
                                 "replays": call.replays, "fallbacks": call.fallbacks,
                                 "disabled": call.disabled,
                                 "static": sum(call.static_slots), "inputs": len(call.static_slots)})
    weights = torch.cat([p.detach().flatten().float().cpu() for p in model.parameters()])
    for graph, _ in COMPILED[start:]:
        graph.cache.clear()
    del model, opt, fn, step
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return {"ms": ms, "median_ms": statistics.median(ms[5:]), "graphs": counters,
            "weights": weights}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    case = next(c for c in train.cases("full") if c.name == "gpt2-style")
    settings = train.Settings(torch.device("cuda"))
    batches = train.make_batches(case, settings.batches, settings.seed, settings.device)
    results = {m: run(case, settings, batches, m, steps) for m in ("on", "off")}
    w_on, w_off = results["on"].pop("weights"), results["off"].pop("weights")
    diff = ((w_on - w_off).abs().max() / w_off.abs().max()).item()
    summary = {"commit": commit, "gpu": torch.cuda.get_device_name(), "steps": steps,
               "max_rel_weight_diff_on_vs_off": diff, **results}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"graphed_optimizer_{commit}.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for m in ("on", "off"):
        r = results[m]
        print(m, f"median {r['median_ms']:.2f} ms", [round(x, 1) for x in r["ms"]], r["graphs"])
    print("max relative weight difference on vs off:", diff)


if __name__ == "__main__":
    main()

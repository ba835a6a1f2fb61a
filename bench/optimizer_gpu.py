"""AdamW steps over the train suite's parameters (GPT-2 and Llama configs, fp32 weights and
gradients), one process: torch's fused kernel (the train suite's eager optimizer), torch's
multi-tensor (foreach) step eagerly and compiled by torch.compile, and the foreach step compiled
by Cherenkov with its per-parameter updates in combo launches (combine_updates) and without.
Each is checked against the fused step after three steps from the same state, then timed: GPU
time with the host ahead (a training step's optimizer follows its backward) and from an idle
GPU; GB/s counts p, g, m, v read and p, m, v written once (28 bytes a parameter).

    PYTHONPATH=. python3 bench/optimizer_gpu.py OUT_DIR
"""
import datetime
import json
import os
import sys

import torch
import triton

from cherenkov.bench.suites import train
from cherenkov.bench.timing import copy_bandwidth, events_median_ms


def _cherenkov(combine: bool):
    def build(opt):
        import cherenkov
        return cherenkov.compile(opt.step, strict=True, dynamic=False, combine_updates=combine)
    return build


IMPLS = {   # name -> (AdamW keywords, how its step is built)
    "torch fused": (dict(fused=True), lambda opt: opt.step),
    "torch foreach": (dict(foreach=True), lambda opt: opt.step),
    "torch.compile foreach": (dict(foreach=True), lambda opt: torch.compile(opt.step)),
    "cherenkov": (dict(foreach=True), _cherenkov(True)),
    "cherenkov per-parameter": (dict(foreach=True), _cherenkov(False)),
}


def params_of(case) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = train.build_model(case.model, "cuda")
    return [p.detach() for p in model.parameters()]


def run(name: str, start: list, grads: list, reference: list | None):
    kwargs, build = IMPLS[name]
    params = [torch.nn.Parameter(p.clone()) for p in start]
    for p, g in zip(params, grads):
        p.grad = g
    opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, **kwargs)
    step = build(opt)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    err = None if reference is None else max(
        ((p - q).abs().max() / q.abs().max().clamp(min=1e-12)).item()
        for p, q in zip(params, reference))
    state = [p.detach().clone() for p in params] if reference is None else None
    ahead = events_median_ms(lambda i: step(), reps=20, before="busy")
    idle = events_median_ms(lambda i: step(), reps=20, before="sync")
    del opt, step, params
    torch._dynamo.reset()
    return err, ahead, idle, state


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    dev = torch.device("cuda")
    copy = copy_bandwidth(dev, 1 << 30)
    rows = []
    for case in train.cases("full"):
        start = params_of(case)
        n = sum(p.numel() for p in start)
        torch.manual_seed(1)
        grads = [torch.randn_like(p) * 1e-2 for p in start]
        reference = None
        for name in IMPLS:
            try:
                err, ahead, idle, state = run(name, start, grads, reference)
            except Exception as e:  # noqa: BLE001 -- a failing variant is reported
                rows.append({"config": case.name, "impl": name,
                             "error": f"{type(e).__name__}: {str(e)[:120]}"})
                print(rows[-1], flush=True)
                continue
            if reference is None:
                reference = state
            rows.append({"config": case.name, "impl": name, "params": n,
                         "tensors": len(start), "max_rel_err_vs_fused": err,
                         "ms_host_ahead": ahead, "ms_from_idle": idle,
                         "GBps_host_ahead": 28 * n / ahead / 1e6,
                         "fraction_of_copy": 28 * n / (ahead * 1e-3) / copy})
            print(rows[-1], flush=True)
        del start, grads, reference
        torch.cuda.empty_cache()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit, "copy_GBps": copy / 1e9}
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"{datetime.date.today()}_optimizer_{commit}")
    with open(stem + ".json", "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
    lines = [f"# AdamW step over the train suite's parameters on {meta['gpu']}", "",
             f"{meta['date']} · torch {meta['torch']} · triton {meta['triton']} · commit "
             f"{commit} · copy {copy / 1e9:.0f} GB/s", "",
             "| config | impl | params | tensors | ms (host ahead) | ms (from idle) | GB/s | "
             "of copy | max rel err vs fused |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['impl']} | error: {r['error']} |||||||")
            continue
        err = "-" if r["max_rel_err_vs_fused"] is None else f"{r['max_rel_err_vs_fused']:.1e}"
        lines.append(f"| {r['config']} | {r['impl']} | {r['params'] / 1e6:.1f}M | "
                     f"{r['tensors']} | {r['ms_host_ahead']:.3f} | {r['ms_from_idle']:.3f} | "
                     f"{r['GBps_host_ahead']:.0f} | {100 * r['fraction_of_copy']:.0f}% | "
                     f"{err} |")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

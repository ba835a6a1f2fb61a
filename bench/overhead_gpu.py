"""Per-call overhead on the GPU: tiny work, so wall time per call is the host's cost.

Times eager, torch.compile (default and mode="reduce-overhead") and Cherenkov with CUDA graphs
"auto" (the default: the cost model decides per plan), "off" and "on", on a small MLP,
inference and a training step; checks every variant against eager on fresh inputs and lists
the CUDA-graph decision of each Cherenkov plan. Writes markdown + JSON to argv[1].
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton

import cherenkov
from cherenkov.bench.report import commit


class MLP(torch.nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x)), approximate="tanh"))


def per_call_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - start) / n


BACKENDS = ("eager", "torch.compile", "torch.compile reduce-overhead", "cherenkov",
            "cherenkov cuda_graphs=off", "cherenkov cuda_graphs=on")


def _variant(name, m):
    if name == "eager":
        return m
    if name.startswith("torch.compile"):
        return torch.compile(m, mode="reduce-overhead" if "reduce" in name else None)
    mode = name.partition("cuda_graphs=")[2] or "auto"
    return cherenkov.compile(m, strict=True, cuda_graphs=mode)


def main(out):
    torch.manual_seed(0)
    rows = []
    # a launch-bound case (auto should graph it) and a GPU-bound one (auto should not)
    for d, batch in ((256, 8), (2048, 2048)):
        torch._dynamo.reset()
        x = torch.randn(batch, d, device="cuda")
        base = MLP(d).cuda()
        variants = {name: _variant(name, base) for name in BACKENDS}
        # correctness of every variant on fresh inputs over enough calls that the graphed
        # ones replay (auto times call 3, captures on call 4)
        errs = {}
        with torch.no_grad():
            for name, m in variants.items():
                worst = 0.0
                for _ in range(8):
                    xi = torch.randn(batch, d, device="cuda")
                    worst = max(worst, (m(xi) - base(xi)).abs().max().item())
                errs[name] = worst
            for name, m in variants.items():
                rows.append({"case": f"MLP d={d} batch {batch}, inference", "backend": name,
                             "us_per_call": per_call_us(lambda: m(x)),
                             "max_abs_err": errs[name]})
    x = torch.randn(8, 256, device="cuda")
    for name in BACKENDS:
        torch._dynamo.reset()       # each variant compiles afresh (Dynamo's recompile limit)
        torch.manual_seed(0)
        m = MLP().cuda()
        step_model = _variant(name, m)
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)

        mark = ("reduce-overhead" in name and torch.compiler.cudagraph_mark_step_begin
                or (lambda: None))

        def step():
            mark()          # torch's CUDA graphs: a new step may overwrite the last one's outputs
            out = step_model(x)
            if "reduce-overhead" in name:     # its graph's output, saved for square's backward,
                out = out.clone()             # is overwritten by the backward graph otherwise
            loss = out.square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            return loss
        try:
            losses = [step().item() for _ in range(8)]
            rows.append({"case": "MLP d=256 batch 8, training step", "backend": name,
                         "us_per_call": per_call_us(step, 200), "losses": losses})
        except Exception as e:  # noqa: BLE001 -- recorded, the other rows still count
            rows.append({"case": "MLP d=256 batch 8, training step", "backend": name,
                         "us_per_call": float("nan"), "losses": [],
                         "error": f"{type(e).__name__}: {e}"[:160]})
    from cherenkov.backend import COMPILED
    decisions = [(info.name, str(info.cuda_graphs)) for _, info in COMPILED]
    meta = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__,
            "commit": commit()}
    os.makedirs(out, exist_ok=True)
    json.dump({"meta": meta, "rows": rows, "cuda_graph_decisions": decisions}, open(os.path.join(out, "overhead.json"), "w"), indent=2)
    lines = [f"# Per-call overhead on {meta['gpu']} -- {meta['date']}, torch {meta['torch']}, "
             f"triton {meta['triton']}, commit {meta['commit']}", "",
             "| case | backend | us per call | check |", "|---|---|---|---|"]
    for r in rows:
        check = (f"max abs err {r['max_abs_err']:.2e}" if "max_abs_err" in r
                 else r["error"] if "error" in r
                 else "losses " + " ".join(f"{v:.4f}" for v in r["losses"]))
        lines.append(f"| {r['case']} | {r['backend']} | {r['us_per_call']:.1f} | {check} |")
    lines += ["", "CUDA-graph decisions of the Cherenkov plans (in compile order: auto, off, on "
              "for each inference case, then the same for the training step's forward and "
              "backward):", ""]
    lines += [f"- {name}: {why}" for name, why in decisions]
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "overhead.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/out")

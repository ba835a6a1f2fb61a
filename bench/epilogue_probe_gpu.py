"""Probe the matmul epilogue templates on one GPT-2 MLP block (B=16, T=1024, d=768, 3072,
bf16 autocast, forward and backward): every region the pass finds, its template source
(written to --out), and each candidate's time against cuBLAS + the epilogue kernel.

    PYTHONPATH=. python3 bench/epilogue_probe_gpu.py --out $OUT
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch

import cherenkov
from cherenkov.templates import epilogue_tuning
from cherenkov.templates.fused_epilogue import render


class Block(torch.nn.Module):
    def __init__(self, d=768, f=3072):
        super().__init__()
        self.fc, self.proj = torch.nn.Linear(d, f), torch.nn.Linear(f, d)

    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(x), approximate="tanh"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="bench/results")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    found = []
    real_choose = epilogue_tuning.choose

    def record(ep, config, spec, device):
        found.append((ep, spec, device))
        return None
    epilogue_tuning.choose = record
    model = Block().cuda()
    x = torch.randn(16, 1024, 768, device="cuda", requires_grad=True)
    compiled = cherenkov.compile(model, strict=True, dynamic=False)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = compiled(x)
    y.float().square().mean().backward()
    epilogue_tuning.choose = real_choose
    rows = []
    for i, (ep, spec, device) in enumerate(found):
        from cherenkov.templates.tile_config import TileConfig
        src = render(ep, TileConfig(128, 128, 64, 8, 8, 3), False, "k")
        (out / f"epilogue_probe_{i}.py").write_text(src)
        best, timings = epilogue_tuning.tune(ep, spec, device)
        row = {"i": i, "MxKxN": f"{ep.M}x{ep.K}x{ep.N}", "a": [ep.a.shape, ep.a.strides],
               "b": [ep.b.shape, ep.b.strides], "bias": ep.bias is not None,
               "leaves": [(n.op.name, n.meta.shape, n.meta.strides, str(n.meta.dtype))
                          for n in ep.leaves],
               "stored": [(n.op.name, n.meta.shape, n.meta.strides, str(n.meta.dtype))
                          for n in ep.stored],
               "best": str(best), "timings_ms": timings}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "epilogue_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.exit(main())

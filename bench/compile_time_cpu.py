"""Compile-time of Cherenkov's passes on the GPT-2 (124M-style, 12 layers) training graphs,
on the CPU: capture forward and backward once, then time lowering, CSE + split reductions,
fusion and Triton rendering for the H200 preset (no GPU needed; Triton's own compilation of
the rendered kernels is not included). Writes markdown + JSON to argv[1].

    .venv/bin/python bench/compile_time_cpu.py bench/results [llama]

`llama` takes the train suite's Llama-style model (16 layers, d=2048) instead, under bf16
autocast as the train suite runs it.
"""
from __future__ import annotations

import datetime
import gc
import json
import os
import sys
import time

import torch

import cherenkov
import cherenkov.backend as backend
from cherenkov import hw
from cherenkov.codegen.blocks import choose_blocks
from cherenkov.codegen.triton_renderer import render_triton
from cherenkov.lowering.from_fx import lower_fx
from cherenkov.models import ModelConfig, build_model
from cherenkov.passes.cse import eliminate_common_subexpressions
from cherenkov.passes.fusion import fuse
from cherenkov.passes.split_reductions import split_reductions
from cherenkov.bench.report import commit as current_commit

graphs = []


class Recorder:
    """Stands in for the backend's per-graph compiler: records the graph, runs it in eager."""

    def __init__(self, gm, config, name):
        self.gm, self.name = gm, name

    def compile_ahead(self, example_inputs) -> bool:
        return False            # recorded at the first call, with real inputs

    def __call__(self, inputs):
        # a backward is given None for an unused output's gradient: zeros of its recorded
        # shape stand in, to lower and run the graph with
        holders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        inputs = [torch.zeros(h.meta["val"].shape, dtype=h.meta["val"].dtype)
                  if i is None and "val" in h.meta else i for i, h in zip(inputs, holders)]
        graphs.append((self.name, self.gm, inputs))
        return self.gm(*inputs)


def main(out: str, family: str = "gpt") -> None:
    backend.ShapeSpecialized = Recorder
    if family == "llama":
        cfg = ModelConfig("llama", layers=16, hidden=2048, heads=16, ffn=5632, vocab=32000,
                          seq=128, name="l")
    else:
        cfg = ModelConfig("gpt", layers=12, hidden=768, heads=12, vocab=50304, seq=128,
                          name="g")
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab, (1, cfg.seq))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=family == "llama"):
        _, loss = cherenkov.compile(model)(idx, idx)
    loss.backward()
    spec = hw.device("h200")
    rows = []
    for name, gm, inputs in graphs:
        gc.collect()            # the eager run's garbage: a collection inside a phase skews it
        t0 = time.perf_counter()
        graph, _ = lower_fx(gm, inputs)
        t1 = time.perf_counter()
        graph = split_reductions(eliminate_common_subexpressions(graph), spec.sm_count)
        t2 = time.perf_counter()
        fusion = fuse(graph, device=spec)
        t3 = time.perf_counter()
        for group in fusion.groups:
            render_triton(group.kernel, choose_blocks(group.kernel, False, spec))
        t4 = time.perf_counter()
        rows.append({"graph": name, "ir_nodes": len(graph.nodes()), "kernels": len(fusion.groups),
                     "lower_s": t1 - t0, "cse_split_s": t2 - t1, "fuse_s": t3 - t2,
                     "render_s": t4 - t3})
    commit = current_commit()
    meta = {"date": datetime.date.today().isoformat(), "torch": torch.__version__,
            "commit": commit, "machine": f"CPU, {os.cpu_count()} cores"}
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"{meta['date']}_compile_time_cpu" + ("_llama" if family == "llama" else ""))
    json.dump({"meta": meta, "rows": rows}, open(stem + ".json", "w"), indent=2)
    model_name = "Llama-style 16-layer" if family == "llama" else "GPT-2 124M-style"
    lines = [f"# Compile time of Cherenkov's passes, {model_name} graphs (H200 preset), "
             f"{meta['date']}, torch {meta['torch']}, commit {commit}, {meta['machine']}", "",
             "| graph | IR nodes | kernels | lower s | cse+split s | fuse s | render s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['ir_nodes']} | {r['kernels']} | {r['lower_s']:.2f} | "
                     f"{r['cse_split_s']:.2f} | {r['fuse_s']:.2f} | {r['render_s']:.2f} |")
    text = "\n".join(lines) + "\n"
    open(stem + ".md", "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results",
         sys.argv[2] if len(sys.argv) > 2 else "gpt")

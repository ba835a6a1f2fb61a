"""The joint graph's CSE on the CPU: torch's fx_graph_cse vs passes/joint_cse.py on the train
suite's GPT-2 (12 layers) and Llama (16 layers) joint graphs, as the partitioner gets them
(short sequences: the graph per layer is the full model's). Checks the two leave the same
graph, node for node, and times each (ours without Inductor's pattern matcher imported: it is
imported by torch's, so torch's runs first and ours is timed without that import; the import
alone is timed in a fresh interpreter).

    .venv/bin/python bench/joint_cse_cpu.py OUT_DIR        # OUT_DIR/joint_cse_cpu.md / .json
"""
from __future__ import annotations

import copy
import subprocess
import sys
import time

import torch

import cherenkov
from cherenkov.bench.report import save_pair, script_meta
from cherenkov.models import ModelConfig, build_model
from cherenkov.passes import joint_cse, partition

CASES = {"gpt2 12 layers": ModelConfig("gpt", layers=12, hidden=768, heads=12, vocab=50304,
                                       seq=64, name="g"),
         "llama 16 layers": ModelConfig("llama", layers=16, hidden=2048, heads=16, ffn=5632,
                                        vocab=32000, seq=32, name="l")}


def measure(cfg) -> dict:
    from torch._functorch.compile_utils import fx_graph_cse
    found = {}
    ours = joint_cse.eliminate_joint_duplicates

    def both(graph):
        t0 = time.perf_counter()
        ref = fx_graph_cse(copy.deepcopy(graph))
        t1 = time.perf_counter()
        removed = ours(graph)
        t2 = time.perf_counter()
        d = lambda g: [(x.name, x.op, str(x.target), str(x.args), str(x.kwargs))  # noqa: E731
                       for x in g.nodes]
        found.update(nodes=len(d(ref)) + removed, removed=removed, same=d(graph) == d(ref),
                     torch_s=t1 - t0, ours_s=t2 - t1)
        return removed
    partition.eliminate_joint_duplicates = both
    try:
        torch.manual_seed(0)
        model = build_model(cfg, "cpu").train()
        fn = cherenkov.compile(model, strict=True, dynamic=False)
        idx = torch.randint(0, cfg.vocab, (1, cfg.seq))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fn(idx, idx)
    finally:
        partition.eliminate_joint_duplicates = ours
    return found


def main(out_dir: str) -> None:
    code = ("import time, torch; t = time.perf_counter(); "
            "import torch._inductor.pattern_matcher; print(time.perf_counter() - t)")
    import_s = float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, check=True).stdout.split()[-1])
    rows = {name: measure(cfg) for name, cfg in CASES.items()}
    meta = script_meta()
    lines = ["# The joint graph's CSE: torch's fx_graph_cse vs passes/joint_cse.py (CPU)", "",
             " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "| joint graph | nodes | duplicates dropped | same graph | torch s | ours s |",
             "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['nodes']} | {r['removed']} | {r['same']} | "
                     f"{r['torch_s']:.3f} | {r['ours_s']:.3f} |")
    lines += ["", f"Importing torch._inductor.pattern_matcher (torch's pass does; ours does "
              f"not): {import_s:.2f} s in a fresh interpreter."]
    save_pair(out_dir, "joint_cse_cpu", "\n".join(lines) + "\n",
              dict(meta=meta, rows=rows, pattern_matcher_import_s=import_s))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

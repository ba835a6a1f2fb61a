"""Where a block mask's build time goes: the 32k x 32k causal document mask of
`bench/attention_gpu.py` (8 documents), built whole and by part (tile states; the index lists),
each the best of 3 interleaved do_bench medians; and checked against the pure-torch builder.

    CHERENKOV_COMMIT=<sha> python bench/block_mask_gpu.py OUT_DIR
"""
from __future__ import annotations

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
import importlib  # noqa: E402
bmod = importlib.import_module("cherenkov.attention.block_mask")
from cherenkov.bench.report import commit  # noqa: E402


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    S, block = 32768, (128, 64)
    g = torch.Generator().manual_seed(0)
    cuts = torch.sort(torch.randperm(S - 1, generator=g)[:7] + 1).values
    offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([S])]).to("cuda")
    mod = ca.document(offsets=offsets, causal=True)
    built = ca.block_mask(mod, 1, 1, S, S, block=block, device="cuda")
    ref = ca.block_mask(mod, 1, 1, S, S, block=block, device="cuda", use_kernel=False)
    state = built.state
    parts = {
        "whole build": lambda: ca.block_mask(mod, 1, 1, S, S, block=block, device="cuda"),
        "tile states (_state_triton)": lambda: bmod._state_triton(mod, 1, 1, S, S, block, "cuda"),
        "index lists (BlockMask.from_state)": lambda: bmod.BlockMask.from_state(
            state, block, (1, 1, S, S), mod),
    }
    times = {name: [] for name in parts}
    for _ in range(3):
        for name, fn in parts.items():
            times[name].append(do_bench(fn, warmup=25, rep=200))
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit(),
            "state_equal_to_torch_builder": bool(torch.equal(built.state, ref.state)),
            "sparsity": built.sparsity()}
    rows = {name: min(v) for name, v in times.items()}
    lines = [f"# Block mask build on {meta['gpu']} ({meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}; causal "
             f"document mask, 8 documents, 1 x 1 x {S} x {S}, tiles {block}; state equal to the "
             f"torch builder's: {meta['state_equal_to_torch_builder']}; sparsity "
             f"{meta['sparsity']:.3f}.", "", "| part | ms (best of 3) | all rounds |", "|---|---|---|"]
    lines += [f"| {n} | {rows[n]:.3f} | {', '.join(f'{t:.3f}' for t in times[n])} |" for n in rows]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "block_mask.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "block_mask.json"), "w") as f:
        json.dump({"meta": meta, "times": times}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

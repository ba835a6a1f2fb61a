"""The attention kernels' sm_90 SASS (compiled on the CPU, bench/attention_sass_cpu.py) on 4 and
8 warps: instructions, spill loads / stores, the spills
inside the tile loops (blocks with tensor-core instructions), and each loop block's order of
tensor-core (HGMMA) and exponential (MUFU) instructions -- whether the scores matmul runs
while the softmax's exponentials are issued, or waits before them.

    env -u TRITON_INTERPRET .venv/bin/python bench/attention_sass_variants_cpu.py OUT_DIR

Writes OUT_DIR/attention_sass_variants_cpu.md (the configurations are the suite's at B=4
H=16 S=4096 D=128 bf16; the Triton that compiles is this machine's).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton  # noqa: E402

from attention_sass_cpu import blocks, sass_of  # noqa: E402
from cherenkov.bench.report import md_table, save_pair, script_meta  # noqa: E402

CONFIGS = [(kernel, mod, warps, False)
           for kernel, mods in (("fwd", ("causal", "alibi")), ("dq", ("causal", "alibi")),
                                ("dkdv", ("causal",)))
           for mod in mods for warps in (4, 8)] + [("dkdv", "alibi", 4, True)]


def order(ops: list[str]) -> str:
    """HGMMA / MUFU runs of a block, in order: `HGMMA 8, MUFU 32, ...`."""
    runs: list[list] = []
    for op in ops:
        if op in ("HGMMA", "MUFU"):
            if runs and runs[-1][0] == op:
                runs[-1][1] += 1
            else:
                runs.append([op, 1])
    return ", ".join(f"{op} {n}" for op, n in runs)


def main(out_dir: str) -> None:
    rows, data = [], []
    for kernel, mod, warps, ds_store in CONFIGS:
        by_block = blocks(sass_of(kernel, mod, warps, None, ds_store))
        every = [op for ops in by_block.values() for op in ops]
        loops = {name: ops for name, ops in by_block.items() if "HGMMA" in ops}
        loop_ldl = sum(ops.count("LDL") for ops in loops.values())
        seq = " / ".join(order(ops) for ops in loops.values())
        label = f"{kernel} {mod}" + (" stored dS" if ds_store else "")
        rows.append([label, warps, len(every), every.count("LDL"), every.count("STL"),
                     loop_ldl, seq])
        data.append(dict(kernel=kernel, mod=mod, warps=warps,
                         ds_store=ds_store, instructions=len(every), ldl=every.count("LDL"),
                         stl=every.count("STL"), loop_ldl=loop_ldl, loop_order=seq))
        print(rows[-1], flush=True)
    meta = script_meta() | {"triton": triton.__version__}
    text = "\n".join([
        "# Attention kernels' sm_90 SASS on 4 and 8 warps, compiled on the CPU", "",
        f"{meta['date']}, Triton {meta['triton']} (its sm_90 passes and ptxas on the CPU; the "
        f"H200 machine has Triton 3.6), commit {meta['commit']}. The suite's configurations at "
        "D=128: forward 128 x 64 tiles with descriptors, dQ and dK/dV 64 x 64. loop LDL: spill "
        "loads inside the blocks with tensor-core instructions; order: per such block, its "
        "runs of HGMMA and MUFU (exp2) instructions.", "",
        *md_table(["kernel", "warps", "instructions", "LDL", "STL", "loop LDL",
                   "order (HGMMA / MUFU runs per loop block)"], rows)]) + "\n"
    save_pair(out_dir, "attention_sass_variants_cpu", text, {"meta": meta, "rows": data})
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

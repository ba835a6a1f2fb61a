"""Where one case of a kernel suite spends its GPU time under Cherenkov: the case (by name,
from bench/<suite>_gpu.py's `cases`) compiled, run 10 times under torch.profiler
(attention_bwd_tiles_gpu.kernel_table), its 8 slowest kernels printed; the generated
sources, in launch order, written to OUT_DIR/kernel_sources.py.

    PYTHONPATH=. python3 bench/kernel_times_gpu.py pooling "max_pool2d channels-last" OUT_DIR

WITH_INDUCTOR=1 profiles torch.compile's kernels of the case too (Cherenkov's sources only).
"""
import importlib
import os
import sys

import torch

import cherenkov
from cherenkov import backend

sys.path.insert(0, os.path.dirname(__file__))
from attention_bwd_tiles_gpu import kernel_table  # noqa: E402
from compare_gpu import caller  # noqa: E402


def main(suite: str, wanted: str, out_dir: str) -> None:
    cases = importlib.import_module(f"{suite}_gpu").cases(torch.device("cuda"))
    name, fn, args, backward, _ = next(c for c in cases if c[0] == wanted)
    dy = torch.randn_like(fn(*args)) if backward else None
    start = len(backend.COMPILED)
    impls = {"cherenkov": cherenkov.compile(fn)}
    if os.environ.get("WITH_INDUCTOR") == "1":      # torch.compile's kernels beside ours
        impls["torch.compile"] = torch.compile(fn)
    for impl, compiled in impls.items():
        table = kernel_table(caller(compiled, args, backward, dy))
        print(f"{name} ({impl}): {sum(table.values()) * 1e3:.1f} us per call in its 8 "
              "slowest kernels")
        print("| kernel | us per call |\n|---|---|")
        for k, ms in table.items():
            print(f"| {k} | {ms * 1e3:.1f} |")
    with open(os.path.join(out_dir, "kernel_sources.py"), "w") as f:
        for _, info in backend.COMPILED[start:]:
            for kname, fused, nbytes, src in info.kernels:
                f.write(f"# ---- {info.name} {kname}: {fused} ops, {nbytes / 1e6:.1f} MB\n{src}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ".")

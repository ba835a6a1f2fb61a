"""Where one case of a kernel suite spends its GPU time under Cherenkov: the case (by name,
from bench/<suite>_gpu.py's `cases`) compiled, run 10 times under torch.profiler, and a table
of its kernels (time per call of the case, launches per call) printed; the generated
sources, in launch order, written to OUT_DIR/kernel_sources.py.

    PYTHONPATH=. python3 bench/kernel_times_gpu.py pooling "max_pool2d channels-last" OUT_DIR
"""
import importlib
import os
import sys
from collections import defaultdict

import torch

import cherenkov
from cherenkov import backend

sys.path.insert(0, os.path.dirname(__file__))
from compare_gpu import caller  # noqa: E402

CALLS = 10


def main(suite: str, wanted: str, out_dir: str) -> None:
    cases = importlib.import_module(f"{suite}_gpu").cases(torch.device("cuda"))
    name, fn, args, backward, _ = next(c for c in cases if c[0] == wanted)
    dy = torch.randn_like(fn(*args)) if backward else None
    start = len(backend.COMPILED)
    call = caller(cherenkov.compile(fn), args, backward, dy)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    total, count = defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name] += e.device_time_total / CALLS
            count[e.name] += 1
    whole = sum(total.values())
    print(f"{name}: {whole:.1f} us of kernels per call")
    print("| kernel | us per call | launches per call |\n|---|---|---|")
    for k in sorted(total, key=total.get, reverse=True):
        print(f"| {k[:90]} | {total[k]:.1f} | {count[k] / CALLS:g} |")
    with open(os.path.join(out_dir, "kernel_sources.py"), "w") as f:
        for _, info in backend.COMPILED[start:]:
            for kname, fused, nbytes, src in info.kernels:
                f.write(f"# ---- {info.name} {kname}: {fused} ops, {nbytes / 1e6:.1f} MB\n{src}\n")

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ".")

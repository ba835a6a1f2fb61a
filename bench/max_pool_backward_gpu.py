"""The max pool backward, scattered vs gathered (lowering/pooling.MAX_POOL_BACKWARD), on the
pooling suite's max pool cases: per variant and case, the forward+backward's GPU time in its
kernels (torch.profiler, 10 calls; the suite's wall times of these cases are host-bound) and
the input gradient's largest error against fp64 eager, relative to its largest magnitude.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/max_pool_backward_gpu.py OUT_DIR

Writes OUT_DIR/max_pool_backward.md.
"""
import os
import sys

import torch

import cherenkov
from cherenkov.bench.report import md_table, script_meta
from cherenkov.lowering import pooling

sys.path.insert(0, os.path.dirname(__file__))
from attention_bwd_tiles_gpu import kernel_table  # noqa: E402
from compare_gpu import caller, reference  # noqa: E402
from pooling_gpu import cases  # noqa: E402

WANTED = ("max_pool2d 3x3 s2 p1 64x64x112x112 fwd+bwd", "max_pool2d channels-last fwd+bwd",
          "BN(train) + ReLU + max_pool2d 64x64x112x112 fwd+bwd",
          "BN(train) + ReLU + max_pool2d channels-last fwd+bwd")


def main(out_dir: str) -> None:
    rows = []
    chosen = [c for c in cases(torch.device("cuda")) if c[0] in WANTED]
    for variant in ("gather", "scatter"):
        pooling.MAX_POOL_BACKWARD = variant
        for name, fn, args, backward, _ in chosen:
            torch._dynamo.reset()
            dy = torch.randn_like(fn(*args))
            call = caller(cherenkov.compile(fn), args, backward, dy)
            want = reference(fn, args, backward, dy)
            err = ((call().double() - want).abs().max() / want.abs().max()).item()
            table = kernel_table(call)
            top = ", ".join(f"{k[:18]} {v * 1e3:.1f}" for k, v in list(table.items())[:3])
            rows.append([variant, name, f"{sum(table.values()) * 1e3:.1f}", f"{err:.2e}", top])
            print(rows[-1], flush=True)
    meta = ", ".join(f"{k} {v}" for k, v in script_meta().items())
    text = [f"# Max pool backward: scattered vs gathered\n\n{meta}\n",
            *md_table(["variant", "case", "kernel us per call (8 slowest)",
                       "max rel err vs fp64", "largest kernels (us)"], rows)]
    with open(os.path.join(out_dir, "max_pool_backward.md"), "w") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

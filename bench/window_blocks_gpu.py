"""Block configurations swept on the GPU for two kinds of kernel, each case compiled by
Cherenkov once per candidate, checked against fp64 as bench/compare_gpu.py checks, and timed
beside eager and torch.compile in one process:

- window kernels (pooling: a reduction over a few taps -- 9 for a 3x3 window -- of many
  outputs; 1 < R <= 64, X >= 65536) on bench/pooling_gpu.py's cases:
    tile XxR wN    one (XBLOCK, RBLOCK) tile over the taps, N warps
    taps X wN      XBLOCK outputs per program, a loop over the taps one at a time (RBLOCK 1,
                   unrolled): no padding of R to a power of two
- scans on bench/scan_gpu.py's row cases (position ids: 256 rows of 8192 int64):
    scan rR wN     one row per program in chunks of R (a carry between them), N warps
"default" is blocks.choose_blocks as it stands.

    PYTHONPATH=. python3 bench/window_blocks_gpu.py OUT_DIR
"""
import os
import sys

import torch

import cherenkov
import cherenkov.compiler as compiler
from cherenkov.bench.timing import copy_bandwidth, cuda_median_s
from cherenkov.codegen.triton_renderer import BlockConfig

sys.path.insert(0, os.path.dirname(__file__))
from compare_gpu import HEADER, caller, reference, rows_of, write  # noqa: E402
from pooling_gpu import cases as pooling_cases  # noqa: E402
from scan_gpu import cases as scan_cases  # noqa: E402

DEFAULT = compiler.choose_blocks


def is_window(k) -> bool:
    return (1 < k.R <= 64 and k.X >= 1 << 16 and not k.row_loop
            and not getattr(k, "is_scan", False) and not getattr(k, "halves", False))


def variant(make, wanted=is_window):
    def choose(k, interpret, device=None):
        if not interpret and wanted(k):
            return make(k)
        return DEFAULT(k, interpret, device)
    return choose


def scan(rblock, warps):
    return variant(lambda k: BlockConfig(1, rblock, rblock >= k.R, warps),
                   lambda k: getattr(k, "is_scan", False))


WINDOW_VARIANTS = {
    "default": DEFAULT,
    "tile 128x16 w4": variant(lambda k: BlockConfig(128, 16, True, 4)),
    "tile 256x16 w8": variant(lambda k: BlockConfig(256, 16, True, 8)),
    "taps 512 w4": variant(lambda k: BlockConfig(512, 1, False, 4, unroll=k.R)),
    "taps 1024 w4": variant(lambda k: BlockConfig(1024, 1, False, 4, unroll=k.R)),
    "taps 1024 w8": variant(lambda k: BlockConfig(1024, 1, False, 8, unroll=k.R)),
}
SCAN_VARIANTS = {"default": DEFAULT, "scan r2048 w4": scan(2048, 4), "scan r2048 w8": scan(2048, 8),
                 "scan r4096 w8": scan(4096, 8), "scan r8192 w8": scan(8192, 8),
                 "scan r8192 w16": scan(8192, 16)}


def main(out_dir: str) -> None:
    dev = torch.device("cuda")
    copy_bw = copy_bandwidth(dev, 1 << 30)
    rows = []
    lines = [f"copy {copy_bw / 1e9:.0f} GB/s", "", *HEADER]
    groups = [(c, WINDOW_VARIANTS) for c in pooling_cases(dev)]
    groups += [(c, SCAN_VARIANTS) for c in scan_cases(dev) if "rows 32768" in c[0]
               or "position" in c[0]]
    for (name, fn, args, backward, nbytes), variants in groups:
        dy = torch.randn_like(fn(*args)) if backward else None
        ref = reference(fn, args, backward, dy)
        scale = ref.abs().max().item()
        times, errs = {}, {}
        impls = [("eager", lambda: fn), ("torch.compile", lambda: torch.compile(fn))]
        impls += [(v, lambda: cherenkov.compile(fn)) for v in variants]
        for impl, make in impls:
            compiler.choose_blocks = variants.get(impl, DEFAULT)
            torch._dynamo.reset()
            try:
                call = caller(make(), args, backward, dy)
                errs[impl] = (call().double() - ref.double()).abs().max().item()
                times[impl] = cuda_median_s(call)
            except Exception as e:  # noqa: BLE001 -- a variant that fails is a row, not the end
                print(f"{name} {impl}: {type(e).__name__}: {e}", flush=True)
            finally:
                compiler.choose_blocks = DEFAULT
        case_rows, case_lines = rows_of(name, times, errs, scale, nbytes, copy_bw)
        rows += case_rows
        lines += case_lines
        print("\n".join(case_lines), flush=True)
        torch.cuda.empty_cache()
    write(out_dir, "window_blocks_gpu", lines, rows)

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

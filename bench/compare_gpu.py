"""Eager vs torch.compile vs Cherenkov on a list of small cases, one process, one table
(the shared part of bench/scan_gpu.py and bench/pooling_gpu.py).

A case is (name, fn, args, backward, nbytes): fn(*args) timed as it is, or with backward its
forward and the gradient of args[0] for a random dy. Each result is checked against fp64 (the
forward's output, or the gradient through fn on fp64 inputs): an implementation passes when
its max error is at most 2x eager's plus 1e-6 of the result's scale. Times are CUDA-event
medians; `% copy` puts nbytes (the minimum any implementation moves) against the device's
copy rate. Writes <stem>.md and <stem>.json to the output folder.
"""
import json
import os

import torch

import cherenkov
from cherenkov.bench.timing import copy_bandwidth, cuda_median_s


def _fp64(a):
    return a.double() if a.is_floating_point() else a


def reference(fn, args, backward, dy):
    """fn on fp64 inputs: its output, or the gradient of args[0] through it."""
    if not backward:
        return fn(*map(_fp64, args))
    x = _fp64(args[0]).detach().requires_grad_(True)
    return torch.autograd.grad(fn(x, *map(_fp64, args[1:])), x, dy.double())[0]


def caller(f, args, backward, dy):
    if not backward:
        return lambda: f(*args)
    x = args[0].detach().requires_grad_(True)
    return lambda: torch.autograd.grad(f(x, *args[1:]), x, dy)[0]


HEADER = ["| case | impl | ok | us | % copy | vs eager | vs torch.compile |",
          "|---|---|---|---|---|---|---|"]


def rows_of(name, times, errs, scale, nbytes, copy_bw):
    """(rows, table lines) of one case's implementations: each ok when its max error is at
    most 2x eager's plus 1e-6 of the result's scale; times against eager's and
    torch.compile's."""
    rows, lines = [], []
    for impl in times:
        ok = errs[impl] <= 2 * errs["eager"] + 1e-6 * scale
        row = dict(case=name, impl=impl, ok=ok, us=times[impl] * 1e6, err=errs[impl],
                   pct_copy=100 * nbytes / times[impl] / copy_bw,
                   vs_eager=times["eager"] / times[impl],
                   vs_compile=times["torch.compile"] / times[impl])
        rows.append(row)
        lines.append(f"| {name} | {impl} | {ok} | {row['us']:.1f} | {row['pct_copy']:.1f} "
                     f"| {row['vs_eager']:.2f}x | {row['vs_compile']:.2f}x |")
    return rows, lines


def write(out_dir: str, stem: str, lines: list, rows: list) -> None:
    """The table (headed by the GPU, versions and commit) to <stem>.md and .json."""
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=__import__("triton").__version__,
                commit=os.environ.get("CHERENKOV_COMMIT", "unknown"))
    lines = [" ".join(f"{k}={v}" for k, v in meta.items())] + lines
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


def run(cases, out_dir: str, stem: str) -> list[dict]:
    dev = torch.device("cuda")
    copy_bw = copy_bandwidth(dev, 1 << 30)
    rows, lines = [], [f"copy {copy_bw / 1e9:.0f} GB/s", "", *HEADER]
    for name, fn, args, backward, nbytes in cases:
        dy = torch.randn_like(fn(*args)) if backward else None
        ref = reference(fn, args, backward, dy)
        scale = ref.abs().max().item() if ref.is_floating_point() else 0.0
        impls = {"eager": fn, "torch.compile": torch.compile(fn),
                 "cherenkov": cherenkov.compile(fn)}
        times, errs = {}, {}
        for impl, f in impls.items():
            call = caller(f, args, backward, dy)
            errs[impl] = (call().double() - ref.double()).abs().max().item()
            times[impl] = cuda_median_s(call)
        case_rows, case_lines = rows_of(name, times, errs, scale, nbytes, copy_bw)
        rows += case_rows
        lines += case_lines
        del impls
        torch.cuda.empty_cache()
    write(out_dir, stem, lines, rows)
    return rows

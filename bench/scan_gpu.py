"""cumsum on the GPU: eager vs torch.compile vs Cherenkov's scan kernels, one process.

Cases (bf16 unless named): rows 32768 x 4096 along the last dim, the same forward+backward
(the backward is a flipped cumsum of dy), long rows 64 x 1M (past one tile: chunks with a
carry), columns 4096 x 32768 along dim 0, and int64 position ids from a 0/1 mask. Each
result is checked against an fp64 reference (error at most 2x eager's, plus 1e-6 of the
scale); times are CUDA-event medians, bandwidth against the minimum bytes (read x, write y;
fwd+bwd: also read dy, write dx) and the device's copy rate.

    PYTHONPATH=. python3 bench/scan_gpu.py OUT_DIR     # writes scan_gpu.md / .json there
"""
import json
import os
import sys

import torch

import cherenkov
from cherenkov.bench.timing import copy_bandwidth, cuda_median_s


def cases(dev):
    g = torch.Generator(device=dev).manual_seed(0)
    bf = dict(device=dev, dtype=torch.bfloat16, generator=g)
    rows = torch.randn(32768, 4096, **bf)
    long = torch.randn(64, 1 << 20, **bf)
    cols = torch.randn(4096, 32768, **bf)
    mask = (torch.rand(256, 8192, device=dev, generator=g) > 0.2).long()
    return [
        ("rows 32768x4096 dim -1", lambda x: x.cumsum(-1), (rows,), False),
        ("rows 32768x4096 dim -1 fwd+bwd", lambda x: x.cumsum(-1), (rows,), True),
        ("long rows 64x1M dim -1", lambda x: x.cumsum(-1), (long,), False),
        ("columns 4096x32768 dim 0", lambda x: x.cumsum(0), (cols,), False),
        ("position ids 256x8192 int64", lambda m: m.cumsum(-1) * m - 1, (mask,), False),
    ]


def error(got, x, fn, backward, dy):
    """Max |got - fp64 reference| and the reference's scale. The backward's reference: the
    gradient of a cumsum along the last dim is dy's cumsum from the end."""
    if backward:
        ref = dy.double().flip(-1).cumsum(-1).flip(-1)
    else:
        ref = fn(x.double() if x.is_floating_point() else x)
    return (got.double() - ref.double()).abs().max().item(), ref.double().abs().max().item()


def main(out_dir):
    dev = torch.device("cuda")
    copy_bw = copy_bandwidth(dev, 1 << 30)
    rows, lines = [], [f"copy {copy_bw / 1e9:.0f} GB/s", "",
                       "| case | impl | ok | us | % copy | vs eager | vs torch.compile |",
                       "|---|---|---|---|---|---|---|"]
    for name, fn, args, backward in cases(dev):
        x = args[0]
        nbytes = 2 * x.numel() * x.element_size() * (2 if backward else 1)
        dy = torch.randn_like(x) if backward else None
        impls = {"eager": fn, "torch.compile": torch.compile(fn),
                 "cherenkov": cherenkov.compile(fn)}
        times, errs = {}, {}
        for impl, f in impls.items():
            if backward:
                xg = x.detach().requires_grad_(True)
                call = lambda f=f, xg=xg: torch.autograd.grad(f(xg), xg, dy)[0]  # noqa: E731
            else:
                call = lambda f=f: f(*args)                                       # noqa: E731
            errs[impl], scale = error(call(), x, fn, backward, dy)
            times[impl] = cuda_median_s(call)
        for impl in impls:
            ok = errs[impl] <= 2 * errs["eager"] + 1e-6 * scale
            row = dict(case=name, impl=impl, ok=ok, us=times[impl] * 1e6, err=errs[impl],
                       pct_copy=100 * nbytes / times[impl] / copy_bw,
                       vs_eager=times["eager"] / times[impl],
                       vs_compile=times["torch.compile"] / times[impl])
            rows.append(row)
            lines.append(f"| {name} | {impl} | {ok} | {row['us']:.1f} | {row['pct_copy']:.1f} "
                         f"| {row['vs_eager']:.2f}x | {row['vs_compile']:.2f}x |")
        del impls
        torch.cuda.empty_cache()
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=__import__("triton").__version__,
                commit=os.environ.get("CHERENKOV_COMMIT", "unknown"))
    lines.insert(0, " ".join(f"{k}={v}" for k, v in meta.items()))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, "scan_gpu.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, "scan_gpu.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

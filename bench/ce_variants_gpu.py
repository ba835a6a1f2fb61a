"""The generated cross-entropy logsumexp kernel vs the variant sweep's hand-written one: which
difference costs the ~7%? Compiles F.cross_entropy(logits.float(), t) with Cherenkov, takes the
source of its looped logsumexp kernel, and times textual variants of it (do_bench median).

    PYTHONPATH=. python3 bench/ce_variants_gpu.py OUT_DIR
"""
import os
import re
import sys

import torch

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.bench.timing import copy_bandwidth, cuda_median_s
from cherenkov.runtime.loader import load_module

sys.path.insert(0, os.path.dirname(__file__))
from ce_gpu import ce, reference_lines, write_lines  # noqa: E402


def variants(src: str) -> dict:
    """As generated; its streaming load marked evict_first (logits read once should not
    displace what L2 holds); its loop unrolled twice; both."""
    loop = re.search(r"for roffset in range\((.*)\):", src)
    evict = re.sub(r"(tl\.load\(in_0 \+ .*?other=(?:float\('-inf'\)|0))\)", r"\1, eviction_policy='evict_first')",
                   src, count=1)
    unroll = lambda t: t.replace(loop.group(0), f"for roffset in tl.range({loop.group(1)}, "  # noqa
                                 "loop_unroll_factor=2):")
    return {"generated": src, "evict_first": evict, "unroll2": unroll(src),
            "evict+unroll2": unroll(evict)}


def main(out_dir):
    copy_bw = copy_bandwidth(torch.device("cuda"), 1 << 30)
    lines = [f"copy {copy_bw / 1e9:.0f} GB/s"]
    for V in (50304, 128256):
        T = 16384
        x = (torch.randn(T, V, device="cuda") * 2).to(torch.bfloat16)
        t = torch.randint(0, V, (T,), device="cuda")
        COMPILED.clear()
        cherenkov.compile(ce)(x, t)
        sources = [s for _, info in COMPILED for _, _, nb, s in info.kernels if nb > 1e8]
        src = sources[0]
        name = re.search(r"def (k_[0-9a-f]+)\(", src).group(1)
        if V == 50304:
            lines.append("generated:\n" + src[src.index("@triton.jit\ndef k_"):])
        ref = torch.logsumexp(x.float(), -1)
        nbytes = x.numel() * 2
        for vname, vsrc in variants(src).items():
            fn = getattr(load_module(vsrc, False), name)
            for rb, xb, warps in ((4096, 1, 4), (4096, 1, 2), (2048, 1, 2), (8192, 1, 4),
                                  (8192, 1, 8)):
                m = torch.empty(T, device="cuda")
                s = torch.empty(T, device="cuda")
                run = lambda: fn[(T // xb,)](x, m, s, XBLOCK=xb, RBLOCK=rb,  # noqa: E731
                                             num_warps=warps)
                run()
                ok = ((m + s) - ref).abs().max().item() < 1e-2
                sec = cuda_median_s(run)
                lines.append(f"V={V} {vname:14s} X{xb} R{rb} w{warps} ok={ok} "
                             f"{sec*1e6:7.1f} us {100*nbytes/sec/copy_bw:5.1f}%")
                print(lines[-1], flush=True)
        lines += reference_lines(x, copy_bw)
        del x
    write_lines(out_dir, "ce_variants_gpu.txt", lines)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

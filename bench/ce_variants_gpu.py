"""The generated cross-entropy logsumexp kernel vs the variant sweep's hand-written one: which
difference costs the ~7%? Compiles F.cross_entropy(logits.float(), t) with Cherenkov, takes the
source of its looped logsumexp kernel, and times textual variants of it (do_bench median).

    PYTHONPATH=. python3 bench/ce_variants_gpu.py OUT_DIR
"""
import os
import re
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import cherenkov
from cherenkov.backend import COMPILED
from cherenkov.bench.timing import copy_bandwidth
from cherenkov.runtime.loader import load_module

sys.path.insert(0, os.path.dirname(__file__))
from variants_gpu import lse_block  # noqa: E402


def ce(logits, targets):
    return F.cross_entropy(logits.float(), targets)


def variants(src: str) -> dict:
    out = {"generated": src}
    out["no_ref_select"] = re.sub(r"(t\d+)_ref = tl\.where\(.*\n", r"\1_ref = \1_new\n", src)
    inf = re.sub(r"(tl\.load\(in_0 \+ \(.*?\), xmask & rmask, other=)0\)",
                 r"\1float('-inf'))", src)
    out["load_inf"] = re.sub(r"(t\d+_v) = tl\.where\(xmask & rmask, (t\d+), float\('-inf'\)\)",
                             r"\1 = \2", inf)
    out["int64_row"] = src.replace("xindex = tl.program_id(0) * XBLOCK",
                                   "xindex = tl.program_id(0).to(tl.int64) * XBLOCK")
    out["no_xmask"] = src.replace("xmask & rmask", "rmask")
    allv = re.sub(r"(t\d+)_ref = tl\.where\(.*\n", r"\1_ref = \1_new\n", out["load_inf"])
    out["all"] = allv.replace("xindex = tl.program_id(0) * XBLOCK",
                              "xindex = tl.program_id(0).to(tl.int64) * XBLOCK")
    return out


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
            for rb in (4096, 8192):
                for fp in (True, False):
                    m = torch.empty(T, device="cuda")
                    s = torch.empty(T, device="cuda")
                    run = lambda: fn[(T,)](x, m, s, XBLOCK=1, RBLOCK=rb, num_warps=4,  # noqa
                                          enable_fp_fusion=fp)
                    run()
                    ok = ((m + s) - ref).abs().max().item() < 1e-2
                    ms = do_bench(run, warmup=25, rep=100, return_mode="median")
                    lines.append(f"V={V} {vname:14s} R{rb} fp_fusion={fp!s:5s} ok={ok} "
                                 f"{ms*1e3:7.1f} us {100*nbytes/(ms/1e3)/copy_bw:5.1f}%")
                    print(lines[-1], flush=True)
        out = torch.empty(T, device="cuda")
        for rb in (4096, 8192):
            ms = do_bench(lambda: lse_block[(T,)](x, out, V, rb, num_warps=4),
                          warmup=25, rep=100, return_mode="median")
            lines.append(f"V={V} lse_block      R{rb} {ms*1e3:7.1f} us "
                         f"{100*nbytes/(ms/1e3)/copy_bw:5.1f}%")
        del x
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, "ce_variants_gpu.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")

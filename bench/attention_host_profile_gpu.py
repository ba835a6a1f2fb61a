"""Where a forward+backward attention call's host time goes on the GPU machine.

Per case (by default the suite's shape, B=4 H=16 S=4096 D=128 bf16): the host time of one
call (a loop of calls without a sync), do_bench of forward+backward three times over, the
kernels' GPU time per call (torch.profiler), and a cProfile of 50 calls (top functions by own
time and by cumulative time). When the host time nears the kernels' time, a measurement
swings with the host's speed.

    CHERENKOV_COMMIT=<sha> python bench/attention_host_profile_gpu.py OUT_DIR [B H S D]

(`... OUT_DIR 16 12 1024 64`: GPT-2's training shape, where forward+backward measured 0.634
ms at 6076945 against 0.393 at 863201e, causal; the case list then is causal alone.)
Writes OUT_DIR/attention_host_profile.txt.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.bench.report import script_meta  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_bwd_tiles_gpu import host_ms, kernel_table  # noqa: E402


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    B, H, S, D = (int(x) for x in sys.argv[2:6]) if len(sys.argv) >= 6 else (4, 16, 4096, 128)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    slopes = ca.alibi_slopes(H, device="cuda")
    cases = {"sliding_window1024": (None, ca.sliding_window(1024)),
             "alibi": (ca.alibi(slopes), ca.causal)} if len(sys.argv) < 6 else \
        {"causal": (None, ca.causal)}
    lines = [str(script_meta()), f"B={B} H={H} S={S} D={D} bf16", ""]
    for name, (sm, mm) in cases.items():
        bm = ca.block_mask(mm, B, H, S, S, device="cuda")

        def run(sm=sm, bm=bm):
            ca.attention(q, k, v, score_mod=sm, block_mask=bm).backward(do)
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        host = [host_ms(run, 50) for _ in range(3)]
        bench = [do_bench(run, warmup=10, rep=40, grad_to_none=[q, k, v],
                          return_mode="median") for _ in range(3)]
        gpu = sum(kernel_table(run, 20, top=None).values())
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            run()
        prof.disable()
        torch.cuda.synchronize()
        lines.append(f"## {name}: host ms per call {[round(h, 3) for h in host]}, "
                     f"do_bench fwd+bwd ms {[round(b, 3) for b in bench]}, "
                     f"kernels ms per call {gpu:.3f}")
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(28)
            lines.append(f"### by {key} (50 calls)\n" + s.getvalue())
        print(lines[-3], flush=True)
    path = os.path.join(out_dir, "attention_host_profile.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

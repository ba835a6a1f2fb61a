"""Host time of one decode call on the GPU machine: `cherenkov.attention` and the launcher
beneath it, timed without synchronizing (the GPU queue absorbs the kernels), and a cProfile
of the Python. B=8 Hq=32 Hkv=4 KV=32768 D=128 bf16, no grad.

    CHERENKOV_COMMIT=<sha> python bench/decode_host_gpu.py OUT_DIR    # writes decode_host.txt
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import api, codegen, launch, launch_decode  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402


def host_us(fn, n=200) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / n * 1e6


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    q = torch.randn(8, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(8, 4, 32768, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    traced, kernels = codegen.compile_mods(None, None, interpret=False, float_index=True)
    plan = launch.Plan(kernels, traced, api._full_mask(8, 32, 1, 32768, q.device), 128 ** -0.5, False)
    lines = [f"commit {commit()}, torch {torch.__version__}"]
    with torch.no_grad():
        for _ in range(20):
            ca.attention(q, k, v, enable_gqa=True)
        calls = {"cherenkov.attention": lambda: ca.attention(q, k, v, enable_gqa=True),
                 "launch_decode.decode": lambda: launch_decode.decode(plan, q, k, v, []),
                 "torch.empty x4": lambda: [torch.empty(1 << 20, device="cuda") for _ in range(4)],
                 "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(
                     q, k, v, enable_gqa=True)}
        for _ in range(2):
            for name, fn in calls.items():
                lines.append(f"{name}: {host_us(fn):.1f} us host per call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            ca.attention(q, k, v, enable_gqa=True)
        prof.disable()
        torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    text = "\n".join(lines) + "\n\n" + s.getvalue()
    with open(os.path.join(out_dir, "decode_host.txt"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

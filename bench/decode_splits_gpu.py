"""Split-KV decode on the GPU: call time vs the number of KV splits, against a device copy.

    CHERENKOV_COMMIT=<sha> python bench/decode_splits_gpu.py OUT_DIR

B=8 Hq=32 Hkv=4 KV=32768 D=128 bf16 (the attention bench's decode case). For each split count
(None: the launcher's default), do_bench of `launch_decode.decode` (median; best of 3 interleaved
rounds) and the K/V read bandwidth as a fraction of a device copy's; then the default call
replayed from a CUDA graph (no host time). Output checked against SDPA first.
Writes OUT_DIR/decode_splits.md and .json.
"""
from __future__ import annotations

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import api, codegen, launch, launch_decode  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

B, HQ, HK, KV, D = 8, 32, 4, 32768, 128
SPLITS = [None, 8, 12, 16, 24, 33, 48, 66, 99]


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    q = torch.randn(B, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, HK, KV, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, HK, KV, D, device="cuda", dtype=torch.bfloat16)
    kv_bytes = 2 * k.numel() * k.element_size()
    src = torch.empty(kv_bytes // 2, device="cuda", dtype=torch.int16)
    dst = torch.empty_like(src)
    copy_ms = min(do_bench(lambda: dst.copy_(src), warmup=10, rep=100) for _ in range(3))
    copy_gbps = 2 * src.numel() * 2 / copy_ms / 1e6
    ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    with torch.no_grad():
        out = ca.attention(q, k, v, enable_gqa=True)
    err = (out.float() - ref.float()).abs().max().item()
    traced, kernels = codegen.compile_mods(None, None, interpret=False, float_index=True)
    mask = api._full_mask(B, HQ, 1, KV, q.device)
    plan = launch.Plan(kernels, traced, mask, D ** -0.5, False)
    times = {ns: [] for ns in SPLITS}
    for _ in range(3):
        for ns in SPLITS:
            times[ns].append(do_bench(lambda ns=ns: launch_decode.decode(plan, q, k, v, [], ns),
                                      warmup=10, rep=100))
    rows = []
    for ns in SPLITS:
        ms = min(times[ns])
        o, _ = launch_decode.decode(plan, q, k, v, [], ns)
        rows.append({"splits": "default" if ns is None else ns, "ms": ms,
                     "kv_GBps": kv_bytes / ms / 1e6, "fraction_of_copy": kv_bytes / ms / 1e6 / copy_gbps,
                     "max_err_vs_sdpa": (o.float() - ref.float()).abs().max().item()})
        print(rows[-1], flush=True)
    graph_row = {"splits": "default, CUDA graph replay"}
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                launch_decode.decode(plan, q, k, v, [])
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            launch_decode.decode(plan, q, k, v, [])
        ms = min(do_bench(g.replay, warmup=10, rep=100) for _ in range(3))
        graph_row.update(ms=ms, kv_GBps=kv_bytes / ms / 1e6,
                         fraction_of_copy=kv_bytes / ms / 1e6 / copy_gbps)
    except Exception as e:  # noqa: BLE001
        graph_row["error"] = f"{type(e).__name__}: {e}"[:200]
    rows.append(graph_row)
    print(graph_row, flush=True)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit(), "copy_GBps": copy_gbps,
            "attention_vs_sdpa_max_err": err}
    lines = [f"# Decode splits on {meta['gpu']} ({meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}. B={B} Hq={HQ} "
             f"Hkv={HK} KV={KV} D={D} bf16; copy {copy_gbps:.0f} GB/s; cherenkov.attention vs SDPA "
             f"max abs error {err:.2e}.", "",
             "| splits | ms | K/V GB/s | fraction of copy | max err vs SDPA | error |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['splits']} | {r.get('ms', 0):.4f} | {r.get('kv_GBps', 0):.0f} | "
                     f"{r.get('fraction_of_copy', 0):.3f} | {r.get('max_err_vs_sdpa', 0):.2e} | {r.get('error', '')} |")
    with open(os.path.join(out_dir, "decode_splits.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "decode_splits.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

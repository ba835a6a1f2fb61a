"""Where the time of flex_attention compiled by the cherenkov backend goes, beside the same
call of cherenkov.attention: a torch.profiler kernel table of 10 forward+backward steps each,
8-document causal masking at B=4 H=16 S=4096 D=128 bf16 (flex's 128 x 128 block mask for the
first, our 64 x 64 one for the second), and the same through our op with a 64 x 64 mask.

    CHERENKOV_COMMIT=<sha> python bench/flex_on_ours_profile_gpu.py OUT_DIR
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

import cherenkov  # noqa: E402,F401
import cherenkov.attention as ca  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402
from cherenkov.bench.suites.attention import _doc_offsets  # noqa: E402

B, H, S, D = 4, 16, 4096, 128


def table(name, fn, q, k, v, do) -> str:
    for _ in range(3):
        fn(q, k, v).backward(do)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            fn(q, k, v).backward(do)
        torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        fn(q, k, v).backward(do)
    end.record()
    torch.cuda.synchronize()
    text = prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60)
    return f"## {name}: {start.elapsed_time(end) / 10:.3f} ms per fwd+bwd\n\n```\n{text}\n```\n"


def main(out_dir: str) -> int:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)
    docs = ca.document(offsets=_doc_offsets(S, 8), causal=True)
    fbm = create_block_mask(docs, None, None, S, S, device="cuda")
    fbm64 = create_block_mask(docs, None, None, S, S, device="cuda", BLOCK_SIZE=(64, 64))
    ours_bm = ca.block_mask(docs, B, H, S, S, device="cuda")
    via = torch.compile(flex_attention, backend="cherenkov", dynamic=False)
    parts = [f"# flex_attention on the cherenkov backend vs cherenkov.attention "
             f"({torch.cuda.get_device_name()}, torch {torch.__version__}, commit {commit()})\n"]
    parts.append(table("cherenkov.attention, 64x64 mask",
                       lambda q, k, v: ca.attention(q, k, v, block_mask=ours_bm), q, k, v, do))
    parts.append(table("flex on cherenkov backend, flex 128x128 mask",
                       lambda q, k, v: via(q, k, v, block_mask=fbm), q, k, v, do))
    parts.append(table("flex on cherenkov backend, flex 64x64 mask",
                       lambda q, k, v: via(q, k, v, block_mask=fbm64), q, k, v, do))
    text = "\n".join(parts)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "flex_on_ours_profile.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))

"""Triton's automatic warp specialization (`tl.range(..., warp_specialize=True)`) on the
attention forward's KV loops, on the GPU: does Triton on Hopper overlap the softmax with the
MMAs when asked? Each variant patches the kernel source's loops, is checked against the
unpatched kernel's output, and timed (do_bench median, best of 2 interleaved rounds).

    CHERENKOV_COMMIT=<sha> python bench/attention_ws_gpu.py OUT_DIR

B=4 H=16 S=4096 D=128 bf16, causal and ALiBi forward. Writes OUT_DIR/attention_ws.md.
"""
from __future__ import annotations

import datetime
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import codegen, tuning  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

K = tuning.KernelConfig
B, H, S, D = 4, 16, 4096, 128
FULL = "    for it in range(0, n_full * R):\n        start_n = tl.load(FULL_IDX"
PART = "    for it in range(0, n_partial * R):\n        start_n = tl.load(KV_IDX"


def ws(loop: str, extra: str = "warp_specialize=True") -> str:
    head, rest = loop.split(":\n", 1)
    return head.replace("range(", "tl.range(").replace("* R)", f"* R, {extra})") + ":\n" + rest


VARIANTS = {
    "base": ([], {}),
    "ws full loop": ([(FULL, ws(FULL))], {}),
    "ws both loops": ([(FULL, ws(FULL)), (PART, ws(PART))], {}),
    "ws full, fwd 128x64 w4": ([(FULL, ws(FULL))], {"fwd": K(128, 64, 4, 2)}),
    "ws full, fwd 128x64 w8": ([(FULL, ws(FULL))], {"fwd": K(128, 64, 8, 2)}),
    "stages4 full loop": ([(FULL, ws(FULL, "num_stages=4"))], {}),
}


def main(out_dir: str) -> int:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slopes = ca.alibi_slopes(H, device="cuda")
    cases = {"causal": (None, ca.causal), "alibi": (ca.alibi(slopes), ca.causal)}
    masks = {name: ca.block_mask(m, B, H, S, S, device="cuda") for name, (_, m) in cases.items()}
    flops = 4 * B * H * D * S * (S + 1) / 2
    rows, ref = [], {}
    original = codegen.KERNELS
    for rnd in range(2):
        for name, (patches, table) in VARIANTS.items():
            text = original
            for old, new in patches:
                assert old in text, old
                text = text.replace(old, new, 1)     # the forward kernel comes first
            codegen.KERNELS = text
            codegen._COMPILED.clear()
            for case, (score_mod, mask_mod) in cases.items():
                row = next((r for r in rows if r["variant"] == name and r["case"] == case), None)
                if row is None:
                    row = {"variant": name, "case": case}
                    rows.append(row)
                if "error" in row:
                    continue
                try:
                    with tuning.override(D, table), torch.no_grad():
                        fn = lambda: ca.attention(q, k, v, score_mod=score_mod,  # noqa: E731
                                                  block_mask=masks[case])
                        out = fn()
                        if name == "base":
                            ref[case] = out
                        row["max_err"] = (out - ref[case]).abs().max().item()
                        ms = do_bench(fn, warmup=25, rep=200)
                    row["fwd_ms"] = min(row.get("fwd_ms", 1e9), ms)
                    row["tflops"] = flops / row["fwd_ms"] * 1e-9
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                    traceback.print_exc()
                print(rnd, row, flush=True)
    codegen.KERNELS = original
    lines = [f"# Warp-specialized attention forward on {torch.cuda.get_device_name()}", "",
             f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
             f"torch {torch.__version__}, triton {triton.__version__}, commit {commit()}. "
             f"B={B} H={H} S={S} D={D} bf16 forward, best of 2 rounds.", "",
             "| variant | case | fwd ms | TFLOP/s | max err vs base | error |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['case']} | {r.get('fwd_ms', float('nan')):.3f} | "
                     f"{r.get('tflops', float('nan')):.1f} | {r.get('max_err', '')} | "
                     f"{r.get('error', '')} |")
    text = "\n".join(lines) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "attention_ws.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))

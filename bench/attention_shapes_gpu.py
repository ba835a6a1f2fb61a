"""Causal attention at the train suite's and the attention bench's shapes: cherenkov.attention's
tile table (and variants of it) vs SDPA (default backend: cuDNN on the H200, and flash) and
compiled FlexAttention; plus the bench's sliding window (ours vs flex).

    CHERENKOV_COMMIT=<sha> python bench/attention_shapes_gpu.py OUT_DIR

GPT-2 (B=16 H=12 S=1024 D=64) and Llama (B=4 H=16 S=2048 D=128) shapes with q/k/v strided
views of one (B, S, 3, H, D) projection as the models make them; B=4 H=16 S=4096 D=128 / 64
contiguous as `bench/attention_gpu.py` times them. Each variant replaces the table's
entry for the head dim (fwd, dq, dkdv: block_m, block_n, warps, stages) and the block mask's
tile; forward and forward+backward times and TFLOP/s (do_bench median, the best of 3 interleaved
rounds, with the spread of the rounds; plain calls: a CUDA-graph capture of them failed on
torch 2.11 and poisons the context, so for the smallest shapes the host's time per call may
bound ours) of the causal half
(forward 4*B*H*D*unmasked pairs, forward+backward 3.5x). Checks every variant's output and gradients
against SDPA (a dense boolean mask for the window) first. Writes OUT_DIR/attention_shapes.md and .json.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import tuning  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

K = tuning.KernelConfig
# name -> (B, H, S, D, strided q/k/v as the models make them, mask: "causal" | "window")
SHAPES = {"gpt2": (16, 12, 1024, 64, True, "causal"), "llama": (4, 16, 2048, 128, True, "causal"),
          "bench D128": (4, 16, 4096, 128, False, "causal"),
          "bench D64": (4, 16, 4096, 64, False, "causal"),
          "bench window1024": (4, 16, 4096, 128, False, "window")}
# head dim -> name -> (block mask tile, {kernel: config}); "table" is what the compiler uses
VARIANTS = {
    64: {
        "table": ((128, 64), {}),
        "f64x64": ((128, 64), {"fwd": K(64, 64, 4, 3)}),
        "f64x64 dkdv32x64": ((128, 64), {"fwd": K(64, 64, 4, 3), "dkdv": K(32, 64, 4, 3)}),
        "dkdv32x64": ((128, 64), {"dkdv": K(32, 64, 4, 3)}),
    },
    128: {
        "table": ((128, 64), {}),
        "f64x64": ((128, 64), {"fwd": K(64, 64, 4, 3)}),
        "f64x64 dkdv32x64": ((128, 64), {"fwd": K(64, 64, 4, 3), "dkdv": K(32, 64, 4, 2)}),
        "blk128 f128x128 dq64": ((128, 128), {"fwd": K(128, 128, 8, 2), "dkdv": K(64, 128, 8, 2),
                                              "dq": K(64, 64, 4, 2)}),
    },
}
BUDGET_S = float(os.environ.get("ATTN_BUDGET_S", 480))
START = time.time()


def qkv(B, H, S, D, strided: bool):
    if not strided:
        return [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                for _ in range(3)]
    x = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.bfloat16)
    q, k, v = (t.transpose(1, 2).detach().requires_grad_() for t in x.unbind(2))
    return q, k, v


ROUNDS = 3


def variant(D: int, name: str | None):
    """The tile table as `name` has it, while in the block (choose_config reads it per call)."""
    return tuning.override(D, VARIANTS[D][name][1] if name is not None else {})


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    rows, checks = [], []
    for shape_name, (B, H, S, D, strided, kind) in SHAPES.items():
        q, k, v = qkv(B, H, S, D, strided)
        mod = ca.causal if kind == "causal" else ca.sliding_window(1024)
        dense = torch.ones(S, S, device="cuda", dtype=torch.bool).tril()
        if kind == "window":
            dense &= ~torch.ones(S, S, device="cuda", dtype=torch.bool).tril(-1024)
        pairs = int(dense.sum().item())
        flops = 4 * B * H * D * pairs
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=None if kind == "causal" else dense,
                                             is_causal=kind == "causal")
        g = torch.randn_like(ref)
        ref_grads = torch.autograd.grad(ref, (q, k, v), g)
        impls = {}
        if kind == "causal":
            impls["sdpa default"] = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True)

            def flash(a, b, c):
                with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(a, b, c, is_causal=True)
            impls["sdpa flash"] = flash
        try:
            if kind != "causal":
                raise RuntimeError("flex is timed on the window by bench/attention_gpu.py")
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            fbm = create_block_mask(mod, None, None, S, S, device="cuda")
            cflex = torch.compile(flex_attention)
            impls["flex"] = lambda a, b, c: cflex(a, b, c, block_mask=fbm)
        except Exception as e:  # noqa: BLE001
            print("flex:", e)
        for name in VARIANTS[D]:
            bm = ca.block_mask(mod, 1, 1, S, S, block=VARIANTS[D][name][0], device="cuda")
            impls[f"cherenkov {name}"] = ((lambda bm_, m_: lambda a, b, c: ca.attention(
                a, b, c, mask_mod=m_, block_mask=bm_))(bm, mod), name)
        timers = {}
        for impl, fn in impls.items():
            fn, name = fn if isinstance(fn, tuple) else (fn, None)
            if time.time() - START > BUDGET_S:
                rows.append({"shape": shape_name, "impl": impl, "error": "time budget"})
                continue
            try:
                with variant(D, name):
                    out = fn(q, k, v)
                    grads = torch.autograd.grad(out, (q, k, v), g)
                    err = max([(out - ref).abs().max().item()] +
                              [((a - b).abs().max() / b.abs().max()).item()
                               for a, b in zip(grads, ref_grads)])
                    checks.append({"shape": shape_name, "impl": impl, "max_err": err})

                    def fwd(fn=fn):
                        with torch.no_grad():
                            fn(q, k, v)

                    def fwd_bwd(fn=fn):
                        torch.autograd.grad(fn(q, k, v), (q, k, v), g)
                    timers[impl] = (name, fwd, fwd_bwd, err)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append({"shape": shape_name, "impl": impl, "error": f"{type(e).__name__}: {e}"[:200]})
        times = {impl: ([], []) for impl in timers}
        for _ in range(ROUNDS):             # interleaved rounds: drift hits every impl alike
            for impl, (name, f, fb, _) in timers.items():
                with variant(D, name):
                    times[impl][0].append(do_bench(f, warmup=25, rep=100))
                    times[impl][1].append(do_bench(fb, warmup=25, rep=100))
        for impl, (name, _, _, err) in timers.items():
            f_ms, fb_ms = min(times[impl][0]), min(times[impl][1])
            rows.append({"shape": shape_name, "impl": impl, "fwd_ms": f_ms, "fwd_bwd_ms": fb_ms,
                         "fwd_tflops": flops / f_ms / 1e9, "fwd_bwd_tflops": 3.5 * flops / fb_ms / 1e9,
                         "spread": max(times[impl][1]) / fb_ms - 1, "max_err": err})
            print(rows[-1], flush=True)
        del timers
        torch.cuda.empty_cache()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit()}
    lines = [f"# Causal attention at the train suite's shapes on {meta['gpu']} ({meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}. "
             "TFLOP/s of unmasked pairs; fwd+bwd = 3.5x forward FLOPs; max_err: output abs, "
             "gradients relative to max |grad|, vs SDPA default.", "",
             "| shape | impl | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | fwd+bwd spread | max err | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['impl']} | {r.get('fwd_ms', 0):.3f} | "
                     f"{r.get('fwd_tflops', 0):.0f} | {r.get('fwd_bwd_ms', 0):.3f} | "
                     f"{r.get('fwd_bwd_tflops', 0):.0f} | {100 * r.get('spread', 0):.1f}% | {r.get('max_err', 0):.4f} | "
                     f"{r.get('error', '')} |")
    with open(os.path.join(out_dir, "attention_shapes.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "attention_shapes.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "checks": checks}, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

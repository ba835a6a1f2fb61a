"""Backward tiles for attention with score mods (softcap, ALiBi; causal as the reference) on the
GPU: each variant replaces the tile table's entries for D=128; forward and forward+backward
times (do_bench median, best of 2 interleaved rounds) and each compiled kernel's registers and
spills, to tell register pressure from pipe limits.

    CHERENKOV_COMMIT=<sha> python bench/attention_mods_gpu.py OUT_DIR

B=4 H=16 S=4096 D=128 bf16 as `bench/attention_gpu.py`; output checked against the fp32 math
reference on a B=1 H=2 slice first. Writes OUT_DIR/attention_mods.md and .json.
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
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import kernel_launch, tuning  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

K = tuning.KernelConfig
B, H, S, D = 4, 16, 4096, 128
VARIANTS = {
    "table": {},
    "dkdv32": {"dkdv": K(32, 128, 8, 2)},
    "dkdv32 w4": {"dkdv": K(32, 128, 4, 2)},
    "dkdv64x64 w4": {"dkdv": K(64, 64, 4, 2)},
    "dq64 w4": {"dq": K(64, 64, 4, 2)},
    "dq128x32": {"dq": K(128, 32, 8, 2)},
    "dkdv32 dq64 w4": {"dkdv": K(32, 128, 8, 2), "dq": K(64, 64, 4, 2)},
    "fwd128x64 w8": {"fwd": K(128, 64, 8, 2)},
}
BUDGET_S = float(os.environ.get("ATTN_BUDGET_S", 420))
START = time.time()


def variant(name):
    return tuning.override(D, VARIANTS[name])


def regs_and_spills() -> dict:
    """(kernel name, BLOCK_M, BLOCK_N, warps, HAS_SCORE_MOD) -> (registers, spills)."""
    out = {}
    for fn, la in kernel_launch._LAUNCHERS.items():
        for key, kern in la.compiled.items():
            cx = dict(zip(("D", "D_PAD", "BLOCK_M", "BLOCK_N"), key[2][:4]))
            warps = dict(key[3]).get("num_warps")
            name = getattr(fn, "__name__", str(fn))
            out[f"{fn.__module__[-8:]}.{name} m{cx.get('BLOCK_M')} n{cx.get('BLOCK_N')} w{warps}"] = \
                (getattr(kern, "n_regs", None), getattr(kern, "n_spills", None))
    return out


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    q, k, v = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3)]
    g = torch.randn_like(q)
    slopes = ca.alibi_slopes(H, device="cuda")
    cases = {"causal": (None, ca.causal), "softcap30": (ca.tanh_softcap(30.0), ca.causal),
             "alibi": (ca.alibi(slopes), ca.causal)}
    pairs = S * (S + 1) // 2
    flops = 4 * B * H * D * pairs
    rows, timers = [], {}
    for case, (sm, mm) in cases.items():
        bm = ca.block_mask(mm, 1, 1, S, S, device="cuda")
        for name in VARIANTS:
            if time.time() - START > BUDGET_S:
                rows.append({"case": case, "variant": name, "error": "time budget"})
                continue
            try:
                with variant(name):
                    qs, ks, vs = (t[:1, :2].detach().float().requires_grad_() for t in (q, k, v))
                    out = ca.attention(qs.bfloat16(), ks.bfloat16(), vs.bfloat16(), score_mod=sm,
                                       block_mask=ca.block_mask(mm, 1, 1, S, S, device="cuda"))
                    ref = ca.attention_math(qs, ks, vs, sm, mm)
                    err = (out.float() - ref).abs().max().item()

                    def fwd(sm=sm, bm=bm):
                        with torch.no_grad():
                            ca.attention(q, k, v, score_mod=sm, block_mask=bm)

                    def fwd_bwd(sm=sm, bm=bm):
                        torch.autograd.grad(ca.attention(q, k, v, score_mod=sm, block_mask=bm),
                                            (q, k, v), g)
                    fwd_bwd()
                    timers[(case, name)] = (fwd, fwd_bwd, err)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append({"case": case, "variant": name, "error": f"{type(e).__name__}: {e}"[:200]})
    times = {key: ([], []) for key in timers}
    for _ in range(2):
        for key, (f, fb, _) in timers.items():
            with variant(key[1]):
                times[key][0].append(do_bench(f, warmup=10, rep=60))
                times[key][1].append(do_bench(fb, warmup=10, rep=60))
    for key, (_, _, err) in timers.items():
        f_ms, fb_ms = min(times[key][0]), min(times[key][1])
        rows.append({"case": key[0], "variant": key[1], "fwd_ms": f_ms, "fwd_bwd_ms": fb_ms,
                     "bwd_ms": fb_ms - f_ms, "fwd_tflops": flops / f_ms / 1e9,
                     "fwd_bwd_tflops": 3.5 * flops / fb_ms / 1e9, "max_err": err})
        print(rows[-1], flush=True)
    regs = regs_and_spills()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": commit()}
    lines = [f"# Attention tiles with score mods on {meta['gpu']} ({meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}. "
             f"B={B} H={H} S={S} D={D} bf16, causal mask; TFLOP/s of unmasked pairs (fwd+bwd = "
             "3.5x forward FLOPs); max_err: output vs fp32 math on a B=1 H=2 slice.", "",
             "| case | variant | fwd ms | bwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s | max err | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['variant']} | {r.get('fwd_ms', 0):.3f} | {r.get('bwd_ms', 0):.3f} | "
                     f"{r.get('fwd_bwd_ms', 0):.3f} | {r.get('fwd_tflops', 0):.0f} | "
                     f"{r.get('fwd_bwd_tflops', 0):.0f} | {r.get('max_err', 0):.4f} | {r.get('error', '')} |")
    lines += ["", "## Registers / spills per compiled kernel", "", "| kernel | regs | spills |", "|---|---|---|"]
    lines += [f"| {k_} | {r[0]} | {r[1]} |" for k_, r in sorted(regs.items())]
    with open(os.path.join(out_dir, "attention_mods.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "attention_mods.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "regs": regs}, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

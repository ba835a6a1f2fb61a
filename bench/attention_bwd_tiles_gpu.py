"""Where the attention forward+backward's time goes, and the backward on wider mask tiles.

Part 1, per case (the suite's: B=4 H=16 S=4096 D=128 bf16): a torch.profiler table of the
GPU time per kernel per forward+backward call, ours and compiled flex_attention; the suite's
do_bench median of forward+backward three times over; and the host time of one call (a loop
of calls without a sync: when it exceeds the kernels' time, the call is bound by its Python).
Part 2: the backward on 128-row mask tiles (dQ on 128 x 64 tiles of 8 warps) and 128-column
ones (dK/dV on 128 key rows of 8 warps), best of 2 interleaved do_bench rounds, gradients
checked against the base.

    CHERENKOV_COMMIT=<sha> python bench/attention_bwd_tiles_gpu.py OUT_DIR

Writes OUT_DIR/attention_bwd_tiles.md and .json.
"""
from __future__ import annotations

import collections
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import tuning  # noqa: E402
from cherenkov.bench.report import md_table, save_pair, script_meta  # noqa: E402
from cherenkov.bench.suites.attention import _doc_offsets  # noqa: E402

K = tuning.KernelConfig
B, H, S, D = 4, 16, 4096, 128
BUDGET_S = float(os.environ.get("ATTN_BUDGET_S", 480))
START = time.time()
VARIANTS = {                  # name -> (mask tile, tile-table overrides at D=128)
    "base": ((64, 64), {}),
    "m128x64": ((128, 64), {}),
    "m128x64 dq128x64w8": ((128, 64), {"dq": K(128, 64, 8, 2)}),
    "m64x128 dkdv64x128w8": ((64, 128), {"dkdv": K(64, 128, 8, 2)}),
    "m128x128 dq128w8 dkdv128w8": ((128, 128), {"dq": K(128, 64, 8, 2),
                                                "dkdv": K(64, 128, 8, 2)}),
}
PART2 = ("causal", "alibi", "prefix_lm1024", "softcap30") if os.environ.get("ATTN_PART2", "1") == "1" \
    else ()


def left() -> float:
    return BUDGET_S - (time.time() - START)


def kernel_table(fn, calls: int = 10, top: int | None = 8) -> dict:
    """GPU ms per call by kernel name (torch.profiler over `calls` calls), the `top` longest
    (None: every kernel)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = collections.Counter()
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t and not e.key.startswith("ProfilerStep"):
            per[e.key[:70]] += t / 1e3 / calls
    return dict(per.most_common(top))


def host_ms(fn, calls: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e3


def program_order(mods, q, k, v, do) -> list[dict]:
    """Forward and forward+backward per case under each launch.HEAD_GROUP, best of 2
    interleaved rounds."""
    from cherenkov.attention import launch
    groups = (1, None, 8, 16, 32, 64)
    cases = ("causal", "softcap30", "alibi", "prefix_lm1024", "sliding_window1024", "document8")
    masks = {n: ca.block_mask(mods[n][1], B, H, S, S, device="cuda") for n in cases}
    best: dict = {}
    for _ in range(2):
        for name in cases:
            sm = mods[name][0]
            for group in groups:
                if left() < 15:
                    break
                launch.HEAD_GROUP = group

                def fwd(sm=sm, bm=masks[name]):
                    with torch.no_grad():
                        ca.attention(q, k, v, score_mod=sm, block_mask=bm)

                def fwd_bwd(sm=sm, bm=masks[name]):
                    torch.autograd.grad(ca.attention(q, k, v, score_mod=sm, block_mask=bm),
                                        (q, k, v), do)
                f = do_bench(fwd, warmup=10, rep=40, return_mode="median")
                fb = do_bench(fwd_bwd, warmup=10, rep=40, return_mode="median")
                old = best.get((name, group), (float("inf"), float("inf")))
                best[(name, group)] = (min(old[0], f), min(old[1], fb))
    launch.HEAD_GROUP = None
    rows = []
    for (name, group), (f, fb) in best.items():
        row = {"case": name, "group": "auto" if group is None else group, "fwd_ms": f,
               "fwd_bwd_ms": fb}
        if (name, 1) in best:
            row["fwd_speedup"] = best[(name, 1)][0] / f
            row["fwd_bwd_speedup"] = best[(name, 1)][1] / fb
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> int:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    os.makedirs(out_dir, exist_ok=True)
    torch._dynamo.config.cache_size_limit = 256
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    slopes = ca.alibi_slopes(H, device="cuda")
    mods = {"causal": (None, ca.causal), "softcap30": (ca.tanh_softcap(30.0), ca.causal),
            "alibi": (ca.alibi(slopes), ca.causal),
            "prefix_lm1024": (None, ca.prefix_lm(1024)),
            "sliding_window1024": (None, ca.sliding_window(1024)),
            "document8": (None, ca.document(offsets=_doc_offsets(S, 8, "cuda"), causal=True))}
    profiles, rows = [], []

    def fwd_bwd_of(fn):
        def run():
            fn(q, k, v).backward(do)
        return run

    # ---- part 1: where the time goes ----------------------------------------------------------
    for name, (sm, mm) in (mods.items() if os.environ.get("ATTN_PART1", "1") == "1" else ()):
        if left() < 60:
            break
        try:
            torch._dynamo.reset()
            flex_c = torch.compile(flex_attention, dynamic=False)
            fbm = create_block_mask(mm, None, None, S, S, device="cuda")
            bm = ca.block_mask(mm, B, H, S, S, device="cuda")
            impls = {"cherenkov": lambda q, k, v, bm=bm, sm=sm: ca.attention(
                         q, k, v, score_mod=sm, block_mask=bm),
                     "flex": lambda q, k, v, fbm=fbm, sm=sm: flex_c(q, k, v, score_mod=sm,
                                                                    block_mask=fbm)}
            for impl, fn in impls.items():
                run = fwd_bwd_of(fn)
                row = {"case": name, "impl": impl, "kernels_ms": kernel_table(run)}
                row["gpu_ms"] = sum(row["kernels_ms"].values())
                row["do_bench_ms"] = [do_bench(run, warmup=10, rep=40, grad_to_none=[q, k, v],
                                               return_mode="median") for _ in range(3)]
                row["host_ms"] = host_ms(run)
                profiles.append(row)
                print(row, flush=True)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            profiles.append({"case": name, "error": f"{type(e).__name__}: {e}"[:200]})

    # ---- part 2: the backward on wider mask tiles ----------------------------------------------
    timers, ref = {}, {}
    for name in PART2:
        sm, mm = mods[name]
        for vname, (block, table) in VARIANTS.items():
            if left() < 90:
                rows.append({"case": name, "variant": vname, "error": "time budget"})
                continue
            try:
                bm = ca.block_mask(mm, B, H, S, S, block=block, device="cuda")
                with tuning.override(D, table):
                    def run(bm=bm, sm=sm):
                        return torch.autograd.grad(ca.attention(q, k, v, score_mod=sm,
                                                                block_mask=bm), (q, k, v), do)
                    grads = run()
                ref.setdefault(name, grads)
                err = max(((a.float() - b.float()).abs().max()
                           / b.float().abs().max().clamp(min=1)).item()
                          for a, b in zip(grads, ref[name]))
                timers[(name, vname)] = (run, table, err)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append({"case": name, "variant": vname, "error": f"{type(e).__name__}: {e}"[:200]})
    times = collections.defaultdict(list)
    for _ in range(2):
        for key, (run, table, _) in timers.items():
            if left() < 20:
                break
            with tuning.override(D, table):
                times[key].append(do_bench(run, warmup=10, rep=50, return_mode="median"))
    base = {}
    for key, (_, _, err) in timers.items():
        if not times[key]:
            continue
        ms = min(times[key])
        if key[1] == "base":
            base[key[0]] = ms
        rows.append({"case": key[0], "variant": key[1], "fwd_bwd_ms": ms, "max_rel_err": err})
    for r in rows:
        if "fwd_bwd_ms" in r and r["case"] in base:
            r["speedup_vs_base"] = base[r["case"]] / r["fwd_bwd_ms"]

    # ---- part 3: the kernels' program order (launch.HEAD_GROUP) ------------------------------
    order_rows = program_order(mods, q, k, v, do) if os.environ.get("ATTN_ORDER") == "1" else []

    meta = script_meta()
    lines = [f"# Attention forward+backward: kernels and backward tiles on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. B={B} H={H} S={S} D={D} bf16.", "",
             "## Where the time goes (per forward+backward call)", "",
             "| case | impl | do_bench ms (3 runs) | GPU ms (profiler) | host ms | kernels (ms) |",
             "|---|---|---|---|---|---|"]
    for r in profiles:
        if "error" in r:
            lines.append(f"| {r['case']} | - | error: {r['error']} | | | |")
            continue
        kern = "; ".join(f"{n}: {t:.3f}" for n, t in r["kernels_ms"].items())
        lines.append(f"| {r['case']} | {r['impl']} | "
                     f"{' / '.join(f'{t:.3f}' for t in r['do_bench_ms'])} | {r['gpu_ms']:.3f} | "
                     f"{r['host_ms']:.3f} | {kern} |")
    lines += ["", "## Backward tiles (torch.autograd.grad of forward+backward, best of 2)", ""]
    lines += md_table(
        ["case", "variant", "fwd+bwd ms", "speedup vs base", "max rel err vs base", "error"],
        [(r["case"], r["variant"], f"{r.get('fwd_bwd_ms', float('nan')):.4f}",
          f"{r.get('speedup_vs_base', float('nan')):.3f}", r.get("max_rel_err", ""),
          r.get("error", "")) for r in rows])
    if order_rows:
        lines += ["", "## Program order: heads interleaved in groups (launch.HEAD_GROUP; "
                  "1 = one head after another; auto = launch.head_group), best of 2", ""]
        lines += md_table(
            ["case", "head group", "fwd ms", "fwd+bwd ms", "fwd speedup vs 1",
             "fwd+bwd speedup vs 1"],
            [(r["case"], r["group"], f"{r['fwd_ms']:.4f}", f"{r['fwd_bwd_ms']:.4f}",
              f"{r.get('fwd_speedup', float('nan')):.3f}",
              f"{r.get('fwd_bwd_speedup', float('nan')):.3f}") for r in order_rows])
    text = "\n".join(lines) + "\n"
    save_pair(out_dir, "attention_bwd_tiles", text,
              {"meta": meta, "profiles": profiles, "rows": rows, "order": order_rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

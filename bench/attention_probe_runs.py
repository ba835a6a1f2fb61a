"""What the attention variant probes (bench/attention_ws_gpu.py; attention_lookahead_gpu.py
until d7c96cf) share: the suite's cases at B=4 H=16 S=4096 D=128 bf16, each variant timed in its own process
(a kernel-source or module-flag change must come before anything compiles), checked against
the fp32 math reference on a small shape, and one table of the variants against `base`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

CASES = ("causal", "alibi", "sliding_window1024", "prefix_lm1024")


def mods(name: str, S: int, H: int):
    import cherenkov.attention as ca
    if name == "causal":
        return dict(mask_mod=ca.causal)
    if name == "alibi":
        return dict(score_mod=ca.alibi(ca.alibi_slopes(H, device="cuda")), mask_mod=ca.causal)
    if name == "sliding_window1024":
        return dict(mask_mod=ca.sliding_window(S // 4))
    return dict(mask_mod=ca.prefix_lm(S // 4))


def run(name: str, B: int, H: int, S: int, D: int, seed: int = 0):
    import torch
    import cherenkov.attention as ca
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kw = mods(name, S, H)
    bm = ca.block_mask(kw["mask_mod"], B, H, S, S, device="cuda")
    fn = lambda: ca.attention(q, k, v, block_mask=bm, score_mod=kw.get("score_mod"))  # noqa
    return q, k, v, do, fn, kw


def error(name: str) -> float:
    """max |output or gradient - the fp32 math reference's| / max |reference|, B=1 H=2 S=640."""
    import torch
    from cherenkov.attention.reference import attention_math
    q, k, v, do, fn, kw = run(name, 1, 2, 640, 128, seed=1)
    o = fn()
    o.backward(do)
    got = [o, q.grad, k.grad, v.grad]
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = attention_math(q32, k32, v32, **kw)
    ref.backward(do.float())
    want = [ref, q32.grad, k32.grad, v32.grad]
    return max(float((a.float() - b).abs().max() / b.abs().max()) for a, b in zip(got, want))


def time_cases(variant: str) -> dict:
    """{case: fwd / fwd+bwd ms (do_bench median, best of 2) and the error vs the reference},
    or the error a case raised."""
    import torch
    from triton.testing import do_bench
    out = {}
    for name in CASES:
        try:
            err = error(name)
            q, k, v, do, fn, _ = run(name, 4, 16, 4096, 128)
            fwd, fb = float("inf"), float("inf")
            for _ in range(2):
                with torch.no_grad():
                    fwd = min(fwd, do_bench(fn, warmup=10, rep=50, return_mode="median"))
                fb = min(fb, do_bench(lambda: fn().backward(do), warmup=10, rep=50,
                                      grad_to_none=[q, k, v], return_mode="median"))
            out[name] = {"fwd_ms": fwd, "fwd_bwd_ms": fb, "rel_err_vs_math": err}
        except Exception as e:  # noqa: BLE001 -- a variant that fails is reported
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(variant, name, out[name], flush=True)
    return out


def run_children(script: str, variants, timeout: int) -> dict:
    """Each variant's `script --child <variant>` (its last stdout line: time_cases' JSON)."""
    results = {}
    for variant in variants:
        try:
            proc = subprocess.run([sys.executable, script, "--child", variant],
                                  capture_output=True, text=True, timeout=timeout)
            print(proc.stdout[-1500:], proc.stderr[-1500:], flush=True)
            results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        except Exception as e:  # noqa: BLE001
            results[variant] = {c: {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                                for c in CASES}
    return results


HEADER = ["case", "variant", "fwd ms", "fwd+bwd ms", "fwd speedup", "fwd+bwd speedup",
          "rel err", "error"]


def table(results: dict) -> tuple[list, list]:
    """(markdown rows under HEADER, JSON rows): every variant's cases, speedups over base."""
    base = results.get("base", {})
    rows, data = [], []
    for variant, cases in results.items():
        for name, r in cases.items():
            b = base.get(name, {})
            speed = {k: f"{b[k] / r[k]:.3f}" if k in r and k in b else ""
                     for k in ("fwd_ms", "fwd_bwd_ms")}
            rows.append([name, variant, f"{r.get('fwd_ms', float('nan')):.3f}",
                         f"{r.get('fwd_bwd_ms', float('nan')):.3f}", speed["fwd_ms"],
                         speed["fwd_bwd_ms"], r.get("rel_err_vs_math", ""), r.get("error", "")])
            data.append({"case": name, "variant": variant, **r})
    return rows, data


def probe_main(script: str, variants, configure, title: str, stem: str, timeout: int) -> None:
    """A probe script's entry: `script --child <variant>` configures the variant (before
    anything compiles) and prints time_cases' JSON; `script [OUT_DIR]` runs every variant's
    child and writes OUT_DIR/<stem>.md and .json."""
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(script))))
        configure(sys.argv[2])
        print(json.dumps(time_cases(sys.argv[2])))
        return
    from cherenkov.bench.report import md_table, save_pair, script_meta
    only = os.environ.get("PROBE_VARIANTS")
    if only:
        variants = [v for v in variants if v in only.split(",")]
    rows, data = table(run_children(script, variants, timeout))
    meta = script_meta()
    text = "\n".join([
        f"# {title} on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. B=4 H=16 S=4096 D=128 bf16, do_bench median (best of 2); speedups "
        "over `base`; rel err: max |output or gradient - the fp32 math reference's| / max "
        "|reference's| at B=1 H=2 S=640.", "", *md_table(HEADER, rows)]) + "\n"
    save_pair(sys.argv[1] if len(sys.argv) > 1 else "bench/results", stem, text,
              {"meta": meta, "rows": data})

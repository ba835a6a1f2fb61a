"""Attention-kernel experiments: variants patched into the kernel source (and the tile table),
each checked against the unpatched kernels and timed (do_bench median, best of 2 interleaved
rounds), in one process. Three experiment sets:

* `ws`: Triton's automatic warp specialization (`tl.range(..., warp_specialize=True)`) on the
  forward's KV loops -- does Triton on Hopper overlap the softmax with the MMAs when asked?
* `fwd`: rewrites of the forward's inner loop, three switches:
  raw max (without a score mod the row max is taken on the raw q.k products and scaled once
  per row: one FMA per score instead of a multiply and a subtract), lazy rescale (on full
  tiles the running max -- and with it the rescale of the accumulator -- moves only when some
  row's max grew by more than 8 in the log2 domain, as in FlashAttention-4), prefetch (the
  next full tile's q.k MMA is issued before this tile's softmax, FlashAttention-3's
  intra-warpgroup overlap as a software-pipelined loop); and tile shapes.
* `bwd`: the dQ kernel with a score mod's derivative folded into P before the dP matmul, and
  with its q.k and dO.v matmuls issued back to back; timed forward+backward.
* `tma`: the forward reading Q/K/V and writing O through TMA descriptors (launch.TMA: 2-D or
  4-D) vs pointers, over the "fwd_tma" tiles, with 64 x 64 and 128 x 64 mask tiles.
* `tma_bwd`: the backward's K / V (dQ) and Q / dO (dK/dV) tiles through 2-D descriptors
  (launch.TMA_BACKWARD) vs pointers, and their stages / warps; timed forward+backward.
* `idx`: every kernel's full-tile loop reading first + it instead of an index load per tile
  (masks whose full lists are ascending runs), with and without the backward's descriptors.
* `warps`: the dK/dV kernel on 64 x 64 tiles with 8 warps (two warpgroups) instead of the one
  warpgroup tuning forces at 64 keys (SASS: no spills at 8 warps, 7-9 spill loads a step at 4,
  but 40 HGMMAs a step instead of 24), with 2 and 3 stages; timed forward+backward.
* `dq_ds`: dQ by its own kernel vs from the dS tiles the dK/dV kernel stores (launch_bwd.DS_STORE
  "on"; DS_BUDGET: heads in chunks of that many bytes of dS), the dq_ds kernel's stages, and
  pointers instead of descriptors; timed forward+backward.

    CHERENKOV_COMMIT=<sha> python bench/attention_variants_gpu.py {ws,fwd,bwd,tma,tma_bwd,dq_ds,idx,warps} OUT_DIR
    python bench/attention_variants_gpu.py fwd OUT_DIR --smoke    # CPU interpreter, tiny

B=4 H=16 S=4096 D=128 bf16 (smoke: B=1 H=2 S=128 D=32 fp32). Writes
OUT_DIR/attention_<set>_variants.{md,json}.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"        # before triton.language is imported

import torch  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import codegen, tuning  # noqa: E402
from cherenkov.bench.report import md_table, save_pair, script_meta  # noqa: E402
from cherenkov.bench.suites.attention import _doc_offsets  # noqa: E402

K = tuning.KernelConfig


# ---- the harness -----------------------------------------------------------------------------
class Variant:
    """A name, a rewrite of the kernel source, tile-table overrides and any other context."""

    def __init__(self, name, rewrite=None, table=None, context=None):
        self.name = name
        self.rewrite = rewrite or (lambda text: text)
        self.table = table or {}
        self.context = context or contextlib.nullcontext


def _relative_error(got, ref) -> float:
    return max(((g.float() - r.float()).abs().max() / r.float().abs().max().clamp(min=1.0)).item()
               for g, r in zip(got, ref))


def run_variants(variants: list[Variant], cases: dict, measure, head_dim: int,
                 rounds: int = 2) -> list[dict]:
    """Rows (variant, case, ms: best over rounds, max_rel_err vs the first variant,
    speedup_vs_base) for `measure(case) -> (ms, tensors)`; the source is restored after."""
    original = codegen.KERNELS
    rows: dict = {}
    ref: dict = {}
    try:
        for rnd in range(rounds):
            for variant in variants:
                codegen.KERNELS = variant.rewrite(original)
                codegen._COMPILED.clear()
                tuning._LIVE.clear()
                with variant.context(), tuning.override(head_dim, variant.table):
                    for name, case in cases.items():
                        row = rows.setdefault((variant.name, name),
                                              {"variant": variant.name, "case": name})
                        if "error" in row:
                            continue
                        try:
                            ms, result = measure(case)
                            ref.setdefault(name, result)
                            row["max_rel_err"] = _relative_error(result, ref[name])
                            row["ms"] = min(row.get("ms", float("inf")), ms)
                        except Exception as e:  # noqa: BLE001
                            row["error"] = f"{type(e).__name__}: {e}"[:200]
                            traceback.print_exc()
                        print(rnd, row, flush=True)
    finally:
        codegen.KERNELS = original
        codegen._COMPILED.clear()
        tuning._LIVE.clear()
    rows = list(rows.values())
    base = {r["case"]: r.get("ms") for r in rows if r["variant"] == variants[0].name}
    for r in rows:
        if r.get("ms") and base.get(r["case"]):
            r["speedup_vs_base"] = base[r["case"]] / r["ms"]
    return rows


def write_report(out_dir: str, stem: str, title: str, note: str, rows: list[dict]) -> str:
    meta = {**script_meta(), "note": note}
    lines = [f"# {title} on {meta['gpu']}", "",
             f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
             f"{meta['commit']}. {note}", ""]
    lines += md_table(
        ["variant", "case", "ms", "speedup vs base", "max rel err vs base", "error"],
        [(r["variant"], r["case"], f"{r.get('ms', float('nan')):.4f}",
          f"{r.get('speedup_vs_base', float('nan')):.3f}", r.get("max_rel_err", ""),
          r.get("error", "")) for r in rows])
    text = "\n".join(lines) + "\n"
    save_pair(out_dir, stem, text, {"meta": meta, "rows": rows})
    return text


# ---- ws: warp specialization on the forward's loops ------------------------------------------
FULL = "    for it in range(0, n_full * R):\n        start_n = tl.load(FULL_IDX"
PART = "    for it in range(0, n_partial * R):\n        start_n = tl.load(KV_IDX"


def _loop(loop: str, extra: str = "warp_specialize=True") -> str:
    head, rest = loop.split(":\n", 1)
    return head.replace("range(", "tl.range(").replace("* R)", f"* R, {extra})") + ":\n" + rest


def _replacing(*pairs):
    def rewrite(text):
        for old, new in pairs:
            assert old in text, old
            text = text.replace(old, new, 1)      # the forward kernel comes first
        return text
    return rewrite


def ws_variants():
    return [Variant("base"),
            Variant("ws full loop", _replacing((FULL, _loop(FULL)))),
            Variant("ws both loops", _replacing((FULL, _loop(FULL)), (PART, _loop(PART)))),
            Variant("ws full, fwd 128x64 w4", _replacing((FULL, _loop(FULL))),
                    {"fwd": K(128, 64, 4, 2)}),
            Variant("ws full, fwd 128x64 w8", _replacing((FULL, _loop(FULL))),
                    {"fwd": K(128, 64, 8, 2)}),
            Variant("stages4 full loop", _replacing((FULL, _loop(FULL, "num_stages=4"))))]


# ---- fwd: inner-loop rewrites ----------------------------------------------------------------
def fwd_variants():
    from attention_fwd_source import patched
    table = [("rewrite", False, False, False, None), ("raw", True, False, False, None),
             ("lazy", False, True, False, None), ("prefetch", False, False, True, None),
             ("raw+lazy", True, True, False, None), ("raw+prefetch", True, False, True, None),
             ("raw+lazy+prefetch", True, True, True, None),
             ("raw+lazy 128x64 w8", True, True, False, K(128, 64, 8, 3)),
             ("raw+lazy+prefetch 128x64 w8", True, True, True, K(128, 64, 8, 3)),
             ("raw+lazy+prefetch 64x64 s2", True, True, True, K(64, 64, 4, 2))]
    return [Variant("base")] + [
        Variant(name, lambda text, r=raw, la=lazy, p=pre: patched(text, r, la, p),
                {"fwd": cfg} if cfg else {})
        for name, raw, lazy, pre, cfg in table]


# ---- bwd: the score mod's derivative folded into P -------------------------------------------
# (The dK/dV kernel's variants -- the derivative folded into P, kept in fp16, 64-row steps, dP's
# matmul issued with S's -- were measured at 3571943, 863201e and d9ee083; the last is the
# kernel's DP_FIRST now. bench/results/2026-12-01_attention_bwd_*variants*.md.)
DQ_OLD = '''    dp = tl.dot(do, vT, input_precision=DOT_PREC)
    ds = p * (dp - delta[:, None])
    if HAS_SCORE_MOD:
        if HAS_CAPTURE_GRADS:
            _capture_grads(qk * sm_scale, ds, p != 0.0, b, h, q_idx, kv_idx, __CAPS__ __GRADS__)
        ds = _scale_ds(ds, p, dsdx)
'''
DQ_NEW = '''    if HAS_SCORE_MOD and not HAS_CAPTURE_GRADS:
        pd = _scale_ds(p, p, dsdx)
    dp = tl.dot(do, vT, input_precision=DOT_PREC)
    if HAS_SCORE_MOD and not HAS_CAPTURE_GRADS:
        ds = pd * (dp - delta[:, None])
    else:
        ds = p * (dp - delta[:, None])
    if HAS_SCORE_MOD and HAS_CAPTURE_GRADS:
        _capture_grads(qk * sm_scale, ds, p != 0.0, b, h, q_idx, kv_idx, __CAPS__ __GRADS__)
        ds = _scale_ds(ds, p, dsdx)
'''
# dQ's q.k and dO.v matmuls issued back to back (FlashAttention's order)
DQ_DP = "    dp = tl.dot(do, vT, input_precision=DOT_PREC)\n"
DQ_QK = "    qk = tl.dot(q, kT, input_precision=DOT_PREC)\n"
DQ_QK_DP = DQ_QK + "    dp = tl.dot(do, vT, input_precision=DOT_PREC)  # issued with qk\n"


def bwd_variants():
    return [Variant("base"), Variant("fold dq", _replacing((DQ_OLD, DQ_NEW))),
            Variant("dq S,dP first", _replacing((DQ_DP, ""), (DQ_QK, DQ_QK_DP)))]


# ---- tma: the forward through TMA descriptors (launch.TMA) ------------------------------------
def _launch_setting(name: str, value: str):
    """A context setting cherenkov.attention.launch.<name> (TMA, TMA_BACKWARD) or
    launch_bwd.<name> (DS_STORE, DS_BUDGET) to `value`."""
    @contextlib.contextmanager
    def context():
        import cherenkov.attention.launch as launch
        import cherenkov.attention.launch_bwd as launch_bwd
        launch_mod = launch_bwd if name.startswith("DS_") else launch
        saved = getattr(launch_mod, name)
        setattr(launch_mod, name, value)
        try:
            yield
        finally:
            setattr(launch_mod, name, saved)
    return context


def _tma(mode):
    return _launch_setting("TMA", mode)


def tma_variants():
    return [Variant("pointers", context=_tma("off")),
            Variant("pointers fwd 128x64 w4 s2", table={"fwd": K(128, 64, 4, 2)},
                    context=_tma("off")),
            Variant("tma 2d", context=_tma("2d")),
            Variant("tma 2d s3", table={"fwd_tma": K(128, 64, 4, 3)}, context=_tma("2d")),
            Variant("tma 2d s4", table={"fwd_tma": K(128, 64, 4, 4)}, context=_tma("2d")),
            Variant("tma 2d w8 s3", table={"fwd_tma": K(128, 64, 8, 3)}, context=_tma("2d")),
            Variant("tma 4d", context=_tma("4d"))]


def _tma_backward(mode):
    return _launch_setting("TMA_BACKWARD", mode)


def tma_bwd_variants():
    return [Variant("backward pointers", context=_tma_backward("off")),
            Variant("all pointers", context=_tma("off")),
            Variant("backward tma", context=_tma_backward("auto")),
            Variant("backward tma, dq s3", table={"dq": K(64, 64, 4, 3)},
                    context=_tma_backward("auto")),
            Variant("backward tma, dkdv s3", table={"dkdv": K(64, 128, 8, 3)},
                    context=_tma_backward("auto")),
            Variant("backward tma, dq w8", table={"dq": K(64, 64, 8, 2)},
                    context=_tma_backward("auto"))]


def dq_ds_variants():
    def stored(budget):
        return lambda: _stack(_launch_setting("DS_STORE", "on")(),
                              _launch_setting("DS_BUDGET", budget)())
    return [Variant("dQ kernel", context=_launch_setting("DS_STORE", "off")),
            Variant("stored dS 512 MiB", context=stored(512 << 20)),
            Variant("stored dS 1 GiB", context=stored(1 << 30)),
            Variant("stored dS 2 GiB (one chunk)", context=stored(2 << 30)),
            Variant("stored dS 512 MiB, dq_ds s4", table={"dq_ds": K(64, 64, 4, 4)},
                    context=stored(512 << 20)),
            Variant("stored dS 512 MiB, backward pointers",
                    context=lambda: _stack(stored(512 << 20)(), _tma_backward("off")()))]


# ---- warps: the dK/dV kernel's warps at 64 x 64 -----------------------------------------------
def _dkdv_config(cfg):
    """A context in which tuning answers `cfg` for the dK/dV kernel, past the table's clip and
    its one-warpgroup rule."""
    @contextlib.contextmanager
    def context():
        saved = tuning._table_config

        def table_config(kernel, head_dim, dtype, sparse_block):
            return cfg if kernel == "dkdv" else saved(kernel, head_dim, dtype, sparse_block)
        from cherenkov.attention import memo
        tuning._table_config = table_config
        tuning._LIVE.clear()
        memo.forget()            # remembered launch decisions read the table too
        try:
            yield
        finally:
            tuning._table_config = saved
            tuning._LIVE.clear()
            memo.forget()
    return context


def warps_variants():
    return [Variant("dkdv 64x64 w4 (base)"),
            Variant("dkdv 64x64 w8 s2", context=_dkdv_config(K(64, 64, 8, 2))),
            Variant("dkdv 64x64 w8 s3", context=_dkdv_config(K(64, 64, 8, 3))),
            Variant("dkdv 32x64 w4 s3", context=_dkdv_config(K(32, 64, 4, 3)))]


# ---- idx: full-tile lists walked as ranges (no index load per tile) -------------------------
def _full_ranges(text: str) -> str:
    """Every kernel's full-tile loop reading its block index as first + it (valid where each
    row's / column's full list is an ascending run: causal, window, prefix-LM, documents; the
    check against the base says whether it was)."""
    import re
    text, n1 = re.subn(r"( *)n_full = tl.load\(FULL_NUM \+ row\)\n",
                       lambda m: m.group(0) + f"{m.group(1)}first_full = tl.load(FULL_IDX + irow)\n",
                       text)
    text, n2 = re.subn(r"tl.load\(FULL_IDX \+ irow \+ it // R\)", "(first_full + it // R)", text)
    assert n1 == n2 and n1 >= 3, (n1, n2)
    return text


def idx_variants():
    return [Variant("base"),
            Variant("backward pointers", context=_tma_backward("off")),
            Variant("full ranges", _full_ranges),
            Variant("full ranges, backward pointers", _full_ranges,
                    context=_tma_backward("off"))]


@contextlib.contextmanager
def _stack(*contexts):
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield


# ---- cases and timing ------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("set", choices=("ws", "fwd", "bwd", "tma", "tma_bwd", "dq_ds", "idx",
                                           "warps"))
    parser.add_argument("out_dir", nargs="?", default="bench/results")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes")
    parser.add_argument("--cases", nargs="*", help="only these cases")
    parser.add_argument("--variants", nargs="*", help="only these variants (the first is base)")
    args = parser.parse_args()
    dev, dt = ("cpu", torch.float32) if args.smoke else ("cuda", torch.bfloat16)
    B, H, S, D = (1, 2, 128, 32) if args.smoke else (4, 16, 4096, 128)
    torch.manual_seed(0)
    grad = args.set in ("bwd", "tma_bwd", "dq_ds", "idx", "warps")
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dt, requires_grad=grad)
               for _ in range(3))
    do = torch.randn(B, H, S, D, device=dev, dtype=dt)
    slopes = ca.alibi_slopes(H, device=dev)
    mods = {"causal": (None, ca.causal), "alibi": (ca.alibi(slopes), ca.causal),
            "sliding_window1024": (None, ca.sliding_window(1024 if not args.smoke else 40)),
            "prefix_lm1024": (None, ca.prefix_lm(1024 if not args.smoke else 40)),
            "softcap30": (ca.tanh_softcap(30.0), ca.causal),
            "document8": (None, ca.document(offsets=_doc_offsets(S, 8, dev), causal=True))}
    names = {"ws": ("causal", "alibi"), "bwd": ("causal", "softcap30", "alibi", "document8"),
             "fwd": tuple(mods)[:5], "tma": tuple(mods), "tma_bwd": tuple(mods),
             "dq_ds": tuple(mods), "warps": tuple(mods),
             "idx": ("causal", "alibi", "sliding_window1024", "prefix_lm1024", "document8")
             }[args.set]
    if args.cases:
        names = tuple(n for n in names if n in args.cases)
    block = (32, 32) if args.smoke else (64, 64)
    cases = {n: (mods[n][0], ca.block_mask(mods[n][1], B, H, S, S, block=block, device=dev))
             for n in names}
    if args.set == "tma" and not args.cases:      # and with the 128 x 64 mask tiles the 128-row kernel tiles need
        wide = (64, 32) if args.smoke else (128, 64)
        cases.update({f"{n} mask{wide[0]}x{wide[1]}": (mods[n][0], ca.block_mask(
            mods[n][1], B, H, S, S, block=wide, device=dev)) for n in ("causal", "alibi",
                                                                      "softcap30")})

    def timed(fn):
        if args.smoke:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        from triton.testing import do_bench
        return do_bench(fn, warmup=10 if grad else 25, rep=100 if grad else 150)

    def measure(case):
        score_mod, bm = case
        if grad:
            def fn():
                out = ca.attention(q, k, v, score_mod=score_mod, block_mask=bm)
                return torch.autograd.grad(out, (q, k, v), do)
            return timed(fn), fn()
        with torch.no_grad():
            fn = lambda: ca.attention(q, k, v, score_mod=score_mod, block_mask=bm)  # noqa: E731
            return timed(fn), (fn(),)

    variants = {"ws": ws_variants, "fwd": fwd_variants, "bwd": bwd_variants,
                "tma": tma_variants, "tma_bwd": tma_bwd_variants,
                "dq_ds": dq_ds_variants, "idx": idx_variants,
                "warps": warps_variants}[args.set]()
    if args.variants:
        variants = [v for v in variants if v.name in args.variants]
    rows = run_variants(variants, cases, measure, D, rounds=1 if args.smoke else 2)
    what = "forward+backward" if grad else "forward"
    note = (f"B={B} H={H} S={S} D={D} {str(dt).split('.')[-1]} {what}, best of "
            f"{1 if args.smoke else 2} interleaved rounds; speedup = base ms / variant ms")
    stem = f"attention_{args.set}_variants" + ("_" + "_".join(names) if args.cases else "")
    title = {"ws": "Warp-specialized attention forward", "fwd": "Attention forward variants",
             "bwd": "Attention backward variants",
             "tma": "Attention forward through TMA descriptors",
             "tma_bwd": "Attention backward through TMA descriptors",
             "dq_ds": "Attention backward: dQ from stored dS",
             "idx": "Attention: full-tile lists as ranges",
             "warps": "Attention backward: the dK/dV kernel's warps"}[args.set]
    write_report(args.out_dir, stem, title, note, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

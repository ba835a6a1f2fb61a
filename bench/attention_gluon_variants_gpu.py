"""The Gluon kernels' variants on the suite's cases, in one process. Forward
(cherenkov/attention/launch_gluon.py): 64-key tiles (TILE_N), the fused multiply-add softmax
(FMA_SOFTMAX), a third ring stage (STAGES), score mods reading tensors (SCORE_LOADS: ALiBi;
and ALiBi with its slopes computed from h instead of loaded), the partial tiles' loop apart
from the full ones' (SPLIT_TILES; with the dQ kernel's too, launch_gluon_bwd.SPLIT_TILES),
against the Triton forward (GLUON_FWD="off"). --backward: how the backward's dQ comes -- stored dS (launch_bwd.DS_STORE, the
default for score mods) or recomputed by the Gluon dQ kernel (launch_gluon_bwd, SCORE_LOADS
for ALiBi), with either forward -- on the score-mod cases, against Triton's kernels only.
--tile-terms: ALiBi with its key-linear term per score, taken out of the Gluon forward's
loop only, out of the forward's and the dQ's, and out of those and the dK/dV kernel's
(tile_terms.py; TILE_TERMS, BWD_TILE_TERMS, DKDV_TILE_TERMS).
B=4 H=16 S=4096 D=128 bf16, forward and forward+backward (do_bench median, best of 2
interleaved rounds), each variant's output and (--backward) dQ against the first variant's.

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_gluon_variants_gpu.py OUT_DIR [--backward|--tile-terms]

Writes OUT_DIR/attention_gluon_variants.md and .json (--backward: attention_gluon_bwd_variants,
--tile-terms: attention_tile_terms).
"""
from __future__ import annotations

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import launch, launch_bwd, launch_gluon, launch_gluon_bwd  # noqa: E402
from cherenkov.bench.report import md_table, save_pair, script_meta  # noqa: E402
from cherenkov.bench.suites.attention import bench_ms, qkv, unmasked_pairs  # noqa: E402

B, H, S, D = 4, 16, 4096, 128
VARIANTS = {      # launch_gluon settings per variant (the rest as the modules have them)
    "triton": dict(GLUON_FWD="off"),
    "gluon": dict(),
    "fma": dict(FMA_SOFTMAX=True),
    # measured at 2a5fb37 (a third stage: 2-7% slower, 64-key tiles 5-6%: not taken) and
    # left out since: "stages3": dict(STAGES=3), "keys64": dict(TILE_N=64, STAGES=3)
    # the partial tiles' loop apart from the full ones': forward only, then both kernels
    "split": dict(SPLIT_TILES=True),
    "split fwd+dQ": dict(SPLIT_TILES=True, BWD_SPLIT_TILES=True),
}
_OFF = dict(GLUON_FWD="off", DQ="off")
BACKWARD_VARIANTS = {    # (launch / launch_gluon / launch_gluon_bwd settings)
    "triton only": _OFF,
    "default": dict(),
    "stored dS, gluon fwd": dict(SCORE_LOADS=True),
    "triton dQ recomputed": dict(_OFF, DS_STORE="off"),
    "gluon dQ, triton fwd": dict(DS_STORE="off", BWD_SCORE_LOADS=True, GLUON_FWD="off"),
    "gluon dQ, gluon fwd": dict(DS_STORE="off", BWD_SCORE_LOADS=True, SCORE_LOADS=True),
    # the partial tiles' loops apart (SPLIT_TILES), with stored dS or the Gluon dQ
    "stored dS, gluon fwd split": dict(SCORE_LOADS=True, SPLIT_TILES=True),
    "gluon dQ split, gluon fwd split": dict(DS_STORE="off", BWD_SCORE_LOADS=True,
                                            SCORE_LOADS=True, SPLIT_TILES=True,
                                            BWD_SPLIT_TILES=True),
}

_PER_SCORE = dict(TILE_TERMS=False, BWD_TILE_TERMS=False, DKDV_TILE_TERMS=False)
TILE_VARIANTS = {
    "per score": _PER_SCORE,
    "forward's out": dict(BWD_TILE_TERMS=False, DKDV_TILE_TERMS=False),
    "forward's and dQ's out": dict(DKDV_TILE_TERMS=False),
    "forward's, dQ's, dK/dV's out": dict(DKDV_TILE_TERMS=True),
}


def cases():
    slopes = ca.alibi_slopes(H, device="cuda")
    return {"causal": dict(mask_mod=ca.causal),
            "sliding_window1024": dict(mask_mod=ca.sliding_window(S // 4)),
            "prefix_lm1024": dict(mask_mod=ca.prefix_lm(S // 4)),
            "causal+softcap30": dict(score_mod=ca.tanh_softcap(30.0), mask_mod=ca.causal),
            "alibi": dict(score_mod=ca.alibi(slopes), mask_mod=ca.causal),
            # the same slopes (H a power of two) computed from h, not loaded: does the Gluon
            # forward lose on ALiBi for the load?
            "alibi computed slopes": dict(score_mod=_computed_alibi, mask_mod=ca.causal)}


def _computed_alibi(score, b, h, q_idx, kv_idx):
    return score + torch.exp2((h + 1).float() * (-8.0 / H)) * (kv_idx - q_idx).float()


def _where(name: str):
    """(module, attribute) of a setting: DS_STORE is launch's, DKDV_* launch_bwd's, DQ and
    BWD_* launch_gluon_bwd's (DQ, *), the rest launch_gluon's."""
    if name == "DS_STORE":
        return launch, name
    if name.startswith("DKDV_"):
        return launch_bwd, name
    if name == "DQ" or name.startswith("BWD_"):
        return launch_gluon_bwd, name.replace("BWD_", "")
    return launch_gluon, name


class settings:
    """The modules' settings for the duration of a with-block."""

    def __init__(self, **kw):
        self.kw, self.saved = kw, {}

    def __enter__(self):
        for k, v in self.kw.items():
            mod, attr = _where(k)
            self.saved[k] = getattr(mod, attr)
            setattr(mod, attr, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            mod, attr = _where(k)
            setattr(mod, attr, v)


def main() -> int:
    tiles = "--tile-terms" in sys.argv
    backward = "--backward" in sys.argv or tiles
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out_dir = args[0] if args else "bench/results"
    meta = script_meta()
    rows = []
    q, k, v = qkv(B, H, S, D)
    variants = TILE_VARIANTS if tiles else BACKWARD_VARIANTS if backward else VARIANTS
    todo = cases()
    if backward:
        todo = {c: todo[c] for c in (("alibi",) if tiles else
                                     ("alibi", "causal+softcap30", "causal"))}
    for case, kw in todo.items():
        bm = ca.block_mask(kw["mask_mod"], B, H, S, S, device="cuda")
        flops = 4 * B * H * D * unmasked_pairs(kw["mask_mod"], S)
        run = lambda: ca.attention(q, k, v, block_mask=bm, **kw)  # noqa: E731
        do = torch.randn_like(q)
        first = next(iter(variants.values()))
        with settings(**first):
            ref = run()
            ref_dq, = torch.autograd.grad(ref, q, do)
        times = {}
        for name, setting in variants.items():
            extra = {} if backward or case != "alibi" or name == "triton" \
                else dict(SCORE_LOADS=True)
            try:
                with settings(**setting, **extra):
                    out = run()
                    err = (out.float() - ref.float()).abs().max().item()
                    if backward:
                        dq, = torch.autograd.grad(out, q, do)
                        err = max(err, ((dq.float() - ref_dq.float()).abs().max()
                                        / ref_dq.float().abs().max()).item())
                    del out
                    times[name] = (setting, extra, err)
            except Exception as e:      # noqa: BLE001 -- report every variant
                traceback.print_exc()
                rows.append({"case": case, "variant": name, "error": f"{type(e).__name__}: {e}"[:300]})
        best = {n: [float("inf"), float("inf")] for n in times}
        for _ in range(2):              # interleaved rounds, best kept
            for name, (setting, extra, _) in times.items():
                with settings(**setting, **extra):
                    with torch.no_grad():
                        fwd = bench_ms(run)
                    both = bench_ms(lambda: run().backward(do), grad_to_none=[q, k, v])
                best[name] = [min(best[name][0], fwd), min(best[name][1], both)]
        base = best.get(next(iter(variants)), [float("nan")] * 2)
        for name, (fwd, both) in best.items():
            rows.append({"case": case, "variant": name, "fwd_ms": round(fwd, 4),
                         "fwd_bwd_ms": round(both, 4), "fwd_tflops": round(flops / fwd * 1e-9, 1),
                         "fwd_vs_first": round(base[0] / fwd, 3),
                         "fwd_bwd_vs_first": round(base[1] / both, 3),
                         "max_diff_vs_first": times[name][2]})
            print(rows[-1], flush=True)
    head = ["case", "variant", "fwd_ms", "fwd_bwd_ms", "fwd_tflops", "fwd_vs_first",
            "fwd_bwd_vs_first", "max_diff_vs_first", "error"]
    what = "ALiBi tile terms'" if tiles else "backward's dQ" if backward else "forward's"
    text = "\n".join([
        f"# The Gluon {what} variants on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. B={B} H={H} S={S} D={D} bf16; do_bench median, best of 2 "
        "interleaved rounds; fwd+bwd through autograd (grads set to None between calls); "
        "max_diff_vs_first: the output's largest absolute difference from the first variant's "
        "(--backward: or dQ's, relative to its largest), whichever is larger.", "",
        *md_table(head, [[r.get(h, "") for h in head] for r in rows]), ""])
    name = "attention_tile_terms" if tiles else \
        "attention_gluon_bwd_variants" if backward else "attention_gluon_variants"
    save_pair(out_dir, name, text, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

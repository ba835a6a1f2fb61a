"""Suite `train`'s results as text: per config the metrics of every backend (`row`), the
issue's targets met or not (`summary`), and the markdown and JSON `cherenkov bench train`
writes (see train.py for how the steps are run and timed)."""
from __future__ import annotations

import json

from cherenkov.bench.report import _f
from cherenkov.bench.suites.train import (REFERENCE, BackendResult, Settings, TrainCase,
                                          step_flops)
from cherenkov.models import matmul_param_count, param_count


def max_relative_difference(losses: list[float], reference: list[float]) -> float:
    """max over steps of |loss - reference| / |reference| (inf on NaN or unequal lengths)."""
    if len(losses) != len(reference) or not losses:
        return float("inf")
    diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference)]
    return float("inf") if any(d != d for d in diffs) else max(diffs)     # NaN -> inf


def row(case: TrainCase, results: list[BackendResult], settings: Settings, spec) -> dict:
    """Metrics of one config as plain JSON-able values."""
    flops = step_flops(case.model, case.batch, case.seq)
    rate = spec.achievable_flops(settings.dtype, True)
    peak = spec.flops(settings.dtype, True)
    by_name = {r.name: r for r in results}
    ref = by_name.get(REFERENCE)
    out = {"case": case.name, "shape": case.shape, "tokens_per_step": case.tokens,
           "params": param_count(case.model), "matmul_params": matmul_param_count(case.model),
           "flops_per_step": flops, "target_speedup_vs_torch.compile": case.target_speedup,
           "backends": {}}
    for r in results:
        t = r.step_s
        d = {"error": r.error, "skipped": r.skipped, "first_step_s": r.first_step_s,
             "step_s": t, "step_mean_s": (sum(r.step_times_s) / len(r.step_times_s)
                                          if r.step_times_s else None),
             "timed_steps": len(r.step_times_s),
             "tokens_per_s": case.tokens / t if t else None,
             "TFLOPps": flops / t / 1e12 if t else None,
             "mfu_vs_probe": flops / t / rate if t else None,
             "mfu_vs_datasheet": flops / t / peak if t else None,
             "peak_memory_bytes": r.peak_bytes,
             "peak_reserved_bytes": r.peak_reserved_bytes,
             "reserved_before_bytes": r.reserved_before_bytes,
             "weights_checksum": r.weights_checksum,
             "same_weights_as_eager": (None if ref is None or ref.weights_checksum is None
                                       or r.weights_checksum is None
                                       else r.weights_checksum == ref.weights_checksum),
             "kernels": r.kernels, "library_calls": r.library_calls, "losses": r.losses,
             "compile_seconds": r.compile_seconds, "cuda_graphs": r.cuda_graphs,
             "matmul_algos": r.matmul_algos}
        if ref is not None and ref.losses and r.losses and r.name != REFERENCE:
            diff = max_relative_difference(r.losses, ref.losses)
            d["max_rel_loss_diff_vs_eager"] = diff
            d["loss_check"] = "pass" if diff <= settings.loss_tolerance else "FAIL"
        for base in ("eager", "torch.compile"):
            b = by_name.get(base)
            d[f"speedup_vs_{base}"] = b.step_s / t if t and b and b.step_s else None
        # against torch.compile's best: its model alone, or model and optimizer step compiled
        tcs = [b for b in results if b.name.startswith("torch.compile") and b.step_s]
        if t and tcs:
            best = min(tcs, key=lambda b: b.step_s)
            d["best_torch.compile"] = best.name
            d["speedup_vs_best_torch.compile"] = best.step_s / t
        out["backends"][r.name] = d
    return out


def summary(rows: list[dict]) -> list[str]:
    """One line per (config, Cherenkov variant): the issue's targets, met or not."""
    lines = []
    for r in rows:
        tc = r["backends"].get("torch.compile", {})
        for name, d in r["backends"].items():
            if not name.startswith("cherenkov"):
                continue
            if not d.get("step_s"):
                lines.append(f"{r['case']} {name}: no timing ({d.get('error') or d.get('skipped')})")
                continue
            parts = [f"loss curve {d.get('loss_check', '-')}"]
            s = d.get("speedup_vs_best_torch.compile") or d.get("speedup_vs_torch.compile")
            if s:
                mark = "met" if s >= r["target_speedup_vs_torch.compile"] else "missed"
                parts.append(f"{s:.2f}x {d.get('best_torch.compile', 'torch.compile')} tok/s "
                             f"(target {r['target_speedup_vs_torch.compile']:.2f}x: {mark})")
            if tc.get("peak_memory_bytes") and d.get("peak_memory_bytes"):
                ratio = d["peak_memory_bytes"] / tc["peak_memory_bytes"]
                text = f"peak memory {ratio:.2f}x torch.compile's"
                if tc.get("peak_reserved_bytes") and d.get("peak_reserved_bytes"):
                    reserved = d["peak_reserved_bytes"] / tc["peak_reserved_bytes"]
                    text += f" (reserved {reserved:.2f}x"
                    if d.get("reserved_before_bytes"):
                        text += (f"; {d['reserved_before_bytes'] / 1e9:.1f} GB of it reserved "
                                 "before it started, torch.compile "
                                 f"{(tc.get('reserved_before_bytes') or 0) / 1e9:.1f}")
                    text += ")"
                    ratio = max(ratio, reserved)
                parts.append(f"{text} ({'met' if ratio <= 1 else 'missed'})")
            if tc.get("first_step_s") and d.get("first_step_s"):
                ratio = d["first_step_s"] / tc["first_step_s"]
                parts.append(f"first step {ratio:.2f}x torch.compile's (target <= 0.5x: "
                             f"{'met' if ratio <= 0.5 else 'missed'})")
            if d.get("compile_seconds") and d.get("first_step_s"):
                ours = d["compile_seconds"]
                rest = d["first_step_s"] - sum(ours.values())
                parts.append("first step by phase: " + ", ".join(
                    f"{k} {v:.1f} s" for k, v in ours.items()) +
                    f", Dynamo + AOTAutograd + the rest {rest:.1f} s")
            if d.get("cuda_graphs"):
                on = sum(1 for _, why in d["cuda_graphs"] if why.startswith("on"))
                parts.append(f"CUDA graphs on {on} of {len(d['cuda_graphs'])} plans")
            if d.get("matmul_algos"):
                taken = [(p, v, t) for p, v, t in d["matmul_algos"] if v != "torch"]
                saved = sum(t["torch"] - t[v] for _, v, t in taken)
                parts.append(f"cuBLASLt algorithms on {len(taken)} of "
                             f"{len(d['matmul_algos'])} matmul problems (medians "
                             f"in the step: {saved * 1e3:.0f} us less, one call each)")
            lines.append(f"{r['case']} {name}: " + "; ".join(parts))
    return lines


def _tflops(value) -> str:
    """FLOP/s (or FLOPs) in units of 1e12, readable at H200 and at tiny CPU sizes alike."""
    if value is None:
        return "-"
    v = value / 1e12
    return f"{v:.0f}" if v >= 10 else f"{v:.3g}"


def markdown(meta: dict, settings: dict, rows: list[dict]) -> str:
    amp = ("no autocast (float32)" if settings["dtype"] == "float32"
           else f"{settings['dtype']} autocast")
    lines = [f"# `cherenkov bench train` on {meta['device']}", "",
             f"{meta['date']} · torch {meta['torch']} · triton {meta['triton']} · "
             f"commit {meta['commit']} · scale {meta['scale']} · "
             f"run took {meta.get('wall_s', 0):.0f} s", "",
             f"AdamW (lr {settings['lr']}, betas 0.9/0.95, weight decay 0.1, fused on CUDA; "
             "for `+opt` backends multi-tensor with its step compiled by the same compiler), "
             f"{amp}, causal attention, {settings['steps']} steps from seed {settings['seed']} "
             f"on {settings['batches']} fixed Zipf-token batches, identical for every backend. "
             f"First step timed alone (includes compiling); steps 1..{settings['warmup']} "
             f"warm-up; the step time is the median of the other steps ({settings['clock']}).", "",
             "FLOPs/step = 6 x N_matmul x B x T + 6 x layers x d x T^2 x B (N_matmul: every "
             "matmul weight, LM head included, embedding lookups excluded; attention's causal "
             f"half). MFU vs the probe's {settings['dtype']} matmul rate "
             f"({_tflops(meta['achievable_flops'])} TFLOP/s) and vs the datasheet "
             f"({_tflops(meta['datasheet_flops'])} TFLOP/s). Loss check: max over steps of "
             f"|loss - eager's| / eager's <= {settings['loss_tolerance']:g}. (The baselines "
             "README counts embeddings as matmul FLOPs, so its TFLOP/s run higher: compare "
             "tok/s.)", ""]
    head = ["backend", "first step (s)", "step (ms)", "tok/s", "TFLOP/s", "MFU probe",
            "MFU datasheet", "peak mem (GB)", "reserved (GB)", "vs eager", "vs torch.compile",
            "max rel loss diff", "loss check"]
    for r in rows:
        lines += [f"## {r['case']}: {r['params'] / 1e6:.4g}M params "
                  f"({r['matmul_params'] / 1e6:.4g}M in matmuls), {r['shape']}, "
                  f"{_tflops(r['flops_per_step'])} TFLOP/step", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, d in r["backends"].items():
            if d["error"] or d["skipped"]:
                note = d["skipped"] or f"error: {d['error']}"
                lines.append(f"| {name} | {note} |" + " |" * (len(head) - 2))
                continue
            x = lambda v: _f(v, ".2f") + ("x" if v else "")   # noqa: E731
            pct = lambda v: _f(None if v is None else 100 * v, ".1f") + ("%" if v else "")  # noqa: E731
            cells = [name, _f(d["first_step_s"], ".1f"), _f(d["step_s"] and d["step_s"] * 1e3, ".1f"),
                     _f(d["tokens_per_s"], ",.0f"), _tflops(d["TFLOPps"] and d["TFLOPps"] * 1e12),
                     pct(d["mfu_vs_probe"]), pct(d["mfu_vs_datasheet"]),
                     _f(d["peak_memory_bytes"] and d["peak_memory_bytes"] / 1e9, ".1f"),
                     _f(d.get("peak_reserved_bytes") and d["peak_reserved_bytes"] / 1e9, ".1f"),
                     x(d["speedup_vs_eager"]), x(d["speedup_vs_torch.compile"]),
                     _f(d.get("max_rel_loss_diff_vs_eager"), ".2e"), d.get("loss_check", "-")]
            lines.append("| " + " | ".join(cells) + " |")
        curves = {n: d["losses"] for n, d in r["backends"].items() if d["losses"]}
        if curves:
            names = list(curves)
            n = max(len(c) for c in curves.values())
            every = max(1, n // 10)
            lines += ["", "Loss curves:", "", "| step | " + " | ".join(names) + " |",
                      "|" + "---|" * (len(names) + 1)]
            for i in sorted(set(range(0, n, every)) | {n - 1}):
                lines.append(f"| {i} | " + " | ".join(
                    _f(curves[k][i] if i < len(curves[k]) else None, ".4f") for k in names) + " |")
        lines.append("")
    lines += ["## Summary", ""] + [f"- {s}" for s in summary(rows)]
    return "\n".join(lines) + "\n"


def write(meta: dict, settings: dict, rows: list[dict], md, js) -> None:
    md.write_text(markdown(meta, settings, rows))
    js.write_text(json.dumps({"meta": meta, "settings": settings, "summary": summary(rows),
                              "rows": rows}, indent=2, default=str) + "\n")

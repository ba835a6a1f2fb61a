"""What a bench run writes: per (case, mode) GB/s, % of the copy bandwidth measured in the same
run, TFLOP/s, speedups vs eager and torch.compile, and the cost model's predicted time beside
the measured one; as a markdown table and as JSON, with date, device, versions and commit.

The prediction sums `cherenkov.cost.kernel_time` over the kernels Cherenkov generated for the
case (their bytes from the kernel IR), on the device spec `cherenkov.hw.current_device()`
gives (preset, or probe when one is cached). Library calls (matmul, ...) are not in it.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
from pathlib import Path

import torch

from cherenkov.bench.harness import CaseResult
from cherenkov.cost import CostReport, kernel_time
from cherenkov.cost.record import Cost

SUBJECT, BASELINES = "cherenkov", ("eager", "torch.compile")
TARGET_PCT = {"fwd": 90.0, "fwd+bwd": 85.0}     # issue 3: % of copy bandwidth


def commit() -> str:
    """$CHERENKOV_COMMIT when set (a copy of the tree on another machine may carry a stale
    .git), else `git rev-parse --short HEAD` of the checkout this package lives in, else
    "unknown"."""
    if os.environ.get("CHERENKOV_COMMIT"):
        return os.environ["CHERENKOV_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, timeout=10,
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def script_meta() -> dict:
    """Date, GPU, torch and triton versions and commit: the header of a bench/ script's
    results (the suites write `metadata`)."""
    import triton
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU",
            "torch": torch.__version__, "triton": triton.__version__, "commit": commit()}


def save_pair(out_dir: str, stem: str, text: str, data: dict) -> None:
    """OUT_DIR/<stem>.md (`text`, also printed) and OUT_DIR/<stem>.json (`data`)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(data, f, indent=1)
    print(text)


def md_table(header: list[str], rows) -> list[str]:
    """Markdown table lines: the header, its rule and one line per row of cells (as given)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def result_paths(meta: dict, out_dir, suite: str) -> tuple:
    """<date>_<suite>_<device>.md and .json under out_dir (meta: "date", "device_spec"),
    numbered so nothing is overwritten."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in meta["device_spec"].lower()).strip("-")
    slug = "-".join(p for p in slug.split("-") if p)
    base = stem = f"{meta['date'][:10]}_{suite}_{slug}"
    n = 1
    while (out / f"{stem}.md").exists() or (out / f"{stem}.json").exists():
        n += 1
        stem = f"{base}_{n}"
    return out / f"{stem}.md", out / f"{stem}.json"


def metadata(device: torch.device, spec, suite: str, copy_bw: float, scale: str) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        from cherenkov.config import current
        from cherenkov.hw.live import host_name
        cfg = current()
        kernels = ("Triton interpreter" if cfg.interpret or cfg.cpu_backend == "triton"
                   else "C++ kernels")
        name = f"CPU ({host_name()}), {kernels}, {torch.get_num_threads()} threads"
    return {"suite": suite, "scale": scale,
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "device": name, "device_spec": spec.name, "torch": torch.__version__,
            "triton": triton_version, "commit": commit(), "copy_bandwidth_Bps": copy_bw,
            "model_bandwidth_Bps": spec.achievable_bandwidth}


def predicted(result: CaseResult, spec) -> tuple[float | None, CostReport]:
    """Sum of roofline times over the subject's kernels (None when it generated none)."""
    report = CostReport()
    r = result.impls.get(SUBJECT)
    if r is None or not r.kernels:
        return None, report
    for name, _, nbytes in r.kernels:
        report.add(name, Cost(bytes=nbytes, time_s=kernel_time(spec, 0, nbytes)))
    if len(r.kernels) == 1 and r.time_s:
        report.measure(r.kernels[0][0], r.time_s)
    return report.total.time_s, report


def row(result: CaseResult, spec, copy_bw: float) -> dict:
    """Everything the tables show for one (case, mode), as plain JSON-able values."""
    out = {"case": result.case.name, "mode": result.mode, "shape": result.case.shape,
           "bytes": result.bytes, "flops": result.flops, "skipped": result.skipped,
           "error": result.error, "reserved_after": result.reserved_after, "impls": {}}
    for name, r in result.impls.items():
        t = r.time_s
        out["impls"][name] = {
            "time_s": t, "error": r.error, "timing": r.timing, "launched_s": r.launched_s,
            "check": None if r.check is None else {"passed": r.check.passed,
                                                   "errors": r.check.errors,
                                                   "allowed": r.check.allowed},
            "GBps": result.bytes / t / 1e9 if t else None,
            "pct_of_copy": 100 * result.bytes / t / copy_bw if t and copy_bw else None,
            "TFLOPps": result.flops / t / 1e12 if t and result.flops else None,
            "kernels": [{"name": k[0], "fused_ops": k[1], "bytes": k[2]} for k in r.kernels],
            "library_calls": r.library_calls}
    subj = result.impls.get(SUBJECT)
    out["subject_ok"] = bool(subj and subj.check and subj.check.passed and subj.time_s)
    subject = result.time(SUBJECT)
    for base in BASELINES:
        t = result.time(base)
        out[f"speedup_vs_{base}"] = t / subject if t and subject else None
    pred, _ = predicted(result, spec)
    out["predicted_s"] = pred
    out["kernel_bytes"] = sum(k[2] for k in result.impls[SUBJECT].kernels) \
        if SUBJECT in result.impls else None
    out["prediction_error"] = (pred - subject) / subject if pred and subject else None
    return out


def geomean(values) -> float | None:
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def summary(rows: list[dict]) -> dict:
    """Geomean speedups, targets met and prediction error over rows whose Cherenkov result
    passed its check; failures and errors listed."""
    failed = [f"{r['case']} [{r['mode']}] {n}" for r in rows
              for n, i in r["impls"].items() if i["check"] and not i["check"]["passed"]]
    errors = ([f"{r['case']} [{r['mode']}] {n}: {i['error']}" for r in rows
               for n, i in r["impls"].items() if i["error"]]
              + [f"{r['case']} [{r['mode']}]: {r['error']}" for r in rows if r["error"]])
    rows = [r for r in rows if r.get("subject_ok")]
    subject = [r["impls"].get(SUBJECT, {}) for r in rows]
    met = [r for r, s in zip(rows, subject)
           if s.get("pct_of_copy") and s["pct_of_copy"] >= TARGET_PCT[r["mode"]]]
    return {
        "geomean_speedup_vs_eager": geomean(r.get("speedup_vs_eager") for r in rows),
        "geomean_speedup_vs_torch.compile": geomean(r.get("speedup_vs_torch.compile")
                                                    for r in rows),
        "at_bandwidth_target": f"{len(met)}/{len(rows)}",
        "measured": len(rows),
        "worst_prediction_error": max((abs(r["prediction_error"]) for r in rows
                                       if r.get("prediction_error") is not None), default=None),
        "failed_checks": failed,
        "errors": errors,
    }


def _f(value, fmt: str, missing: str = "-") -> str:
    return missing if value is None else format(value, fmt)


def _gbps(value) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


def markdown(meta: dict, rows: list[dict], reports: list[tuple[str, CostReport]]) -> str:
    impls = list(dict.fromkeys(n for r in rows for n in r["impls"]))
    s = summary(rows)
    lines = [f"# `cherenkov bench {meta['suite']}` on {meta['device']}", "",
             f"{meta['date']} · torch {meta['torch']} · triton {meta['triton']} · "
             f"commit {meta['commit']} · scale {meta['scale']}", "",
             f"Copy bandwidth measured in this run: {meta['copy_bandwidth_Bps'] / 1e9:.0f} GB/s "
             f"(read + written); cost model ({meta['device_spec']}) assumes "
             f"{meta['model_bandwidth_Bps'] / 1e9:.0f} GB/s.", "",
             "GB/s = minimal bytes of the case (see the suite's docstring) / median time. On CUDA "
             "the time is the median CUDA-event time of replaying the calls from a CUDA graph, the "
             "same for every implementation: kernels only, not the host's work of issuing them "
             "(which bounds a forward+backward of a few hundred microseconds); the plain-call "
             "time is in the JSON (`launched_s`), and a call that cannot be captured is timed "
             "plainly (`timing`). "
             "% of copy, speedups and the prediction are Cherenkov's; a WRONG result is still timed "
             "but left out of the summary.", ""]
    head = (["case", "mode", "shape", "check"] + [f"{n} GB/s" for n in impls]
            + ["% of copy", "TFLOP/s", "vs eager", "vs torch.compile", "predicted", "measured",
               "pred. error", "kernels", "kernel bytes / minimal"])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        subj = r["impls"].get(SUBJECT, {})
        if r["skipped"] or r["error"]:
            note = r["skipped"] or f"error: {r['error']}"
            lines.append(f"| {r['case']} | {r['mode']} | {r['shape']} | {note} |"
                         + " |" * (len(head) - 4))
            continue
        checks = []
        for n, i in r["impls"].items():
            if i["error"]:
                checks.append(f"{n}: error")
            elif i["check"] and not i["check"]["passed"]:
                checks.append(f"{n}: WRONG")
        cells = [r["case"], r["mode"], r["shape"], "; ".join(checks) or "ok"]
        cells += [_gbps(r["impls"].get(n, {}).get("GBps")) for n in impls]
        kb = r.get("kernel_bytes")
        cells += [_f(subj.get("pct_of_copy"), ".0f") + ("%" if subj.get("pct_of_copy") else ""),
                  _f(subj.get("TFLOPps"), ".2f"),
                  _f(r.get("speedup_vs_eager"), ".2f") + ("x" if r.get("speedup_vs_eager") else ""),
                  _f(r.get("speedup_vs_torch.compile"), ".2f")
                  + ("x" if r.get("speedup_vs_torch.compile") else ""),
                  _us(r.get("predicted_s")), _us(subj.get("time_s")),
                  _f(r.get("prediction_error"), "+.1%"),
                  str(len(subj.get("kernels", []))) if subj else "-",
                  f"{kb / r['bytes']:.2f}" if kb else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Summary", "",
              f"- geomean speedup vs torch.compile: "
              f"{_f(s['geomean_speedup_vs_torch.compile'], '.2f')}x; vs eager: "
              f"{_f(s['geomean_speedup_vs_eager'], '.2f')}x",
              f"- at the bandwidth target (fwd >= 90%, fwd+bwd >= 85% of copy): "
              f"{s['at_bandwidth_target']}",
              f"- worst |prediction error|: {_f(s['worst_prediction_error'], '.1%')}"]
    for key, title in (("failed_checks", "failed correctness checks"), ("errors", "errors")):
        if s[key]:
            lines += [f"- {title}:"] + [f"  - {x}" for x in s[key]]
    lines += ["", "## Cost report (Cherenkov's kernels: roofline prediction per kernel)", ""]
    for label, report in reports:
        if report.lines:
            lines += [f"### {label}", "", "```", str(report), "```", ""]
    return "\n".join(lines) + "\n"


def write(results: list[CaseResult], meta: dict, spec, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write <date>_<suite>_<device>.md and .json under out_dir (never overwriting)."""
    rows = [row(r, spec, meta["copy_bandwidth_Bps"]) for r in results]
    reports = [(r.case.label(r.mode), predicted(r, spec)[1]) for r in results]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in meta["device_spec"].lower()).strip("-")
    stem = f"{meta['date'][:10]}_{meta['suite']}_{slug}"
    n, base = 1, stem
    while (out / f"{stem}.md").exists() or (out / f"{stem}.json").exists():
        n += 1
        stem = f"{base}_{n}"
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown(meta, rows, reports))
    js.write_text(json.dumps({"meta": meta, "summary": summary(rows), "rows": rows}, indent=2,
                             default=str) + "\n")
    return md, js

"""The planner at scale: llama3-8b/70b/405b on 8 to 16,384 H100s (global batch 2048 x 8192
tokens, Llama 3's pre-training batch), every choice left to the planner. One
`cherenkov plan --json` per point; writes markdown + JSON to OUT_DIR.

    .venv/bin/python bench/planner_sweep_cpu.py [OUT_DIR]
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from cherenkov.bench.report import commit as current_commit

POINTS = [(m, c) for m in ("llama3-8b", "llama3-70b", "llama3-405b")
          for c in ("1x8xH100", "8x8xH100", "64x8xH100", "256x8xH100", "2048x8xH100")]


def plan(model: str, cluster: str) -> dict:
    cmd = [sys.executable, "-m", "cherenkov.cli", "plan", "--model", model, "--cluster", cluster,
           "--global-batch", "2048", "--seq", "8192", "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    try:
        return {**json.loads(out.stdout), "plan_seconds": seconds}
    except json.JSONDecodeError:
        text = (out.stdout + out.stderr).strip().splitlines()
        return {"error": text[-1] if text else f"exit {out.returncode}", "plan_seconds": seconds}


def main(out: str) -> None:
    rows = []
    for model, cluster in POINTS:
        r = plan(model, cluster)
        r.update(model_name=model, cluster_name=cluster)
        rows.append(r)
        print(model, cluster, r.get("mfu"), r.get("error", "")[:100], flush=True)
    commit = current_commit()
    date = datetime.date.today().isoformat()
    stem = os.path.join(out, f"{date}_planner_sweep")
    json.dump({"commit": commit, "date": date, "rows": rows}, open(stem + ".json", "w"), indent=1)
    lines = [f"# Planner sweep: llama3 on H100 clusters ({date}, commit {commit})", "",
             "`cherenkov plan --model M --cluster C --global-batch 2048 --seq 8192 --json`; "
             "MFU against the datasheet bf16 peak.", "",
             "| model | GPUs | dp | tp | pp | cp | ZeRO | microbatch x count | schedule | recompute "
             "| step (s) | MFU | peak mem (GiB) | compute / exposed comm / bubble (s) | plan (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model_name']} | {r['cluster_name']} | {r['error'][:160]} "
                         + "| " * 13)
            continue
        p, b = r["plan"], r["breakdown"]
        sched = p["schedule"] + (f" (v={p['virtual_stages']})" if p.get("virtual_stages", 1) > 1
                                 else "")
        lines.append(
            f"| {r['model_name']} | {r['world_size']} | {p['dp']} | {p['tp']} | {p['pp']} | "
            f"{p['cp']} | {p['zero_stage']} | {p['microbatch_size']} x {p['num_microbatches']} | "
            f"{sched} | {p['recompute']} | {r['step_time_s']:.2f} | {r['mfu'] * 100:.1f}% | "
            f"{r['peak_memory_bytes_per_device'] / 2**30:.1f} | {b['compute']:.2f} / "
            f"{b['exposed_comm']:.2f} / {b['bubble']:.2f} | {r['plan_seconds']:.1f} |")
    text = "\n".join(lines) + "\n"
    open(stem + ".md", "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")

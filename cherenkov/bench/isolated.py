"""Run one (case, mode) of a suite in a process of its own.

Kept for suites whose variants leave the process in a state the next should not inherit
(`Settings.isolate`, `cherenkov bench --isolate`; not the default). It was added when the
memory suite ran out of GPU memory by its cross-entropy cases: forward+backward timing
captures failed ("operation failed due to a previous error during capture"; all three of the
first case's, every one in a fresh process) and a failed capture leaks its memory pool. The
cause was the inputs, not the process: a leaf that took part in a backward before capture
keeps that backward's stream, and the engine's end-of-backward wait on it crosses the capture
boundary (pytorch/pytorch#189591). The timing captures now run on fresh leaves
(`timing.graph_replay_median_s(fresh=...)`), and the whole suite runs in one process with no
CUDA memory left reserved after each variant (the JSON's `reserved_after`, 0 for every
fwd+bwd variant at 023fc48). The harness starts

    python -m cherenkov.bench.isolated <json request>

and reads back one JSON line of per-implementation results; the process's memory goes with
it. The request names the suite, scale, dtype, case and mode, the implementations and the
timing settings.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

MARK = "CHERENKOV-ISOLATED-RESULT "
TIMEOUT_S = 300


def request(suite: str, scale: str, dtype, case_name: str, mode: str, impls: list[str],
            settings) -> dict:
    return {"suite": suite, "scale": scale, "dtype": str(dtype).removeprefix("torch."),
            "case": case_name, "mode": mode, "impls": impls, "device": str(settings.device),
            "l2_bytes": settings.l2_bytes, "time_wrong": settings.time_wrong,
            "graph_replay": settings.graph_replay,
            "capture_error_mode": settings.capture_error_mode}


def run_elsewhere(req: dict) -> dict:
    """Run `req` in a fresh Python process; {impl name: ImplResult}. Raises with the child's
    last error lines if it produced no result."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-m", "cherenkov.bench.isolated", json.dumps(req)],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return decode(json.loads(line[len(MARK):]))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"isolated run exited {proc.returncode}: {tail[:300]}")


def encode(impls: dict) -> dict:
    return {name: asdict(r) for name, r in impls.items()}


def decode(data: dict) -> dict:
    from cherenkov.bench.check import CheckResult
    from cherenkov.bench.harness import ImplResult
    out = {}
    for name, d in data.items():
        check = d.pop("check")
        d["kernels"] = [tuple(k) for k in d["kernels"]]
        out[name] = ImplResult(check=None if check is None else CheckResult(**check), **d)
    return out


def main(argv: list[str]) -> int:
    import torch
    from cherenkov.bench.harness import IMPLEMENTATIONS, Settings, run_variant
    from cherenkov.bench.suites import SUITES
    req = json.loads(argv[0])
    cases = [c for c in SUITES[req["suite"]](req["scale"], getattr(torch, req["dtype"]))
             if c.name == req["case"]]
    if len(cases) != 1:
        raise SystemExit(f"no single case named {req['case']!r} in suite {req['suite']}")
    settings = Settings(device=torch.device(req["device"]), l2_bytes=req["l2_bytes"],
                        time_wrong=req["time_wrong"], modes=(req["mode"],),
                        graph_replay=req["graph_replay"],
                        capture_error_mode=req["capture_error_mode"])
    result = run_variant(cases[0], req["mode"], [IMPLEMENTATIONS[n] for n in req["impls"]],
                         settings)
    print(MARK + json.dumps(encode(result.impls)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

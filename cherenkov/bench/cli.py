"""The `cherenkov bench` subcommand: run a suite, show progress, write markdown + JSON.

    cherenkov bench memory                      # on the local GPU, full size
    cherenkov bench memory --out $OUT           # results elsewhere
    cherenkov bench memory --cpu                # on the CPU, 4096x4096 (C++ kernels vs Inductor-CPU)
    cherenkov bench memory --cpu --smoke        # tiny shapes on the CPU (harness check)
    cherenkov bench memory --smoke              # tiny shapes on the GPU
    cherenkov bench memory --cases softmax rope --modes fwd
    cherenkov bench train                       # GPT-2 and Llama training steps
    cherenkov bench attention                   # attention variants vs SDPA and flex

Without a GPU and without --cpu it says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from cherenkov.bench.case import MODES
from cherenkov.bench.suites import RUNNERS, SUITES
from cherenkov.cli import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", default="memory", choices=sorted(SUITES))
    parser.add_argument("--out", default="bench/results", help="folder for the .md and .json")
    parser.add_argument("--cpu", action="store_true",
                        help="on the CPU: memory suite at 4096x4096 (Cherenkov's C++ kernels vs "
                             "eager and torch.compile's C++ backend); with --smoke, tiny shapes "
                             "(eager vs Cherenkov: a check of the harness)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (on the GPU if any)")
    parser.add_argument("--cases", nargs="*", default=None,
                        help="only cases whose name contains one of these (case-insensitive)")
    parser.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    parser.add_argument("--impls", nargs="*", default=None,
                        help="implementations (default: eager torch.compile cherenkov; "
                             "eager cherenkov with --cpu --smoke)")
    parser.add_argument("--time-budget", type=float, default=330.0,
                        help="seconds after which no new case starts (default 330)")
    parser.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                        help="element type (default bfloat16; float32 with --cpu, where the "
                             "interpreter truncates bf16 casts)")
    parser.add_argument("--list", action="store_true", help="list the suite's cases and exit")
    parser.add_argument("--capture-mode", default="global",
                        choices=["global", "thread_local", "relaxed"],
                        help="torch.cuda.graph's capture_error_mode for the timing captures")
    parser.add_argument("--isolate", action="store_true",
                        help="run each fwd+bwd variant in a fresh process (see bench/isolated.py)")
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="train suite: steps per backend (default 50; 3 with --cpu/--smoke)")


def select(cases, patterns):
    """The cases whose name contains one of `patterns` (all without patterns)."""
    if not patterns:
        return cases
    pats = [p.lower() for p in patterns]
    return [c for c in cases if any(p in c.name.lower() for p in pats)]


def empty_selection(chosen, patterns) -> bool:
    """True, having said so, when --cases matched nothing (a typo wrote empty reports and
    exited 0)."""
    if patterns and not chosen:
        print(f"cherenkov bench: --cases {' '.join(patterns)}: no case matches (--list shows "
              "them)", file=sys.stderr)
        return True
    return False


def pick_device(args) -> torch.device | None:
    """The device a suite runs on: --cpu, else CUDA; None (after saying why) without a GPU."""
    if args.cpu:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    print("cherenkov bench: no CUDA GPU on this machine; nothing to measure. "
          "Use --cpu to measure the CPU (--cpu --smoke: a tiny-shape check of the harness).")
    return None


def run(args) -> int:
    try:                      # before any suite runs: a run's results are never lost at the end
        Path(args.out).mkdir(parents=True, exist_ok=True)
        if not os.access(args.out, os.W_OK):
            raise OSError("not writable")
    except OSError as e:
        print(f"cherenkov bench: --out {args.out!r}: {e}", file=sys.stderr)
        return 2
    if args.suite in RUNNERS:
        return RUNNERS[args.suite](args)
    from cherenkov.bench.harness import IMPLEMENTATIONS, Settings, run_suite
    from cherenkov.bench.report import metadata, write
    from cherenkov.bench.timing import copy_bandwidth
    from cherenkov import hw

    scale = "smoke" if args.smoke else ("cpu" if args.cpu else "full")
    dtype = getattr(torch, args.dtype or ("float32" if args.cpu else "bfloat16"))
    cases = select(SUITES[args.suite](scale, dtype), args.cases)
    if empty_selection(cases, args.cases):
        return 2
    if args.list:
        for c in cases:
            print(f"{c.name:28s} {c.shape:28s} modes: {', '.join(c.modes)}")
        return 0
    device = pick_device(args)
    if device is None:
        return 0
    names = args.impls or (["eager", "cherenkov"] if args.cpu and args.smoke
                           else ["eager", "torch.compile", "cherenkov"])
    unknown = [n for n in names if n not in IMPLEMENTATIONS]
    if unknown:
        print(f"cherenkov bench: unknown implementation(s) {unknown}; known: "
              f"{sorted(IMPLEMENTATIONS)}", file=sys.stderr)
        return 2
    # a CPU has no preset of its own (the generic one assumes 100 GB/s): measure it once (about
    # 3 s, cached on disk) so predictions and the compile's cost model use this machine's rates
    spec = hw.probe(device) if device.type == "cpu" and scale != "smoke" else \
        hw.current_device(device)
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                               TextColumn, TimeElapsedColumn)
    console = Console(stderr=True)
    console.print(f"[bold]cherenkov bench {args.suite}[/] on {spec.name} ({device}), "
                  f"{len(cases)} cases, modes {', '.join(args.modes)}, scale {scale}")
    copy_bw = copy_bandwidth(device, {"full": 1 << 30, "cpu": 1 << 28}.get(scale, 1 << 24))
    console.print(f"copy bandwidth: {copy_bw / 1e9:.0f} GB/s")
    # --isolate: each fwd+bwd variant in a fresh process (bench/isolated.py). Off by default:
    # one process holds the whole suite since the timing captures run on fresh leaves
    isolate = ("fwd+bwd",) if args.isolate else ()
    settings = Settings(device=device, l2_bytes=spec.l2_bytes, time_budget_s=args.time_budget,
                        modes=tuple(args.modes), isolate=isolate,
                        capture_error_mode=args.capture_mode,
                        suite=(args.suite, scale, dtype))
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        results = run_suite(cases, [IMPLEMENTATIONS[n] for n in names], settings, progress)
    meta = metadata(device, spec, args.suite, copy_bw, scale)
    md, js = write(results, meta, spec, args.out)
    print(md.read_text())
    console.print(f"wrote {md} and {js}")
    return 0

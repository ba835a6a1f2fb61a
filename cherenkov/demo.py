"""`cherenkov demo`: train a small built-in GPT with Cherenkov, check it against eager, report.

Forward, backward and the AdamW step are compiled by Cherenkov on the local device (CUDA if
present, else the CPU with the C++ backend). Losses and gradients are compared with eager from
the same weights; the table shows kernels generated, fused ops per kernel, fallbacks and step
times.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time

import torch


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cherenkov.cli import positive_int
    for name, default in (("steps", 3), ("layers", 2), ("hidden", 64), ("heads", 4), ("seq", 32),
                          ("batch", 2), ("vocab", 128)):
        p.add_argument(f"--{name}", type=positive_int, default=default)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   choices=["cpu", "cuda"])


def _time_step(model, opt, idx, tgt, device, step=None) -> tuple[float, float]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    _, loss = model(idx, tgt)
    loss.backward()
    (step or opt.step)()
    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return loss.item(), time.perf_counter() - start


def run(args) -> int:
    import cherenkov
    from rich.console import Console
    from rich.table import Table

    from cherenkov.backend import COMPILED
    from cherenkov.models import GPT, ModelConfig

    console = Console()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cherenkov demo: --device cuda, but this torch sees no CUDA GPU", file=sys.stderr)
        return 2
    if args.hidden % args.heads:
        print(f"cherenkov demo: --hidden {args.hidden} is not divisible by --heads {args.heads}",
              file=sys.stderr)
        return 2
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = ModelConfig("gpt", layers=args.layers, hidden=args.hidden, heads=args.heads,
                      vocab=args.vocab, seq=args.seq, name="demo")
    eager = GPT(cfg).to(device)
    ours = copy.deepcopy(eager)
    compiled = cherenkov.compile(ours, strict=True)
    idx = torch.randint(0, cfg.vocab, (args.batch, cfg.seq), device=device)
    tgt = torch.randint(0, cfg.vocab, (args.batch, cfg.seq), device=device)

    # 1. correctness: one forward+backward from the same weights
    _, loss_ref = eager(idx, tgt)
    loss_ref.backward()
    with console.status("compiling forward and backward with Cherenkov..."):
        _, loss_ours = compiled(idx, tgt)
        loss_ours.backward()
    worst = 0.0
    for (name, p), q in zip(eager.named_parameters(), ours.parameters()):
        err = ((p.grad - q.grad).norm() / (p.grad.norm() + 1e-12)).item()
        worst = max(worst, err)
    ok = abs(loss_ref.item() - loss_ours.item()) < 1e-4 * max(1.0, abs(loss_ref.item())) \
        and worst < 1e-3
    console.print(f"loss eager {loss_ref.item():.6f}  cherenkov {loss_ours.item():.6f}  "
                  f"worst relative grad error {worst:.2e}  -> {'OK' if ok else 'MISMATCH'}")

    # 2. train a few steps with both, same data
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_c = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    # the optimizer step compiled too: its per-parameter updates become kernels that write
    # the parameters and Adam's moments in place
    step_c = cherenkov.compile(opt_c.step, strict=True)
    opt_e.zero_grad(set_to_none=True)
    opt_c.zero_grad(set_to_none=True)
    times = {"eager": [], "cherenkov": []}
    losses = {"eager": [], "cherenkov": []}
    for _ in range(args.steps):
        for name, model, opt, step in (("eager", eager, opt_e, None),
                                       ("cherenkov", compiled, opt_c, step_c)):
            loss, dt = _time_step(model, opt, idx, tgt, device, step)
            losses[name].append(loss)
            times[name].append(dt)
    if device.type == "cuda":
        tc = torch.compile(copy.deepcopy(eager))
        opt_t = torch.optim.AdamW(tc.parameters(), lr=1e-3)
        times["torch.compile"] = [_time_step(tc, opt_t, idx, tgt, device)[1]
                                  for _ in range(args.steps + 1)][1:]

    table = Table(title=f"Cherenkov demo: GPT {cfg.layers} layers, d={cfg.hidden}, "
                        f"seq {cfg.seq}, batch {args.batch}, on {device}")
    table.add_column("graph")
    table.add_column("kernels", justify="right")
    table.add_column("fused ops per kernel")
    table.add_column("library calls")
    table.add_column("extern (fallbacks)")
    for _, info in COMPILED:
        s = info.summary()
        table.add_row(info.name, str(s["kernels"]), " ".join(map(str, s["fused_ops_per_kernel"])),
                      ", ".join(f"{k}:{v}" for k, v in s["library_calls"].items()),
                      ", ".join(sorted({e['op'] for e in s["externs"]})) or "none")
    console.print(table)
    steps = Table(title="time per training step (after the first)")
    steps.add_column("backend")
    steps.add_column("median ms", justify="right")
    steps.add_column("losses")
    for name, ts in times.items():
        ts = sorted(ts[1:] or ts)
        steps.add_row(name, f"{1e3 * ts[len(ts) // 2]:.2f}",
                      " ".join(f"{v:.4f}" for v in losses.get(name, [])))
    console.print(steps)
    if device.type == "cpu":
        from cherenkov.config import current
        backend = current().cpu_backend
        console.print("On CPU, generated kernels are " + (
            "C++ (OpenMP), built with the system compiler" if backend == "cpp" else
            "run in Triton's interpreter (correct, not fast)") + f" (cpu_backend={backend}).")
    same = all(abs(a - b) < 1e-3 * max(1.0, abs(a)) for a, b in zip(losses["eager"],
                                                                  losses["cherenkov"]))
    console.print(f"training losses agree with eager: {'yes' if same else 'NO'}")
    return 0 if ok and same else 1

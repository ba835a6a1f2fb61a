"""`cherenkov plan`: choose and simulate a parallel training plan for a model on a cluster.

    cherenkov plan --model llama3-70b --cluster 64x8xH100 --global-batch 1024 --seq 8192
    cherenkov plan --arch gpt --layers 24 --hidden 2304 --heads 24 --vocab 51200 --seq 2048 \\
                   --cluster 8xH100 --global-batch 512 --json
    cherenkov plan --module mypkg.models:build --seq 4096 --cluster 64x8xH100 --global-batch 1024

`--module pkg.mod:factory` plans any model: `factory()` returns the nn.Module (built under
`torch.device("meta")` if it is big), which is captured (`parallel/capture_model.py`).
`--tp/--pp/--dp/--cp/--microbatch/--recompute/--schedule/--zero` fix choices; with all of
them fixed the plan is only simulated. `--trace FILE` writes a Perfetto trace, `--plot FILE`
a PNG. Exit status 2 when no plan fits (the message says why and what would).
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("model")
    m.add_argument("--model", help="preset name (gpt2, llama3-70b, ...) or path to an HF config.json")
    m.add_argument("--module", metavar="PKG.MOD:FACTORY",
                   help="plan the nn.Module FACTORY() returns (captured; needs --seq)")
    m.add_argument("--arch", choices=["gpt", "llama"], help="build a model from flags")
    for name in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab"):
        m.add_argument(f"--{name}", type=int)
    p.add_argument("--cluster", default="8xH100", help='e.g. "64x8xH100", "128x8xH100-ib400", or a .toml')
    p.add_argument("--global-batch", type=int, default=None, help="sequences per step")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's)")
    f = p.add_argument_group("fixed choices")
    for name in ("tp", "pp", "dp", "cp", "microbatch", "zero"):
        f.add_argument(f"--{name}", type=int)
    f.add_argument("--recompute", choices=["none", "selective", "full"])
    f.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"])
    p.add_argument("--efficiency", type=float, default=None,
                   help="achievable fraction of peak tensor FLOP/s (sets the device's measured "
                        "rate; default: datasheet peak)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    p.add_argument("--plot", help="write a timeline/memory PNG here")


def model_from_args(args):
    from cherenkov.models import ModelConfig, from_hf_config, preset
    if args.model:
        cfg = from_hf_config(args.model) if args.model.endswith(".json") else preset(args.model)
    elif args.arch:
        missing = [n for n in ("layers", "hidden", "heads", "vocab") if getattr(args, n) is None]
        if missing:
            raise SystemExit(f"--arch needs --{', --'.join(missing)}")
        cfg = ModelConfig(args.arch, layers=args.layers, hidden=args.hidden, heads=args.heads,
                          kv_heads=args.kv_heads or 0, ffn=args.ffn or 0, vocab=args.vocab,
                          seq=args.seq or 2048, name=f"{args.arch}-{args.layers}x{args.hidden}")
    else:
        raise SystemExit("give --model NAME or --arch with --layers/--hidden/--heads/--vocab")
    if args.seq and args.seq > cfg.seq:
        cfg = cfg.replace(seq=args.seq)
    return cfg


def module_from_args(args):
    """The CapturedModel of `--module pkg.mod:factory` at `--seq`."""
    import importlib
    from cherenkov.parallel.capture_model import capture_model
    path, _, factory = args.module.partition(":")
    if not factory or not args.seq:
        raise SystemExit("--module needs the form pkg.mod:factory and --seq")
    return capture_model(getattr(importlib.import_module(path), factory)(), args.seq)


def request_from_args(args):
    from cherenkov.hw import cluster
    from cherenkov.planner.search import Request
    cfg = module_from_args(args) if args.module else model_from_args(args)
    cl = cluster(args.cluster)
    if args.efficiency is not None:
        if not 0 < args.efficiency <= 1:
            raise ValueError(f"--efficiency is a fraction of the datasheet peak in (0, 1], "
                             f"got {args.efficiency}")
        dev = cl.device
        rates = {k: v * args.efficiency for k, v in dev.peak_flops.items() if k.endswith("_tensor")}
        cl = type(cl)(dev.replace(measured_flops=rates), cl.gpus_per_node, cl.nodes, cl.intra,
                      cl.inter, cl.name)
    fixed = {k: getattr(args, k) for k in ("tp", "pp", "dp", "cp", "microbatch", "zero",
                                            "recompute", "schedule") if getattr(args, k) is not None}
    seq = cfg.seq if args.seq is None else args.seq          # 0 is an error, not "default"
    gb = max(cl.world_size, 8) if args.global_batch is None else args.global_batch
    return Request(cfg, cl, gb, seq, fixed)


def run(args) -> int:
    from cherenkov.planner.result import plan_training
    from cherenkov.planner.search import Infeasible
    try:
        req = request_from_args(args)
    except (ValueError, KeyError) as e:       # a bad flag, cluster or model: say which, no trace
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        if args.json:
            print(json.dumps({"error": "bad request", "message": str(msg)}))
        else:
            print(f"cherenkov plan: {msg}", file=sys.stderr)
        return 2
    try:
        if args.json:
            pred = plan_training(req)
        else:
            from rich.progress import Progress
            with Progress(transient=True) as bar:
                task = bar.add_task(f"planning {req.model.name} on {req.cluster}", total=None)
                pred = plan_training(req, progress=lambda i, n: bar.update(task, completed=i, total=n))
    except Infeasible as e:
        if args.json:
            print(json.dumps({"error": "infeasible", "message": str(e)}))
        else:
            print(f"infeasible: {e}", file=sys.stderr)
        return 2
    if args.trace:
        from cherenkov.planner.trace import write_trace
        write_trace(pred.timeline, args.trace)
    if args.plot:
        from cherenkov.planner.trace import write_plot
        write_plot(pred.timeline, args.plot)
    if args.json:
        print(json.dumps(pred.as_dict(), indent=2))
    else:
        print_plan(pred)
    return 0


def print_plan(pred) -> None:
    from rich.console import Console
    from rich.table import Table
    from cherenkov.planner.plan import stage_program
    d, plan = pred.as_dict(), pred.plan
    con = Console()
    gib = 2 ** 30
    con.print(f"[bold]{d['model']}[/] on [bold]{d['cluster']}[/]: global batch {d['global_batch']}"
              f" x seq {d['seq']}")
    con.print(f"mesh: {d['mesh']}")
    con.print(f"plan: {plan.choice}   layers per stage: {d['plan']['layers_per_stage']}")
    t = Table(title="one transformer layer on the tp axis")
    t.add_column("op"); t.add_column("strategy: in -> out")
    for op, s in plan.layer.placements():
        t.add_row(op, s)
    con.print(t)
    con.print(stage_program(plan, 0), markup=False, highlight=False)
    con.print(f"step time {d['step_time_s']:.3f} s   tokens/s {d['tokens_per_s']:.3g}   "
              f"TFLOP/s/device {d['tflops_per_device']:.1f}   MFU {d['mfu']:.1%}")
    m = d["memory_bytes_stage0"]
    con.print(f"peak memory/device {d['peak_memory_bytes_per_device'] / gib:.1f} GiB (stage 0: "
              f"weights {m['weights'] / gib:.1f}, grads {m['grads'] / gib:.1f}, Adam "
              f"{m['optimizer'] / gib:.1f}, activations {m['activations'] / gib:.1f}, buffers "
              f"{m['buffers'] / gib:.1f} GiB)")
    con.print("breakdown: " + ", ".join(f"{k} {v:.3f} s" for k, v in d["breakdown"].items()))
    con.print("communication per step per device: " + ", ".join(
        f"{k} {v / 1e9:.2f} GB" for k, v in d["comm_bytes_per_level"].items()))

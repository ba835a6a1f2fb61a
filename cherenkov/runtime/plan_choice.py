"""Two plans of one graph, timed on its own inputs: the faster one runs.

A choice measured piece by piece can lose in context: on the H200 each of GPT-2's matmul +
epilogue regions ran faster as one template than as cuBLAS + the epilogue kernel, and the
whole training step ran slower with them (`bench/results/2026-11-30_train_autotune_gpt2_h200_ea16948.md`).
So with `autotune` on, a graph compiled with such choices is also compiled without them, both
plans run on the graph's example inputs (the real tensors of its first call), and the faster
is kept:

    chosen, report = faster({"templates": a, "cuBLAS": b}, inputs)

Only graphs that running twice cannot change: no input mutated, no random numbers drawn (a
dropout would advance the generator and change every later mask).
"""
from __future__ import annotations

import contextlib
import logging
import time

import torch

from cherenkov.ir.graph import Graph
from cherenkov.ir.ops import GroupOp

log = logging.getLogger("cherenkov")

WARMUP, REPS = 3, 10


def wanted(config, device: torch.device) -> bool:
    """Plans are timed when templates were chosen by tuning (not forced with "on")."""
    return config.autotune and config.matmul_templates == "auto" and device.type == "cuda" \
        and not config.interpret


def measurable(graph: Graph) -> bool:
    """Whether running the graph's plan on its example inputs is free of side effects: no
    input written, no random numbers drawn (dropout, an attention's dropout_p, any op torch
    tags as seeded), no collective (every rank would have to run it as often)."""
    if graph.mutations:
        return False
    return not any(_side_effect(n) for n in graph.nodes())


def _side_effect(node) -> bool:
    if node.op in GroupOp.RANDOM or node.op in GroupOp.COLLECTIVE:
        return True
    if node.op not in GroupOp.LIBRARY:
        return False
    target, t_args, t_kwargs = node.args[0], node.args[1], node.args[2]
    name = str(getattr(target, "name", lambda: target)())
    if "c10d" in name or "distributed" in name:
        return True
    schema = getattr(target, "_schema", None)
    for i, arg in enumerate(schema.arguments if schema is not None else ()):
        if arg.name == "dropout_p":
            # attention ops carry the seeded tag whether or not they drop: dropout_p says
            value = t_kwargs.get(arg.name, t_args[i] if i < len(t_args) else 0.0)
            return not isinstance(value, (int, float)) or value > 0
    return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())


def time_plan(compiled, inputs: list, reps: int = REPS) -> float:
    """Median seconds of one call of `compiled` on `inputs` (device time on CUDA)."""
    cuda = compiled.device.type == "cuda"
    with torch.no_grad(), (torch.cuda.device(compiled.device) if cuda
                           else contextlib.nullcontext()):
        for _ in range(WARMUP):
            compiled(list(inputs))
        times = []
        for _ in range(reps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                compiled(list(inputs))
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                compiled(list(inputs))
                times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def faster(plans: dict, inputs: list, timer=None):
    """(name of the faster plan, {name: seconds}); `plans` maps names to compiled plans, the
    first being the one preferred on a tie; `timer(plan, inputs)` (default `time_plan`)."""
    timer = timer or time_plan
    seconds = {name: timer(plan, inputs) for name, plan in plans.items()}
    best = min(seconds, key=lambda name: (seconds[name], list(plans).index(name)))
    log.info("cherenkov: plans timed %s -> %s", {k: f"{v * 1e3:.3f} ms" for k, v in
                                                 seconds.items()}, best)
    return best, seconds

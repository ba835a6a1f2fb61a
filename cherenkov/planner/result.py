"""Simulate a plan and report what it predicts: step time, throughput, MFU, memory, breakdown.

`simulate_plan(plan, costs)` expands the plan into per-device programs, replays them and
returns a `Prediction`; `plan_training(request)` runs the whole pipeline (search, simulate the
best few, keep the fastest) and is what `cherenkov plan` calls.

MFU = model FLOPs per step / (step time * devices * datasheet peak bf16 tensor FLOP/s), with
model FLOPs in the PaLM convention (`cherenkov.models.counting.training_flops_per_token`,
`CapturedModel.flops_per_token` for a captured model):
recomputation does not count as useful work.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from cherenkov.parallel.capture_model import model_flops_per_token
from cherenkov.planner.costs import ClusterCosts
from cherenkov.planner.program import build_tasks, stage_memory
from cherenkov.planner.search import (SIMULATE_TOP, Infeasible, Planner, Request,
                                      explain_infeasible, smallest_cluster)
from cherenkov.planner.simulator import Timeline, simulate


@dataclass
class Prediction:
    plan: object
    timeline: Timeline
    step_time_s: float
    tokens_per_s: float
    model_flops_per_step: float
    tflops_per_device: float
    mfu: float
    peak_memory_bytes_per_device: float
    breakdown: dict
    comm_bytes_per_level: dict
    estimate_s: float | None = None

    def as_dict(self) -> dict:
        plan, c = self.plan, self.plan.choice
        mem = stage_memory(plan, 0)
        return {
            "model": plan.model.name,
            "cluster": str(plan.cluster),
            "world_size": plan.cluster.world_size,
            "global_batch": plan.global_batch,
            "seq": plan.seq,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "model_flops_per_step": self.model_flops_per_step,
            "tflops_per_device": self.tflops_per_device,
            "mfu": self.mfu,
            "peak_memory_bytes_per_device": self.peak_memory_bytes_per_device,
            "memory_bytes_stage0": mem.as_dict(),
            "breakdown": self.breakdown,
            "comm_bytes_per_level": self.comm_bytes_per_level,
            "mesh": str(plan.mesh),
            "plan": {"dp": c.dp, "tp": c.tp, "pp": c.pp, "cp": c.cp, "zero_stage": c.zero_stage,
                     "microbatch_size": c.microbatch_size, "num_microbatches": c.num_microbatches,
                     "schedule": c.schedule if c.pp > 1 else "none",
                     "virtual_stages": c.virtual, "recompute": c.recompute,
                     "layers_per_stage": [plan.stage_layers(p) for p in range(c.pp)],
                     "layer_placements": dict(plan.layer.placements())},
        }


def simulate_plan(plan, costs=None) -> Prediction:
    costs = costs or ClusterCosts(plan.cluster, head_dim=plan.model.head_dim)
    tasks, static = build_tasks(plan, costs)
    tl = simulate(tasks, static)
    step = tl.step_time
    c = plan.choice
    tokens = plan.global_batch * plan.seq
    flops = model_flops_per_token(plan.model, plan.seq) * tokens
    world = plan.cluster.world_size
    peak_flops = plan.cluster.device.flops("bf16", True)
    per_stage = [tl.breakdown(p) for p in range(c.pp)]
    breakdown = {k: sum(b[k] for b in per_stage) / len(per_stage) for k in per_stage[0]}
    volume = defaultdict(float)
    for t in tasks:
        if t.stream != "compute":
            volume[t.stream] += t.nbytes
    return Prediction(plan, tl, step, tokens / step, flops, flops / step / world / 1e12,
                      flops / (step * world * peak_flops),
                      max(tl.peak_memory(p) for p in range(c.pp)), breakdown, dict(volume))


def shortlist(ranked: list, top: int) -> list:
    """The plans worth simulating: the `top` best estimates, plus the best estimate of every
    ZeRO stage and every schedule. The closed form is least accurate where communication
    overlaps (ZeRO-3's per-microbatch gathers, pipeline schedules); a whole family it
    over-rates could otherwise push the best plan of another out of the simulated set."""
    chosen = list(ranked[:top])
    seen = {(p.choice.zero_stage, p.choice.schedule) for _, p in chosen}
    for est, plan in ranked[top:]:
        key = (plan.choice.zero_stage, plan.choice.schedule)
        if key not in seen:
            seen.add(key)
            chosen.append((est, plan))
    return chosen


def plan_training(req: Request, progress=None, top: int = SIMULATE_TOP) -> Prediction:
    """Search, simulate the `top` best estimates, return the fastest simulated plan."""
    _check_annotations(req)
    planner = Planner(req)
    ranked, rejects = planner.search(progress)
    if not ranked:
        msg = explain_infeasible(req, rejects)
        nodes = smallest_cluster(req) if rejects else None
        if nodes:
            msg += (f"\n  Smallest cluster that fits: {nodes} nodes of "
                    f"{req.cluster.gpus_per_node}x{req.cluster.device.name} "
                    f"({nodes * req.cluster.gpus_per_node} GPUs).")
        raise Infeasible(msg)
    best = None
    for est, plan in shortlist(ranked, top):
        pred = simulate_plan(plan, planner.costs)
        pred.estimate_s = est
        if pred.peak_memory_bytes_per_device > req.usable_memory:
            continue
        if best is None or pred.step_time_s < best.step_time_s:
            best = pred
    if best is None:  # every simulated peak exceeds memory: no plan is returned that does not fit
        raise Infeasible(f"the {min(top, len(ranked))} best layouts fit the memory estimate but "
                         f"their simulated peaks exceed the usable "
                         f"{req.usable_memory / 2**30:.1f} GiB per device; try more devices, "
                         "more recomputation or a smaller microbatch")
    return best


def _check_annotations(req: Request) -> None:
    from cherenkov.ir.placement import Shard
    sharded = sorted(n for n, p in req.weight_placements.items() if isinstance(p, Shard))
    if not sharded:
        return
    if req.fixed.get("tp") == 1:
        raise Infeasible(f"cherenkov.shard annotations shard {', '.join(sharded)} over the "
                         "tensor-parallel axis, but tp is fixed to 1: drop --tp 1 or the "
                         "annotations")
    if req.cluster.gpus_per_node < 2:
        raise Infeasible(f"cherenkov.shard annotations shard {', '.join(sharded)} over the "
                         "tensor-parallel axis, which lies within a node, but the cluster "
                         f"has {req.cluster.gpus_per_node} GPU per node")


def plan_model(model, cluster, global_batch: int, seq: int | None = None, progress=None,
               **fixed) -> Prediction:
    """Plan training of a model module on `cluster` (a ClusterSpec or a name such as
    "8x8xH100"), honouring its `cherenkov.shard` annotations; `fixed` takes the CLI's choices
    (tp=, pp=, dp=, cp=, microbatch=, recompute=, schedule=, zero=). A built-in GPT or Llama
    is planned from its config; any other module (on the meta device for a big one) is
    captured first (`parallel/capture_model.py`), which needs `seq`."""
    from cherenkov import hw
    from cherenkov.models.gpt import GPT
    from cherenkov.models.llama import Llama
    from cherenkov.parallel.annotate import layer_placements
    from cherenkov.parallel.capture_model import capture_model
    if isinstance(cluster, str):
        cluster = hw.cluster(cluster)
    if isinstance(model, (GPT, Llama)):
        planned, seq, captured = model.config, seq or model.config.seq, None
    elif seq is None:
        raise ValueError(f"cherenkov.plan: give seq= to plan {type(model).__name__} (only the "
                         "built-in models know their sequence length)")
    else:
        planned = captured = capture_model(model, seq)
    req = Request(planned, cluster, global_batch, seq, fixed=dict(fixed),
                  weight_placements=layer_placements(model, captured))
    return plan_training(req, progress)

"""The outer search: parallel degrees, ZeRO, microbatching, schedule and recompute.

For every combination the user did not fix, the search
  1. lays the mesh over the cluster (tp inside a node, the others across),
  2. solves the intra-layer sharding on the tp axis by MILP (cached per tp, cp, microbatch),
  3. checks each stage's memory against the device (weights, grads, Adam, activations),
  4. scores the survivors with a closed-form step-time estimate,
and then simulates the best few on the timeline (`simulator.py`), keeping the fastest
simulated plan. With every choice fixed it only simulates. If nothing fits, `Infeasible`
says what does not fit by how much and what would.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace

from cherenkov.ir.placement import Shard
from cherenkov.parallel.capture_model import model_graphs, model_param_count
from cherenkov.parallel.mesh import layout
from cherenkov.planner.costs import ClusterCosts
from cherenkov.planner.intra_layer import InfeasibleLayer, SolveOptions, solve_layer
from cherenkov.planner.memory import state_bytes_per_param
from cherenkov.planner.plan import Choice, Plan, split_layers
from cherenkov.planner.program import (OPTIMIZER_BYTES_MOVED, grad_axis, grad_axis_of, layer_times, p2p_seconds,
                                       stage_memory)
from cherenkov.planner.schedule import bubble_fraction

log = logging.getLogger("cherenkov")

MEMORY_HEADROOM = 0.90   # plan to use at most this fraction of device memory (allocator, CUDA ctx)
SIMULATE_TOP = 4
FIXED_KEYS = {"dp", "tp", "pp", "cp", "microbatch", "recompute", "schedule", "zero"}


@dataclass
class Request:
    model: object   # a ModelConfig, or a CapturedModel (parallel/capture_model.py) of any module
    cluster: object
    global_batch: int
    seq: int
    fixed: dict = field(default_factory=dict)   # any of dp tp pp cp microbatch recompute schedule zero
    # per-layer weight placements from cherenkov.shard (parallel/annotate.py layer_placements)
    weight_placements: dict = field(default_factory=dict)

    def __post_init__(self):
        """Bad requests fail here, naming the argument (a negative batch planned a negative
        MFU; zeros divided by zero deep in the search; an unknown key was ignored)."""
        unknown = set(self.fixed) - FIXED_KEYS
        if unknown:
            raise ValueError(f"unknown fixed choices {sorted(unknown)}; "
                             f"known: {sorted(FIXED_KEYS)}")
        counts = [("global_batch", self.global_batch), ("seq", self.seq)] + [
            (f"fixed {k}", self.fixed.get(k, 1)) for k in ("dp", "tp", "pp", "cp", "microbatch")]
        for name, value in counts:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    @property
    def usable_memory(self) -> float:
        return MEMORY_HEADROOM * self.cluster.device.memory_bytes


class Infeasible(Exception):
    """No plan fits; the message says what does not fit, by how much, and what would."""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_degrees(req: Request):
    """(tp, cp, pp, dp) tuples allowed by the cluster, the model and the fixed choices."""
    cfg, world, gpn = req.model, req.cluster.world_size, req.cluster.gpus_per_node
    fx = req.fixed
    tps = [fx["tp"]] if "tp" in fx else [t for t in _divisors(gpn) if cfg.heads % t == 0]
    if any(isinstance(p, Shard) for p in req.weight_placements.values()):
        tps = [t for t in tps if t > 1]       # a sharded weight needs a tensor-parallel axis
    if "cp" in fx:
        cps = [fx["cp"]]
    else:
        cps = [1] + ([2, 4, 8, 16] if req.seq >= 32768 else [])
    for tp in tps:
        for cp in cps:
            if req.seq % cp or world % (tp * cp):
                continue
            rest = world // (tp * cp)
            pps = [fx["pp"]] if "pp" in fx else [p for p in _divisors(rest) if p <= cfg.layers
                                                  and (p & (p - 1) == 0 or cfg.layers % p == 0)]
            for pp in pps:
                if rest % pp:
                    continue
                dp = rest // pp
                if "dp" in fx and fx["dp"] != dp:
                    continue
                if req.global_batch % dp or not _whole_groups(req.cluster, tp, cp, pp, dp):
                    continue
                yield tp, cp, pp, dp


def _whole_groups(cluster, tp: int, cp: int, pp: int, dp: int) -> bool:
    """Whether every group that spans nodes (a mesh axis, the gradient axis dp x cp) has the
    same number of members on each of its nodes, as the collectives' cost model needs (a dp
    group of 12 over nodes of 8 on 3 x 8 crashed the search)."""
    axes = layout(cluster, pp=pp, dp=dp, cp=cp, tp=tp).axes + (grad_axis_of(cluster, tp, cp, dp),)
    return all(not a.spans_nodes or a.size % a.per_node == 0 for a in axes)


def candidate_choices(req: Request, tp, cp, pp, dp):
    fx = req.fixed
    per_rank = req.global_batch // dp
    mbs = [fx["microbatch"]] if "microbatch" in fx else [
        b for b in (1, 2, 4, 8, 16, 32) if per_rank % b == 0]
    zeros = [fx["zero"]] if "zero" in fx else ([0, 1, 2, 3] if dp * cp > 1 else [0])
    recomputes = [fx["recompute"]] if "recompute" in fx else ["none", "selective", "full"]
    for mb in mbs:
        if per_rank % mb:
            continue
        m = per_rank // mb
        if pp == 1:
            schedules = [(fx.get("schedule", "1f1b"), 1)]
        else:
            names = [fx["schedule"]] if "schedule" in fx else ["1f1b", "interleaved", "gpipe"]
            schedules = []
            for s in names:
                if s == "interleaved":
                    if m % pp == 0 and req.model.layers >= 2 * pp:
                        schedules.append((s, 2))
                else:
                    schedules.append((s, 1))
        for sched, v in schedules:
            for z in zeros:
                for rc in recomputes:
                    yield Choice(dp, tp, pp, cp, z, mb, m, sched, v, rc)


def _ring_attention(graph, cp: int):
    """The layer graph, built for seq/cp tokens, counts (seq/cp)^2 attention pairs; with
    context parallelism each device's seq/cp queries attend to the whole sequence (the ring
    passes K and V around): seq^2/cp pairs, cp times more (MFU came out above 100%)."""
    if cp == 1:
        return graph
    return replace(graph, ops=tuple(replace(op, flops=op.flops * cp) if op.kind == "attention"
                                    else op for op in graph.ops))


class Planner:
    def __init__(self, req: Request, costs=None):
        self.req = req
        self.costs = costs or ClusterCosts(req.cluster, head_dim=req.model.head_dim)
        self._solutions: dict = {}

    def solutions(self, tp: int, cp: int, dp: int, mb: int, num_mb: int, lean: float = 0.0):
        """Embedding, layer and head solved on a tp axis for microbatch mb (cached). `lean`
        solves the layer under a tight memory budget (weights sharded wherever possible)."""
        key = (tp, cp, dp, mb, num_mb, lean)
        if key not in self._solutions:
            req = self.req
            pp = req.cluster.world_size // (tp * cp * dp)
            mesh = layout(req.cluster, pp=pp, dp=dp, cp=cp, tp=tp)
            axis = mesh.axis("tp")
            seq = req.seq // cp
            g = grad_axis_of(req.cluster, tp, cp, dp)
            per_byte = self.costs.collective("all_reduce", 1e9, g.size, g.spans_nodes, g.per_node) / 1e9
            opts = SolveOptions(microbatches=num_mb, outer_sync_s_per_byte=per_byte, lean=lean,
                                weight_placements=tuple(sorted(
                                    req.weight_placements.items(), key=lambda kv: kv[0])))
            embed_g, layer_g, head_g = model_graphs(req.model, mb, seq)
            layer_g = _ring_attention(layer_g, cp)
            try:
                layer = solve_layer(layer_g, axis, self.costs, opts)
            except InfeasibleLayer:
                return self.solutions(tp, cp, dp, mb, num_mb, lean=0.0)
            fixed = SolveOptions(microbatches=num_mb, fixed_io=layer.input_placement,
                                 outer_sync_s_per_byte=per_byte)
            embed = solve_layer(embed_g, axis, self.costs,
                                SolveOptions(microbatches=num_mb, outer_sync_s_per_byte=per_byte,
                                             fixed_output=layer.input_placement))
            head = solve_layer(head_g, axis, self.costs, fixed)
            self._solutions[key] = (embed, layer, head)
        return self._solutions[key]

    def make_plan(self, ch: Choice, lean: float = 0.0) -> Plan:
        req = self.req
        embed, layer, head = self.solutions(ch.tp, ch.cp, ch.dp, ch.microbatch_size,
                                            ch.num_microbatches, lean)
        mesh = layout(req.cluster, pp=ch.pp, dp=ch.dp, cp=ch.cp, tp=ch.tp)
        return Plan(req.model, req.cluster, req.global_batch, req.seq, ch, mesh, layer, embed,
                    head, split_layers(req.model.layers, ch.pp * ch.virtual))

    def peak_memory(self, plan: Plan) -> float:
        """The fullest stage: the first holds the embedding and the most microbatches in
        flight, the last the head, and a middle one may hold the extra layers of an uneven
        split (checking only the ends let a plan that does not fit through)."""
        return max(stage_memory(plan, p).total for p in range(plan.choice.pp))

    def estimate(self, plan: Plan) -> float:
        """Closed-form step time: pipeline of (F+B) per microbatch, bubble, exposed syncs."""
        c, costs = plan.choice, self.costs
        lt = layer_times(plan, plan.layer, costs, with_cp=True)
        et = layer_times(plan, plan.embed, costs, with_cp=False)
        ht = layer_times(plan, plan.head, costs, with_cp=False)
        nl = max(plan.stage_layers(p) for p in range(c.pp))
        f = nl * (lt.fwd + lt.fwd_comm) + max(et.fwd, ht.fwd + ht.fwd_comm)
        b = nl * (lt.bwd + lt.bwd_comm + lt.recompute) + ht.bwd + ht.bwd_comm + et.bwd
        _, p2p = p2p_seconds(plan, costs)
        per_mb = f + b + (2 * p2p if c.pp > 1 else 0.0)
        total = c.num_microbatches * per_mb * (1 + bubble_fraction(c.schedule, c.pp, c.num_microbatches, c.virtual))
        gax = grad_axis(plan)
        if gax.size > 1:
            gb = 2.0 * lt.params
            kind = "all_reduce" if c.zero_stage == 0 else "reduce_scatter"
            sync = costs.collective(kind, gb, gax.size, gax.spans_nodes, gax.per_node)
            gather = costs.collective("all_gather", gb, gax.size, gax.spans_nodes, gax.per_node)
            bl = lt.bwd + lt.bwd_comm + lt.recompute
            fl = lt.fwd + lt.fwd_comm
            if c.zero_stage >= 2:
                total += c.num_microbatches * nl * max(0.0, sync - bl)
            total += max(sync, nl * sync - nl * bl)  # last microbatch's buckets
            if c.zero_stage == 3:
                total += c.num_microbatches * nl * (max(0.0, gather - fl) + max(0.0, gather - bl))
            elif c.zero_stage >= 1:
                total += max(gather, nl * (gather - fl))
        params = nl * lt.params + max(et.params, ht.params)
        shard = gax.size if c.zero_stage >= 1 else 1
        total += costs.kernel(0.0, OPTIMIZER_BYTES_MOVED * params / shard, False)
        return total

    def search(self, progress=None):
        """All feasible plans ranked by estimate: returns (ranked [(est, plan)], rejects)."""
        req = self.req
        degrees = list(candidate_degrees(self.req))
        ranked, rejects = [], []
        for i, (tp, cp, pp, dp) in enumerate(degrees):
            try:
                self._rank(req, tp, cp, pp, dp, ranked, rejects)
            except InfeasibleLayer as e:
                # no sharding of a layer for this tp (gpt2's embedding at tp=3): a misfit like
                # any other the search skips
                log.debug("planner: tp=%d cp=%d pp=%d dp=%d skipped: %s", tp, cp, pp, dp, e)
            if progress:
                progress(i + 1, len(degrees))
        ranked.sort(key=lambda x: x[0])
        return ranked, rejects

    def _rank(self, req, tp, cp, pp, dp, ranked: list, rejects: list) -> None:
        for ch in candidate_choices(req, tp, cp, pp, dp):
            plan = self.make_plan(ch)
            if req.model.layers < ch.pp * ch.virtual:
                continue
            peak = self.peak_memory(plan)
            for lean in (1.25, 1.0):     # too big: the memory-lean sharding, then the leanest
                if peak <= req.usable_memory or ch.tp == 1:
                    break
                plan = self.make_plan(ch, lean=lean)
                peak = self.peak_memory(plan)
            if peak > req.usable_memory:
                rejects.append((peak, plan))
                continue
            ranked.append((self.estimate(plan), plan))


def min_state_bytes(model) -> float:
    """Weights + grads + Adam states of the whole model (16 bytes per parameter)."""
    return model_param_count(model) * state_bytes_per_param(0, 1)


def explain_infeasible(req: Request, rejects) -> str:
    """Why nothing fits, by how much, and the smallest cluster or the settings that would fit."""
    gib = 2 ** 30
    usable = req.usable_memory
    if not rejects:
        fixed = ", ".join(f"{k}={v}" for k, v in req.fixed.items()) or "none"
        return (f"no parallel layout of {req.cluster.world_size} GPUs matches the request "
                f"(global batch {req.global_batch}, seq {req.seq}, fixed: {fixed}): the global "
                f"batch must be divisible by dp, and tp*cp*pp*dp must equal the world size")
    best_peak, best = min(rejects, key=lambda r: r[0])
    mem = stage_memory(best, 0)
    lines = [f"{req.model.name} does not fit on {req.cluster}: the most frugal plan "
             f"({best.choice}) needs {best_peak / gib:.1f} GiB per device, "
             f"{(best_peak - usable) / gib:.1f} GiB more than the {usable / gib:.1f} GiB usable "
             f"({MEMORY_HEADROOM:.0%} of {req.cluster.device.memory_bytes / gib:.0f} GiB).",
             f"  stage 0 of that plan: weights {mem.weights / gib:.1f} GiB, grads "
             f"{mem.grads / gib:.1f} GiB, Adam states {mem.optimizer / gib:.1f} GiB, "
             f"activations {mem.activations / gib:.1f} GiB, buffers {mem.buffers / gib:.1f} GiB."]
    state = min_state_bytes(req.model)
    min_gpus = math.ceil(state / usable)
    gpn = req.cluster.gpus_per_node
    lines.append(f"  The training state alone is {state / gib:.0f} GiB (16 bytes/parameter): at "
                 f"least {min_gpus} GPUs ({math.ceil(min_gpus / gpn)} nodes of {gpn}) even with "
                 f"ZeRO-3 and full recompute.")
    if req.fixed:
        lines.append(f"  Fixed choices ({', '.join(f'{k}={v}' for k, v in req.fixed.items())}) "
                     f"limit the search; try without them.")
    return "\n".join(lines)


def smallest_cluster(req: Request, max_nodes: int = 4096) -> int | None:
    """The fewest nodes (doubling) on which some plan fits in memory, or None."""
    from dataclasses import replace as dc_replace
    nodes = max(1, req.cluster.nodes)
    while nodes <= max_nodes:
        nodes *= 2
        cl = _with_nodes(req.cluster, nodes)
        sub = Request(req.model, cl, req.global_batch, req.seq,
                      {k: v for k, v in req.fixed.items() if k in ("recompute", "schedule")})
        if req.global_batch % 1 == 0:
            try:
                ranked, _ = Planner(sub).search()
            except Exception:
                ranked = []
            if ranked:
                return nodes
    return None


def _with_nodes(cluster, nodes: int):
    import dataclasses
    inter = cluster.inter
    if inter is None:
        from cherenkov.hw import link
        inter = link("ib400")
    name = f"{nodes}x{cluster.gpus_per_node}x{cluster.device.name}-{inter.name}"
    return dataclasses.replace(cluster, nodes=nodes, inter=inter, name=name)
